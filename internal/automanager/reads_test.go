package automanager

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"google.golang.org/protobuf/proto"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/clock"
	"github.com/norsk-go/norsk-manager/pkg/placement"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// recordAPI is the fake as the Manager's own process serves the
// AutoManager (in-process events and record reads), counting the node and
// bundle records each read touches. Its BundleById and ListBundles charge
// what the Manager's bundle view reads: every node, for a bundle with a
// job that runs nowhere (the view says why no node's runtime fits it).
type recordAPI struct {
	*localAPI
}

func newRecordAPI() *recordAPI {
	return &recordAPI{&localAPI{countingAPI: &countingAPI{fakeAPI: newFakeAPI(), reads: map[string]int{}}, events: make(chan []*managerv1.Event, 1)}}
}

func (r *recordAPI) charge(name string, n int) {
	r.mu.Lock()
	r.reads[name] += n
	r.mu.Unlock()
}

func (r *recordAPI) ListNodes(ctx context.Context) ([]*norsk.Node, error) {
	nodes, err := r.fakeAPI.ListNodes(ctx)
	r.charge("nodes", len(nodes))
	return nodes, err
}

func (r *recordAPI) NodeByID(ctx context.Context, id string) (*norsk.Node, error) {
	r.charge("nodes", 1)
	r.fakeAPI.mu.Lock()
	defer r.fakeAPI.mu.Unlock()
	for _, n := range r.fakeAPI.nodes {
		if n.GetNodeId() == id {
			return proto.Clone(n).(*managerv1.Node), nil
		}
	}
	return nil, &norsk.Error{Op: "NodeByID", Message: "no node", Code: 5}
}

// viewCost is what the Manager's view of bundle b reads besides b: every
// node when one of its jobs runs nowhere.
func (r *recordAPI) viewCost(b *managerv1.Bundle) {
	r.fakeAPI.mu.Lock()
	nodes := len(r.fakeAPI.nodes)
	unplaced := false
	for _, jh := range r.fakeAPI.jobs {
		if jh.GetJob().GetTags()[placement.TagBundleID] == b.GetBundleId() && len(jh.GetInstances()) == 0 {
			unplaced = true
		}
	}
	r.fakeAPI.mu.Unlock()
	if unplaced {
		r.charge("nodes", nodes)
	}
}

func (r *recordAPI) BundleById(ctx context.Context, id string) (*managerv1.BundleWithJobs, error) {
	bw, err := r.fakeAPI.BundleById(ctx, id)
	if err == nil {
		r.charge("bundles", 1)
		r.viewCost(bw.GetBundle())
	}
	return bw, err
}

func (r *recordAPI) ListBundles(ctx context.Context) ([]*managerv1.BundleWithJobs, error) {
	out, err := r.fakeAPI.ListBundles(ctx)
	r.charge("bundles", len(out))
	for _, bw := range out {
		r.viewCost(bw.GetBundle())
	}
	return out, err
}

func (r *recordAPI) BundleRecord(ctx context.Context, id string) (*managerv1.Bundle, error) {
	bw, err := r.fakeAPI.BundleById(ctx, id)
	if err != nil {
		return nil, err
	}
	r.charge("bundles", 1)
	return bw.GetBundle(), nil
}

func (r *recordAPI) BundleRecords(ctx context.Context) ([]*managerv1.Bundle, error) {
	out, err := r.fakeAPI.ListBundles(ctx)
	r.charge("bundles", len(out))
	var bs []*managerv1.Bundle
	for _, bw := range out {
		bs = append(bs, bw.GetBundle())
	}
	return bs, err
}

// runUntilEnd runs am until the test ends (Run returns before the test
// does).
func runUntilEnd(t *testing.T, am *AutoManager) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- am.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

// passOn notes the events and makes the pass over what they touched.
func passOn(ctx context.Context, t *testing.T, am *AutoManager, evs ...*managerv1.Event) {
	t.Helper()
	for _, ev := range evs {
		am.changes.note(ev)
	}
	if _, err := am.passChanges(ctx, am.changes.take(), false); err != nil {
		t.Fatal(err)
	}
}

