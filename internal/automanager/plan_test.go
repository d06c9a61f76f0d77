package automanager

import (
	"maps"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/pkg/jobspec"
	"github.com/norsk-go/norsk-manager/pkg/placement"
)

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func node(id string, tags ...string) *managerv1.Node {
	n := &managerv1.Node{NodeId: id, State: nodeOnline, Hardware: &managerv1.Hardware{Vcpus: 8}, Tags: map[string]string{}}
	for i := 0; i+1 < len(tags); i += 2 {
		n.Tags[tags[i]] = tags[i+1]
	}
	return n
}

func lost(n *managerv1.Node) *managerv1.Node {
	n.State = managerv1.NodeState_NODE_STATE_LOST
	return n
}

func bundle(id string, resilient bool) *managerv1.Bundle {
	b := &managerv1.Bundle{BundleId: id, Jobs: []*managerv1.BundleJobSpec{{
		JobName:      "channel",
		Requirements: &managerv1.JobRequirements{RequiredCapacity: 0.5},
		Job:          &managerv1.Job{Services: []*managerv1.Service{{Name: "main", Image: "x", Command: []string{"/bin/true"}}}},
	}}}
	if resilient {
		b.ResiliencePolicy = &managerv1.ResiliencePolicy{SameNode: managerv1.AntiAffinity_ANTI_AFFINITY_FORBID}
	}
	return b
}

// jobsOf expands a bundle into its stored jobs (with a created history).
func jobsOf(b *managerv1.Bundle) []*managerv1.JobWithHistory {
	var out []*managerv1.JobWithHistory
	for r := 0; r < jobspec.Replicas(b); r++ {
		for i := range b.GetJobs() {
			j := jobspec.ExpandBundleJob(b, i, r)
			j.CurrentHash = 10
			out = append(out, &managerv1.JobWithHistory{Job: j, History: []*managerv1.JobHistoryEntry{
				{Timestamp: timestamppb.New(t0.Add(-time.Hour)), Event: &managerv1.JobHistoryEntry_Created{Created: &managerv1.JobCreated{}}},
			}})
		}
	}
	return out
}

func running(jh *managerv1.JobWithHistory, role, nodeID string, token uint64) *managerv1.Instance {
	in := &managerv1.Instance{JobId: jh.GetJob().GetJobId(), Role: role, NodeId: nodeID, FencingToken: token,
		Desired: managerv1.InstanceDesired_INSTANCE_DESIRED_RUNNING, Phase: managerv1.InstancePhase_INSTANCE_PHASE_RUNNING,
		JobHash: jh.GetJob().GetCurrentHash()}
	jh.Instances = append(jh.Instances, in)
	jh.Job.State = managerv1.JobState_JOB_STATE_ACTIVE
	return in
}

// failed records that the instance failed (or was lost) at `at`.
func failed(jh *managerv1.JobWithHistory, in *managerv1.Instance, reason managerv1.StoppingReason, at time.Time) {
	in.Phase = phaseStopped
	in.Desired = desiredStopped
	in.StopReason = reason
	e := &managerv1.JobHistoryEntry{Timestamp: timestamppb.New(at), Event: &managerv1.JobHistoryEntry_Stopping{Stopping: &managerv1.InstanceStopping{
		Instance: &managerv1.InstanceRef{Role: in.GetRole(), NodeId: in.GetNodeId(), FencingToken: in.GetFencingToken()},
		Reason:   reason, AdditionalReason: "exit 3",
	}}}
	jh.History = append([]*managerv1.JobHistoryEntry{e}, jh.History...)
}

func starts(d Decision) map[string]string {
	out := map[string]string{}
	for _, a := range d.Actions {
		if a.Kind == ActStart {
			out[a.JobID+"/"+a.Role] = a.NodeID
		}
	}
	return out
}

