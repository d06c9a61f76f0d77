package state

import (
	"sync"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
)

// Counts are the state's gauges kept as the FSM writes: instances by phase
// and nodes by state (lost, online, …). Each write adjusts them by what it
// changed, so reading them (a metrics scrape) costs nothing in proportion
// to the store. A restore counts once.
type Counts struct {
	InstancesByPhase map[managerv1.InstancePhase]int
	NodesByState     map[managerv1.NodeState]int
	// NodesDraining counts the nodes marked draining.
	NodesDraining int
	// ServiceRestarts counts the restarts workers reported making under
	// services' restart policies (a counter: it only grows; a restore
	// starts it again from the restarts the restored instances hold).
	ServiceRestarts uint64
}

// counts is a generation's Counts, guarded for the scrape's reads.
type counts struct {
	mu sync.Mutex
	c  Counts
}

func newCounts() *counts {
	return &counts{c: Counts{InstancesByPhase: map[managerv1.InstancePhase]int{}, NodesByState: map[managerv1.NodeState]int{}}}
}

// countDelta is what one command changes in the counts.
type countDelta struct {
	phase    map[managerv1.InstancePhase]int
	state    map[managerv1.NodeState]int
	draining int
	restarts uint64
}

// restarted adds what a write of instance in over old (nil: a new row)
// adds to the service restarts: the growth of the count within one binding,
// or all of a new binding's.
func (d *countDelta) restarted(old, in *managerv1.Instance) {
	switch {
	case old == nil || old.GetFencingToken() != in.GetFencingToken():
		d.restarts += uint64(in.GetRestarts())
	case in.GetRestarts() > old.GetRestarts():
		d.restarts += uint64(in.GetRestarts() - old.GetRestarts())
	}
}

func (d *countDelta) instance(in *managerv1.Instance, by int) {
	if in == nil {
		return
	}
	if d.phase == nil {
		d.phase = map[managerv1.InstancePhase]int{}
	}
	d.phase[in.GetPhase()] += by
}

func (d *countDelta) node(rec *storev1.NodeRecord, by int) {
	if rec == nil {
		return
	}
	if d.state == nil {
		d.state = map[managerv1.NodeState]int{}
	}
	d.state[rec.GetNode().GetState()] += by
	if rec.GetNode().GetDraining() {
		d.draining += by
	}
}

func (c *counts) add(d *countDelta) {
	if d == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, v := range d.phase {
		c.c.InstancesByPhase[k] += v
	}
	for k, v := range d.state {
		c.c.NodesByState[k] += v
	}
	c.c.NodesDraining += d.draining
	c.c.ServiceRestarts += d.restarts
}

// Counts returns a copy of the current counts.
func (s *State) Counts() Counts {
	c := s.cur.Load().counts
	c.mu.Lock()
	defer c.mu.Unlock()
	out := Counts{InstancesByPhase: make(map[managerv1.InstancePhase]int, len(c.c.InstancesByPhase)),
		NodesByState: make(map[managerv1.NodeState]int, len(c.c.NodesByState)), NodesDraining: c.c.NodesDraining, ServiceRestarts: c.c.ServiceRestarts}
	for k, v := range c.c.InstancesByPhase {
		out.InstancesByPhase[k] = v
	}
	for k, v := range c.c.NodesByState {
		out.NodesByState[k] = v
	}
	return out
}

// recount counts a generation from scratch (after a restore).
func recount(r *Read) *counts {
	c := newCounts()
	var d countDelta
	for _, rec := range r.Nodes(nil) {
		d.node(rec, 1)
	}
	it, err := r.txn.Get(tableInstances, "id")
	if err == nil {
		for o := it.Next(); o != nil; o = it.Next() {
			d.instance(o.(*managerv1.Instance), 1)
			d.restarted(nil, o.(*managerv1.Instance))
		}
	}
	c.add(&d)
	return c
}
