package tests

import (
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/norsk-go/norsk-manager/internal/manager"
	"github.com/norsk-go/norsk-manager/internal/runtime/runtimetest"
	"github.com/norsk-go/norsk-manager/internal/testcluster"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// eventLog is what a consumer of the event stream has seen.
type eventLog struct {
	mu sync.Mutex
	// entries counts, per job and history-entry index, the entries that
	// job_created and job_updated events carried.
	entries map[string]map[uint64]int
	// snapshotJobs are the jobs of snapshots, by id.
	snapshotJobs map[string]*norsk.JobWithHistory
	// completes are the initial_data_complete events, in order.
	completes []*norsk.InitialDataComplete
	// live is how many live (non-snapshot) events arrived after the first
	// initial_data_complete; lastIndex is the index of the last one.
	live      int
	lastIndex uint64
	// backwards notes live events whose index went down.
	backwards []string
}

func (l *eventLog) add(ev *norsk.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case ev.GetJobSnapshot() != nil:
		l.snapshotJobs[ev.GetJobSnapshot().GetJob().GetJobId()] = ev.GetJobSnapshot()
		return
	case ev.GetNodeSnapshot() != nil:
		return
	case ev.GetInitialDataComplete() != nil:
		l.completes = append(l.completes, ev.GetInitialDataComplete())
		return
	}
	if ev.GetIndex() < l.lastIndex {
		l.backwards = append(l.backwards, fmt.Sprintf("%d after %d", ev.GetIndex(), l.lastIndex))
	}
	l.live++
	l.lastIndex = ev.GetIndex()
	var je *norsk.JobEvent
	switch {
	case ev.GetJobCreated() != nil:
		je = ev.GetJobCreated()
	case ev.GetJobUpdated() != nil:
		je = ev.GetJobUpdated()
	default:
		return
	}
	if je.GetEntry() == nil {
		return
	}
	id := je.GetJob().GetJob().GetJobId()
	if l.entries[id] == nil {
		l.entries[id] = map[uint64]int{}
	}
	l.entries[id][je.GetEntry().GetIndex()]++
}

// seen returns a copy of the entry counts of a job.
func (l *eventLog) seen(id string) map[uint64]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[uint64]int{}
	for i, n := range l.entries[id] {
		out[i] = n
	}
	return out
}

func (l *eventLog) initialDataComplete() []*norsk.InitialDataComplete {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.completes)
}

func (l *eventLog) liveCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.live
}

