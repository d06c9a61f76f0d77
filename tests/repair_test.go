package tests

import (
	"slices"
	"strings"
	"testing"

	"github.com/norsk-go/norsk-manager/internal/runtime/runtimetest"
	"github.com/norsk-go/norsk-manager/internal/testcluster"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// Issue 12 item 9: a primary and backup placed on one node while capacity
// was short stayed together after a compliant node had room. With one
// worker both replicas run on it, degraded; when a second worker joins,
// the AutoManager repairs the bundle: the backup is migrated there (its
// new copy running before the old one stops), the primary is never
// stopped, and the bundle's view and the target's placement say what was
// done.
func TestDegradedAntiAffinityRepairedWhenANodeJoins(t *testing.T) {
	t.Parallel()
	c := testcluster.New(t, testcluster.Options{Workers: 1})
	cl, x := c.Client(), ctx(t)
	if _, err := cl.CreateBundle(x, resilientBundle(t, "news", runtimetest.Behaviour{})); err != nil {
		t.Fatal(err)
	}
	p := running(c, "news.channel.0", "primary")
	b := running(c, "news.channel.1", "backup")
	if p.GetNodeId() != "worker-1" || b.GetNodeId() != "worker-1" {
		t.Fatalf("primary on %s, backup on %s: want both on the only worker", p.GetNodeId(), b.GetNodeId())
	}
	if bw, err := cl.BundleById(x, "news"); err != nil || !slices.ContainsFunc(bw.GetJobs()[1].GetDegradations(),
		func(d string) bool { return strings.HasPrefix(d, "antiAffinity.sameNode: ") }) {
		t.Fatalf("bundle view %v (%v): want the backup's sameNode degradation", bw, err)
	}

	c.AddWorker("worker-2", "")

	var moved *norsk.Instance
	c.WaitJob("news.channel.1", "the backup running on worker-2 and its old copy stopped", func(jh *norsk.JobWithHistory) bool {
		moved = nil
		oldStopped := false
		for _, in := range jh.GetInstances() {
			switch {
			case in.GetRole() == "backup":
				oldStopped = in.GetPhase() == norsk.InstancePhaseStopped
			case strings.HasPrefix(in.GetRole(), "backup@") && in.GetNodeId() == "worker-2" && in.GetPhase() == norsk.InstancePhaseRunning:
				moved = in
			}
		}
		return moved != nil && oldStopped
	})
	if pl := moved.GetPlacement(); pl.GetKind() != "repair" || len(pl.GetDegradations()) != 0 || !strings.Contains(pl.GetSummary(), "antiAffinity.sameNode") {
		t.Errorf("the new backup's placement %v: want a repair that complies, saying what it repaired", pl)
	}
	var mig *norsk.MigrationState
	c.Eventually("the repair's migration done", func() bool {
		migs, err := cl.ListMigrations(x, "news.channel.1")
		if err != nil || len(migs) != 1 {
			return false
		}
		mig = migs[0]
		return mig.GetPhase() == norsk.PhaseDone
	})
	if !mig.GetRepair() || mig.GetStrategy() != norsk.StrategyOverlap || mig.GetSourceRole() != "backup" || mig.GetTargetNodeId() != "worker-2" ||
		!strings.Contains(mig.GetReason(), "antiAffinity.sameNode") {
		t.Errorf("migration %v: want the backup's overlap repair to worker-2", mig)
	}
	// Make-before-break: the new copy ran before the old one was told to stop.
	jh := c.Job("news.channel.1")
	var runAt, stopAt int
	for i, e := range jh.GetHistory() { // newest first
		if r := e.GetRunning(); r != nil && r.GetInstance().GetRole() == moved.GetRole() {
			runAt = i
		}
		if s := e.GetStopping(); s != nil && s.GetInstance().GetRole() == "backup" && stopAt == 0 {
			stopAt = i
		}
	}
	if runAt <= stopAt {
		t.Errorf("history %v: the old backup was told to stop before its new copy ran", historyKinds(jh))
	}

	// The primary was never stopped, restarted or moved.
	pj := c.Job("news.channel.0")
	if len(pj.GetInstances()) != 1 {
		t.Errorf("primary's instances %v, want the one it started with", pj.GetInstances())
	}
	if in := testcluster.Instance(pj, "primary"); in.GetFencingToken() != p.GetFencingToken() || in.GetPhase() != norsk.InstancePhaseRunning || in.GetNodeId() != "worker-1" {
		t.Errorf("primary %v, was %v: want it untouched", in, p)
	}
	if slices.Contains(historyKinds(pj), "stopping") {
		t.Errorf("primary's history %v: it was stopped", historyKinds(pj))
	}
	c.Eventually("the bundle view without degradations", func() bool {
		bw, err := cl.BundleById(x, "news")
		if err != nil {
			return false
		}
		for _, j := range bw.GetJobs() {
			if len(j.GetDegradations()) > 0 {
				return false
			}
		}
		return bw.GetJobs()[1].GetNodeId() == "worker-2"
	})
}
