package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/store/state"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
)

// kvPut is a KvCommit of one key.
func kvPut(key string, value []byte) *storev1.Command {
	return &storev1.Command{
		Time: timestamppb.New(time.Unix(1700000000, 0)),
		Cmd: &storev1.Command_KvCommit{KvCommit: &storev1.KvCommit{Namespace: "ns", Writes: []*managerv1.KvWrite{
			{Key: key, Op: &managerv1.KvWrite_Put{Put: value}},
		}}},
	}
}

// kvValue is a recognisable value of n bytes for key.
func kvValue(key string, n int) []byte {
	return bytes.Repeat([]byte("<"+key+">"), n/(len(key)+2)+1)[:n]
}

func kvGet(s *Store, key string) []byte {
	return s.State().Snapshot().KVGet(nil, "ns", key).GetEntry().GetValue()
}

func openCfg(t *testing.T, cfg Config) (*Store, error) {
	t.Helper()
	if cfg.MemberID == "" {
		cfg.MemberID = "m1"
	}
	if cfg.Logger == nil {
		cfg.Logger = quiet
	}
	// A bound, not an expectation: replaying a 64 MiB log under the race
	// detector on a busy machine takes a while.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	return Open(ctx, cfg)
}

func mustOpen(t *testing.T, cfg Config) *Store {
	t.Helper()
	s, err := openCfg(t, cfg)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return s
}

func segments(t *testing.T, dir string) []string {
	t.Helper()
	segs, err := filepath.Glob(filepath.Join(dir, "wal", "*.wal"))
	if err != nil || len(segs) == 0 {
		t.Fatalf("no raft-wal segments in %s: %v", dir, err)
	}
	slices.Sort(segs)
	return segs
}

