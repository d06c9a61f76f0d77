package store

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/raft"
	wal "github.com/hashicorp/raft-wal"
	walfs "github.com/hashicorp/raft-wal/fs"
	"github.com/hashicorp/raft-wal/metadb"
	"github.com/hashicorp/raft-wal/segment"
	"github.com/hashicorp/raft-wal/types"
	"google.golang.org/protobuf/proto"

	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/events"
	"github.com/norsk-go/norsk-manager/internal/store/state"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
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
	// ProposalHold bounds how long a proposal waits at the commit gate for
	// the batch ahead of it to reach the FSM (commitGate; default 20 ms).
	ProposalHold time.Duration
	// OnApply observes every applied command (for metrics); optional.
	OnApply func(*storev1.Command, state.Result)

	// RaftBind is where raft listens for its peers (host:port). Empty: a
	// standalone member on raft's in-memory transport, no port opened.
	RaftBind string
	// RaftAdvertise is the address peers reach this member's raft at
	// (default: the bound address).
	RaftAdvertise string
	// RaftTLS, if set, carries raft's TCP traffic over TLS: it serves
	// accepted connections and dials peers with it (both sides present and
	// verify certificates: pki.MemberTLSConfig).
	RaftTLS *tls.Config
	// StreamLayer, if set, makes the layer that carries raft's traffic
	// instead of plain TCP (tests inject faults through it). It is called
	// at each Open: closing the store closes the layer.
	StreamLayer func() (raft.StreamLayer, error)
	// Bootstrap lists the voters of a new cluster (empty: this member
	// alone). Used only when the store has no state and Join is false.
	Bootstrap []raft.Server
	// Join: a new store does not bootstrap; it waits to be added to an
	// existing cluster by its primary.
	Join bool
	// HeartbeatTimeout and ElectionTimeout tune failover (default 500 ms
	// each: a LAN cluster fails over in about a second).
	HeartbeatTimeout time.Duration
	ElectionTimeout  time.Duration

	// SegmentSize is the size of one raft-log segment file, allocated in
	// full when the segment starts (default 64 MiB, raft-wal's).
	SegmentSize int
	// MinFreeBytes is the free space the disk holding the store must keep
	// for the store to take writes: below it Apply refuses with
	// RESOURCE_EXHAUSTED naming the disk, before anything is proposed
	// (default: one segment and 16 MiB; negative: no check).
	MinFreeBytes int64

	// Faults for tests: the file system under the raft log, the free space
	// the store sees, and a look at each batch of entries before it is
	// stored.
	walVFS    types.VFS
	freeSpace func(dir string) (uint64, error)
	logHook   func([]*raft.Log)
}

// Store is one member of the replicated store.
type Store struct {
	cfg    Config
	raft   *raft.Raft
	snaps  raft.SnapshotStore
	fsm    *fsm
	log    *diskLog
	meta   *metadb.BoltMetaDB
	trans  raft.Transport
	logger *slog.Logger
	// minFree is the free space Apply requires of the disk (0: no check).
	minFree uint64

	notify <-chan bool
	addr   raft.ServerAddress

	// mu guards closed: the proposer enqueues under the read lock, Close
	// marks the store closed under the write lock before shutting raft
	// down, so no proposal is enqueued after raft has stopped answering.
	mu       sync.RWMutex
	closed   bool
	closedCh chan struct{}
	// proposals feed the proposer (runProposer), which hands them to raft
	// past the commit gate; proposerDone is closed when it has stopped.
	proposals    chan *proposal
	gate         *commitGate
	proposerDone chan struct{}
	// nudging: a Nudge barrier is in flight.
	nudging atomic.Bool

	// leaderCh is closed (and replaced) when the leader this member knows
	// of changes (raft's leader observations); watchDone ends with the
	// goroutine that does it.
	leaderMu  sync.Mutex
	leaderCh  chan struct{}
	watchDone chan struct{}
}

