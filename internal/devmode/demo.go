package devmode

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/docker/docker/client"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1/managerv1connect"
	"github.com/norsk-go/norsk-manager/examples/jobs"
	"github.com/norsk-go/norsk-manager/internal/imagebuild"
)

// Demo job facts.
const (
	DemoJobID          = "demo"
	helloImage         = "norsk-examples/hello:dev"
	sampleMediaImage   = "norsk-examples/sample-media:dev"
	helloPackage       = "github.com/norsk-go/norsk-manager/examples/hello"
	sampleMediaPackage = "github.com/norsk-go/norsk-manager/examples/sample-media"
)

// example is a program of examples/ that dev makes available to workers.
type example struct {
	image, pkg, bin string
}

var examples = []example{
	{helloImage, helloPackage, "hello"},
	{sampleMediaImage, sampleMediaPackage, "sample-media"},
}

// exampleUser is the user dev's example images run as: nobody:nogroup, as
// in examples/*/Dockerfile (the images have no /etc/passwd; numeric ids need
// none).
const exampleUser = "65534:65534"

// ensureExamples builds the example programs where the workers' runtime
// needs them: images on the Docker engine (FROM scratch; nothing pulled;
// run as exampleUser), or binaries in ./build for the process runtime (the
// *-process.yaml specs run ./build/<name>). An image is rebuilt when its
// source changed (its imagebuild.LabelSourceDigest label says from what it
// was built); binaries already there are left alone.
func ensureExamples(ctx context.Context, rt string, log *slog.Logger) error {
	if rt == "docker" {
		cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
		if err != nil {
			return err
		}
		defer cli.Close()
		for _, e := range examples {
			spec := imagebuild.Spec{Tag: e.image, Package: e.pkg, User: exampleUser}
			if !goTool() {
				if _, err := cli.ImageInspect(ctx, e.image); err == nil {
					continue // nothing to build it with: the image there is what there is
				}
				return fmt.Errorf("image %s is not present and the go command is not here to build it; see examples/README.md", e.image)
			}
			if ok, err := imagebuild.UpToDate(ctx, cli, spec); err != nil {
				return fmt.Errorf("image %s (run dev from the source tree, or build it by hand: examples/README.md): %w", e.image, err)
			} else if ok {
				continue
			}
			log.Info("dev: building an example image (FROM scratch, nothing pulled)", "image", e.image)
			if err := imagebuild.BuildSpec(ctx, cli, spec); err != nil {
				return fmt.Errorf("build %s (run dev from the source tree, or build it by hand: examples/README.md): %w", e.image, err)
			}
		}
		return nil
	}
	for _, e := range examples {
		bin := filepath.Join("build", e.bin)
		if fi, err := os.Stat(bin); err == nil && fi.Mode()&0o111 != 0 {
			continue
		}
		if !goTool() {
			return fmt.Errorf("the go command is not here to build %s; see examples/README.md", bin)
		}
		cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, e.pkg)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build %s (run dev from the source tree): %v: %s", e.pkg, err, strings.TrimSpace(string(out)))
		}
	}
	return nil
}

// exampleSpec is the file name of an example job spec for the runtime.
func exampleSpec(name, rt string) string {
	if rt == "docker" {
		return name
	}
	return name + "-process"
}

