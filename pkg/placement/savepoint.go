package placement

// A savepoint lets a caller that keeps one State for a long time (the
// AutoManager keeps the fleet's across passes) try placements on it and
// take them back: a pass commits what it plans, so that the next slot sees
// the room the last one took, and rolls back before it returns, because
// the bindings it made come back as the store's own once they apply.

// undo is one Commit or Remove done since the savepoint.
type undo struct {
	committed bool       // a Commit (undone by Remove), else a Remove (undone by Commit)
	a         Allocation // the allocation committed or removed
}

// Savepoint starts recording what Commit and Remove do, until Rollback.
// A savepoint already open is kept (savepoints do not nest).
func (s *State) Savepoint() {
	if s.journal == nil {
		s.journal = []undo{}
	}
}

// Rollback undoes, newest first, every Commit and Remove since Savepoint
// and stops recording: the State then answers every request as it did at
// the savepoint. Without a savepoint it does nothing.
func (s *State) Rollback() {
	j := s.journal
	s.journal = nil
	for i := len(j) - 1; i >= 0; i-- {
		if u := j[i]; u.committed {
			s.Remove(u.a.JobID, u.a.Role)
		} else {
			// It was bound before, so it binds again; its requirement was
			// valid then.
			_ = s.Commit(u.a)
		}
	}
}

// record notes a Commit or Remove while a savepoint is open.
func (s *State) record(committed bool, a Allocation) {
	if s.journal != nil {
		s.journal = append(s.journal, undo{committed: committed, a: a})
	}
}
