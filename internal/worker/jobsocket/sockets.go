package jobsocket

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpcreflect"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1/managerv1connect"
	"github.com/norsk-go/norsk-manager/internal/clock"
	"github.com/norsk-go/norsk-manager/internal/runtime"
	"github.com/norsk-go/norsk-manager/internal/worker/ack"
	jsapi "github.com/norsk-go/norsk-manager/pkg/jobsocket"
)

// The job sockets (the worker's Config.JobSocket): one Unix socket per instance, served
// with the JobSocket service (gRPC over cleartext HTTP/2) for as long as the
// worker holds the instance and it has not stopped.
//
// Paths. A Unix socket path is at most 107 bytes, and a data directory
// (a test's temporary one, say) can be longer than that on its own, so the
// sockets live under a short per-worker directory, by default
// os.TempDir()/norsk-js-<12 hex of sha256(abs DataDir)>, the same for every
// run of the worker over that data directory. Each instance has its own
// sub-directory named by 16 hex digits of sha256(jobId NUL role), holding
// job.sock:
//
//	/tmp/norsk-js-3f9c1e2a4b5c/9a8b7c6d5e4f3a2b/job.sock
//
// The process runtime's services are given that path in NORSK_JOB_SOCKET.
// The docker runtime bind-mounts the instance's sub-directory (read-only)
// at /run/norsk in each container and sets NORSK_JOB_SOCKET to
// /run/norsk/job.sock: a container sees its own socket and no other, and a
// socket re-created by a restarted worker appears in the mounted directory.
//
// The per-worker directory is 0700 (only the worker's user, and root, can
// reach the sockets from the host); instance directories are 0755 and
// sockets 0666 so that a container running as another user (the sample
// image runs as nobody) can connect through its mount.
//
// Lifetime. The socket is created before the instance's services are
// created (a start, or the adoption of an instance that runs), closed and
// removed with its directory once the instance has stopped or is forgotten,
// and closed (its file unlinked) when Run ends: the next worker re-creates
// it at the same path, and a job that dials again on EOF finds it. When Run
// ends the docker runtime's instance directories are kept (a container's
// mount holds on to the directory itself, so it must be the same one the
// next worker makes the socket in); the process runtime's are removed, and
// so is the per-worker directory once empty.

// jobSocketDirPrefix names the default per-worker directory.
const jobSocketDirPrefix = "norsk-js-"

// maxSocketPath is the longest Unix socket path Linux accepts.
const maxSocketPath = 107

// jobSocketServerShutdown bounds how long closing a socket waits for its
// streams to end.
const jobSocketServerShutdown = time.Second

// errJobSocketsClosed: the worker is shutting down.
var errJobSocketsClosed = errors.New("the worker is shutting down")

// DefaultDir is the per-worker socket directory for a data directory (see
// the comment above).
func DefaultDir(dataDir string) string {
	abs, err := filepath.Abs(dataDir)
	if err != nil {
		abs = dataDir
	}
	sum := sha256.Sum256([]byte(abs))
	return filepath.Join(os.TempDir(), jobSocketDirPrefix+hex.EncodeToString(sum[:6]))
}

// jobSocketDirOf is the directory of an instance's socket under base.
func jobSocketDirOf(base string, key runtime.Key) string {
	sum := sha256.Sum256([]byte(key.JobID + "\x00" + key.Role))
	return filepath.Join(base, hex.EncodeToString(sum[:8]))
}

// Config configures the job sockets of one worker.
type Config struct {
	// Dir is the per-worker socket directory (DefaultDir when empty; then
	// DataDir is required).
	Dir     string
	DataDir string
	// Mounted: the instances' directories are bind-mounted into their
	// containers (docker runtime) and outlive the worker process.
	Mounted bool
	Log     *slog.Logger
	// NodeID is the node the worker runs (told the job in its hello_ack).
	NodeID func() string
	// Held is the newest report of the instance of key the worker holds,
	// nil when it holds none: a migration command reaches only an
	// instance held, not stopped, under the command's token.
	Held func(key runtime.Key) *managerv1.InstanceReport
	// Applied is told (from a job's stream) that the instance of key,
	// held under token, applied the handover of migrationID: the
	// instance's record keeps it.
	Applied func(key runtime.Key, token uint64, migrationID string)
	// Report sends a handshake report to the Manager (kept while no stream
	// is up); called with the socket's lock held, so it must not block on
	// the sockets.
	Report func(*managerv1.MigrationReport)
	// AttachGrace is how long after its socket opens a job's first attach
	// is waited for by a get_state (DefaultAttachGrace when 0; await.go).
	AttachGrace time.Duration
	// Clock times the grace (clock.Real when nil).
	Clock clock.Clock
}

