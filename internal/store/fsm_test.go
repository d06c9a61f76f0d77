package store

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/events"
	"github.com/norsk-go/norsk-manager/internal/store/state"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func newFSM() *fsm {
	return &fsm{st: state.New(state.Limits{}), broker: events.New(64), logger: quiet}
}

func commandLog(t *testing.T, index uint64, cmd *storev1.Command) *raft.Log {
	t.Helper()
	b, err := proto.Marshal(cmd)
	if err != nil {
		t.Fatal(err)
	}
	return &raft.Log{Index: index, Type: raft.LogCommand, Data: b}
}

func snapshotBytes(t *testing.T, st *state.State) []byte {
	t.Helper()
	var b bytes.Buffer
	if _, err := st.Snapshot().WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// sink is an in-memory raft.SnapshotSink.
type sink struct {
	bytes.Buffer
	failWrites       bool
	closed, canceled bool
}

func (s *sink) Write(p []byte) (int, error) {
	if s.failWrites {
		return 0, errors.New("disk full")
	}
	return s.Buffer.Write(p)
}
func (s *sink) ID() string    { return "test" }
func (s *sink) Close() error  { s.closed = true; return nil }
func (s *sink) Cancel() error { s.canceled = true; return nil }

func TestFSMApplyLogTypes(t *testing.T) {
	f := newFSM()
	var seen []state.Result
	f.onApply = func(_ *storev1.Command, r state.Result) { seen = append(seen, r) }
	sub := f.broker.SubscribeTail()

	res, ok := f.Apply(commandLog(t, 3, createJob("job-1"))).(state.Result)
	if !ok || res.Err != nil || res.Index != 3 {
		t.Fatalf("apply = %#v", res)
	}
	got, err := sub.Next(context.Background())
	if err != nil || len(got) != 1 || got[0].GetIndex() != 3 || got[0].GetJobCreated() == nil {
		t.Fatalf("published %v, %v", got, err)
	}
	if len(seen) != 1 || seen[0].Index != 3 {
		t.Errorf("OnApply saw %v", seen)
	}

	tests := []struct {
		name string
		log  *raft.Log
		code apierr.Code // for an undecodable command
	}{
		{"noop", &raft.Log{Index: 4, Type: raft.LogNoop}, 0},
		{"configuration", &raft.Log{Index: 5, Type: raft.LogConfiguration}, 0},
		{"barrier", &raft.Log{Index: 6, Type: raft.LogBarrier}, 0},
		{"undecodable", &raft.Log{Index: 7, Type: raft.LogCommand, Data: []byte{0xff, 0xff, 0xff}}, apierr.DataLoss},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := snapshotBytes(t, f.st)
			out := f.Apply(tt.log)
			if tt.code != 0 {
				r, ok := out.(state.Result)
				if !ok || apierr.CodeOf(r.Err) != tt.code {
					t.Fatalf("apply = %#v, want a %v result", out, tt.code)
				}
			} else if out != nil {
				t.Fatalf("apply = %#v, want nil", out)
			}
			if got := f.st.Snapshot().Index(); got != tt.log.Index {
				t.Errorf("applied index = %d, want %d", got, tt.log.Index)
			}
			after := snapshotBytes(t, f.st)
			g := state.New(state.Limits{})
			if _, err := g.Restore(bytes.NewReader(before)); err != nil {
				t.Fatal(err)
			}
			g.ApplyNoop(tt.log.Index)
			if !bytes.Equal(snapshotBytes(t, g), after) {
				t.Error("the entry changed more than the applied index")
			}
		})
	}
	if len(seen) != 1 {
		t.Errorf("OnApply called for non-commands: %d calls", len(seen))
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if got, err := sub.Next(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("non-commands published %v", got)
	}
}

