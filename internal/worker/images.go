package worker

import (
	"context"

	"connectrpc.com/connect"
	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/runtime"
	"github.com/norsk-go/norsk-manager/internal/worker/ack"
	"github.com/norsk-go/norsk-manager/internal/worker/images"
)

// newImages makes the image inventory of rt (internal/worker/images).
func (a *Agent) newImages(rt runtime.Runtime) *images.Inventory {
	return images.New(images.Config{
		Runtime: rt,
		DataDir: a.cfg.DataDir,
		Clock:   a.clock,
		Log:     a.logger(),
		Go:      a.goOwned,
		Send:    a.sendOrKeep,
		NodeID:  a.NodeID,
	})
}

// onPrefetch hands a PrefetchImages command to the inventory; its
// acknowledgement is queued on sess.
func (a *Agent) onPrefetch(ctx context.Context, sess *session, seq uint64, cmd *managerv1.PrefetchImages) {
	reply := func(e *ack.Refusal) { sess.enqueue(ack.Message(seq, e)) }
	if a.images == nil { // not yet running
		reply(ack.Refuse(connect.CodeUnavailable, "the worker is starting"))
		return
	}
	a.images.Prefetch(ctx, cmd, reply)
}

// sendOrKeep sends msg on the current stream; keep says to hold it for the
// next stream when none is up (an inventory need not be kept: the next
// hello carries it).
func (a *Agent) sendOrKeep(msg *managerv1.WorkerMessage, keep bool) {
	a.pubMu.Lock()
	defer a.pubMu.Unlock()
	if a.cur != nil && a.cur.ctx.Err() == nil {
		a.cur.enqueue(msg)
		return
	}
	if keep {
		a.keepNoticeLocked(msg)
	}
}
