package state

import (
	"fmt"
	"strings"

	"google.golang.org/protobuf/proto"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
	"github.com/norsk-go/norsk-manager/pkg/jobspec"
)

// MaxDrainItems bounds the instances one drain records (jobspec.ValidateDrain).
const MaxDrainItems = jobspec.MaxDrainItems

// DrainRunning: the drain is running (the AutoManager moves its items).
func DrainRunning(d *managerv1.NodeDrain) bool {
	return d.GetState() == managerv1.NodeDrainState_NODE_DRAIN_STATE_RUNNING
}

// startNodeDrain marks the node draining and stores its new drain, stamped
// running at the command's time and index. A drain still running is
// refused: the handler answers that one instead (a client re-attaching).
func (t *tx) startNodeDrain(c *storev1.StartNodeDrain) error {
	d := c.GetDrain()
	rec, err := t.node(d.GetNodeId())
	if err != nil {
		return err
	}
	if DrainRunning(rec.GetNode().GetDrain()) {
		return apierr.FailedPreconditionf("node %s is already being drained (since index %d): undo that drain first", d.GetNodeId(), rec.GetNode().GetDrain().GetRevision())
	}
	nrec, n := t.withNode(rec)
	nd := proto.Clone(d).(*managerv1.NodeDrain)
	nd.State = managerv1.NodeDrainState_NODE_DRAIN_STATE_RUNNING
	nd.StartedAt, nd.EndedAt = t.now, nil
	nd.Items, nd.Listed = nil, false
	t.stampDrain(nd)
	n.Drain = nd
	wasDraining := n.GetDraining()
	n.Draining = true
	t.insert(tableNodes, nrec)
	if !wasDraining {
		t.emit(&managerv1.Event{Kind: &managerv1.Event_NodeTagsUpdated{NodeTagsUpdated: t.nodeEvent(nrec, "draining: no new work")}})
	}
	t.emit(&managerv1.Event{Kind: &managerv1.Event_NodeDrainUpdated{NodeDrainUpdated: proto.Clone(nd).(*managerv1.NodeDrain)}})
	return nil
}

// putNodeDrain replaces a running drain at the expected revision (the
// AutoManager's progress) and answers the new revision. An ended or undone
// drain is refused, so an AutoManager that lost the race learns it.
func (t *tx) putNodeDrain(c *storev1.PutNodeDrain) (uint64, error) {
	d := c.GetDrain()
	rec, err := t.node(d.GetNodeId())
	if err != nil {
		return 0, err
	}
	ex := rec.GetNode().GetDrain()
	switch {
	case ex == nil:
		return 0, apierr.FailedPreconditionf("node %s has no drain", d.GetNodeId())
	case !DrainRunning(ex):
		return 0, apierr.FailedPreconditionf("node %s's drain is %s: it changes no more", d.GetNodeId(), DrainStateName(ex.GetState()))
	case c.GetExpectedRevision() != 0 && ex.GetRevision() != c.GetExpectedRevision():
		return 0, apierr.FailedPreconditionf("node %s's drain is at revision %d, not %d: another writer moved it", d.GetNodeId(), ex.GetRevision(), c.GetExpectedRevision())
	}
	switch d.GetState() {
	case managerv1.NodeDrainState_NODE_DRAIN_STATE_RUNNING, managerv1.NodeDrainState_NODE_DRAIN_STATE_DRAINED, managerv1.NodeDrainState_NODE_DRAIN_STATE_NOT_DRAINED:
	default:
		return 0, apierr.Invalid("drain.state", "%s: a drain's progress is running, drained or notDrained (undo cancels)", DrainStateName(d.GetState()))
	}
	nrec, n := t.withNode(rec)
	nd := proto.Clone(d).(*managerv1.NodeDrain)
	// What the request set stays as it was asked.
	nd.Strategy, nd.Parallel, nd.Deadline, nd.StartedAt, nd.RequestedBy = ex.GetStrategy(), ex.GetParallel(), ex.GetDeadline(), ex.GetStartedAt(), ex.GetRequestedBy()
	nd.EndedAt = nil
	if !DrainRunning(nd) {
		nd.EndedAt = t.now
	}
	t.stampDrain(nd)
	n.Drain = nd
	t.insert(tableNodes, nrec)
	t.emit(&managerv1.Event{Kind: &managerv1.Event_NodeDrainUpdated{NodeDrainUpdated: proto.Clone(nd).(*managerv1.NodeDrain)}})
	return t.index, nil
}