func TestFirstPlacementKeepsReplicasApart(t *testing.T) {
	t.Parallel()
	b := bundle("news", true)
	v := View{Nodes: []*managerv1.Node{node("a"), node("b")}, Bundles: []*managerv1.Bundle{b}, Jobs: jobsOf(b)}
	d := Plan(v, Policy{}, t0)
	got := starts(d)
	p, bk := got["news.channel.0/primary"], got["news.channel.1/backup"]
	if p == "" || bk == "" || p == bk {
		t.Fatalf("starts = %v, want primary and backup on different nodes", got)
	}
	for _, a := range d.Actions {
		if a.Placement.GetKind() != "first" || a.Placement.GetSummary() == "" {
			t.Errorf("placement event %v: want kind first with a summary", a.Placement)
		}
	}
	// Same input, same decision.
	if again := starts(Plan(v, Policy{}, t0)); again["news.channel.0/primary"] != p || again["news.channel.1/backup"] != bk {
		t.Errorf("not deterministic: %v then %v", got, again)
	}
}

func TestForbidDegradesWhenOneNode(t *testing.T) {
	t.Parallel()
	b := bundle("news", true)
	v := View{Nodes: []*managerv1.Node{node("a")}, Bundles: []*managerv1.Bundle{b}, Jobs: jobsOf(b)}
	d := Plan(v, Policy{}, t0)
	if len(starts(d)) != 2 {
		t.Fatalf("starts = %v, want both replicas placed (degraded)", starts(d))
	}
	degraded := false
	for _, a := range d.Actions {
		degraded = degraded || len(a.Placement.GetDegradations()) > 0
	}
	if !degraded {
		t.Error("no placement shows the sameNode degradation")
	}
}

func TestNodeLossRecoversElsewhereAtOnce(t *testing.T) {
	t.Parallel()
	b := bundle("news", true)
	jobs := jobsOf(b)
	p := running(jobs[0], "primary", "a", 5)
	running(jobs[1], "backup", "b", 6)
	failed(jobs[0], p, managerv1.StoppingReason_STOPPING_REASON_NODE_STOPPED, t0)
	v := View{Nodes: []*managerv1.Node{lost(node("a")), node("b"), node("c")}, Bundles: []*managerv1.Bundle{b}, Jobs: jobs}
	d := Plan(v, Policy{}, t0)
	if got := starts(d); len(got) != 1 || got["news.channel.0/primary"] != "c" {
		t.Fatalf("starts = %v, want the primary alone, on c (a is lost, b holds the backup)", got)
	}
	ev := d.Actions[0].Placement
	if ev.GetKind() != "recovery" || ev.GetFailedNodeId() != "a" {
		t.Errorf("placement = %v, want a recovery from a", ev)
	}
}

func TestHotSpareTakesRecoveryFirst(t *testing.T) {
	t.Parallel()
	b := bundle("news", false)
	jobs := jobsOf(b)
	p := running(jobs[0], "primary", "a", 5)
	failed(jobs[0], p, managerv1.StoppingReason_STOPPING_REASON_NODE_STOPPED, t0)
	v := View{Nodes: []*managerv1.Node{lost(node("a")), node("b"), node("z-spare", "spare", "true")}, Bundles: []*managerv1.Bundle{b}, Jobs: jobs}
	if got := starts(Plan(v, Policy{}, t0)); got["news.channel.0/primary"] != "z-spare" {
		t.Fatalf("starts = %v, want the hot spare", got)
	}
}

func TestJobFailureBacksOffAndExcludesTheNode(t *testing.T) {
	t.Parallel()
	b := bundle("news", false)
	jobs := jobsOf(b)
	p := running(jobs[0], "primary", "a", 5)
	failed(jobs[0], p, reasonFailed, t0)
	v := View{Nodes: []*managerv1.Node{node("a"), node("b")}, Bundles: []*managerv1.Bundle{b}, Jobs: jobs}
	d := Plan(v, Policy{BackoffBase: time.Second}, t0.Add(500*time.Millisecond))
	if len(d.Actions) != 0 || !d.NextAt.Equal(t0.Add(time.Second)) {
		t.Fatalf("within the backoff: actions %v, next %v; want none until %v", d.Actions, d.NextAt, t0.Add(time.Second))
	}
	d = Plan(v, Policy{BackoffBase: time.Second}, t0.Add(time.Second))
	if got := starts(d); got["news.channel.0/primary"] != "b" {
		t.Fatalf("after the backoff: starts %v, want b (a is where it failed)", got)
	}
}

