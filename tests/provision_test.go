package tests

import (
	"errors"
	"testing"
	"time"

	"github.com/norsk-go/norsk-manager/internal/manager"
	"github.com/norsk-go/norsk-manager/internal/runtime/runtimetest"
	"github.com/norsk-go/norsk-manager/internal/testcluster"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// When nothing fits, the AutoManager creates a node through the mock
// provider and places the job on it once it is online; when the node has
// been idle for its idle expiry, the empty-node reaper terminates it and
// its host is free again.
func TestProvisionWhenNothingFitsAndReapWhenIdle(t *testing.T) {
	t.Parallel()
	c := testcluster.New(t, testcluster.Options{MockHosts: 2})
	c.Members[0].Extra = func(cfg *manager.Config) { cfg.DefaultIdleExpiry = 500 * time.Millisecond }
	c.RestartManager()
	cl, x := c.Client(), ctx(t)

	tmpl := progJob(t, "", runtimetest.Behaviour{}, nil)
	if _, err := cl.CreateBundle(x, &norsk.Bundle{BundleId: "elastic", Pool: c.MockPool(), Jobs: []*norsk.BundleJobSpec{{
		JobName: "channel", Requirements: &norsk.JobRequirements{RequiredCapacity: 0.25}, Job: tmpl,
	}}}); err != nil {
		t.Fatal(err)
	}
	in := running(c, "elastic.channel.0", "primary")
	var n *norsk.Node
	c.Eventually("the job's node is an online elastic mock node", func() bool {
		nodes, err := cl.ListNodes(x)
		if err != nil {
			return false
		}
		for _, nd := range nodes {
			if nd.GetNodeId() == in.GetNodeId() {
				n = nd
			}
		}
		return n != nil && n.GetState() == norsk.NodeStateOnline
	})
	if !n.GetElastic() || n.GetProvider() != "mock" || n.GetProviderInstance() == "" || n.GetTags()["pool"] != c.MockPool() {
		t.Fatalf("node %v: want an elastic mock node of pool %s with its host", n, c.MockPool())
	}
	var host int
	for i, h := range c.Hosts {
		if h.URL() == n.GetProviderInstance() {
			host = i
		}
	}
	if c.Hosts[host].NodeID() != n.GetNodeId() {
		t.Fatalf("host %s runs %q, want %q", n.GetProviderInstance(), c.Hosts[host].NodeID(), n.GetNodeId())
	}

	// Bad input to CreateMockNode changes nothing.
	if _, _, err := cl.CreateMockNode(x, norsk.MockNode{Pool: "elsewhere"}); !errors.Is(err, norsk.ErrInvalidArgument) {
		t.Errorf("CreateMockNode in an unserved pool: %v, want INVALID_ARGUMENT", err)
	}
	second, _, err := cl.CreateMockNode(x, norsk.MockNode{})
	if err != nil {
		t.Fatalf("second node: %v", err)
	}
	if _, _, err := cl.CreateMockNode(x, norsk.MockNode{}); !errors.Is(err, norsk.ErrResourceExhausted) {
		t.Errorf("a third node on two hosts: %v, want RESOURCE_EXHAUSTED", err)
	}

	// The idle node created by hand is reaped; so is the bundle's once the
	// bundle is gone.
	c.WaitNodeState(second, norsk.NodeStateTerminated)
	if err := cl.DeleteBundle(x, "elastic"); err != nil {
		t.Fatal(err)
	}
	nt := c.WaitNodeState(n.GetNodeId(), norsk.NodeStateTerminated)
	if nt.GetStateReason() == "" {
		t.Errorf("terminated node %v: want the reaper's reason", nt)
	}
	c.Eventually("both hosts are free", func() bool { return c.Hosts[0].NodeID() == "" && c.Hosts[1].NodeID() == "" })
}
