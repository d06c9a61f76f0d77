package api_test

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1/managerv1connect"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/automanager"
	"github.com/norsk-go/norsk-manager/internal/clock"
	"github.com/norsk-go/norsk-manager/internal/manager/api"
	"github.com/norsk-go/norsk-manager/internal/nodes"
	"github.com/norsk-go/norsk-manager/internal/providers"
	"github.com/norsk-go/norsk-manager/internal/providers/mock"
	"github.com/norsk-go/norsk-manager/internal/store"
	"github.com/norsk-go/norsk-manager/internal/store/state"
	"github.com/norsk-go/norsk-manager/pkg/placement"
)

// fakeBackend is the api.Backend of the handler tests: a standalone
// member with no node controller, providers or other members. It records
// every write a handler asks it to make, then commits it to a real
// standalone store (raft on its in-memory transport, its log in a test
// directory), so that a handler reads its own write as on a Manager.
type fakeBackend struct {
	st *store.Store

	mu     sync.Mutex
	writes []*storev1.Command
}

var _ api.Backend = (*fakeBackend)(nil)

func (b *fakeBackend) Apply(ctx context.Context, cmd *storev1.Command) (state.Result, error) {
	b.mu.Lock()
	b.writes = append(b.writes, proto.Clone(cmd).(*storev1.Command))
	b.mu.Unlock()
	return b.st.Apply(ctx, cmd)
}

func (b *fakeBackend) Store() *store.Store                                 { return b.st }
func (b *fakeBackend) Controller() *nodes.Controller                       { return nil }
func (b *fakeBackend) Fleet() *providers.Fleet                             { return nil }
func (b *fakeBackend) MockProvider() *mock.Provider                        { return nil }
func (b *fakeBackend) PlacementConfig() placement.Config                   { return placement.Config{} }
func (b *fakeBackend) ElasticTiers() []automanager.ElasticTier             { return nil }
func (b *fakeBackend) CAFingerprint() string                               { return "" }
func (b *fakeBackend) AuditVerdict() (bool, string)                        { return true, "" }
func (b *fakeBackend) MemberAPI(string) string                             { return "" }
func (b *fakeBackend) ManagerClient(string) managerv1connect.ManagerClient { return nil }

// take returns the writes asked for since the last take, and forgets them.
func (b *fakeBackend) take() []*storev1.Command {
	b.mu.Lock()
	defer b.mu.Unlock()
	w := b.writes
	b.writes = nil
	return w
}

// t0 is the handler's clock in every test: the time it stamps.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// env is a Handler over a fakeBackend, with a fake clock at t0.
type env struct {
	h *api.Handler
	b *fakeBackend
}

// newEnv opens the backend's store and builds a handler over it; config,
// if set, adjusts the handler's Config first.
func newEnv(t testing.TB, config func(*api.Config)) *env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := store.Open(ctx, store.Config{Dir: t.TempDir(), MemberID: "m1", Logger: log, SegmentSize: 1 << 20, MinFreeBytes: -1})
	if err != nil {
		t.Fatalf("open the store: %v", err)
	}
	t.Cleanup(func() { _ = st.Close() })
	clk := clock.NewFake(t0)
	cfg := api.Config{Clock: clk, Log: log, NodeName: "m1", HeartbeatInterval: time.Second, DefaultIdleExpiry: time.Minute,
		Migrator: &api.MigratorRef{}} // no AutoManager registered, as on a follower
	if config != nil {
		config(&cfg)
	}
	b := &fakeBackend{st: st}
	cfg.Backend = b
	return &env{h: api.New(cfg), b: b}
}

// seed commits cmds straight to the store (the state a case starts from):
// the handler's backend does not see them.
func (e *env) seed(t testing.TB, cmds ...*storev1.Command) {
	t.Helper()
	for _, cmd := range cmds {
		cmd.Time = timestamppb.New(t0)
		if _, err := e.b.st.Apply(context.Background(), cmd); err != nil {
			t.Fatalf("seed %T: %v", cmd.GetCmd(), err)
		}
	}
}

