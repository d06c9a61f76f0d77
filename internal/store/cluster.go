package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/hashicorp/raft"
	wal "github.com/hashicorp/raft-wal"
	"github.com/hashicorp/raft-wal/metadb"

	"github.com/norsk-go/norsk-manager/internal/events"
	"github.com/norsk-go/norsk-manager/internal/store/state"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
)

// Server is a raft server of the membership: a member's id and raft address.
type Server = raft.Server

// Voter makes a voter server entry.
func Voter(id, addr string) raft.Server {
	return raft.Server{ID: raft.ServerID(id), Address: raft.ServerAddress(addr), Suffrage: raft.Voter}
}

// LeaderNotify delivers true when this member becomes the primary and false
// when it stops being it. One consumer reads it, promptly.
func (s *Store) LeaderNotify() <-chan bool { return s.notify }

// Leader is the primary this member knows of ("" when none).
func (s *Store) Leader() (id, addr string) {
	a, i := s.raft.LeaderWithID()
	return string(i), string(a)
}

// Addr is this member's raft address.
func (s *Store) Addr() string { return string(s.addr) }

// MemberID is this member's raft id.
func (s *Store) MemberID() string { return s.cfg.MemberID }

// Configuration is the raft configuration in force (the voters).
func (s *Store) Configuration() ([]raft.Server, error) {
	f := s.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, err
	}
	return f.Configuration().Servers, nil
}

// LastContact is when this member last heard from the primary (zero on the
// primary itself, or never).
func (s *Store) LastContact() time.Time { return s.raft.LastContact() }

// Term is raft's current term.
func (s *Store) Term() uint64 {
	t, _ := strconv.ParseUint(s.raft.Stats()["term"], 10, 64)
	return t
}

// CommitIndex is the highest log index known committed.
func (s *Store) CommitIndex() uint64 { return s.raft.CommitIndex() }

// VerifyLeader confirms this member still leads (a round of heartbeats).
func (s *Store) VerifyLeader() error {
	if err := s.raft.VerifyLeader().Error(); err != nil {
		return apierr.Unavailablef("this member is not the primary: %v", err)
	}
	return nil
}