func TestFSMSnapshotRestore(t *testing.T) {
	f := newFSM()
	for i, id := range []string{"a", "b", "c"} {
		f.Apply(commandLog(t, uint64(i+1), createJob(id)))
	}
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	// Later applies do not change the snapshot being persisted.
	f.Apply(commandLog(t, 4, createJob("d")))
	var s sink
	if err := snap.Persist(&s); err != nil {
		t.Fatal(err)
	}
	snap.Release()
	if !s.closed || s.canceled {
		t.Errorf("sink closed %v canceled %v", s.closed, s.canceled)
	}

	g := newFSM()
	old, _ := g.broker.SubscribeAfter(0)
	g.broker.Publish(&managerv1.Event{Index: 1})
	if err := g.Restore(io.NopCloser(bytes.NewReader(s.Bytes()))); err != nil {
		t.Fatal(err)
	}
	if got := g.st.Snapshot().Index(); got != 3 {
		t.Errorf("restored index = %d, want 3", got)
	}
	if g.st.Snapshot().Job(nil, "c") == nil || g.st.Snapshot().Job(nil, "d") != nil {
		t.Error("restored the wrong jobs")
	}
	if _, err := g.broker.SubscribeAfter(2); !errors.Is(err, events.ErrResync) {
		t.Errorf("events before the restored index: %v, want ErrResync", err)
	}
	if _, err := g.broker.SubscribeAfter(3); err != nil {
		t.Errorf("events after the restored index: %v", err)
	}
	if _, err := old.Next(context.Background()); !errors.Is(err, events.ErrResync) {
		t.Errorf("a subscriber with unread events across the restore: %v", err)
	}

	// A corrupt snapshot is refused and changes nothing.
	before := snapshotBytes(t, g.st)
	if err := g.Restore(io.NopCloser(bytes.NewReader(s.Bytes()[:len(s.Bytes())-2]))); !errors.Is(err, state.ErrCorruptSnapshot) {
		t.Errorf("corrupt restore: %v", err)
	}
	if !bytes.Equal(snapshotBytes(t, g.st), before) {
		t.Error("a refused restore changed the state")
	}
}

func TestFSMPersistFailureCancels(t *testing.T) {
	f := newFSM()
	f.Apply(commandLog(t, 1, createJob("a")))
	snap, _ := f.Snapshot()
	s := &sink{failWrites: true}
	if err := snap.Persist(s); err == nil {
		t.Fatal("Persist succeeded on a failing sink")
	}
	if !s.canceled || s.closed {
		t.Errorf("sink canceled %v closed %v; want canceled only", s.canceled, s.closed)
	}
}

func openQuiet(t *testing.T, dir string, b *events.Broker, onApply func(*storev1.Command, state.Result)) *Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := Open(ctx, Config{Dir: dir, MemberID: "m1", Logger: quiet, Broker: b, OnApply: onApply,
		SnapshotThreshold: 1 << 20, TrailingLogs: 4})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return s
}

func TestStoreApplyPublishesAndRefuses(t *testing.T) {
	var mu sync.Mutex
	var applied []uint64
	s := openQuiet(t, t.TempDir(), nil, func(_ *storev1.Command, r state.Result) {
		mu.Lock()
		defer mu.Unlock()
		applied = append(applied, r.Index)
	})
	defer s.Close()
	sub := s.Broker().SubscribeTail()
	ctx := context.Background()

	res, err := s.Apply(ctx, createJob("job-1"))
	if err != nil || res.Index == 0 {
		t.Fatalf("apply = %v, %v", res, err)
	}
	got, err := sub.Next(ctx)
	if err != nil || len(got) != 1 || got[0].GetIndex() != res.Index || got[0].GetJobCreated().GetJob().GetJob().GetJobId() != "job-1" {
		t.Fatalf("events = %v, %v", got, err)
	}
	if j := s.State().Snapshot().Job(nil, "job-1"); j.GetJob().GetCurrentHash() != res.Index {
		t.Errorf("hash %d, want the raft index %d", j.GetJob().GetCurrentHash(), res.Index)
	}

	// A domain refusal comes back as the error and as Result.Err.
	res2, err := s.Apply(ctx, createJob("job-1"))
	if !apierr.Is(err, apierr.AlreadyExists) || !errors.Is(res2.Err, err) || res2.Index <= res.Index {
		t.Errorf("duplicate = %v, %v", res2, err)
	}
	if got := s.State().Snapshot().Index(); got != res2.Index {
		t.Errorf("state index %d, want %d", got, res2.Index)
	}
	if !s.IsLeader() {
		t.Error("a single member does not lead")
	}
	mu.Lock()
	if len(applied) != 2 || applied[1] != res2.Index {
		t.Errorf("OnApply saw %v", applied)
	}
	mu.Unlock()

	// A deadline already passed is refused before proposing.
	dctx, cancel := context.WithDeadline(ctx, time.Now().Add(-time.Second))
	defer cancel()
	if _, err := s.Apply(dctx, createJob("job-2")); !apierr.Is(err, apierr.DeadlineExceeded) {
		t.Errorf("past deadline: %v", err)
	}
	if s.State().Snapshot().Job(nil, "job-2") != nil {
		t.Error("a write past its deadline was applied")
	}
}