// Sockets holds the job sockets of a worker's instances. The instance
// actors open and remove them; NodeController commands and the jobs'
// streams reach them through it. Safe for concurrent use.
type Sockets struct {
	cfg  Config
	base string
	log  *slog.Logger
	// mounted: the instances' directories are bind-mounted into their
	// containers (docker runtime) and outlive the worker process.
	mounted bool

	mu     sync.Mutex
	socks  map[runtime.Key]*jobSocket
	closed bool
	wg     sync.WaitGroup // servers, Attach handlers and their receivers
}

// New prepares the per-worker socket directory: created 0700 if absent,
// refused if it is not a directory (a symbolic link included) or belongs to
// another user, or if its sockets' paths would be too long.
func New(cfg Config) (*Sockets, error) {
	base := cfg.Dir
	if base == "" {
		base = DefaultDir(cfg.DataDir)
	}
	base = filepath.Clean(base)
	if n := len(jobSocketDirOf(base, runtime.Key{})) + 1 + len(jsapi.SocketName); n > maxSocketPath {
		return nil, fmt.Errorf("worker: job socket directory %s: its sockets' paths would be %d bytes, longer than a Unix socket path may be (%d); choose a shorter JobSocketDir", base, n, maxSocketPath)
	}
	if err := os.MkdirAll(filepath.Dir(base), 0o755); err != nil {
		return nil, fmt.Errorf("worker: job socket directory: %w", err)
	}
	if err := os.Mkdir(base, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("worker: job socket directory: %w", err)
	}
	fi, err := os.Lstat(base)
	if err != nil {
		return nil, fmt.Errorf("worker: job socket directory: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("worker: job socket directory %s is not a directory (%s)", base, fi.Mode().Type())
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Getuid() {
		return nil, fmt.Errorf("worker: job socket directory %s belongs to uid %d, not to this worker's uid %d", base, st.Uid, os.Getuid())
	}
	if err := os.Chmod(base, 0o700); err != nil {
		return nil, fmt.Errorf("worker: job socket directory: %w", err)
	}
	return &Sockets{cfg: cfg, base: base, log: cfg.Log, mounted: cfg.Mounted, socks: map[runtime.Key]*jobSocket{}}, nil
}

func (m *Sockets) clock() clock.Clock {
	if m.cfg.Clock == nil {
		return clock.Real{}
	}
	return m.cfg.Clock
}

func (m *Sockets) now() time.Time { return m.clock().Now() }

func (m *Sockets) attachGrace() time.Duration {
	if m.cfg.AttachGrace <= 0 {
		return DefaultAttachGrace
	}
	return m.cfg.AttachGrace
}

// Dir and Path are where an instance's socket lives on the host.
func (m *Sockets) Dir(key runtime.Key) string { return jobSocketDirOf(m.base, key) }
func (m *Sockets) Path(key runtime.Key) string {
	return filepath.Join(m.Dir(key), jsapi.SocketName)
}

// Base is the per-worker socket directory.
func (m *Sockets) Base() string { return m.base }

// Has reports whether the instance of key has a socket.
func (m *Sockets) Has(key runtime.Key) bool { return m.find(key) != nil }

// Attached reports whether the job of key has a stream on its socket.
func (m *Sockets) Attached(key runtime.Key) bool {
	s := m.find(key)
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.att != nil
}

// find returns the socket of key, nil when there is none.
func (m *Sockets) find(key runtime.Key) *jobSocket {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.socks[key]
}

// ofJob returns the sockets of every instance of a job.
func (m *Sockets) ofJob(jobID string) []*jobSocket {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*jobSocket
	for k, s := range m.socks {
		if k.JobID == jobID {
			out = append(out, s)
		}
	}
	return out
}

// Open serves the socket of an instance held under info.Token. A socket of
// the key held under the same token is kept as it is (with its sessions and
// migration state); one of another token is closed and made anew. Calls for
// one key come from its actor, one at a time.
func (m *Sockets) Open(key runtime.Key, info Info) error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return errJobSocketsClosed
	}
	old := m.socks[key]
	if old != nil && old.token == info.Token {
		m.mu.Unlock()
		return nil
	}
	delete(m.socks, key)
	m.mu.Unlock()
	if old != nil {
		old.close(true)
	}

	s, err := m.listen(key, info)
	if err != nil {
		return err
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		s.close(false)
		return errJobSocketsClosed
	}
	m.socks[key] = s
	m.wg.Add(1)
	m.mu.Unlock()
	go func() {
		defer m.wg.Done()
		if err := s.srv.Serve(s.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Warn("job socket server ended", "err", err)
		}
	}()
	s.log.Info("job socket open", "path", s.path, "token", info.Token, "migration_id", info.MigrationID, "handover", info.Handover)
	return nil
}

