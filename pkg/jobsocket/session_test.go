package jobsocket_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/pkg/jobsocket"
	"github.com/norsk-go/norsk-manager/pkg/jobsocket/jobsockettest"
)

const wait = 10 * time.Second

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// event is one call of the test handler.
type event struct {
	what    string
	id      string
	payload string
	ident   jobsocket.Identity
}

// handler records its calls and answers as the test set it up.
type handler struct {
	s      *jobsocket.Session
	events chan event
}

func newHandler() *handler { return &handler{events: make(chan event, 64)} }

func (h *handler) OnAttached(_ context.Context, id jobsocket.Identity) {
	h.events <- event{what: "attached", ident: id}
}

func (h *handler) OnInitialState(_ context.Context, id string, p []byte) {
	h.events <- event{what: "initial", id: id, payload: string(p)}
	if err := h.s.Ready(id, []byte("ready:"+string(p))); err != nil {
		h.events <- event{what: "ready failed: " + err.Error()}
	}
}

func (h *handler) OnGetState(_ context.Context, id string) ([]byte, string) {
	h.events <- event{what: "get", id: id}
	if id == "refuse-me" {
		return nil, "busy"
	}
	return []byte("state"), ""
}

func (h *handler) OnStopOutputAt(_ context.Context, id string, p []byte) ([]byte, error) {
	h.events <- event{what: "stop", id: id, payload: string(p)}
	if id == "fail-me" {
		return nil, errors.New("cannot stop")
	}
	return []byte("stopped-at-9"), nil
}

func (h *handler) OnApplyFrom(_ context.Context, id string, p []byte) ([]byte, error) {
	h.events <- event{what: "apply", id: id, payload: string(p)}
	return []byte(`{"applied":["x"],"failed":[],"skewMs":0}`), nil
}

func (h *handler) OnAbort(_ context.Context, id, reason string) {
	h.events <- event{what: "abort", id: id, payload: reason}
}

func (h *handler) next(t *testing.T) event {
	t.Helper()
	select {
	case e := <-h.events:
		return e
	case <-time.After(wait):
		t.Fatal("the handler was not called")
		return event{}
	}
}

// run dials w's socket and runs a session with h until the test ends.
func run(t *testing.T, path string, h *handler) {
	t.Helper()
	s, err := jobsocket.Dial(context.Background(), path, jobsocket.WithClient("test"), jobsocket.WithLogger(quiet()),
		jobsocket.WithBackoff(10*time.Millisecond, 100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	h.s = s
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, h) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		_ = s.Close()
	})
}

