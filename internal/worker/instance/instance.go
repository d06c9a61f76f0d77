package instance

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/runtime"
	"github.com/norsk-go/norsk-manager/internal/worker/ack"
)

// Events an instance's actor handles, in the order they were queued.
type (
	event any

	// commandEvent is a command from a Control stream; reply queues its
	// acknowledgement (nil error: carried out).
	commandEvent struct {
		msg   *managerv1.ControllerMessage
		reply func(*ack.Refusal)
	}
	// stopEvent stops whatever the instance holds (node termination);
	// done is closed once it has stopped.
	stopEvent struct {
		reason     managerv1.StoppingReason
		additional string
		done       chan struct{}
	}
	// exitEvent: a service's process or container exited (or its Wait
	// failed, err).
	exitEvent struct {
		service string
		gen     uint64
		code    int
		err     error
	}
	// restartEvent: a service's restart backoff has passed.
	restartEvent struct {
		service string
		gen     uint64
	}
	// deliveredEvent: the STOPPED report of the tombstone with token has
	// been sent on a live stream.
	deliveredEvent struct{ token uint64 }
	// adoptEvent hands the actor a record and the runtime's services of
	// the key, when the worker starts.
	adoptEvent struct {
		rec      *Record
		statuses []runtime.ServiceStatus
	}
	// orphanEvent: the runtime holds services of the key that no record
	// names.
	orphanEvent struct{ statuses []runtime.ServiceStatus }
	// unownedEvent: the runtime holds services of the key whose record
	// could not be read.
	unownedEvent struct{ statuses []runtime.ServiceStatus }
	// fenceEvent: the lease has run out; a lease-protected instance stops
	// (lease.go).
	fenceEvent struct{}
)

// instance is one (job, role) and its actor. The fields below mu are owned
// by the actor goroutine.
type instance struct {
	sup *Supervisor
	key runtime.Key
	log *slog.Logger

	mu    sync.Mutex
	queue []event
	wake  chan struct{}
	// preparing is the Prepare in flight, if any (prepare.go).
	preparing *preparing
	// fenceQueued: a fenceEvent is queued and not yet handled.
	fenceQueued atomic.Bool

	rec       *Record // nil: the worker holds nothing of the key
	phase     managerv1.InstancePhase
	reason    managerv1.StoppingReason
	addl      string
	svcs      map[string]*service
	ports     map[string]*managerv1.ResolvedPortMappings
	exitCodes map[string]int32 // of services that exited by themselves
	gen       uint64
	runCtx    context.Context // waiters and restart timers of this binding
	runCancel context.CancelFunc

	// unowned are services the runtime holds for the key, with rec nil,
	// that an unreadable record may describe: they are left running,
	// untouched and unreported, until a start (which takes them over) or
	// a stop of the key, or the node's termination.
	unowned []runtime.ServiceStatus
}

// service is a service the actor started or adopted.
type service struct {
	gen       uint64
	running   bool
	startedAt time.Time // on the agent's clock
}

func newInstance(s *Supervisor, key runtime.Key) *instance {
	return &instance{
		sup:       s,
		key:       key,
		log:       s.log.With("instance", key.String()),
		wake:      make(chan struct{}, 1),
		svcs:      map[string]*service{},
		ports:     map[string]*managerv1.ResolvedPortMappings{},
		exitCodes: map[string]int32{},
	}
}

func (in *instance) ctx() context.Context { return in.sup.ctx }

// enqueue queues an event for the actor; it never blocks.
func (in *instance) enqueue(ev event) {
	in.mu.Lock()
	in.queue = append(in.queue, ev)
	in.cancelOvertakenPrepare(ev)
	in.mu.Unlock()
	select {
	case in.wake <- struct{}{}:
	default:
	}
}

// next returns the next event; false once Run's context has ended.
func (in *instance) next() (event, bool) {
	ctx := in.ctx()
	for {
		if ctx.Err() != nil {
			return nil, false
		}
		in.mu.Lock()
		if len(in.queue) > 0 {
			ev := in.queue[0]
			in.queue[0] = nil
			in.queue = in.queue[1:]
			in.mu.Unlock()
			return ev, true
		}
		in.mu.Unlock()
		select {
		case <-in.wake:
		case <-ctx.Done():
			return nil, false
		}
	}
}

