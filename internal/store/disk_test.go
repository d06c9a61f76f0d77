package store

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	wal "github.com/hashicorp/raft-wal"
	walfs "github.com/hashicorp/raft-wal/fs"
	"github.com/hashicorp/raft-wal/metadb"
	"github.com/hashicorp/raft-wal/types"

	"github.com/norsk-go/norsk-manager/pkg/apierr"
)

// fakeDisk is an in-memory "disk" under fakeWAL: a log that survives
// re-opens, and a switch that makes writes fail as on a full disk.
type fakeDisk struct {
	mu    sync.Mutex
	log   *raft.InmemStore
	full  bool
	free  uint64
	opens int
	// persistFailed: a failing write still reaches the disk (as a write
	// whose fsync failed may).
	persistFailed bool
}

type fakeWAL struct {
	d      *fakeDisk
	closed bool
}

func (w *fakeWAL) StoreLogs(logs []*raft.Log) error {
	w.d.mu.Lock()
	defer w.d.mu.Unlock()
	if w.d.full {
		if w.d.persistFailed {
			_ = w.d.log.StoreLogs(logs)
		}
		return &os.PathError{Op: "write", Path: "/fake/wal/seg.wal", Err: syscall.ENOSPC}
	}
	return w.d.log.StoreLogs(logs)
}
func (w *fakeWAL) StoreLog(l *raft.Log) error         { return w.StoreLogs([]*raft.Log{l}) }
func (w *fakeWAL) FirstIndex() (uint64, error)        { return w.d.log.FirstIndex() }
func (w *fakeWAL) LastIndex() (uint64, error)         { return w.d.log.LastIndex() }
func (w *fakeWAL) GetLog(i uint64, l *raft.Log) error { return w.d.log.GetLog(i, l) }
func (w *fakeWAL) DeleteRange(min, max uint64) error  { return w.d.log.DeleteRange(min, max) }
func (w *fakeWAL) Set(k, v []byte) error              { return w.d.log.Set(k, v) }
func (w *fakeWAL) Get(k []byte) ([]byte, error)       { return w.d.log.Get(k) }
func (w *fakeWAL) SetUint64(k []byte, v uint64) error { return w.d.log.SetUint64(k, v) }
func (w *fakeWAL) GetUint64(k []byte) (uint64, error) { return w.d.log.GetUint64(k) }
func (w *fakeWAL) Close() error                       { w.closed = true; return nil }
func entries(from, to uint64) (out []*raft.Log) {
	for i := from; i <= to; i++ {
		out = append(out, &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: []byte{byte(i)}})
	}
	return out
}

// TestDiskLogReportsFullDiskAndReopens: the log wrapper turns a write that
// fails for lack of space into RESOURCE_EXHAUSTED naming the disk, does not
// try to re-open while the disk is still full, and re-opens the log (once
// space is back) at the next write, dropping a failed write that reached
// the disk after all, so raft's next append follows on.
func TestDiskLogReportsFullDiskAndReopens(t *testing.T) {
	disk := &fakeDisk{log: raft.NewInmemStore(), free: 10 << 30}
	var now atomic.Int64
	now.Store(time.Unix(1700000000, 0).UnixNano())
	first := &fakeWAL{d: disk}
	var current *fakeWAL
	d := &diskLog{dir: "/data/raft/wal", mount: "/data", segment: 64 << 20, need: 80 << 20, log: quiet, cur: first,
		open: func() (walBackend, error) {
			disk.mu.Lock()
			defer disk.mu.Unlock()
			disk.opens++
			current = &fakeWAL{d: disk}
			return current, nil
		},
		free: func() (uint64, error) { disk.mu.Lock(); defer disk.mu.Unlock(); return disk.free, nil },
		now:  func() time.Time { return time.Unix(0, now.Load()) },
	}
	advance := func(dt time.Duration) { now.Add(int64(dt)) }

	if err := d.StoreLogs(entries(1, 3)); err != nil {
		t.Fatal(err)
	}
	disk.mu.Lock()
	disk.full, disk.free, disk.persistFailed = true, 3<<20, true
	disk.mu.Unlock()

	err := d.StoreLogs(entries(4, 5))
	if !apierr.Is(err, apierr.ResourceExhausted) {
		t.Fatalf("a write on a full disk: %v, want RESOURCE_EXHAUSTED", err)
	}
	for _, want := range []string{"/data/raft/wal", "mounted on /data", "3.0 MiB free", "80.0 MiB"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not say %q", err, want)
		}
	}
	if st := d.status(); !apierr.Is(st, apierr.ResourceExhausted) {
		t.Errorf("status %v, want RESOURCE_EXHAUSTED", st)
	}
	// raft retries (an election, an append from its leader) while the disk
	// is still full: refused at once, no re-open attempted.
	for range 3 {
		advance(time.Second)
		if err := d.StoreLogs(entries(4, 5)); !apierr.Is(err, apierr.ResourceExhausted) {
			t.Fatalf("retry on a full disk: %v", err)
		}
	}
	if disk.opens != 0 {
		t.Errorf("%d re-opens while the disk was full", disk.opens)
	}
	// Reads still answer from the wedged log.
	var l raft.Log
	if err := d.GetLog(3, &l); err != nil || l.Index != 3 {
		t.Errorf("read while wedged: %v %v", l, err)
	}

	// Space comes back: the next write re-opens the log, which first drops
	// the entries 4 and 5 that reached the disk although the write failed.
	disk.mu.Lock()
	disk.full, disk.free = false, 10<<30
	disk.mu.Unlock()
	advance(time.Second)
	if err := d.StoreLogs(entries(4, 6)); err != nil {
		t.Fatalf("the write after space came back: %v", err)
	}
	if disk.opens != 1 || !first.closed || current == nil {
		t.Errorf("re-opens %d, first closed %v", disk.opens, first.closed)
	}
	if last, _ := d.LastIndex(); last != 6 {
		t.Errorf("last index %d, want 6", last)
	}
	if err := d.status(); err != nil {
		t.Errorf("status after the re-open: %v", err)
	}
}