// call makes a handler call of msg (f is the handler's method) and returns
// the response's message.
func call[Req, Resp any](f func(context.Context, *connect.Request[Req]) (*connect.Response[Resp], error), msg *Req) func(context.Context) (proto.Message, error) {
	return func(ctx context.Context) (proto.Message, error) {
		resp, err := f(ctx, connect.NewRequest(msg))
		if err != nil {
			return nil, err
		}
		if m, ok := any(resp.Msg).(proto.Message); ok {
			return m, nil
		}
		return nil, nil
	}
}

// hcase is one handler call and what it must do. A refusal (code set)
// answers that gRPC code with a message containing names (the field it
// refuses, by its JSON path, or the id it did not find) and asks the
// backend for no write. An acceptance asks for exactly the writes want
// (compared without their stamps: every write is stamped with the
// handler's clock, which the runner checks), or what check says when the
// write holds what the handler made up (ids, secrets).
type hcase struct {
	name  string
	do    func(context.Context) (proto.Message, error)
	code  connect.Code
	names []string
	want  []*storev1.Command
	check func(t *testing.T, resp proto.Message, writes []*storev1.Command)
}

// run runs cases in order, against one store: a case may build on the
// writes of those before it.
func (e *env) run(t *testing.T, cases []hcase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e.b.take()
			resp, err := c.do(t.Context())
			writes := e.b.take()
			if c.code != 0 {
				if connect.CodeOf(err) != c.code {
					t.Fatalf("error = %v; want %v", err, c.code)
				}
				for _, n := range c.names {
					if !strings.Contains(err.Error(), n) {
						t.Errorf("error %q does not name %q", err, n)
					}
				}
				if len(writes) != 0 {
					t.Errorf("a refused call asked the backend for %d write(s): %v", len(writes), writes)
				}
				return
			}
			if err != nil {
				t.Fatalf("error = %v; want success", err)
			}
			for _, w := range writes {
				if !w.GetTime().AsTime().Equal(t0) {
					t.Errorf("write %T stamped %v; want the handler's clock, %v", w.GetCmd(), w.GetTime().AsTime(), t0)
				}
			}
			if c.want != nil {
				if len(writes) != len(c.want) {
					t.Fatalf("%d write(s) %v; want %d: %v", len(writes), writes, len(c.want), c.want)
				}
				for i, w := range writes {
					got := &storev1.Command{Cmd: w.GetCmd()}
					if !proto.Equal(got, c.want[i]) {
						t.Errorf("write %d = %v; want %v", i, got, c.want[i])
					}
				}
			}
			if c.check != nil {
				c.check(t, resp, writes)
			}
		})
	}
}

// oneWrite returns the one write of writes as its command's payload.
func oneWrite[T any](t *testing.T, writes []*storev1.Command, get func(*storev1.Command) T) T {
	t.Helper()
	if len(writes) != 1 {
		t.Fatalf("%d write(s) %v; want one", len(writes), writes)
	}
	return get(writes[0])
}

// job is a valid job of id.
func job(id string) *managerv1.Job {
	return &managerv1.Job{JobId: id, Services: []*managerv1.Service{{Name: "main", Image: "hello:1"}}}
}

// seedNode registers slot id with its worker online (a node to act on).
func (e *env) seedNode(t testing.TB, id string) {
	t.Helper()
	e.seed(t,
		&storev1.Command{Cmd: &storev1.Command_RegisterSlot{RegisterSlot: &storev1.RegisterSlot{NodeId: id, NodeName: id, Token: "nrt_seed-" + id}}},
		&storev1.Command{Cmd: &storev1.Command_MemberRegister{MemberRegister: &storev1.MemberRegister{Token: "nrt_seed-" + id, NodeSecret: "nns_seed-" + id, Address: "10.0.0.1:7000"}}},
		&storev1.Command{Cmd: &storev1.Command_NodeOnline{NodeOnline: &storev1.NodeOnline{NodeId: id, Hello: &managerv1.WorkerHello{NodeId: id}}}},
	)
}