// ensureDemo makes sure the demo job exists and runs on node, and returns a
// line saying where it answers. A store that already holds jobs is left as
// it is (the user's own work).
func ensureDemo(ctx context.Context, api managerv1connect.ManagerClient, rt, node string) (string, error) {
	if jh, err := api.JobById(ctx, connect.NewRequest(&managerv1.JobByIdRequest{JobId: DemoJobID})); err == nil {
		return describe(jh.Msg), nil
	} else if connect.CodeOf(err) != connect.CodeNotFound {
		return "", err
	}
	all, err := api.JobSearch(ctx, connect.NewRequest(&managerv1.JobSearchRequest{Limit: 1}))
	if err != nil {
		return "", err
	}
	if len(all.Msg.GetJobs()) > 0 {
		return "", errors.New("the store already has jobs of yours; the demo is only made on a fresh store")
	}
	job, err := jobs.Load(exampleSpec("hello", rt))
	if err != nil {
		return "", err
	}
	job.JobId = DemoJobID
	job.Description = "The demo job norsk-manager dev started: the hello example."
	if _, err := api.CreateJob(ctx, connect.NewRequest(&managerv1.CreateJobRequest{Job: job})); err != nil {
		return "", fmt.Errorf("create the demo job: %w", err)
	}
	if _, err := api.StartJob(ctx, connect.NewRequest(&managerv1.StartJobRequest{JobId: DemoJobID, Role: "primary", NodeId: node})); err != nil {
		return "", fmt.Errorf("start the demo job: %w", err)
	}
	var jh *managerv1.JobWithHistory
	err = poll(ctx, 60*time.Second, "the demo job to run", func() (bool, error) {
		resp, err := api.JobById(ctx, connect.NewRequest(&managerv1.JobByIdRequest{JobId: DemoJobID}))
		if err != nil {
			return false, err
		}
		jh = resp.Msg
		for _, in := range jh.GetInstances() {
			switch in.GetPhase() {
			case managerv1.InstancePhase_INSTANCE_PHASE_RUNNING:
				return true, nil
			case managerv1.InstancePhase_INSTANCE_PHASE_STOPPING, managerv1.InstancePhase_INSTANCE_PHASE_STOPPED:
				return false, fmt.Errorf("the demo job stopped: %s", in.GetStopAdditionalReason())
			}
		}
		return false, nil
	})
	if err != nil {
		return "", err
	}
	return describe(jh), nil
}

// describe says where a job's services answer.
func describe(jh *managerv1.JobWithHistory) string {
	var parts []string
	for _, in := range jh.GetInstances() {
		if in.GetPhase() != managerv1.InstancePhase_INSTANCE_PHASE_RUNNING {
			continue
		}
		services := make([]string, 0, len(in.GetServicePortMappings()))
		for s := range in.GetServicePortMappings() {
			services = append(services, s)
		}
		sort.Strings(services)
		for _, s := range services {
			for _, m := range in.GetServicePortMappings()[s].GetMappings() {
				parts = append(parts, fmt.Sprintf("%s/%s on %s: http://%s", jh.GetJob().GetJobId(), in.GetRole(), in.GetNodeId(), m.GetUrl()))
			}
		}
	}
	if len(parts) == 0 {
		return fmt.Sprintf("job %s exists but is not running (norsk-ctl job history %s)", jh.GetJob().GetJobId(), jh.GetJob().GetJobId())
	}
	return strings.Join(parts, "\n             ")
}

func banner(w io.Writer, url, dir, rt string, workers, nodeIDs []string, demo string, ephemeral bool, tokenFile string) {
	persist := "kept across restarts"
	if ephemeral {
		persist = "ephemeral: removed on exit"
	}
	fmt.Fprintf(w, `
Norsk Manager dev system is up.

  API        %s   (gRPC and Connect JSON; /healthz, /metrics)
  TLS        %s
  token      %s   (the admin API token)
  data       %s   (%s)
  workers    %d   (runtime: %s)
`, url, transportNote(url), tokenFile, dir, persist, len(workers), rt)
	for i, name := range workers {
		fmt.Fprintf(w, "             %s   node %s\n", name, nodeIDs[i])
	}
	if demo != "" {
		fmt.Fprintf(w, "  demo job   %s\n", demo)
	}
	see, spec, bundle := "docker ps    # the containers", "hello", "resilient"
	if rt != "docker" {
		see, spec, bundle = "ps -ef | grep build/    # the processes", "hello-process", "resilient-process"
	}
	fmt.Fprintf(w, `
Try, in another terminal (from this directory):
  export NORSK_MANAGER_URL=%s NORSK_TOKEN=$(cat %s)
  go run ./cmd/norsk-ctl job list
`, url, tokenFile)
	if len(nodeIDs) > 0 {
		fmt.Fprintf(w, `  go run ./cmd/norsk-ctl job create -f examples/jobs/%s.yaml
  go run ./cmd/norsk-ctl job start hello --node %s --wait
  go run ./cmd/norsk-ctl job history hello
  %s
`, spec, nodeIDs[0], see)
	}
	fmt.Fprint(w, "  go run ./cmd/norsk-ctl events\n")
	if len(workers) > 1 {
		fmt.Fprintf(w, `
A primary and a backup kept on different nodes:
  go run ./cmd/norsk-ctl bundle create -f examples/bundles/%s.yaml
  go run ./cmd/norsk-ctl bundle show resilient
`, bundle)
	}
	fmt.Fprint(w, `
Ctrl-C stops the Manager and the workers; their instances keep running and
are adopted by the next 'norsk-manager dev'.
`)
}
