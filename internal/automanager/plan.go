package automanager

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/pkg/jobspec"
	"github.com/norsk-go/norsk-manager/pkg/placement"
)

// Policy is how the AutoManager recovers.
type Policy struct {
	// RestartCeiling is how many failures of an instance within
	// RestartWindow end its job with MarkJobFailed (default 5).
	RestartCeiling int
	// RestartWindow is the window failures are counted in (default 10 min).
	RestartWindow time.Duration
	// BackoffBase and BackoffMax bound the wait before re-placing an
	// instance that failed: BackoffBase × 2^(failures-1), at most
	// BackoffMax (defaults 1 s and 1 min). An instance whose node was lost
	// is re-placed at once: the loss is not the job's fault, and it does not
	// count towards the ceiling.
	BackoffBase time.Duration
	BackoffMax  time.Duration
	// Placement is the placement configuration (pools and their tiers).
	Placement placement.Config
	// Elastic are the pool tiers a provider creates nodes in: when an
	// instance fits no node, a node is created in the cheapest elastic tier
	// of its pool that a new node would take it in.
	Elastic []ElasticTier
	// MaxProvisionPerPass bounds the nodes one pass creates (default 8).
	MaxProvisionPerPass int
	// Migration bounds each phase of a migration.
	Migration MigrationDeadlines
	// Repair bounds the repairs of degraded anti-affinity (repair.go).
	Repair RepairPolicy
	// Spares are the warm spares each elastic tier keeps (spares.go).
	Spares map[string]SpareSpec
}

// ElasticTier is a pool tier a provider creates nodes in, and the node a
// creation promises.
type ElasticTier struct {
	Tier     string
	Provider string
	// VCPUs is the capacity of a new node (its worker reports the real
	// hardware once online), for a tier of one size (mock).
	VCPUs uint32
	// Types are the instance types a cloud tier creates, cheapest first:
	// a new node is of the cheapest type that takes the instance.
	Types []ElasticType
}

func (p *Policy) defaults() {
	if p.RestartCeiling <= 0 {
		p.RestartCeiling = 5
	}
	if p.RestartWindow <= 0 {
		p.RestartWindow = 10 * time.Minute
	}
	if p.BackoffBase <= 0 {
		p.BackoffBase = time.Second
	}
	if p.BackoffMax <= 0 {
		p.BackoffMax = time.Minute
	}
	if p.MaxProvisionPerPass <= 0 {
		p.MaxProvisionPerPass = 8
	}
	p.Repair.defaults()
	p.Placement = WithJobSocketPresence(p.Placement)
}

// WithJobSocketPresence returns c with the job socket a presence
// capability: a worker started with --job-socket advertises it (count 1)
// and serves a socket to every instance, so a job that requires it needs
// the node to have it and uses none of it up. Every placement of jobs
// counts it so (the AutoManager's, the saga's, the Manager's
// ExplainPlacement). c's map is copied, never written: it may be shared.
func WithJobSocketPresence(c placement.Config) placement.Config {
	if c.PresenceCapabilities[JobSocketCapability] {
		return c
	}
	pc := make(map[string]bool, len(c.PresenceCapabilities)+1)
	for k, v := range c.PresenceCapabilities {
		pc[k] = v
	}
	pc[JobSocketCapability] = true
	c.PresenceCapabilities = pc
	return c
}

