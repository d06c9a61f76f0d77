package automanager

import (
	"slices"
	"sort"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/pkg/placement"
)

// mirror is the AutoManager's copy of the state it decides on, indexed by
// job, bundle, node and migration, and kept current from the event stream:
// an event marks what it touched (changes), and the next pass re-reads
// only that. Run's goroutine touches a mirror, and the saga's to place a
// migration's target (keptTargets), each under AutoManager.mirrorMu.
//
// It holds what a pass needs without reading the store again: the jobs
// (without history), the nodes, the bundles, every migration record, the
// jobs of each bundle, and what each job's live instances hold on their
// nodes (placement allocations, kept per node so the allocations of the
// jobs a pass does not plan are collected without looking at any job).
type mirror struct {
	cfg      placement.Config
	nodes    map[string]*managerv1.Node
	nodeList []*managerv1.Node // in node id order
	// placeList is nodeList as placement sees it (placementNode), index
	// for index: kept node by node, so a pass converts no node.
	placeList []placement.Node
	jobs      map[string]*managerv1.JobWithHistory
	bundles   map[string]*managerv1.Bundle
	// loaded: a full read has been loaded (before it the mirror knows
	// nothing).
	loaded bool
	// repairs are the repair migrations' records, ended ones included:
	// what the repair limits count (planRepairs). The other migration
	// records are not kept — every migration ever run stays in the store
	// until an operator forgets it (seed 004), and no pass reads them.
	repairs map[string]*managerv1.MigrationState
	// inFlight maps each migration in flight to its source job; migrating
	// counts them by job (a job with none is absent).
	inFlight  map[string]string
	migrating map[string]int
	// byBundle maps a bundle id (the jobs' bundleId tag) to its jobs.
	byBundle map[string]map[string]bool
	// allocs maps a node to what the instances bound to it that have not
	// stopped hold there (whether or not the node is reachable), by job.
	allocs map[string]map[string][]placement.Allocation
	// jobNodes maps a job to the nodes its allocations are on.
	jobNodes map[string][]string
	// pendingJobs and pendingBundles are what is not settled: waiting for
	// a time (a backoff, a lease, a stop time), for room, or part-way
	// through something. They are planned again whenever anything that
	// could change their decision changes, and when a wait falls due.
	pendingJobs    map[string]bool
	pendingBundles map[string]bool
	// place is the placement state of the nodes and allocations, nil
	// until a pass needs it or after a node changed (mirror_place.go).
	place *placement.State
}

func newMirror(cfg placement.Config) *mirror {
	return &mirror{
		cfg: cfg, nodes: map[string]*managerv1.Node{}, jobs: map[string]*managerv1.JobWithHistory{},
		bundles: map[string]*managerv1.Bundle{}, repairs: map[string]*managerv1.MigrationState{},
		inFlight: map[string]string{}, migrating: map[string]int{}, byBundle: map[string]map[string]bool{},
		allocs: map[string]map[string][]placement.Allocation{}, jobNodes: map[string][]string{},
		pendingJobs: map[string]bool{}, pendingBundles: map[string]bool{},
	}
}

// load replaces the mirror's contents with a full view (the jobs' history
// is not kept). The pending sets are kept: the full pass that follows
// decides them again.
func (m *mirror) load(v View) {
	pj, pb := m.pendingJobs, m.pendingBundles
	*m = *newMirror(m.cfg)
	m.pendingJobs, m.pendingBundles = pj, pb
	m.loaded = true
	// Sized for what is read, not grown by doubling.
	m.jobs = make(map[string]*managerv1.JobWithHistory, len(v.Jobs))
	m.jobNodes = make(map[string][]string, len(v.Jobs))
	m.allocs = make(map[string]map[string][]placement.Allocation, len(v.Nodes))
	m.bundles = make(map[string]*managerv1.Bundle, len(v.Bundles))
	m.setNodes(v.Nodes)
	for _, b := range v.Bundles {
		m.bundles[b.GetBundleId()] = b
	}
	m.setMigrations(v.Migrations)
	for _, jh := range v.Jobs {
		m.putJob(jh)
	}
}