// faultVFS is raft-wal's file system with a switch that makes new segment
// files fail to preallocate, as on a full disk.
type faultVFS struct {
	types.VFS
	full atomic.Bool
}

func (v *faultVFS) Create(dir, name string, size uint64) (types.WritableFile, error) {
	if v.full.Load() {
		return nil, &os.PathError{Op: "fallocate", Path: filepath.Join(dir, name), Err: syscall.ENOSPC}
	}
	return v.VFS.Create(dir, name, size)
}

// TestStoreTakesWritesAgainAfterDiskFull is issue 12's repro of item 7 in
// process: the disk fills while the raft log's tail segment is full, so the
// next segment cannot be preallocated. raft-wal then refused every append
// with "segment is sealed" (an INTERNAL error to the caller), the member
// stepped down and looped in elections, and only a restart helped. Now the
// write gets RESOURCE_EXHAUSTED naming the disk, and once space is back the
// store takes writes again by itself, keeping every acknowledged one.
func TestStoreTakesWritesAgainAfterDiskFull(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	vfs := &faultVFS{VFS: walfs.New()}
	var free atomic.Uint64
	free.Store(10 << 30)
	// No early refusal: the log itself must meet the full disk.
	cfg := Config{Dir: dir, SegmentSize: 64 << 10, MinFreeBytes: -1, SnapshotThreshold: 1 << 20, walVFS: vfs,
		freeSpace: func(string) (uint64, error) { return free.Load(), nil }}
	s := mustOpen(t, cfg)
	defer func() { _ = s.Close() }()
	ctx := context.Background()
	var acked []string
	put := func(key string) error {
		_, err := s.Apply(ctx, kvPut(key, kvValue(key, 8<<10)))
		if err == nil {
			acked = append(acked, key)
		}
		return err
	}
	for i := range 3 {
		if err := put(fmt.Sprintf("k%03d", i)); err != nil {
			t.Fatal(err)
		}
	}
	vfs.full.Store(true)
	free.Store(1 << 20)
	var err error
	for i := 3; i < 40 && err == nil; i++ {
		err = put(fmt.Sprintf("k%03d", i))
	}
	if err == nil {
		t.Fatal("40 writes of 8 KiB never filled a 64 KiB segment")
	}
	if !apierr.Is(err, apierr.ResourceExhausted) || !strings.Contains(err.Error(), filepath.Join(dir, "wal")) {
		t.Fatalf("regression: the write that met the full disk got %q (code %v), want RESOURCE_EXHAUSTED naming %s",
			err, apierr.CodeOf(err), filepath.Join(dir, "wal"))
	}
	if d := s.Disk(); !apierr.Is(d.Err, apierr.ResourceExhausted) {
		t.Errorf("Disk() while full: %+v", d)
	}
	if err := put("while-full"); !apierr.Is(err, apierr.ResourceExhausted) {
		t.Errorf("a write while the disk is full: %v, want RESOURCE_EXHAUSTED", err)
	}

	// Space comes back: within seconds, with no restart, writes succeed.
	vfs.full.Store(false)
	free.Store(10 << 30)
	waitFor(t, "a write to succeed after space came back", func() bool { return put("after") == nil })
	for i := range 5 {
		if err := put(fmt.Sprintf("more-%d", i)); err != nil {
			t.Fatalf("write %d after the recovery: %v", i, err)
		}
	}
	if err := s.Disk().Err; err != nil {
		t.Errorf("Disk() after the recovery: %v", err)
	}
	want := s.State().Snapshot().Index()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// Every acknowledged write survives a restart.
	s = mustOpen(t, Config{Dir: dir, SegmentSize: 64 << 10, SnapshotThreshold: 1 << 20})
	if got := s.State().Snapshot().Index(); got != want {
		t.Errorf("index after restart %d, want %d", got, want)
	}
	for _, k := range acked {
		if kvGet(s, k) == nil {
			t.Errorf("acknowledged write %s lost", k)
		}
	}
}