// View is the Manager's state as the AutoManager decides on it.
type View struct {
	Nodes []*managerv1.Node
	// PlacementNodes, when set, are Nodes as placement sees them
	// (placementNode of each, in the same order): the mirror keeps them as
	// node events arrive, so a pass does not convert the fleet again. Nil:
	// Plan converts Nodes.
	PlacementNodes []placement.Node
	// Jobs with their instances; History may be nil for a job whose history
	// was not fetched (Plan then asks for it in NeedHistory).
	Jobs    []*managerv1.JobWithHistory
	Bundles []*managerv1.Bundle
	// Leases is nil when not fetched (Plan then sets NeedLeases if it must
	// know).
	Leases *managerv1.LeaseStatus
	// ProvisionHold maps an elastic tier to the time before which no node
	// is created in it (a creation there failed).
	ProvisionHold map[string]time.Time
	// Migrating are the jobs with a migration in flight: the saga, not
	// placement, decides for them until it ends.
	Migrating map[string]bool
	// Migrations are migration records, ended ones included: the repairs
	// among them are what the repair limits count, and the only ones Plan
	// reads (an incremental pass gives only those).
	Migrations []*managerv1.MigrationState
	// Others, when set, gives what the live instances of the jobs that are
	// not in Jobs hold on the reachable nodes: Jobs (and Bundles) are then
	// the part of the state a pass plans, and Others the room the rest
	// takes. Nil: Jobs are every job.
	Others func(reachable func(nodeID string) bool) []placement.Allocation
	// Placement, when set, gives the placement state this view's nodes
	// and live instances make (passNodes of Nodes; what every instance
	// that has not stopped holds on a reachable node, of Jobs and the
	// others alike), kept by the mirror across passes and built only when
	// first asked for: Plan, when it has something to place, places on it
	// instead of building one from Jobs and Others, and rolls back what it
	// committed before it returns. Nil, or a nil state: Plan builds it.
	Placement func() *placement.State
	// Reachable, when set, says whether a node of Nodes is online or
	// stopping (reachableOf, answered by the mirror's index rather than an
	// index built per pass). Nil: Plan indexes Nodes.
	Reachable func(nodeID string) bool
	// Prefetched maps "node|images" to when the AutoManager last asked a
	// spare to prefetch them (spares.go; safe to lose).
	Prefetched map[string]time.Time
	// WarmJobs, when set, are the jobs the spares' images and bindings are
	// read from (an incremental pass plans only some jobs; the spares are
	// warm for templates, and consumed by any job, whatever it planned).
	// Nil: Jobs.
	WarmJobs []*managerv1.JobWithHistory
	// templates, when set, remembers the bundle jobs found running their
	// template (templates.go); the AutoManager's passes set it.
	templates *templateMemo
}

// ActionKind is what an Action does.
type ActionKind int

const (
	// ActStart binds JobID/Role to NodeID (StartJob with Placement).
	ActStart ActionKind = iota + 1
	// ActMarkFailed ends JobID for good (MarkJobFailed with Reason).
	ActMarkFailed
	// ActDeleteBundle starts or finishes BundleID's deletion.
	ActDeleteBundle
	// ActUpdateJob rolls a changed bundle template onto Job.
	ActUpdateJob
	// ActStop stops JobID/Role on NodeID so that it restarts on its job's
	// current spec (a rolling restart of a bundle replica).
	ActStop
	// ActProvision creates a node in the elastic tier Pool through
	// Provider, for the instances Reason names.
	ActProvision
	// ActRepair migrates JobID's instance Role (a replica of BundleID that
	// is not the primary) to NodeID with the overlap strategy, to restore
	// the anti-affinity Reason names (repair.go).
	ActRepair
)

// Action is one call Plan wants made.
type Action struct {
	Kind      ActionKind
	JobID     string
	Role      string
	NodeID    string
	Placement *managerv1.PlacementEvent
	Reason    string
	BundleID  string
	Job       *managerv1.Job
	Provider  string
	Pool      string
	// Type is the instance type an ActProvision of a cloud tier creates.
	Type *ElasticType
	// RuntimeRole is the slot a start under a migration target's key is
	// told ("" = its role).
	RuntimeRole string
	// Tags are an ActProvisionSpare's node tags; Images an ActPrefetch's
	// refs.
	Tags   map[string]string
	Images []string
}

// Unplaced is an instance that needs a node and fits none.
type Unplaced struct {
	JobID, Role string
	Summary     string
}

// Decision is what Plan decided.
type Decision struct {
	Actions  []Action
	Unplaced []Unplaced
	// NextAt is the earliest time a decision that is waiting (a backoff, a
	// lease, a stop time) falls due; zero = none.
	NextAt time.Time
	// NeedHistory lists jobs whose history Plan needs and the View lacks.
	NeedHistory []string
	// NeedLeases: Plan needs the lease status and the View lacks it.
	NeedLeases bool
	// Degraded counts the running instances whose node breaks a FORBID
	// anti-affinity rule of their bundle.
	Degraded int
	// degradedBundles counts Degraded by bundle.
	degradedBundles map[string]int
	// SparesBlocked names each tier whose spares cannot be created now,
	// and why (set when sparesDecided: the decision planned the spares).
	SparesBlocked map[string]string
	sparesDecided bool
}

func (d *Decision) due(t time.Time) {
	if d.NextAt.IsZero() || t.Before(d.NextAt) {
		d.NextAt = t
	}
}

const (
	phaseStopped   = managerv1.InstancePhase_INSTANCE_PHASE_STOPPED
	desiredStopped = managerv1.InstanceDesired_INSTANCE_DESIRED_STOPPED
	nodeOnline     = managerv1.NodeState_NODE_STATE_ONLINE
	nodeStopping   = managerv1.NodeState_NODE_STATE_STOPPING
	nodeStarting   = managerv1.NodeState_NODE_STATE_STARTING
	reasonFailed   = managerv1.StoppingReason_STOPPING_REASON_JOB_FAILED
	reasonUser     = managerv1.StoppingReason_STOPPING_REASON_USER_REQUESTED
)

