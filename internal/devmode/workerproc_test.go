package devmode

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A worker process that exits once dev has begun to stop is not started
// again (before, dev waited out the reboot delay to restart a worker it was
// about to stop, and an ephemeral dev took 13 s to exit); while dev runs,
// one that exits is.
func TestSuperviseRestartsOnlyWhileRunning(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		stopping    bool
		wantStarted int
	}{
		{"dev running: restarted", false, 2},
		{"dev stopping: not restarted", true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			starts := filepath.Join(dir, "starts")
			// The "worker": notes each start, then exits at once.
			exe := filepath.Join(dir, "worker.sh")
			if err := os.WriteFile(exe, []byte("#!/bin/sh\necho start >> "+starts+"\nexit 3\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			p := &workerProc{exec: exe, name: "dev-worker-1", dir: filepath.Join(dir, "w"), url: "http://127.0.0.1:1",
				runtime: "process", reboot: 10 * time.Millisecond, log: slog.New(slog.DiscardHandler)}
			if err := os.MkdirAll(p.dir, 0o700); err != nil {
				t.Fatal(err)
			}
			ctx, stop := context.WithCancel(t.Context())
			defer stop()
			running, stopping := context.WithCancel(ctx)
			defer stopping()
			if tc.stopping {
				stopping()
			}
			if err := p.begin(); err != nil {
				t.Fatal(err)
			}
			done := make(chan struct{})
			go func() { p.supervise(ctx, running); close(done) }()
			count := func() int {
				b, _ := os.ReadFile(starts)
				return strings.Count(string(b), "start")
			}
			if tc.stopping {
				// supervise returns by itself once the worker exits.
				select {
				case <-done:
				case <-time.After(30 * time.Second):
					t.Fatal("supervise did not return after the worker exited while dev stops")
				}
			} else {
				deadline := time.Now().Add(30 * time.Second)
				for count() < tc.wantStarted && time.Now().Before(deadline) {
					time.Sleep(10 * time.Millisecond)
				}
				stopping()
				stop()
				<-done
			}
			if got := count(); tc.stopping && got != tc.wantStarted || !tc.stopping && got < tc.wantStarted {
				t.Errorf("the worker was started %d times; want %d", got, tc.wantStarted)
			}
		})
	}
}