// listen creates the socket of an instance (replacing a stale file a worker
// that died left) and its server.
func (m *Sockets) listen(key runtime.Key, info Info) (*jobSocket, error) {
	dir, path := m.Dir(key), m.Path(key)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("job socket of %s: %w", key, err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, fmt.Errorf("job socket of %s: %w", key, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("job socket of %s: remove a stale socket: %w", key, err)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("job socket of %s: %w", key, err)
	}
	ln.SetUnlinkOnClose(true)
	if err := os.Chmod(path, 0o666); err != nil {
		_ = ln.Close()
		return nil, fmt.Errorf("job socket of %s: %w", key, err)
	}
	s := newJobSocket(m, key, info, dir, path, ln)
	mux := http.NewServeMux()
	mux.Handle(managerv1connect.NewJobSocketHandler(attachHandler{s}))
	reflector := grpcreflect.NewStaticReflector(managerv1connect.JobSocketName)
	mux.Handle(grpcreflect.NewHandlerV1(reflector))
	mux.Handle(grpcreflect.NewHandlerV1Alpha(reflector))
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	s.srv = &http.Server{
		Handler:           mux,
		Protocols:         &p,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	return s, nil
}

// Remove closes the socket of an instance that stopped or was forgotten,
// and deletes its file and directory. Removing an absent socket does
// nothing.
func (m *Sockets) Remove(key runtime.Key) {
	m.mu.Lock()
	s := m.socks[key]
	delete(m.socks, key)
	m.mu.Unlock()
	if s == nil {
		return
	}
	s.close(true)
	s.log.Info("job socket removed", "path", s.path)
}

// CloseAll closes every socket (Run is ending): the files are unlinked,
// the directories kept only for containers' mounts, and every stream ends.
// It returns once every server and stream goroutine has ended; later opens
// are refused.
func (m *Sockets) CloseAll() {
	m.mu.Lock()
	m.closed = true
	socks := m.socks
	m.socks = map[runtime.Key]*jobSocket{}
	m.mu.Unlock()
	for _, s := range socks {
		s.close(!m.mounted)
	}
	m.wg.Wait()
	// Only once empty: a kept instance directory keeps it.
	if err := os.Remove(m.base); err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTEMPTY) && !errors.Is(err, syscall.EEXIST) {
		m.log.Debug("job socket directory left in place", "dir", m.base, "err", err)
	}
}

// close ends the socket's server and streams; with removeDir its directory
// is deleted too (the socket file goes with the listener).
func (s *jobSocket) close(removeDir bool) {
	s.mu.Lock()
	s.closed = true
	s.endHold(ack.Refuse(connect.CodeNotFound, "instance %s has stopped", s.key))
	att := s.att
	s.att = nil
	s.mu.Unlock()
	if att != nil {
		att.cancel(errSocketClosed)
	}
	_ = s.srv.Close() // ends every connection
	_ = s.ln.Close()  // unlinks the file (once), whether Serve ran or not
	if removeDir {
		if err := os.Remove(s.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			s.log.Warn("cannot remove the job socket", "path", s.path, "err", err)
		}
		if err := os.Remove(s.dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
			s.log.Warn("cannot remove the job socket's directory", "dir", s.dir, "err", err)
		}
	}
}
