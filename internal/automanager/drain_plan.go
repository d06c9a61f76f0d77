package automanager

import (
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
)

// Node drains (DrainNode). A drain is stored on its node; every pass of
// the primary's AutoManager advances each running one a step: planDrain
// (pure: the drain, what runs where, the migrations, the time) says what to
// record and what to do, drainStep (drain.go) does it and records the
// result. Nothing of a drain lives only in memory, so a new primary resumes
// one where the last stood.

const (
	drainPending = managerv1.DrainItemResult_DRAIN_ITEM_RESULT_PENDING
	drainMoving  = managerv1.DrainItemResult_DRAIN_ITEM_RESULT_MOVING
	drainMoved   = managerv1.DrainItemResult_DRAIN_ITEM_RESULT_MOVED
	drainFailed  = managerv1.DrainItemResult_DRAIN_ITEM_RESULT_FAILED
	drainSkipped = managerv1.DrainItemResult_DRAIN_ITEM_RESULT_SKIPPED
	drainStopped = managerv1.DrainItemResult_DRAIN_ITEM_RESULT_STOPPED
	drainGone    = managerv1.DrainItemResult_DRAIN_ITEM_RESULT_GONE

	drainRunning    = managerv1.NodeDrainState_NODE_DRAIN_STATE_RUNNING
	drainDrained    = managerv1.NodeDrainState_NODE_DRAIN_STATE_DRAINED
	drainNotDrained = managerv1.NodeDrainState_NODE_DRAIN_STATE_NOT_DRAINED
)

// DrainMaxAttempts is how many migrations a drain with no deadline starts
// for one instance before it gives up on it (with a deadline it tries
// until the deadline).
const DrainMaxAttempts = 3

// drainRetryBase is the wait before an instance's second attempt; it
// doubles per attempt up to drainRetryMax.
const (
	drainRetryBase = 5 * time.Second
	drainRetryMax  = time.Minute
)

// drainRetryAfter is the wait after the n-th failed attempt (n >= 1).
func drainRetryAfter(n uint32) time.Duration {
	d := drainRetryBase
	for i := uint32(1); i < n && d < drainRetryMax; i++ {
		d *= 2
	}
	return min(d, drainRetryMax)
}

// liveInstance is an instance that runs or is asked to (not stopped, not
// being stopped).
func liveInstance(in *managerv1.Instance) bool {
	return in.GetPhase() != phaseStopped && in.GetDesired() != desiredStopped
}

// drainInput is what one drain step decides on.
type drainInput struct {
	// Jobs by id, with their instances; Order is their ids in the order
	// listed.
	Jobs  map[string]*managerv1.JobWithHistory
	Order []string
	// Migrations by id; InFlight by source job (the one not ended).
	Migrations map[string]*managerv1.MigrationState
	InFlight   map[string]*managerv1.MigrationState
	Now        time.Time
}

// newDrainInput indexes a pass's view for the drain steps.
func newDrainInput(v View, now time.Time) drainInput {
	in := drainInput{Jobs: make(map[string]*managerv1.JobWithHistory, len(v.Jobs)), Migrations: make(map[string]*managerv1.MigrationState, len(v.Migrations)),
		InFlight: map[string]*managerv1.MigrationState{}, Now: now}
	for _, jh := range v.Jobs {
		in.Jobs[jh.GetJob().GetJobId()] = jh
		in.Order = append(in.Order, jh.GetJob().GetJobId())
	}
	for _, m := range v.Migrations {
		in.Migrations[m.GetMigrationId()] = m
		if !terminal(m.GetPhase()) {
			in.InFlight[m.GetSourceJobId()] = m
		}
	}
	return in
}

// instance is the job's instance of role (nil: none).
func (in drainInput) instance(jobID, role string) *managerv1.Instance {
	for _, i := range in.Jobs[jobID].GetInstances() {
		if i.GetRole() == role {
			return i
		}
	}
	return nil
}

// elsewhere is a node other than nodeID where the job has a live instance
// ("" if none).
func (in drainInput) elsewhere(jobID, nodeID string) string {
	for _, i := range in.Jobs[jobID].GetInstances() {
		if liveInstance(i) && i.GetNodeId() != nodeID {
			return i.GetNodeId()
		}
	}
	return ""
}

// drainPlan is what a step does: the drain as it should be recorded and
// the calls to make (indexes into Drain.Items).
type drainPlan struct {
	Drain   *managerv1.NodeDrain
	Changed bool
	// Migrate are pending items to start a migration for now.
	Migrate []int
	// Cancel are moving items whose migration is aborted (the deadline).
	Cancel []int
	// Stop are items stopped because the deadline passed.
	Stop []int
	// NextAt is when the drain next needs a step without any event (a
	// retry, the deadline; zero: none).
	NextAt time.Time
}

