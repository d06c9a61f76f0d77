package cluster

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1/managerv1connect"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/clock"
	"github.com/norsk-go/norsk-manager/internal/store"
)

// fakeWork is a TermWork that reports each start and stop.
type fakeWork struct {
	prepareErr error
	started    chan Term
	stopped    chan Term
	starts     atomic.Int32
	stops      atomic.Int32
	// stoppedLive counts stops called while the term's context was still
	// live (the Member ends the term before it stops its work).
	stoppedLive atomic.Int32
}

func newFakeWork() *fakeWork {
	return &fakeWork{started: make(chan Term, 16), stopped: make(chan Term, 16)}
}

func (f *fakeWork) Prepare(context.Context, *store.Store) error { return f.prepareErr }
func (f *fakeWork) Boot(context.Context, *store.Store) error    { return nil }

func (f *fakeWork) Start(ctx context.Context, t Term) func() {
	f.starts.Add(1)
	f.started <- t
	return func() {
		if ctx.Err() == nil {
			f.stoppedLive.Add(1)
		}
		f.stops.Add(1)
		f.stopped <- t
	}
}

// standalone opens a standalone member over work in a new directory and
// runs it until the test ends.
func standalone(t *testing.T, work TermWork) (*Member, context.CancelFunc) {
	t.Helper()
	m := openStandalone(t, work)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return m, cancel
}

// openStandalone opens a standalone member over work in a new directory,
// without running it, and closes it when the test ends.
func openStandalone(t *testing.T, work TermWork) *Member {
	t.Helper()
	dir := t.TempDir()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	m := New(Config{
		Name: "m1", DataDir: dir, URL: "http://127.0.0.1:1",
		Store: store.Config{Dir: filepath.Join(dir, "raft"), MemberID: "m1", Logger: log},
		Boot:  &managerv1.BootReport{},
		Audit: func(context.Context, *storev1.Command) *storev1.AuditStamp { return &storev1.AuditStamp{Who: "test"} },
		Work:  work, Clock: clock.Real{}, Log: log,
	})
	if err := m.Open(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Error(err)
		}
	})
	return m
}

func receive[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-t.Context().Done():
		t.Fatalf("no %s", what)
		panic("unreachable")
	}
}

// TestTermWorkOncePerTerm: each primary term starts the daemon's work once
// and stops it once, after the term ended; a recovery ends the term on the
// old store and starts one on the new, which readers then see; Stop ends
// the last.
func TestTermWorkOncePerTerm(t *testing.T) {
	t.Parallel()
	w := newFakeWork()
	m, _ := standalone(t, w)
	<-m.Ready()
	if err := m.ReadyErr(); err != nil {
		t.Fatal(err)
	}
	first := receive(t, w.started, "first term")
	if first.Store != m.Store() || first.Generation == 0 {
		t.Fatalf("first term %+v: want the member's store at a generation", first)
	}
	if !m.IsPrimaryReady() {
		t.Fatal("a standalone member leading its first term is not primary-ready")
	}
	if _, err := m.ApplyCall(t.Context(), &storev1.Command{Cmd: &storev1.Command_ExpectMember{ExpectMember: &storev1.ExpectMember{Name: "m2"}}}); err != nil {
		t.Fatal(err)
	}

	// A recovery replaces the store: the term on the old one stops, a term
	// on the new one starts, and readers see the new store with the state.
	if !m.requestRestart(func() error { return nil }) {
		t.Fatal("recovery refused")
	}
	if got := receive(t, w.stopped, "stop of the first term"); got.Store != first.Store {
		t.Fatal("the stop called was not the first term's")
	}
	second := receive(t, w.started, "second term")
	if second.Store == first.Store {
		t.Fatal("the term after a recovery runs on the old store")
	}
	if m.Store() != second.Store {
		t.Fatal("readers do not see the store the recovery opened")
	}
	if m.Store().State().Snapshot().Member("m2") == nil {
		t.Fatal("the reopened store lost the write made before the recovery")
	}

	m.Stop(t.Context())
	receive(t, w.stopped, "stop of the second term")
	if s, e := w.starts.Load(), w.stops.Load(); s != 2 || e != 2 {
		t.Fatalf("starts %d, stops %d: want 2 and 2", s, e)
	}
	if n := w.stoppedLive.Load(); n != 0 {
		t.Fatalf("%d stops came before their term's context ended", n)
	}
	if m.startTerm() {
		t.Fatal("a term could start after Stop")
	}
}

