package store

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/raft"
	wal "github.com/hashicorp/raft-wal"

	"github.com/norsk-go/norsk-manager/pkg/apierr"
)

// walBackend is the log the store keeps on disk: raft-wal's WAL, which is
// raft's log and stable store in one (an interface so that tests can put
// failures under it).
type walBackend interface {
	raft.LogStore
	raft.StableStore
	Close() error
}

var (
	_ walBackend             = (*wal.WAL)(nil)
	_ raft.LogStore          = (*diskLog)(nil)
	_ raft.StableStore       = (*diskLog)(nil)
	_ raft.MonotonicLogStore = (*diskLog)(nil)
)

// reopenEvery spaces the attempts to re-open a log that failed a write
// (raft retries a write at each election, or each append from its leader).
const reopenEvery = 200 * time.Millisecond

// diskLog is raft's log and stable store: raft-wal's WAL, re-opened in
// place when a write fails, so that a member whose disk filled up takes
// writes again by itself once space comes back.
//
// raft-wal v0.4.0 does not survive a failed write: an append that fails
// leaves its in-memory index ahead of the file (every later append is
// refused as "non-monotonic"), and a new segment that cannot be created
// (its 64 MiB preallocation meets a full disk) leaves the tail sealed
// (every later append is refused with "segment is sealed"). Only opening
// the WAL again recovers it: that reads the files back, drops whatever was
// not committed, and creates a missing tail segment (a rotation whose meta
// write failed is finished first: sealRotation). raft, meanwhile,
// answers each refused append by stepping down (a leader) or by refusing
// its leader's entries (a follower), and retries; diskLog re-opens the WAL
// at the first retry that finds enough free space, and says why a write
// failed (RESOURCE_EXHAUSTED naming the disk) instead of passing raft-wal's
// words on.
//
// Reads go to the WAL in use, even a wedged one (its committed entries
// read fine), so raft's replication and apply never see a closed log.
type diskLog struct {
	// dir is the WAL's directory, mount the mount point of its filesystem.
	dir, mount string
	// segment is the size of one log segment (preallocated when it is
	// created); need the free space a re-open after a full disk waits for.
	segment, need uint64
	open          func() (walBackend, error)
	// repair, if set, finishes a segment rotation raft-wal left half done
	// (sealRotation) before a re-open after "segment is sealed".
	repair func() (bool, error)
	free   func() (uint64, error)
	now    func() time.Time
	log    *slog.Logger
	// hook, if set, sees each batch of entries before it is stored (tests
	// alter entries with it).
	hook func([]*raft.Log)
	// gate, if set, learns of each command before it is written
	// (commitGate).
	gate *commitGate

	// mu guards cur: readers share it, a re-open swaps it.
	mu  sync.RWMutex
	cur walBackend

	// wmu serialises writes (StoreLogs, DeleteRange), re-opens and Close;
	// broken and lastTry are its.
	wmu     sync.Mutex
	broken  *walFailure
	lastTry time.Time
	closed  bool

	// failed mirrors broken for status readers.
	failed atomic.Pointer[walFailure]
}

// walFailure is a write that wedged the WAL.
type walFailure struct {
	err error
	// last is the log's last index before the write: what raft knows
	// stored.
	last uint64
	// full: the failure was (or may have been) for lack of space.
	full bool
	at   time.Time
}

// isSpaceErr reports whether err means the disk (or quota) is full, or is
// raft-wal's answer after it could not start a new segment.
func isSpaceErr(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) || errors.Is(err, wal.ErrSealed)
}

// classify is the error a write gets while the WAL waits to be re-opened.
func (d *diskLog) classify(f *walFailure) error {
	if f.full {
		if free, err := d.free(); err == nil && free < d.need {
			return diskFullError(d.dir, d.mount, free, d.need, d.segment)
		}
	}
	return apierr.Unavailablef("the raft log in %s failed a write (%v); it is re-opened at the next write", d.dir, f.err)
}

// status is nil while the log takes writes, else why it does not.
func (d *diskLog) status() error {
	if f := d.failed.Load(); f != nil {
		return d.classify(f)
	}
	return nil
}

// StoreLogs stores entries; a WAL wedged by an earlier failure is re-opened
// first (when the disk has room again).
func (d *diskLog) StoreLogs(logs []*raft.Log) error {
	if len(logs) == 0 {
		return nil
	}
	d.wmu.Lock()
	defer d.wmu.Unlock()
	if d.closed {
		return wal.ErrClosed
	}
	if d.broken != nil {
		if err := d.reopenLocked(); err != nil {
			return err
		}
	}
	if d.hook != nil {
		d.hook(logs)
	}
	if d.gate != nil {
		for i := len(logs) - 1; i >= 0; i-- {
			if logs[i].Type == raft.LogCommand {
				d.gate.wrote(logs[i].Index)
				break
			}
		}
	}
	// Only a holder of wmu changes cur.
	tr := traceLogWrite(logs)
	err := d.cur.StoreLogs(logs)
	tr.done()
	if err == nil {
		return nil
	}
	last, lerr := d.cur.LastIndex()
	if lerr != nil {
		last = logs[0].Index - 1
	}
	f := &walFailure{err: err, last: last, full: isSpaceErr(err), at: d.now()}
	d.broken, d.lastTry = f, f.at
	d.failed.Store(f)
	d.log.Error("the raft log failed a write; it is re-opened at the next write once the disk allows", "dir", d.dir,
		"err", err, "disk_full", f.full, "entries", len(logs), "first_index", logs[0].Index)
	return d.classify(f)
}

// StoreLog stores one entry.
func (d *diskLog) StoreLog(l *raft.Log) error { return d.StoreLogs([]*raft.Log{l}) }

