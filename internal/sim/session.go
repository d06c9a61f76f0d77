package sim

import (
	"context"
	"errors"
	"sync"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
)

// session is one Control stream's outbound side: a FIFO that the stream's
// handler goroutine alone drains, so that sends never run concurrently.
type session struct {
	id     uint64
	ctx    context.Context
	cancel context.CancelCauseFunc

	mu    sync.Mutex
	queue []*managerv1.WorkerMessage
	wake  chan struct{}
}

// Why a session ends.
var (
	errReplaced = errors.New("the Control stream was replaced by a newer one")
	errShutdown = errors.New("the simulated fleet is shutting down")
)

// enqueue queues msg without blocking; a message queued on an ended
// session is dropped.
func (s *session) enqueue(msg *managerv1.WorkerMessage) {
	if s.ctx.Err() != nil {
		return
	}
	s.mu.Lock()
	s.queue = append(s.queue, msg)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// take returns every queued message and empties the queue.
func (s *session) take() []*managerv1.WorkerMessage {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.queue
	s.queue = nil
	return q
}
