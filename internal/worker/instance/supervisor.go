package instance

import (
	"context"
	"log/slog"
	"sync"
	"time"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/clock"
	"github.com/norsk-go/norsk-manager/internal/runtime"
	"github.com/norsk-go/norsk-manager/internal/worker/ack"
	"github.com/norsk-go/norsk-manager/internal/worker/jobsocket"
)

// DefaultStopGrace is the grace a stop without one gives services.
const DefaultStopGrace = 10 * time.Second

// Supervisor holds the instances and routes events to them. Each instance
// has one goroutine (its actor) that handles its events in order; the
// actor exists while the instance has a record or events to handle.
type Supervisor struct {
	host        Host
	ctx         context.Context // Run's
	rt          runtime.Runtime
	runtimeName string
	clock       clock.Clock
	log         *slog.Logger
	records     *Records
	nodeID      string
	js          *jobsocket.Sockets // nil: no job sockets

	mu     sync.Mutex
	insts  map[runtime.Key]*instance
	closed bool
	// fence is the newest token this worker process has accepted per key,
	// kept after the instance is gone so that a late start of an older
	// binding is still refused.
	fence map[runtime.Key]uint64
	// protected are the instances of lease-protected jobs that have not
	// stopped (lease.go).
	protected map[runtime.Key]bool
}

// noteToken raises the fence of key to token.
func (s *Supervisor) noteToken(key runtime.Key, token uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if token > s.fence[key] {
		s.fence[key] = token
	}
}

// fenceOf is the newest token accepted for key (0: none).
func (s *Supervisor) fenceOf(key runtime.Key) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fence[key]
}

// Host is what the instances need of the worker agent around them.
type Host interface {
	// Go runs fn on a goroutine the agent's Run waits for.
	Go(fn func())
	// Publish makes r the instance's current report and sends it (or keeps
	// it for the next stream); deliver, when set, is called once it has
	// been sent on a live stream. Unpublish forgets the instance's report.
	Publish(key runtime.Key, r *managerv1.InstanceReport, deliver func())
	Unpublish(key runtime.Key)
	// SendReport sends a report that is not the instance's current state
	// (a superseded binding's STOPPING/STOPPED) on the current stream.
	SendReport(r *managerv1.InstanceReport)
	// Notify sends a WorkerNotice for the job's history.
	Notify(key runtime.Key, token uint64, kind, message string)
	// Terminating reports whether the node is being terminated (starts are
	// then refused).
	Terminating() bool
	// Lease says whether the worker's lease has run out at now, why, and
	// when it ends (or ended).
	Lease(now time.Time) (expired bool, why string, ends time.Time)
	// WakeFence tells the fencing loop that the set of lease-protected
	// instances changed.
	WakeFence()
	// ImagesUsed records that the images of refs were used now.
	ImagesUsed(refs []string)
}

// Config configures a Supervisor.
type Config struct {
	Host    Host
	Runtime runtime.Runtime
	// RuntimeName is written into the records of new instances.
	RuntimeName string
	Clock       clock.Clock
	Log         *slog.Logger
	Records     *Records
	NodeID      string
	// JobSockets serves the instances' job sockets; nil: none.
	JobSockets *jobsocket.Sockets
}

// New returns the Supervisor of a worker's Run; ctx is Run's (the
// instances' actors end with it).
func New(ctx context.Context, cfg Config) *Supervisor {
	return &Supervisor{
		host:        cfg.Host,
		ctx:         ctx,
		rt:          cfg.Runtime,
		runtimeName: cfg.RuntimeName,
		clock:       cfg.Clock,
		log:         cfg.Log,
		records:     cfg.Records,
		nodeID:      cfg.NodeID,
		js:          cfg.JobSockets,
		insts:       map[runtime.Key]*instance{},
		fence:       map[runtime.Key]uint64{},
		protected:   map[runtime.Key]bool{},
	}
}

// Command hands a start, start-prepared, stop or update command to the
// instance of key; reply is called once it has been acted on (nil: carried
// out). False once the Supervisor is closed: reply is not called.
func (s *Supervisor) Command(key runtime.Key, msg *managerv1.ControllerMessage, reply func(*ack.Refusal)) bool {
	return s.dispatch(key, commandEvent{msg: msg, reply: reply})
}

// HandoverApplied tells the instance of key, held under token, that its job
// applied the handover of migrationID (kept in its record).
func (s *Supervisor) HandoverApplied(key runtime.Key, token uint64, migrationID string) {
	s.dispatch(key, handoverAppliedEvent{token: token, migrationID: migrationID})
}

// dispatch hands ev to the instance of key, creating its actor if needed.
// False once the Supervisor is closed.
func (s *Supervisor) dispatch(key runtime.Key, ev event) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.instanceLocked(key).enqueue(ev)
	return true
}

// instanceLocked returns the instance of key, starting its actor if there
// is none; s.mu held.
func (s *Supervisor) instanceLocked(key runtime.Key) *instance {
	in := s.insts[key]
	if in == nil {
		in = newInstance(s, key)
		s.insts[key] = in
		s.host.Go(in.run)
	}
	return in
}

// retire removes an instance that holds nothing once its queue is empty;
// true if the actor must end.
func (s *Supervisor) retire(in *instance) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	in.mu.Lock()
	defer in.mu.Unlock()
	if len(in.queue) > 0 || s.insts[in.key] != in {
		return false
	}
	delete(s.insts, in.key)
	return true
}

// Close refuses further dispatches (Run is ending).
func (s *Supervisor) Close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
}

// StopAll stops every instance and waits until they have stopped (or ctx
// ends).
func (s *Supervisor) StopAll(ctx context.Context, reason managerv1.StoppingReason, additional string) {
	s.mu.Lock()
	var dones []chan struct{}
	for _, in := range s.insts {
		done := make(chan struct{})
		in.enqueue(stopEvent{reason: reason, additional: additional, done: done})
		dones = append(dones, done)
	}
	s.mu.Unlock()
	for _, d := range dones {
		select {
		case <-d:
		case <-ctx.Done():
			return
		}
	}
}
