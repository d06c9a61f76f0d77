package instance

import (
	"context"
	"errors"
	"fmt"

	"connectrpc.com/connect"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/worker/ack"
)

// preparing is the Prepare in flight on an instance's actor (a pull can take
// minutes): the token it prepares and how to cancel it. enqueue cancels it
// when an event that ends that binding arrives (a stop of it, a start of a
// newer binding, the node's own stop), so the actor, blocked in Prepare,
// reaches that event at once instead of after the pull.
type preparing struct {
	token    uint64
	cancel   context.CancelFunc
	overtook bool // cancelled by such an event
}

// errOvertaken: the Prepare was cancelled by an event that ends its
// binding; the event, next in the actor's queue, settles the instance.
var errOvertaken = errors.New("prepare cancelled: a stop or a newer binding arrived")

// prepareContext opens the context a Prepare of token runs under; done
// closes it and reports whether an event overtook it.
func (in *instance) prepareContext(token uint64) (ctx context.Context, done func() bool) {
	ctx, cancel := context.WithCancel(in.ctx())
	p := &preparing{token: token, cancel: cancel}
	in.mu.Lock()
	in.preparing = p
	in.mu.Unlock()
	return ctx, func() bool {
		in.mu.Lock()
		in.preparing = nil
		overtook := p.overtook
		in.mu.Unlock()
		cancel()
		return overtook
	}
}

// overtakes reports whether ev, just queued, ends the binding a Prepare of
// token prepares. Called with in.mu held.
func overtakes(ev event, token uint64) bool {
	switch ev := ev.(type) {
	case stopEvent:
		return true
	case commandEvent:
		switch m := ev.msg.GetMsg().(type) {
		case *managerv1.ControllerMessage_Stop:
			t := m.Stop.GetFencingToken()
			return t == 0 || t >= token
		case *managerv1.ControllerMessage_Start:
			return m.Start.GetFencingToken() > token
		}
	}
	return false
}

// cancelOvertakenPrepare is enqueue's half: with in.mu held.
func (in *instance) cancelOvertakenPrepare(ev event) {
	if p := in.preparing; p != nil && !p.overtook && overtakes(ev, p.token) {
		p.overtook = true
		p.cancel()
	}
}

// abandonStart answers a start whose Prepare a stop or a newer binding
// overtook: the instance stays as it is (its record says running is
// desired, nothing runs), and the event queued behind settles it — the
// stop stops it with the stop's own reason, a newer start replaces it.
// It is not a failure of the job.
func (in *instance) abandonStart() *ack.Refusal {
	if in.ctx().Err() != nil {
		return errShuttingDown
	}
	in.log.Info("start abandoned during its preparation: a stop or a newer binding arrived")
	return ack.Refuse(connect.CodeAborted, "%v", fmt.Errorf("instance %s: %w", in.key, errOvertaken))
}