// WaitApplied waits until this member's state has applied index (a follower
// catching up with a write it forwarded, or a linearizable read).
//
// Raft's own applied index is not enough: it counts an entry applied once
// it is handed to the FSM goroutine, before the state has changed. The
// state's index is exact but only moves on commands (barriers, no-ops and
// configuration changes never reach the FSM), so it cannot reach an index
// that names one of those: then the wait is for the last command at or
// before index.
func (s *Store) WaitApplied(ctx context.Context, index uint64) error {
	target, resolved := index, false
	for {
		applied := s.fsm.appliedCh() // before the check: no wake-up is missed
		si := s.State().Snapshot().Index()
		if si >= target {
			return nil
		}
		if !resolved && s.raft.AppliedIndex() >= index {
			target, resolved = s.lastCommandAtOrBefore(index, si), true
			if si >= target {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return apierr.New(apierr.DeadlineExceeded, "this member had not applied index %d in time", index)
		case <-s.closedCh:
			return apierr.Unavailablef("the store closed")
		case <-s.fsm.haltedCh:
			return apierr.New(apierr.DataLoss, "%v", s.fsm.Halted())
		case <-applied:
		case <-time.After(5 * time.Millisecond):
			// Raft's own index moves on entries the state never sees
			// (barriers, no-ops): look again.
		}
	}
}

// lastCommandAtOrBefore is the index of the last command entry in
// (floor, index], or floor when there is none. Called once raft has handed
// every entry up to index to the FSM; an entry no longer in the log is
// taken as applied (a snapshot holds it).
func (s *Store) lastCommandAtOrBefore(index, floor uint64) uint64 {
	for i := index; i > floor; i-- {
		var l raft.Log
		if err := s.log.GetLog(i, &l); err != nil {
			return floor
		}
		if l.Type == raft.LogCommand {
			return i
		}
	}
	return floor
}

// AddVoter adds (or re-addresses) a voting member. Primary only.
func (s *Store) AddVoter(id, addr string) error {
	if err := s.raft.AddVoter(raft.ServerID(id), raft.ServerAddress(addr), 0, s.cfg.ApplyTimeout).Error(); err != nil {
		return membershipErr("add member "+id, err)
	}
	return nil
}

// RemoveServer removes a member from the raft configuration. Primary only.
func (s *Store) RemoveServer(id string) error {
	if err := s.raft.RemoveServer(raft.ServerID(id), 0, s.cfg.ApplyTimeout).Error(); err != nil {
		return membershipErr("remove member "+id, err)
	}
	return nil
}

// TransferLeadership hands the primary role to another voter (to id, or to
// the most up-to-date one when id is empty).
func (s *Store) TransferLeadership(id, addr string) error {
	var f raft.Future
	if id == "" {
		f = s.raft.LeadershipTransfer()
	} else {
		f = s.raft.LeadershipTransferToServer(raft.ServerID(id), raft.ServerAddress(addr))
	}
	if err := f.Error(); err != nil {
		return membershipErr("hand the primary role over", err)
	}
	return nil
}

func membershipErr(what string, err error) error {
	if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) {
		return apierr.Unavailablef("%s: this member is not the primary: %v", what, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// RecoverStandalone rewrites the raft store in dir, offline, so that this
// member is a cluster of one, keeping its state: raft's own cluster
// recovery (RecoverCluster), never a hand-edited file. The store must be
// closed. It returns the index the state was recovered at.
func RecoverStandalone(cfg Config) (uint64, error) {
	walDir := filepath.Join(cfg.Dir, "wal")
	snapDir := filepath.Join(cfg.Dir, "snapshots")
	if _, err := os.Stat(walDir); err != nil {
		return 0, fmt.Errorf("no store in %s: %w", cfg.Dir, err)
	}
	logger := cfg.Logger
	meta := &metadb.BoltMetaDB{}
	w, err := wal.Open(walDir, wal.WithLogger(hclogger(logger, "raft-wal")), wal.WithMetaStore(meta))
	if err != nil {
		_ = meta.Close()
		return 0, fmt.Errorf("open raft log: %w", err)
	}
	defer meta.Close()
	defer w.Close()
	snaps, err := raft.NewFileSnapshotStoreWithLogger(snapDir, 3, hclogger(logger, "raft-snapshots"))
	if err != nil {
		return 0, fmt.Errorf("open snapshots: %w", err)
	}
	trans, addr, err := newTransport(Config{MemberID: cfg.MemberID, Logger: logger}, func() uint64 { return 0 })
	if err != nil {
		return 0, err
	}
	if cfg.RaftAdvertise != "" {
		addr = raft.ServerAddress(cfg.RaftAdvertise)
	}
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.MemberID)
	rc.Logger = hclogger(logger, "raft")
	f := &fsm{st: state.New(cfg.Limits), broker: events.New(16), logger: logger}
	conf := raft.Configuration{Servers: []raft.Server{{ID: rc.LocalID, Address: addr, Suffrage: raft.Voter}}}
	if err := raft.RecoverCluster(rc, f, w, w, snaps, trans, conf); err != nil {
		if h := f.Halted(); h != nil {
			return 0, fmt.Errorf("recover the cluster as %s alone: %v: %w", cfg.MemberID, h, ErrUnreadable)
		}
		return 0, fmt.Errorf("recover the cluster as %s alone: %w", cfg.MemberID, err)
	}
	return f.st.Snapshot().Index(), nil
}

// Barrier waits until everything committed before it has been applied
// (a new primary does this before acting on its state). Primary only.
func (s *Store) Barrier() error {
	if err := s.raft.Barrier(s.cfg.ApplyTimeout).Error(); err != nil {
		return membershipErr("barrier", err)
	}
	return nil
}

// Nudge makes the primary tell its followers its commit index now rather
// than at the next heartbeat (a tenth of the heartbeat timeout): it appends
// a barrier entry, whose replication carries the commit index. A follower
// waiting to apply a write it forwarded then answers in a round trip. At
// most one nudge is in flight; under load they coalesce (every new entry
// carries the commit index anyway). Primary only; errors are ignored.
func (s *Store) Nudge() {
	if !s.nudging.CompareAndSwap(false, true) {
		return
	}
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		s.nudging.Store(false)
		return
	}
	f := s.raft.Barrier(s.cfg.ApplyTimeout)
	s.mu.RUnlock()
	go func() {
		_ = f.Error()
		s.nudging.Store(false)
	}()
}

// LastIndex is the last index in this member's raft log or snapshot (0: an
// empty store).
func (s *Store) LastIndex() uint64 { return s.raft.LastIndex() }

// AddNonvoter adds a member that receives the log but does not vote yet (a
// joining member catches up first; AddVoter promotes it). Primary only.
func (s *Store) AddNonvoter(id, addr string) error {
	if err := s.raft.AddNonvoter(raft.ServerID(id), raft.ServerAddress(addr), 0, s.cfg.ApplyTimeout).Error(); err != nil {
		return membershipErr("add member "+id+" (not voting yet)", err)
	}
	return nil
}

// LeaderChanged is closed when the leader this member knows of next changes
// (to another member, or to none when it loses contact).
func (s *Store) LeaderChanged() <-chan struct{} {
	s.leaderMu.Lock()
	defer s.leaderMu.Unlock()
	return s.leaderCh
}

// watchLeader turns raft's leader observations into LeaderChanged. Its
// goroutine ends when the store closes.
func (s *Store) watchLeader() {
	obs := make(chan raft.Observation, 16)
	o := raft.NewObserver(obs, false, func(o *raft.Observation) bool {
		_, ok := o.Data.(raft.LeaderObservation)
		return ok
	})
	s.raft.RegisterObserver(o)
	go func() {
		defer close(s.watchDone)
		defer s.raft.DeregisterObserver(o)
		halted := s.fsm.haltedCh
		for {
			select {
			case <-s.closedCh:
				return
			case <-halted:
				// A member whose log is damaged takes no further part:
				// it neither votes nor leads nor acknowledges entries it
				// would not apply. Its peers carry on without it.
				halted = nil
				s.logger.Error("STORE HALTED: shutting raft down on this member; restart it to rejoin with a fresh copy or restore a backup",
					"err", s.fsm.Halted())
				if err := s.raft.Shutdown().Error(); err != nil {
					s.logger.Warn("raft shutdown after the halt", "err", err)
				}
			case <-obs:
				s.leaderMu.Lock()
				close(s.leaderCh)
				s.leaderCh = make(chan struct{})
				s.leaderMu.Unlock()
			}
		}
	}()
}