// TestStoreRefusesWritesWhenDiskNearlyFull: below the free space the store
// keeps (a segment and 16 MiB by default) a write is refused before it is
// proposed, with RESOURCE_EXHAUSTED naming the disk, and taken again as
// soon as there is room.
func TestStoreRefusesWritesWhenDiskNearlyFull(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var free atomic.Uint64
	free.Store(10 << 30)
	s := mustOpen(t, Config{Dir: dir, SegmentSize: 1 << 20, freeSpace: func(string) (uint64, error) { return free.Load(), nil }})
	defer s.Close()
	ctx := context.Background()
	if _, err := s.Apply(ctx, kvPut("a", []byte("1"))); err != nil {
		t.Fatal(err)
	}
	before := s.State().Snapshot().Index()
	free.Store(17 << 20) // a segment + 16 MiB is 17 MiB
	free.Store(free.Load() - 1)
	_, err := s.Apply(ctx, kvPut("b", []byte("2")))
	if !apierr.Is(err, apierr.ResourceExhausted) {
		t.Fatalf("a write on a nearly full disk: %v, want RESOURCE_EXHAUSTED", err)
	}
	for _, want := range []string{filepath.Join(dir, "wal"), "mounted on", "17.0 MiB"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not say %q", err, want)
		}
	}
	if got := s.State().Snapshot().Index(); got != before {
		t.Errorf("the refused write moved the index %d → %d", before, got)
	}
	if d := s.Disk(); d.Err == nil || d.Need != 17<<20 || d.Dir != filepath.Join(dir, "wal") {
		t.Errorf("Disk() %+v", d)
	}
	free.Store(17 << 20)
	if _, err := s.Apply(ctx, kvPut("b", []byte("2"))); err != nil {
		t.Fatalf("once there is room: %v", err)
	}
}

// tmpfs mounts a tmpfs of size bytes on a new directory (root only; the
// test skips otherwise) and returns it with a function that resizes it.
func tmpfs(t *testing.T, size string) (string, func(size string)) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a small tmpfs (a filesystem that fills up)")
	}
	dir := filepath.Join(t.TempDir(), "disk")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs here (%v: %s)", err, strings.TrimSpace(string(out)))
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir, func(size string) {
		t.Helper()
		if out, err := exec.Command("mount", "-o", "remount,size="+size, dir).CombinedOutput(); err != nil {
			t.Fatalf("resize the tmpfs: %v: %s", err, out)
		}
	}
}

// TestFullDiskOnASmallFilesystem is item 7's repro on a real 100 MB
// filesystem filled by KvCommit (4 MiB commits, 64 MiB segments): the 18th
// commit used to get `apply: segment is sealed` and the member stayed
// wedged until restarted. Now: RESOURCE_EXHAUSTED naming the filesystem,
// and writes again within seconds of the filesystem growing, no restart.
// With the default reserve the store refuses before its log meets the full
// disk; without it, the log meets it and recovers.
func TestFullDiskOnASmallFilesystem(t *testing.T) {
	for _, tc := range []struct {
		name    string
		minFree int64
	}{
		{"default reserve", 0},
		{"no reserve: the log meets the full disk", -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mnt, resize := tmpfs(t, "100m")
			dir := filepath.Join(mnt, "raft")
			cfg := Config{Dir: dir, MinFreeBytes: tc.minFree, SnapshotThreshold: 1 << 20, SnapshotInterval: time.Hour}
			s := mustOpen(t, cfg)
			defer func() { _ = s.Close() }()
			ctx := context.Background()
			commit := func(n int) error {
				cmd := kvPut("k", nil)
				kv := cmd.GetKvCommit()
				kv.Writes = kv.Writes[:0]
				for j := range 15 { // 15 × 256 KiB: under the 4 MiB a commit may carry
					key := fmt.Sprintf("c%03d-%02d", n, j)
					kv.Writes = append(kv.Writes, kvPut(key, kvValue(key, 256<<10)).GetKvCommit().GetWrites()...)
				}
				_, err := s.Apply(ctx, cmd)
				return err
			}
			var err error
			n := 0
			for ; n < 40 && err == nil; n++ {
				err = commit(n)
			}
			if err == nil {
				t.Fatal("40 commits of 3.75 MiB did not fill a 100 MB filesystem")
			}
			if !apierr.Is(err, apierr.ResourceExhausted) || !strings.Contains(err.Error(), mnt) {
				t.Fatalf("regression: commit #%d on the full filesystem got %q (code %v), want RESOURCE_EXHAUSTED naming %s",
					n, err, apierr.CodeOf(err), mnt)
			}
			t.Logf("commit #%d refused: %v", n, err)
			resize("400m")
			start := time.Now()
			waitFor(t, "a commit to succeed after the filesystem grew", func() bool { return commit(1000) == nil })
			t.Logf("writes resumed %s after the filesystem grew", time.Since(start).Round(time.Millisecond))
			if err := commit(1001); err != nil {
				t.Fatal(err)
			}
			want := s.State().Snapshot().Index()
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s = mustOpen(t, cfg)
			if got := s.State().Snapshot().Index(); got != want {
				t.Errorf("index after restart %d, want %d", got, want)
			}
			if kvGet(s, "c1001-14") == nil {
				t.Error("the last acknowledged commit is lost")
			}
		})
	}
}