// setNodes replaces the nodes; it returns the ids of the nodes that were
// added, removed or changed.
func (m *mirror) setNodes(nodes []*managerv1.Node) []string {
	var changed []string
	seen := make(map[string]bool, len(nodes))
	next := make(map[string]*managerv1.Node, len(nodes))
	for _, n := range nodes {
		id := n.GetNodeId()
		seen[id] = true
		next[id] = n
		if old, ok := m.nodes[id]; !ok || nodeChanged(old, n) {
			changed = append(changed, id)
		}
	}
	for id := range m.nodes {
		if !seen[id] {
			changed = append(changed, id)
		}
	}
	m.nodes = next
	m.place = nil // a full read of the nodes: built again when next needed
	m.nodeList = append(m.nodeList[:0], nodes...)
	sort.Slice(m.nodeList, func(i, j int) bool { return m.nodeList[i].GetNodeId() < m.nodeList[j].GetNodeId() })
	m.placeList = m.placeList[:0]
	for _, n := range m.nodeList {
		m.placeList = append(m.placeList, placementNode(n))
	}
	sort.Strings(changed)
	return changed
}

// putNode stores one node (nil: it is gone); it reports whether the node
// was added, removed or changed (nodeChanged: its live facts do not count).
// Its cost does not grow with the fleet but for keeping nodeList (and
// placeList) in order; it converts only this node.
func (m *mirror) putNode(id string, n *managerv1.Node) bool {
	old, had := m.nodes[id]
	i := sort.Search(len(m.nodeList), func(i int) bool { return m.nodeList[i].GetNodeId() >= id })
	switch {
	case n == nil && !had:
		return false
	case n == nil:
		delete(m.nodes, id)
		m.nodeList = slices.Delete(m.nodeList, i, i+1)
		m.placeList = slices.Delete(m.placeList, i, i+1)
		m.place = nil
		return true
	case had:
		// Converted again even when nodeChanged says no: the images it
		// holds are no event's, but placement ranks by them.
		m.nodes[id] = n
		m.nodeList[i] = n
		pn := placementNode(n)
		changed := nodeChanged(old, n)
		if changed || !samePlacementNode(m.placeList[i], pn) {
			m.place = nil
		}
		m.placeList[i] = pn
		return changed
	default:
		m.nodes[id] = n
		m.nodeList = slices.Insert(m.nodeList, i, n)
		m.placeList = slices.Insert(m.placeList, i, placementNode(n))
		m.place = nil
		return true
	}
}

// nodeChanged reports whether anything placement or reachability reads
// differs between two versions of a node (its live facts — load, last
// seen — and the instance summaries do not count).
func nodeChanged(a, b *managerv1.Node) bool {
	if a.GetState() != b.GetState() || a.GetDraining() != b.GetDraining() || a.GetElastic() != b.GetElastic() ||
		a.GetRuntime() != b.GetRuntime() || a.GetProvider() != b.GetProvider() || len(a.GetTags()) != len(b.GetTags()) {
		return true
	}
	for k, v := range a.GetTags() {
		if bv, ok := b.GetTags()[k]; !ok || bv != v {
			return true
		}
	}
	ah, bh := a.GetHardware(), b.GetHardware()
	if ah.GetVcpus() != bh.GetVcpus() || len(ah.GetGpus()) != len(bh.GetGpus()) || len(a.GetCapabilities()) != len(b.GetCapabilities()) {
		return true
	}
	for i, g := range ah.GetGpus() {
		if g.GetModel() != bh.GetGpus()[i].GetModel() || g.GetCapacity() != bh.GetGpus()[i].GetCapacity() {
			return true
		}
	}
	for i, c := range a.GetCapabilities() {
		if c.GetName() != b.GetCapabilities()[i].GetName() || c.GetCount() != b.GetCapabilities()[i].GetCount() {
			return true
		}
	}
	return false
}

// setMigrations replaces the migration records with migs (every one the
// store holds); it returns the jobs whose being under a migration changed.
func (m *mirror) setMigrations(migs []*managerv1.MigrationState) []string {
	before := m.migrating
	m.repairs, m.inFlight, m.migrating = map[string]*managerv1.MigrationState{}, map[string]string{}, map[string]int{}
	for _, st := range migs {
		m.putMigration(st.GetMigrationId(), st)
	}
	return changedKeys(before, m.migrating)
}