// run is the actor: it handles events until the instance holds nothing and
// has nothing queued, or Run ends.
func (in *instance) run() {
	defer in.endRun()
	for {
		ev, ok := in.next()
		if !ok {
			return
		}
		in.handle(ev)
		in.sup.setProtected(in.key, in.leaseProtected())
		if in.rec == nil && in.unowned == nil && in.sup.retire(in) {
			return
		}
	}
}

func (in *instance) handle(ev event) {
	switch ev := ev.(type) {
	case commandEvent:
		var err *ack.Refusal
		switch m := ev.msg.GetMsg().(type) {
		case *managerv1.ControllerMessage_Start:
			err = in.start(m.Start)
		case *managerv1.ControllerMessage_StartPrepared:
			err = in.startPrepared(m.StartPrepared)
		case *managerv1.ControllerMessage_Stop:
			err = in.stopCommand(m.Stop)
		case *managerv1.ControllerMessage_Update:
			err = in.update(m.Update)
		}
		if err != nil {
			in.log.Info("command refused", "seq", ev.msg.GetSeq(), "code", err.CodeName(), "err", err.Msg)
		}
		ev.reply(err)
	case stopEvent:
		if in.rec != nil && !in.rec.Stopped {
			in.shutdown(ev.reason, ev.additional, DefaultStopGrace, true)
		}
		if in.rec == nil && in.unowned != nil {
			in.log.Info("stopping the services of an unreadable record: the node is leaving")
			in.removeServices(in.unowned, DefaultStopGrace)
			in.unowned = nil
		}
		close(ev.done)
	case exitEvent:
		in.onExit(ev)
	case restartEvent:
		in.onRestartDue(ev)
	case deliveredEvent:
		in.onDelivered(ev)
	case adoptEvent:
		in.adopt(ev.rec, ev.statuses)
	case orphanEvent:
		in.removeOrphan(ev.statuses)
	case unownedEvent:
		in.keepUnowned(ev.statuses)
	case fenceEvent:
		in.onFence()
	case handoverAppliedEvent:
		in.onHandoverApplied(ev)
	}
}

// resetRun starts a new binding's run: earlier waiters and timers end.
func (in *instance) resetRun() {
	in.endRun()
	in.runCtx, in.runCancel = context.WithCancel(in.ctx())
	in.svcs = map[string]*service{}
	in.ports = map[string]*managerv1.ResolvedPortMappings{}
	in.exitCodes = map[string]int32{}
	in.reason, in.addl = 0, ""
}

// endRun ends the waiters and restart timers of the current run.
func (in *instance) endRun() {
	if in.runCancel != nil {
		in.runCancel()
	}
}

func (in *instance) save(rec *Record) error {
	return in.sup.records.save(rec, in.sup.clock.Now())
}

// report is the instance's current phase as the Manager is told it.
func (in *instance) report() *managerv1.InstanceReport {
	r := &managerv1.InstanceReport{
		JobId:        in.key.JobID,
		Role:         in.key.Role,
		FencingToken: in.rec.token(),
		Phase:        in.phase,
		Restarts:     in.rec.Restarts,
		JobHash:      in.rec.job().GetCurrentHash(),
	}
	switch in.phase {
	case managerv1.InstancePhase_INSTANCE_PHASE_RUNNING:
		r.ServicePortMappings = maps.Clone(in.ports)
	case managerv1.InstancePhase_INSTANCE_PHASE_STOPPING:
		r.Reason, r.AdditionalReason = in.reason, in.addl
	case managerv1.InstancePhase_INSTANCE_PHASE_STOPPED:
		r.Reason, r.AdditionalReason = in.reason, in.addl
		r.ExitCodes = maps.Clone(in.exitCodes)
	}
	return r
}

// publish records and sends the instance's report; a tombstone's is
// delivered once sent.
func (in *instance) publish() {
	var deliver func()
	if in.rec.Stopped {
		token := in.rec.token()
		deliver = func() { in.enqueue(deliveredEvent{token: token}) }
	}
	in.sup.host.Publish(in.key, in.report(), deliver)
}

// forget drops the instance: no record, no report.
func (in *instance) forget() {
	if err := in.sup.records.delete(in.key); err != nil {
		in.log.Error("cannot delete the instance record", "err", err)
	}
	in.rec = nil
	in.phase = managerv1.InstancePhase_INSTANCE_PHASE_UNSPECIFIED
	in.endRun()
	in.closeJobSocket()
	in.sup.host.Unpublish(in.key)
}

