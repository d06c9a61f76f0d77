package automanager

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/clock"
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
