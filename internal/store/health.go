package store

import (
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/raft"
)

// RaftHealth is this member's raft state for metrics: read from raft's
// own counters, no I/O but the snapshot listing.
type RaftHealth struct {
	Leader       bool
	Term         uint64
	CommitIndex  uint64
	AppliedIndex uint64
	LastIndex    uint64
	// LastContact is when this member last heard from the leader (zero on
	// the leader and before any contact).
	LastContact time.Time
	// SnapshotIndex and SnapshotAt are the newest raft snapshot's index
	// and when raft took it (zero: none yet).
	SnapshotIndex uint64
	SnapshotAt    time.Time
}

// Health reads this member's raft state.
func (s *Store) Health() RaftHealth {
	h := RaftHealth{
		Leader: s.raft.State() == raft.Leader, Term: s.raft.CurrentTerm(), CommitIndex: s.raft.CommitIndex(),
		AppliedIndex: s.raft.AppliedIndex(), LastIndex: s.raft.LastIndex(),
	}
	if !h.Leader {
		h.LastContact = s.raft.LastContact()
	}
	if s.snaps != nil {
		if metas, err := s.snaps.List(); err == nil && len(metas) > 0 {
			h.SnapshotIndex = metas[0].Index
			h.SnapshotAt = snapshotTime(metas[0].ID)
		}
	}
	return h
}

// snapshotTime reads the time raft's file snapshot store names a snapshot
// by ("<term>-<index>-<unix ms>"); zero if the id is not of that form.
func snapshotTime(id string) time.Time {
	i := strings.LastIndexByte(id, '-')
	if i < 0 {
		return time.Time{}
	}
	ms, err := strconv.ParseInt(id[i+1:], 10, 64)
	if err != nil {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}