func TestRestartCeilingFailsTheJob(t *testing.T) {
	t.Parallel()
	b := bundle("news", false)
	jobs := jobsOf(b)
	for i := 0; i < 3; i++ {
		in := running(jobs[0], "primary", "a", uint64(5+i))
		failed(jobs[0], in, reasonFailed, t0.Add(time.Duration(i)*time.Minute))
		jobs[0].Instances = []*managerv1.Instance{in}
	}
	v := View{Nodes: []*managerv1.Node{node("a")}, Bundles: []*managerv1.Bundle{b}, Jobs: jobs}
	d := Plan(v, Policy{RestartCeiling: 3}, t0.Add(3*time.Minute))
	if len(d.Actions) != 1 || d.Actions[0].Kind != ActMarkFailed || !strings.Contains(d.Actions[0].Reason, "restart ceiling") {
		t.Fatalf("actions = %+v, want MarkJobFailed at the ceiling", d.Actions)
	}
	// Outside the window the old failures no longer count.
	d = Plan(v, Policy{RestartCeiling: 3, RestartWindow: 90 * time.Second}, t0.Add(3*time.Minute))
	for _, a := range d.Actions {
		if a.Kind == ActMarkFailed {
			t.Fatalf("failures outside the window counted: %+v", a)
		}
	}
	// A failed job is never placed again.
	jobs[0].Job.TerminalState = &managerv1.TerminalState{Kind: managerv1.TerminalKind_TERMINAL_KIND_FAILED}
	if d := Plan(v, Policy{RestartCeiling: 3}, t0.Add(time.Hour)); len(d.Actions) != 0 {
		t.Fatalf("a failed job got actions: %+v", d.Actions)
	}
}

func TestLeaseProtectedWaitsForTheLease(t *testing.T) {
	t.Parallel()
	b := bundle("news", false)
	b.Jobs[0].Job.LeaseProtected = true
	jobs := jobsOf(b)
	in := running(jobs[0], "primary", "a", 5)
	in.Phase = managerv1.InstancePhase_INSTANCE_PHASE_STOPPING // its node was lost
	nodes := []*managerv1.Node{lost(node("a")), node("b")}
	v := View{Nodes: nodes, Bundles: []*managerv1.Bundle{b}, Jobs: jobs}
	if d := Plan(v, Policy{}, t0); !d.NeedLeases || len(d.Actions) != 0 {
		t.Fatalf("without the lease status: %+v, want NeedLeases and no action", d)
	}
	lease := &managerv1.Lease{JobId: in.GetJobId(), Role: "primary", NodeId: "a", ExpiresAt: timestamppb.New(t0.Add(10 * time.Second))}
	v.Leases = &managerv1.LeaseStatus{Leases: []*managerv1.Lease{lease}}
	if d := Plan(v, Policy{}, t0); len(d.Actions) != 0 || !d.NextAt.Equal(t0.Add(10*time.Second)) {
		t.Fatalf("lease held: %+v, want a wait until it expires", d)
	}
	v.Leases = &managerv1.LeaseStatus{Paused: true, Leases: []*managerv1.Lease{proto.Clone(lease).(*managerv1.Lease)}}
	v.Leases.Leases[0].Expired = true
	if d := Plan(v, Policy{}, t0.Add(time.Minute)); len(d.Actions) != 0 {
		t.Fatalf("leases paused: %+v, want nothing started", d.Actions)
	}
	v.Leases.Paused = false
	if got := starts(Plan(v, Policy{}, t0.Add(time.Minute))); got[in.GetJobId()+"/primary"] != "b" {
		t.Fatalf("lease expired: starts %v, want b", got)
	}
}