// cancelDrain ends n's running drain as undone (n is the caller's copy).
// It reports whether there was one.
func (t *tx) cancelDrain(n *managerv1.Node) bool {
	if !DrainRunning(n.GetDrain()) {
		return false
	}
	nd := proto.Clone(n.GetDrain()).(*managerv1.NodeDrain)
	nd.State = managerv1.NodeDrainState_NODE_DRAIN_STATE_CANCELLED
	nd.EndedAt = t.now
	t.stampDrain(nd)
	n.Drain = nd
	t.emit(&managerv1.Event{Kind: &managerv1.Event_NodeDrainUpdated{NodeDrainUpdated: proto.Clone(nd).(*managerv1.NodeDrain)}})
	return true
}

// stampDrain sets the store's fields of a drain: revision, counts, summary.
func (t *tx) stampDrain(d *managerv1.NodeDrain) {
	d.Revision = t.index
	d.Moved, d.Total = 0, uint32(len(d.GetItems()))
	for _, it := range d.GetItems() {
		switch it.GetResult() {
		case managerv1.DrainItemResult_DRAIN_ITEM_RESULT_MOVED, managerv1.DrainItemResult_DRAIN_ITEM_RESULT_GONE:
			d.Moved++
		}
	}
	d.Summary = DrainSummary(d)
}

// DrainSummary is one line saying where a drain stands: "3/7 moved, 1
// moving, 2 pending, 1 failed".
func DrainSummary(d *managerv1.NodeDrain) string {
	count := map[managerv1.DrainItemResult]int{}
	moved := 0
	for _, it := range d.GetItems() {
		count[it.GetResult()]++
		if r := it.GetResult(); r == managerv1.DrainItemResult_DRAIN_ITEM_RESULT_MOVED || r == managerv1.DrainItemResult_DRAIN_ITEM_RESULT_GONE {
			moved++
		}
	}
	parts := []string{fmt.Sprintf("%d/%d moved", moved, len(d.GetItems()))}
	for _, r := range []managerv1.DrainItemResult{
		managerv1.DrainItemResult_DRAIN_ITEM_RESULT_MOVING, managerv1.DrainItemResult_DRAIN_ITEM_RESULT_PENDING,
		managerv1.DrainItemResult_DRAIN_ITEM_RESULT_FAILED, managerv1.DrainItemResult_DRAIN_ITEM_RESULT_SKIPPED,
		managerv1.DrainItemResult_DRAIN_ITEM_RESULT_STOPPED,
	} {
		if count[r] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", count[r], DrainItemResultName(r)))
		}
	}
	return strings.Join(parts, ", ")
}

// DrainStateName is a drain's state as the API's JSON names it ("notDrained").
func DrainStateName(s managerv1.NodeDrainState) string {
	return camel(strings.TrimPrefix(s.String(), "NODE_DRAIN_STATE_"))
}

// DrainItemResultName is an item's result in one word ("moving").
func DrainItemResultName(r managerv1.DrainItemResult) string {
	return camel(strings.TrimPrefix(r.String(), "DRAIN_ITEM_RESULT_"))
}

// camel turns "NOT_DRAINED" into "notDrained".
func camel(s string) string {
	w := strings.Split(strings.ToLower(s), "_")
	for i := 1; i < len(w); i++ {
		if w[i] != "" {
			w[i] = strings.ToUpper(w[i][:1]) + w[i][1:]
		}
	}
	return strings.Join(w, "")
}