func next(t *testing.T, w *jobsockettest.Worker) *managerv1.JobSocketFromJob {
	t.Helper()
	m, err := w.Next(wait)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func toJob(m any) *managerv1.JobSocketToJob {
	switch m := m.(type) {
	case *managerv1.JobSocketInitialState:
		return &managerv1.JobSocketToJob{Msg: &managerv1.JobSocketToJob_InitialState{InitialState: m}}
	case *managerv1.JobSocketGetState:
		return &managerv1.JobSocketToJob{Msg: &managerv1.JobSocketToJob_GetState{GetState: m}}
	case *managerv1.JobSocketStopOutputAt:
		return &managerv1.JobSocketToJob{Msg: &managerv1.JobSocketToJob_StopOutputAt{StopOutputAt: m}}
	case *managerv1.JobSocketApplyFrom:
		return &managerv1.JobSocketToJob{Msg: &managerv1.JobSocketToJob_ApplyFrom{ApplyFrom: m}}
	case *managerv1.JobSocketAbortMigration:
		return &managerv1.JobSocketToJob{Msg: &managerv1.JobSocketToJob_Abort{Abort: m}}
	}
	panic("unknown message")
}

func TestSessionDispatchesAndReplies(t *testing.T) {
	w := jobsockettest.NewWorker(t, &managerv1.JobSocketHelloAck{JobId: "cam", Role: "primary@3f9c1e2a", RuntimeRole: "primary", NodeId: "n1", MigrationId: "m1"})
	w.SetGreeting(toJob(&managerv1.JobSocketInitialState{MigrationId: "m1", Payload: []byte("src")}))
	h := newHandler()
	run(t, w.Path, h)

	hello, err := w.AwaitAttach(wait)
	if err != nil || hello.GetProtocol() != jobsocket.Protocol || hello.GetClient() != "test" {
		t.Fatalf("hello %v, %v", hello, err)
	}
	if e := h.next(t); e.what != "attached" || e.ident != (jobsocket.Identity{Protocol: "1", JobID: "cam", Role: "primary@3f9c1e2a", RuntimeRole: "primary", NodeID: "n1", MigrationID: "m1"}) {
		t.Fatalf("event %+v", e)
	}
	if id, ok := h.s.Identity(); !ok || id.NodeID != "n1" {
		t.Fatalf("Identity %+v %v", id, ok)
	}
	if e := h.next(t); e.what != "initial" || e.id != "m1" || e.payload != "src" {
		t.Fatalf("event %+v", e)
	}
	if m := next(t, w); m.GetReady().GetMigrationId() != "m1" || string(m.GetReady().GetPayload()) != "ready:src" {
		t.Fatalf("job sent %v", m)
	}

	steps := []struct {
		send  *managerv1.JobSocketToJob
		event event
		check func(*managerv1.JobSocketFromJob) bool
	}{
		{toJob(&managerv1.JobSocketGetState{MigrationId: "m2"}), event{what: "get", id: "m2"},
			func(m *managerv1.JobSocketFromJob) bool {
				return m.GetState().GetMigrationId() == "m2" && string(m.GetState().GetPayload()) == "state" && m.GetState().GetRefused() == ""
			}},
		{toJob(&managerv1.JobSocketGetState{MigrationId: "refuse-me"}), event{what: "get", id: "refuse-me"},
			func(m *managerv1.JobSocketFromJob) bool { return m.GetState().GetRefused() == "busy" }},
		{toJob(&managerv1.JobSocketStopOutputAt{MigrationId: "m2", Payload: []byte("r")}), event{what: "stop", id: "m2", payload: "r"},
			func(m *managerv1.JobSocketFromJob) bool {
				return string(m.GetStoppedOutput().GetPayload()) == "stopped-at-9"
			}},
		{toJob(&managerv1.JobSocketStopOutputAt{MigrationId: "fail-me"}), event{what: "stop", id: "fail-me"},
			func(m *managerv1.JobSocketFromJob) bool {
				return m.GetAbort().GetMigrationId() == "fail-me" && m.GetAbort().GetReason() == "cannot stop"
			}},
		{toJob(&managerv1.JobSocketApplyFrom{MigrationId: "m1", Payload: []byte("s")}), event{what: "apply", id: "m1", payload: "s"},
			func(m *managerv1.JobSocketFromJob) bool {
				return m.GetApplied().GetMigrationId() == "m1" && strings.Contains(string(m.GetApplied().GetPayload()), `"applied":["x"]`)
			}},
	}
	for _, st := range steps {
		if err := w.Send(st.send); err != nil {
			t.Fatal(err)
		}
		if e := h.next(t); e != st.event {
			t.Fatalf("event %+v, want %+v", e, st.event)
		}
		if m := next(t, w); !st.check(m) {
			t.Fatalf("after %v the job sent %v", st.send, m)
		}
	}
	if err := w.Send(toJob(&managerv1.JobSocketAbortMigration{MigrationId: "m1", Reason: "operator"})); err != nil {
		t.Fatal(err)
	}
	if e := h.next(t); e != (event{what: "abort", id: "m1", payload: "operator"}) {
		t.Fatalf("event %+v", e)
	}
	if err := h.s.Abort("m3", "giving up"); err != nil {
		t.Fatal(err)
	}
	if m := next(t, w); m.GetAbort().GetMigrationId() != "m3" || m.GetAbort().GetReason() != "giving up" {
		t.Fatalf("job sent %v", m)
	}
}

// TestSessionReattaches: a stream that ends (EOF) and a socket that goes
// away for a while (a worker restart) are both followed by a new attach.
func TestSessionReattaches(t *testing.T) {
	w := jobsockettest.NewWorker(t, &managerv1.JobSocketHelloAck{JobId: "cam", Role: "primary"})
	h := newHandler()
	run(t, w.Path, h)
	for i := range 3 {
		if _, err := w.AwaitAttach(wait); err != nil {
			t.Fatalf("attach %d: %v", i, err)
		}
		if e := h.next(t); e.what != "attached" || e.ident.JobID != "cam" {
			t.Fatalf("event %+v", e)
		}
		switch i {
		case 0:
			w.Drop()
		case 1:
			if err := w.Restart(150 * time.Millisecond); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := h.s.Ready("m", nil); err != nil {
		t.Fatalf("Ready after the reattach: %v", err)
	}
	if m := next(t, w); m.GetReady().GetMigrationId() != "m" {
		t.Fatalf("job sent %v", m)
	}
}

func TestDialRefusesBadPaths(t *testing.T) {
	ctx := context.Background()
	if _, err := jobsocket.Dial(ctx, ""); err == nil || !strings.Contains(err.Error(), jobsocket.EnvSocket) {
		t.Errorf("empty path: %v", err)
	}
	if _, err := jobsocket.Dial(ctx, "/"+strings.Repeat("x", 120)); err == nil || !strings.Contains(err.Error(), "longer") {
		t.Errorf("long path: %v", err)
	}
	if _, err := jobsocket.Dial(ctx, filepath.Join(t.TempDir(), "none.sock")); err == nil {
		t.Error("a missing socket was dialled")
	}
}

func TestNotAttached(t *testing.T) {
	w := jobsockettest.NewWorker(t, &managerv1.JobSocketHelloAck{JobId: "cam"})
	s, err := jobsocket.Dial(context.Background(), w.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Ready("m", nil); !errors.Is(err, jobsocket.ErrNotAttached) {
		t.Fatalf("Ready before Run: %v", err)
	}
	if _, ok := s.Identity(); ok {
		t.Fatal("attached before Run")
	}
}

// TestRunStopsOnARefusal: a server that does not serve JobSocket
// (UNIMPLEMENTED) is a fatal error, not something to redial.
func TestRunStopsOnARefusal(t *testing.T) {
	dir, err := os.MkdirTemp("", "jsr")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "s.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	srv := &http.Server{Handler: http.NewServeMux(), Protocols: &p}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()

	s, err := jobsocket.Dial(context.Background(), path, jobsocket.WithLogger(quiet()))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := s.Run(ctx, jobsocket.NopHandler{}); err == nil || ctx.Err() != nil {
		t.Fatalf("Run: %v (ctx %v)", err, ctx.Err())
	}
}
