package tests

import (
	"slices"
	"testing"

	"connectrpc.com/connect"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/runtime/runtimetest"
	"github.com/norsk-go/norsk-manager/internal/testcluster"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// The primary stops while jobs run: the new primary re-establishes every
// worker's stream and adopts every running instance. No job restarts.
func TestClusterFailoverKeepsJobsRunning(t *testing.T) {
	t.Parallel()
	c := testcluster.New(t, testcluster.Options{Members: 3, Workers: 2})
	cl, x := c.Client(), ctx(t)
	for i, w := range []string{"worker-1", "worker-2"} {
		id := []string{"news", "sport"}[i]
		if _, err := cl.CreateJob(x, progJob(t, id, runtimetest.Behaviour{}, nil)); err != nil {
			t.Fatal(err)
		}
		if _, err := cl.StartJob(x, id, "primary", w, norsk.StartJobOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	c.WaitPhase("news", "primary", norsk.InstancePhaseRunning)
	c.WaitPhase("sport", "primary", norsk.InstancePhaseRunning)
	pids := map[string]int{"news": pidOf(t, c, "worker-1", "news", "primary"), "sport": pidOf(t, c, "worker-2", "sport", "primary")}
	hist := map[string][]string{"news": historyKinds(c.Job("news")), "sport": historyKinds(c.Job("sport"))}

	old := c.Primary()
	old.Stop()
	p := waitNewPrimary(t, c, others(c, old))
	c.Eventually("every worker's stream up under the new primary "+p.Name, func() bool {
		nodes, err := p.Client().ListNodes(x)
		if err != nil || len(nodes) != 2 {
			return false
		}
		for _, n := range nodes {
			if !n.GetConnected() || n.GetState() != norsk.NodeStateOnline {
				return false
			}
		}
		return true
	})
	for id, pid := range pids {
		w := map[string]string{"news": "worker-1", "sport": "worker-2"}[id]
		if got := pidOf(t, c, w, id, "primary"); got != pid {
			t.Errorf("%s: pid after failover = %d, want %d (the instance restarted)", id, got, pid)
		}
		jh := c.Job(id)
		if !slices.Equal(historyKinds(jh), hist[id]) {
			t.Errorf("%s: history after failover = %v, want %v", id, historyKinds(jh), hist[id])
		}
		if in := testcluster.Instance(jh, "primary"); in.GetPhase() != norsk.InstancePhaseRunning {
			t.Errorf("%s: instance after failover: %v", id, in)
		}
	}
	settled := false
	res, err := api(c, p).GetClusterEvents(x, connect.NewRequest(&managerv1.GetClusterEventsRequest{Kinds: []string{"takeover-settled"}}))
	if err != nil {
		t.Fatal(err)
	}
	settled = len(res.Msg.GetEvents()) > 0
	if !settled {
		t.Errorf("no takeover-settled event on %s", p.Name)
	}

	// The old primary comes back as a follower and the jobs stay put.
	old.Start()
	c.Eventually(old.Name+" to follow", func() bool {
		leader, _ := old.Server().Store().Leader()
		return leader != "" && leader != old.Name
	})
	if got := pidOf(t, c, "worker-1", "news", "primary"); got != pids["news"] {
		t.Errorf("news: pid after the old primary returned = %d, want %d", got, pids["news"])
	}
}

// Two of three members are lost: the survivor refuses writes (no quorum)
// until force-standalone makes it a cluster of one at the next generation
// with its state. The others come back, find the newer generation, put
// their copies aside and rejoin as followers; nothing acknowledged is lost.
func TestClusterForceStandaloneAndRejoin(t *testing.T) {
	t.Parallel()
	c := testcluster.New(t, testcluster.Options{Members: 3})
	x := ctx(t)
	tw := watchTerms(t, c)
	load := startWriteLoad(t, c, "recovery")
	load.waitMore(t, 50)

	survivor := c.Member("m1")
	// Refused while a primary is reachable.
	if _, err := api(c, survivor).ForceStandalone(x, connect.NewRequest(&managerv1.ForceStandaloneRequest{By: "test"})); connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Fatalf("force-standalone with a healthy quorum: %v, want FAILED_PRECONDITION", err)
	}
	c.Member("m2").Stop()
	c.Member("m3").Stop()
	c.Eventually("m1 to lose its primary", func() bool {
		leader, _ := survivor.Server().Store().Leader()
		return leader == ""
	})
	res, err := api(c, survivor).ForceStandalone(x, connect.NewRequest(&managerv1.ForceStandaloneRequest{By: "ops-alice"}))
	if err != nil {
		t.Fatalf("force-standalone: %v", err)
	}
	if res.Msg.GetGeneration() != 2 {
		t.Errorf("generation after force-standalone = %d, want 2", res.Msg.GetGeneration())
	}
	waitNewPrimary(t, c, []*testcluster.Member{survivor})
	load.waitMore(t, 50)
	if g := clusterStatus(t, c, survivor).GetGeneration(); g != 2 {
		t.Errorf("status generation = %d, want 2", g)
	}

	// The others come back at generation 1 and rejoin.
	c.Member("m2").Start()
	c.Member("m3").Start()
	c.Eventually("three voters at generation 2, all reachable", func() bool {
		st := clusterStatus(t, c, survivor)
		if st.GetVoters() != 3 || st.GetVotersReachable() != 3 {
			return false
		}
		for _, m := range st.GetMembers() {
			if m.GetGeneration() != 2 {
				return false
			}
		}
		return true
	})
	load.waitMore(t, 50)
	load.checkEverywhere(t)
	tw.check(t)
	ev, err := api(c, c.Member("m2")).GetClusterEvents(x, connect.NewRequest(&managerv1.GetClusterEventsRequest{Kinds: []string{"rejoined"}}))
	if err != nil || len(ev.Msg.GetEvents()) == 0 {
		t.Errorf("m2's rejoined event: %v %v", ev, err)
	}
}

// LeaveQuorum: the member discards its copy and catches up from the
// cluster as a follower.
func TestClusterLeaveQuorum(t *testing.T) {
	t.Parallel()
	c := testcluster.New(t, testcluster.Options{Members: 3, Witnesses: 1})
	x := ctx(t)
	load := startWriteLoad(t, c, "leave")
	load.waitMore(t, 50)
	m := others(c, c.Primary())[0]
	if m.Witness {
		m = others(c, c.Primary())[1]
	}
	if _, err := api(c, m).LeaveQuorum(x, connect.NewRequest(&managerv1.LeaveQuorumRequest{By: "test"})); err != nil {
		t.Fatalf("leave-quorum on %s: %v", m.Name, err)
	}
	c.Eventually(m.Name+" to follow again", func() bool {
		st := m.Server().Store()
		leader, _ := st.Leader()
		return st != nil && leader != "" && leader != m.Name
	})
	load.waitMore(t, 50)
	load.checkEverywhere(t)
	// A witness has nothing to recover from.
	if _, err := api(c, c.Member("w1")).ForceStandalone(x, connect.NewRequest(&managerv1.ForceStandaloneRequest{By: "test"})); connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Errorf("force-standalone on a witness: %v, want FAILED_PRECONDITION", err)
	}
}
