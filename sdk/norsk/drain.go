package norsk

import (
	"context"
	"fmt"
	"strings"
	"time"

	"connectrpc.com/connect"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
)

// From norsk/manager/v1/drain.proto.
type (
	NodeDrain       = managerv1.NodeDrain
	DrainItem       = managerv1.DrainItem
	NodeDrainState  = managerv1.NodeDrainState
	DrainItemResult = managerv1.DrainItemResult
)

// Event_NodeDrainUpdated is the event of a drain's progress (the whole
// drain: started, an item's result changed, ended).
type Event_NodeDrainUpdated = managerv1.Event_NodeDrainUpdated

// A drain's states and its items' results.
const (
	DrainRunning    = managerv1.NodeDrainState_NODE_DRAIN_STATE_RUNNING
	DrainDrained    = managerv1.NodeDrainState_NODE_DRAIN_STATE_DRAINED
	DrainNotDrained = managerv1.NodeDrainState_NODE_DRAIN_STATE_NOT_DRAINED
	DrainCancelled  = managerv1.NodeDrainState_NODE_DRAIN_STATE_CANCELLED

	DrainItemPending = managerv1.DrainItemResult_DRAIN_ITEM_RESULT_PENDING
	DrainItemMoving  = managerv1.DrainItemResult_DRAIN_ITEM_RESULT_MOVING
	DrainItemMoved   = managerv1.DrainItemResult_DRAIN_ITEM_RESULT_MOVED
	DrainItemFailed  = managerv1.DrainItemResult_DRAIN_ITEM_RESULT_FAILED
	DrainItemSkipped = managerv1.DrainItemResult_DRAIN_ITEM_RESULT_SKIPPED
	DrainItemStopped = managerv1.DrainItemResult_DRAIN_ITEM_RESULT_STOPPED
	DrainItemGone    = managerv1.DrainItemResult_DRAIN_ITEM_RESULT_GONE
)

// DrainStateName is a drain's state in one word ("running", "notDrained").
func DrainStateName(s NodeDrainState) string {
	return camel(strings.TrimPrefix(s.String(), "NODE_DRAIN_STATE_"))
}

// DrainItemResultName is an item's result in one word ("moving").
func DrainItemResultName(r DrainItemResult) string {
	return camel(strings.TrimPrefix(r.String(), "DRAIN_ITEM_RESULT_"))
}

// DrainOptions are DrainNode's options; the zero value is the default drain.
type DrainOptions struct {
	// Strategy of each move; unset: overlap (make-before-break).
	Strategy MigrationStrategy
	// Deadline after which what has not moved is stopped; 0: one hour.
	// Whole milliseconds, at most 7 days.
	Deadline time.Duration
	// NoDeadline: wait for every move however long it takes.
	NoDeadline bool
	// Parallel is how many moves run at once; 0: 2.
	Parallel int
	// Undo cancels the node's running drain (moves already started finish)
	// and lets the node take new work again; no other option may be set.
	Undo bool
}

// DrainNode drains a node in the Manager: the node takes no new work and
// the primary's AutoManager moves every AutoManager-placed job away, as
// DrainOptions say, resuming after a Manager restart or failover. It
// returns the drain as stored, and attached = true when the node already
// had a drain running (answered as it stands, opts not applied: re-attach
// by calling again). Follow it with the node_drain_updated events or
// NodeDrain. Errors: ErrNotFound (no node), ErrInvalidArgument.
func (m *Manager) DrainNode(ctx context.Context, nodeID string, opts DrainOptions) (d *NodeDrain, attached bool, err error) {
	const op = "DrainNode"
	if err := m.alive(op); err != nil {
		return nil, false, err
	}
	if opts.Parallel < 0 || opts.Deadline < 0 {
		return nil, false, &Error{Op: op, Code: connect.CodeInvalidArgument, Message: "parallel and deadline must not be negative"}
	}
	res, err := m.client.DrainNode(ctx, connect.NewRequest(&managerv1.DrainNodeRequest{
		NodeId: nodeID, Strategy: opts.Strategy, DeadlineMs: opts.Deadline.Milliseconds(),
		NoDeadline: opts.NoDeadline, Parallel: uint32(opts.Parallel), Undo: opts.Undo,
	}))
	if err != nil {
		return nil, false, wrapError(op, err)
	}
	return res.Msg.GetDrain(), res.Msg.GetAttached(), nil
}

// NodeDrain is the node's latest drain (running or ended). Errors:
// ErrNotFound (no such node, or it was never drained with DrainNode).
func (m *Manager) NodeDrain(ctx context.Context, nodeID string) (*NodeDrain, error) {
	const op = "NodeDrain"
	if err := m.alive(op); err != nil {
		return nil, err
	}
	res, err := m.client.ListNodes(ctx, connect.NewRequest(&managerv1.ListNodesRequest{}))
	if err != nil {
		return nil, wrapError(op, err)
	}
	for _, n := range res.Msg.GetNodes() {
		if n.GetNodeId() != nodeID {
			continue
		}
		if n.GetDrain() == nil {
			return nil, &Error{Op: op, Code: connect.CodeNotFound, Message: fmt.Sprintf("node %s has never been drained", nodeID)}
		}
		return n.GetDrain(), nil
	}
	return nil, &Error{Op: op, Code: connect.CodeNotFound, Message: fmt.Sprintf("no node %s", nodeID)}
}

// RecordNodeDrain is the AutoManager's write-back of a drain's progress:
// it replaces the running drain if still at expectedRevision and returns
// the new revision. Errors: ErrFailedPrecondition (the revision moved, the
// drain ended or was undone), ErrNotFound, ErrInvalidArgument.
func (m *Manager) RecordNodeDrain(ctx context.Context, d *NodeDrain, expectedRevision uint64) (uint64, error) {
	const op = "RecordNodeDrain"
	if err := m.alive(op); err != nil {
		return 0, err
	}
	res, err := m.client.RecordNodeDrain(ctx, connect.NewRequest(&managerv1.RecordNodeDrainRequest{Drain: d, ExpectedRevision: expectedRevision}))
	if err != nil {
		return 0, wrapError(op, err)
	}
	return res.Msg.GetRevision(), nil
}
