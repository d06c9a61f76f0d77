package process

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/norsk-go/norsk-manager/internal/atomicfile"
	"github.com/norsk-go/norsk-manager/internal/runtime"
)

// stateVersion is the version of the state file format; a file with a
// newer one is refused rather than misread.
const stateVersion = 1

// serviceState is the JSON state file of one service: <service>.json in the
// instance directory.
type serviceState struct {
	Version int    `json:"version"`
	NodeID  string `json:"node_id"`
	// ClusterID is the cluster of the worker that prepared the service
	// ("" when made before cluster ids).
	ClusterID   string `json:"cluster_id,omitempty"`
	JobID       string `json:"job_id"`
	Role        string `json:"role"`
	Service     string `json:"service"`
	Token       uint64 `json:"token"`
	RuntimeRole string `json:"runtime_role"`
	// Spec is the service's specification (protojson), for operators.
	Spec json.RawMessage `json:"spec"`
	// Argv, Env and WorkDir are what StartService runs: resolved at Prepare.
	// Env is without the worker's PATH and HOME, which are added at start.
	Argv    []string        `json:"argv"`
	Env     []string        `json:"env"`
	WorkDir string          `json:"work_dir"`
	Ports   []allocatedPort `json:"ports,omitempty"`
	// PreparedAt is when Prepare wrote the file.
	PreparedAt time.Time `json:"prepared_at"`
	// Process is the last process started for the service.
	Process *processState `json:"process,omitempty"`
}

// allocatedPort is a port mapping with the host port Prepare chose.
type allocatedPort struct {
	ContainerPort uint32 `json:"container_port"`
	HostPort      uint32 `json:"host_port"`
	Protocol      string `json:"protocol"` // "tcp" or "udp"
	HostAddress   string `json:"host_address,omitempty"`
}

// processState identifies a started process and, once known, how it ended.
type processState struct {
	PID int `json:"pid"`
	// StartTicks is field 22 of /proc/<pid>/stat: the process start time
	// in clock ticks after boot. With PID it tells the process apart from
	// a later one that reuses the pid.
	StartTicks uint64    `json:"start_ticks"`
	StartedAt  time.Time `json:"started_at"`
	// ExitCode is set by the runtime that reaped the process.
	ExitCode *int      `json:"exit_code,omitempty"`
	ExitedAt time.Time `json:"exited_at,omitzero"`
}

// instanceDir is the directory of an instance: <Dir>/instances/<job>-<role>-<hash>,
// the parts sanitised and the hash over the exact key so that keys never
// share a directory.
func (r *Runtime) instanceDir(key runtime.Key) string {
	sum := sha256.Sum256([]byte(key.JobID + "\x00" + key.Role))
	name := fileSafe(key.JobID) + "-" + fileSafe(key.Role) + "-" + hex.EncodeToString(sum[:4])
	return filepath.Join(r.dir, "instances", name)
}

// jobVolumesDir is the directory that holds a job's named volumes.
func (r *Runtime) jobVolumesDir(jobID string) string {
	sum := sha256.Sum256([]byte(jobID))
	return filepath.Join(r.dir, "volumes", fileSafe(jobID)+"-"+hex.EncodeToString(sum[:4]))
}

func (r *Runtime) statePath(key runtime.Key, service string) string {
	return filepath.Join(r.instanceDir(key), service+".json")
}

// fileSafe keeps [A-Za-z0-9._-] of s (at most 64 characters) and turns every
// other character into '_'.
func fileSafe(s string) string {
	var b strings.Builder
	for _, c := range s {
		if b.Len() >= 64 {
			break
		}
		if safeRune(c) {
			b.WriteRune(c)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}

func safeRune(c rune) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
}

// validName reports whether s can name a service or volume file: 1–128
// characters of [A-Za-z0-9._-], not starting with '.'.
func validName(s string) bool {
	if s == "" || len(s) > 128 || s[0] == '.' {
		return false
	}
	for _, c := range s {
		if !safeRune(c) {
			return false
		}
	}
	return true
}

// lockInstance takes the instance's flock, creating the directory when
// create is set. Without create, a missing instance is fs.ErrNotExist.
func (r *Runtime) lockInstance(key runtime.Key, create bool) (unlock func(), err error) {
	dir := r.instanceDir(key)
	if create {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
	}
	flags := os.O_RDWR
	if create {
		flags |= os.O_CREATE
	}
	return flockFile(filepath.Join(dir, ".lock"), flags, 0o644)
}

// flockFile opens path (flags, perm) and takes its exclusive flock,
// waiting for it; unlock releases it and closes the file. An error opening
// the file is returned as it is (fs.ErrNotExist without O_CREATE).
func flockFile(path string, flags int, perm os.FileMode) (unlock func(), err error) {
	f, err := os.OpenFile(path, flags, perm)
	if err != nil {
		return nil, err
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		_ = f.Close()
	}, nil
}

// loadState reads a state file. A missing file is fs.ErrNotExist.
func loadState(path string) (*serviceState, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var st serviceState
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("state file %s: %w", path, err)
	}
	if st.Version > stateVersion {
		return nil, fmt.Errorf("state file %s: version %d is newer than this worker's %d", path, st.Version, stateVersion)
	}
	return &st, nil
}

// saveState writes a state file atomically: a temp file in the same
// directory, fsync, rename over the old file, fsync of the directory.
func saveState(path string, st *serviceState) error {
	st.Version = stateVersion
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return fmt.Errorf("encode state %s: %w", path, err)
	}
	return atomicfile.WriteFile(path, append(b, '\n'), 0o600)
}

// instanceStates reads the state files of one instance (without locking:
// every file is replaced atomically). A missing instance has none.
func (r *Runtime) instanceStates(key runtime.Key) ([]*serviceState, error) {
	paths, err := filepath.Glob(filepath.Join(r.instanceDir(key), "*.json"))
	if err != nil {
		return nil, err
	}
	var out []*serviceState
	for _, p := range paths {
		st, err := loadState(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if st.JobID == key.JobID && st.Role == key.Role {
			out = append(out, st)
		}
	}
	return out, nil
}

// foreign returns the first of states this runtime does not own (another
// node's or another cluster's), or nil.
func (r *Runtime) foreign(states []*serviceState) *serviceState {
	for _, st := range states {
		if !r.mine(st) {
			return st
		}
	}
	return nil
}

// allStates reads every state file under the directory, of every node.
func (r *Runtime) allStates() ([]*serviceState, error) {
	return statesUnder(r.dir, r.log)
}

// statesUnder reads every state file under a runtime directory dir, of every
// node; unreadable ones are logged and skipped.
func statesUnder(dir string, log *slog.Logger) ([]*serviceState, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "instances", "*", "*.json"))
	if err != nil {
		return nil, err
	}
	var out []*serviceState
	for _, p := range paths {
		st, err := loadState(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue // removed since the glob
		}
		if err != nil {
			log.Warn("skipping unreadable state file", "path", p, "err", err)
			continue
		}
		out = append(out, st)
	}
	return out, nil
}
