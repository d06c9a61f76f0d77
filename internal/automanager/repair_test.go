package automanager

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
)

func repairs(d Decision) []Action {
	var out []Action
	for _, a := range d.Actions {
		if a.Kind == ActRepair {
			out = append(out, a)
		}
	}
	return out
}

// degradedPair is a bundle whose primary and backup both run on node a
// (placed so while nothing else had room), with node b now online and
// empty.
func degradedPair(id string) (*managerv1.Bundle, []*managerv1.JobWithHistory) {
	b := bundle(id, true)
	jobs := jobsOf(b)
	running(jobs[0], "primary", "a", 5)
	running(jobs[1], "backup", "a", 6)
	return b, jobs
}

// repairRecord is a repair migration of job as the store keeps it.
func repairRecord(id, job string, phase managerv1.MigrationPhase, started time.Time) *managerv1.MigrationState {
	return &managerv1.MigrationState{MigrationId: id, SourceJobId: job, SourceRole: "backup", Phase: phase,
		Strategy: stratOverlap, StartedAt: timestamppb.New(started), Repair: true}
}

// Issue 12 item 9: a primary and backup placed on one node while capacity
// was short stayed together after a compliant node had room. The backup —
// never the primary — is moved, by a migration (make-before-break), to
// the node that complies, saying why.
func TestRepairMovesTheBackupOffThePrimarysNode(t *testing.T) {
	t.Parallel()
	b, jobs := degradedPair("news")
	v := View{Nodes: []*managerv1.Node{node("a"), node("b")}, Bundles: []*managerv1.Bundle{b}, Jobs: jobs}
	d := Plan(v, Policy{}, t0)
	rs := repairs(d)
	if len(rs) != 1 {
		t.Fatalf("actions %+v, want one repair", d.Actions)
	}
	r := rs[0]
	if r.JobID != "news.channel.1" || r.Role != "backup" || r.NodeID != "b" || r.BundleID != "news" {
		t.Errorf("repair %+v, want the backup moved to b", r)
	}
	for _, want := range []string{"antiAffinity.sameNode", `node a also runs job "channel" of replica 0`, "moving backup (news.channel.1) to b, which complies"} {
		if !strings.Contains(r.Reason, want) {
			t.Errorf("reason %q does not say %q", r.Reason, want)
		}
	}
	if len(d.Actions) != 1 {
		t.Errorf("actions %+v: a repair is the only thing to do (nothing stopped first)", d.Actions)
	}
	if d.Degraded != 2 {
		t.Errorf("degraded = %d, want 2 (both instances share a)", d.Degraded)
	}
	// Pure: the same view gives the same decision.
	if again := repairs(Plan(v, Policy{}, t0)); len(again) != 1 || !reflect.DeepEqual(again[0], r) {
		t.Errorf("not deterministic: %+v then %+v", r, again)
	}
}