// consume follows an event stream of its own SDK connection to the cluster's
// Manager (the cluster's client is replaced at each Manager restart, and
// streams end with their client), recording into a new eventLog until the
// test ends.
func consume(t *testing.T, c *testcluster.Cluster, s norsk.EventStreamSettings) (*norsk.EventStream, *eventLog) {
	t.Helper()
	m, err := norsk.Connect(ctx(t), norsk.Settings{URL: c.URL(), Token: c.Token(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	stream := m.EventStream(ctx(t), s)
	l := &eventLog{entries: map[string]map[uint64]int{}, snapshotJobs: map[string]*norsk.JobWithHistory{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for stream.Next() {
			l.add(stream.Event())
		}
	}()
	t.Cleanup(func() {
		_ = stream.Close()
		<-done
		if err := stream.Err(); err != nil {
			t.Errorf("event stream ended with %v", err)
		}
		_ = m.Close()
	})
	return stream, l
}

// An event stream consumer that started with a snapshot follows jobs being
// created, started and stopped while the Manager restarts in the middle:
// the stream resumes by itself, and the consumer sees every history entry
// of every job exactly once, with no resync.
func TestEventStreamAcrossManagerRestart(t *testing.T) {
	t.Parallel()
	c := testcluster.New(t, testcluster.Options{Workers: 1})
	stream, l := consume(t, c, norsk.EventStreamSettings{})
	c.Eventually("the snapshot to arrive", func() bool { return len(l.initialDataComplete()) == 1 })

	cl, x := c.Client(), ctx(t)
	ids := []string{"ev-a", "ev-b", "ev-c"}
	for _, id := range ids[:2] {
		if _, err := cl.CreateJob(x, progJob(t, id, runtimetest.Behaviour{}, nil)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cl.StartJob(x, "ev-a", "primary", "worker-1", norsk.StartJobOptions{}); err != nil {
		t.Fatal(err)
	}
	c.WaitPhase("ev-a", "primary", norsk.InstancePhaseRunning)
	// ev-b's start is under way (its running report may come before, while
	// or after the Manager is down) when the Manager restarts.
	if _, err := cl.StartJob(x, "ev-b", "primary", "worker-1", norsk.StartJobOptions{}); err != nil {
		t.Fatal(err)
	}
	liveBefore := l.liveCount()
	c.RestartManager()

	cl = c.Client()
	c.Eventually("the worker to be dialled again", func() bool { return c.Node("worker-1").GetConnected() })
	c.WaitPhase("ev-b", "primary", norsk.InstancePhaseRunning)
	if err := cl.StopJob(x, "ev-a", "primary", "worker-1", norsk.StopJobOptions{Grace: 2 * time.Second}); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.CreateJob(x, progJob(t, "ev-c", runtimetest.Behaviour{}, nil)); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.StartJob(x, "ev-c", "primary", "worker-1", norsk.StartJobOptions{}); err != nil {
		t.Fatal(err)
	}
	c.WaitPhase("ev-a", "primary", norsk.InstancePhaseStopped)
	c.WaitPhase("ev-c", "primary", norsk.InstancePhaseRunning)
	if err := cl.StopJob(x, "ev-c", "primary", "worker-1", norsk.StopJobOptions{Grace: 2 * time.Second}); err != nil {
		t.Fatal(err)
	}
	c.WaitPhase("ev-c", "primary", norsk.InstancePhaseStopped)

	final := map[string][]uint64{}
	for _, id := range ids {
		for _, e := range c.Job(id).GetHistory() {
			final[id] = append(final[id], e.GetIndex())
		}
	}
	c.Eventually("the consumer to see every job's history", func() bool {
		for _, id := range ids {
			seen := l.seen(id)
			for _, i := range final[id] {
				if seen[i] == 0 {
					return false
				}
			}
		}
		return true
	})
	for _, id := range ids {
		seen := l.seen(id)
		var extra, twice []uint64
		for i, n := range seen {
			if !slices.Contains(final[id], i) {
				extra = append(extra, i)
			}
			if n > 1 {
				twice = append(twice, i)
			}
		}
		if len(extra) > 0 || len(twice) > 0 {
			t.Errorf("job %s: entries seen that its history lacks %v, seen more than once %v (history %v, seen %v)", id, extra, twice, final[id], seen)
		}
	}
	if stream.Reconnects() == 0 {
		t.Errorf("the stream did not reconnect across the Manager restart")
	}
	if l.liveCount() <= liveBefore {
		t.Errorf("no live event after the restart")
	}
	if cs := l.initialDataComplete(); len(cs) != 1 || cs[0].GetResync() {
		t.Errorf("initial_data_complete events = %v, want the first snapshot only (a resume needs no resync)", cs)
	}
	l.mu.Lock()
	if len(l.backwards) > 0 {
		t.Errorf("live events out of index order: %v", l.backwards)
	}
	l.mu.Unlock()
	t.Logf("reconnects %d, duplicates dropped %d, live events %d", stream.Reconnects(), stream.Duplicates(), l.liveCount())
}

// A consumer resuming after an index the store has not reached (it saw a
// store restored since from an older backup) gets a resync snapshot of what
// is there, then the live events that follow it.
func TestEventStreamResyncAfterFutureIndex(t *testing.T) {
	t.Parallel()
	c := testcluster.New(t, testcluster.Options{Workers: 1})
	cl, x := c.Client(), ctx(t)
	if _, err := cl.CreateJob(x, progJob(t, "ev-old", runtimetest.Behaviour{}, nil)); err != nil {
		t.Fatal(err)
	}
	oldIndex := c.Job("ev-old").GetHistory()[0].GetIndex()

	const future = math.MaxUint64 / 2
	_, l := consume(t, c, norsk.EventStreamSettings{AfterIndex: future})
	c.Eventually("a snapshot to arrive", func() bool { return len(l.initialDataComplete()) > 0 })
	cs := l.initialDataComplete()
	if len(cs) != 1 || !cs[0].GetResync() {
		t.Fatalf("initial_data_complete = %v, want one with resync", cs)
	}
	if idx := cs[0].GetIndex(); idx < oldIndex || idx >= future {
		t.Errorf("resync snapshot index = %d, want the store's (at least %d)", idx, oldIndex)
	}
	l.mu.Lock()
	snap := l.snapshotJobs["ev-old"]
	l.mu.Unlock()
	if snap == nil || len(snap.GetHistory()) == 0 || snap.GetHistory()[0].GetIndex() != oldIndex {
		t.Fatalf("resync snapshot's ev-old = %v, want it with its history", snap)
	}

	// The stream goes on from the snapshot's index, not from the index it
	// first asked for.
	if _, err := cl.CreateJob(x, progJob(t, "ev-new", runtimetest.Behaviour{}, nil)); err != nil {
		t.Fatal(err)
	}
	created := c.Job("ev-new").GetHistory()[0].GetIndex()
	c.Eventually("the new job's created event", func() bool { return l.seen("ev-new")[created] == 1 })
}

// A consumer that resumes after more events than the event buffer's count
// resumes where it was when they are within the retention (decision 0066),
// and with no time window is sent a resync snapshot, counted.
func TestEventStreamResumeWithinTheWindow(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		retention  time.Duration
		wantResync bool
	}{
		{"the default window", 0, false},
		{"no window", -1, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := testcluster.New(t, testcluster.Options{ManagerConfig: func(cfg *manager.Config) {
				cfg.EventBuffer = 4
				cfg.EventRetention = tt.retention
			}})
			cl, x := c.Client(), ctx(t)
			if _, err := cl.CreateJob(x, progJob(t, "win-0", runtimetest.Behaviour{}, nil)); err != nil {
				t.Fatal(err)
			}
			seenIndex := c.Job("win-0").GetHistory()[0].GetIndex()
			// More events than the buffer's 4 since the consumer's index.
			const later = 8
			for i := 1; i <= later; i++ {
				if _, err := cl.CreateJob(x, progJob(t, fmt.Sprint("win-", i), runtimetest.Behaviour{}, nil)); err != nil {
					t.Fatal(err)
				}
			}
			_, l := consume(t, c, norsk.EventStreamSettings{AfterIndex: seenIndex})
			c.Eventually("every later job", func() bool {
				for i := 1; i <= later; i++ {
					id := fmt.Sprint("win-", i)
					if l.seen(id)[c.Job(id).GetHistory()[0].GetIndex()] == 0 {
						l.mu.Lock()
						_, snap := l.snapshotJobs[id]
						l.mu.Unlock()
						if !snap {
							return false
						}
					}
				}
				return true
			})
			cs := l.initialDataComplete()
			if resynced := len(cs) == 1 && cs[0].GetResync(); resynced != tt.wantResync || len(cs) > 1 {
				t.Errorf("initial_data_complete = %v; want a resync: %v", cs, tt.wantResync)
			}
			want := "norsk_manager_event_resyncs_total 0"
			if tt.wantResync {
				want = "norsk_manager_event_resyncs_total 1"
			}
			res, err := http.Get(c.URL() + "/metrics")
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			if b, _ := io.ReadAll(res.Body); !strings.Contains(string(b), want+"\n") {
				t.Errorf("/metrics lacks %q", want)
			}
		})
	}
}