// planDrain decides one step of a running drain d of its node from in. It
// never changes d; the plan's Drain is a copy.
func planDrain(d *managerv1.NodeDrain, in drainInput) drainPlan {
	p := drainPlan{Drain: proto.Clone(d).(*managerv1.NodeDrain)}
	nd := p.Drain
	node := nd.GetNodeId()
	now := in.Now
	var deadline time.Time
	if nd.GetDeadline() != nil {
		deadline = nd.GetDeadline().AsTime()
	}
	pastDeadline := !deadline.IsZero() && !now.Before(deadline)
	set := func(it *managerv1.DrainItem, r managerv1.DrainItemResult, target, reason string) {
		it.Result, it.TargetNodeId, it.Reason = r, target, reason
		it.RetryAt = nil
		if r != drainPending && r != drainMoving {
			it.EndedAt = timestamppb.New(now)
		}
		p.Changed = true
	}

	// What runs on the node and is not yet an item becomes one.
	known := map[string]bool{}
	for _, it := range nd.GetItems() {
		known[it.GetJobId()+"\x00"+it.GetRole()] = true
	}
	for _, id := range in.Order {
		jh := in.Jobs[id]
		for _, i := range jh.GetInstances() {
			if i.GetNodeId() != node || !liveInstance(i) || known[id+"\x00"+i.GetRole()] {
				continue
			}
			it := &managerv1.DrainItem{JobId: id, Role: i.GetRole(), Result: drainPending}
			if _, ok := slotForJob(jh.GetJob()); !ok {
				it.Result = drainSkipped
				it.Reason = "not placed by the AutoManager (started on a named node): the drain leaves it running — stop it or move it yourself"
				it.EndedAt = timestamppb.New(now)
			}
			nd.Items = append(nd.Items, it)
			p.Changed = true
		}
	}
	if !nd.GetListed() {
		nd.Listed = true
		p.Changed = true
	}

	moving := 0
	for _, it := range nd.GetItems() {
		if it.GetResult() == drainMoving {
			moving++
		}
	}
	var ready []int
	for idx, it := range nd.GetItems() {
		i := in.instance(it.GetJobId(), it.GetRole())
		onNode := i != nil && liveInstance(i) && i.GetNodeId() == node
		switch it.GetResult() {
		case drainSkipped:
			if !onNode {
				set(it, drainGone, in.elsewhere(it.GetJobId(), node), "left the node by itself")
			}
		case drainMoving:
			m := in.Migrations[it.GetMigrationId()]
			switch {
			case m == nil && onNode:
				moving--
				it.Result = drainPending
				it.Reason = fmt.Sprintf("migration %s's record is gone (forgotten)", it.GetMigrationId())
				p.Changed = true
			case m == nil:
				moving--
				if to := in.elsewhere(it.GetJobId(), node); to != "" {
					set(it, drainMoved, to, "")
				} else {
					set(it, drainGone, "", "stopped or deleted while it moved")
				}
			case m.GetPhase() == phDone:
				moving--
				set(it, drainMoved, m.GetTargetNodeId(), "")
			case m.GetPhase() == phAborted:
				moving--
				reason := "migration " + m.GetMigrationId() + " aborted: " + m.GetAbortReason()
				switch {
				case !onNode:
					if to := in.elsewhere(it.GetJobId(), node); to != "" {
						set(it, drainMoved, to, "")
					} else {
						set(it, drainGone, "", "stopped or deleted while it moved")
					}
				case !pastDeadline && deadline.IsZero() && it.GetAttempts() >= DrainMaxAttempts:
					set(it, drainFailed, "", fmt.Sprintf("%s (gave up after %d attempts)", reason, it.GetAttempts()))
				default:
					it.Result, it.Reason = drainPending, reason
					it.RetryAt = timestamppb.New(now.Add(drainRetryAfter(it.GetAttempts())))
					p.Changed = true
				}
			case pastDeadline && !m.GetPastPointOfNoReturn():
				p.Cancel = append(p.Cancel, idx)
			}
		}
		if it.GetResult() != drainPending {
			continue
		}
		switch {
		case !onNode:
			if to := in.elsewhere(it.GetJobId(), node); to != "" {
				set(it, drainMoved, to, "moved off the node by another hand")
			} else {
				set(it, drainGone, "", "stopped or deleted while the drain waited")
			}
		case in.InFlight[it.GetJobId()] != nil && in.InFlight[it.GetJobId()].GetSourceRole() != it.GetRole():
			// The job migrates another instance (this one may be its
			// target): wait for that migration to end.
		case in.InFlight[it.GetJobId()] != nil:
			// A migration of this instance runs (an operator's, or this
			// drain's whose start was not recorded): adopt it.
			m := in.InFlight[it.GetJobId()]
			it.Result, it.MigrationId, it.Reason, it.RetryAt = drainMoving, m.GetMigrationId(), "", nil
			moving++
			p.Changed = true
			if pastDeadline && !m.GetPastPointOfNoReturn() {
				p.Cancel = append(p.Cancel, idx)
			}
		case pastDeadline:
			p.Stop = append(p.Stop, idx)
		case it.GetRetryAt() != nil && now.Before(it.GetRetryAt().AsTime()):
			p.NextAt = earliest(p.NextAt, it.GetRetryAt().AsTime())
		default:
			ready = append(ready, idx)
		}
	}
	for _, idx := range ready {
		if moving >= int(max(nd.GetParallel(), 1)) {
			break
		}
		p.Migrate = append(p.Migrate, idx)
		moving++
	}
	if !deadline.IsZero() && !pastDeadline {
		p.NextAt = earliest(p.NextAt, deadline)
	}
	if len(p.Migrate) == 0 && len(p.Stop) == 0 && len(p.Cancel) == 0 {
		if finishDrain(nd) {
			p.Changed = true
		}
	}
	return p
}

// finishDrain ends nd when nothing in it is pending or moving: drained if
// everything moved (or left by itself), not drained otherwise. It reports
// whether it ended it.
func finishDrain(nd *managerv1.NodeDrain) bool {
	if nd.GetState() != drainRunning || !nd.GetListed() {
		return false
	}
	all := true
	for _, it := range nd.GetItems() {
		switch it.GetResult() {
		case drainPending, drainMoving:
			return false
		case drainMoved, drainGone:
		default:
			all = false
		}
	}
	nd.State = drainNotDrained
	if all {
		nd.State = drainDrained
	}
	return true
}

func earliest(a, b time.Time) time.Time {
	if a.IsZero() || b.Before(a) {
		return b
	}
	return a
}
