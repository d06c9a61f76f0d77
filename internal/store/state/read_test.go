package state_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/hashicorp/go-memdb"

	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/store/state"
)

func TestApplyNoop(t *testing.T) {
	f := world(t)
	before := f.snap()
	f.index += 5
	f.s.ApplyNoop(f.index)
	f.unchangedSince(before)
}

// TestSnapshotIsImmutable: a view taken before a change does not see it.
func TestSnapshotIsImmutable(t *testing.T) {
	f := newFixture(t)
	f.createJob("job-1")
	old := f.read()
	f.must(cDelete("job-1"))
	f.createJob("job-2")
	if old.Job(nil, "job-1") == nil || old.Job(nil, "job-2") != nil || old.Index() != 1 {
		t.Errorf("an old view changed: job-1 %v, job-2 %v, index %d", old.Job(nil, "job-1"), old.Job(nil, "job-2"), old.Index())
	}
}

// TestInstancesOfJobIsExact: a job's instances are read by the primary
// key's prefix (instancesByJob is watched, not stored); a job whose id
// begins with another's is not among them.
func TestInstancesOfJobIsExact(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.onlineNode("n1")
	for _, id := range []string{"job-1", "job-10", "job-1.a", "job-"} {
		f.createJob(id)
		f.bind(id, "primary", "n1")
	}
	f.bind("job-1", "backup", "n1")
	var got []string
	for _, in := range f.read().InstancesOfJob(nil, "job-1") {
		got = append(got, in.GetJobId()+"/"+in.GetRole())
	}
	if want := "[job-1/backup job-1/primary]"; fmt.Sprint(got) != want {
		t.Errorf("InstancesOfJob(job-1) = %v, want %s", got, want)
	}
}

// TestWatchSetFiresOnChange: a reader that watched what it read is woken
// when it changes, and not by unrelated changes.
func TestWatchSetFiresOnChange(t *testing.T) {
	tests := []struct {
		name   string
		read   func(r readFn, ws memdb.WatchSet)
		change *storev1.Command
	}{
		{"job", func(r readFn, ws memdb.WatchSet) { r().Job(ws, "job-1") }, cComplete("job-1")},
		{"jobs", func(r readFn, ws memdb.WatchSet) {
			r().Jobs(ws, "", func(*storev1.JobRecord) bool { return true })
		}, cCreate(jobSpec("job-2"))},
		{"instance", func(r readFn, ws memdb.WatchSet) { r().Instance(ws, "job-1", "a") }, cBind("job-1", "a", "n1")},
		{"instances of job", func(r readFn, ws memdb.WatchSet) { r().InstancesOfJob(ws, "job-1") }, cBind("job-1", "a", "n1")},
		{"instances on node", func(r readFn, ws memdb.WatchSet) { r().InstancesOnNode(ws, "n1") }, cBind("job-1", "a", "n1")},
		{"node", func(r readFn, ws memdb.WatchSet) { r().Node(ws, "n1") }, cTags("n1", map[string]string{"a": "b"})},
		{"nodes", func(r readFn, ws memdb.WatchSet) { r().Nodes(ws) }, cRegister("n2", "name-n2", "", "tok-n2")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			f.onlineNode("n1")
			f.createJob("job-1")
			ws := memdb.NewWatchSet()
			tt.read(f.read, ws)
			// A change of nothing it read does not wake the reader.
			f.index++
			f.s.ApplyNoop(f.index)
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			if err := ws.WatchCtx(ctx); !errors.Is(err, context.Canceled) {
				t.Fatalf("woken before the change: %v", err)
			}
			f.must(tt.change)
			if err := ws.WatchCtx(context.Background()); err != nil {
				t.Fatalf("not woken by the change: %v", err)
			}
		})
	}
}

type readFn = func() *state.Read

// TestReadsConcurrentWithApply: snapshots are read by many goroutines while
// commands are applied (run with -race).
func TestReadsConcurrentWithApply(t *testing.T) {
	f := newFixture(t)
	f.onlineNode("n1")
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				r := f.s.Snapshot()
				r.Jobs(nil, "", func(rec *storev1.JobRecord) bool {
					_ = r.JobView(rec, true)
					return true
				})
				for _, n := range r.Nodes(nil) {
					_ = r.NodeView(n)
				}
				var b discard
				if _, err := r.WriteTo(&b); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	for i := range 200 {
		id := fmt.Sprintf("job-%d", i)
		f.createJob(id)
		tok := f.bind(id, "a", "n1")
		f.must(cReports("n1", report(id, "a", tok, phaseRunning)))
		f.must(cStop(id, "a", "n1"))
	}
	cancel()
	wg.Wait()
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

var errWrite = errors.New("disk full")

type failingWriter struct{ after int }

func (w *failingWriter) Write(p []byte) (int, error) {
	if w.after < len(p) {
		return 0, errWrite
	}
	w.after -= len(p)
	return len(p), nil
}

func TestWriteToReportsWriteErrors(t *testing.T) {
	f := world(t)
	size := len(f.snap())
	for _, after := range []int{0, size / 2, size - 1} {
		if _, err := f.read().WriteTo(&failingWriter{after: after}); !errors.Is(err, errWrite) {
			t.Errorf("writer failing after %d of %d bytes: %v, want the write error", after, size, err)
		}
	}
}