// changedKeys are the keys in one of before and after but not the other,
// in order.
func changedKeys[V any](before, after map[string]V) []string {
	var changed []string
	for id := range after {
		if _, ok := before[id]; !ok {
			changed = append(changed, id)
		}
	}
	for id := range before {
		if _, ok := after[id]; !ok {
			changed = append(changed, id)
		}
	}
	sort.Strings(changed)
	return changed
}

// putMigration stores migration id's record as read (nil: it is gone,
// forgotten); it returns the job whose being under a migration changed,
// if any. Its cost is one record's, whatever the store holds.
func (m *mirror) putMigration(id string, st *managerv1.MigrationState) (changed []string) {
	if job, ok := m.inFlight[id]; ok && (st == nil || terminal(st.GetPhase())) {
		delete(m.inFlight, id)
		if m.migrating[job]--; m.migrating[job] <= 0 {
			delete(m.migrating, job)
			changed = append(changed, job)
		}
	}
	if st != nil && !terminal(st.GetPhase()) {
		if _, ok := m.inFlight[id]; !ok {
			job := st.GetSourceJobId()
			m.inFlight[id] = job
			if m.migrating[job]++; m.migrating[job] == 1 {
				changed = append(changed, job)
			}
		}
	}
	if st.GetRepair() {
		m.repairs[id] = st
	} else {
		delete(m.repairs, id)
	}
	return changed
}

// putJob stores a job (its history dropped) and re-indexes what its
// instances hold. It reports whether what the job holds on nodes changed
// (which changes the room every other job sees).
func (m *mirror) putJob(jh *managerv1.JobWithHistory) bool {
	id := jh.GetJob().GetJobId()
	if jh.GetHistory() != nil {
		jh = &managerv1.JobWithHistory{Job: jh.GetJob(), Instances: jh.GetInstances()}
	}
	if old := m.jobs[id]; old != nil {
		if b := old.GetJob().GetTags()[placement.TagBundleID]; b != "" && b != jh.GetJob().GetTags()[placement.TagBundleID] {
			m.unindexBundle(b, id)
		}
	}
	m.jobs[id] = jh
	if b := jh.GetJob().GetTags()[placement.TagBundleID]; b != "" {
		set := m.byBundle[b]
		if set == nil {
			set = map[string]bool{}
			m.byBundle[b] = set
		}
		set[id] = true
	}
	return m.reallocate(id)
}

// reserve notes that job's instance role was bound to node by another hand
// than a pass (a migration's target): the room is taken in the allocations
// index and the placement state at once, so that what is placed before the
// job's own record is read back does not count on it. Reading the job back
// (reallocate) replaces it with what the store says. Nothing is noted for a
// job the mirror does not hold, or whose role it already has live.
func (m *mirror) reserve(jobID, role, nodeID string) {
	jh := m.jobs[jobID]
	if jh == nil {
		return
	}
	for _, in := range jh.GetInstances() {
		if in.GetRole() == role && in.GetPhase() != phaseStopped {
			return
		}
	}
	for _, a := range m.allocs[nodeID][jobID] {
		if a.Role == role {
			return
		}
	}
	job := jh.GetJob()
	a := placement.AllocationForJob(m.cfg, &managerv1.Instance{JobId: jobID, Role: role, NodeId: nodeID}, job, m.bundles[job.GetTags()[placement.TagBundleID]])
	if m.addAlloc(jobID, a) {
		m.jobNodes[jobID] = append(m.jobNodes[jobID], nodeID)
	}
	m.replace(jobID, nil, []placement.Allocation{a})
}

// addAlloc indexes a, an allocation of job id, under its node; it reports
// whether it is the job's first there (the caller notes the node in
// jobNodes).
func (m *mirror) addAlloc(id string, a placement.Allocation) (first bool) {
	per := m.allocs[a.NodeID]
	if per == nil {
		per = map[string][]placement.Allocation{}
		m.allocs[a.NodeID] = per
	}
	first = len(per[id]) == 0
	per[id] = append(per[id], a)
	return first
}

// deleteJob forgets a job; it reports whether it held anything on a node.
func (m *mirror) deleteJob(id string) bool {
	old := m.jobs[id]
	if old == nil {
		return false
	}
	if b := old.GetJob().GetTags()[placement.TagBundleID]; b != "" {
		m.unindexBundle(b, id)
	}
	delete(m.jobs, id)
	delete(m.pendingJobs, id)
	return m.reallocate(id)
}

