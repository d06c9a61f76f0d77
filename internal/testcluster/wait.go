package testcluster

import (
	"context"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/norsk-go/norsk-manager/internal/runtime"
	"github.com/norsk-go/norsk-manager/internal/runtime/process"
	"github.com/norsk-go/norsk-manager/internal/worker"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// WaitTimeout bounds every Wait helper.
const WaitTimeout = 60 * time.Second

// Eventually polls cond until it holds, failing the test after WaitTimeout
// with what was awaited.
func (c *Cluster) Eventually(what string, cond func() bool) {
	c.t.Helper()
	deadline := time.Now().Add(WaitTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			c.t.Fatalf("timed out after %s waiting for %s", WaitTimeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Node returns the node named name as ListNodes shows it (nil if absent).
func (c *Cluster) Node(name string) *norsk.Node {
	c.t.Helper()
	nodes, err := c.Client().ListNodes(context.Background())
	if err != nil {
		c.t.Fatalf("list nodes: %v", err)
	}
	for _, n := range nodes {
		if n.GetNodeName() == name {
			return n
		}
	}
	return nil
}

// WaitNodeConnected waits until the node is online and the primary holds
// its worker's stream. The store records a node online during the hello,
// a moment before the stream counts as connected, so a test that needs the
// stream waits for both.
func (c *Cluster) WaitNodeConnected(name string) *norsk.Node {
	c.t.Helper()
	var n *norsk.Node
	c.Eventually("node "+name+" to be online and connected", func() bool {
		n = c.Node(name)
		return n != nil && n.GetState() == norsk.NodeStateOnline && n.GetConnected()
	})
	return n
}

// WaitNodeState waits until the node is in state.
func (c *Cluster) WaitNodeState(name string, state norsk.NodeState) *norsk.Node {
	c.t.Helper()
	var n *norsk.Node
	c.Eventually("node "+name+" to be "+state.String(), func() bool {
		n = c.Node(name)
		return n != nil && n.GetState() == state
	})
	return n
}

// Job returns a job with its history.
func (c *Cluster) Job(id string) *norsk.JobWithHistory {
	c.t.Helper()
	jh, err := c.Client().JobById(context.Background(), id)
	if err != nil {
		c.t.Fatalf("job %s: %v", id, err)
	}
	return jh
}

// WaitJob waits until cond holds of the job.
func (c *Cluster) WaitJob(id, what string, cond func(*norsk.JobWithHistory) bool) *norsk.JobWithHistory {
	c.t.Helper()
	var jh *norsk.JobWithHistory
	c.Eventually("job "+id+": "+what, func() bool {
		var err error
		jh, err = c.Client().JobById(context.Background(), id)
		return err == nil && cond(jh)
	})
	return jh
}

// Instance returns the job's instance with the role (nil if none).
func Instance(jh *norsk.JobWithHistory, role string) *norsk.Instance {
	for _, in := range jh.GetInstances() {
		if in.GetRole() == role {
			return in
		}
	}
	return nil
}

// WaitPhase waits until the instance (job, role) is in phase.
func (c *Cluster) WaitPhase(jobID, role string, phase norsk.InstancePhase) *norsk.Instance {
	c.t.Helper()
	jh := c.WaitJob(jobID, role+" "+phase.String(), func(jh *norsk.JobWithHistory) bool {
		in := Instance(jh, role)
		return in != nil && in.GetPhase() == phase
	})
	return Instance(jh, role)
}

// killLeftovers removes every process-runtime instance under the cluster's
// worker directories (a test that failed half way leaves none running).
func killLeftovers(dir string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	matches, _ := filepath.Glob(filepath.Join(dir, "workers", "*"))
	for _, wdir := range matches {
		rt, err := process.New(process.Config{NodeID: filepath.Base(wdir), ClusterID: worker.ClusterIDOf(wdir), Dir: filepath.Join(wdir, "process"), Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			continue
		}
		services, _ := rt.List(ctx)
		seen := map[runtime.Key]bool{}
		for _, s := range services {
			if !seen[s.Key] {
				seen[s.Key] = true
				_ = rt.Remove(ctx, s.Key)
			}
		}
	}
}