// TestCorruptValueInSealedSegmentIsRefusedAtBoot is issue 12's repro of
// item 4: 16 bytes overwritten inside a committed value in a sealed
// raft-wal segment of a stopped member. raft-wal checks a CRC only for the
// last commit of its tail segment, and the altered command still decodes,
// so the member used to boot and serve the altered value. Now the entry
// fails its checksum and the store is unreadable, naming the entry.
func TestCorruptValueInSealedSegmentIsRefusedAtBoot(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := Config{Dir: dir, SegmentSize: 64 << 10, SnapshotThreshold: 1 << 20}
	s := mustOpen(t, cfg)
	var victim uint64
	for i := range 40 {
		key := fmt.Sprintf("key-%02d", i)
		res, err := s.Apply(context.Background(), kvPut(key, kvValue(key, 8<<10)))
		if err != nil {
			t.Fatalf("put %s: %v", key, err)
		}
		if i == 5 {
			victim = res.Index
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	segs := segments(t, dir)
	pattern := []byte("<key-05>")
	patched := false
	for _, p := range segs[:len(segs)-1] { // sealed segments only
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		i := bytes.Index(b, pattern)
		if i < 0 {
			continue
		}
		copy(b[i+4096:], bytes.Repeat([]byte("X"), 16))
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		patched = true
		break
	}
	if !patched {
		t.Fatalf("key-05's value is in no sealed segment (%d segments)", len(segs))
	}

	s2, err := openCfg(t, cfg)
	if err == nil {
		v := kvGet(s2, "key-05")
		_ = s2.Close()
		t.Fatalf("regression: a store whose sealed raft-wal segment was altered opens (key-05 now holds %d X bytes): "+
			"commands carry no checksum, so the altered value is served", bytes.Count(v, []byte("X")))
	}
	if !errors.Is(err, ErrUnreadable) {
		t.Fatalf("open error %v, want ErrUnreadable", err)
	}
	if want := fmt.Sprintf("entry %d", victim); !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "checksum") {
		t.Errorf("open error %q does not name the checksum failure of %s", err, want)
	}
}

// TestEntriesWithoutChecksumStillReplay: a log written before checksums
// existed (commands without Extensions, as an older binary proposes them)
// still replays, beside entries that carry one.
func TestEntriesWithoutChecksumStillReplay(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := Config{Dir: dir, SnapshotThreshold: 1 << 20}
	s := mustOpen(t, cfg)
	for i := range 5 {
		data, err := proto.Marshal(kvPut(fmt.Sprintf("old-%d", i), []byte("legacy")))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.raft.Apply(data, 5*time.Second).Error(); err != nil {
			t.Fatal(err)
		}
	}
	res, err := s.Apply(context.Background(), kvPut("new", []byte("checked")))
	if err != nil {
		t.Fatal(err)
	}
	var l raft.Log
	if err := s.log.GetLog(res.Index, &l); err != nil {
		t.Fatal(err)
	}
	if checked, err := verifyChecksum(&l); !checked || err != nil {
		t.Fatalf("a new entry: checked %v, %v; want a verified checksum (extensions % x)", checked, err, l.Extensions)
	}
	if err := s.log.GetLog(res.Index-1, &l); err != nil || len(l.Extensions) != 0 {
		t.Fatalf("a legacy entry has extensions % x (%v)", l.Extensions, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, cfg)
	defer s.Close()
	for i := range 5 {
		if v := string(kvGet(s, fmt.Sprintf("old-%d", i))); v != "legacy" {
			t.Errorf("old-%d after replay = %q", i, v)
		}
	}
	if v := string(kvGet(s, "new")); v != "checked" {
		t.Errorf("new after replay = %q", v)
	}
}

// TestFSMHaltsOnChecksumMismatch: an entry that fails its checksum stops
// the FSM there: nothing after it applies, no snapshot is taken, and the
// reason names the entry.
func TestFSMHaltsOnChecksumMismatch(t *testing.T) {
	f := newFSM()
	f.haltedCh = make(chan struct{})
	good := func(index uint64, key string) *raft.Log {
		l := commandLog(t, index, kvPut(key, []byte("v")))
		l.Extensions = stampChecksum(l.Data)
		return l
	}
	if r := f.Apply(good(1, "a")).(state.Result); r.Err != nil {
		t.Fatal(r.Err)
	}
	bad := good(2, "b")
	bad.Data[len(bad.Data)-1] ^= 0x01
	r := f.Apply(bad).(state.Result)
	if !apierr.Is(r.Err, apierr.DataLoss) || !strings.Contains(r.Err.Error(), "entry 2") {
		t.Fatalf("damaged entry: %v, want DATA_LOSS naming entry 2", r.Err)
	}
	select {
	case <-f.haltedCh:
	default:
		t.Error("halting did not close haltedCh")
	}
	if r := f.Apply(good(3, "c")).(state.Result); !apierr.Is(r.Err, apierr.DataLoss) {
		t.Errorf("an entry after the halt: %v, want DATA_LOSS", r.Err)
	}
	if f.Apply(&raft.Log{Index: 4, Type: raft.LogNoop}) == nil {
		t.Error("a no-op after the halt was applied")
	}
	if got := f.st.Snapshot().Index(); got != 1 {
		t.Errorf("state index %d after the halt, want 1", got)
	}
	if f.st.Snapshot().KVGet(nil, "ns", "c") != nil {
		t.Error("an entry after the halt was applied")
	}
	if _, err := f.Snapshot(); err == nil {
		t.Error("a halted FSM snapshots")
	}
	// Envelopes: a later version with more fields verifies by its CRC; an
	// unknown magic or a short envelope is damage.
	l := good(5, "d")
	l.Extensions = append(append([]byte{checksumMagic, 2}, l.Extensions[2:]...), 0xAA, 0xBB)
	if checked, err := verifyChecksum(l); !checked || err != nil {
		t.Errorf("a version-2 envelope: %v %v", checked, err)
	}
	for _, ext := range [][]byte{{'X', 1, 0, 0, 0, 0}, {checksumMagic, 1, 0}, {checksumMagic, 0, 0, 0, 0, 0}} {
		l.Extensions = ext
		if _, err := verifyChecksum(l); !errors.Is(err, errChecksum) {
			t.Errorf("envelope % x: %v, want a checksum error", ext, err)
		}
	}
}

// snapshotDirs lists raft's snapshot directories, oldest first.
func snapshotDirs(t *testing.T, dir string) []string {
	t.Helper()
	snaps, err := raft.NewFileSnapshotStoreWithLogger(filepath.Join(dir, "snapshots"), 3, nil)
	if err != nil {
		t.Fatal(err)
	}
	metas, err := snaps.List()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range metas {
		out = append([]string{filepath.Join(dir, "snapshots", "snapshots", m.ID)}, out...)
	}
	return out
}

// TestDamagedRaftSnapshot: raft, on its own, silently falls back to an
// older snapshot when the newest fails its CRC (or skips one whose meta it
// cannot read), and when the log no longer holds the entries after the
// older one, NewRaft panics ("log not found"), which Open reported without
// saying what was damaged. Now the store restores the newest snapshot that
// verifies itself: rebuilt from an older snapshot and the log when the log
// covers the damaged one (which is moved aside, kept), unreadable naming
// the damaged snapshot when it does not.
func TestDamagedRaftSnapshot(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		trailing uint64
		damage   func(t *testing.T, snapDir string)
		readable bool
	}{
		{"state fails its CRC, log covers it", 1 << 20, flipState, true},
		{"meta unreadable, log covers it", 1 << 20, garbleMeta, true},
		{"state fails its CRC, log compacted", 2, flipState, false},
		{"meta unreadable, log compacted", 2, garbleMeta, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			cfg := Config{Dir: dir, SnapshotThreshold: 1 << 20, SnapshotInterval: time.Hour, TrailingLogs: tc.trailing}
			s := mustOpen(t, cfg)
			put := func(from, to int) {
				for i := from; i < to; i++ {
					key := fmt.Sprintf("key-%02d", i)
					if _, err := s.Apply(context.Background(), kvPut(key, []byte(key))); err != nil {
						t.Fatal(err)
					}
				}
			}
			put(0, 10)
			if err := s.TakeSnapshot(); err != nil {
				t.Fatal(err)
			}
			put(10, 20)
			if err := s.TakeSnapshot(); err != nil {
				t.Fatal(err)
			}
			put(20, 25)
			want := s.State().Snapshot().Index()
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			dirs := snapshotDirs(t, dir)
			if len(dirs) != 2 {
				t.Fatalf("%d snapshots, want 2", len(dirs))
			}
			tc.damage(t, dirs[1])

			var s2 *Store
			var err error
			func() {
				defer func() {
					if p := recover(); p != nil {
						err = fmt.Errorf("panic: %v", p)
					}
				}()
				s2, err = openCfg(t, cfg)
			}()
			if !tc.readable {
				if err == nil {
					got := s2.State().Snapshot().Index()
					_ = s2.Close()
					t.Fatalf("regression: the store opened from an older snapshot with the entries after it compacted away "+
						"(state index %d, was %d)", got, want)
				}
				if !errors.Is(err, ErrUnreadable) || !strings.Contains(err.Error(), filepath.Base(dirs[1])) {
					t.Fatalf("open error %v, want ErrUnreadable naming snapshot %s", err, filepath.Base(dirs[1]))
				}
				return
			}
			if err != nil {
				t.Fatalf("open: %v", err)
			}
			defer s2.Close()
			if got := s2.State().Snapshot().Index(); got != want {
				t.Errorf("state index %d, want %d", got, want)
			}
			for i := range 25 {
				key := fmt.Sprintf("key-%02d", i)
				if string(kvGet(s2, key)) != key {
					t.Errorf("%s lost", key)
				}
			}
			if _, err := os.Stat(filepath.Join(dir, "snapshots", "damaged", filepath.Base(dirs[1]))); err != nil {
				t.Errorf("the damaged snapshot was not moved aside: %v", err)
			}
		})
	}
}