// ErrUnreadable marks an Open error caused by the store's content (a
// damaged log or snapshot, a configuration that does not name this member):
// only then may a caller put the store aside and restore a backup. Errors of
// the environment (permissions, a full disk, too many open files, a raft
// port in use) never carry it: retrying later is right, discarding is not.
var ErrUnreadable = errors.New("the store is unreadable")

// unreadable marks err as ErrUnreadable unless the environment caused it.
func unreadable(err error) error {
	for _, env := range []error{fs.ErrPermission, syscall.ENOSPC, syscall.EMFILE, syscall.ENFILE, syscall.EIO, syscall.EROFS, syscall.EDQUOT} {
		if errors.Is(err, env) {
			return err
		}
	}
	return fmt.Errorf("%w: %w", ErrUnreadable, err)
}

// Open opens (or creates and bootstraps) the store in cfg.Dir and waits until
// this member leads, or ctx ends. An error wrapping ErrUnreadable means the
// store's content cannot be used: it is said only when the data directory
// itself reads and writes (raft does not keep the cause of every error it
// reports, so the environment is checked, not guessed).
func Open(ctx context.Context, cfg Config) (*Store, error) {
	s, err := open(ctx, cfg)
	if err != nil && errors.Is(err, ErrUnreadable) {
		if perr := probeDir(cfg.Dir); perr != nil {
			return nil, fmt.Errorf("%s; and the data directory itself fails: %w", err.Error(), perr)
		}
	}
	return s, err
}

// probeDir checks that every file under dir can be read and that dir takes
// a write that is synced: a store that fails that check fails because of
// its environment, not its content.
func probeDir(dir string) error {
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		if _, err := f.Read(make([]byte, 4096)); err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("read %s: %w", path, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".probe-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	if _, err := f.Write(make([]byte, 64<<10)); err != nil {
		return err
	}
	return f.Sync()
}