// slot is one instance the AutoManager keeps placed: a job and the role it
// runs in.
type slot struct {
	job    *managerv1.JobWithHistory
	bundle *managerv1.Bundle
	role   string
	// key is the instance key the placement binds: the slot (role), or the
	// migration target key its live instance holds.
	key string
	// recovery is the failure being recovered from (nil: first placement
	// or a restart after a stop).
	recovery *failure
	// restart: a bundle job stopped on purpose (a rolling restart, a
	// StopJob) is started again.
	restart bool
}

// failure is the instance's last failure and the count within the window.
type failure struct {
	at       time.Time
	nodeID   string
	why      string
	lostNode bool
	// jobFailures counts the instance's own failures within the window
	// (each binding once); excluded maps the nodes it failed on, or lost,
	// within the window to why.
	jobFailures int
	excluded    map[string]string
}

// Plan decides what to do now. It is pure: the same view, policy and time
// give the same decision (v.Placement it changes only while it runs).
func Plan(v View, p Policy, now time.Time) Decision {
	p.defaults()
	var d Decision
	reachable := v.Reachable
	if reachable == nil {
		reachable = reachableOf(v.Nodes)
	}
	bundles := make(map[string]*managerv1.Bundle, len(v.Bundles))
	for _, b := range v.Bundles {
		bundles[b.GetBundleId()] = b
	}
	jobs := make(map[string]*managerv1.JobWithHistory, len(v.Jobs))
	for _, j := range v.Jobs {
		jobs[j.GetJob().GetJobId()] = j
	}

	planBundles(&d, v.Bundles, jobs, v.Migrating, v.templates, reachable, now)
	planSpares(&d, v, p, now, v.Prefetched)

	var slots []slot
	for _, jh := range v.Jobs {
		job := jh.GetJob()
		bundle := bundles[job.GetTags()[placement.TagBundleID]]
		role, ok := managedRole(job, bundle)
		if !ok || v.Migrating[job.GetJobId()] {
			continue // a migration in flight decides for its job
		}
		s, wait := classify(&d, jh, bundle, role, v.Leases, reachable, p, now)
		if !wait {
			slots = append(slots, s)
		}
	}
	if len(slots) == 0 && !mayBreak(v.Bundles, jobs, v.Nodes) {
		return d
	}
	view, offline, starting := passNodes(v.Nodes, v.PlacementNodes)
	var st *placement.State
	if v.Placement != nil {
		st = v.Placement()
	}
	if st != nil {
		// The mirror's state, kept across passes: what this pass commits
		// comes back as the store's own bindings.
		st.Savepoint()
		defer st.Rollback()
	} else {
		live := liveAllocations(p.Placement, v, reachable)
		if v.Others != nil {
			live = append(live, v.Others(reachable)...)
		}
		var err error
		if st, err = placement.NewState(p.Placement, view, live); err != nil {
			for _, s := range slots {
				d.Unplaced = append(d.Unplaced, Unplaced{JobID: s.job.GetJob().GetJobId(), Role: s.role, Summary: err.Error()})
			}
			return d
		}
	}
	// Recoveries first (a live channel is dark), then in bundle order:
	// replica 0 of every job before replica 1, so anti-affinity and
	// co-location see the primaries placed.
	sort.SliceStable(slots, func(i, j int) bool {
		a, b := slots[i], slots[j]
		if (a.recovery != nil) != (b.recovery != nil) {
			return a.recovery != nil
		}
		ab, ar, an, _ := placement.BundleJobOf(a.job.GetJob())
		bb, br, bn, _ := placement.BundleJobOf(b.job.GetJob())
		if ab != bb {
			return ab < bb
		}
		if ar != br {
			return ar < br
		}
		if an != bn {
			return an < bn
		}
		return a.job.GetJob().GetJobId() < b.job.GetJob().GetJobId()
	})
	var unplaced []slotRequest
	for _, s := range slots {
		if req, ok := placeSlot(&d, st, s, offline, starting, p); !ok {
			unplaced = append(unplaced, slotRequest{s, req})
		}
	}
	provision(&d, unplaced, v.ProvisionHold, tierRuntimes(v.Nodes), p, now)
	// Repairs last: what is dark is placed first, and a repair takes only
	// the room left.
	exclude := make(map[string]string, len(starting))
	for id := range starting {
		exclude[id] = "the node is starting"
	}
	planRepairs(&d, st, v, jobs, reachable, exclude, p, now)
	return d
}

