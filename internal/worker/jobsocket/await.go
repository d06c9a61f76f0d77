package jobsocket

import (
	"time"

	"connectrpc.com/connect"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/worker/ack"
)

// A get_state held for a job that has not attached yet.
//
// An instance is reported RUNNING once its services have started, but its
// job attaches to the socket a moment later (a container's process has to
// start and dial). A handover asked for in that window (a migration right
// after `bundle create --wait`, or an AutoManager repair of a job that has
// just started) would be refused with "no job socket session" although the
// job is about to answer. So a get_state that finds no stream on a socket
// whose job has never attached, within AttachGrace of the socket's opening,
// is held: it is sent right after the job's hello_ack, and acknowledged
// then; it is refused as before when the grace runs out first (the job does
// not speak the job socket), when the instance stops, when an abort of its
// migration arrives, or when a get_state of another migration replaces it.
// A job that attached once and dropped its stream is refused at once, as
// before: it is not starting, and the Manager retries or aborts.
//
// DefaultAttachGrace is below the Manager's 15 s bound on the call, so a
// held get_state is always answered before the Manager gives up on it.

// DefaultAttachGrace is how long after a socket opens a get_state waits
// for the job's first attach (Config.AttachGrace).
const DefaultAttachGrace = 10 * time.Second

// heldGetState is a get_state waiting for the job's first attach.
type heldGetState struct {
	id    string
	reply func(*ack.Refusal)
	// done is closed once the hold is over (sent, refused): the timer's
	// goroutine ends with it.
	done chan struct{}
}

// mayHold reports whether a get_state that found no stream may wait for
// the job's first attach; s.mu held.
func (s *jobSocket) mayHold() bool {
	return s.nextAtt == 0 && s.m.now().Sub(s.opened) < s.m.attachGrace()
}

// hold keeps a get_state of migration id until the job attaches (sendHeld)
// or the grace runs out; s.mu held. A get_state held before it (of another
// migration: a repeat of the same one takes its place too) is refused.
func (s *jobSocket) hold(id string, reply func(*ack.Refusal)) {
	s.endHold(ack.Refuse(connect.CodeFailedPrecondition, "instance %s: a get_state of migration %s replaced this one before the job attached", s.key, id))
	h := &heldGetState{id: id, reply: reply, done: make(chan struct{})}
	s.waiting = h
	wait := s.m.attachGrace() - s.m.now().Sub(s.opened)
	s.log.Info("migration: the job has not attached yet; get_state waits for it", "migration_id", id, "wait", wait.Round(time.Millisecond))
	t := s.m.clock().NewTimer(wait)
	s.m.wg.Add(1)
	go func() {
		defer s.m.wg.Done()
		defer t.Stop()
		select {
		case <-h.done:
		case <-t.C():
			s.mu.Lock()
			if s.waiting == h {
				s.endHold(s.noSessionWithin())
			}
			s.mu.Unlock()
		}
	}()
}

// endHold refuses the held get_state (if any) with why; s.mu held.
func (s *jobSocket) endHold(why *ack.Refusal) {
	h := s.waiting
	if h == nil {
		return
	}
	s.waiting = nil
	close(h.done)
	h.reply(why)
}

// sendHeld sends the held get_state on the job's new stream att, if its
// migration is still the instance's; s.mu held.
func (s *jobSocket) sendHeld(att *attachment) {
	h := s.waiting
	if h == nil {
		return
	}
	if s.mig.side != sideSource || s.mig.id != h.id {
		s.endHold(ack.Refuse(connect.CodeFailedPrecondition, "instance %s: migration %s ended before the job attached", s.key, h.id))
		return
	}
	s.waiting = nil
	close(h.done)
	s.log.Info("migration: the job attached; asking it for its state", "migration_id", h.id)
	att.push(&managerv1.JobSocketToJob{Msg: &managerv1.JobSocketToJob_GetState{GetState: &managerv1.JobSocketGetState{
		MigrationId: h.id,
	}}}, s.told("get_state", h.reply))
}

// noSessionWithin is the refusal of a held get_state whose job did not
// attach within the grace.
func (s *jobSocket) noSessionWithin() *ack.Refusal {
	return ack.Refuse(connect.CodeFailedPrecondition, "instance %s has no job socket session: the job did not attach within %s of its start (is --job-socket on and does the job attach?)", s.key, s.m.attachGrace())
}