func TestRepairWhenAndWhereItCan(t *testing.T) {
	t.Parallel()
	full := func(id string) *managerv1.Node { n := node(id); n.Hardware.Vcpus = 1; return n } // 0.5 units: full with one job
	cases := []struct {
		name  string
		setup func() View
		// want: "job/role→node" of the one repair, "" = none; degraded:
		// the instances breaking FORBID.
		want     string
		degraded int
		reason   string
	}{
		{name: "no node with room", want: "", degraded: 2, setup: func() View {
			b, jobs := degradedPair("news")
			other := bundle("other", false)
			ojobs := jobsOf(other)
			running(ojobs[0], "primary", "b", 7)
			return View{Nodes: []*managerv1.Node{node("a"), full("b")}, Bundles: []*managerv1.Bundle{b, other}, Jobs: append(jobs, ojobs...)}
		}},
		{name: "the room is a node that is not online", want: "", degraded: 2, setup: func() View {
			b, jobs := degradedPair("news")
			return View{Nodes: []*managerv1.Node{node("a"), lost(node("b"))}, Bundles: []*managerv1.Bundle{b}, Jobs: jobs}
		}},
		{name: "the room is a draining node", want: "", degraded: 2, setup: func() View {
			b, jobs := degradedPair("news")
			n := node("b")
			n.Draining = true
			return View{Nodes: []*managerv1.Node{node("a"), n}, Bundles: []*managerv1.Bundle{b}, Jobs: jobs}
		}},
		{name: "compliant already", want: "", degraded: 0, setup: func() View {
			b := bundle("news", true)
			jobs := jobsOf(b)
			running(jobs[0], "primary", "a", 5)
			running(jobs[1], "backup", "b", 6)
			return View{Nodes: []*managerv1.Node{node("a"), node("b"), node("c")}, Bundles: []*managerv1.Bundle{b}, Jobs: jobs}
		}},
		{name: "the backup is not running: nothing moves", want: "", degraded: 1, setup: func() View {
			b, jobs := degradedPair("news")
			jobs[1].Instances[0].Phase = managerv1.InstancePhase_INSTANCE_PHASE_PROVISIONED
			return View{Nodes: []*managerv1.Node{node("a"), node("b")}, Bundles: []*managerv1.Bundle{b}, Jobs: jobs}
		}},
		{name: "a migration of the bundle is in flight", want: "", degraded: 2, setup: func() View {
			b, jobs := degradedPair("news")
			return View{Nodes: []*managerv1.Node{node("a"), node("b")}, Bundles: []*managerv1.Bundle{b}, Jobs: jobs,
				Migrating: map[string]bool{"news.channel.0": true}}
		}},
		{name: "the bundle is being deleted", want: "", setup: func() View {
			b, jobs := degradedPair("news")
			b.State = managerv1.BundleState_BUNDLE_STATE_DELETING
			return View{Nodes: []*managerv1.Node{node("a"), node("b")}, Bundles: []*managerv1.Bundle{b}, Jobs: jobs}
		}},
		{name: "the primary was recovered onto the backup's node: the backup moves", want: "news.channel.1/backup→c", degraded: 2, setup: func() View {
			b := bundle("news", true)
			jobs := jobsOf(b)
			running(jobs[0], "primary", "b", 9)
			running(jobs[1], "backup", "b", 6)
			return View{Nodes: []*managerv1.Node{lost(node("a")), node("b"), node("c")}, Bundles: []*managerv1.Bundle{b}, Jobs: jobs}
		}},
		{name: "three replicas: the highest moves first", want: "news.channel.2/replica-2→c", degraded: 2, setup: func() View {
			b := bundle("news", true)
			b.ResiliencePolicy.Replicas = 3
			jobs := jobsOf(b)
			running(jobs[0], "primary", "a", 5)
			running(jobs[1], "backup", "b", 6)
			running(jobs[2], "replica-2", "b", 7)
			return View{Nodes: []*managerv1.Node{node("a"), node("b"), node("c")}, Bundles: []*managerv1.Bundle{b}, Jobs: jobs}
		}},
		{name: "a better node, not a compliant one", want: "news.channel.1/backup→b", degraded: 2, reason: "which breaks only antiAffinity.sameAz", setup: func() View {
			b, jobs := degradedPair("news")
			b.ResiliencePolicy.SameAz = managerv1.AntiAffinity_ANTI_AFFINITY_FORBID
			return View{Nodes: []*managerv1.Node{node("a", "zone", "z1"), node("b", "zone", "z1")}, Bundles: []*managerv1.Bundle{b}, Jobs: jobs}
		}},
		{name: "no better node: the same zone again", want: "", degraded: 2, setup: func() View {
			b := bundle("news", false)
			b.ResiliencePolicy = &managerv1.ResiliencePolicy{SameAz: managerv1.AntiAffinity_ANTI_AFFINITY_FORBID}
			jobs := jobsOf(b)
			running(jobs[0], "primary", "a", 5)
			running(jobs[1], "backup", "b", 6)
			return View{Nodes: []*managerv1.Node{node("a", "zone", "z1"), node("b", "zone", "z1"), node("c", "zone", "z1")}, Bundles: []*managerv1.Bundle{b}, Jobs: jobs}
		}},
		{name: "allowed to share: nothing to repair", want: "", degraded: 0, setup: func() View {
			b, jobs := degradedPair("news")
			b.ResiliencePolicy.SameNode = managerv1.AntiAffinity_ANTI_AFFINITY_ALLOW
			return View{Nodes: []*managerv1.Node{node("a"), node("b")}, Bundles: []*managerv1.Bundle{b}, Jobs: jobs}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := Plan(tc.setup(), Policy{}, t0)
			var got string
			for _, r := range repairs(d) {
				if got != "" {
					t.Fatalf("more than one repair: %+v", repairs(d))
				}
				got = r.JobID + "/" + r.Role + "→" + r.NodeID
				if tc.reason != "" && !strings.Contains(r.Reason, tc.reason) {
					t.Errorf("reason %q, want it to say %q", r.Reason, tc.reason)
				}
			}
			if got != tc.want {
				t.Errorf("repair %q, want %q (actions %+v)", got, tc.want, d.Actions)
			}
			if d.Degraded != tc.degraded {
				t.Errorf("degraded = %d, want %d", d.Degraded, tc.degraded)
			}
			for _, a := range d.Actions {
				if a.Kind == ActStop || (a.Kind == ActRepair && a.Role == "primary") {
					t.Errorf("action %+v: a repair never stops or moves a primary", a)
				}
			}
		})
	}
}

