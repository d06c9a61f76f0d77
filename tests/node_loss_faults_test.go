package tests

import (
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/norsk-go/norsk-manager/internal/manager"
	"github.com/norsk-go/norsk-manager/internal/testcluster"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// nodeLossFaults degrade every worker's link in
// TestNoFalseNodeLossUnderFaultsAndLoad: 50 ms of latency, up to 250 ms of
// jitter, and one chunk in twenty held 400 ms more (a lost segment waiting
// for its retransmission). A heartbeat can arrive up to 700 ms late: two
// heartbeat intervals of silence at the Manager at worst, under the three
// the default lost grace allows.
var nodeLossFaults = testcluster.Faults{
	Delay:     50 * time.Millisecond,
	Jitter:    250 * time.Millisecond,
	StallRate: 0.05,
	Stall:     400 * time.Millisecond,
}

// The defaults of node liveness (decision 0048: a node unheard for 1.5 s is
// lost, heartbeats every 500 ms) declare no live node lost while every
// worker's traffic is delayed, jittered and stalled, the process's cores
// are kept busy and the store takes a stream of writes — and they still
// lose a node that goes silent on the same network.
//
// Not parallel: its busy loops take every core for 20 s, which would land
// on the timing of this package's scenarios if they ran beside it; it runs
// before they start (other packages' tests may still run beside it in
// make test's first pass, which only adds to the load it wants).
func TestNoFalseNodeLossUnderFaultsAndLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for 20 s")
	}
	c := testcluster.New(t, testcluster.Options{
		Workers:     3,
		WorkerLinks: true,
		// Zero: manager.Config's own defaults, as the daemon runs.
		ManagerConfig: func(cfg *manager.Config) { cfg.LostGrace, cfg.HeartbeatInterval = 0, 0 },
	})
	cl, x := c.Client(), ctx(t)
	es := cl.EventStream(x, norsk.EventStreamSettings{SkipSnapshot: true, Kinds: []norsk.EventKind{norsk.EventKindNodeLost}})
	lost := make(chan string, 16)
	var watchers sync.WaitGroup
	defer watchers.Wait()
	defer es.Close()
	watchers.Go(func() {
		for ev := range es.Events() {
			for _, id := range norsk.EventNodeIDs(ev) {
				select {
				case lost <- id:
				default: // the first ones are enough
				}
			}
		}
	})

	for _, w := range c.Workers {
		w.Link().Degrade(nodeLossFaults)
	}
	// Load: a busy loop per core in this process (the Manager's and the
	// workers'), and writes through raft as fast as they commit.
	stop := make(chan struct{})
	var load sync.WaitGroup
	for range runtime.NumCPU() {
		load.Go(func() {
			for n := 0; ; n++ {
				if n%1_000_000 == 0 {
					select {
					case <-stop:
						return
					default:
					}
				}
			}
		})
	}
	writes := 0
	load.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			job := &norsk.Job{JobId: fmt.Sprintf("load-%05d", i), Services: []*norsk.Service{{Name: "main", Image: "load:dev"}}}
			if _, err := cl.CreateJob(x, job); err == nil {
				writes++
			}
		}
	})
	window := time.NewTimer(20 * time.Second)
	select {
	case id := <-lost:
		close(stop)
		load.Wait()
		t.Fatalf("node %s was declared lost while its worker was alive (faults %+v, %d writes meanwhile)", id, nodeLossFaults, writes)
	case <-window.C:
	}
	close(stop)
	load.Wait()
	if writes == 0 {
		t.Fatal("no write committed during the window: the store was not under load")
	}
	for _, n := range nodesByName(t, cl) {
		if n.GetState() != norsk.NodeStateOnline {
			t.Errorf("node %s is %v after the window, want online", n.GetNodeId(), n.GetState())
		}
	}

	// The control: on the same degraded network, a worker that goes
	// silent is lost, and no other.
	gone := c.Workers[0]
	gone.Link().Cut(testcluster.CutSilent)
	deadline := time.NewTimer(30 * time.Second)
	defer deadline.Stop()
	for {
		select {
		case id := <-lost:
			if id != gone.Name {
				t.Fatalf("node %s was declared lost; only %s went silent", id, gone.Name)
			}
			return
		case <-deadline.C:
			t.Fatalf("node %s went silent and was not declared lost", gone.Name)
		}
	}
}

// nodesByName is ListNodes or a fatal error.
func nodesByName(t *testing.T, cl *norsk.Manager) []*norsk.Node {
	t.Helper()
	nodes, err := cl.ListNodes(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	return nodes
}
