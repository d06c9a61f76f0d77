package automanager

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/clock"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// Past its deadline a drain stops what it could not move, with the reason
// in the stop, records the items stopped and ends the drain not drained;
// a job started by hand stays running and is reported.
func TestDrainDeadlineStopsWhatIsLeft(t *testing.T) {
	t.Parallel()
	f := newFakeAPI()
	clk := clock.NewFake(drainT0.Add(2 * time.Minute))
	f.nodes = []*managerv1.Node{{NodeId: "n1", Draining: true, Drain: &managerv1.NodeDrain{
		NodeId: "n1", State: drainRunning, Parallel: 2, Strategy: stratOverlap, Revision: 1, Listed: true,
		Deadline: timestamppb.New(drainT0.Add(time.Minute)),
		Items:    []*managerv1.DrainItem{{JobId: "a", Role: "primary", Result: drainPending, Attempts: 2, Reason: "no room"}},
	}}}
	jobs := []*managerv1.JobWithHistory{
		placedJob("a", true, inst("a", "primary", "n1", phRun)),
		placedJob("h", false, inst("h", "primary", "n1", phRun)),
	}
	a := New(Config{API: f, Clock: clk, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Metrics: NewMetrics(nil)})
	next, err := a.Drains(context.Background(), View{Nodes: f.nodes, Jobs: jobs})
	if err != nil {
		t.Fatal(err)
	}
	if !next.IsZero() {
		t.Errorf("an ended drain asks for a step at %v", next)
	}
	calls := strings.Join(f.callLog(), "\n")
	if !strings.Contains(calls, "StopJob a/primary@n1") || strings.Contains(calls, "StopJob h/") {
		t.Fatalf("calls:\n%s", calls)
	}
	d := f.nodes[0].GetDrain()
	if d.GetState() != drainNotDrained || results(d) != "a:stopped h:skipped" || !strings.Contains(d.GetItems()[0].GetReason(), "deadline") {
		t.Fatalf("drain after the deadline: %s %s %v", d.GetState(), results(d), d.GetItems())
	}
}

// drainReaderAPI is the fake with DrainView, answered from its own state
// as the Manager's in-process API answers it; a read of every job while it
// is in use fails the test.
type drainReaderAPI struct {
	*fakeAPI
	t     *testing.T
	asked [][]string
}

func (d *drainReaderAPI) DrainView(ctx context.Context, nodeIDs []string) (View, error) {
	f := d.fakeAPI
	f.mu.Lock()
	defer f.mu.Unlock()
	d.asked = append(d.asked, nodeIDs)
	var v View
	jobs := map[string]bool{}
	for _, id := range nodeIDs {
		for _, n := range f.nodes {
			if n.GetNodeId() != id {
				continue
			}
			v.Nodes = append(v.Nodes, proto.Clone(n).(*managerv1.Node))
			for _, it := range n.GetDrain().GetItems() {
				jobs[it.GetJobId()] = true
			}
		}
		for jid, jh := range f.jobs {
			for _, in := range jh.GetInstances() {
				if in.GetNodeId() == id {
					jobs[jid] = true
				}
			}
		}
	}
	for _, jid := range sortedKeys(jobs) {
		if jh := f.jobs[jid]; jh != nil {
			v.Jobs = append(v.Jobs, proto.Clone(jh).(*managerv1.JobWithHistory))
		}
		for _, mid := range sortedKeys(f.migs) {
			if m := f.migs[mid]; m.GetSourceJobId() == jid {
				v.Migrations = append(v.Migrations, proto.Clone(m).(*managerv1.MigrationState))
			}
		}
	}
	return v, nil
}

func (d *drainReaderAPI) JobSearch(ctx context.Context, s norsk.JobSearchSettings) ([]*norsk.JobWithHistory, error) {
	d.t.Error("a drain step read every job although the API reads the draining nodes alone")
	return d.fakeAPI.JobSearch(ctx, s)
}