func (in *instance) onDelivered(ev deliveredEvent) {
	if in.rec == nil || !in.rec.Stopped || in.rec.token() != ev.token {
		return
	}
	in.log.Debug("STOPPED report delivered; dropping the tombstone")
	in.forget()
}

// prepare creates the instance's services with the worker's environment.
func (in *instance) prepare() error {
	rec := in.rec
	env := map[string]string{
		runtime.EnvJobID:       in.key.JobID,
		runtime.EnvRole:        in.key.Role,
		runtime.EnvRuntimeRole: rec.runtimeRole(),
		runtime.EnvNodeID:      in.sup.nodeID,
		runtime.EnvToken:       strconv.FormatUint(rec.token(), 10),
	}
	if m := rec.start.GetMigrationId(); m != "" {
		env[runtime.EnvMigrationID] = m
	}
	mounts := in.jobSocketSpec(env)
	ctx, done := in.prepareContext(rec.token())
	err := in.sup.rt.Prepare(ctx, runtime.InstanceSpec{
		Key:          in.key,
		NodeID:       in.sup.nodeID,
		Token:        rec.token(),
		RuntimeRole:  rec.runtimeRole(),
		Job:          rec.job(),
		Env:          env,
		Mounts:       mounts,
		PullProgress: in.pullNotices(),
	})
	if done() && err != nil {
		return errOvertaken
	}
	if err == nil {
		in.markJobImagesUsed()
	}
	return err
}

// startAll starts every service in dependsOn order.
func (in *instance) startAll() error {
	order, err := startOrder(in.rec.job())
	if err != nil {
		return err
	}
	for _, name := range order {
		if err := in.startService(name); err != nil {
			return err
		}
	}
	return nil
}

// startService starts (or restarts) one service and waits on it.
func (in *instance) startService(name string) error {
	st, err := in.sup.rt.StartService(in.ctx(), in.key, name)
	if err != nil {
		return fmt.Errorf("start service %s: %w", name, err)
	}
	in.gen++
	in.svcs[name] = &service{gen: in.gen, running: true, startedAt: in.sup.clock.Now()}
	in.ports[name] = &managerv1.ResolvedPortMappings{Mappings: st.Ports}
	in.watch(name, in.gen)
	in.log.Info("service started", "service", name, "token", in.rec.token())
	return nil
}

// watch waits for a service to exit and tells the actor.
func (in *instance) watch(name string, gen uint64) {
	ctx := in.runCtx
	in.sup.host.Go(func() {
		code, err := in.sup.rt.Wait(ctx, in.key, name)
		if ctx.Err() != nil {
			return
		}
		in.enqueue(exitEvent{service: name, gen: gen, code: code, err: err})
	})
}

// drainExits takes the exits already queued and records the codes of the
// services that exited by themselves, before the worker stops the rest.
func (in *instance) drainExits() {
	in.mu.Lock()
	var exits []exitEvent
	keep := make([]event, 0, len(in.queue))
	for _, ev := range in.queue {
		if e, ok := ev.(exitEvent); ok {
			exits = append(exits, e)
		} else {
			keep = append(keep, ev)
		}
	}
	in.queue = keep
	in.mu.Unlock()
	for _, e := range exits {
		if svc := in.svcs[e.service]; svc != nil && svc.gen == e.gen && svc.running && e.err == nil {
			svc.running = false
			in.exitCodes[e.service] = int32(e.code)
		}
	}
}