func open(ctx context.Context, cfg Config) (*Store, error) {
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
	if cfg.ProposalHold <= 0 {
		cfg.ProposalHold = defaultProposalHold
	}
	logger := cfg.Logger.With("component", "store")
	walDir := filepath.Join(cfg.Dir, "wal")
	snapDir := filepath.Join(cfg.Dir, "snapshots")
	for _, d := range []string{walDir, snapDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("store: %w", err)
		}
	}
	segmentSize := cfg.SegmentSize
	if segmentSize <= 0 {
		segmentSize = wal.DefaultSegmentSize
	}
	var minFree uint64
	switch {
	case cfg.MinFreeBytes == 0:
		minFree = uint64(segmentSize) + diskReserve
	case cfg.MinFreeBytes > 0:
		minFree = uint64(cfg.MinFreeBytes)
	}
	free := cfg.freeSpace
	if free == nil {
		free = (&cachedSpace{maxAge: 25 * time.Millisecond}).get
	}
	vfs := cfg.walVFS
	if vfs == nil {
		vfs = walfs.New()
	}
	// raft-wal's Close leaves its meta database open (and locked), so the
	// store owns it and closes it itself; a re-opened WAL shares it.
	meta := &metadb.BoltMetaDB{}
	openWAL := func() (walBackend, error) {
		return wal.Open(walDir, wal.WithLogger(hclogger(cfg.Logger, "raft-wal")), wal.WithMetaStore(meta),
			wal.WithSegmentSize(segmentSize), wal.WithSegmentFiler(segment.NewFiler(walDir, vfs)))
	}
	w, err := openWAL()
	if err != nil {
		_ = meta.Close()
		return nil, fmt.Errorf("store: open raft log in %s: %w", walDir, unreadable(err))
	}
	logs := &diskLog{dir: walDir, mount: mountPoint(walDir), segment: uint64(segmentSize), need: uint64(segmentSize) + diskReserve,
		open: openWAL, free: func() (uint64, error) { return free(walDir) }, now: time.Now, log: logger, hook: cfg.logHook, cur: w,
		repair: func() (bool, error) { return sealRotation(walDir, meta, logger) }}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(snapDir, 3, hclogger(cfg.Logger, "raft-snapshots"))
	if err != nil {
		_ = logs.Close()
		_ = meta.Close()
		return nil, fmt.Errorf("store: open snapshots in %s: %w", snapDir, unreadable(err))
	}
	gate := &commitGate{}
	logs.gate = gate
	f := &fsm{st: state.New(cfg.Limits), broker: cfg.Broker, logger: logger, onApply: cfg.OnApply, haltedCh: make(chan struct{}), gate: gate}

	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.MemberID)
	rc.Logger = hclogger(cfg.Logger, "raft")
	rc.BatchApplyCh = true
	rc.MaxAppendEntries = 256
	// The store restores the newest snapshot that verifies itself
	// (restoreSnapshots); raft only takes its index.
	rc.NoSnapshotRestoreOnStart = true
	// A single member elects itself quickly; the cluster issue tunes these
	// for multi-member use.
	rc.HeartbeatTimeout = 500 * time.Millisecond
	rc.ElectionTimeout = 500 * time.Millisecond
	if cfg.HeartbeatTimeout > 0 {
		rc.HeartbeatTimeout = cfg.HeartbeatTimeout
	}
	if cfg.ElectionTimeout > 0 {
		rc.ElectionTimeout = cfg.ElectionTimeout
	}
	rc.LeaderLeaseTimeout = rc.HeartbeatTimeout / 2
	notify := make(chan bool, 64)
	rc.NotifyCh = notify
	if cfg.SnapshotThreshold > 0 {
		rc.SnapshotThreshold = cfg.SnapshotThreshold
	}
	if cfg.SnapshotInterval > 0 {
		rc.SnapshotInterval = cfg.SnapshotInterval
	}
	if cfg.TrailingLogs > 0 {
		rc.TrailingLogs = cfg.TrailingLogs
	}
	trans, addr, err := newTransport(cfg, func() uint64 { return f.st.Snapshot().Generation() })
	if err != nil {
		_ = logs.Close()
		_ = meta.Close()
		return nil, err
	}
	closeAll := func() {
		if c, ok := trans.(raft.WithClose); ok {
			_ = c.Close()
		}
		_ = logs.Close()
		_ = meta.Close()
	}

	has, err := raft.HasExistingState(logs, logs, snaps)
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("store: inspect %s: %w", cfg.Dir, unreadable(err))
	}
	if !has && !cfg.Join {
		servers := cfg.Bootstrap
		if len(servers) == 0 {
			servers = []raft.Server{{ID: rc.LocalID, Address: addr, Suffrage: raft.Voter}}
		}
		if err := raft.BootstrapCluster(rc, logs, logs, snaps, trans, raft.Configuration{Servers: servers}); err != nil {
			closeAll()
			return nil, fmt.Errorf("store: bootstrap: %w", err)
		}
		logger.Info("bootstrapped a new store", "dir", cfg.Dir, "member", cfg.MemberID, "voters", len(servers))
	}
	// Verify what raft will start from: the newest snapshot that verifies,
	// and every entry after it (decision 0026).
	base, err := restoreSnapshots(snapDir, snaps, logs, f, logger)
	if err == nil {
		err = checkLog(logs, base)
	}
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("store: %s: %w", cfg.Dir, unreadable(err))
	}
	r, err := newRaft(rc, f, logs, snaps, trans)
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("store: start raft: %w", unreadable(err))
	}
	conf := raft.Configuration{}
	if cf := r.GetConfiguration(); cf.Error() == nil {
		conf = cf.Configuration()
	}
	// A store whose log lost its cluster configuration would wait for a
	// leadership that never comes: it is unreadable. (A joining member has
	// none yet, by design.)
	if (has || !cfg.Join) && !hasVoter(conf, rc.LocalID) {
		_ = r.Shutdown().Error()
		closeAll()
		return nil, fmt.Errorf("store: the raft store in %s has no configuration naming member %q as a voter (its log is damaged, or it belongs to another member or was removed from its cluster): %w", cfg.Dir, cfg.MemberID, ErrUnreadable)
	}
	s := &Store{cfg: cfg, raft: r, snaps: snaps, fsm: f, log: logs, meta: meta, trans: trans, logger: logger, minFree: minFree,
		closedCh: make(chan struct{}), notify: notify, addr: addr, leaderCh: make(chan struct{}), watchDone: make(chan struct{}),
		proposals: make(chan *proposal, proposalQueue), gate: gate, proposerDone: make(chan struct{})}
	s.watchLeader()
	go s.runProposer()
	if !standalone(conf, rc.LocalID) {
		// A cluster member: its peers decide who leads, and when.
		logger.Info("store open as a cluster member", "index", f.st.Snapshot().Index(), "voters", len(conf.Servers), "joining", len(conf.Servers) == 0, "raft_tls", cfg.RaftTLS != nil)
		return s, nil
	}
	if err := s.waitLeader(ctx); err != nil {
		_ = s.Close()
		return nil, err
	}
	// A standalone member that moved (a new raft port, or a store from the
	// in-memory transport now on TCP) updates its own address.
	if self := serverOf(conf, rc.LocalID); self.Address != addr {
		if err := r.AddVoter(rc.LocalID, addr, 0, cfg.ApplyTimeout).Error(); err != nil {
			_ = s.Close()
			return nil, fmt.Errorf("store: update this member's raft address to %s: %w", addr, err)
		}
	}
	// Make sure everything committed before the restart has been applied
	// before the first read.
	if err := r.Barrier(cfg.ApplyTimeout).Error(); err != nil {
		_ = s.Close()
		return nil, fmt.Errorf("store: barrier: %w", err)
	}
	if idx := f.corruptAt.Load(); idx != 0 {
		_ = s.Close()
		return nil, fmt.Errorf("store: the raft log entry at index %d does not decode: the log is damaged: %w", idx, ErrUnreadable)
	}
	if h := f.Halted(); h != nil {
		_ = s.Close()
		return nil, fmt.Errorf("store: %v: %w", h, ErrUnreadable)
	}
	logger.Info("store ready", "index", f.st.Snapshot().Index(), "last_log_index", r.LastIndex())
	return s, nil
}

