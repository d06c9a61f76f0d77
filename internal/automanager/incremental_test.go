package automanager

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
	"pgregory.net/rapid"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/clock"
	"github.com/norsk-go/norsk-manager/pkg/placement"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// countingAPI is fakeAPI with StartJobs and a count of the reads.
type countingAPI struct {
	*fakeAPI
	mu    sync.Mutex
	reads map[string]int
}

func (c *countingAPI) count(name string) {
	c.mu.Lock()
	c.reads[name]++
	c.mu.Unlock()
}

func (c *countingAPI) takeReads() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.reads
	c.reads = map[string]int{}
	return r
}

func (c *countingAPI) JobSearch(ctx context.Context, s norsk.JobSearchSettings) ([]*norsk.JobWithHistory, error) {
	c.count("JobSearch")
	return c.fakeAPI.JobSearch(ctx, s)
}

func (c *countingAPI) JobById(ctx context.Context, id string) (*norsk.JobWithHistory, error) {
	c.count("JobById")
	return c.fakeAPI.JobById(ctx, id)
}

func (c *countingAPI) ListNodes(ctx context.Context) ([]*norsk.Node, error) {
	c.count("ListNodes")
	return c.fakeAPI.ListNodes(ctx)
}

func (c *countingAPI) StartJobs(ctx context.Context, starts []norsk.Start) ([]norsk.StartOutcome, error) {
	out := make([]norsk.StartOutcome, len(starts))
	for i, s := range starts {
		tok, err := c.StartJob(ctx, s.JobID, s.Role, s.NodeID, s.Options)
		out[i] = norsk.StartOutcome{FencingToken: tok, Err: err}
	}
	return out, nil
}

// autoJob is a job of no bundle the AutoManager keeps placed, needing one
// whole 1-vCPU node.
func autoJob(id string) *managerv1.JobWithHistory {
	return &managerv1.JobWithHistory{
		Job: &managerv1.Job{JobId: id, State: managerv1.JobState_JOB_STATE_PRE, Services: []*managerv1.Service{{Name: "main", Image: "x"}},
			AutoPlacement: &managerv1.AutoPlacement{Requirements: &managerv1.JobRequirements{RequiredCapacity: 0.5}}},
		History: []*managerv1.JobHistoryEntry{{Timestamp: timestamppb.New(t0.Add(-time.Hour)), Event: &managerv1.JobHistoryEntry_Created{Created: &managerv1.JobCreated{}}}},
	}
}

func smallNode(id string) *managerv1.Node {
	n := node(id)
	n.Hardware.Vcpus = 1
	return n
}

func jobEvent(jh *managerv1.JobWithHistory) *managerv1.Event {
	return &managerv1.Event{Kind: &managerv1.Event_JobUpdated{JobUpdated: &managerv1.JobEvent{Job: jh}}}
}

func (f *fakeAPI) put(jh *managerv1.JobWithHistory) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.jobs[jh.GetJob().GetJobId()] = jh
}

func (f *fakeAPI) starts() []string {
	var out []string
	for _, c := range f.callLog() {
		if strings.HasPrefix(c, "StartJob") {
			out = append(out, c)
		}
	}
	return out
}

func newIncremental(t *testing.T, api *countingAPI, m *Metrics) (*AutoManager, context.Context) {
	t.Helper()
	am := New(Config{API: api, Clock: clock.NewFake(t0), Logger: slog.New(slog.DiscardHandler), Metrics: m})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if _, err := am.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	return am, ctx
}

// passJobsSum is the sum of the jobs the passes planned so far.
func passJobsSum(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "norsk_automanager_pass_jobs" {
			return mf.GetMetric()[0].GetHistogram().GetSampleSum()
		}
	}
	t.Fatal("no pass_jobs metric")
	return 0
}

