package store

import (
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/events"
	"github.com/norsk-go/norsk-manager/internal/store/state"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
)

// fsm adapts state.State to raft.FSM and publishes the events each command
// raised. raft calls Apply, Snapshot and Restore from its FSM goroutine, one
// at a time; Persist runs concurrently with later Applies on an immutable
// state snapshot.
type fsm struct {
	st     *state.State
	broker *events.Broker
	logger *slog.Logger
	// onApply, if set, observes every applied result (metrics).
	onApply func(*storev1.Command, state.Result)
	// corruptAt is the index of the first log entry that did not decode (0
	// if none): Open refuses a store whose log replays one.
	corruptAt atomic.Uint64
	// halted is set at the first entry that fails its checksum: from then
	// on nothing is applied (the state stays the consistent prefix before
	// it) and no snapshot is taken. haltedCh is closed then.
	halted   atomic.Pointer[haltError]
	haltedCh chan struct{}
	haltOnce sync.Once

	// applied is closed (and replaced) whenever the state's index moves:
	// WaitApplied waits on it instead of polling.
	appliedMu sync.Mutex
	applied   chan struct{}

	// gate, if set, learns of each batch as raft hands it over, before it
	// is applied (commitGate).
	gate *commitGate
}

// appliedCh is closed at the state's next change of index.
func (f *fsm) appliedCh() <-chan struct{} {
	f.appliedMu.Lock()
	defer f.appliedMu.Unlock()
	if f.applied == nil {
		f.applied = make(chan struct{})
	}
	return f.applied
}

// notifyApplied wakes every appliedCh waiter.
func (f *fsm) notifyApplied() {
	f.appliedMu.Lock()
	defer f.appliedMu.Unlock()
	if f.applied != nil {
		close(f.applied)
		f.applied = nil
	}
}

var _ raft.BatchingFSM = (*fsm)(nil)

// ApplyBatch applies raft's committed entries in order: each command as
// Apply does; configuration entries (which raft hands a batching FSM too)
// change nothing, as they did not when raft applied one entry at a time.
// It opens the commit gate first, so proposals held behind this batch go to
// raft while it is applied.
func (f *fsm) ApplyBatch(logs []*raft.Log) []any {
	if f.gate != nil && len(logs) > 0 {
		f.gate.reached(logs[len(logs)-1].Index)
	}
	out := make([]any, len(logs))
	for i, l := range logs {
		if l.Type == raft.LogCommand {
			out[i] = f.Apply(l)
		}
	}
	return out
}

// haltError says why and where a member stopped applying its log.
type haltError struct {
	index uint64
	err   error
}

func (h *haltError) Error() string {
	return fmt.Sprintf("this member stopped applying its raft log at entry %d: %v; its copy of the store is damaged "+
		"(restart it: a cluster member rejoins with a fresh copy, a standalone one restores its newest backup)", h.index, h.err)
}

func (h *haltError) Unwrap() error { return h.err }

// Halted is the reason this FSM stopped applying (nil while it applies).
func (f *fsm) Halted() error {
	if h := f.halted.Load(); h != nil {
		return h
	}
	return nil
}

// halt stops applying at entry index, once, and says so loudly.
func (f *fsm) halt(index uint64, err error) *haltError {
	h := &haltError{index: index, err: err}
	if !f.halted.CompareAndSwap(nil, h) {
		return f.halted.Load()
	}
	f.logger.Error("STORE HALTED: a raft log entry fails its checksum; this member applies nothing more and must be restarted "+
		"(its copy of the store is damaged and would diverge from the other members)", "index", index, "err", err)
	f.haltOnce.Do(func() {
		if f.haltedCh != nil {
			close(f.haltedCh)
		}
	})
	return h
}

func (f *fsm) Apply(l *raft.Log) any {
	defer f.notifyApplied()
	if h := f.halted.Load(); h != nil {
		// A member that met a damaged entry applies nothing after it: its
		// state stays the prefix every member agrees on.
		return state.Result{Index: l.Index, Err: apierr.New(apierr.DataLoss, "%v", h)}
	}
	if l.Type != raft.LogCommand {
		f.st.ApplyNoop(l.Index)
		return nil
	}
	if _, err := verifyChecksum(l); err != nil {
		// Not the command every member applies: applying it, or skipping
		// it, would make this member's state differ from the others'.
		h := f.halt(l.Index, err)
		return state.Result{Index: l.Index, Err: apierr.New(apierr.DataLoss, "%v", h)}
	}
	cmd := &storev1.Command{}
	if err := proto.Unmarshal(l.Data, cmd); err != nil {
		// Every member decodes the same bytes the same way, so refusing
		// here keeps the members identical.
		f.logger.Error("undecodable raft command", "index", l.Index, "err", err)
		f.corruptAt.CompareAndSwap(0, l.Index)
		f.st.ApplyNoop(l.Index)
		return state.Result{Index: l.Index, Err: apierr.New(apierr.DataLoss, "undecodable command at index %d: %v", l.Index, err)}
	}
	tr := traceFSM(l.Data)
	res := f.st.Apply(l.Index, cmd)
	f.broker.Publish(res.Events...)
	if f.onApply != nil {
		f.onApply(cmd, res)
	}
	tr.done()
	return res
}

func (f *fsm) Snapshot() (raft.FSMSnapshot, error) {
	if h := f.halted.Load(); h != nil {
		// raft would label the snapshot with its own applied index, past
		// the entries this state never applied.
		return nil, fmt.Errorf("no snapshot of a halted store: %w", h)
	}
	return &fsmSnapshot{read: f.st.Snapshot()}, nil
}

func (f *fsm) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	h, err := f.st.Restore(rc)
	if err != nil {
		return fmt.Errorf("restore snapshot: %w", err)
	}
	f.broker.Reset(h.GetIndex())
	if f.gate != nil {
		f.gate.reached(h.GetIndex())
	}
	f.notifyApplied()
	f.logger.Info("restored state from snapshot", "index", h.GetIndex(), "schema_version", h.GetSchemaVersion())
	return nil
}

type fsmSnapshot struct{ read *state.Read }

func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := s.read.WriteTo(sink); err != nil {
		_ = sink.Cancel()
		return fmt.Errorf("persist snapshot: %w", err)
	}
	return sink.Close()
}

func (s *fsmSnapshot) Release() {}