// newRaft is raft.NewRaft, with a panic (raft panics on a log entry it
// cannot read) turned into an error: the store is unreadable.
func newRaft(rc *raft.Config, f raft.FSM, logs *diskLog, snaps raft.SnapshotStore, trans raft.Transport) (r *raft.Raft, err error) {
	defer func() {
		if p := recover(); p != nil {
			r, err = nil, fmt.Errorf("the raft store is unreadable: %v", p)
		}
	}()
	return raft.NewRaft(rc, f, logs, logs, snaps, trans)
}

// newTransport is raft's transport: in memory for a standalone member, TCP
// (or the given stream layer) for a cluster member, every connection
// introduced with the member's cluster generation (gen; transport.go).
func newTransport(cfg Config, gen func() uint64) (raft.Transport, raft.ServerAddress, error) {
	if cfg.RaftBind == "" && cfg.StreamLayer == nil {
		addr, trans := raft.NewInmemTransport(raft.ServerAddress(cfg.MemberID))
		return trans, addr, nil
	}
	var layer raft.StreamLayer
	if cfg.StreamLayer != nil {
		l, err := cfg.StreamLayer()
		if err != nil {
			return nil, "", fmt.Errorf("store: raft transport: %w", err)
		}
		layer = l
	} else {
		tl, err := newTCPLayer(cfg.RaftBind, cfg.RaftAdvertise, cfg.RaftTLS)
		if err != nil {
			return nil, "", fmt.Errorf("store: raft transport on %s: %w", cfg.RaftBind, err)
		}
		layer = tl
	}
	t := raft.NewNetworkTransportWithLogger(newGenLayer(layer, gen, cfg.Logger.With("component", "raft-net")), 3, 10*time.Second,
		hclogger(cfg.Logger, "raft-net"))
	return t, t.LocalAddr(), nil
}

