package mockhost_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/runtime"
	"github.com/norsk-go/norsk-manager/internal/runtime/process"

	"github.com/norsk-go/norsk-manager/internal/providers/mock"
	"github.com/norsk-go/norsk-manager/internal/providers/mock/mockhost"
	"github.com/norsk-go/norsk-manager/internal/worker"
)

// A host answers only with its token, is free until booted, refuses a
// second node while it runs one, and is free again once released.
func TestHostLifecycle(t *testing.T) {
	h, err := mockhost.Start(mockhost.Config{DataDir: t.TempDir(), Token: "s3cret", VCPUs: 4,
		Logger: slog.New(slog.DiscardHandler), Worker: worker.Config{Runtime: "process"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })
	ctx := context.Background()
	cfg, _ := mock.Config{Hosts: []string{h.URL()}, Token: "s3cret"}.WithDefaults()
	p := mock.New(cfg, &http.Client{})
	wrong, _ := mock.Config{Hosts: []string{h.URL()}, Token: "nope"}.WithDefaults()
	if _, err := mock.New(wrong, &http.Client{}).Pick(ctx, nil); !errors.Is(err, mock.ErrNoFreeHost) {
		t.Fatalf("pick with a wrong token: %v, want no free host (the host refused)", err)
	}
	host, err := p.Pick(ctx, nil)
	if err != nil || host != h.URL() {
		t.Fatalf("pick = %q, %v", host, err)
	}
	if _, err := p.Pick(ctx, map[string]bool{h.URL(): true}); !errors.Is(err, mock.ErrNoFreeHost) {
		t.Errorf("pick of a taken host: %v", err)
	}
	// A Manager that is not there: the worker keeps trying to register.
	if err := p.Boot(ctx, host, "m-1", "http://127.0.0.1:1", "nrt_x", ""); err != nil {
		t.Fatal(err)
	}
	if runs, err := p.Runs(ctx, host, "m-1"); err != nil || !runs || h.NodeID() != "m-1" {
		t.Fatalf("runs = %v, %v; host runs %q", runs, err, h.NodeID())
	}
	if err := p.Boot(ctx, host, "m-2", "http://127.0.0.1:1", "nrt_y", ""); err == nil {
		t.Error("a second boot on a busy host was accepted")
	}
	if err := p.Boot(ctx, host, "m-1", "http://127.0.0.1:1", "nrt_x", ""); err != nil {
		t.Errorf("a retried boot of the same node: %v", err)
	}
	if err := p.Release(ctx, host, "other"); err != nil || h.NodeID() != "m-1" {
		t.Fatalf("release of another node: %v (host runs %q)", err, h.NodeID())
	}
	if err := p.Release(ctx, host, "m-1"); err != nil {
		t.Fatal(err)
	}
	if h.NodeID() != "" {
		t.Errorf("after release the host runs %q", h.NodeID())
	}
	if _, err := p.Pick(ctx, nil); err != nil {
		t.Errorf("the released host is not free: %v", err)
	}
}

// A host starts empty: the instances of a node an earlier run of it left
// (the host stopped or died with its worker) are removed, and the node's
// directory with them.
func TestHostStartsEmpty(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	nodeDir := filepath.Join(dir, "node-old")
	rt, err := process.New(process.Config{NodeID: "old", Dir: filepath.Join(nodeDir, "process"), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	key := runtime.Key{JobID: "left", Role: "primary"}
	job := &managerv1.Job{JobId: "left", Services: []*managerv1.Service{{Name: "main", Command: []string{"sleep", "60"}}}}
	ctx := t.Context()
	if err := rt.Prepare(ctx, runtime.InstanceSpec{Key: key, NodeID: "old", Token: 1, Job: job}); err != nil {
		t.Fatal(err)
	}
	st, err := rt.StartService(ctx, key, "main")
	if err != nil {
		t.Fatal(err)
	}
	_ = rt.Close()

	h, err := mockhost.Start(mockhost.Config{DataDir: dir, Logger: slog.New(slog.DiscardHandler), Worker: worker.Config{Runtime: "process"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })
	if _, err := os.Stat(nodeDir); !os.IsNotExist(err) {
		t.Errorf("the earlier run's node directory is still there (%v)", err)
	}
	if st.PID > 0 && syscall.Kill(st.PID, 0) == nil {
		t.Errorf("the earlier run's instance (pid %d) still runs", st.PID)
	}
}
