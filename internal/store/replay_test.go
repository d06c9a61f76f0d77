package store

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/pkg/jobspec"
)

// TestLogWrittenUnderLooserRulesReplaysOnRestart: entries an older release
// committed under rules today's pkg/jobspec refuses are in the raft log on
// disk; a member restarting on this binary replays them and reaches the
// state it had (decision 0046).
func TestLogWrittenUnderLooserRulesReplaysOnRestart(t *testing.T) {
	t.Parallel()
	job := &managerv1.Job{JobId: "encoder", Services: []*managerv1.Service{{Name: "Encoder_Main", Image: "hello:dev"}}}
	longKey := strings.Repeat("k", jobspec.MaxKVKeyLen+1)
	kv := []*managerv1.KvWrite{{Key: longKey, Op: &managerv1.KvWrite_Put{Put: []byte("v")}}}
	if jobspec.ValidateJob(job) == nil || jobspec.ValidateKVCommit("ns", kv, &managerv1.KvCommitOptions{}) == nil {
		t.Fatal("today's rules accept the entries; the test needs rules that are tighter now")
	}
	at := timestamppb.New(time.Unix(1700000000, 0))
	dir := t.TempDir()
	s := openStore(t, dir)
	ctx := context.Background()
	for _, c := range []*storev1.Command{
		{Time: at, Cmd: &storev1.Command_CreateJob{CreateJob: &storev1.CreateJob{Job: job}}},
		{Time: at, Cmd: &storev1.Command_KvCommit{KvCommit: &storev1.KvCommit{Namespace: "ns", Writes: kv}}},
	} {
		if _, err := s.Apply(ctx, c); err != nil {
			t.Fatalf("apply %T: %v", c.GetCmd(), err)
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
		t.Errorf("index after the replay = %d, want %d", got, want)
	}
	if got := r.Job(nil, "encoder").GetJob().GetServices(); len(got) != 1 || got[0].GetName() != "Encoder_Main" {
		t.Errorf("job encoder after the replay: services %v", got)
	}
	if r.KVGet(nil, "ns", longKey) == nil {
		t.Error("the long key is gone after the replay")
	}
}