// TestPassChangesReadsOnlyWhatChanged: after the full pass, a change to a
// job nobody keeps placed costs one read of that job and no plan of any
// other; a change to a kept job plans it against the room every other
// job's instances take, which the mirror holds.
func TestPassChangesReadsOnlyWhatChanged(t *testing.T) {
	t.Parallel()
	api := &countingAPI{fakeAPI: newFakeAPI(), reads: map[string]int{}}
	api.nodes = []*managerv1.Node{smallNode("a"), smallNode("b"), smallNode("c")}
	api.put(autoJob("first"))
	am, ctx := newIncremental(t, api, nil)
	if got := api.starts(); len(got) != 1 || !strings.Contains(got[0], "first/primary@a") {
		t.Fatalf("full pass starts = %v, want first on a", got)
	}
	// The next pass reads back what the last one acted on.
	passOn(ctx, t, am)
	if r := api.takeReads(); r["JobById"] != 1 {
		t.Errorf("reads after a placement = %v, want one JobById (the placed job)", r)
	}

	// A job of no automatic placement: one read, nothing planned.
	plain := &managerv1.JobWithHistory{Job: &managerv1.Job{JobId: "plain", State: managerv1.JobState_JOB_STATE_PRE}}
	api.put(plain)
	passOn(ctx, t, am, &managerv1.Event{Kind: &managerv1.Event_JobCreated{JobCreated: &managerv1.JobEvent{Job: plain}}})
	if r := api.takeReads(); r["JobSearch"] != 0 || r["ListNodes"] != 0 || r["JobById"] != 1 {
		t.Errorf("reads for one plain job = %v, want one JobById", r)
	}
	if len(api.starts()) != 1 {
		t.Errorf("starts = %v, want none more", api.starts())
	}

	// A kept job: placed where the others' instances leave room (a is
	// full: first is there, and first is not in this pass's view).
	second := autoJob("second")
	api.put(second)
	passOn(ctx, t, am, jobEvent(second))
	if r := api.takeReads(); r["JobSearch"] != 0 || r["JobById"] != 1 {
		t.Errorf("reads for one kept job = %v, want one JobById", r)
	}
	got := api.starts()
	if len(got) != 2 || !strings.Contains(got[1], "second/primary@b") {
		t.Fatalf("starts = %v, want second on b (a is taken)", got)
	}

	// The store now shows second running on b; the event of its binding
	// settles it.
	api.instance("second", "primary", "b", phRunning)
	passOn(ctx, t, am, jobEvent(second))
	if n := len(am.mirror.pendingJobs); n != 0 {
		t.Errorf("pending = %v, want none", am.mirror.pendingJobs)
	}

	// Node b is lost: its job is re-placed on c, the only free node.
	api.mu.Lock()
	api.nodes[1] = lost(api.nodes[1])
	api.mu.Unlock()
	passOn(ctx, t, am, &managerv1.Event{Kind: &managerv1.Event_NodeLost{NodeLost: &managerv1.NodeEvent{Node: api.nodes[1]}}})
	got = api.starts()
	if len(got) != 3 || !strings.Contains(got[2], "second/primary@c") {
		t.Fatalf("starts = %v, want second re-placed on c", got)
	}
}

// TestPassChangesReplansPendingWhenRoomFrees: a job that fits nowhere is
// pending; a change that touches only a job nobody keeps placed does not
// plan it again, and the stop that frees a node does.
func TestPassChangesReplansPendingWhenRoomFrees(t *testing.T) {
	t.Parallel()
	api := &countingAPI{fakeAPI: newFakeAPI(), reads: map[string]int{}}
	api.nodes = []*managerv1.Node{smallNode("a")}
	api.put(autoJob("one"))
	api.put(autoJob("two"))
	reg := prometheus.NewRegistry()
	am, ctx := newIncremental(t, api, NewMetrics(reg))
	if got := api.starts(); len(got) != 1 {
		t.Fatalf("starts = %v, want one (one node)", got)
	}
	placed := "one"
	if strings.Contains(api.starts()[0], "two/") {
		placed = "two"
	}
	waiting := map[string]string{"one": "two", "two": "one"}[placed]
	if !am.mirror.pendingJobs[waiting] {
		t.Fatalf("pending = %v, want %s", am.mirror.pendingJobs, waiting)
	}
	api.instance(placed, "primary", "a", phRunning)
	passOn(ctx, t, am, jobEvent(api.jobs[placed]))
	// The binding changed what a holds: the waiting job was planned again,
	// and still fits nowhere.
	if len(api.starts()) != 1 || !am.mirror.pendingJobs[waiting] {
		t.Fatalf("starts = %v pending = %v", api.starts(), am.mirror.pendingJobs)
	}

	plain := &managerv1.JobWithHistory{Job: &managerv1.Job{JobId: "plain", State: managerv1.JobState_JOB_STATE_PRE}}
	api.put(plain)
	am.changes.note(jobEvent(plain))
	before := passJobsSum(t, reg)
	if _, err := am.passChanges(ctx, am.changes.take(), false); err != nil {
		t.Fatal(err)
	}
	if n := passJobsSum(t, reg) - before; n != 0 {
		t.Errorf("a change to a plain job planned %v jobs, want none (nothing to decide; the pending one is not planned again)", n)
	}

	// The placed job stops for good (the user stopped it): a is free.
	in := api.instance(placed, "primary", "a", stopped)
	in.Desired = desiredStopped
	in.StopReason = reasonUser
	passOn(ctx, t, am, jobEvent(api.jobs[placed]))
	got := api.starts()
	if len(got) != 2 || !strings.Contains(got[1], waiting+"/primary@a") {
		t.Fatalf("starts = %v, want %s on a once a is free", got, waiting)
	}
}