// passNodes is the nodes as a pass places on them: those that are not
// online (or drain) unavailable in the placement state (offline: why, by
// id), so that no request names them, except the elastic nodes still
// starting, whose capacity is promised — an instance placed on one waits
// for it rather than making another node — and which a request excludes
// only until nothing else fits. converted, when it holds as many nodes,
// is nodes already converted (View.PlacementNodes); it is not changed.
func passNodes(nodes []*managerv1.Node, converted []placement.Node) (view []placement.Node, offline map[string]string, starting map[string]bool) {
	if len(converted) == len(nodes) && len(nodes) > 0 {
		view, offline = converted, map[string]string{}
		for i := range view {
			if why := view[i].Unavailable; why != "" {
				offline[view[i].ID] = why
			}
		}
	} else {
		view, offline, _ = placementNodes(nodes)
		converted = nil
	}
	starting = map[string]bool{}
	for i, n := range nodes {
		if n.GetState() == nodeStarting && n.GetElastic() {
			if converted != nil {
				view, converted = slices.Clone(view), nil
			}
			starting[n.GetNodeId()] = true
			delete(offline, n.GetNodeId())
			view[i].Unavailable = ""
		}
	}
	return view, offline, starting
}

// tierRuntimes maps each pool tier to the runtime its elastic nodes'
// workers report, when they agree: a node a provider creates there is
// taken to run the same, so a spec no such node's runtime runs does not
// make node after node (none said, or they differ: unknown, "").
func tierRuntimes(nodes []*managerv1.Node) map[string]string {
	out := map[string]string{}
	mixed := map[string]bool{}
	for _, n := range nodes {
		if !n.GetElastic() || n.GetRuntime() == "" || n.GetState() == managerv1.NodeState_NODE_STATE_TERMINATED {
			continue
		}
		tier := n.GetTags()[placement.TagPool]
		if rt, ok := out[tier]; ok && rt != n.GetRuntime() {
			mixed[tier] = true
		}
		out[tier] = n.GetRuntime()
	}
	for tier := range mixed {
		delete(out, tier)
	}
	return out
}

// slotRequest is a slot that fits no node, with its placement request.
type slotRequest struct {
	slot
	req placement.Request
}

// managedRole is the role the AutoManager keeps job placed in, if any: a
// live bundle's replica job that is not dormant, or a job with
// autoPlacement of no bundle ("primary"). A terminal job is never placed.
func managedRole(job *managerv1.Job, bundle *managerv1.Bundle) (string, bool) {
	if job.GetTerminalState() != nil {
		return "", false
	}
	if _, replica, _, ok := placement.BundleJobOf(job); ok {
		if bundle == nil || bundle.GetState() != managerv1.BundleState_BUNDLE_STATE_LIVE || job.GetTags()[jobspec.TagDormant] == "true" {
			return "", false
		}
		return jobspec.ReplicaRole(replica), true
	}
	if job.GetAutoPlacement() == nil {
		return "", false
	}
	return "primary", true
}

