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
	"github.com/norsk-go/norsk-manager/internal/apierr"
	"github.com/norsk-go/norsk-manager/internal/events"
	"github.com/norsk-go/norsk-manager/internal/store/state"
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

	// applied is closed (and replaced) whenever the state's index moves:
	// WaitApplied waits on it instead of polling.
	appliedMu sync.Mutex
	applied   chan struct{}
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

var _ raft.FSM = (*fsm)(nil)

func (f *fsm) Apply(l *raft.Log) any {
	defer f.notifyApplied()
	if l.Type != raft.LogCommand {
		f.st.ApplyNoop(l.Index)
		return nil
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
	res := f.st.Apply(l.Index, cmd)
	f.broker.Publish(res.Events...)
	if f.onApply != nil {
		f.onApply(cmd, res)
	}
	return res
}

func (f *fsm) Snapshot() (raft.FSMSnapshot, error) {
	return &fsmSnapshot{read: f.st.Snapshot()}, nil
}

func (f *fsm) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	h, err := f.st.Restore(rc)
	if err != nil {
		return fmt.Errorf("restore snapshot: %w", err)
	}
	f.broker.Reset(h.GetIndex())
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
