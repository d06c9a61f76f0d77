package devmode

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1/managerv1connect"
	"github.com/norsk-go/norsk-manager/internal/auth"
	"github.com/norsk-go/norsk-manager/internal/nodes"
	"github.com/norsk-go/norsk-manager/internal/worker"
)

// Issue 12, item 1: dev started over a data directory whose worker an
// earlier dev left running (dev was killed, its worker was not) keeps that
// worker instead of starting a second one over it: the node comes online
// with the live worker's address, and when that worker exits, dev starts
// its own in its place.
func TestDevKeepsALiveWorker(t *testing.T) {
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
	listen := freeLoopback(t)
	opts := Options{
		DataDir:   dir,
		Workers:   1,
		Listen:    listen,
		Runtime:   "process",
		NoDemo:    true,
		NoConsole: true,
		LostGrace: 30 * time.Second,
		Logger:    logger,
	}

	// A first dev makes the node and its worker's identity.
	url, stop := startDev(t, opts)
	stop()

	// The worker the "killed" dev left running.
	wdir := filepath.Join(dir, "workers", "dev-worker-1")
	left, err := worker.New(WorkerConfig(url, wdir, "", "process", logger.With("worker", "left")))
	if err != nil {
		t.Fatal(err)
	}
	lctx, lcancel := context.WithCancel(context.Background())
	ldone := make(chan error, 1)
	go func() { ldone <- left.Run(lctx) }()
	stopLeft := func() {
		lcancel()
		select {
		case err := <-ldone:
			if err != nil {
				t.Errorf("the left worker's Run: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("the left worker did not stop")
		}
	}
	select {
	case <-left.Ready():
	case err := <-ldone:
		t.Fatalf("the left worker did not start: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the left worker is not ready")
	}

	// dev again, over the same directory: it keeps the live worker.
	url, stop = startDev(t, opts)
	defer stop()
	api := devAPI(t, dir, url)
	node := waitNode(t, api, "dev-worker-1", func(n *managerv1.Node) bool {
		return n.GetState() == managerv1.NodeState_NODE_STATE_ONLINE && n.GetAddress() == left.AdvertiseAddr()
	})
	if pid, held, err := worker.LockHolder(wdir); err != nil || !held || pid != os.Getpid() {
		t.Fatalf("LockHolder = %d, %v, %v; want the left worker (this process) holding the directory", pid, held, err)
	}
	select {
	case err := <-ldone:
		t.Fatalf("the left worker stopped: %v", err)
	default:
	}

	// The left worker exits; dev starts its own over the directory.
	stopLeft()
	waitNode(t, api, "dev-worker-1", func(n *managerv1.Node) bool {
		return n.GetState() == managerv1.NodeState_NODE_STATE_ONLINE && n.GetAddress() != node.GetAddress()
	})
	if _, held, err := worker.LockHolder(wdir); err != nil || !held {
		t.Fatalf("after the left worker exited, LockHolder = held %v, %v; want dev's own worker holding it", held, err)
	}
}

// freeLoopback is a loopback address with a port free now.
func freeLoopback(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startDev runs dev with opts until stop is called, and returns its URL
// once it is ready.
func startDev(t *testing.T, opts Options) (url string, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out := &syncBuffer{}
	ready := make(chan string, 1)
	done := make(chan error, 1)
	opts.Out = out
	opts.Ready = func(url string) { ready <- url }
	go func() { done <- Run(ctx, opts) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(60 * time.Second):
			t.Error("Run did not return after its context ended")
		}
	}
	select {
	case url = <-ready:
		return url, stop
	case err := <-done:
		cancel()
		t.Fatalf("Run ended before it was ready: %v\n%s", err, out.String())
	case <-time.After(90 * time.Second):
		stop()
		t.Fatalf("dev was not ready after 90s:\n%s", out.String())
	}
	return "", nil
}

func devAPI(t *testing.T, dir, url string) managerv1connect.ManagerClient {
	t.Helper()
	token, err := os.ReadFile(filepath.Join(dir, TokenFile))
	if err != nil {
		t.Fatal(err)
	}
	return managerv1connect.NewManagerClient(nodes.H2CClient(), url, connect.WithGRPC(), auth.WithBearer(strings.TrimSpace(string(token))))
}

// waitNode waits until the node named name satisfies ok, and returns it.
func waitNode(t *testing.T, api managerv1connect.ManagerClient, name string, ok func(*managerv1.Node) bool) *managerv1.Node {
	t.Helper()
	var last []*managerv1.Node
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := api.ListNodes(t.Context(), connect.NewRequest(&managerv1.ListNodesRequest{}))
		if err == nil {
			last = resp.Msg.GetNodes()
			for _, n := range last {
				if n.GetNodeName() == name && ok(n) {
					return n
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("node %s not as awaited within 60s: %v", name, last)
	return nil
}
