package jobsocket

import (
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/clock"
	"github.com/norsk-go/norsk-manager/internal/runtime"
	"github.com/norsk-go/norsk-manager/internal/worker/ack"
)

// shortDir is a directory short enough for Unix socket paths (a test's
// TempDir may not be).
func shortDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "js-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(d) })
	return filepath.Join(d, "s")
}

func newSockets(t *testing.T, held map[runtime.Key]*managerv1.InstanceReport) *Sockets {
	t.Helper()
	return newSocketsWith(t, held, nil)
}

// newSocketsWith is newSockets on clk (the real clock when nil).
func newSocketsWith(t *testing.T, held map[runtime.Key]*managerv1.InstanceReport, clk clock.Clock) *Sockets {
	t.Helper()
	m, err := New(Config{
		Dir:    shortDir(t),
		Log:    slog.New(slog.NewTextHandler(io.Discard, nil)),
		NodeID: func() string { return "node-1" },
		Held:   func(key runtime.Key) *managerv1.InstanceReport { return held[key] },
		Report: func(*managerv1.MigrationReport) {},
		Clock:  clk,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.CloseAll)
	return m
}

// TestSocketLifetime: Open makes the socket file (0666, in a 0700
// per-worker directory), the same token keeps it, Remove deletes it and its
// directory, and CloseAll refuses later opens.
func TestSocketLifetime(t *testing.T) {
	t.Parallel()
	m := newSockets(t, nil)
	key := runtime.Key{JobID: "cam", Role: "primary"}
	if fi, err := os.Stat(m.Base()); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("per-worker directory: %v, %v", fi, err)
	}
	if err := m.Open(key, Info{Token: 3, RuntimeRole: "primary"}); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(m.Path(key))
	if err != nil || fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o666 {
		t.Fatalf("socket %s: %v, %v", m.Path(key), fi, err)
	}
	if !m.Has(key) || m.Attached(key) {
		t.Fatalf("Has %v, Attached %v: want a socket no job is attached to", m.Has(key), m.Attached(key))
	}
	if err := m.Open(key, Info{Token: 3}); err != nil || !m.Has(key) {
		t.Fatalf("reopen with the same token: %v", err)
	}
	m.Remove(key)
	if _, err := os.Stat(m.Dir(key)); !errors.Is(err, os.ErrNotExist) || m.Has(key) {
		t.Fatalf("after Remove: directory %v, Has %v", err, m.Has(key))
	}
	m.CloseAll()
	if err := m.Open(key, Info{Token: 4}); err == nil {
		t.Fatal("Open after CloseAll succeeded")
	}
}

// TestTooLongDirectoryIsRefused: a directory whose sockets' paths would
// exceed a Unix socket path is refused at New.
func TestTooLongDirectoryIsRefused(t *testing.T) {
	t.Parallel()
	_, err := New(Config{Dir: "/tmp/" + strings.Repeat("d", 100), Log: slog.New(slog.DiscardHandler)})
	if err == nil || !strings.Contains(err.Error(), "longer than a Unix socket path") {
		t.Fatalf("New = %v", err)
	}
}

// TestCommandsNeedAHeldInstanceWithASocket: a migration command reaches
// only an instance the worker holds, under its token, that has a socket and
// an attached job; each refusal carries its code.
func TestCommandsNeedAHeldInstanceWithASocket(t *testing.T) {
	t.Parallel()
	key, m, clk := camHeldOnFakeClock(t)
	refusal := func(call func(func(*ack.Refusal))) *ack.Refusal {
		var got *ack.Refusal
		called := false
		call(func(e *ack.Refusal) { got, called = e, true })
		if !called {
			t.Fatal("no answer")
		}
		return got
	}
	tests := []struct {
		name string
		key  runtime.Key
		tok  uint64
		open bool
		want connect.Code
	}{
		{"not held", runtime.Key{JobID: "other", Role: "primary"}, 0, false, connect.CodeNotFound},
		{"another token", key, 2, false, connect.CodeNotFound},
		{"no socket", key, 3, false, connect.CodeFailedPrecondition},
		{"no job attached", key, 3, true, connect.CodeFailedPrecondition},
	}
	for _, tc := range tests {
		if tc.open {
			if err := m.Open(key, Info{Token: 3}); err != nil {
				t.Fatal(err)
			}
			// Past the attach grace: the job is not starting, it does not
			// attach (TestGetStateWaitsForTheFirstAttach has the grace).
			clk.Advance(DefaultAttachGrace)
		}
		e := refusal(func(reply func(*ack.Refusal)) { m.GetState(tc.key, tc.tok, "mig-1", reply) })
		if e == nil || e.Code != tc.want {
			t.Errorf("%s: GetState = %v, want %v", tc.name, e, tc.want)
		}
	}
}

// TestGetStateWaitsForTheFirstAttach: within the attach grace a get_state
// for a job that never attached is answered only when the grace runs out
// (or the job attaches: the worker's tests), and then refused.
func TestGetStateWaitsForTheFirstAttach(t *testing.T) {
	t.Parallel()
	key, m, clk := camHeldOnFakeClock(t)
	if err := m.Open(key, Info{Token: 3}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(DefaultAttachGrace / 2)
	got := make(chan *ack.Refusal, 1)
	m.GetState(key, 3, "mig-1", func(e *ack.Refusal) { got <- e })
	select {
	case e := <-got:
		t.Fatalf("answered at once within the grace: %v", e)
	default:
	}
	<-clk.TimerCreated()
	clk.Advance(DefaultAttachGrace / 2)
	select {
	case e := <-got:
		if e == nil || e.Code != connect.CodeFailedPrecondition || !strings.Contains(e.Msg, "did not attach within 10s") {
			t.Fatalf("refusal %v", e)
		}
	case <-t.Context().Done():
		t.Fatal("no answer once the grace ran out")
	}
}

// camHeldOnFakeClock is sockets on a fake clock whose worker holds cam's
// primary running under token 3.
func camHeldOnFakeClock(t *testing.T) (runtime.Key, *Sockets, *clock.Fake) {
	t.Helper()
	key := runtime.Key{JobID: "cam", Role: "primary"}
	held := map[runtime.Key]*managerv1.InstanceReport{key: {JobId: "cam", Role: "primary", FencingToken: 3, Phase: managerv1.InstancePhase_INSTANCE_PHASE_RUNNING}}
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	return key, newSocketsWith(t, held, clk), clk
}