func (m *mirror) unindexBundle(bundleID, jobID string) {
	if set := m.byBundle[bundleID]; set != nil {
		delete(set, jobID)
		if len(set) == 0 {
			delete(m.byBundle, bundleID)
		}
	}
}

// reallocate recomputes what job id's live instances hold (nothing if the
// job is gone) and reports whether it differs from before.
func (m *mirror) reallocate(id string) bool {
	var next []placement.Allocation
	if jh := m.jobs[id]; jh != nil {
		job := jh.GetJob()
		bundle := m.bundles[job.GetTags()[placement.TagBundleID]]
		for _, in := range jh.GetInstances() {
			if in.GetPhase() != phaseStopped {
				next = append(next, placement.AllocationForJob(m.cfg, in, job, bundle))
			}
		}
	}
	var prev []placement.Allocation
	for _, n := range m.jobNodes[id] {
		prev = append(prev, m.allocs[n][id]...)
		delete(m.allocs[n], id)
		if len(m.allocs[n]) == 0 {
			delete(m.allocs, n)
		}
	}
	delete(m.jobNodes, id)
	var nodes []string
	for _, a := range next {
		if m.addAlloc(id, a) {
			nodes = append(nodes, a.NodeID)
		}
	}
	if len(nodes) > 0 {
		m.jobNodes[id] = nodes
	}
	m.replace(id, prev, next)
	return !sameAllocations(prev, next)
}

// sameAllocations compares two allocation lists of one job, in any order,
// by what placement reads of them.
func sameAllocations(a, b []placement.Allocation) bool {
	if len(a) != len(b) {
		return false
	}
	key := func(x placement.Allocation) string { return x.Role + "\x00" + x.NodeID + "\x00" + x.Template }
	count := map[string]int{}
	for _, x := range a {
		count[key(x)]++
	}
	for _, x := range b {
		if count[key(x)] == 0 {
			return false
		}
		count[key(x)]--
	}
	return true
}

// putBundle stores a bundle (nil: deleted) and re-indexes what its jobs
// hold (their anti-affinity comes from it).
func (m *mirror) putBundle(id string, b *managerv1.Bundle) {
	if b == nil {
		delete(m.bundles, id)
		delete(m.pendingBundles, id)
	} else {
		m.bundles[id] = b
	}
	for jobID := range m.byBundle[id] {
		m.reallocate(jobID)
	}
}

// reachable says whether a node's worker may still run what it holds
// (reachableOf over the mirror's nodes, without building an index).
func (m *mirror) reachable(id string) bool {
	n := m.nodes[id]
	return n != nil && (n.GetState() == nodeOnline || n.GetState() == nodeStopping)
}

// allQuiet reports whether every job named is quiet (or gone) and none is
// in a bundle or under a migration: a pass over them would decide nothing.
func (m *mirror) allQuiet(jobs map[string]bool) bool {
	for id := range jobs {
		jh := m.jobs[id]
		if jh == nil {
			continue
		}
		if m.migrating[id] > 0 || jh.GetJob().GetTags()[placement.TagBundleID] != "" || !quiet(jh, nil, m.reachable) {
			return false
		}
	}
	return true
}

// jobsOfBundle is the bundle's jobs the mirror holds, in id order.
func (m *mirror) jobsOfBundle(id string) []string {
	out := make([]string, 0, len(m.byBundle[id]))
	for j := range m.byBundle[id] {
		out = append(out, j)
	}
	sort.Strings(out)
	return out
}

// jobsOnNodes are the jobs with live instances on any of the nodes.
func (m *mirror) jobsOnNodes(nodes []string) []string {
	var out []string
	for _, n := range nodes {
		for j := range m.allocs[n] {
			out = append(out, j)
		}
	}
	return out
}

// view is the View a pass plans jobs (and the bundles) on: every node and
// migration, the jobs and bundles asked for, and, through Others, what
// every other job's live instances hold on reachable nodes.
// allJobs is every job the mirror holds, in id order.
func (m *mirror) allJobs() []*managerv1.JobWithHistory {
	ids := make([]string, 0, len(m.jobs))
	for id := range m.jobs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	out := make([]*managerv1.JobWithHistory, 0, len(ids))
	for _, id := range ids {
		out = append(out, m.jobs[id])
	}
	return out
}

