package nodes

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1/managerv1connect"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/store/state"
)

// memStore is an in-memory Store: commands apply at consecutive indexes.
type memStore struct {
	mu  sync.Mutex
	st  *state.State
	idx uint64
	// log of applied command kinds, and the events raised (for
	// assertions).
	applied []string
	events  []*managerv1.Event
}

func newMemStore() *memStore { return &memStore{st: state.New(state.Limits{})} }

func (s *memStore) State() *state.State { return s.st }

func (s *memStore) Apply(_ context.Context, cmd *storev1.Command) (state.Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.idx++
	if cmd.GetTime() == nil {
		cmd.Time = timestamppb.Now()
	}
	res := s.st.Apply(s.idx, cmd)
	s.applied = append(s.applied, strings.TrimPrefix(strings.TrimPrefix(typeName(cmd.GetCmd()), "*storev1.Command_"), "Command_"))
	s.events = append(s.events, res.Events...)
	return res, res.Err
}

func typeName(v any) string {
	switch v.(type) {
	case *storev1.Command_InstanceReports:
		return "InstanceReports"
	case *storev1.Command_NodeOnline:
		return "NodeOnline"
	case *storev1.Command_NodeLost:
		return "NodeLost"
	case *storev1.Command_NodeTerminated:
		return "NodeTerminated"
	}
	return "other"
}

func (s *memStore) must(t testing.TB, cmd *storev1.Command) state.Result {
	t.Helper()
	res, err := s.Apply(context.Background(), cmd)
	if err != nil {
		t.Fatalf("apply %T: %v", cmd.GetCmd(), err)
	}
	return res
}

// fakeWorker is a fake worker: a NodeController server whose Control
// handler is given by the test, per connection attempt (1, 2, …).
type fakeWorker struct {
	managerv1connect.UnimplementedNodeControllerHandler
	addr     string
	attempts atomic.Int32
	control  func(ctx context.Context, attempt int, s *connect.BidiStream[managerv1.ControllerMessage, managerv1.WorkerMessage]) error
}

func (w *fakeWorker) Control(ctx context.Context, s *connect.BidiStream[managerv1.ControllerMessage, managerv1.WorkerMessage]) error {
	n := int(w.attempts.Add(1))
	return w.control(ctx, n, s)
}

func newFakeWorker(t testing.TB, control func(ctx context.Context, attempt int, s *connect.BidiStream[managerv1.ControllerMessage, managerv1.WorkerMessage]) error) *fakeWorker {
	t.Helper()
	w := &fakeWorker{control: control}
	mux := http.NewServeMux()
	mux.Handle(managerv1connect.NewNodeControllerHandler(w))
	srv := httptest.NewUnstartedServer(mux)
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	srv.Config.Protocols = &p
	srv.Start()
	t.Cleanup(srv.Close)
	w.addr = strings.TrimPrefix(srv.URL, "http://")
	return w
}

// setupNode registers node n1 whose worker is at addr, online, with job-1
// bound and running on it; it returns the fencing token.
func setupNode(t testing.TB, s *memStore, addr string) uint64 {
	t.Helper()
	s.must(t, &storev1.Command{Cmd: &storev1.Command_RegisterSlot{RegisterSlot: &storev1.RegisterSlot{NodeId: "n1", NodeName: "n1", Token: "tok-n1"}}})
	s.must(t, &storev1.Command{Cmd: &storev1.Command_MemberRegister{MemberRegister: &storev1.MemberRegister{Token: "tok-n1", NodeSecret: "sec-n1", Address: addr}}})
	s.must(t, &storev1.Command{Cmd: &storev1.Command_NodeOnline{NodeOnline: &storev1.NodeOnline{NodeId: "n1", Hello: &managerv1.WorkerHello{NodeId: "n1"}}}})
	s.must(t, &storev1.Command{Cmd: &storev1.Command_CreateJob{CreateJob: &storev1.CreateJob{Job: &managerv1.Job{
		JobId: "job-1", Services: []*managerv1.Service{{Name: "main", Image: "hello:dev"}},
	}}}})
	tok := s.must(t, &storev1.Command{Cmd: &storev1.Command_BindInstance{BindInstance: &storev1.BindInstance{JobId: "job-1", Role: "primary", NodeId: "n1"}}}).Value.(uint64)
	s.must(t, &storev1.Command{Cmd: &storev1.Command_InstanceReports{InstanceReports: &storev1.InstanceReports{NodeId: "n1", Reports: []*managerv1.InstanceReport{
		{JobId: "job-1", Role: "primary", FencingToken: tok, Phase: managerv1.InstancePhase_INSTANCE_PHASE_RUNNING},
	}}}})
	return tok
}

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// runController runs a controller over s until the test ends.
func runController(t testing.TB, cfg Config) *Controller {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = discardLogger()
	}
	c := New(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = c.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("controller did not stop")
		}
	})
	return c
}

func eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// awaitManagerHello reads the Manager's hello.
func awaitManagerHello(s *connect.BidiStream[managerv1.ControllerMessage, managerv1.WorkerMessage]) error {
	_, err := s.Receive()
	return err
}

func workerHello(inv ...*managerv1.InstanceReport) *managerv1.WorkerMessage {
	return &managerv1.WorkerMessage{Msg: &managerv1.WorkerMessage_Hello{Hello: &managerv1.WorkerHello{NodeId: "n1", Inventory: inv}}}
}

func reportMsg(r *managerv1.InstanceReport) *managerv1.WorkerMessage {
	return &managerv1.WorkerMessage{Msg: &managerv1.WorkerMessage_Report{Report: r}}
}