// classify decides what one managed instance needs: nothing (running, or
// waiting for something), a first placement, or a recovery. wait is true
// when it needs no placement now.
func classify(d *Decision, jh *managerv1.JobWithHistory, bundle *managerv1.Bundle, role string, leases *managerv1.LeaseStatus,
	reachable func(string) bool, p Policy, now time.Time) (s slot, wait bool) {
	job := jh.GetJob()
	s = slot{job: jh, bundle: bundle, role: role}
	// The slot's instance: under its own key, or a migration's target key
	// (primary@…) once a migration completed into it.
	in := currentInstance(jh, role)
	s.key = role
	if in != nil && in.GetPhase() != phaseStopped {
		// Re-placed under the key it holds, so the new binding's fencing
		// token supersedes the copy a returning node may still run.
		s.key = in.GetRole()
	}
	switch {
	case in == nil:
		// Never placed. A job of no bundle is placed only while it has
		// never run (its state is pre): a user who stopped it meant it.
		if bundle == nil && job.GetState() != managerv1.JobState_JOB_STATE_PRE {
			return s, true
		}
		return s, false
	case reachable(in.GetNodeId()) && (in.GetDesired() != desiredStopped || in.GetPhase() != phaseStopped):
		return s, true // running, starting or stopping where its worker answers
	case in.GetDesired() == desiredStopped && in.GetStopReason() == reasonUser && in.GetMigrationId() != "":
		// Stopped by a migration that ended without its job running (it
		// failed forward): the job is placed again.
		s.restart = true
		return s, false
	case in.GetDesired() == desiredStopped && in.GetStopReason() == reasonUser:
		// Stopped on purpose: a bundle keeps its jobs running (StopBundleJob
		// is how to keep one down); any other job stays stopped.
		s.restart = true
		return s, bundle == nil
	}
	// It failed, or its node was lost (or terminated) under it.
	if !reachable(in.GetNodeId()) && in.GetPhase() != phaseStopped && job.GetLeaseProtected() {
		// A lost holder may still run it until its lease runs out.
		if leases == nil {
			d.NeedLeases = true
			return s, true
		}
		if leases.GetPaused() {
			return s, true // nothing whose holder was lost starts until resume
		}
		for _, l := range leases.GetLeases() {
			if l.GetJobId() == job.GetJobId() && l.GetRole() == in.GetRole() && !l.GetExpired() {
				d.due(l.GetExpiresAt().AsTime())
				return s, true
			}
		}
	}
	if jh.GetHistory() == nil {
		d.NeedHistory = append(d.NeedHistory, job.GetJobId())
		return s, true
	}
	f := failureOf(jh.GetHistory(), role, in, p, now)
	s.recovery = f
	if f.jobFailures >= p.RestartCeiling {
		d.Actions = append(d.Actions, Action{Kind: ActMarkFailed, JobID: job.GetJobId(), Role: role,
			Reason: fmt.Sprintf("restart ceiling reached: %d failures of %s within %s (last on node %s: %s)",
				f.jobFailures, role, p.RestartWindow, f.nodeID, f.why)})
		return s, true
	}
	if !f.lostNode && f.jobFailures > 0 {
		delay := p.BackoffBase << (f.jobFailures - 1)
		if delay > p.BackoffMax || delay <= 0 {
			delay = p.BackoffMax
		}
		if at := f.at.Add(delay); now.Before(at) {
			d.due(at)
			return s, true
		}
	}
	return s, false
}

// failureOf reads the instance's failures within the window from the job's
// history (newest first): the last one, the nodes to exclude and the count
// of its own failures, each binding (fencing token) counted once. cur is
// the current binding: a loss recorded in its history counts even before
// any stopping entry names it.
func failureOf(history []*managerv1.JobHistoryEntry, role string, cur *managerv1.Instance, p Policy, now time.Time) *failure {
	f := &failure{excluded: map[string]string{}}
	since := now.Add(-p.RestartWindow)
	counted := map[uint64]bool{}
	first := true
	for _, e := range history {
		st := e.GetStopping()
		if st == nil || jobspec.SlotOf(st.GetInstance().GetRole()) != role {
			continue
		}
		at := e.GetTimestamp().AsTime()
		if at.Before(since) {
			break
		}
		ref := st.GetInstance()
		switch st.GetReason() {
		case reasonUser:
			continue
		case reasonFailed:
			if !counted[ref.GetFencingToken()] {
				counted[ref.GetFencingToken()] = true
				f.jobFailures++
			}
			if _, ok := f.excluded[ref.GetNodeId()]; !ok {
				f.excluded[ref.GetNodeId()] = fmt.Sprintf("the job failed there at %s", at.UTC().Format(time.RFC3339))
			}
		default:
			if _, ok := f.excluded[ref.GetNodeId()]; !ok {
				f.excluded[ref.GetNodeId()] = fmt.Sprintf("the node lost the job at %s", at.UTC().Format(time.RFC3339))
			}
		}
		if first {
			first = false
			f.at, f.nodeID = at, ref.GetNodeId()
			f.why = st.GetAdditionalReason()
			if f.why == "" {
				f.why = strings.ToLower(strings.TrimPrefix(st.GetReason().String(), "STOPPING_REASON_"))
			}
			f.lostNode = st.GetReason() != reasonFailed
		}
	}
	if first && cur != nil {
		// No stopping entry yet (the node went away under it).
		f.at, f.nodeID, f.why, f.lostNode = now, cur.GetNodeId(), "its node is gone", true
		f.excluded[cur.GetNodeId()] = "the job's node is gone"
	}
	return f
}

