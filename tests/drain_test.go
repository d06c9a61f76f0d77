package tests

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/norsk-go/norsk-manager/internal/cli"
	"github.com/norsk-go/norsk-manager/internal/testcluster"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// A drain runs in the Manager: the primary is killed after the first job
// has moved, a new primary's AutoManager takes the drain over from the
// store and moves the rest, and every job runs exactly once afterwards.
// The CLI, attached to the running drain through a member that survives,
// follows it across the failover and reports it drained. (Each handover
// is held 2 s by the job's cutover lead, so the drain outlasts the kill.)
func TestDrainSurvivesPrimaryKill(t *testing.T) {
	t.Parallel()
	c := testcluster.New(t, testcluster.Options{Members: 3, Workers: 3, JobSocket: true})
	cl, x := c.Client(), ctx(t)
	sink := testcluster.NewFrameSink(t)
	const jobs = 3
	var node string
	for i := range jobs {
		id := fmt.Sprintf("dr%d", i)
		b := mediaBundle(id, sink.URL(), sampleMedia(t))
		b.Jobs[0].Job.Services[0].Env["CUTOVER_LEAD"] = "2s"
		if _, err := cl.CreateBundle(x, b); err != nil {
			t.Fatal(err)
		}
		in := running(c, id+".channel.0", "primary")
		if node == "" {
			node = in.GetNodeId()
		}
	}
	for i := range jobs {
		id := fmt.Sprintf("dr%d.channel.0", i)
		if in := testcluster.Instance(c.Job(id), "primary"); in.GetNodeId() != node {
			st, err := cl.MigrateJob(x, id, norsk.MigrateOptions{TargetNodeID: node, Strategy: norsk.StrategyOverlap})
			if err != nil {
				t.Fatal(err)
			}
			if st = followMigration(t, cl, st.GetMigrationId()); st.GetPhase() != norsk.PhaseDone {
				t.Fatalf("gathering %s on %s: %s", id, node, st.GetAbortReason())
			}
		}
	}
	d, attached, err := cl.DrainNode(x, node, norsk.DrainOptions{Parallel: 1, Strategy: norsk.StrategyHandover})
	if err != nil || attached {
		t.Fatalf("drain: %v (attached %v)", err, attached)
	}
	if d.GetStrategy() != norsk.StrategyHandover || d.GetState() != norsk.DrainRunning || d.GetParallel() != 1 || d.GetDeadline() == nil {
		t.Fatalf("drain as started: %v", d)
	}
	old := c.Primary()
	follower := others(c, old)[0]
	var out, errOut strings.Builder
	cliDone := make(chan int, 1)
	go func() {
		cliDone <- cli.Main(context.Background(), []string{"--manager-url", follower.URL(), "--token", c.Token(), "node", "drain", node}, strings.NewReader(""), &out, &errOut)
	}()
	drainOf := func(m *testcluster.Member) *norsk.NodeDrain {
		d, err := m.Client().NodeDrain(x, node)
		if err != nil {
			return nil
		}
		return d
	}
	c.Eventually("the first job moved", func() bool {
		d := drainOf(old)
		return d.GetMoved() >= 1
	})
	if d := drainOf(old); d.GetState() != norsk.DrainRunning {
		t.Fatalf("the drain ended before the kill (%s): make it slower", d.GetSummary())
	}
	old.Stop()
	p := waitNewPrimary(t, c, others(c, old))

	code := <-cliDone
	t.Log(out.String())
	if code != 0 {
		t.Fatalf("re-attach: exit %d\n%s\n%s", code, out.String(), errOut.String())
	}
	if !strings.Contains(out.String(), "already being drained") || !strings.Contains(out.String(), fmt.Sprintf("%d/%d moved", jobs, jobs)) {
		t.Errorf("re-attach output lacks the attach or the summary:\n%s", out.String())
	}
	// The drain may have outlasted the first context (a handover that timed
	// out is retried): read with a fresh one.
	x = ctx(t)
	c.Eventually("the new primary to answer with the drain", func() bool {
		d = drainOf(p)
		return d != nil
	})
	if d.GetState() != norsk.DrainDrained || d.GetMoved() != jobs || d.GetTotal() != jobs {
		t.Fatalf("drain after the failover: %s %s", norsk.DrainStateName(d.GetState()), d.GetSummary())
	}
	for i := range jobs {
		id := fmt.Sprintf("dr%d.channel.0", i)
		live := 0
		for _, in := range c.Job(id).GetInstances() {
			if in.GetPhase() == norsk.InstancePhaseStopped || in.GetDesired() == norsk.InstanceDesiredStopped {
				continue
			}
			live++
			if in.GetNodeId() == node {
				t.Errorf("%s still runs on the drained node", id)
			}
		}
		if live != 1 {
			t.Errorf("%s has %d live instances, want 1", id, live)
		}
	}
	// The old primary returns as a follower; the drain stays ended.
	old.Start()
	if d := drainOf(p); d.GetState() != norsk.DrainDrained {
		t.Errorf("after the old primary returned the drain is %s", norsk.DrainStateName(d.GetState()))
	}
}
