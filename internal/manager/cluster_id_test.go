package manager_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/manager"
	"github.com/norsk-go/norsk-manager/internal/store/state"
)

// Issue 12, item 2: a new store gets a cluster id when it is bootstrapped
// (made by the boot code, in the InitCluster command), and keeps it across
// restarts.
func TestStoreBootMakesAClusterID(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s, _ := stStart(t, stConfig(dir, nil))
	id := s.Store().State().Snapshot().ClusterID()
	if len(id) != 32 {
		t.Fatalf("cluster id %q, want 32 hex digits", id)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2, _ := stStart(t, stConfig(dir, nil))
	if got := s2.Store().State().Snapshot().ClusterID(); got != id {
		t.Fatalf("cluster id after a restart = %q, was %q", got, id)
	}
	if other, _ := stStart(t, stConfig(t.TempDir(), nil)); other.Store().State().Snapshot().ClusterID() == id {
		t.Fatal("two stores share a cluster id")
	}
}

// Issue 12, item 2: a store initialised before cluster ids gets one on the
// primary's boot work, once: the next boot keeps it.
func TestStoreBootGivesAStoreFromBeforeClusterIDsOne(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	old := state.New(state.Limits{})
	var idx uint64
	for _, cmd := range []*storev1.Command{
		{Cmd: &storev1.Command_MigrateSchema{MigrateSchema: &storev1.MigrateSchema{To: state.SchemaVersion}}},
		{Cmd: &storev1.Command_InitCluster{InitCluster: &storev1.InitCluster{Members: []*storev1.MemberRecord{{Name: "m1", Status: state.MemberJoined}}}}},
		{Cmd: &storev1.Command_CreateJob{CreateJob: &storev1.CreateJob{Job: stJob("kept")}}},
	} {
		idx++
		cmd.Time = timestamppb.New(stT0.Add(-time.Hour).Add(time.Duration(idx) * time.Second))
		if res := old.Apply(idx, cmd); res.Err != nil {
			t.Fatalf("build the old state: %v", res.Err)
		}
	}
	if old.Snapshot().ClusterID() != "" || old.Snapshot().Generation() != 1 {
		t.Fatal("the old state is not initialised without a cluster id")
	}
	var buf bytes.Buffer
	if _, err := old.Snapshot().WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	fixture := filepath.Join(t.TempDir(), "old.nsnap")
	if err := os.WriteFile(fixture, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := manager.RestoreOffline(stCtx(t), stConfig(dir, nil), fixture); err != nil {
		t.Fatalf("RestoreOffline: %v", err)
	}

	s, c := stStart(t, stConfig(dir, nil))
	id := s.Store().State().Snapshot().ClusterID()
	if len(id) != 32 {
		t.Fatalf("cluster id %q after booting a store from before cluster ids, want one made", id)
	}
	if got := stJobIDs(t, c); len(got) != 1 || got[0] != "kept" {
		t.Fatalf("jobs %v, want [kept]", got)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2, _ := stStart(t, stConfig(dir, nil))
	if got := s2.Store().State().Snapshot().ClusterID(); got != id {
		t.Fatalf("cluster id after the next boot = %q, was %q", got, id)
	}
}