// placeSlot places one instance on st, committing it so the next slot sees
// it, and records the start (or that nothing fits: ok is false, with the
// request made). An instance placed on a node that is still starting
// waits for it. The nodes that are not online are unavailable in st
// (offline: why, by id); the request excludes only what is its own —
// the nodes a recovery failed on that are online, and the starting ones
// — so its cost does not grow with the nodes that are down.
func placeSlot(d *Decision, st *placement.State, s slot, offline map[string]string, starting map[string]bool, p Policy) (req placement.Request, ok bool) {
	job := s.job.GetJob()
	req = placement.RequestForJob(p.Placement, job, s.bundle, s.key)
	kind := "first"
	if s.restart {
		kind = "restart"
	}
	exclude := func(id, why string) {
		if req.Exclude == nil {
			req.Exclude = map[string]string{}
		}
		req.Exclude[id] = why
	}
	if s.recovery != nil {
		kind = "recovery"
		req.Recovery = true
		for id, why := range s.recovery.excluded {
			// An unavailable node is refused saying why it is (the
			// state marks it), whatever the job did there.
			if _, off := offline[id]; !off {
				exclude(id, why)
			}
		}
	}
	for id := range starting {
		exclude(id, "the node is starting")
	}
	res, err := st.Place(req)
	if err == nil && s.recovery != nil && len(s.recovery.excluded) > 0 && (res.NodeID == "" || len(res.Degradations) > 0) {
		// Nowhere else — or only where the bundle's resilience breaks: a
		// node the job failed on beats staying dark, and beats putting the
		// primary beside its backup.
		alt := req
		alt.Exclude = make(map[string]string, len(req.Exclude))
		for id, why := range req.Exclude {
			if _, failed := s.recovery.excluded[id]; !failed {
				alt.Exclude[id] = why
			}
		}
		if r2, err2 := st.Place(alt); err2 == nil && r2.NodeID != "" && (res.NodeID == "" || len(r2.Degradations) < len(res.Degradations)) {
			res, req = r2, alt
		}
	}
	if err == nil && res.NodeID == "" && len(starting) > 0 {
		// A node being created for it (or with room) beats another one.
		for id := range starting {
			delete(req.Exclude, id)
		}
		res, err = st.Place(req)
	}
	if err != nil {
		d.Unplaced = append(d.Unplaced, Unplaced{JobID: job.GetJobId(), Role: s.role, Summary: err.Error()})
		return req, true // an invalid request: a new node would not help
	}
	if res.NodeID == "" {
		d.Unplaced = append(d.Unplaced, Unplaced{JobID: job.GetJobId(), Role: s.role, Summary: res.Summary()})
		return req, false
	}
	if err := st.Commit(req.Allocation(res)); err != nil {
		d.Unplaced = append(d.Unplaced, Unplaced{JobID: job.GetJobId(), Role: s.role, Summary: err.Error()})
		return req, true
	}
	if starting[res.NodeID] {
		d.Unplaced = append(d.Unplaced, Unplaced{JobID: job.GetJobId(), Role: s.role,
			Summary: fmt.Sprintf("waiting for node %s, which is starting, to come online", res.NodeID)})
		return req, true
	}
	ev := &managerv1.PlacementEvent{JobId: job.GetJobId(), Role: s.key, NodeId: res.NodeID, Kind: kind, Summary: res.Summary()}
	for _, dg := range res.Degradations {
		ev.Degradations = append(ev.Degradations, &managerv1.PlacementRefusal{Rule: string(dg.Rule), Reason: dg.Reason})
	}
	if f := s.recovery; f != nil {
		ev.FailedNodeId, ev.Failure = f.nodeID, f.why
		ev.Failures, ev.Ceiling = uint32(f.jobFailures), uint32(p.RestartCeiling)
	}
	act := Action{Kind: ActStart, JobID: job.GetJobId(), Role: s.key, NodeID: res.NodeID, Placement: ev}
	if s.key != s.role {
		act.RuntimeRole = s.role
	}
	d.Actions = append(d.Actions, act)
	return req, true
}