// fleetOf stores nodes nodes and a running job kept placed on each of the
// first jobs of them, and makes the AutoManager's first full pass.
func fleetOf(t *testing.T, api *recordAPI, nodes, jobs int) (*AutoManager, context.Context) {
	t.Helper()
	for i := range nodes {
		api.nodes = append(api.nodes, node(fmt.Sprintf("node-%05d", i)))
	}
	for i := range jobs {
		jh := autoJob(fmt.Sprintf("job-%05d", i))
		jh.Job.State = managerv1.JobState_JOB_STATE_ACTIVE
		api.put(jh)
		api.instance(jh.Job.JobId, "primary", fmt.Sprintf("node-%05d", i), phRunning)
	}
	am := New(Config{API: api, Clock: clock.NewFake(t0), Logger: slog.New(slog.DiscardHandler)})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if _, err := am.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	api.takeReads()
	return am, ctx
}

// TestPassReadsOneNodeOfMany: with 2,000 nodes stored, an event that names
// one node makes a pass that reads that node, not the fleet (issue 17: a
// pass re-read every node on any node's change), and still re-places
// what ran there.
func TestPassReadsOneNodeOfMany(t *testing.T) {
	t.Parallel()
	api := newRecordAPI()
	am, ctx := fleetOf(t, api, 2000, 100)
	api.mu.Lock()
	api.nodes[7] = lost(api.nodes[7])
	api.mu.Unlock()
	passOn(ctx, t, am, &managerv1.Event{Kind: &managerv1.Event_NodeLost{NodeLost: &managerv1.NodeEvent{Node: api.nodes[7]}}})
	if r := api.takeReads(); r["nodes"] != 1 || r["JobSearch"] != 0 {
		t.Errorf("reads for one node lost = %v, want that one node and no job search", r)
	}
	got := api.starts()
	if len(got) != 1 || !strings.Contains(got[0], "job-00007/primary@") || strings.Contains(got[0], "@node-00007") {
		t.Fatalf("starts = %v, want job-00007 re-placed off the lost node", got)
	}

	// A node that comes is read alone too, and kept in id order.
	fresh := node("node-00000a")
	api.mu.Lock()
	api.nodes = append(api.nodes, fresh)
	api.mu.Unlock()
	passOn(ctx, t, am, &managerv1.Event{Kind: &managerv1.Event_NodeOnline{NodeOnline: &managerv1.NodeEvent{Node: fresh}}})
	if r := api.takeReads(); r["nodes"] != 1 {
		t.Errorf("reads for one node online = %v, want that one node", r)
	}
	if l := am.mirror.nodeList; len(l) != 2001 || l[1].GetNodeId() != "node-00000a" || len(am.mirror.nodes) != 2001 {
		t.Errorf("mirror nodes = %d (list %d, second %s), want 2,001 in id order", len(am.mirror.nodes), len(l), l[1].GetNodeId())
	}

	// A node that is gone from the store is dropped, read alone.
	api.mu.Lock()
	api.nodes = append(api.nodes[:1], api.nodes[2:]...) // node-00001
	api.mu.Unlock()
	passOn(ctx, t, am, &managerv1.Event{Kind: &managerv1.Event_NodeTerminated{NodeTerminated: &managerv1.NodeEvent{Node: node("node-00001")}}})
	if r := api.takeReads(); r["nodes"] != 1 {
		t.Errorf("reads for one node gone = %v, want that one node", r)
	}
	if l := am.mirror.nodeList; len(l) != 2000 || l[2].GetNodeId() != "node-00002" || am.mirror.nodes["node-00001"] != nil {
		t.Errorf("mirror nodes = %d (list %d, third %s), want node-00001 gone", len(am.mirror.nodes), len(l), l[2].GetNodeId())
	}
}

