package testcluster

import (
	"path/filepath"

	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// AddWorker registers one more worker named name with the running cluster
// and starts it — a node joining later — with the given runtime ("" = the
// cluster's), then waits until its node is online.
func (c *Cluster) AddWorker(name, runtime string) *Worker {
	c.t.Helper()
	slot, err := c.Client().RegisterClusterNode(Context(c.t), name, "")
	if err != nil {
		c.t.Fatalf("register %s: %v", name, err)
	}
	w := &Worker{c: c, Name: name, Dir: filepath.Join(c.Dir, "workers", name), token: slot.GetToken(), runtime: runtime}
	c.Workers = append(c.Workers, w)
	w.Start()
	c.WaitNodeState(name, norsk.NodeStateOnline)
	return w
}