// drainFleet is a fleet with node n1 draining past its deadline: job a
// pending on it, job c on it not yet listed, job x moved off it (its
// migration done), and job b elsewhere with a migration of its own.
func drainFleet() *fakeAPI {
	f := newFakeAPI()
	f.nodes = []*managerv1.Node{
		{NodeId: "n1", State: nodeOnline, Draining: true, Drain: &managerv1.NodeDrain{
			NodeId: "n1", State: drainRunning, Parallel: 1, Strategy: stratOverlap, Revision: 1, Listed: true,
			Deadline: timestamppb.New(drainT0.Add(time.Minute)),
			Items: []*managerv1.DrainItem{
				{JobId: "a", Role: "primary", Result: drainPending, Attempts: 1},
				{JobId: "x", Role: "primary", Result: drainMoving, MigrationId: "m1"},
			},
		}},
		{NodeId: "n2", State: nodeOnline},
		{NodeId: "n3", State: nodeOnline},
	}
	for _, jh := range []*managerv1.JobWithHistory{
		placedJob("a", true, inst("a", "primary", "n1", phRun)),
		placedJob("b", true, inst("b", "primary", "n2", phRun)),
		placedJob("c", true, inst("c", "primary", "n1", phRun)),
		placedJob("x", true, inst("x", "primary", "n3", phRun)),
	} {
		f.jobs[jh.GetJob().GetJobId()] = jh
	}
	f.migs["m1"] = &managerv1.MigrationState{MigrationId: "m1", SourceJobId: "x", SourceRole: "primary", Phase: phDone, TargetNodeId: "n3"}
	f.migs["m2"] = &managerv1.MigrationState{MigrationId: "m2", SourceJobId: "b", SourceRole: "primary", Phase: phDone, TargetNodeId: "n2"}
	return f
}

// In process a drain step reads the draining node, its jobs and the jobs
// its items name, with their migrations — not the whole state — and steps
// exactly as it does on a read of everything.
func TestDrainViewReadsTheDrainingNodesAlone(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(drainT0.Add(2 * time.Minute))
	logger := slog.New(slog.DiscardHandler)
	ctx := context.Background()

	full := drainFleet()
	a := New(Config{API: full, Clock: clk, Logger: logger})
	fv, err := a.drainView(ctx, View{Nodes: full.nodes})
	if err != nil {
		t.Fatal(err)
	}
	if len(fv.Jobs) != 4 {
		t.Fatalf("without DrainView the step reads every job: got %d", len(fv.Jobs))
	}
	if _, err := a.Drains(ctx, fv); err != nil {
		t.Fatal(err)
	}

	narrow := &drainReaderAPI{fakeAPI: drainFleet(), t: t}
	b := New(Config{API: narrow, Clock: clk, Logger: logger})
	nv, err := b.drainView(ctx, View{Nodes: narrow.nodes})
	if err != nil {
		t.Fatal(err)
	}
	var jobs, migs []string
	for _, jh := range nv.Jobs {
		jobs = append(jobs, jh.GetJob().GetJobId())
	}
	for _, m := range nv.Migrations {
		migs = append(migs, m.GetMigrationId())
	}
	if fmt.Sprint(narrow.asked) != "[[n1]]" || len(nv.Nodes) != 1 || fmt.Sprint(jobs) != "[a c x]" || fmt.Sprint(migs) != "[m1]" {
		t.Fatalf("DrainView asked for %v, read nodes %d, jobs %v, migrations %v", narrow.asked, len(nv.Nodes), jobs, migs)
	}
	if _, err := b.Drains(ctx, nv); err != nil {
		t.Fatal(err)
	}

	got, want := narrow.nodes[0].GetDrain(), full.nodes[0].GetDrain()
	got.EndedAt, want.EndedAt = nil, nil // the fake stamps the record's end with the wall clock
	if !proto.Equal(got, want) {
		t.Fatalf("the drain stepped differently on the narrow read:\n got %v\nwant %v", got, want)
	}
	if results(got) != "a:stopped x:moved c:stopped" {
		t.Fatalf("drain items: %s", results(got))
	}
	sorted := func(calls []string) string { slices.Sort(calls); return strings.Join(calls, "\n") } // the stops run in parallel
	if g, w := sorted(narrow.callLog()), sorted(full.callLog()); g != w {
		t.Fatalf("calls differ:\n got %s\nwant %s", g, w)
	}

	// No node drains: nothing is read.
	quiet := &drainReaderAPI{fakeAPI: newFakeAPI(), t: t}
	c := New(Config{API: quiet, Clock: clk, Logger: logger})
	if _, err := c.drainView(ctx, View{Nodes: []*managerv1.Node{{NodeId: "n9", State: nodeOnline}}}); err != nil || len(quiet.asked) != 0 {
		t.Fatalf("no drain: DrainView asked %v, err %v", quiet.asked, err)
	}
}