// reopenLocked opens the WAL again in place of a wedged one. The caller
// holds wmu.
func (d *diskLog) reopenLocked() error {
	f := d.broken
	now := d.now()
	if now.Sub(d.lastTry) < reopenEvery {
		return d.classify(f)
	}
	d.lastTry = now
	if f.full {
		// Opening needs room for a new tail segment; without it the
		// attempt would only leave a half-allocated file behind.
		if free, err := d.free(); err == nil && free < d.need {
			return diskFullError(d.dir, d.mount, free, d.need, d.segment)
		}
	}
	if f.full {
		d.dropEmptyTail()
	}
	if errors.Is(f.err, wal.ErrSealed) && d.repair != nil {
		if _, err := d.repair(); err != nil {
			d.log.Warn("the raft log's last segment rotation cannot be finished yet", "dir", d.dir, "err", err)
		}
	}
	nw, err := d.open()
	if err != nil {
		d.log.Warn("the raft log does not re-open yet", "dir", d.dir, "err", err)
		if isSpaceErr(err) && !f.full {
			f = &walFailure{err: f.err, last: f.last, full: true, at: f.at}
			d.broken = f
			d.failed.Store(f)
		}
		return d.classify(f)
	}
	last, err := nw.LastIndex()
	switch {
	case err != nil:
	case last > f.last:
		// The failed write reached the disk after all; raft never counted
		// it (and answered its callers with an error): drop it.
		err = nw.DeleteRange(f.last+1, last)
	case last < f.last && last != 0:
		err = fmt.Errorf("the re-opened log ends at index %d, before index %d that raft has stored", last, f.last)
	}
	if err != nil {
		_ = nw.Close()
		d.log.Error("the raft log re-opened inconsistent; keeping it closed", "dir", d.dir, "err", err)
		return apierr.Unavailablef("the raft log in %s failed a write (%v) and re-opening it failed: %v", d.dir, f.err, err)
	}
	d.mu.Lock()
	old := d.cur
	d.cur = nw
	d.mu.Unlock()
	if err := old.Close(); err != nil {
		d.log.Warn("closing the wedged raft log", "dir", d.dir, "err", err)
	}
	d.broken = nil
	d.failed.Store(nil)
	d.log.Info("the raft log is re-opened and takes writes again", "dir", d.dir, "last_index", f.last,
		"wedged_for", now.Sub(f.at).Round(time.Millisecond).String())
	return nil
}

// dropEmptyTail removes the newest segment file when nothing was ever
// committed to it (its header, written with the first commit, is still
// zeros): the remains of a segment whose preallocation met a full disk. The
// re-open then creates it again, preallocated, instead of appending to a
// file that has no space reserved.
func (d *diskLog) dropEmptyTail() {
	segs, err := filepath.Glob(filepath.Join(d.dir, "*.wal"))
	if err != nil || len(segs) == 0 {
		return
	}
	slices.Sort(segs) // raft-wal names them by base index, then id
	tail := segs[len(segs)-1]
	f, err := os.Open(tail)
	if err != nil {
		return
	}
	hdr := make([]byte, 32)
	n, _ := io.ReadFull(f, hdr)
	_ = f.Close()
	for _, b := range hdr[:n] {
		if b != 0 {
			return
		}
	}
	if err := os.Remove(tail); err == nil {
		d.log.Info("removed a raft-log segment that was never written (its preallocation failed); the re-open creates it again", "file", tail)
	}
}

// DeleteRange deletes entries min..max (a prefix or a suffix of the log).
func (d *diskLog) DeleteRange(min, max uint64) error {
	d.wmu.Lock()
	defer d.wmu.Unlock()
	if d.closed {
		return wal.ErrClosed
	}
	if err := d.cur.DeleteRange(min, max); err != nil {
		return err
	}
	if d.gate != nil {
		d.gate.dropped(min, max)
	}
	return nil
}

func (d *diskLog) reader() (walBackend, func()) {
	d.mu.RLock()
	return d.cur, d.mu.RUnlock
}

// FirstIndex is the log's first index (0: empty).
func (d *diskLog) FirstIndex() (uint64, error) {
	c, done := d.reader()
	defer done()
	return c.FirstIndex()
}

// LastIndex is the log's last index (0: empty).
func (d *diskLog) LastIndex() (uint64, error) {
	c, done := d.reader()
	defer done()
	return c.LastIndex()
}

// GetLog reads the entry at index.
func (d *diskLog) GetLog(index uint64, l *raft.Log) error {
	c, done := d.reader()
	defer done()
	return c.GetLog(index, l)
}

// IsMonotonic: the WAL takes only consecutive indexes (raft then removes
// the whole log after restoring a snapshot instead of leaving a gap).
func (d *diskLog) IsMonotonic() bool { return true }

// Set stores a stable value (raft's term and vote).
func (d *diskLog) Set(key, val []byte) error {
	c, done := d.reader()
	defer done()
	return c.Set(key, val)
}

// Get reads a stable value.
func (d *diskLog) Get(key []byte) ([]byte, error) {
	c, done := d.reader()
	defer done()
	return c.Get(key)
}

// SetUint64 stores a stable number.
func (d *diskLog) SetUint64(key []byte, val uint64) error {
	c, done := d.reader()
	defer done()
	return c.SetUint64(key, val)
}

// GetUint64 reads a stable number.
func (d *diskLog) GetUint64(key []byte) (uint64, error) {
	c, done := d.reader()
	defer done()
	return c.GetUint64(key)
}

// Close closes the WAL in use. The store closes the meta database itself.
func (d *diskLog) Close() error {
	d.wmu.Lock()
	defer d.wmu.Unlock()
	if d.closed {
		return nil
	}
	d.closed = true
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.cur.Close()
}
