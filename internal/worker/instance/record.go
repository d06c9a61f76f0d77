package instance

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
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/atomicfile"
	"github.com/norsk-go/norsk-manager/internal/runtime"
)

// recordVersion is the version of the record format; a newer one is refused
// rather than misread.
const recordVersion = 1

// RecordsDir is the directory of the instance records in a worker's
// DataDir.
const RecordsDir = "instances"

// Desired states of an instance record.
const (
	desiredRunning  = "running"
	desiredPrepared = "prepared"
	desiredStopped  = "stopped"
)

// Record is what the worker keeps of an instance on disk, written before the
// worker acts on a command so that a successor finishes what it started.
type Record struct {
	Version int `json:"version"`
	// Start is the last start command (protojson), with the job spec the
	// latest update gave.
	Start json.RawMessage `json:"start"`
	// Runtime is the name of the runtime the instance was made with.
	Runtime string `json:"runtime"`
	// Desired is running, prepared or stopped.
	Desired string `json:"desired"`
	// The stop in progress (Desired == stopped).
	StopReason           string `json:"stopReason,omitempty"`
	StopAdditionalReason string `json:"stopAdditionalReason,omitempty"`
	StopGraceMs          uint32 `json:"stopGraceMs,omitempty"`
	// Restarts is how many times services were restarted since the start.
	Restarts uint32 `json:"restarts,omitempty"`
	// RestartTimes are when each service was restarted (within its policy's
	// window); BackoffMs is each service's last backoff.
	RestartTimes map[string][]time.Time `json:"restartTimes,omitempty"`
	BackoffMs    map[string]int64       `json:"backoffMs,omitempty"`
	// RestartDue holds, per service, when the restart its last exit booked
	// is due: that exit is already counted (RestartTimes, BackoffMs) and
	// the service has not been started again. A successor worker finishes
	// the restart instead of booking the same exit a second time.
	RestartDue map[string]time.Time `json:"restartDue,omitempty"`
	// Stopped marks a tombstone: the instance has stopped and its STOPPED
	// report (Reason, AdditionalReason, ExitCodes) has not been delivered.
	Stopped          bool             `json:"stopped,omitempty"`
	Reason           string           `json:"reason,omitempty"`
	AdditionalReason string           `json:"additionalReason,omitempty"`
	ExitCodes        map[string]int32 `json:"exitCodes,omitempty"`
	// HandoverApplied: the instance was started as the target of a
	// migration (Start.migration_id) and its job has applied the handover;
	// it is no longer told it is a target (internal/worker/jobsocket).
	HandoverApplied bool `json:"handoverApplied,omitempty"`
	// UnlabelledNoted: the Manager was told (a notice in the job's
	// history) that the instance runs on services made before cluster ids,
	// under this record's token; not told again.
	UnlabelledNoted bool      `json:"unlabelledNoted,omitempty"`
	UpdatedAt       time.Time `json:"updatedAt"`

	start *managerv1.StartInstance
}

func newRecord(start *managerv1.StartInstance, runtimeName string) *Record {
	rec := &Record{
		start:   proto.Clone(start).(*managerv1.StartInstance),
		Runtime: runtimeName,
		Desired: desiredRunning,
	}
	if start.GetDeferStart() {
		rec.Desired = desiredPrepared
	}
	return rec
}

func (r *Record) key() runtime.Key {
	return runtime.Key{JobID: r.start.GetJob().GetJobId(), Role: r.start.GetRole()}
}
func (r *Record) token() uint64       { return r.start.GetFencingToken() }
func (r *Record) job() *managerv1.Job { return r.start.GetJob() }
func (r *Record) runtimeRole() string {
	if rr := r.start.GetRuntimeRole(); rr != "" {
		return rr
	}
	return r.start.GetRole()
}

// service returns the spec of one service, nil if the job has none so named.
func (r *Record) service(name string) *managerv1.Service {
	for _, s := range r.job().GetServices() {
		if s.GetName() == name {
			return s
		}
	}
	return nil
}

func reasonName(r managerv1.StoppingReason) string { return r.String() }

func parseReason(s string) managerv1.StoppingReason {
	if v, ok := managerv1.StoppingReason_value[s]; ok {
		return managerv1.StoppingReason(v)
	}
	return managerv1.StoppingReason_STOPPING_REASON_NODE_STOPPED
}