// flakyMeta is raft-wal's meta database with a switch that makes its
// writes fail, as on a full disk.
type flakyMeta struct {
	*metadb.BoltMetaDB
	fail atomic.Bool
}

func (m *flakyMeta) CommitState(s types.PersistentState) error {
	if m.fail.Load() {
		return &os.PathError{Op: "write", Path: "wal-meta.db", Err: syscall.ENOSPC}
	}
	return m.BoltMetaDB.CommitState(s)
}

// TestLogFinishesACutShortRotation: when raft-wal seals its tail segment
// but cannot record the seal in its meta database (a full disk, or the
// process dying between the two writes), raft-wal refuses every append
// with "segment is sealed" — after a re-open, and after a restart. The log
// wrapper finishes the rotation (records the seal the file holds) before
// it re-opens, and the log takes appends again, keeping every entry.
func TestLogFinishesACutShortRotation(t *testing.T) {
	dir := t.TempDir()
	m := &flakyMeta{BoltMetaDB: &metadb.BoltMetaDB{}}
	defer m.Close()
	open := func() (walBackend, error) {
		return wal.Open(dir, wal.WithMetaStore(m), wal.WithSegmentSize(16<<10), wal.WithLogger(hclogger(quiet, "raft-wal")))
	}
	w, err := open()
	if err != nil {
		t.Fatal(err)
	}
	var now atomic.Int64
	d := &diskLog{dir: dir, mount: dir, segment: 16 << 10, need: 1, log: quiet, cur: w, open: open,
		repair: func() (bool, error) { return sealRotation(dir, m, quiet) },
		free:   func() (uint64, error) { return 1 << 40, nil },
		now:    func() time.Time { return time.Unix(0, now.Load()) },
	}
	next := uint64(1)
	store := func() error {
		l := &raft.Log{Index: next, Term: 1, Type: raft.LogCommand, Data: make([]byte, 1000)}
		if err := d.StoreLogs([]*raft.Log{l}); err != nil {
			return err
		}
		next++
		return nil
	}
	for range 5 {
		if err := store(); err != nil {
			t.Fatal(err)
		}
	}
	m.fail.Store(true)
	for i := 0; i < 40 && err == nil; i++ {
		err = store()
	}
	if err == nil {
		t.Fatal("40 appends of 1000 bytes did not fill a 16 KiB segment")
	}
	m.fail.Store(false)
	now.Add(int64(time.Second))
	if err := store(); err != nil {
		t.Fatalf("regression: the log stays wedged after its segment rotation was cut short: %v", err)
	}
	for range 20 {
		if err := store(); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	w, err = open()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if first, _ := w.FirstIndex(); first != 1 {
		t.Errorf("first index after a restart %d, want 1", first)
	}
	if last, _ := w.LastIndex(); last != next-1 {
		t.Errorf("last index after a restart %d, want %d", last, next-1)
	}
	var l raft.Log
	for i := uint64(1); i < next; i++ {
		if err := w.GetLog(i, &l); err != nil || l.Index != i {
			t.Fatalf("entry %d after a restart: %v (%d)", i, err, l.Index)
		}
	}
	if err := w.StoreLogs([]*raft.Log{{Index: next, Term: 1, Type: raft.LogCommand, Data: []byte("x")}}); err != nil {
		t.Errorf("an append after a restart: %v", err)
	}
}
