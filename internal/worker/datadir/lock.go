package datadir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// lockFile is the name of the data directory's lock file.
const lockFile = "worker.lock"

// InUseError is the error of Lock when another worker process holds the
// data directory: two workers over one directory would both adopt its
// instances and take the node from each other in turns.
type InUseError struct {
	Dir string
	// PID is the process that holds the lock, as it wrote it in the lock
	// file (0 when it cannot be read).
	PID int
}

func (e *InUseError) Error() string {
	holder := "another process"
	if e.PID > 0 {
		holder = "process " + strconv.Itoa(e.PID)
	}
	return fmt.Sprintf("worker: data directory %s is in use by another worker (%s holds %s); one worker per data directory",
		e.Dir, holder, filepath.Join(e.Dir, lockFile))
}

// Lock is an exclusive flock on DataDir/worker.lock, which holds the
// pid of the process that took it. It lasts until release (or until the
// process ends: the kernel drops the lock of a killed process).
type Lock struct{ f *os.File }

// TakeLock takes the data directory's lock without waiting; a directory
// another process (or another Agent of this process) holds is a
// *InUseError naming the holder's pid.
func TakeLock(dir string) (*Lock, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("worker: data directory: %w", err)
	}
	path := filepath.Join(dir, lockFile)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("worker: lock data directory: %w", err)
	}
	if err := flockNB(f); err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, &InUseError{Dir: dir, PID: readLockPID(path)}
		}
		return nil, fmt.Errorf("worker: lock %s: %w", path, err)
	}
	// The holder's pid, for the refusal of a second worker and for dev to
	// find a live worker (LockHolder).
	if err := f.Truncate(0); err == nil {
		_, err = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
		if err == nil {
			err = f.Sync()
		}
		if err != nil {
			_ = f.Close()
			return nil, fmt.Errorf("worker: write %s: %w", path, err)
		}
	} else {
		_ = f.Close()
		return nil, fmt.Errorf("worker: write %s: %w", path, err)
	}
	return &Lock{f: f}, nil
}

// Release drops the lock. The file stays: removing it would let a second
// process lock a new file while a third still waits on the old one.
func (l *Lock) Release() {
	_ = syscall.Flock(int(l.f.Fd()), syscall.LOCK_UN)
	_ = l.f.Close()
}

// flockNB takes an exclusive flock without waiting, retrying on EINTR.
func flockNB(f *os.File) error {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}

// readLockPID reads the pid a lock file holds (0 when it cannot).
func readLockPID(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0
	}
	return pid
}

// LockHolder reports whether a worker holds dataDir's lock now, and the pid
// it wrote there (0 when unknown). It takes the lock for an instant to
// find out, so it may make a worker starting at that very instant fail with
// *InUseError; callers use it before they start one.
func LockHolder(dataDir string) (pid int, held bool, err error) {
	path := filepath.Join(dataDir, lockFile)
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if errors.Is(err, os.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("open %s: %w", path, err)
	}
	defer f.Close()
	switch err := flockNB(f); {
	case err == nil:
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		return 0, false, nil
	case errors.Is(err, syscall.EWOULDBLOCK):
		return readLockPID(path), true, nil
	default:
		return 0, false, fmt.Errorf("lock %s: %w", path, err)
	}
}