func TestBundleLifecycle(t *testing.T) {
	t.Parallel()
	b := bundle("news", false)
	jobs := jobsOf(b)
	in := running(jobs[0], "primary", "a", 5)
	nodes := []*managerv1.Node{node("a")}

	b.State = managerv1.BundleState_BUNDLE_STATE_DELETING
	if d := Plan(View{Nodes: nodes, Bundles: []*managerv1.Bundle{b}, Jobs: jobs}, Policy{}, t0); len(d.Actions) != 0 {
		t.Fatalf("deleting with an instance still running: %+v, want nothing", d.Actions)
	}
	in.Phase, in.Desired = phaseStopped, desiredStopped
	d := Plan(View{Nodes: nodes, Bundles: []*managerv1.Bundle{b}, Jobs: jobs}, Policy{}, t0)
	if len(d.Actions) != 1 || d.Actions[0].Kind != ActDeleteBundle {
		t.Fatalf("deleting, all stopped: %+v, want the deletion finished", d.Actions)
	}

	b.State = managerv1.BundleState_BUNDLE_STATE_LIVE
	in.Phase, in.Desired = managerv1.InstancePhase_INSTANCE_PHASE_RUNNING, managerv1.InstanceDesired_INSTANCE_DESIRED_RUNNING
	b.StopAt = timestamppb.New(t0.Add(time.Minute))
	d = Plan(View{Nodes: nodes, Bundles: []*managerv1.Bundle{b}, Jobs: jobs}, Policy{}, t0)
	if len(d.Actions) != 0 || !d.NextAt.Equal(t0.Add(time.Minute)) {
		t.Fatalf("before the stop time: %+v", d)
	}
	if d := Plan(View{Nodes: nodes, Bundles: []*managerv1.Bundle{b}, Jobs: jobs}, Policy{}, t0.Add(time.Minute)); len(d.Actions) != 1 || d.Actions[0].Kind != ActDeleteBundle {
		t.Fatalf("at the stop time: %+v, want deletion", d.Actions)
	}
	b.StopAt = nil
	b.LeaseExpiresAt = timestamppb.New(t0)
	if d := Plan(View{Nodes: nodes, Bundles: []*managerv1.Bundle{b}, Jobs: jobs}, Policy{}, t0); len(d.Actions) != 1 || !strings.Contains(d.Actions[0].Reason, "lease") {
		t.Fatalf("lease ran out: %+v, want deletion", d.Actions)
	}
}

func TestDormantAndUserStopped(t *testing.T) {
	t.Parallel()
	b := bundle("news", false)
	b.Jobs[0].StartMode = "manual"
	v := View{Nodes: []*managerv1.Node{node("a")}, Bundles: []*managerv1.Bundle{b}, Jobs: jobsOf(b)}
	if d := Plan(v, Policy{}, t0); len(d.Actions) != 0 {
		t.Fatalf("dormant job placed: %+v", d.Actions)
	}
	// A job of no bundle with autoPlacement: placed while pre, left alone
	// once a user stopped it.
	j := &managerv1.JobWithHistory{Job: &managerv1.Job{JobId: "solo", AutoPlacement: &managerv1.AutoPlacement{}}, History: jobsOf(b)[0].History}
	v = View{Nodes: []*managerv1.Node{node("a")}, Jobs: []*managerv1.JobWithHistory{j}}
	if got := starts(Plan(v, Policy{}, t0)); got["solo/primary"] != "a" {
		t.Fatalf("pre auto job: %v, want placed", got)
	}
	in := running(j, "primary", "a", 3)
	failed(j, in, reasonUser, t0)
	if d := Plan(v, Policy{}, t0.Add(time.Hour)); len(d.Actions) != 0 {
		t.Fatalf("user-stopped job restarted: %+v", d.Actions)
	}
}