// provision decides the nodes to create for the instances that fit no
// node (a new node runs what the tier's nodes run, runtimes): each goes, in order, to the cheapest elastic tier of its pool that
// is not on hold and where a new node would take it, sharing the nodes
// this pass creates with the instances before it. The instances stay
// unplaced until their node is online (placement then sees it like any
// other), so a creation that fails or is slow never strands them.
func provision(d *Decision, unplaced []slotRequest, hold map[string]time.Time, runtimes map[string]string, p Policy, now time.Time) {
	if len(unplaced) == 0 || len(p.Elastic) == 0 {
		return
	}
	type tierPlan struct {
		et     ElasticTier
		nodes  []placement.Node
		types  []*ElasticType // per node: its instance type (cloud tiers)
		allocs []placement.Allocation
		for_   []string
	}
	plans := map[string]*tierPlan{}
	var order []string
	made := 0
	summary := map[string]int{} // index into d.Unplaced
	for i, u := range d.Unplaced {
		summary[u.JobID+"/"+u.Role] = i
	}
	note := func(key, s string) {
		if i, ok := summary[key]; ok {
			d.Unplaced[i].Summary += "; " + s
		}
	}
	for _, u := range unplaced {
		key := u.job.GetJob().GetJobId() + "/" + u.role
		et, ok := elasticTierFor(u.req.Pool, p, hold, now)
		if !ok {
			continue
		}
		if et.VCPUs == 0 && len(et.Types) == 0 {
			note(key, fmt.Sprintf("no instance type of elastic tier %s is known yet (the instance-type cache is loading, or offers none of its types)", et.Tier))
			continue
		}
		tp := plans[et.Tier]
		if tp == nil {
			tp = &tierPlan{et: et}
			plans[et.Tier] = tp
			order = append(order, et.Tier)
		}
		req := u.req
		req.Exclude, req.PinNode, req.Explain = nil, "", false
		place := func() (placement.Result, bool) {
			st, err := placement.NewState(p.Placement, tp.nodes, tp.allocs)
			if err != nil {
				return placement.Result{}, false
			}
			res, err := st.Place(req)
			return res, err == nil && res.NodeID != ""
		}
		res, fits := place()
		if !fits {
			if made >= p.MaxProvisionPerPass {
				continue
			}
			id := fmt.Sprintf("new %s node %d", et.Tier, len(tp.nodes)+1)
			var typ *ElasticType
			vcpus := et.VCPUs
			why := fmt.Sprintf("creating a node in elastic tier %s for it", et.Tier)
			if len(et.Types) > 0 {
				t, rej, ok := chooseType(p.Placement, et, req)
				if !ok {
					note(key, fmt.Sprintf("no instance type of elastic tier %s would take it: %s", et.Tier, rejectionsText(rej)))
					continue
				}
				typ, vcpus = &t, t.VCPUs
				why = fmt.Sprintf("creating a %s node in elastic tier %s for it", t.describe(), et.Tier)
				if len(rej) > 0 {
					why += " (" + rejectionsText(rej) + ")"
				}
			}
			tp.nodes = append(tp.nodes, placement.Node{
				ID: id, Pool: et.Tier, VCPUs: vcpus,
				Attributes: map[string]string{placement.TagPool: et.Tier}, Runtime: runtimes[et.Tier],
			})
			tp.types = append(tp.types, typ)
			if res, fits = place(); !fits {
				tp.nodes, tp.types = tp.nodes[:len(tp.nodes)-1], tp.types[:len(tp.types)-1]
				note(key, fmt.Sprintf("a new node of elastic tier %s (%d vCPUs) would not take it either", et.Tier, vcpus))
				continue
			}
			made++
			note(key, why)
		} else {
			note(key, fmt.Sprintf("creating a node in elastic tier %s for it", et.Tier))
		}
		tp.allocs = append(tp.allocs, req.Allocation(res))
		tp.for_ = append(tp.for_, key)
	}
	for _, tier := range order {
		tp := plans[tier]
		for n := range tp.nodes {
			var whom []string
			for k, a := range tp.allocs {
				if a.NodeID == tp.nodes[n].ID {
					whom = append(whom, tp.for_[k])
				}
			}
			d.Actions = append(d.Actions, Action{Kind: ActProvision, Provider: tp.et.Provider, Pool: tier, Type: tp.types[n],
				Reason: "nothing fits " + strings.Join(whom, ", ")})
		}
	}
}

// elasticTierFor is the cheapest elastic tier of pool not on hold (pool
// "": any elastic tier).
func elasticTierFor(pool string, p Policy, hold map[string]time.Time, now time.Time) (ElasticTier, bool) {
	tiers := p.Placement.Pools[pool]
	if len(tiers) == 0 && pool != "" {
		tiers = []string{pool}
	}
	usable := func(et ElasticTier) bool { return !now.Before(hold[et.Tier]) }
	if pool == "" {
		for _, et := range p.Elastic {
			if usable(et) {
				return et, true
			}
		}
		return ElasticTier{}, false
	}
	for _, t := range tiers {
		for _, et := range p.Elastic {
			if et.Tier == t && usable(et) {
				return et, true
			}
		}
	}
	return ElasticTier{}, false
}

