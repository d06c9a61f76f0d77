package fake_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/runtime"
	"github.com/norsk-go/norsk-manager/internal/runtime/fake"
	"github.com/norsk-go/norsk-manager/internal/runtime/runtimetest"
)

func testService(name string, args []string) *managerv1.Service {
	return &managerv1.Service{Name: name, Command: []string{"testprog"}, Args: args}
}

// TestConformance runs the suite the process and docker runtimes pass. The
// suite's state directory stands for the machine: runtimes made over one
// share a Host, as a restarted worker shares its node's processes.
func TestConformance(t *testing.T) {
	var mu sync.Mutex
	hosts := map[string]*fake.Host{}
	runtimetest.Run(t, runtimetest.Harness{
		New: func(t *testing.T, nodeID, stateDir string) runtime.Runtime {
			mu.Lock()
			defer mu.Unlock()
			h := hosts[stateDir]
			if h == nil {
				h = fake.NewHost()
				hosts[stateDir] = h
				t.Cleanup(h.Close)
			}
			return h.New(nodeID)
		},
		Service: testService,
		Unrunnable: []runtimetest.Unrunnable{
			{Name: "NothingToRun", Service: &managerv1.Service{Name: "nothing"}, Err: runtime.ErrInvalidSpec},
			{Name: "UnknownFlag", Service: &managerv1.Service{Name: "odd", Command: []string{"testprog", "-no-such-flag"}}, Err: runtime.ErrInvalidSpec},
			{Name: "BadServiceName", Service: &managerv1.Service{Name: "../escape", Command: []string{"testprog"}}, Err: runtime.ErrInvalidSpec},
		},
	})
}

// TestExitAndLogs: Exit ends a running program with the code given, as a
// crash would, and the service's log tells its start and exit.
func TestExitAndLogs(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	h := fake.NewHost()
	t.Cleanup(h.Close)
	rt := h.New("node-1")
	key := runtime.Key{JobID: "job", Role: "primary"}
	spec := runtime.InstanceSpec{Key: key, NodeID: "node-1", Token: 1, Job: &managerv1.Job{JobId: "job", Services: []*managerv1.Service{testService("svc", nil)}}}
	if err := rt.Prepare(ctx, spec); err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	if _, err := rt.StartService(ctx, key, "svc"); err != nil {
		t.Fatalf("StartService: %v", err)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	waited := make(chan int, 1)
	go func() {
		code, _ := rt.Wait(wctx, key, "svc")
		waited <- code
	}()
	if err := rt.Exit(key, "svc", 7); err != nil {
		t.Fatalf("Exit: %v", err)
	}
	if code := <-waited; code != 7 {
		t.Errorf("Wait after Exit = %d, want 7", code)
	}
	logs, err := rt.Logs(ctx, key, "svc", 0)
	if err != nil || !strings.Contains(logs, "started") || !strings.Contains(logs, "exited with code 7") {
		t.Errorf("Logs = %q, %v; want the start and the exit", logs, err)
	}
	if err := rt.Exit(key, "nope", 1); !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("Exit of an unknown service = %v, want ErrNotFound", err)
	}
}