// shutdown stops the instance: the record says so first (a successor
// finishes the stop), then STOPPING is reported, the services are stopped
// in reverse dependsOn order with grace, the instance is removed from the
// runtime and STOPPED is reported (services an update removed from the job
// that still run are stopped first; see shutdownOrder). With tombstone the record is kept, as a
// tombstone, until the STOPPED report is delivered; without, the STOPPED
// report is sent once and the caller replaces the record.
func (in *instance) shutdown(reason managerv1.StoppingReason, addl string, grace time.Duration, tombstone bool) {
	ctx := in.ctx()
	rec := in.rec
	rec.Desired = desiredStopped
	rec.StopReason, rec.StopAdditionalReason = reasonName(reason), addl
	rec.StopGraceMs = uint32(grace / time.Millisecond)
	if err := in.save(rec); err != nil {
		in.log.Error("cannot record the stop", "err", err)
	}
	in.drainExits()
	in.phase = managerv1.InstancePhase_INSTANCE_PHASE_STOPPING
	in.reason, in.addl = reason, addl
	in.publish()
	in.endRun()
	in.log.Info("stopping instance", "token", rec.token(), "reason", reason, "additional_reason", addl, "grace", grace)

	for _, name := range in.shutdownOrder() {
		if err := in.sup.rt.StopService(ctx, in.key, name, grace); err != nil && !errors.Is(err, runtime.ErrNotFound) {
			if ctx.Err() != nil {
				return // Run ended: the successor finishes the stop
			}
			in.log.Warn("cannot stop a service", "service", name, "err", err)
		}
	}
	if err := in.sup.rt.Remove(ctx, in.key); err != nil {
		if ctx.Err() != nil {
			return
		}
		in.log.Error("cannot remove the instance from the runtime", "err", err)
	}
	in.phase = managerv1.InstancePhase_INSTANCE_PHASE_STOPPED
	in.svcs = map[string]*service{}
	in.ports = map[string]*managerv1.ResolvedPortMappings{}
	in.closeJobSocket()
	if !tombstone {
		in.sup.host.SendReport(in.report())
		return
	}
	rec.Stopped = true
	rec.Reason, rec.AdditionalReason = reasonName(reason), addl
	rec.ExitCodes = maps.Clone(in.exitCodes)
	if err := in.save(rec); err != nil {
		in.log.Error("cannot record the tombstone", "err", err)
	}
	in.log.Info("instance stopped", "token", rec.token(), "exit_codes", in.exitCodes)
	in.publish()
}

// shutdownOrder is the order shutdown stops services in: first the services
// an update removed from the job that still run (nothing in the job depends
// on them any more), then the job's services, dependents first.
func (in *instance) shutdownOrder() []string {
	var removed []string
	for name := range in.svcs {
		if in.rec.service(name) == nil {
			removed = append(removed, name)
		}
	}
	slices.Sort(removed)
	return append(removed, stopOrder(in.rec.job())...)
}

// removeOrphan stops and removes services no record names: they belong to
// nobody.
func (in *instance) removeOrphan(sts []runtime.ServiceStatus) {
	if in.rec != nil {
		return // a command made it ours meanwhile
	}
	in.log.Warn("stopping and removing services that no instance record names", "services", len(sts))
	in.removeServices(sts, DefaultStopGrace)
	in.sup.host.Notify(in.key, maxToken(sts), noticeRemovedOrphan, fmt.Sprintf(
		"stopped and removed services %s (token %d) of this cluster that no instance record of this worker named", serviceNames(sts), maxToken(sts)))
}

// keepUnowned keeps the services of a key whose record could not be read:
// a record the worker cannot parse says nothing about whether its instance
// should run, so they are left running, untouched and unreported. The
// Manager's next start of the key takes them over (the runtime keeps
// services of the same token as they are) and a stop removes them.
func (in *instance) keepUnowned(sts []runtime.ServiceStatus) {
	if in.rec != nil {
		return // a command made it ours meanwhile
	}
	in.unowned = sts
	names := make([]string, 0, len(sts))
	var token uint64
	for _, st := range sts {
		names = append(names, st.Service)
		token = max(token, st.Token)
	}
	in.log.Error("leaving services running untouched: its instance record cannot be read; a start or stop of the instance from the Manager settles them",
		"services", names, "token", token, "record", in.sup.records.path(in.key))
}

// removeServices stops the running services among sts, with grace, and
// removes the key's instance from the runtime.
func (in *instance) removeServices(sts []runtime.ServiceStatus, grace time.Duration) {
	ctx := in.ctx()
	for _, st := range sts {
		if !st.Running {
			continue
		}
		if err := in.sup.rt.StopService(ctx, in.key, st.Service, grace); err != nil && !errors.Is(err, runtime.ErrNotFound) {
			in.log.Warn("cannot stop a service", "service", st.Service, "err", err)
		}
	}
	if err := in.sup.rt.Remove(ctx, in.key); err != nil && ctx.Err() == nil {
		in.log.Error("cannot remove the instance from the runtime", "err", err)
	}
}
