package state_test

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/hashicorp/go-memdb"

	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/store/state"
)

// woken reports whether any channel of ws is closed, without blocking.
func woken(ws memdb.WatchSet) bool {
	for ch := range ws {
		select {
		case <-ch:
			return true
		default:
		}
	}
	return false
}

// TestWatchIsPerRow: the state's own notifications (decision 0047) wake a
// reader of one row when that row changes, and not when another row of the
// same table does.
func TestWatchIsPerRow(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		read    func(r *state.Read, ws memdb.WatchSet)
		other   *storev1.Command // changes a row the read did not return
		touches *storev1.Command // changes what the read returned
	}{
		{"job", func(r *state.Read, ws memdb.WatchSet) { r.Job(ws, "job-1") }, cComplete("job-2"), cComplete("job-1")},
		{"instance", func(r *state.Read, ws memdb.WatchSet) { r.Instance(ws, "job-1", "a") }, cBind("job-2", "a", "n1"), cBind("job-1", "a", "n2")},
		{"instances of job", func(r *state.Read, ws memdb.WatchSet) { r.InstancesOfJob(ws, "job-1") }, cBind("job-2", "a", "n1"), cBind("job-1", "b", "n2")},
		{"instances on node", func(r *state.Read, ws memdb.WatchSet) { r.InstancesOnNode(ws, "n1") }, cBind("job-2", "a", "n2"), cBind("job-1", "a", "n1")},
		{"node", func(r *state.Read, ws memdb.WatchSet) { r.Node(ws, "n1") }, cTags("n2", map[string]string{"a": "b"}), cTags("n1", map[string]string{"a": "b"})},
		{"node by name", func(r *state.Read, ws memdb.WatchSet) { r.NodeByName(ws, "name-n1") }, cTags("n2", map[string]string{"a": "b"}), cTags("n1", map[string]string{"a": "b"})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			f.onlineNode("n1")
			f.onlineNode("n2")
			f.createJob("job-1")
			f.createJob("job-2")
			ws := memdb.NewWatchSet()
			tt.read(f.read(), ws)
			f.must(tt.other)
			if woken(ws) {
				t.Fatal("woken by a change to another row")
			}
			f.must(tt.touches)
			if !woken(ws) {
				t.Fatal("not woken by a change to the row it read")
			}
		})
	}
}

// TestWatchMovedInstanceWakesBothNodes: an instance bound again elsewhere
// (its node lost) wakes the readers of the node it left as well as of the
// node it went to.
func TestWatchMovedInstanceWakesBothNodes(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.onlineNode("n1")
	f.onlineNode("n2")
	f.createJob("job-1")
	f.bind("job-1", "a", "n1")
	f.must(cLost("n1", "gone"))
	from, to := memdb.NewWatchSet(), memdb.NewWatchSet()
	f.read().InstancesOnNode(from, "n1")
	f.read().InstancesOnNode(to, "n2")
	f.must(cBind("job-1", "a", "n2"))
	if !woken(from) || !woken(to) {
		t.Fatalf("woken: node left %v, node joined %v; want both", woken(from), woken(to))
	}
}

// TestWatchRegisteredAfterChange: a reader whose view predates a change
// registers its watch after the change landed; it is woken at once when the
// change touched what it read, and not otherwise. A view older than the
// history of recent commits is woken at once (it reads again).
func TestWatchRegisteredAfterChange(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.onlineNode("n1")
	f.createJob("job-1")
	f.createJob("job-2")
	old := f.read()
	f.must(cComplete("job-1"))

	touched, untouched := memdb.NewWatchSet(), memdb.NewWatchSet()
	old.Job(touched, "job-1")
	old.Job(untouched, "job-2")
	if !woken(touched) {
		t.Error("a view from before the change was not woken by it")
	}
	if woken(untouched) {
		t.Error("a view from before an unrelated change was woken by it")
	}

	for range 40 {
		f.index++
		f.s.ApplyNoop(f.index)
		f.must(cTags("n1", map[string]string{"i": fmt.Sprint(f.index)}))
	}
	ancient := memdb.NewWatchSet()
	old.Job(ancient, "job-2")
	if !woken(ancient) {
		t.Error("a view older than the commit history was not woken")
	}
}

// TestWatchWokenByRestore: a restore replaces every row, so it wakes every
// reader.
func TestWatchWokenByRestore(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.createJob("job-1")
	snap := f.snap()
	ws := memdb.NewWatchSet()
	f.read().Job(ws, "job-1")
	if _, err := f.s.Restore(bytes.NewReader(snap)); err != nil {
		t.Fatal(err)
	}
	if !woken(ws) {
		t.Fatal("a restore did not wake a reader")
	}
	// The restored generation's watches work too.
	ws = memdb.NewWatchSet()
	f.read().Job(ws, "job-1")
	f.must(cComplete("job-1"))
	if !woken(ws) {
		t.Fatal("a change after the restore did not wake its reader")
	}
}
