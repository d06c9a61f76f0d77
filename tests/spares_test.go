package tests

import (
	"errors"
	"testing"
	"time"

	"github.com/norsk-go/norsk-manager/internal/automanager"
	"github.com/norsk-go/norsk-manager/internal/manager"
	"github.com/norsk-go/norsk-manager/internal/runtime/runtimetest"
	"github.com/norsk-go/norsk-manager/internal/testcluster"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// emptySpares are the pool's online elastic nodes tagged spare and holding
// nothing; spareTagged counts every live node carrying the tag.
func emptySpares(t *testing.T, c *testcluster.Cluster, pool string) (empty []*norsk.Node, tagged int) {
	t.Helper()
	nodes, err := c.Client().ListNodes(ctx(t))
	if err != nil {
		return nil, -1
	}
	for _, n := range nodes {
		if !n.GetElastic() || n.GetTags()["pool"] != pool || n.GetTags()["spare"] != "true" {
			continue
		}
		switch n.GetState() {
		case norsk.NodeStateOnline, norsk.NodeStateStarting:
			tagged++
			if n.GetState() == norsk.NodeStateOnline && len(n.GetInstances()) == 0 {
				empty = append(empty, n)
			}
		}
	}
	return empty, tagged
}

// The AutoManager keeps two warm spares in the mock pool: through the
// first placement consuming one, the loss of the job's node (its recovery
// takes a spare), and a Manager restart (a new primary term) — always two,
// never more; callers cannot tag an elastic node spare.
func TestSparesKeptThroughConsumptionLossAndRestart(t *testing.T) {
	t.Parallel()
	c := testcluster.New(t, testcluster.Options{MockHosts: 5, LostGrace: time.Second})
	pool := c.MockPool()
	c.Members[0].Extra = func(cfg *manager.Config) {
		cfg.Spares = map[string]automanager.SpareSpec{pool: {Count: 2, WarmFor: []string{"channel"}}}
	}
	c.RestartManager()
	cl, x := c.Client(), ctx(t)
	twoSpares := func(what string) []*norsk.Node {
		t.Helper()
		var empty []*norsk.Node
		c.Eventually(what, func() bool {
			var tagged int
			empty, tagged = emptySpares(t, c, pool)
			return len(empty) == 2 && tagged == 2
		})
		return empty
	}
	spares := twoSpares("two warm spares")
	if _, err := cl.SetNodeTags(x, spares[0].GetNodeId(), map[string]string{"spare": ""}); !errors.Is(err, norsk.ErrFailedPrecondition) {
		t.Errorf("a caller clears an elastic spare: %v, want FAILED_PRECONDITION", err)
	}
	if spares[0].GetTags()["warmFor"] != "channel" {
		t.Errorf("spare tags %v, want warmFor=channel", spares[0].GetTags())
	}

	tmpl := progJob(t, "", runtimetest.Behaviour{}, nil)
	if _, err := cl.CreateBundle(x, &norsk.Bundle{BundleId: "warm", Pool: pool, Jobs: []*norsk.BundleJobSpec{{
		JobName: "channel", Requirements: &norsk.JobRequirements{RequiredCapacity: 0.25}, Job: tmpl,
	}}}); err != nil {
		t.Fatal(err)
	}
	first := running(c, "warm.channel.0", "primary")
	twoSpares("two empty spares again after the first placement")

	// The job's node is lost: its host goes away. The spares are read
	// before: the loss (1 s) and the recovery can be over by the time a
	// read after the close answers, the spare taken no longer a spare.
	before, _ := emptySpares(t, c, pool)
	for _, h := range c.Hosts {
		if h.NodeID() == first.GetNodeId() {
			_ = h.Close()
		}
	}
	var again *norsk.Instance
	c.Eventually("the job running again on another node", func() bool {
		again = c.Job("warm.channel.0").GetInstances()[0]
		for _, in := range c.Job("warm.channel.0").GetInstances() {
			if in.GetPhase() == norsk.InstancePhaseRunning && in.GetNodeId() != first.GetNodeId() {
				again = in
				return true
			}
		}
		return false
	})
	took := false
	for _, s := range before {
		took = took || s.GetNodeId() == again.GetNodeId()
	}
	if !took {
		t.Errorf("recovered on %s, not on one of the warm spares %v", again.GetNodeId(), before)
	}
	twoSpares("two empty spares again after the recovery")

	c.RestartManager()
	twoSpares("two spares after a Manager restart")
	consistently(t, 2*time.Second, "no more than two spares", func() bool {
		_, tagged := emptySpares(t, c, pool)
		return tagged <= 2
	})
}

// A primary failover: the new primary's AutoManager counts the same tagged
// spares and creates none more.
func TestSparesKeptThroughFailover(t *testing.T) {
	t.Parallel()
	var pool string
	c := testcluster.New(t, testcluster.Options{Members: 3, MockHosts: 3, LostGrace: time.Second, ManagerConfig: func(cfg *manager.Config) {
		cfg.Spares = map[string]automanager.SpareSpec{"burst": {Count: 2}}
	}})
	pool = c.MockPool()
	if pool != "burst" {
		t.Skipf("the mock pool is %s", pool)
	}
	count := func(cl *norsk.Manager) (tagged int) {
		nodes, err := cl.ListNodes(ctx(t))
		if err != nil {
			return -1
		}
		for _, n := range nodes {
			if n.GetElastic() && n.GetTags()["spare"] == "true" && n.GetState() != norsk.NodeStateTerminated && n.GetState() != norsk.NodeStateStopping {
				tagged++
			}
		}
		return tagged
	}
	old := c.Primary()
	c.Eventually("two spares", func() bool { return count(old.Client()) == 2 })
	old.Stop()
	p := waitNewPrimary(t, c, others(c, old))
	consistently(t, 3*time.Second, "two spares, no more, under the new primary "+p.Name, func() bool {
		n := count(p.Client())
		return n == 2 || n == -1
	})
}

// Lowering a tier's spare count releases the surplus — an ordinary elastic
// node from then on, which the empty-node reaper ends once idle — and
// removing the tier's entry releases every spare it had.
func TestSparesSurplusReleasedAndReaped(t *testing.T) {
	t.Parallel()
	c := testcluster.New(t, testcluster.Options{MockHosts: 3})
	pool := c.MockPool()
	count := 2
	c.Members[0].Extra = func(cfg *manager.Config) {
		cfg.DefaultIdleExpiry = time.Second
		if count > 0 {
			cfg.Spares = map[string]automanager.SpareSpec{pool: {Count: count}}
		}
	}
	c.RestartManager()
	var spares []*norsk.Node
	c.Eventually("two warm spares", func() bool {
		var tagged int
		spares, tagged = emptySpares(t, c, pool)
		return len(spares) == 2 && tagged == 2
	})
	for _, keep := range []int{1, 0} {
		count = keep
		c.RestartManager()
		c.Eventually("the surplus released and ended", func() bool {
			left, tagged := emptySpares(t, c, pool)
			if tagged != keep || len(left) != keep {
				return false
			}
			ended := 0
			for _, s := range spares {
				if st := c.Node(s.GetNodeId()).GetState(); st == norsk.NodeStateTerminated {
					ended++
				}
			}
			return ended == len(spares)-keep
		})
		spares, _ = emptySpares(t, c, pool)
	}
	consistently(t, 2*time.Second, "no spare created again", func() bool {
		_, tagged := emptySpares(t, c, pool)
		return tagged == 0
	})
}