// planBundles finishes deletions whose instances are all gone, starts the
// deletion of bundles whose stop time or lease has passed, and rolls
// changed templates one replica at a time.
func planBundles(d *Decision, bundles []*managerv1.Bundle, jobs map[string]*managerv1.JobWithHistory, migrating map[string]bool, templates *templateMemo, reachable func(string) bool, now time.Time) {
	for _, b := range bundles {
		id := b.GetBundleId()
		switch {
		case b.GetState() == managerv1.BundleState_BUNDLE_STATE_DELETING:
			if bundleStopped(b, jobs, reachable) {
				d.Actions = append(d.Actions, Action{Kind: ActDeleteBundle, BundleID: id, Reason: "every instance has stopped"})
			}
			continue
		case b.GetStopAt() != nil && !now.Before(b.GetStopAt().AsTime()):
			d.Actions = append(d.Actions, Action{Kind: ActDeleteBundle, BundleID: id, Reason: "its stop time passed"})
			continue
		case b.GetLeaseExpiresAt() != nil && !now.Before(b.GetLeaseExpiresAt().AsTime()):
			d.Actions = append(d.Actions, Action{Kind: ActDeleteBundle, BundleID: id, Reason: "its lease ran out unrenewed"})
			continue
		}
		if b.GetStopAt() != nil {
			d.due(b.GetStopAt().AsTime())
		}
		if b.GetLeaseExpiresAt() != nil {
			d.due(b.GetLeaseExpiresAt().AsTime())
		}
		d.Actions = append(d.Actions, roll(b, jobs, migrating, templates)...)
	}
}

// bundleStopped reports whether no instance of the bundle's jobs still runs
// where a worker could be running it.
func bundleStopped(b *managerv1.Bundle, jobs map[string]*managerv1.JobWithHistory, reachable func(string) bool) bool {
	for r := 0; r < jobspec.Replicas(b); r++ {
		for _, spec := range b.GetJobs() {
			jh := jobs[jobspec.BundleJobID(b.GetBundleId(), spec.GetJobName(), r)]
			for _, in := range jh.GetInstances() {
				if in.GetPhase() != phaseStopped && reachable(in.GetNodeId()) {
					return false
				}
			}
		}
	}
	return true
}

// roll brings a bundle's replica jobs to its current templates with the
// least disruption. Every job whose template changed is updated at once:
// an update restarts nothing (decision 0005), the running instance keeps
// its spec until it restarts. Then, when the bundle has more than one
// replica, the replicas running an older spec are restarted one at a time,
// the highest first (backups before the primary), and only while every
// other replica is running — so a full replica stays on air throughout.
// A bundle of one replica is never restarted for a change: it takes the new
// spec at its next restart (or migration).
func roll(b *managerv1.Bundle, jobs map[string]*managerv1.JobWithHistory, migrating map[string]bool, templates *templateMemo) []Action {
	var updates []Action
	replicas := jobspec.Replicas(b)
	// stale[r]: the running instances of replica r on an older spec.
	stale := make([][]*managerv1.Instance, replicas)
	settled := make([]bool, replicas)
	for r := replicas - 1; r >= 0; r-- {
		settled[r] = true
		for i, spec := range b.GetJobs() {
			jh := jobs[jobspec.BundleJobID(b.GetBundleId(), spec.GetJobName(), r)]
			if jh == nil {
				settled[r] = false
				continue
			}
			if next, same := templates.runs(b, i, r, jh.GetJob()); !same {
				next.CurrentHash = jh.GetJob().GetCurrentHash()
				if jh.GetJob().GetTags()[jobspec.TagDormant] == "true" {
					next.Tags[jobspec.TagDormant] = "true"
				} else {
					delete(next.Tags, jobspec.TagDormant)
				}
				updates = append(updates, Action{Kind: ActUpdateJob, JobID: next.GetJobId(), BundleID: b.GetBundleId(), Job: next, Reason: "bundle template changed"})
				settled[r] = false
				continue
			}
			if jh.GetJob().GetTags()[jobspec.TagDormant] == "true" {
				continue
			}
			cur := currentInstance(jh, jobspec.ReplicaRole(r))
			switch {
			case migrating[jh.GetJob().GetJobId()]:
				settled[r] = false // a migration moves it; roll after
			case cur == nil || cur.GetPhase() != managerv1.InstancePhase_INSTANCE_PHASE_RUNNING || cur.GetDesired() == desiredStopped:
				settled[r] = false
			case cur.GetJobHash() != jh.GetJob().GetCurrentHash():
				stale[r] = append(stale[r], cur)
			}
		}
	}
	if len(updates) > 0 || replicas < 2 {
		return updates
	}
	for r := replicas - 1; r >= 0; r-- {
		if len(stale[r]) == 0 {
			continue
		}
		for o := 0; o < replicas; o++ {
			if o != r && (!settled[o] || len(stale[o]) > 0 && o > r) {
				return nil // another replica is not fully on air (or rolls first)
			}
		}
		var out []Action
		for _, in := range stale[r] {
			out = append(out, Action{Kind: ActStop, JobID: in.GetJobId(), Role: in.GetRole(), NodeID: in.GetNodeId(), BundleID: b.GetBundleId(),
				Reason: "restarting on the bundle's new template"})
		}
		return out
	}
	return nil
}
