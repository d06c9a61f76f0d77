package state

import (
	"github.com/hashicorp/go-memdb"
	"google.golang.org/protobuf/proto"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
)

// Read is an immutable view of the state. Every method accepts a WatchSet
// (may be nil) that it adds the watch channels of what it read to, so a
// caller can block until any of it changes.
type Read struct {
	txn     *memdb.Txn
	abandon chan struct{}
	// w and index: the notifier of the view's generation and the index the
	// view was taken at (nil and 0 inside the FSM, where nothing watches).
	w     *watches
	index uint64
}

// watch adds to ws (may be nil) a channel closed once a commit after this
// view changes what a read of table by index with args returned.
func (r *Read) watch(ws memdb.WatchSet, table, index string, args ...any) {
	if ws != nil {
		ws.Add(r.w.ch(r.w.keyFor(table, index, args...), r.index))
	}
}

// AbandonCh is closed when the whole state is replaced (a snapshot restore):
// whoever watches must read again from a new Snapshot.
func (r *Read) AbandonCh() <-chan struct{} { return r.abandon }

// Index is the raft index of the last command applied in this view.
func (r *Read) Index() uint64 {
	raw, err := r.txn.First(tableMeta, "id", "index")
	if err != nil || raw == nil {
		return 0
	}
	return raw.(*metaRow).Value
}

func (r *Read) first(ws memdb.WatchSet, table, index string, arg string) any {
	raw, err := r.txn.First(table, index, arg)
	if err != nil {
		panic("state read: " + err.Error())
	}
	r.watch(ws, table, index, arg)
	return raw
}

func (r *Read) iter(ws memdb.WatchSet, table, index string, args ...any) memdb.ResultIterator {
	it := r.rows(table, index, args...)
	r.watch(ws, table, index, args...)
	return it
}

// rows iterates table by index with args, registering no watch.
func (r *Read) rows(table, index string, args ...any) memdb.ResultIterator {
	it, err := r.txn.Get(table, index, args...)
	if err != nil {
		panic("state read: " + err.Error())
	}
	return it
}

// Job returns the job record with the given id, or nil.
func (r *Read) Job(ws memdb.WatchSet, id string) *storev1.JobRecord {
	if raw := r.first(ws, tableJobs, "id", id); raw != nil {
		return raw.(*storev1.JobRecord)
	}
	return nil
}

// Jobs calls fn for every job in id order, starting after afterID ("" = from
// the first), until fn returns false.
func (r *Read) Jobs(ws memdb.WatchSet, afterID string, fn func(*storev1.JobRecord) bool) {
	var it memdb.ResultIterator
	var err error
	if afterID == "" {
		it = r.iter(ws, tableJobs, "id_prefix", "")
	} else {
		it, err = r.txn.LowerBound(tableJobs, "id", afterID)
		if err != nil {
			panic("state read: " + err.Error())
		}
		r.watch(ws, tableJobs, "id_prefix")
	}
	for raw := it.Next(); raw != nil; raw = it.Next() {
		rec := raw.(*storev1.JobRecord)
		if afterID != "" && rec.GetJob().GetJobId() <= afterID {
			continue
		}
		if !fn(rec) {
			return
		}
	}
}

// Instance returns the instance (jobID, role), or nil.
func (r *Read) Instance(ws memdb.WatchSet, jobID, role string) *managerv1.Instance {
	if raw := r.first(ws, tableInstances, "id", InstanceID(jobID, role)); raw != nil {
		return raw.(*managerv1.Instance)
	}
	return nil
}

// InstancesOfJob returns the job's instances in role order.
func (r *Read) InstancesOfJob(ws memdb.WatchSet, jobID string) []*managerv1.Instance {
	var out []*managerv1.Instance
	// By the primary key's prefix (instancesByJob is not stored), watched
	// by the job alone.
	it := r.rows(tableInstances, "id_prefix", InstanceID(jobID, ""))
	r.watch(ws, tableInstances, instancesByJob, jobID)
	for raw := it.Next(); raw != nil; raw = it.Next() {
		out = append(out, raw.(*managerv1.Instance))
	}
	return out
}

// InstancesOnNode returns the instances bound to a node.
func (r *Read) InstancesOnNode(ws memdb.WatchSet, nodeID string) []*managerv1.Instance {
	var out []*managerv1.Instance
	it := r.iter(ws, tableInstances, "node", nodeID)
	for raw := it.Next(); raw != nil; raw = it.Next() {
		out = append(out, raw.(*managerv1.Instance))
	}
	return out
}

