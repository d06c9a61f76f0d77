package store

import "time"

// PhaseTimes is where the store's writes proposed on this member spent
// their time, as means over Proposals writes: from the proposal to the
// start of the raft-log write that holds it (waiting for the write before
// it), the log write itself (raft-wal's append and fsync, shared by its
// batch), from the end of the write to the FSM (commit, dispatch, the
// entries before it in the FSM), the FSM's apply of the command (go-memdb,
// the audit entry, events), and from the FSM back to Apply's caller.
//
// The store measures them only when built with the writepathtrace tag
// (`go test -tags writepathtrace ./bench/compare ...`): the tracing keys
// each write by its encoded bytes and costs a map operation per step.
// Without the tag Phases is zero and the hooks compile to nothing.
type PhaseTimes struct {
	Proposals                              int64
	ToLogWrite, LogWrite, ToFSM, FSM, Back time.Duration
}
