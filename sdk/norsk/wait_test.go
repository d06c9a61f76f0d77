package norsk_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
	"github.com/norsk-go/norsk-manager/sdk/norsk/norsktest"
)

// waitResult is what a wait run in a goroutine returned.
type waitResult[T any] struct {
	v   T
	err error
}

// goWait runs f in a goroutine the test owns, and returns its result channel.
func goWait[T any](t *testing.T, f func() (T, error)) <-chan waitResult[T] {
	t.Helper()
	ch := make(chan waitResult[T], 1)
	go func() {
		v, err := f()
		ch <- waitResult[T]{v, err}
	}()
	return ch
}

// mustNotReturn checks the wait is still waiting (a short look, not a timing).
func mustNotReturn[T any](t *testing.T, ch <-chan waitResult[T]) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("the wait returned early: %v, %v", r.v, r.err)
	case <-time.After(20 * time.Millisecond):
	}
}

func instancePhase(j *norsk.JobWithHistory, role string) norsk.InstancePhase {
	for _, in := range j.GetInstances() {
		if in.GetRole() == role {
			return in.GetPhase()
		}
	}
	return norsk.InstancePhaseUnspecified
}

func TestWaitForJob(t *testing.T) {
	t.Parallel()
	srv := norsktest.NewServer(t)
	m := connectTo(t, srv)
	srv.AddNode(&managerv1.Node{NodeId: "n1"})
	x := t.Context()
	if _, err := m.CreateJob(x, testJob("a")); err != nil {
		t.Fatal(err)
	}
	if _, err := m.StartJob(x, "a", "primary", "n1", norsk.StartJobOptions{DeferStart: true}); err != nil {
		t.Fatal(err)
	}
	// Already there: answered from the read.
	j, err := m.WaitForJob(x, "a", "primary", norsk.InstancePhasePrepared)
	if err != nil || instancePhase(j, "primary") != norsk.InstancePhasePrepared {
		t.Fatalf("WaitForJob(prepared) = %v, %v", j, err)
	}

	// Reached later: seen on the event stream.
	streams := len(srv.StreamRequests())
	ch := goWait(t, func() (*norsk.JobWithHistory, error) {
		return m.WaitForJob(x, "a", "primary", norsk.InstancePhaseRunning)
	})
	if err := srv.WaitStreams(x, streams+1); err != nil {
		t.Fatal(err)
	}
	mustNotReturn(t, ch)
	if err := m.StartPreparedJob(x, "a", "primary", "n1"); err != nil {
		t.Fatal(err)
	}
	r := <-ch
	if r.err != nil || instancePhase(r.v, "primary") != norsk.InstancePhaseRunning {
		t.Fatalf("WaitForJob(running) = %v, %v", r.v, r.err)
	}
	if req := srv.StreamRequests()[streams]; !slices.Equal(req.GetJobIds(), []string{"a"}) {
		t.Errorf("the wait's stream request = %v; want it filtered to job a", req)
	}

	// Any role.
	if _, err := m.WaitForJob(x, "a", "", norsk.InstancePhaseRunning); err != nil {
		t.Errorf("WaitForJob(any role) = %v", err)
	}

	// Deleted while waiting.
	ch = goWait(t, func() (*norsk.JobWithHistory, error) {
		return m.WaitForJob(x, "a", "standby", norsk.InstancePhaseRunning)
	})
	if err := srv.WaitStreams(x, len(srv.StreamRequests())+1); err != nil {
		t.Fatal(err)
	}
	if err := m.StopJob(x, "a", "primary", "n1", norsk.StopJobOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.WaitForJob(x, "a", "primary", norsk.InstancePhaseStopped); err != nil {
		t.Fatalf("WaitForJob(stopped) = %v", err)
	}
	mustNotReturn(t, ch)
	if err := m.DeleteJob(x, "a"); err != nil {
		t.Fatal(err)
	}
	if r := <-ch; !errors.Is(r.err, norsk.ErrNotFound) {
		t.Errorf("WaitForJob of a job deleted while waiting = %v, %v; want ErrNotFound", r.v, r.err)
	}
}

func TestWaitForJobErrors(t *testing.T) {
	t.Parallel()
	srv := norsktest.NewServer(t)
	m := connectTo(t, srv)
	if _, err := m.CreateJob(t.Context(), testJob("a")); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	for _, tc := range []struct {
		name  string
		ctx   context.Context
		id    string
		phase norsk.InstancePhase
		want  error
	}{
		{"empty id", t.Context(), "", norsk.InstancePhaseRunning, norsk.ErrInvalidArgument},
		{"no phase", t.Context(), "a", norsk.InstancePhaseUnspecified, norsk.ErrInvalidArgument},
		{"unknown job", t.Context(), "nope", norsk.InstancePhaseRunning, norsk.ErrNotFound},
		{"deadline", short, "a", norsk.InstancePhaseRunning, norsk.ErrDeadlineExceeded},
	} {
		if _, err := m.WaitForJob(tc.ctx, tc.id, "primary", tc.phase); !errors.Is(err, tc.want) {
			t.Errorf("%s: WaitForJob = %v, want %v", tc.name, err, tc.want)
		}
	}
}

func TestWaitForMigration(t *testing.T) {
	t.Parallel()
	srv := norsktest.NewServer(t)
	m := connectTo(t, srv)
	x := t.Context()
	record := func(id string, phase norsk.MigrationPhase, create bool) {
		t.Helper()
		if _, err := m.RecordMigration(x, &norsk.MigrationState{MigrationId: id, SourceJobId: "j-" + id, SourceRole: "primary", TargetRole: "primary@" + id, Phase: phase}, 0, create); err != nil {
			t.Fatal(err)
		}
	}
	record("m1", norsk.PhasePlacing, true)
	if _, err := m.WaitForMigration(x, "m1", norsk.PhasePlacing, norsk.PhaseLaunching); err != nil {
		t.Fatalf("WaitForMigration(placing) = %v", err)
	}

	streams := len(srv.StreamRequests())
	ch := goWait(t, func() (*norsk.MigrationState, error) { return m.WaitForMigration(x, "m1") })
	if err := srv.WaitStreams(x, streams+1); err != nil {
		t.Fatal(err)
	}
	record("m1", norsk.PhaseLaunching, false)
	mustNotReturn(t, ch)
	record("m1", norsk.PhaseDone, false)
	if r := <-ch; r.err != nil || r.v.GetPhase() != norsk.PhaseDone {
		t.Fatalf("WaitForMigration(terminal) = %v, %v", r.v, r.err)
	}

	// Ended in a phase not waited for: the record and FailedPrecondition.
	record("m2", norsk.PhasePlacing, true)
	ch = goWait(t, func() (*norsk.MigrationState, error) {
		return m.WaitForMigration(x, "m2", norsk.PhaseStoppingSource)
	})
	if err := srv.WaitStreams(x, len(srv.StreamRequests())+1); err != nil {
		t.Fatal(err)
	}
	record("m2", norsk.PhaseAborted, false)
	if r := <-ch; !errors.Is(r.err, norsk.ErrFailedPrecondition) || r.v.GetPhase() != norsk.PhaseAborted {
		t.Errorf("WaitForMigration of an aborted migration = %v, %v; want it and ErrFailedPrecondition", r.v, r.err)
	}

	// Forgotten while waiting; unknown; empty id.
	record("m3", norsk.PhasePlacing, true)
	ch = goWait(t, func() (*norsk.MigrationState, error) { return m.WaitForMigration(x, "m3") })
	if err := srv.WaitStreams(x, len(srv.StreamRequests())+1); err != nil {
		t.Fatal(err)
	}
	record("m3", norsk.PhaseAborted, false)
	if r := <-ch; !errors.Is(r.err, norsk.ErrFailedPrecondition) && r.err != nil {
		t.Fatalf("WaitForMigration(m3) = %v", r.err)
	}
	if _, err := m.WaitForMigration(x, "nope"); !errors.Is(err, norsk.ErrNotFound) {
		t.Errorf("WaitForMigration(unknown) = %v, want ErrNotFound", err)
	}
	if _, err := m.WaitForMigration(x, ""); !errors.Is(err, norsk.ErrInvalidArgument) {
		t.Errorf("WaitForMigration(\"\") = %v, want ErrInvalidArgument", err)
	}
}

func TestEventStreamFilters(t *testing.T) {
	t.Parallel()
	srv := norsktest.NewServer(t)
	m := connectTo(t, srv)
	x := t.Context()
	byJob := m.EventStream(x, norsk.EventStreamSettings{SkipSnapshot: true, JobIDs: []string{"b"}})
	defer byJob.Close()
	byKind := m.EventStream(x, norsk.EventStreamSettings{SkipSnapshot: true, Kinds: []norsk.EventKind{norsk.EventKindJobDeleted}})
	defer byKind.Close()
	for _, id := range []string{"a", "b"} {
		if _, err := m.CreateJob(x, testJob(id)); err != nil {
			t.Fatal(err)
		}
	}
	srv.AppendEvents(deleted("a"))
	expect(t, byJob, "created:b")
	expect(t, byKind, "a")

	bad := m.EventStream(x, norsk.EventStreamSettings{Kinds: []norsk.EventKind{"job_made"}})
	defer bad.Close()
	if bad.Next() {
		t.Fatalf("a stream with an unknown kind delivered %s", label(bad.Event()))
	}
	if err := bad.Err(); !errors.Is(err, norsk.ErrInvalidArgument) {
		t.Errorf("Err = %v, want ErrInvalidArgument", err)
	}
}