func TestTemplateChangeRollsOneReplicaAtATime(t *testing.T) {
	t.Parallel()
	b := bundle("news", true)
	jobs := jobsOf(b)
	running(jobs[0], "primary", "a", 5)
	running(jobs[1], "backup", "b", 6)
	nb := proto.Clone(b).(*managerv1.Bundle)
	nb.Jobs[0].Job.Description = "v2"
	v := View{Nodes: []*managerv1.Node{node("a"), node("b")}, Bundles: []*managerv1.Bundle{nb}, Jobs: jobs}
	d := Plan(v, Policy{}, t0)
	if len(d.Actions) != 2 || d.Actions[0].Kind != ActUpdateJob || d.Actions[1].Kind != ActUpdateJob {
		t.Fatalf("actions = %+v, want both replica jobs updated (an update restarts nothing)", d.Actions)
	}
	for i, a := range d.Actions {
		a.Job.CurrentHash = 20
		jobs[1-i].Job = a.Job
	}
	// Both run the old spec: the backup restarts first.
	d = Plan(v, Policy{}, t0)
	if len(d.Actions) != 1 || d.Actions[0].Kind != ActStop || d.Actions[0].Role != "backup" {
		t.Fatalf("actions = %+v, want the backup restarted first", d.Actions)
	}
	// While the backup restarts, the primary is left alone.
	jobs[1].Instances[0].Phase = managerv1.InstancePhase_INSTANCE_PHASE_PROVISIONED
	jobs[1].Instances[0].JobHash = 20
	if d := Plan(v, Policy{}, t0); len(d.Actions) != 0 {
		t.Fatalf("primary restarted while the backup is not on air: %+v", d.Actions)
	}
	jobs[1].Instances[0].Phase = managerv1.InstancePhase_INSTANCE_PHASE_RUNNING
	d = Plan(v, Policy{}, t0)
	if len(d.Actions) != 1 || d.Actions[0].Kind != ActStop || d.Actions[0].Role != "primary" {
		t.Fatalf("actions = %+v, want the primary restarted next", d.Actions)
	}
	// A bundle of one replica is never restarted for a change.
	single := bundle("solo", false)
	sj := jobsOf(single)
	running(sj[0], "primary", "a", 7)
	sj[0].Instances[0].JobHash = 1
	if d := Plan(View{Nodes: []*managerv1.Node{node("a")}, Bundles: []*managerv1.Bundle{single}, Jobs: sj}, Policy{}, t0); len(d.Actions) != 0 {
		t.Fatalf("a one-replica bundle was restarted: %+v", d.Actions)
	}
}

// A node the primary was lost on is avoided by its recovery — but not at
// the price of the bundle's resilience: when every other node breaks
// sameNode FORBID (the backup is there), the node it was lost on wins.
func TestRecoveryPrefersResilienceOverAvoidingTheFailedNode(t *testing.T) {
	t.Parallel()
	b := bundle("news", true)
	jobs := jobsOf(b)
	old := running(jobs[0], "primary", "a", 5)
	failed(jobs[0], old, managerv1.StoppingReason_STOPPING_REASON_NODE_STOPPED, t0.Add(-time.Minute))
	p := running(jobs[0], "primary", "c", 7)
	failed(jobs[0], p, managerv1.StoppingReason_STOPPING_REASON_NODE_STOPPED, t0)
	running(jobs[1], "backup", "b", 6)
	// a came back (after losing the primary a minute ago); c is lost now.
	v := View{Nodes: []*managerv1.Node{node("a"), node("b"), lost(node("c"))}, Bundles: []*managerv1.Bundle{b}, Jobs: jobs}
	d := Plan(v, Policy{}, t0)
	if got := starts(d); got["news.channel.0/primary"] != "a" {
		t.Fatalf("starts = %v, want a (b holds the backup; a only lost the job earlier)", got)
	}
	if dg := d.Actions[0].Placement.GetDegradations(); len(dg) != 0 {
		t.Errorf("degradations %v, want none", dg)
	}
}

