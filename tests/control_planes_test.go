package tests

import (
	"slices"
	"testing"
	"time"

	"github.com/norsk-go/norsk-manager/internal/testcluster"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// Every worker is told the cluster's whole list of norsk-mgr URLs: each
// member's fresh announcement, in member-name order, at the hello and again
// whenever the list changes (an announcement, one going stale).
func TestWorkersAreToldEveryControlPlane(t *testing.T) {
	t.Parallel()
	c := testcluster.New(t, testcluster.Options{Members: 3, Workers: 1})
	x := ctx(t)
	w := c.Worker("worker-1")
	planes := func(want ...string) func() bool {
		return func() bool {
			got, known := w.Agent().ControlPlanes()
			return known && slices.Equal(got, want)
		}
	}
	c.Eventually("no norsk-mgr told before any announces", planes())

	// Two members' norsk-mgr announce: the worker is told both, by member.
	m1, m3 := c.Member("m1"), c.Member("m3")
	if err := m3.Client().AnnounceControlPlane(x, "http://mgr-3.example:7000", 0); err != nil {
		t.Fatal(err)
	}
	if err := m1.Client().AnnounceControlPlane(x, "http://mgr-1.example:7000", 0); err != nil {
		t.Fatal(err)
	}
	c.Eventually("both norsk-mgr URLs told", planes("http://mgr-1.example:7000", "http://mgr-3.example:7000"))

	// A restarted worker is told the list in the hello.
	w.Restart()
	c.WaitNodeState("worker-1", norsk.NodeStateOnline)
	c.Eventually("the list after a restart", planes("http://mgr-1.example:7000", "http://mgr-3.example:7000"))

	// m3's norsk-mgr announces with an interval and then stops: once stale
	// it leaves the list.
	if err := m3.Client().AnnounceControlPlane(x, "http://mgr-3.example:7000", 50*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	c.Eventually("the stale norsk-mgr dropped", planes("http://mgr-1.example:7000"))
}