func TestStoreClosed(t *testing.T) {
	s := openQuiet(t, t.TempDir(), nil, nil)
	sub := s.Broker().SubscribeTail()
	if err := s.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if _, err := sub.Next(context.Background()); !errors.Is(err, events.ErrClosed) {
		t.Errorf("event subscriber after close: %v", err)
	}
}

// TestStoreApplyAfterCloseIsUnavailable: Close documents that writes in
// flight fail with UNAVAILABLE; a write after Close must not hang.
func TestStoreApplyAfterCloseIsUnavailable(t *testing.T) {
	s := openQuiet(t, t.TempDir(), nil, nil)
	if err := s.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	for i := range 20 {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		done := make(chan error, 1)
		go func() { _, err := s.Apply(ctx, createJob("job-1")); done <- err }()
		// The timer only detects a hang; nothing waits on it to proceed.
		hang := time.NewTimer(10 * time.Second)
		select {
		case err := <-done:
			if !apierr.Is(err, apierr.Unavailable) {
				t.Errorf("apply %d after close: %v, want UNAVAILABLE", i, err)
			}
		case <-hang.C:
			cancel()
			t.Fatalf("apply %d after close still blocked 8s past its context's deadline", i)
		}
		hang.Stop()
		cancel()
	}
}

func TestOpenNeedsDirAndMember(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
	}{
		{"no dir", Config{MemberID: "m1"}},
		{"no member", Config{Dir: t.TempDir()}},
	}
	for _, tt := range tests {
		if _, err := Open(context.Background(), tt.cfg); err == nil {
			t.Errorf("%s: opened", tt.name)
		}
	}
}

// TestRestartFromSnapshotResetsBroker: after a restart the broker holds only
// what was replayed after the snapshot; asking for older events resyncs.
func TestRestartFromSnapshotResetsBroker(t *testing.T) {
	dir := t.TempDir()
	s := openQuiet(t, dir, nil, nil)
	ctx := context.Background()
	var snapIndex uint64
	for i, id := range []string{"a", "b", "c", "d", "e"} {
		res, err := s.Apply(ctx, createJob(id))
		if err != nil {
			t.Fatal(err)
		}
		if i == 2 {
			if err := s.TakeSnapshot(); err != nil {
				t.Fatal(err)
			}
			snapIndex = res.Index
		}
	}
	want := snapshotBytes(t, s.State())
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	b := events.New(64)
	s = openQuiet(t, dir, b, nil)
	defer s.Close()
	if got := snapshotBytes(t, s.State()); !bytes.Equal(got, want) {
		t.Error("state after restart differs from before")
	}
	if _, err := b.SubscribeAfter(snapIndex - 1); !errors.Is(err, events.ErrResync) {
		t.Errorf("events before the snapshot: %v, want ErrResync", err)
	}
	sub, err := b.SubscribeAfter(snapIndex)
	if err != nil {
		t.Fatalf("events after the snapshot: %v", err)
	}
	got, err := sub.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, e := range got {
		ids = append(ids, e.GetJobCreated().GetJob().GetJob().GetJobId())
	}
	if len(ids) != 2 || ids[0] != "d" || ids[1] != "e" {
		t.Errorf("replayed events = %v, want d, e", ids)
	}
}
