package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	wal "github.com/hashicorp/raft-wal"
	"github.com/hashicorp/raft-wal/metadb"
	"google.golang.org/protobuf/proto"

	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/apierr"
	"github.com/norsk-go/norsk-manager/internal/events"
	"github.com/norsk-go/norsk-manager/internal/store/state"
)

// Config configures a store member.
type Config struct {
	// Dir holds the raft log (wal/) and snapshots (snapshots/).
	Dir string
	// MemberID is this member's raft server id (its node name).
	MemberID string
	// Logger receives the store's and raft's logs.
	Logger *slog.Logger
	// Broker receives the events the FSM raises; New makes one if nil.
	Broker *events.Broker
	// Limits bound the state tables.
	Limits state.Limits
	// SnapshotThreshold is how many log entries trigger a snapshot
	// (default 8192); SnapshotInterval how often raft checks (default 2m).
	SnapshotThreshold uint64
	SnapshotInterval  time.Duration
	// TrailingLogs is how many entries a snapshot leaves in the log
	// (default 10240).
	TrailingLogs uint64
	// ApplyTimeout bounds a proposal when the caller's context has no
	// deadline (default 30s).
	ApplyTimeout time.Duration
	// OnApply observes every applied command (for metrics); optional.
	OnApply func(*storev1.Command, state.Result)
}

// Store is one member of the replicated store.
type Store struct {
	cfg    Config
	raft   *raft.Raft
	fsm    *fsm
	wal    *wal.WAL
	meta   *metadb.BoltMetaDB
	trans  raft.Transport
	logger *slog.Logger

	// mu guards closed: Apply enqueues under the read lock, Close marks the
	// store closed under the write lock before shutting raft down, so no
	// proposal is enqueued after raft has stopped answering.
	mu       sync.RWMutex
	closed   bool
	closedCh chan struct{}
}

// Open opens (or creates and bootstraps) the store in cfg.Dir and waits until
// this member leads, or ctx ends.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	if cfg.Dir == "" || cfg.MemberID == "" {
		return nil, errors.New("store: Dir and MemberID are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Broker == nil {
		cfg.Broker = events.New(0)
	}
	if cfg.ApplyTimeout == 0 {
		cfg.ApplyTimeout = 30 * time.Second
	}
	logger := cfg.Logger.With("component", "store")
	walDir := filepath.Join(cfg.Dir, "wal")
	snapDir := filepath.Join(cfg.Dir, "snapshots")
	for _, d := range []string{walDir, snapDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("store: %w", err)
		}
	}
	// raft-wal's Close leaves its meta database open (and locked), so the
	// store owns it and closes it itself.
	meta := &metadb.BoltMetaDB{}
	w, err := wal.Open(walDir, wal.WithLogger(hclogger(cfg.Logger, "raft-wal")), wal.WithMetaStore(meta))
	if err != nil {
		_ = meta.Close()
		return nil, fmt.Errorf("store: open raft log in %s: %w", walDir, err)
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(snapDir, 3, hclogger(cfg.Logger, "raft-snapshots"))
	if err != nil {
		_ = w.Close()
		_ = meta.Close()
		return nil, fmt.Errorf("store: open snapshots in %s: %w", snapDir, err)
	}
	f := &fsm{st: state.New(cfg.Limits), broker: cfg.Broker, logger: logger, onApply: cfg.OnApply}

	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.MemberID)
	rc.Logger = hclogger(cfg.Logger, "raft")
	rc.BatchApplyCh = true
	rc.MaxAppendEntries = 256
	// A single member elects itself quickly; the cluster issue tunes these
	// for multi-member use.
	rc.HeartbeatTimeout = 500 * time.Millisecond
	rc.ElectionTimeout = 500 * time.Millisecond
	rc.LeaderLeaseTimeout = 250 * time.Millisecond
	if cfg.SnapshotThreshold > 0 {
		rc.SnapshotThreshold = cfg.SnapshotThreshold
	}
	if cfg.SnapshotInterval > 0 {
		rc.SnapshotInterval = cfg.SnapshotInterval
	}
	if cfg.TrailingLogs > 0 {
		rc.TrailingLogs = cfg.TrailingLogs
	}
	addr, trans := raft.NewInmemTransport(raft.ServerAddress(cfg.MemberID))

	has, err := raft.HasExistingState(w, w, snaps)
	if err != nil {
		_ = w.Close()
		_ = meta.Close()
		return nil, fmt.Errorf("store: inspect %s: %w", cfg.Dir, err)
	}
	if !has {
		conf := raft.Configuration{Servers: []raft.Server{{ID: rc.LocalID, Address: addr, Suffrage: raft.Voter}}}
		if err := raft.BootstrapCluster(rc, w, w, snaps, trans, conf); err != nil {
			_ = w.Close()
			_ = meta.Close()
			return nil, fmt.Errorf("store: bootstrap: %w", err)
		}
		logger.Info("bootstrapped a new single-member store", "dir", cfg.Dir, "member", cfg.MemberID)
	}
	r, err := newRaft(rc, f, w, snaps, trans)
	if err != nil {
		_ = w.Close()
		_ = meta.Close()
		return nil, fmt.Errorf("store: start raft: %w", err)
	}
	// A store whose log lost its cluster configuration would wait for a
	// leadership that never comes: it is unreadable.
	if cf := r.GetConfiguration(); cf.Error() != nil || !hasVoter(cf.Configuration(), rc.LocalID) {
		_ = r.Shutdown().Error()
		_ = w.Close()
		_ = meta.Close()
		return nil, fmt.Errorf("store: the raft store in %s has no configuration naming member %q as a voter (its log is damaged or belongs to another member)", cfg.Dir, cfg.MemberID)
	}
	s := &Store{cfg: cfg, raft: r, fsm: f, wal: w, meta: meta, trans: trans, logger: logger, closedCh: make(chan struct{})}
	if err := s.waitLeader(ctx); err != nil {
		_ = s.Close()
		return nil, err
	}
	// Make sure everything committed before the restart has been applied
	// before the first read.
	if err := r.Barrier(cfg.ApplyTimeout).Error(); err != nil {
		_ = s.Close()
		return nil, fmt.Errorf("store: barrier: %w", err)
	}
	if idx := f.corruptAt.Load(); idx != 0 {
		_ = s.Close()
		return nil, fmt.Errorf("store: the raft log entry at index %d does not decode: the log is damaged", idx)
	}
	logger.Info("store ready", "index", f.st.Snapshot().Index(), "last_log_index", r.LastIndex())
	return s, nil
}