// TestPassReadsOneBundleOfMany: with 500 bundles and 2,000 nodes stored, a
// bundle's creation makes a pass that reads that bundle and no node (the
// API's bundle view of a bundle not yet placed reads every node), and
// places its job.
func TestPassReadsOneBundleOfMany(t *testing.T) {
	t.Parallel()
	api := newRecordAPI()
	for i := range 500 {
		b := bundle(fmt.Sprintf("b-%03d", i), false)
		api.bundles = append(api.bundles, b)
		for _, jh := range jobsOf(b) {
			api.put(jh)
			api.instance(jh.GetJob().GetJobId(), "primary", fmt.Sprintf("node-%05d", i), phRunning).JobHash = 10
		}
	}
	am, ctx := fleetOf(t, api, 2000, 0)
	b := bundle("new", false)
	api.mu.Lock()
	api.bundles = append(api.bundles, b)
	api.mu.Unlock()
	for _, jh := range jobsOf(b) {
		api.put(jh)
		am.changes.note(&managerv1.Event{Kind: &managerv1.Event_JobCreated{JobCreated: &managerv1.JobEvent{Job: jh}}})
	}
	passOn(ctx, t, am, &managerv1.Event{Kind: &managerv1.Event_BundleCreated{BundleCreated: &managerv1.BundleEvent{Bundle: b}}})
	if r := api.takeReads(); r["bundles"] != 1 || r["nodes"] != 0 {
		t.Errorf("reads for one new bundle = %v, want that bundle and no node", r)
	}
	if got := api.starts(); len(got) != 1 || !strings.Contains(got[0], "new.channel.0/primary@") {
		t.Fatalf("starts = %v, want the new bundle's job placed", got)
	}
}

// TestBurstInProcessIsNoFullPass: in process, a burst that touched most of
// the jobs is read job by job, not by a full pass (which reads every
// job, node and bundle and plans every job: while a fleet is being
// filled, a full pass per burst made each pass cost the whole store).
func TestBurstInProcessIsNoFullPass(t *testing.T) {
	t.Parallel()
	api := newRecordAPI()
	am, ctx := fleetOf(t, api, 1500, 1500)
	var evs []*managerv1.Event
	for i := range 1200 {
		evs = append(evs, jobEvent(api.jobs[fmt.Sprintf("job-%05d", i)]))
	}
	passOn(ctx, t, am, evs...)
	if r := api.takeReads(); r["JobSearch"] != 0 || r["nodes"] != 0 || r["bundles"] != 0 || r["JobById"] != 1200 {
		t.Errorf("reads for a burst of 1,200 of 1,500 jobs = %v, want the 1,200 jobs alone", r)
	}
}

// cutAPI is localAPI whose first subscription is cut when cut is closed
// (fallen behind the event ring, as the broker ends one).
type cutAPI struct {
	*localAPI
	cut  chan struct{}
	subs atomic.Int32
}

type cutSub struct {
	chanSub
	cut chan struct{}
}

func (c cutSub) Next(ctx context.Context) ([]*managerv1.Event, error) {
	select {
	case <-c.cut:
		return nil, errors.New("fell behind the event ring")
	case evs := <-c.chanSub:
		return evs, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (c *cutAPI) Subscribe(ctx context.Context, after uint64) (Subscription, error) {
	if c.subs.Add(1) == 1 {
		return cutSub{chanSub: chanSub(c.events), cut: c.cut}, nil
	}
	return chanSub(c.events), nil
}

// TestRunCountsFullPassesByWhy: the first pass counts as start, and a cut
// event subscription brings a full pass counted as resync.
func TestRunCountsFullPassesByWhy(t *testing.T) {
	t.Parallel()
	api := &cutAPI{localAPI: newRecordAPI().localAPI, cut: make(chan struct{})}
	api.nodes = []*managerv1.Node{smallNode("a")}
	reg := prometheus.NewRegistry()
	am := New(Config{API: api, Logger: slog.New(slog.DiscardHandler), Settle: time.Millisecond, Metrics: NewMetrics(reg)})
	runUntilEnd(t, am)
	full := func(why string) float64 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != "norsk_automanager_reconciles_total" {
				continue
			}
			for _, m := range mf.GetMetric() {
				if m.GetLabel()[0].GetValue() == why {
					return m.GetCounter().GetValue()
				}
			}
		}
		return 0
	}
	wait := func(why string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for full(why) < 1 {
			if time.Now().After(deadline) {
				t.Fatalf("no full pass counted as %s", why)
			}
			time.Sleep(time.Millisecond)
		}
	}
	wait(fullStart)
	close(api.cut)
	wait(fullResync)
	if n := full(fullBurst) + full(fullFailed); n != 0 {
		t.Errorf("full passes counted as burst or failed = %v, want none", n)
	}
}