// The repair limits: at most MaxInFlight at once, and a bundle's repairs
// at least Interval apart, counted from the store's migration records (so
// they hold across a change of primary). A bundle held by its interval
// says when it may go (NextAt).
func TestRepairRateLimits(t *testing.T) {
	t.Parallel()
	twoDegraded := func() View {
		b1, j1 := degradedPair("b1")
		b2, j2 := degradedPair("b2")
		return View{Nodes: []*managerv1.Node{node("a"), node("b"), node("c")}, Bundles: []*managerv1.Bundle{b1, b2}, Jobs: append(j1, j2...)}
	}
	t.Run("every degraded bundle within the limit", func(t *testing.T) {
		d := Plan(twoDegraded(), Policy{}, t0)
		if rs := repairs(d); len(rs) != 2 || rs[0].BundleID != "b1" || rs[1].BundleID != "b2" {
			t.Fatalf("repairs %+v, want one per bundle", rs)
		}
	})
	t.Run("at most MaxInFlight at once", func(t *testing.T) {
		v := twoDegraded()
		if rs := repairs(Plan(v, Policy{Repair: RepairPolicy{MaxInFlight: 1}}, t0)); len(rs) != 1 || rs[0].BundleID != "b1" {
			t.Fatalf("repairs %+v, want b1's alone", rs)
		}
		// One in flight elsewhere fills the limit.
		other := bundle("other", true)
		oj := jobsOf(other)
		running(oj[0], "primary", "c", 11)
		running(oj[1], "backup", "b", 12)
		v.Bundles, v.Jobs = append(v.Bundles, other), append(v.Jobs, oj...)
		v.Migrations = []*managerv1.MigrationState{repairRecord("m-other", "other.channel.1", phLaunching, t0.Add(-time.Second))}
		v.Migrating = map[string]bool{"other.channel.1": true}
		if rs := repairs(Plan(v, Policy{Repair: RepairPolicy{MaxInFlight: 1}}, t0)); len(rs) != 0 {
			t.Fatalf("repairs %+v with the one allowed in flight, want none", rs)
		}
		if rs := repairs(Plan(v, Policy{Repair: RepairPolicy{MaxInFlight: 2}}, t0)); len(rs) != 1 {
			t.Fatalf("repairs %+v with one of two in flight, want one", rs)
		}
	})
	t.Run("a bundle's repairs at least Interval apart", func(t *testing.T) {
		b, jobs := degradedPair("news")
		v := View{Nodes: []*managerv1.Node{node("a"), node("b")}, Bundles: []*managerv1.Bundle{b}, Jobs: jobs,
			// The last one aborted 20 s ago (its target never ran).
			Migrations: []*managerv1.MigrationState{repairRecord("m1", "news.channel.1", phAborted, t0.Add(-20*time.Second))}}
		p := Policy{Repair: RepairPolicy{Interval: 30 * time.Second}}
		d := Plan(v, p, t0)
		if rs := repairs(d); len(rs) != 0 {
			t.Fatalf("repairs %+v 20 s after the last, want none before 30 s", rs)
		}
		if want := t0.Add(10 * time.Second); !d.NextAt.Equal(want) {
			t.Errorf("next at %v, want %v (when the interval ends)", d.NextAt, want)
		}
		if rs := repairs(Plan(v, p, t0.Add(10*time.Second))); len(rs) != 1 {
			t.Errorf("repairs %+v once the interval ended, want one", rs)
		}
	})
	t.Run("disabled", func(t *testing.T) {
		d := Plan(twoDegraded(), Policy{Repair: RepairPolicy{Disabled: true}}, t0)
		if rs := repairs(d); len(rs) != 0 || d.Degraded != 4 {
			t.Fatalf("repairs %+v, degraded %d: want none, and the four instances counted", rs, d.Degraded)
		}
	})
	t.Run("two repairs of a pass never count on the same room", func(t *testing.T) {
		v := twoDegraded()
		v.Nodes = []*managerv1.Node{node("a"), func() *managerv1.Node { n := node("b"); n.Hardware.Vcpus = 1; return n }()} // b takes one backup
		if rs := repairs(Plan(v, Policy{}, t0)); len(rs) != 1 || rs[0].BundleID != "b1" {
			t.Fatalf("repairs %+v, want b1's alone (b has room for one)", rs)
		}
	})
}