// TestPassChangesFallsDue: a failed instance waiting out its backoff is
// pending and is placed when the wait falls due, with no event.
func TestPassChangesFallsDue(t *testing.T) {
	t.Parallel()
	api := &countingAPI{fakeAPI: newFakeAPI(), reads: map[string]int{}}
	api.nodes = []*managerv1.Node{smallNode("a"), smallNode("b")}
	jh := autoJob("flaky")
	jh.Job.State = managerv1.JobState_JOB_STATE_ACTIVE
	api.put(jh)
	in := api.instance("flaky", "primary", "a", phRunning)
	failed(jh, in, reasonFailed, t0.Add(-100*time.Millisecond))
	clk := clock.NewFake(t0)
	am := New(Config{API: api, Clock: clk, Logger: slog.New(slog.DiscardHandler)})
	ctx := context.Background()
	next, err := am.Pass(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(api.starts()) != 0 || next.IsZero() || !am.mirror.pendingJobs["flaky"] {
		t.Fatalf("starts = %v next = %v pending = %v: want a wait", api.starts(), next, am.mirror.pendingJobs)
	}
	clk.Advance(next.Sub(clk.Now()))
	if _, err := am.passChanges(ctx, am.changes.take(), true); err != nil {
		t.Fatal(err)
	}
	if got := api.starts(); len(got) != 1 || !strings.Contains(got[0], "flaky/primary@b") {
		t.Fatalf("starts = %v, want flaky re-placed on b once its backoff ends", got)
	}
}

// localAPI is countingAPI with in-process events (Local).
type localAPI struct {
	*countingAPI
	events chan []*managerv1.Event
}

type chanSub chan []*managerv1.Event

func (c chanSub) Next(ctx context.Context) ([]*managerv1.Event, error) {
	select {
	case evs := <-c:
		return evs, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (l *localAPI) Subscribe(ctx context.Context, after uint64) (Subscription, error) {
	return chanSub(l.events), nil
}

// TestRunFollowsLocalEvents: Run over an in-process API makes one full
// pass, then places a job its event names without reading every job again.
func TestRunFollowsLocalEvents(t *testing.T) {
	t.Parallel()
	api := &localAPI{countingAPI: &countingAPI{fakeAPI: newFakeAPI(), reads: map[string]int{}}, events: make(chan []*managerv1.Event, 16)}
	api.nodes = []*managerv1.Node{smallNode("a"), smallNode("b")}
	for i := range 50 {
		api.put(&managerv1.JobWithHistory{Job: &managerv1.Job{JobId: fmt.Sprintf("plain-%02d", i)}})
	}
	am := New(Config{API: api, Logger: slog.New(slog.DiscardHandler), Settle: time.Millisecond})
	runUntilEnd(t, am)
	deadline := time.Now().Add(10 * time.Second)
	for { // the first full pass has read every job
		api.mu.Lock()
		n := api.reads["JobSearch"]
		api.mu.Unlock()
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no full pass")
		}
		time.Sleep(time.Millisecond)
	}
	jh := autoJob("late")
	api.put(jh)
	for len(api.starts()) == 0 {
		api.events <- []*managerv1.Event{{Index: 1, Kind: &managerv1.Event_JobCreated{JobCreated: &managerv1.JobEvent{Job: jh}}}}
		if time.Now().After(deadline) {
			t.Fatal("the job its event named was never placed")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := api.starts(); !strings.Contains(got[0], "late/primary@") {
		t.Fatalf("starts = %v", got)
	}
	api.mu.Lock()
	searches := api.reads["JobSearch"]
	api.mu.Unlock()
	if searches > 1 {
		t.Errorf("JobSearch called %d times, want only the first full pass's", searches)
	}
}

// TestMirrorPlacementNodesMatchFresh: after any sequence of node events —
// whole lists read again, single nodes added, changed (state, drain,
// tags, hardware, held images) or gone — the placement view the mirror
// keeps node by node is the one converting its nodes afresh gives, and a
// pass's placement nodes from it are those from the nodes themselves.
func TestMirrorPlacementNodesMatchFresh(t *testing.T) {
	t.Parallel()
	genNode := func(t *rapid.T) *managerv1.Node {
		n := node(fmt.Sprintf("n%d", rapid.IntRange(0, 9).Draw(t, "id")), "pool", rapid.SampledFrom([]string{"a", "b"}).Draw(t, "pool"))
		n.State = rapid.SampledFrom([]managerv1.NodeState{nodeOnline, nodeOnline, nodeStarting, nodeStopping,
			managerv1.NodeState_NODE_STATE_LOST, managerv1.NodeState_NODE_STATE_REGISTERED, managerv1.NodeState_NODE_STATE_TERMINATED}).Draw(t, "state")
		n.Draining = rapid.IntRange(0, 4).Draw(t, "draining") == 0
		n.Elastic = rapid.Bool().Draw(t, "elastic")
		n.Hardware.Vcpus = uint32(rapid.IntRange(1, 16).Draw(t, "vcpus"))
		if rapid.Bool().Draw(t, "held") {
			n.HeldImages = []*managerv1.HeldImage{{Ref: rapid.SampledFrom([]string{"enc:1", "enc:2"}).Draw(t, "ref")}}
		}
		return n
	}
	rapid.Check(t, func(t *rapid.T) {
		m := newMirror(placement.Config{})
		for range rapid.IntRange(1, 40).Draw(t, "events") {
			if rapid.IntRange(0, 5).Draw(t, "list") == 0 {
				byID := map[string]*managerv1.Node{}
				for range rapid.IntRange(0, 8).Draw(t, "nodes") {
					n := genNode(t)
					byID[n.GetNodeId()] = n
				}
				m.setNodes(slices.Collect(maps.Values(byID)))
			} else if id := fmt.Sprintf("n%d", rapid.IntRange(0, 9).Draw(t, "which")); rapid.IntRange(0, 3).Draw(t, "gone") == 0 {
				m.putNode(id, nil)
			} else {
				n := genNode(t)
				n.NodeId = id
				m.putNode(id, n)
			}
			same := func(a, b []placement.Node) bool { return len(a)+len(b) == 0 || reflect.DeepEqual(a, b) }
			fresh, _, _ := placementNodes(m.nodeList)
			if !same(m.placeList, fresh) {
				t.Fatalf("mirror's placement nodes %+v\nfresh %+v", m.placeList, fresh)
			}
			v := m.view(nil, nil)
			kept, keptOff, keptStarting := passNodes(v.Nodes, v.PlacementNodes)
			conv, convOff, convStarting := passNodes(v.Nodes, nil)
			if !same(kept, conv) || !maps.Equal(keptOff, convOff) || !maps.Equal(keptStarting, convStarting) {
				t.Fatalf("a pass's nodes from the mirror %+v %v %v\nconverted %+v %v %v", kept, keptOff, keptStarting, conv, convOff, convStarting)
			}
			if !same(m.placeList, fresh) {
				t.Fatalf("a pass changed the mirror's placement nodes")
			}
		}
	})
}

func (c *countingAPI) ListMigrations(ctx context.Context, jobID string) ([]*managerv1.MigrationState, error) {
	c.count("ListMigrations")
	return c.fakeAPI.ListMigrations(ctx, jobID)
}

func (c *countingAPI) GetMigration(ctx context.Context, id string) (*managerv1.MigrationState, error) {
	c.count("GetMigration")
	return c.fakeAPI.GetMigration(ctx, id)
}

// A migration event costs a read of that migration, not of every record
// the store keeps (they stay until an operator forgets them): the job
// under it is held from placement while it runs and planned again when
// it ends, and a forgotten record is dropped.
func TestPassChangesReadsOneMigration(t *testing.T) {
	t.Parallel()
	api := &countingAPI{fakeAPI: newFakeAPI(), reads: map[string]int{}}
	api.nodes = []*managerv1.Node{smallNode("a"), smallNode("b")}
	for i := range 50 { // history: ended migrations of other jobs
		id := fmt.Sprintf("old-%02d", i)
		api.migs[id] = &managerv1.MigrationState{MigrationId: id, SourceJobId: "gone", Phase: phDone}
	}
	job := autoJob("j")
	api.put(job)
	api.instance("j", "primary", "a", phRunning)
	am, ctx := newIncremental(t, api, nil)
	api.takeReads()

	st := &managerv1.MigrationState{MigrationId: "m1", SourceJobId: "j", SourceRole: "primary", Phase: phPlacing}
	api.migs["m1"] = st
	passOn(ctx, t, am, &managerv1.Event{Kind: &managerv1.Event_MigrationUpdated{MigrationUpdated: st}})
	if r := api.takeReads(); r["ListMigrations"] != 0 || r["GetMigration"] != 1 {
		t.Errorf("reads for one migration's event = %v, want one GetMigration", r)
	}
	if am.mirror.migrating["j"] == 0 {
		t.Fatal("the job under a migration is not held")
	}

	done := proto.Clone(st).(*managerv1.MigrationState)
	done.Phase = phDone
	api.migs["m1"] = done
	passOn(ctx, t, am, &managerv1.Event{Kind: &managerv1.Event_MigrationUpdated{MigrationUpdated: done}})
	if am.mirror.migrating["j"] > 0 {
		t.Fatal("the job is still held after its migration ended")
	}

	delete(api.migs, "m1")
	passOn(ctx, t, am, &managerv1.Event{Kind: &managerv1.Event_MigrationForgotten{MigrationForgotten: &managerv1.MigrationForgotten{MigrationIds: []string{"m1"}}}})
	if r := api.takeReads(); r["ListMigrations"] != 0 || r["GetMigration"] != 2 {
		t.Errorf("reads for an end and a forget = %v, want two GetMigration", r)
	}

	// An event that names no migration: every record is read.
	passOn(ctx, t, am, &managerv1.Event{Kind: &managerv1.Event_MigrationForgotten{MigrationForgotten: &managerv1.MigrationForgotten{}}})
	if r := api.takeReads(); r["ListMigrations"] != 1 {
		t.Errorf("reads for a forget naming none = %v, want one ListMigrations", r)
	}
}

// The mirror's migration bookkeeping, kept record by record, is what
// setMigrations makes of the store's records after any sequence of
// writes and forgets: the same jobs held, the same repairs counted, and
// each change reported.
func TestMirrorMigrationsPerRecordMatchFull(t *testing.T) {
	t.Parallel()
	phases := []managerv1.MigrationPhase{phPlacing, phDone, phAborted, phStoppingSource}
	rapid.Check(t, func(t *rapid.T) {
		store := map[string]*managerv1.MigrationState{}
		inc := newMirror(placement.Config{})
		for step := range rapid.IntRange(1, 40).Draw(t, "steps") {
			id := fmt.Sprintf("m%d", rapid.IntRange(0, 5).Draw(t, "id"))
			var st *managerv1.MigrationState
			switch old := store[id]; {
			case old != nil && !terminal(old.GetPhase()) || old == nil || !rapid.Bool().Draw(t, "forget"):
				// A record's job never changes; only an ended one is forgotten.
				job := fmt.Sprintf("j%d", rapid.IntRange(0, 3).Draw(t, "job"))
				if old != nil {
					job = old.GetSourceJobId()
				}
				st = &managerv1.MigrationState{MigrationId: id, SourceJobId: job,
					Phase: rapid.SampledFrom(phases).Draw(t, "phase"), Repair: rapid.Bool().Draw(t, "repair")}
				store[id] = st
			default:
				delete(store, id)
			}
			before := maps.Clone(inc.migrating)
			changed := inc.putMigration(id, st)

			// What every record says: the jobs with one in flight, the
			// repairs; and what setMigrations makes of them.
			held, repairs := map[string]bool{}, map[string]*managerv1.MigrationState{}
			all := make([]*managerv1.MigrationState, 0, len(store))
			for _, k := range sortedKeys(store) {
				m := store[k]
				all = append(all, m)
				if !terminal(m.GetPhase()) {
					held[m.GetSourceJobId()] = true
				}
				if m.GetRepair() {
					repairs[k] = m
				}
			}
			full := newMirror(placement.Config{})
			full.setMigrations(all)
			for _, mm := range []*mirror{inc, full} {
				if !slices.Equal(sortedKeys(mm.migrating), sortedKeys(held)) {
					t.Fatalf("step %d: held %v, the records say %v", step, mm.migrating, held)
				}
				if !maps.Equal(mm.repairs, repairs) {
					t.Fatalf("step %d: repairs %v, the records say %v", step, sortedKeys(mm.repairs), sortedKeys(repairs))
				}
			}
			want := changedKeys(before, inc.migrating)
			slices.Sort(changed)
			if !slices.Equal(changed, want) {
				t.Fatalf("step %d: reported %v changed, want %v", step, changed, want)
			}
		}
	})
}