// newRaft is raft.NewRaft, with a panic (raft panics on a log entry it
// cannot read) turned into an error: the store is unreadable.
func newRaft(rc *raft.Config, f raft.FSM, w *wal.WAL, snaps raft.SnapshotStore, trans raft.Transport) (r *raft.Raft, err error) {
	defer func() {
		if p := recover(); p != nil {
			r, err = nil, fmt.Errorf("the raft store is unreadable: %v", p)
		}
	}()
	return raft.NewRaft(rc, f, w, w, snaps, trans)
}

func hasVoter(c raft.Configuration, id raft.ServerID) bool {
	for _, s := range c.Servers {
		if s.ID == id && s.Suffrage == raft.Voter {
			return true
		}
	}
	return false
}

func (s *Store) waitLeader(ctx context.Context) error {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for s.raft.State() != raft.Leader {
		select {
		case <-ctx.Done():
			return fmt.Errorf("store: waiting to lead: %w", ctx.Err())
		case <-t.C:
		}
	}
	return nil
}

// Apply proposes a command and waits until it is committed and applied. The
// error is the command's domain refusal (nothing changed), Unavailable when
// this member cannot commit (it is not the primary, or is shutting down), or
// the context's error when ctx ends first — then the write may still be
// applied later.
func (s *Store) Apply(ctx context.Context, cmd *storev1.Command) (state.Result, error) {
	data, err := proto.Marshal(cmd)
	if err != nil {
		return state.Result{}, fmt.Errorf("encode command: %w", err)
	}
	timeout := s.cfg.ApplyTimeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
		if timeout <= 0 {
			return state.Result{}, apierr.New(apierr.DeadlineExceeded, "deadline passed before the write was proposed")
		}
	}
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return state.Result{}, apierr.Unavailablef("the store is closed")
	}
	f := s.raft.Apply(data, timeout)
	s.mu.RUnlock()
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err = <-done:
	case <-ctx.Done():
		return state.Result{}, apierr.New(apierr.DeadlineExceeded, "write not acknowledged before the caller gave up (%v); it may still be applied", ctx.Err())
	case <-s.closedCh:
		return state.Result{}, apierr.Unavailablef("the store closed before the write was acknowledged; it may still have been applied")
	}
	if err != nil {
		switch {
		case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipLost),
			errors.Is(err, raft.ErrRaftShutdown), errors.Is(err, raft.ErrLeadershipTransferInProgress):
			return state.Result{}, apierr.Unavailablef("this Manager cannot commit writes: %v", err)
		case errors.Is(err, raft.ErrEnqueueTimeout):
			return state.Result{}, apierr.New(apierr.DeadlineExceeded, "write not committed in time: %v", err)
		}
		return state.Result{}, fmt.Errorf("apply: %w", err)
	}
	res, ok := f.Response().(state.Result)
	if !ok {
		return state.Result{}, fmt.Errorf("apply: unexpected FSM response %T", f.Response())
	}
	return res, res.Err
}

// State returns the state tables for reading.
func (s *Store) State() *state.State { return s.fsm.st }

// Broker returns the event broker the FSM publishes to.
func (s *Store) Broker() *events.Broker { return s.fsm.broker }

// IsLeader reports whether this member is the primary.
func (s *Store) IsLeader() bool { return s.raft.State() == raft.Leader }

// LeaderCh signals leadership changes (true = became primary).
func (s *Store) LeaderCh() <-chan bool { return s.raft.LeaderCh() }

// AppliedIndex is raft's last applied index.
func (s *Store) AppliedIndex() uint64 { return s.raft.AppliedIndex() }

// Stats returns raft's statistics (for status pages and metrics).
func (s *Store) Stats() map[string]string { return s.raft.Stats() }

// TakeSnapshot asks raft to snapshot now.
func (s *Store) TakeSnapshot() error { return s.raft.Snapshot().Error() }

// Close shuts raft down and closes the log. Writes in flight fail with
// Unavailable.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.closedCh)
	s.mu.Unlock()
	err := s.raft.Shutdown().Error()
	s.fsm.broker.Close()
	if cerr := s.wal.Close(); err == nil {
		err = cerr
	}
	if cerr := s.meta.Close(); err == nil {
		err = cerr
	}
	return err
}
