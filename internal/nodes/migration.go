package nodes

import (
	"context"
	"errors"
	"fmt"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
)

// outbound is a command an API handler asks a connection to send (the
// migration handshake); done receives the worker's verdict once it has
// acknowledged the command, or why it could not be sent.
type outbound struct {
	msg  *managerv1.ControllerMessage
	done chan error
}

// ErrNotConnected: the node's worker has no stream to this member now.
var ErrNotConnected = errors.New("the node's worker is not connected")

// SendMigration sends a migration command (msg.Msg one of the
// migration_* kinds) to nodeID's worker and waits until the worker has
// acknowledged it, which it does once it has told the instance's job (or
// refused). The error is an *apierr.Error: the worker's refusal with its
// code, UNAVAILABLE when the worker is not connected or its stream ended
// before the answer, or the context's. Safe for concurrent use.
func (c *Controller) SendMigration(ctx context.Context, nodeID string, msg *managerv1.ControllerMessage) error {
	return c.SendCommand(ctx, nodeID, msg)
}

// SendCommand sends a command an API call asks for (the migration
// handshake, PrefetchImages) to nodeID's worker and waits until the worker
// has acknowledged it. Errors as SendMigration's. Safe for concurrent use.
func (c *Controller) SendCommand(ctx context.Context, nodeID string, msg *managerv1.ControllerMessage) error {
	c.mu.Lock()
	cn := c.conns[nodeID]
	connected := c.live[nodeID].Connected
	c.mu.Unlock()
	if cn == nil || !connected {
		return apierr.Unavailablef("node %s: %v", nodeID, ErrNotConnected)
	}
	o := outbound{msg: msg, done: make(chan error, 1)}
	select {
	case cn.out <- o:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-o.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// sendOutbound sends o on the session's stream and registers its waiter.
func (s *sessionState) sendOutbound(cn *conn, send func(*managerv1.ControllerMessage) error, o outbound) error {
	s.seq++
	o.msg.Seq = s.seq
	if err := send(o.msg); err != nil {
		o.done <- apierr.Unavailablef("node %s: sending to its worker failed: %v", cn.nodeID, err)
		return fmt.Errorf("send %s command: %w", outboundKind(o.msg), err)
	}
	if s.waiters == nil {
		s.waiters = map[uint64]chan error{}
	}
	s.waiters[s.seq] = o.done
	if m := cn.c.cfg.Metrics; m != nil {
		m.CommandsSent.WithLabelValues(outboundKind(o.msg)).Inc()
	}
	return nil
}

// outboundKind names an API-asked command for logs and metrics.
func outboundKind(m *managerv1.ControllerMessage) string {
	if m.GetPrefetchImages() != nil {
		return "prefetch_images"
	}
	return "migration"
}

// answer hands a waiter the worker's acknowledgement of seq.
func (s *sessionState) answer(ack *managerv1.CommandAck) bool {
	ch, ok := s.waiters[ack.GetSeq()]
	if !ok {
		return false
	}
	delete(s.waiters, ack.GetSeq())
	if ack.GetError() == "" {
		ch <- nil
	} else {
		ch <- apierr.New(apierr.ParseCode(ack.GetErrorCode()), "%s", ack.GetError())
	}
	return true
}

// failWaiters answers every command still waiting when the stream ends.
func (s *sessionState) failWaiters(nodeID string, why error) {
	for seq, ch := range s.waiters {
		ch <- apierr.Unavailablef("node %s: its worker's stream ended before it answered (%v)", nodeID, why)
		delete(s.waiters, seq)
	}
}

// failQueued answers the commands queued for a stream that is gone.
func (cn *conn) failQueued() {
	for {
		select {
		case o := <-cn.out:
			o.done <- apierr.Unavailablef("node %s: %v", cn.nodeID, ErrNotConnected)
		default:
			return
		}
	}
}

// recordMigrationReports applies a batch of handshake reports: the store
// turns each into its migration event.
func (cn *conn) recordMigrationReports(ctx context.Context, batch []*managerv1.MigrationReport) error {
	if len(batch) == 0 {
		return nil
	}
	if _, err := cn.c.apply(ctx, &storev1.Command{Cmd: &storev1.Command_MigrationReports{MigrationReports: &storev1.MigrationReports{NodeId: cn.nodeID, Reports: batch}}}); err != nil {
		return fmt.Errorf("record %d migration report(s) of node %s: %w", len(batch), cn.nodeID, err)
	}
	return nil
}
