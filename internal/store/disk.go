package store

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/norsk-go/norsk-manager/pkg/apierr"
)

// diskReserve is what the store keeps free beyond one log segment by
// default: room for raft's snapshots, the WAL's meta database and the
// command being written.
const diskReserve = 16 << 20

// diskSpace reports the bytes available to an unprivileged writer on the
// filesystem holding dir (root may use a few more: counting without them
// errs on the safe side).
func diskSpace(dir string) (uint64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, fmt.Errorf("statfs %s: %w", dir, err)
	}
	return uint64(st.Bavail) * uint64(st.Bsize), nil
}

// cachedSpace answers diskSpace from a reading at most maxAge old: Apply
// asks at every write, and a statfs costs a few microseconds.
type cachedSpace struct {
	maxAge time.Duration
	mu     sync.Mutex
	at     time.Time
	dir    string
	free   uint64
}

func (c *cachedSpace) get(dir string) (uint64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	if c.dir == dir && now.Sub(c.at) < c.maxAge {
		return c.free, nil
	}
	free, err := diskSpace(dir)
	if err != nil {
		return 0, err
	}
	c.dir, c.at, c.free = dir, now, free
	return free, nil
}

// mountPoint is the directory where the filesystem holding dir is mounted
// (dir itself when it cannot be told): what an operator looks for in df.
func mountPoint(dir string) string {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return dir
	}
	dev := func(p string) (uint64, bool) {
		fi, err := os.Stat(p)
		if err != nil {
			return 0, false
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return 0, false
		}
		return uint64(st.Dev), true
	}
	d, ok := dev(abs)
	if !ok {
		return abs
	}
	for {
		parent := filepath.Dir(abs)
		if parent == abs {
			return abs
		}
		if pd, ok := dev(parent); !ok || pd != d {
			return abs
		}
		abs = parent
	}
}

// mib formats a byte count for an operator.
func mib(n uint64) string {
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

// DiskStatus is the state of the disk holding a member's store.
type DiskStatus struct {
	// Dir is the store's directory; Mount the mount point of its
	// filesystem.
	Dir, Mount string
	// Free is what the filesystem has free; Need what the store keeps
	// free to take writes (0: no check).
	Free, Need uint64
	// Err is why the store refuses writes because of its disk (RESOURCE_
	// EXHAUSTED: nearly full; or the raft log failed a write and waits to
	// be re-opened); nil when it takes them.
	Err error
}

// diskFullError is the RESOURCE_EXHAUSTED a write gets while the disk
// holding the store has less than need free.
func diskFullError(dir, mount string, free, need, segment uint64) error {
	return apierr.New(apierr.ResourceExhausted,
		"the disk holding the store is full: %s (the filesystem mounted on %s) has %s free, and the store takes writes only while "+
			"at least %s are free (its raft log preallocates each %s segment); free space there or grow the disk: "+
			"writes resume by themselves within seconds", dir, mount, mib(free), mib(need), mib(segment))
}