// TestTermWorkNotStartedWhenBootFails: a term whose boot work fails never
// starts the daemon's work, and the member says why it is not ready.
func TestTermWorkNotStartedWhenBootFails(t *testing.T) {
	t.Parallel()
	w := newFakeWork()
	w.prepareErr = errors.New("schema too new")
	m, _ := standalone(t, w)
	<-m.Ready()
	if err := m.ReadyErr(); !errors.Is(err, w.prepareErr) {
		t.Fatalf("ReadyErr = %v, want %v", err, w.prepareErr)
	}
	m.Stop(t.Context())
	if n := w.starts.Load(); n != 0 {
		t.Fatalf("the term's work started %d times after its boot work failed", n)
	}
}

// TestNoTermAfterIncarnationEnds: the leadership loop of an incarnation
// that has ended (a recovery about to close its store) starts no term, even
// when it wakes to find its store leading and no term running. CI once saw
// a term start on the old store this way: the loop woke on its tick at the
// moment the recovery ended the first term.
func TestNoTermAfterIncarnationEnds(t *testing.T) {
	t.Parallel()
	w := newFakeWork()
	m := openStandalone(t, w)
	st := m.Store()
	// The first term's boot work is done, so a second needs no write that
	// the ended context would refuse.
	booted(t, m)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	m.leadership(ctx, st)
	if n := w.starts.Load(); n != 0 {
		t.Fatalf("an ended incarnation started %d terms", n)
	}
}

// TestPeerStatusOfAnotherClusterIsAnError: a peer whose answer names
// another cluster (its address now served by another cluster's member) is
// unreachable as far as this member is concerned: its status (and the
// primary it reports) is not taken. CI once saw force-standalone refused
// because a port a stopped member let go of was taken by another test
// cluster's primary.
func TestPeerStatusOfAnotherClusterIsAnError(t *testing.T) {
	t.Parallel()
	m := openStandalone(t, newFakeWork())
	other := openStandalone(t, newFakeWork())
	booted(t, m)
	booted(t, other)
	same, foreign := serveH2C(t, handlerOf(m)), serveH2C(t, handlerOf(other))
	m.cfg.Nodes = []Node{{Name: "m2", API: same.URL}, {Name: "m3", API: foreign.URL}}

	got := map[string]peerStatus{}
	for _, p := range m.peerStatuses(t.Context()) {
		got[p.name] = p
	}
	if p := got["m2"]; p.err != nil || p.status.GetClusterId() != m.Store().State().Snapshot().ClusterID() {
		t.Fatalf("a peer of this cluster: %+v (%v)", p, p.err)
	}
	if p := got["m3"]; p.err == nil || !strings.Contains(p.err.Error(), "answers for another cluster") {
		t.Fatalf("a peer of another cluster: %+v, want an error", p)
	}
}

// serveH2C serves h over cleartext HTTP/2, as members speak to each other.
func serveH2C(t *testing.T, h http.Handler) *httptest.Server {
	srv := httptest.NewUnstartedServer(h)
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

// handlerOf serves m's Members service.
func handlerOf(m *Member) http.Handler {
	mux := http.NewServeMux()
	mux.Handle(managerv1connect.NewMembersHandler(m.Service()))
	return mux
}

// booted waits until m's standalone store leads and does a primary term's
// boot work on it (the store then has its cluster id), without running m.
func booted(t *testing.T, m *Member) {
	t.Helper()
	st := m.Store()
	for !st.IsLeader() {
		select {
		case <-t.Context().Done():
			t.Fatal("the standalone store never led")
		case <-st.LeaderNotify():
		case <-time.After(10 * time.Millisecond):
		}
	}
	if err := m.bootWork(t.Context(), st); err != nil {
		t.Fatal(err)
	}
}