// standalone reports whether the configuration is this member alone.
func standalone(c raft.Configuration, id raft.ServerID) bool {
	return len(c.Servers) == 1 && c.Servers[0].ID == id
}

func serverOf(c raft.Configuration, id raft.ServerID) raft.Server {
	for _, s := range c.Servers {
		if s.ID == id {
			return s
		}
	}
	return raft.Server{}
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
		if h := s.fsm.Halted(); h != nil {
			return fmt.Errorf("store: %v: %w", h, ErrUnreadable)
		}
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
	if err := s.WriteError(); err != nil {
		return state.Result{}, err
	}
	// The proposer stamps the command's checksum; every member verifies it
	// before applying the entry.
	tr := traceProposal(data)
	defer tr.done()
	f, err := s.propose(ctx, raft.Log{Data: data, Extensions: stampChecksum(data)}, timeout)
	if err != nil {
		return state.Result{}, err
	}
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
		var de *apierr.Error
		switch {
		case s.fsm.Halted() != nil:
			return state.Result{}, apierr.New(apierr.DataLoss, "%v", s.fsm.Halted())
		case errors.As(err, &de):
			// The log's own refusal (a full disk): nothing was written.
			return state.Result{}, err
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

// WriteError is why this member cannot take writes because of its own
// store, or nil: DATA_LOSS once it has stopped applying a damaged log
// (Halted), RESOURCE_EXHAUSTED naming the disk while it has less free
// space than the store keeps (Config.MinFreeBytes) or its raft log waits to
// be re-opened after a full disk. Apply checks it before proposing.
func (s *Store) WriteError() error {
	if h := s.fsm.Halted(); h != nil {
		return apierr.New(apierr.DataLoss, "%v", h)
	}
	if err := s.log.status(); err != nil {
		return err
	}
	if s.minFree > 0 {
		if free, err := s.log.free(); err == nil && free < s.minFree {
			return diskFullError(s.log.dir, s.log.mount, free, s.minFree, s.log.segment)
		}
	}
	return nil
}

// Halted is non-nil once this member has stopped applying its raft log
// because an entry failed its checksum (its copy is damaged): it says
// which entry. The member then takes no part in its cluster (raft is shut
// down) until it is restarted, when Open refuses the damaged store
// (ErrUnreadable).
func (s *Store) Halted() error { return s.fsm.Halted() }

// Disk describes the disk holding the store and whether it lets the store
// take writes.
func (s *Store) Disk() DiskStatus {
	d := DiskStatus{Dir: s.log.dir, Mount: s.log.mount, Need: s.minFree}
	d.Free, _ = s.log.free()
	if err := s.log.status(); err != nil {
		d.Err = err
	} else if s.minFree > 0 && d.Free < s.minFree {
		d.Err = diskFullError(s.log.dir, s.log.mount, d.Free, s.minFree, s.log.segment)
	}
	return d
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
	shut := s.raft.Shutdown()
	// Close the transport before waiting for raft: it closes it only after
	// joining its goroutines, and a replication goroutine whose peer went
	// silent without closing the connection waits out a timeout per
	// request in flight (a stopped member hung for 17 minutes in a CI
	// run). Closing it cuts every connection (genLayer.Close).
	if c, ok := s.trans.(raft.WithClose); ok {
		_ = c.Close()
	}
	err := shut.Error()
	<-s.watchDone
	<-s.proposerDone
	s.fsm.broker.Close()
	if cerr := s.log.Close(); err == nil {
		err = cerr
	}
	if cerr := s.meta.Close(); err == nil {
		err = cerr
	}
	return err
}