func flipState(t *testing.T, snapDir string) {
	t.Helper()
	p := filepath.Join(snapDir, "state.bin")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(b, []byte("key-03"))
	if i < 0 {
		t.Fatal("key-03 not in the snapshot")
	}
	b[i+4] = '7'
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func garbleMeta(t *testing.T, snapDir string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(snapDir, "meta.json"), []byte("{garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
}

// FuzzVerifyChecksum: the envelope is read from disk and from peers: any
// bytes are answered without a panic; an entry with its own stamp verifies;
// and any change of one byte of the command is caught.
func FuzzVerifyChecksum(f *testing.F) {
	f.Add([]byte("a command"), []byte{}, uint16(3), byte(1))
	f.Add([]byte{}, []byte{checksumMagic, 1, 0, 0, 0, 0}, uint16(0), byte(0x80))
	f.Add([]byte{0x0a, 0x06}, []byte{checksumMagic}, uint16(1), byte(0xff))
	f.Fuzz(func(t *testing.T, data, ext []byte, at uint16, flip byte) {
		_, _ = verifyChecksum(&raft.Log{Index: 1, Type: raft.LogCommand, Data: data, Extensions: ext})
		l := &raft.Log{Index: 2, Type: raft.LogCommand, Data: slices.Clone(data), Extensions: stampChecksum(data)}
		if checked, err := verifyChecksum(l); !checked || err != nil {
			t.Fatalf("its own stamp: %v %v", checked, err)
		}
		if len(data) == 0 || flip == 0 {
			return
		}
		l.Data[int(at)%len(data)] ^= flip
		if _, err := verifyChecksum(l); !errors.Is(err, errChecksum) {
			t.Fatalf("a changed byte at %d (^%02x) passed", int(at)%len(data), flip)
		}
	})
}
