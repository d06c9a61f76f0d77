package devmode

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1/managerv1connect"
	"github.com/norsk-go/norsk-manager/internal/auth"
	"github.com/norsk-go/norsk-manager/internal/nodes"
)

// elasticDev is a dev system with elastic nodes only (--workers 0), run
// by startElasticDev until the test ends.
type elasticDev struct {
	t     *testing.T
	dir   string
	api   managerv1connect.ManagerClient
	out   *syncBuffer
	sleep string // the job's program
}

// startElasticDev runs dev with opts on a temporary data directory, a free
// port, the process runtime, no console and a 500 ms idle expiry, and
// waits until it is ready.
func startElasticDev(t *testing.T, opts Options) *elasticDev {
	t.Helper()
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep command to run as the job")
	}
	d := &elasticDev{t: t, dir: t.TempDir(), out: &syncBuffer{}, sleep: sleep}
	logger := slog.New(slog.DiscardHandler)
	if testing.Verbose() {
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	ctx, cancel := context.WithCancel(t.Context())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	opts.DataDir, opts.Workers, opts.Listen, opts.Runtime, opts.NoConsole = d.dir, 0, "127.0.0.1:0", "process", true
	opts.IdleExpiry, opts.Logger, opts.Out, opts.Ready = 500*time.Millisecond, logger, d.out, func(url string) { ready <- url }
	go func() { done <- Run(ctx, opts) }()
	var url string
	select {
	case url = <-ready:
	case err := <-done:
		cancel()
		t.Fatalf("Run ended before it was ready: %v\n%s", err, d.out.String())
	case <-time.After(90 * time.Second):
		cancel()
		t.Fatalf("dev was not ready after 90s:\n%s", d.out.String())
	}
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	token, err := os.ReadFile(filepath.Join(d.dir, TokenFile))
	if err != nil {
		t.Fatal(err)
	}
	d.api = managerv1connect.NewManagerClient(nodes.H2CClient(), url, connect.WithGRPC(), auth.WithBearer(strings.TrimSpace(string(token))))
	return d
}

// wantBanner checks that dev's banner says each of wants.
func (d *elasticDev) wantBanner(wants ...string) {
	d.t.Helper()
	for _, want := range wants {
		if !strings.Contains(d.out.String(), want) {
			d.t.Errorf("the banner lacks %q:\n%s", want, d.out.String())
		}
	}
}

// eventually waits up to a minute for cond.
func (d *elasticDev) eventually(what string, cond func() bool) {
	d.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			d.t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// node is the node id as ListNodes shows it (nil: none, or no answer).
func (d *elasticDev) node(id string) *managerv1.Node {
	resp, err := d.api.ListNodes(d.t.Context(), connect.NewRequest(&managerv1.ListNodesRequest{}))
	if err != nil {
		return nil
	}
	for _, n := range resp.Msg.GetNodes() {
		if n.GetNodeId() == id {
			return n
		}
	}
	return nil
}

// bundleOnNewNode creates bundle id in pool with one job that needs more
// than a local node offers (1.5 reference units), waits until it runs on
// the node the AutoManager creates for it (what names that), and returns
// the node.
func (d *elasticDev) bundleOnNewNode(id, pool, what string) *managerv1.Node {
	d.t.Helper()
	_, err := d.api.CreateBundle(d.t.Context(), connect.NewRequest(&managerv1.CreateBundleRequest{Bundle: &managerv1.Bundle{
		BundleId: id, Pool: pool, Jobs: []*managerv1.BundleJobSpec{{
			JobName: "channel", Requirements: &managerv1.JobRequirements{RequiredCapacity: 1.5},
			Job: &managerv1.Job{Services: []*managerv1.Service{{Name: "main", Command: []string{d.sleep, "600"}}}},
		}},
	}}))
	if err != nil {
		d.t.Fatal(err)
	}
	var nodeID string
	d.eventually("the bundle's job running on "+what, func() bool {
		jh, err := d.api.JobById(d.t.Context(), connect.NewRequest(&managerv1.JobByIdRequest{JobId: id + ".channel.0"}))
		if err != nil {
			return false
		}
		for _, in := range jh.Msg.GetInstances() {
			if in.GetPhase() == managerv1.InstancePhase_INSTANCE_PHASE_RUNNING {
				nodeID = in.GetNodeId()
				return true
			}
		}
		return false
	})
	return d.node(nodeID)
}

// deleteUntilReaped deletes bundle id and waits until the empty-node
// reaper has terminated nodeID.
func (d *elasticDev) deleteUntilReaped(id, nodeID string) {
	d.t.Helper()
	if _, err := d.api.DeleteBundle(d.t.Context(), connect.NewRequest(&managerv1.DeleteBundleRequest{BundleId: id})); err != nil {
		d.t.Fatal(err)
	}
	d.eventually("the reaper to terminate the node", func() bool {
		return d.node(nodeID).GetState() == managerv1.NodeState_NODE_STATE_TERMINATED
	})
}