func (m *mirror) view(jobs, bundles map[string]bool) View {
	v := View{Nodes: m.nodeList, PlacementNodes: m.placeList, Migrations: m.sortedRepairs()}
	if len(m.migrating) > 0 {
		v.Migrating = make(map[string]bool, len(m.migrating))
		for id := range m.migrating {
			v.Migrating[id] = true
		}
	}
	ids := make([]string, 0, len(jobs))
	for id := range jobs {
		if m.jobs[id] != nil {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	for _, id := range ids {
		v.Jobs = append(v.Jobs, m.jobs[id])
	}
	bids := make([]string, 0, len(bundles))
	for id := range bundles {
		if m.bundles[id] != nil {
			bids = append(bids, id)
		}
	}
	sort.Strings(bids)
	for _, id := range bids {
		v.Bundles = append(v.Bundles, m.bundles[id])
	}
	v.Placement, v.Reachable = m.placement, m.reachable
	v.Others = func(reachable func(string) bool) []placement.Allocation { return m.liveAllocations(reachable, jobs) }
	return v
}

// liveAllocations is what the live instances of every job but those in
// except hold on the nodes reachable says yes to (the allocations index).
func (m *mirror) liveAllocations(reachable func(string) bool, except map[string]bool) []placement.Allocation {
	var out []placement.Allocation
	for node, per := range m.allocs {
		if !reachable(node) {
			continue
		}
		for job, as := range per {
			if !except[job] {
				out = append(out, as...)
			}
		}
	}
	return out
}

// sortedRepairs are the repair migrations' records, in id order.
func (m *mirror) sortedRepairs() []*managerv1.MigrationState {
	out := make([]*managerv1.MigrationState, 0, len(m.repairs))
	for _, id := range sortedKeys(m.repairs) {
		out = append(out, m.repairs[id])
	}
	return out
}

// settle updates the pending sets from a pass over v: a job or bundle of
// the view stays pending unless it is quiet — nothing about it can change
// without an event that names it or its node (see quiet).
func (m *mirror) settle(v View, d Decision) {
	reachable := m.reachable
	degraded := map[string]bool{}
	for b := range d.degradedBundles {
		degraded[b] = true
	}
	for _, b := range v.Bundles {
		id := b.GetBundleId()
		if quietBundle(b) && !degraded[id] {
			delete(m.pendingBundles, id)
		} else {
			m.pendingBundles[id] = true
		}
	}
	for _, jh := range v.Jobs {
		id := jh.GetJob().GetJobId()
		bundle := m.bundles[jh.GetJob().GetTags()[placement.TagBundleID]]
		if v.Migrating[id] || quiet(jh, bundle, reachable) {
			delete(m.pendingJobs, id)
		} else {
			m.pendingJobs[id] = true
		}
	}
	for _, u := range d.Unplaced {
		m.pendingJobs[u.JobID] = true
	}
}

// quiet reports whether a job needs nothing from the AutoManager until an
// event names it (its instances, its bundle) or the node it runs on: it is
// not kept placed (no bundle, no autoPlacement, terminal, dormant), or its
// instance is bound where a worker answers, or it was stopped on purpose
// and stays stopped. Anything else — a failure waiting out its backoff, a
// lost holder's lease, an instance that fits nowhere — is pending.
func quiet(jh *managerv1.JobWithHistory, bundle *managerv1.Bundle, reachable func(string) bool) bool {
	job := jh.GetJob()
	role, ok := managedRole(job, bundle)
	if !ok {
		return true
	}
	in := currentInstance(jh, role)
	switch {
	case in == nil:
		return bundle == nil && job.GetState() != managerv1.JobState_JOB_STATE_PRE
	case reachable(in.GetNodeId()) && (in.GetDesired() != desiredStopped || in.GetPhase() != phaseStopped):
		return true
	case in.GetDesired() == desiredStopped && in.GetStopReason() == reasonUser && in.GetMigrationId() == "" && bundle == nil:
		return true
	}
	return false
}

// quietBundle reports whether a bundle needs nothing until an event names
// it or one of its jobs: it is live with no stop time or lease to wait for.
// (Whether it is degraded is the pass's to say.)
func quietBundle(b *managerv1.Bundle) bool {
	return b.GetState() == managerv1.BundleState_BUNDLE_STATE_LIVE && b.GetStopAt() == nil && b.GetLeaseExpiresAt() == nil
}
