package store_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/store"
	"github.com/norsk-go/norsk-manager/internal/store/state"
)

var bkT0 = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

// bkState is a small state at index n (n jobs).
func bkState(t *testing.T, n int) *state.State {
	t.Helper()
	s := state.New(state.Limits{})
	for i := 1; i <= n; i++ {
		res := s.Apply(uint64(i), &storev1.Command{Time: timestamppb.New(bkT0), Cmd: &storev1.Command_CreateJob{CreateJob: &storev1.CreateJob{Job: &managerv1.Job{
			JobId: "job-" + string(rune('a'+i)), Services: []*managerv1.Service{{Name: "main", Image: "x:1"}},
		}}}})
		if res.Err != nil {
			t.Fatal(res.Err)
		}
	}
	return s
}

func bkName(reason string, at time.Time, index int) string {
	return reason + "-" + at.UTC().Format("20060102T150405.000Z") + "-" + strconv.Itoa(index) + store.BackupExt
}

func TestListAndPruneBackups(t *testing.T) {
	dir := t.TempDir()
	s := bkState(t, 3)
	write := func(name string) {
		if _, err := store.WriteSnapshotFile(filepath.Join(dir, name), s.Snapshot()); err != nil {
			t.Fatal(err)
		}
	}
	var scheduled []string
	for i := 1; i <= 5; i++ {
		n := bkName(store.BackupScheduled, bkT0.Add(time.Duration(i)*time.Minute), 10+i)
		scheduled = append(scheduled, n)
		write(n)
	}
	pre := bkName(store.BackupPreUpgrade, bkT0, 3)
	manual := bkName(store.BackupManual, bkT0.Add(150*time.Second), 12)
	write(pre)
	write(manual)
	junk := []string{"notes.txt", ".tmp-123", "scheduled-notatime-5.nsnap", "scheduled-20260304T050607.000Z-x.nsnap", "nodash.nsnap"}
	for _, j := range junk {
		if err := os.WriteFile(filepath.Join(dir, j), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, bkName(store.BackupScheduled, bkT0.Add(time.Hour), 99)), 0o700); err != nil {
		t.Fatal(err)
	}

	list, err := store.ListBackups(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, b := range list {
		got = append(got, filepath.Base(b.Path))
	}
	want := []string{scheduled[4], scheduled[3], scheduled[2], manual, scheduled[1], scheduled[0], pre}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("ListBackups (newest first):\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if b := list[len(list)-1]; b.Reason != store.BackupPreUpgrade || b.Index != 3 || !b.CreatedAt.Equal(bkT0) || b.Bytes == 0 {
		t.Errorf("pre-upgrade backup parsed as %+v", b)
	}

	if err := store.PruneBackups(dir, 2); err != nil {
		t.Fatal(err)
	}
	list, _ = store.ListBackups(dir)
	got = got[:0]
	for _, b := range list {
		got = append(got, filepath.Base(b.Path))
	}
	want = []string{scheduled[4], scheduled[3], manual, pre}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("after keeping 2 scheduled:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for _, j := range junk {
		if _, err := os.Stat(filepath.Join(dir, j)); err != nil {
			t.Errorf("pruning removed %s", j)
		}
	}
	if err := store.PruneBackups(dir, 0); err != nil {
		t.Fatal(err)
	}
	list, _ = store.ListBackups(dir)
	if len(list) != 2 || list[0].Reason != store.BackupManual || list[1].Reason != store.BackupPreUpgrade {
		t.Errorf("after keeping 0 scheduled: %+v", list)
	}

	if l, err := store.ListBackups(filepath.Join(dir, "missing")); err != nil || l != nil {
		t.Errorf("ListBackups of a missing dir = %v, %v", l, err)
	}
}

// TestStoreBackup: a backup is named by reason, time and index, verifies,
// and reads back as the state it was taken of; the write is atomic.
func TestStoreBackup(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := store.Open(ctx, store.Config{Dir: t.TempDir(), MemberID: "m1", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, id := range []string{"a", "b"} {
		if _, err := st.Apply(ctx, &storev1.Command{Time: timestamppb.New(bkT0), Cmd: &storev1.Command_CreateJob{CreateJob: &storev1.CreateJob{Job: &managerv1.Job{
			JobId: id, Services: []*managerv1.Service{{Name: "main", Image: "x:1"}},
		}}}}); err != nil {
			t.Fatal(err)
		}
	}
	dir := filepath.Join(t.TempDir(), "backups", "nested") // created on demand
	at := bkT0.Add(1234 * time.Millisecond)
	b, err := st.Backup(dir, store.BackupManual, at)
	if err != nil {
		t.Fatal(err)
	}
	idx := st.State().Snapshot().Index()
	if b.Index != idx || b.Reason != store.BackupManual || !b.CreatedAt.Equal(at) || filepath.Base(b.Path) != bkName(store.BackupManual, at, int(idx)) {
		t.Errorf("backup %+v (index %d)", b, idx)
	}
	list, err := store.ListBackups(dir)
	if err != nil || len(list) != 1 || list[0].Path != b.Path || list[0].Index != b.Index || !list[0].CreatedAt.Equal(at) || list[0].Bytes != b.Bytes {
		t.Errorf("ListBackups = %+v, %v; want the backup %+v", list, err, b)
	}
	h, size, err := store.ValidateSnapshotFile(b.Path)
	if err != nil || h.GetIndex() != idx || size != b.Bytes {
		t.Errorf("ValidateSnapshotFile = %v %d %v", h, size, err)
	}
	if hh, err := store.SnapshotFileHeader(b.Path); err != nil || hh.GetIndex() != idx {
		t.Errorf("SnapshotFileHeader = %v, %v", hh, err)
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".tmp-") {
			t.Errorf("temporary file left behind: %s", e.Name())
		}
	}
	f, err := os.Open(b.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	g := state.New(state.Limits{})
	if _, err := g.Restore(f); err != nil {
		t.Fatal(err)
	}
	var jobs []string
	g.Snapshot().Jobs(nil, "", func(j *storev1.JobRecord) bool { jobs = append(jobs, j.GetJob().GetJobId()); return true })
	if strings.Join(jobs, ",") != "a,b" {
		t.Errorf("backup holds jobs %v", jobs)
	}
}