// Instances calls fn for every instance until fn returns false.
func (r *Read) Instances(ws memdb.WatchSet, fn func(*managerv1.Instance) bool) {
	it := r.iter(ws, tableInstances, "id_prefix", "")
	for raw := it.Next(); raw != nil; raw = it.Next() {
		if !fn(raw.(*managerv1.Instance)) {
			return
		}
	}
}

// Node returns the node record with the given id, or nil.
func (r *Read) Node(ws memdb.WatchSet, id string) *storev1.NodeRecord {
	if raw := r.first(ws, tableNodes, "id", id); raw != nil {
		return raw.(*storev1.NodeRecord)
	}
	return nil
}

// NodeByName returns the node record with the given name, or nil.
func (r *Read) NodeByName(ws memdb.WatchSet, name string) *storev1.NodeRecord {
	if raw := r.first(ws, tableNodes, "name", name); raw != nil {
		return raw.(*storev1.NodeRecord)
	}
	return nil
}

// NodeByToken returns the node whose registration token is token, or nil.
func (r *Read) NodeByToken(token string) *storev1.NodeRecord {
	if token == "" {
		return nil
	}
	if raw := r.first(nil, tableNodes, "token", token); raw != nil {
		return raw.(*storev1.NodeRecord)
	}
	return nil
}

// NodeBySecret returns the node whose node secret is secret, or nil.
func (r *Read) NodeBySecret(secret string) *storev1.NodeRecord {
	if secret == "" {
		return nil
	}
	if raw := r.first(nil, tableNodes, "secret", secret); raw != nil {
		return raw.(*storev1.NodeRecord)
	}
	return nil
}

// Nodes returns every node record in id order.
func (r *Read) Nodes(ws memdb.WatchSet) []*storev1.NodeRecord {
	var out []*storev1.NodeRecord
	it := r.iter(ws, tableNodes, "id_prefix", "")
	for raw := it.Next(); raw != nil; raw = it.Next() {
		out = append(out, raw.(*storev1.NodeRecord))
	}
	return out
}

// JobView renders a job record for the API: the job, its history when
// withHistory, and its instances. The view is new but what it holds is the
// stored rows themselves (an instance's opaque migration state left out): a
// caller may add to or reslice the view's own lists, and must not modify
// the job, a history entry or an instance — the package's rule for every row
// a Read returns. Rendering a view therefore copies no job: the FSM renders
// one for every job event, and a full reconcile reads every job.
func (r *Read) JobView(rec *storev1.JobRecord, withHistory bool) *managerv1.JobWithHistory {
	v := &managerv1.JobWithHistory{Job: rec.GetJob()}
	if withHistory {
		v.History = rec.GetHistory()[:len(rec.GetHistory()):len(rec.GetHistory())]
	}
	for _, in := range r.InstancesOfJob(nil, rec.GetJob().GetJobId()) {
		v.Instances = append(v.Instances, publicInstance(in))
	}
	return v
}

// NodeView renders a node record for the API, with the instances bound to
// it. Live facts (connected, load, last seen) are the caller's to add.
func (r *Read) NodeView(rec *storev1.NodeRecord) *managerv1.Node {
	n := proto.Clone(rec.GetNode()).(*managerv1.Node)
	for _, in := range r.InstancesOnNode(nil, n.GetNodeId()) {
		if in.GetPhase() == managerv1.InstancePhase_INSTANCE_PHASE_STOPPED {
			continue
		}
		n.Instances = append(n.Instances, &managerv1.InstanceSummary{
			JobId: in.GetJobId(), Role: in.GetRole(), FencingToken: in.GetFencingToken(),
		})
	}
	return n
}

// SlotView renders a node record as a cluster slot.
func SlotView(rec *storev1.NodeRecord) *managerv1.ClusterSlot {
	n := rec.GetNode()
	return &managerv1.ClusterSlot{
		NodeId:       n.GetNodeId(),
		NodeName:     n.GetNodeName(),
		Pool:         n.GetTags()["pool"],
		Token:        rec.GetToken(),
		TokenUsed:    rec.GetTokenUsed(),
		Active:       n.GetState() == managerv1.NodeState_NODE_STATE_ONLINE,
		Address:      n.GetAddress(),
		State:        n.GetState(),
		RegisteredAt: n.GetRegisteredAt(),
	}
}

// publicInstance is an instance as the API shows it (without the opaque
// migration state, which can be large).
func publicInstance(in *managerv1.Instance) *managerv1.Instance {
	if in.GetMigrationInitialState() == nil {
		return in
	}
	c := shallowCopy(in)
	c.MigrationInitialState = nil
	return c
}