// TestRequestsCarryNoUnavailableNodes: the nodes that are not online (or
// drain) are unavailable in the pass's placement state, once, and no
// placement request names them (simulation run J: 5,534 of them copied
// into every request made a pass O(placements × nodes down)). A request
// excludes only what is its own — the online nodes a recovery failed on,
// the starting ones — and an explanation still says why each node was
// refused.
func TestRequestsCarryNoUnavailableNodes(t *testing.T) {
	t.Parallel()
	draining := node("d")
	draining.Draining = true
	nodes := []*managerv1.Node{node("a"), node("b"), lost(node("c")), draining, starting("e", "", 8)}
	failedAt := t0.Add(-time.Minute).Format(time.RFC3339)
	for _, tc := range []struct {
		name     string
		nodes    []*managerv1.Node
		recovery *failure
		want     map[string]string // the request's Exclude
		placed   string
	}{
		{name: "first placement", nodes: nodes[:4], placed: "a"},
		{name: "recovery", nodes: nodes[:4], recovery: &failure{lostNode: true, excluded: map[string]string{
			"a": "the job failed there at " + failedAt, "c": "the node lost the job at " + failedAt}},
			want: map[string]string{"a": "the job failed there at " + failedAt}, placed: "b"},
		{name: "a node starting", nodes: nodes, want: map[string]string{"e": "the node is starting"}, placed: "a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			view, offline, starting := passNodes(tc.nodes, nil)
			st, err := placement.NewState(placement.Config{}, view, nil)
			if err != nil {
				t.Fatal(err)
			}
			jh := autoJob("j")
			var d Decision
			req, ok := placeSlot(&d, st, slot{job: jh, role: "primary", key: "primary", recovery: tc.recovery}, offline, starting, Policy{})
			if !ok || starts(d)["j/primary"] != tc.placed {
				t.Fatalf("placed %v (ok %v), want j/primary on %s; unplaced %v", starts(d), ok, tc.placed, d.Unplaced)
			}
			if len(req.Exclude) != len(tc.want) || !maps.Equal(req.Exclude, tc.want) {
				t.Errorf("request excludes %v, want %v", req.Exclude, tc.want)
			}
			// Explained, the same request says why c and d are refused.
			req.JobID, req.Explain = "other", true
			res, err := st.Place(req)
			if err != nil {
				t.Fatal(err)
			}
			why := map[string]string{}
			for _, v := range res.Explanation.Nodes {
				if len(v.Refusals) > 0 {
					why[v.NodeID] = string(v.Refusals[0].Rule) + ": " + v.Refusals[0].Reason
				}
			}
			if why["c"] != "exclusion: excluded: the node is lost" || why["d"] != "exclusion: excluded: the node is draining" {
				t.Errorf("explanation of c, d: %q, %q", why["c"], why["d"])
			}
		})
	}
}

// TestJobSocketIsAPresenceCapability: jobs that require the job socket
// share the one node that advertises it (count 1): it is required of a
// node, never used up — whatever presence capabilities the policy names.
func TestJobSocketIsAPresenceCapability(t *testing.T) {
	t.Parallel()
	n := node("js-node")
	n.Capabilities = []*managerv1.Capability{{Name: JobSocketCapability, Count: 1}}
	v := View{Nodes: []*managerv1.Node{n, node("plain")}}
	for _, id := range []string{"a", "b", "c"} {
		jh := autoJob(id)
		jh.Job.AutoPlacement.Requirements.RequiredCapacity = 0.1
		jh.Job.AutoPlacement.Requirements.RequiredCapabilities = []*managerv1.CapabilityRequirement{{Name: JobSocketCapability, Count: 1}}
		v.Jobs = append(v.Jobs, jh)
	}
	policy := Policy{Placement: placement.Config{PresenceCapabilities: map[string]bool{"other": true}}}
	got := starts(Plan(v, policy, t0))
	want := map[string]string{"a/primary": "js-node", "b/primary": "js-node", "c/primary": "js-node"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("starts %v, want %v", got, want)
	}
	if len(policy.Placement.PresenceCapabilities) != 1 {
		t.Errorf("Plan wrote into the caller's presence capabilities: %v", policy.Placement.PresenceCapabilities)
	}
}
