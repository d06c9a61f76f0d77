package store

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
)

func openStore(t *testing.T, dir string) *Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := Open(ctx, Config{Dir: dir, MemberID: "m1", SnapshotThreshold: 64, TrailingLogs: 16})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return s
}

func createJob(id string) *storev1.Command {
	return &storev1.Command{
		Time: timestamppb.New(time.Unix(1700000000, 0)),
		Cmd: &storev1.Command_CreateJob{CreateJob: &storev1.CreateJob{Job: &managerv1.Job{
			JobId:    id,
			Services: []*managerv1.Service{{Name: "main", Image: "hello:dev"}},
		}}},
	}
}

func TestStoreSurvivesRestartWithSnapshotsAndLog(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir)
	ctx := context.Background()
	for i := range 200 {
		if _, err := s.Apply(ctx, createJob(fmt.Sprintf("job-%03d", i))); err != nil {
			t.Fatalf("apply %d: %v", i, err)
		}
	}
	if _, err := s.Apply(ctx, createJob("job-000")); !apierr.Is(err, apierr.AlreadyExists) {
		t.Fatalf("duplicate create: got %v, want AlreadyExists", err)
	}
	if err := s.TakeSnapshot(); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	for i := 200; i < 250; i++ {
		if _, err := s.Apply(ctx, createJob(fmt.Sprintf("job-%03d", i))); err != nil {
			t.Fatalf("apply %d: %v", i, err)
		}
	}
	want := s.State().Snapshot().Index()
	if err := s.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}

	s = openStore(t, dir)
	defer s.Close()
	r := s.State().Snapshot()
	if got := r.Index(); got != want {
		t.Errorf("index after restart = %d, want %d", got, want)
	}
	n := 0
	r.Jobs(nil, "", func(*storev1.JobRecord) bool { n++; return true })
	if n != 250 {
		t.Errorf("jobs after restart = %d, want 250", n)
	}
	if j := r.Job(nil, "job-123"); j == nil || j.GetJob().GetCurrentHash() == 0 {
		t.Errorf("job-123 after restart = %v", j)
	}
}
