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
	"github.com/norsk-go/norsk-manager/internal/manager"
	"github.com/norsk-go/norsk-manager/internal/nodes"
)

// dev --ch-hosts 1 --workers 0: a bundle nothing else runs makes the
// AutoManager create a microVM node on the host agent through Cloud
// Hypervisor's REST API (the local VMM); its guest's worker registers and
// runs the job; deleting the bundle lets the reaper terminate the node,
// and its VM is deleted (its directory gone, its VMM ended).
func TestDevCHHosts(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep command to run as the job")
	}
	dir := t.TempDir()
	logger := slog.New(slog.DiscardHandler)
	if testing.Verbose() {
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	ctx, cancel := context.WithCancel(t.Context())
	out := &syncBuffer{}
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Options{DataDir: dir, Workers: 0, CHHosts: 1, Listen: "127.0.0.1:0", Runtime: "process", NoConsole: true,
			IdleExpiry: 500 * time.Millisecond, Logger: logger, Out: out, Ready: func(url string) { ready <- url }})
	}()
	var url string
	select {
	case url = <-ready:
	case err := <-done:
		t.Fatalf("Run ended before it was ready: %v\n%s", err, out.String())
	case <-time.After(90 * time.Second):
		cancel()
		t.Fatalf("dev was not ready after 90s:\n%s", out.String())
	}
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	for _, want := range []string{"Cloud Hypervisor host agents: dev-ch-1", "norsk-ctl node create-ch --host dev-ch-1", "examples/bundles/microvm-process.yaml"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the banner lacks %q:\n%s", want, out.String())
		}
	}
	token, err := os.ReadFile(filepath.Join(dir, TokenFile))
	if err != nil {
		t.Fatal(err)
	}
	api := managerv1connect.NewManagerClient(nodes.H2CClient(), url, connect.WithGRPC(), manager.WithBearer(strings.TrimSpace(string(token))))
	eventually := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	nodeOf := func(id string) *managerv1.Node {
		resp, err := api.ListNodes(t.Context(), connect.NewRequest(&managerv1.ListNodesRequest{}))
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
	eventually("the host agent's shapes", func() bool {
		r, err := api.ListInstanceTypes(t.Context(), connect.NewRequest(&managerv1.ListInstanceTypesRequest{Provider: "cloud-hypervisor"}))
		return err == nil && r.Msg.GetKnown() && len(r.Msg.GetInstanceTypes()) == len(chShapes)
	})
	_, err = api.CreateBundle(t.Context(), connect.NewRequest(&managerv1.CreateBundleRequest{Bundle: &managerv1.Bundle{
		BundleId: "microvm", Pool: CHPool, Jobs: []*managerv1.BundleJobSpec{{
			JobName: "channel", Requirements: &managerv1.JobRequirements{RequiredCapacity: 1.5},
			Job: &managerv1.Job{Services: []*managerv1.Service{{Name: "main", Command: []string{sleep, "600"}}}},
		}},
	}}))
	if err != nil {
		t.Fatal(err)
	}
	var nodeID string
	eventually("the bundle's job running on a new microVM node", func() bool {
		jh, err := api.JobById(t.Context(), connect.NewRequest(&managerv1.JobByIdRequest{JobId: "microvm.channel.0"}))
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
	n := nodeOf(nodeID)
	if n.GetProvider() != "cloud-hypervisor" || n.GetCloud().GetInstanceType() != "ch.large" || n.GetCloud().GetRegion() != "dev-ch-1" {
		t.Fatalf("the job runs on %v; want a cloud-hypervisor ch.large node on dev-ch-1", n)
	}
	vms := filepath.Join(dir, "ch", "dev-ch-1", "vms")
	if ents, err := os.ReadDir(vms); err != nil || len(ents) != 1 {
		t.Fatalf("VM directories %v, %v; want one", ents, err)
	}
	if _, err := api.DeleteBundle(t.Context(), connect.NewRequest(&managerv1.DeleteBundleRequest{BundleId: "microvm"})); err != nil {
		t.Fatal(err)
	}
	eventually("the reaper to terminate the node", func() bool { return nodeOf(nodeID).GetState() == managerv1.NodeState_NODE_STATE_TERMINATED })
	eventually("its VM deleted", func() bool {
		ents, err := os.ReadDir(vms)
		return err == nil && len(ents) == 0
	})
}
