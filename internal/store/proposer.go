package store

import (
	"context"
	"time"

	"github.com/hashicorp/raft"

	"github.com/norsk-go/norsk-manager/pkg/apierr"
)

// proposal is one write waiting to be handed to raft by the proposer.
type proposal struct {
	ctx     context.Context
	log     raft.Log
	timeout time.Duration
	// fut receives raft's future, or nil when the proposal was dropped
	// unproposed (its caller gave up, or the store closed). Buffered: the
	// proposer never waits for a caller.
	fut chan raft.ApplyFuture
}

// defaultProposalHold bounds how long the commit gate holds a proposal
// (Config.ProposalHold): longer than a healthy log write, short enough
// that a gate that never opens costs a caller little.
const defaultProposalHold = 20 * time.Millisecond

// proposalQueue is how many proposals may wait for the proposer before a
// caller waits to queue one.
const proposalQueue = 4096

// runProposer hands proposals to raft: it takes the first waiting, holds
// it while the commit gate is shut (commitGate), then takes every proposal
// that queued meanwhile and hands them to raft back to back, so the leader
// loop takes them into one log write. It runs from Open until Close; Close
// waits for it.
func (s *Store) runProposer() {
	defer close(s.proposerDone)
	limit := func() <-chan time.Time { return time.After(s.cfg.ProposalHold) }
	var batch []*proposal
	for {
		batch = batch[:0]
		select {
		case p := <-s.proposals:
			batch = append(batch, p)
		case <-s.closedCh:
			return
		}
		s.gate.wait(s.closedCh, limit)
	drain:
		for {
			select {
			case p := <-s.proposals:
				batch = append(batch, p)
			default:
				break drain
			}
		}
		// Under the read lock, as Apply did: Close cannot shut raft down
		// between the check and the enqueue, so no proposal is enqueued
		// after raft stopped answering.
		s.mu.RLock()
		for _, p := range batch {
			if s.closed || p.ctx.Err() != nil {
				p.fut <- nil
				continue
			}
			p.fut <- s.raft.ApplyLog(p.log, p.timeout)
		}
		s.mu.RUnlock()
		clear(batch)
	}
}

// propose queues l for the proposer and returns raft's future for it. It
// fails with DEADLINE_EXCEEDED when ctx ends and UNAVAILABLE when the store
// closes; the message says whether the write may still be applied (once the
// proposer took it, it may).
func (s *Store) propose(ctx context.Context, l raft.Log, timeout time.Duration) (raft.ApplyFuture, error) {
	p := &proposal{ctx: ctx, log: l, timeout: timeout, fut: make(chan raft.ApplyFuture, 1)}
	select {
	case s.proposals <- p:
	case <-ctx.Done():
		return nil, apierr.New(apierr.DeadlineExceeded, "write not proposed before the caller gave up (%v)", ctx.Err())
	case <-s.closedCh:
		return nil, apierr.Unavailablef("the store is closed")
	}
	select {
	case f := <-p.fut:
		if f != nil {
			return f, nil
		}
		if err := ctx.Err(); err != nil {
			return nil, apierr.New(apierr.DeadlineExceeded, "write not proposed before the caller gave up (%v)", err)
		}
		return nil, apierr.Unavailablef("the store is closed")
	case <-ctx.Done():
		return nil, apierr.New(apierr.DeadlineExceeded, "write not acknowledged before the caller gave up (%v); it may still be applied", ctx.Err())
	case <-s.closedCh:
		return nil, apierr.Unavailablef("the store closed before the write was acknowledged; it may still have been applied")
	}
}