// Records keeps instance records in a directory.
type Records struct {
	dir string
	log *slog.Logger
}

// NewRecords keeps records in dir, logging to log.
func NewRecords(dir string, log *slog.Logger) *Records {
	return &Records{dir: dir, log: log}
}

// Dir is the records' directory.
func (s *Records) Dir() string { return s.dir }

// SetLogger replaces the records' logger; call it before the records are
// used concurrently (the agent does once it knows its node).
func (s *Records) SetLogger(log *slog.Logger) { s.log = log }

// path is <dir>/<job>_<role>_<hash>.json: the parts made file-safe, the hash
// over the exact key so that keys never share a file.
func (s *Records) path(key runtime.Key) string {
	sum := sha256.Sum256([]byte(key.JobID + "\x00" + key.Role))
	return filepath.Join(s.dir, fileSafe(key.JobID)+"_"+fileSafe(key.Role)+"_"+hex.EncodeToString(sum[:4])+".json")
}

func (s *Records) save(rec *Record, now time.Time) error {
	rec.Version = recordVersion
	rec.UpdatedAt = now.UTC()
	start, err := protojson.Marshal(rec.start)
	if err != nil {
		return fmt.Errorf("encode record of %s: %w", rec.key(), err)
	}
	rec.Start = start
	b, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return fmt.Errorf("encode record of %s: %w", rec.key(), err)
	}
	return atomicfile.WriteFile(s.path(rec.key()), append(b, '\n'), 0o600)
}

func (s *Records) delete(key runtime.Key) error {
	err := os.Remove(s.path(key))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("delete record of %s: %w", key, err)
	}
	return nil
}

// DeleteAll removes every record.
func (s *Records) DeleteAll() error {
	paths, err := filepath.Glob(filepath.Join(s.dir, "*.json"))
	if err != nil {
		return err
	}
	var errs []error
	for _, p := range paths {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// putAside renames an unreadable record out of the records' pattern
// (<path>.unreadable-<time>), never deleting it, and returns the new path.
func (s *Records) putAside(path string, now time.Time) (string, error) {
	moved := path + ".unreadable-" + now.UTC().Format("20060102T150405Z")
	if err := os.Rename(path, moved); err != nil {
		return "", fmt.Errorf("put %s aside: %w", path, err)
	}
	return moved, nil
}

// LoadAll reads every record. A file it cannot read (damaged, or written by
// a newer worker) is logged, left in place and returned in unreadable (its
// path): the instance it describes may still run, and must not be taken for
// an orphan (Supervisor.Adopt).
func (s *Records) LoadAll() (recs map[runtime.Key]*Record, unreadable []string, err error) {
	paths, err := filepath.Glob(filepath.Join(s.dir, "*.json"))
	if err != nil {
		return nil, nil, fmt.Errorf("list instance records: %w", err)
	}
	recs = map[runtime.Key]*Record{}
	for _, p := range paths {
		rec, err := loadRecord(p)
		if err != nil {
			s.log.Error("cannot read an instance record; leaving it and its instance alone", "path", p, "err", err)
			unreadable = append(unreadable, p)
			continue
		}
		recs[rec.key()] = rec
	}
	return recs, unreadable, nil
}

func loadRecord(path string) (*Record, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var rec Record
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, err
	}
	if rec.Version > recordVersion {
		return nil, fmt.Errorf("record version %d is newer than this worker's %d", rec.Version, recordVersion)
	}
	rec.start = &managerv1.StartInstance{}
	if err := protojson.Unmarshal(rec.Start, rec.start); err != nil {
		return nil, fmt.Errorf("start command: %w", err)
	}
	if rec.start.GetJob().GetJobId() == "" || rec.start.GetRole() == "" {
		return nil, errors.New("record names no job or role")
	}
	return &rec, nil
}

// fileSafe keeps [A-Za-z0-9.-] of s (at most 64 characters) and turns every
// other character into '_'.
func fileSafe(s string) string {
	var b strings.Builder
	for _, c := range s {
		if b.Len() >= 64 {
			break
		}
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-' {
			b.WriteRune(c)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}
