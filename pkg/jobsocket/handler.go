package jobsocket

import (
	"context"
	"errors"
)

// Identity is what the worker tells a job about itself in hello_ack.
type Identity struct {
	// Protocol is the worker's protocol version ("1").
	Protocol string
	JobID    string
	// Role is the instance key the worker holds the instance under: the
	// slot ("primary"), or for a migration target the slot and the first
	// eight hex digits of the migration id ("primary@3f9c1e2a").
	Role string
	// RuntimeRole is the slot the job is told (NORSK_RUNTIME_ROLE).
	RuntimeRole string
	NodeID      string
	// MigrationID is the migration the instance was started as the target
	// of (any strategy); empty for an instance that is no target, or whose
	// handover has been applied.
	MigrationID string
	// Handover: the instance is the target of a handover migration that has
	// not been applied. initial_state follows hello_ack (unless the worker
	// already has the job's ready), and the job must not start output
	// until apply_from. It stays set after an abort: an aborted target
	// stays silent until it is stopped.
	Handover bool
}

// Handler is the application's side of the job socket. Session.Run calls
// its methods from one goroutine, one at a time, in the order the worker's
// messages arrive; a method that blocks delays the messages after it (and
// its own reply), so keep them short. ctx ends when the stream it came on
// ends (or Run's context does).
//
// Payloads are the application's own bytes: the Manager relays them between
// the source and the target without reading them, except the apply summary
// (OnApplyFrom), which it decodes as JSON
// {"applied": [ids], "failed": [{"id", "reason"}], "skewMs": n}.
// Payload slices are the handler's to keep.
//
// Embed NopHandler to implement only what the application needs.
type Handler interface {
	// OnAttached is called after every hello_ack: the first attach and
	// every re-attach after a reconnect.
	OnAttached(ctx context.Context, id Identity)
	// OnInitialState hands a migration target the source's state (its
	// answer to get-state, possibly empty). The target answers with
	// Session.Ready when it can start output; it must not start until
	// OnApplyFrom. It may come again after a reconnect if the worker had
	// not received the ready.
	OnInitialState(ctx context.Context, migrationID string, payload []byte)
	// OnGetState asks a migration source for the state it would hand over
	// (the propose). Return the payload (possibly empty) to accept, or a
	// non-empty refused to refuse the handover. Answering locks the
	// instance for this migration on the worker until it is aborted or the
	// instance stops.
	OnGetState(ctx context.Context, migrationID string) (payload []byte, refused string)
	// OnStopOutputAt tells the source the target is ready (payload: the
	// target's ready payload). Stop output at or after a point of the
	// source's choosing and return where (stopped_output): the Manager
	// hands it to the target, which starts exactly there. An error gives
	// the migration up: Run sends abort with the error's text instead.
	OnStopOutputAt(ctx context.Context, migrationID string, payload []byte) (stoppedAt []byte, err error)
	// OnApplyFrom tells the target where the source stopped (payload: the
	// source's stopped_output payload). Begin output from there and return
	// the apply summary (applied). An error gives the migration up: Run
	// sends abort with the error's text instead.
	OnApplyFrom(ctx context.Context, migrationID string, payload []byte) (summary []byte, err error)
	// OnAbort ends the migration: a source resumes output from where it
	// stopped, a target drops what it was handed (and stays silent: the
	// Manager stops it). An abort of a migration the job is not in is to be
	// ignored.
	OnAbort(ctx context.Context, migrationID, reason string)
}

// ErrNoHandover is what NopHandler answers a stop or an apply with.
var ErrNoHandover = errors.New("this job does not hand over its output")

// NopHandler implements Handler for a job that takes part in no handover:
// it refuses get-state, gives up a stop or an apply (ErrNoHandover), and
// ignores the rest. Embed it and override what the job supports.
type NopHandler struct{}

var _ Handler = NopHandler{}

// OnAttached does nothing.
func (NopHandler) OnAttached(context.Context, Identity) {}

// OnInitialState does nothing.
func (NopHandler) OnInitialState(context.Context, string, []byte) {}

// OnGetState refuses the handover.
func (NopHandler) OnGetState(context.Context, string) ([]byte, string) {
	return nil, ErrNoHandover.Error()
}

// OnStopOutputAt gives the migration up.
func (NopHandler) OnStopOutputAt(context.Context, string, []byte) ([]byte, error) {
	return nil, ErrNoHandover
}

// OnApplyFrom gives the migration up.
func (NopHandler) OnApplyFrom(context.Context, string, []byte) ([]byte, error) {
	return nil, ErrNoHandover
}

// OnAbort does nothing.
func (NopHandler) OnAbort(context.Context, string, string) {}
