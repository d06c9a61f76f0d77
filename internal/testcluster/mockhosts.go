package testcluster

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/norsk-go/norsk-manager/internal/manager"
	"github.com/norsk-go/norsk-manager/internal/providers/mock"
	"github.com/norsk-go/norsk-manager/internal/providers/mock/mockhost"
	"github.com/norsk-go/norsk-manager/internal/worker"
)

// startMockHosts starts Options.MockHosts mock hosts, each booting workers
// with the cluster's runtime into its own directory.
func (c *Cluster) startMockHosts() {
	for i := range c.opts.MockHosts {
		name := fmt.Sprintf("mock-host-%d", i+1)
		h, err := mockhost.Start(mockhost.Config{
			DataDir: filepath.Join(c.Dir, name),
			VCPUs:   c.mockVCPUs(),
			Logger:  c.opts.Logger.With("process", name),
			Worker: worker.Config{
				Runtime:         c.opts.Runtime,
				ReregisterAfter: 500 * time.Millisecond,
				RegisterRetry:   500 * time.Millisecond,
			},
		})
		if err != nil {
			c.t.Fatalf("start %s: %v", name, err)
		}
		c.Hosts = append(c.Hosts, h)
	}
}

func (c *Cluster) mockVCPUs() uint32 {
	if c.opts.MockVCPUs > 0 {
		return c.opts.MockVCPUs
	}
	return 2
}

// MockPool is the pool tier the mock provider creates nodes in.
func (c *Cluster) MockPool() string {
	if c.opts.MockPool != "" {
		return c.opts.MockPool
	}
	return "burst"
}

// mockProvider gives a member's configuration the mock provider over the
// cluster's hosts, with a quick reaper.
func (c *Cluster) mockProvider(cfg *manager.Config) {
	if len(c.Hosts) == 0 {
		return
	}
	mc := &mock.Config{Pools: []string{c.MockPool()}, VCPUs: c.mockVCPUs(), StartTimeout: 30 * time.Second}
	for _, h := range c.Hosts {
		mc.Hosts = append(mc.Hosts, h.URL())
	}
	cfg.MockProvider = mc
	cfg.ReaperInterval = 100 * time.Millisecond
}

// stopMockHosts stops the hosts; instances their workers still run are
// removed with the process leftovers (Host.RemoveLeftovers).
func (c *Cluster) stopMockHosts() {
	for _, h := range c.Hosts {
		_ = h.Close()
	}
}
