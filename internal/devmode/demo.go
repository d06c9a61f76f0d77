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
	DemoJobID    = "hello"
	DemoImage    = "norsk-examples/hello:dev"
	helloPackage = "github.com/norsk-go/norsk-manager/examples/hello"
)

// ensureDemo makes sure the demo job exists and runs on node, and returns a
// line saying where it answers. A store that already holds jobs is left as
// it is (the user's own work).
func ensureDemo(ctx context.Context, api managerv1connect.ManagerClient, dir, rt, node string, log *slog.Logger) (string, error) {
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
	var job *managerv1.Job
	switch rt {
	case "docker":
		if err := ensureImage(ctx, log); err != nil {
			return "", err
		}
		if job, err = jobs.Load("hello"); err != nil {
			return "", err
		}
	default:
		bin, err := ensureBinary(ctx, dir)
		if err != nil {
			return "", err
		}
		if job, err = jobs.Load("hello-process"); err != nil {
			return "", err
		}
		for _, s := range job.GetServices() {
			s.Command = []string{bin}
			s.WorkingDir = ""
		}
	}
	job.JobId = DemoJobID
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
	return strings.Join(parts, "\n  ")
}

// ensureImage builds the demo image from this module's source if the engine
// does not have it. Nothing is pulled.
func ensureImage(ctx context.Context, log *slog.Logger) error {
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return err
	}
	defer cli.Close()
	if _, err := cli.ImageInspect(ctx, DemoImage); err == nil {
		return nil
	}
	if !goTool() {
		return fmt.Errorf("image %s is not present and the go command is not here to build it; see examples/README.md", DemoImage)
	}
	log.Info("dev: building the demo image (FROM scratch, nothing pulled)", "image", DemoImage)
	if err := imagebuild.Build(ctx, cli, DemoImage, helloPackage); err != nil {
		return fmt.Errorf("build %s (run dev from the source tree, or `make images`): %w", DemoImage, err)
	}
	return nil
}

// ensureBinary builds the hello program for the process runtime.
func ensureBinary(ctx context.Context, dir string) (string, error) {
	bin := filepath.Join(dir, "bin", "hello")
	if fi, err := os.Stat(bin); err == nil && fi.Mode()&0o111 != 0 {
		return bin, nil
	}
	if !goTool() {
		return "", errors.New("the go command is not here to build the hello program; see examples/README.md")
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, helloPackage)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s (run dev from the source tree): %v: %s", helloPackage, err, strings.TrimSpace(string(out)))
	}
	return bin, nil
}

func banner(w io.Writer, url, dir, rt string, workers []string, demo string, ephemeral bool) {
	persist := "kept across restarts"
	if ephemeral {
		persist = "ephemeral: removed on exit"
	}
	fmt.Fprintf(w, `
Norsk Manager dev system is up.

  API        %s   (gRPC and Connect JSON; /healthz, /metrics)
  data       %s   (%s)
  workers    %s   (runtime: %s)
`, url, dir, persist, strings.Join(workers, ", "), rt)
	if demo != "" {
		fmt.Fprintf(w, "  demo job   %s\n", demo)
	}
	fmt.Fprintf(w, `
Try, in another terminal:
  export NORSK_MANAGER_URL=%s
  go run ./cmd/norsk-ctl job list
  go run ./cmd/norsk-ctl job history %s
  go run ./cmd/norsk-ctl node list
  go run ./cmd/norsk-ctl job create -f examples/jobs/sample-media.yaml
  go run ./cmd/norsk-ctl job start sample-media --node %s --wait
  go run ./cmd/norsk-ctl events

Ctrl-C stops the Manager and the workers; their instances keep running and
are adopted by the next 'norsk-manager dev'.
`, url, DemoJobID, workers[0])
}
