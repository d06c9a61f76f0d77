package devmode

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1/managerv1connect"
	"github.com/norsk-go/norsk-manager/internal/auth"
	"github.com/norsk-go/norsk-manager/internal/nodes"
)

// syncBuffer is a buffer Run writes while the test reads it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// dev --workers 2 with the process runtime: two workers, each its own node
// with its own state directory, both online; the banner names both nodes.
func TestDevMultipleWorkers(t *testing.T) {
	// The example programs are "built" already (ensureExamples leaves them
	// alone), so that nothing is compiled into the source tree.
	t.Chdir(t.TempDir())
	for _, e := range examples {
		if err := os.MkdirAll("build", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join("build", e.bin), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	ctx, cancel := context.WithCancel(t.Context())
	out := &syncBuffer{}
	ready := make(chan string, 1)
	console := make(chan [2]string, 1)
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Options{
			DataDir:   dir,
			Workers:   2,
			Listen:    "127.0.0.1:0",
			Runtime:   "process",
			NoDemo:    true,
			LostGrace: 30 * time.Second,
			Logger:    logger,
			Out:       out,
			Ready:     func(url string) { ready <- url },
			// The console on a port of its own choosing.
			ConsoleListen: "127.0.0.1:0",
			ConsoleReady:  func(url, pw string) { console <- [2]string{url, pw} },
		})
	}()
	stop := func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(60 * time.Second):
			t.Error("Run did not return after its context ended")
		}
	}
	var url string
	select {
	case url = <-ready:
	case err := <-done:
		t.Fatalf("Run ended before it was ready: %v\n%s", err, out.String())
	case <-time.After(90 * time.Second):
		stop()
		t.Fatalf("dev was not ready after 90s:\n%s", out.String())
	}
	defer stop()

	// The printed console signs in the dev admin.
	cons := <-console
	if !strings.Contains(out.String(), cons[0]) || !strings.Contains(out.String(), cons[1]) {
		t.Errorf("the banner does not print the console URL and the admin's password:\n%s", out.String())
	}
	lr, err := http.Post(cons[0]+"/api/login", "application/json", strings.NewReader(`{"user":"admin","password":"`+cons[1]+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	_ = lr.Body.Close()
	if lr.StatusCode != http.StatusOK {
		t.Errorf("console sign-in of the dev admin: %s", lr.Status)
	}

	token, err := os.ReadFile(filepath.Join(dir, TokenFile))
	if err != nil {
		t.Fatal(err)
	}
	api := managerv1connect.NewManagerClient(nodes.H2CClient(), url, connect.WithGRPC(), auth.WithBearer(strings.TrimSpace(string(token))))
	resp, err := api.ListNodes(t.Context(), connect.NewRequest(&managerv1.ListNodesRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	var names, ids []string
	for _, n := range resp.Msg.GetNodes() {
		if n.GetState() != managerv1.NodeState_NODE_STATE_ONLINE {
			t.Errorf("node %s (%s) is %v", n.GetNodeId(), n.GetNodeName(), n.GetState())
		}
		names = append(names, n.GetNodeName())
		ids = append(ids, n.GetNodeId())
	}
	slices.Sort(names)
	if strings.Join(names, " ") != "dev-worker-1 dev-worker-2" {
		t.Fatalf("nodes = %v; want dev-worker-1 and dev-worker-2", names)
	}
	if ids[0] == ids[1] || resp.Msg.GetNodes()[0].GetAddress() == resp.Msg.GetNodes()[1].GetAddress() {
		t.Errorf("the workers share a node id or an address: %v", resp.Msg.GetNodes())
	}
	for _, name := range names {
		if _, err := os.Stat(filepath.Join(dir, "workers", name)); err != nil {
			t.Errorf("worker %s has no state directory: %v", name, err)
		}
	}
	banner := out.String()
	for _, want := range append([]string{"workers    2   (runtime: process)", "examples/bundles/resilient-process.yaml"}, ids...) {
		if !strings.Contains(banner, want) {
			t.Errorf("the banner lacks %q:\n%s", want, banner)
		}
	}
}

// dev --clouds local --workers 0: a bundle nothing can run makes the
// AutoManager create an EC2 node through the SDK; the instance boots the
// worker, registers and runs the job; deleting the bundle lets the reaper
// terminate it, and no instance is left running on the endpoint. An OCI
// node is created and terminated by hand.
func TestDevLocalClouds(t *testing.T) {
	t.Chdir(t.TempDir())
	for _, e := range examples {
		if err := os.MkdirAll("build", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join("build", e.bin), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	d := startElasticDev(t, Options{Clouds: CloudsLocal})
	d.wantBanner("norsk-ctl node create-aws --region eu-west-1 --type c6i.xlarge --pool burst", "Local clouds", "examples/bundles/elastic-process.yaml")
	api := d.api
	d.eventually("the instance-type cache", func() bool {
		r, err := api.DescribeInstanceType(t.Context(), connect.NewRequest(&managerv1.DescribeInstanceTypeRequest{InstanceType: "c6i.xlarge"}))
		return err == nil && r.Msg.GetInstanceType().GetVcpus() == 4
	})
	n := d.bundleOnNewNode("elastic", CloudPool, "a new EC2 node")
	if n.GetProvider() != "aws" || n.GetCloud().GetInstanceType() != "c6i.xlarge" {
		t.Fatalf("the job runs on %v; want an aws c6i.xlarge node", n)
	}
	d.deleteUntilReaped("elastic", n.GetNodeId())
	d.eventually("no instance running on the EC2 endpoint", func() bool {
		b, err := os.ReadFile(filepath.Join(d.dir, "clouds", "ec2-state.json"))
		return err == nil && strings.Contains(string(b), `"terminated"`) && !strings.Contains(string(b), `"running"`) && !strings.Contains(string(b), `"pending"`)
	})

	oci, err := api.CreateOciNode(t.Context(), connect.NewRequest(&managerv1.CreateOciNodeRequest{AvailabilityDomain: "Uocm:EU-FRANKFURT-1-AD-1", Shape: "VM.Standard2.2"}))
	if err != nil {
		t.Fatal(err)
	}
	d.eventually("the OCI node online", func() bool { return d.node(oci.Msg.GetNodeId()).GetState() == managerv1.NodeState_NODE_STATE_ONLINE })
	if _, err := api.TerminateNode(t.Context(), connect.NewRequest(&managerv1.TerminateNodeRequest{NodeId: oci.Msg.GetNodeId()})); err != nil {
		t.Fatal(err)
	}
	d.eventually("no instance running on the OCI endpoint", func() bool {
		b, err := os.ReadFile(filepath.Join(d.dir, "clouds", "oci-state.json"))
		return err == nil && strings.Contains(string(b), `"TERMINATED"`) && !strings.Contains(string(b), `"RUNNING"`)
	})
}
