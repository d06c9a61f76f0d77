package instance

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/runtime"
)

// Adopt takes over what an earlier worker process left: every record gets
// an actor that adopts its instance, and runtime services that no record
// names are stopped and removed. The instances' reports are published
// before Adopt returns (so the first hello carries them); the actors then
// adopt, restart or stop in the background.
//
// unreadable are the paths of record files loadAll could not read. The
// services of a key whose record file is one of them are not orphans: they
// are kept running, untouched (keepUnowned). When an unreadable file's name
// matches no key the runtime holds, it cannot be told whose record it is, so
// no services are removed as orphans at all.
func (s *Supervisor) Adopt(ctx context.Context, recs map[runtime.Key]*Record, unreadable []string) error {
	statuses, err := s.rt.List(ctx)
	if err != nil {
		return fmt.Errorf("list the runtime's services: %w", err)
	}
	byKey := map[runtime.Key][]runtime.ServiceStatus{}
	for _, st := range statuses {
		byKey[st.Key] = append(byKey[st.Key], st)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for key, rec := range recs {
		sts := byKey[key]
		delete(byKey, key)
		in := s.instanceLocked(key)
		if rec.token() > s.fence[key] {
			s.fence[key] = rec.token()
		}
		var deliver func()
		if rec.Stopped {
			token := rec.token()
			deliver = func() { in.enqueue(deliveredEvent{token: token}) }
		}
		// Published before the actor gets the record (and may change it
		// and publish again); no stream is up yet to deliver a tombstone.
		s.log.Info("adopting instance", "instance", key.String(), "token", rec.token(), "desired", rec.Desired,
			"tombstone", rec.Stopped, "services", len(sts))
		s.host.Publish(key, initialReport(rec, sts), deliver)
		in.enqueue(adoptEvent{rec: rec, statuses: sts})
	}
	// A record's path follows from its key: an unreadable record whose key
	// runs nothing protects nothing, and is put aside (kept for a person
	// to read) so that it never disables anything again.
	unread := map[string]bool{}
	for _, p := range unreadable {
		unread[p] = true
	}
	running := map[string]bool{}
	for key := range byKey {
		running[s.records.path(key)] = true
	}
	for p := range unread {
		if !running[p] {
			if moved, err := s.records.putAside(p, s.clock.Now()); err != nil {
				s.log.Warn("cannot put an unreadable instance record aside", "path", p, "err", err)
			} else {
				s.log.Warn("an unreadable instance record runs nothing; put aside", "path", p, "moved_to", moved)
			}
		}
	}
	for key, sts := range byKey {
		if !unread[s.records.path(key)] {
			if unlabelled(sts) {
				// Made before cluster ids, and no record names them: they
				// may be another Manager's (a node of the same name on the
				// same engine). Left running, untouched, and said so.
				s.host.Notify(key, maxToken(sts), noticeKeptUnlabelled, fmt.Sprintf(
					"left running, untouched, services %s (token %d) that carry no cluster id and that no instance record of this worker names: "+
						"they were made before cluster ids, by this node or by another Manager's node of the same name; stop them by hand if they are no one's",
					serviceNames(sts), maxToken(sts)))
				continue
			}
			s.instanceLocked(key).enqueue(orphanEvent{statuses: sts})
			continue
		}
		// A start older than what runs is refused before it touches
		// the record or the services.
		for _, st := range sts {
			if st.Token > s.fence[key] {
				s.fence[key] = st.Token
			}
		}
		s.instanceLocked(key).enqueue(unownedEvent{statuses: sts})
	}
	return nil
}

// unlabelled reports whether any of sts carries no cluster id (was made
// before cluster ids, or before the worker learned its cluster's).
func unlabelled(sts []runtime.ServiceStatus) bool {
	for _, st := range sts {
		if st.ClusterID == "" {
			return true
		}
	}
	return false
}

// maxToken is the newest fencing token among sts.
func maxToken(sts []runtime.ServiceStatus) uint64 {
	var t uint64
	for _, st := range sts {
		t = max(t, st.Token)
	}
	return t
}

// serviceNames lists the services of sts, sorted and without repeats.
func serviceNames(sts []runtime.ServiceStatus) string {
	var names []string
	for _, st := range sts {
		if !slices.Contains(names, st.Service) {
			names = append(names, st.Service)
		}
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

// initialReport is what an adopted instance is reported as until its actor
// has looked at it.
func initialReport(rec *Record, sts []runtime.ServiceStatus) *managerv1.InstanceReport {
	r := &managerv1.InstanceReport{
		JobId:        rec.key().JobID,
		Role:         rec.key().Role,
		FencingToken: rec.token(),
		Restarts:     rec.Restarts,
		JobHash:      rec.job().GetCurrentHash(),
	}
	switch {
	case rec.Stopped:
		r.Phase = managerv1.InstancePhase_INSTANCE_PHASE_STOPPED
		r.Reason, r.AdditionalReason = parseReason(rec.Reason), rec.AdditionalReason
		r.ExitCodes = maps.Clone(rec.ExitCodes)
	case rec.Desired == desiredStopped:
		r.Phase = managerv1.InstancePhase_INSTANCE_PHASE_STOPPING
		r.Reason, r.AdditionalReason = parseReason(rec.StopReason), rec.StopAdditionalReason
	case rec.Desired == desiredPrepared:
		r.Phase = managerv1.InstancePhase_INSTANCE_PHASE_PREPARED
	default:
		r.Phase = managerv1.InstancePhase_INSTANCE_PHASE_RUNNING
		r.ServicePortMappings = map[string]*managerv1.ResolvedPortMappings{}
		for _, st := range sts {
			if st.Running && st.Token == rec.token() {
				r.ServicePortMappings[st.Service] = &managerv1.ResolvedPortMappings{Mappings: st.Ports}
			}
		}
	}
	return r
}

// adopt takes over one instance from its record and the runtime's services:
// running services are waited on again (nothing restarted); services that
// exited while no worker watched get their restart policy applied now, but
// an exit whose restart the earlier worker already booked (RestartDue) is
// restarted when due without being counted again; services never started
// are started; a stop in progress is finished.
func (in *instance) adopt(rec *Record, sts []runtime.ServiceStatus) {
	ctx := in.ctx()
	in.rec = rec
	in.resetRun()
	if rec.Stopped {
		in.phase = managerv1.InstancePhase_INSTANCE_PHASE_STOPPED
		in.reason, in.addl = parseReason(rec.Reason), rec.AdditionalReason
		in.exitCodes = maps.Clone(rec.ExitCodes)
		if in.exitCodes == nil {
			in.exitCodes = map[string]int32{}
		}
		if len(sts) > 0 {
			if err := in.sup.rt.Remove(ctx, in.key); err != nil && ctx.Err() == nil {
				in.log.Error("cannot remove what is left of a stopped instance", "err", err)
			}
		}
		return // its report (with delivery) was published by adopt
	}

	mine := map[string]runtime.ServiceStatus{}
	stale := false
	for _, st := range sts {
		if st.Token != rec.token() {
			stale = true
		}
		mine[st.Service] = st
	}
	why := "missing"
	if stale {
		in.log.Warn("the runtime holds services of another binding; recreating the instance", "token", rec.token())
		if err := in.sup.rt.Remove(ctx, in.key); err != nil {
			if ctx.Err() != nil {
				return
			}
			in.log.Error("cannot remove services of another binding", "err", err)
		}
		mine = map[string]runtime.ServiceStatus{}
		why = "of another binding (removed)"
	}

	if rec.Desired == desiredStopped {
		in.phase = managerv1.InstancePhase_INSTANCE_PHASE_STOPPING
		grace := time.Duration(rec.StopGraceMs) * time.Millisecond
		if grace <= 0 {
			grace = DefaultStopGrace
		}
		for name, st := range mine {
			if st.Running && rec.service(name) == nil {
				in.svcs[name] = &service{running: true} // stopped first (shutdownOrder)
			}
		}
		in.log.Info("finishing a stop that was in progress")
		in.shutdown(parseReason(rec.StopReason), rec.StopAdditionalReason, grace, true)
		return
	}

	// The socket again, at the same path: the job redials it.
	in.openJobSocket()
	var missing []string
	for _, svc := range rec.job().GetServices() {
		if _, ok := mine[svc.GetName()]; !ok {
			missing = append(missing, svc.GetName())
		}
	}
	if len(missing) > 0 {
		if err := in.prepare(); err != nil {
			if !errors.Is(err, errOvertaken) { // else the event queued settles it
				in.failAdopt(fmt.Errorf("prepare: %w", err))
			}
			return
		}
		// Nothing asked for this: services the record names went away
		// while no worker watched (removed by hand, or by someone else).
		in.sup.host.Notify(in.key, rec.token(), noticeRecreatedMissing, fmt.Sprintf(
			"services %s were %s when the worker took the instance over (its record says %s); created again",
			strings.Join(missing, ", "), why, rec.Desired))
	}
	in.noteUnlabelled(rec, mine)
	if rec.Desired == desiredPrepared {
		in.phase = managerv1.InstancePhase_INSTANCE_PHASE_PREPARED
		in.publish()
		return
	}

	order, err := startOrder(rec.job())
	if err != nil {
		in.failAdopt(err)
		return
	}
	in.phase = managerv1.InstancePhase_INSTANCE_PHASE_RUNNING
	now := in.sup.clock.Now()
	adopted, restarted, pending := 0, 0, 0
	for _, name := range order {
		st, ok := mine[name]
		switch {
		case ok && st.Running:
			if _, due := rec.RestartDue[name]; due {
				// The earlier worker restarted it and stopped before
				// noting so.
				in.restarted(name)
				if err := in.save(rec); err != nil {
					in.log.Error("cannot record a restart", "err", err)
				}
			}
			in.adoptRunning(name, st, now)
			adopted++
		case ok && !st.StartedAt.IsZero():
			code := st.ExitCode
			in.exitCodes[name] = int32(code)
			due, booked := rec.RestartDue[name]
			if booked {
				// This exit was seen, and its restart counted, by the
				// earlier worker: finish that restart, do not book it again.
				in.log.Info("a service exited and its restart was booked before the worker restarted; restarting it when due",
					"service", name, "exit_code", code, "due", due)
			} else {
				restart, _, why := in.restartDecision(name, code, 0, now)
				if !restart {
					in.log.Warn("a service exited while no worker watched; the instance has failed", "service", name, "exit_code", code, "why", why)
					in.failOnExit(name, code)
					return
				}
				due = now // it has waited long enough unwatched
				in.bookRestart(name, due)
				if err := in.save(rec); err != nil {
					in.log.Error("cannot record a restart", "err", err)
				}
				in.log.Info("a service exited while no worker watched; restarting it", "service", name, "exit_code", code)
			}
			if wait := due.Sub(now); wait > 0 {
				in.gen++
				in.svcs[name] = &service{gen: in.gen, startedAt: now}
				in.scheduleRestart(name, in.gen, wait)
				pending++
				continue
			}
			if err := in.startService(name); err != nil {
				in.failAdopt(err)
				return
			}
			in.restarted(name)
			if err := in.save(rec); err != nil {
				in.log.Error("cannot record a restart", "err", err)
			}
			restarted++
		default:
			if err := in.startService(name); err != nil {
				in.failAdopt(err)
				return
			}
		}
	}
	// Services an update removed from the job run on (updates never stop
	// running services) until they exit; they are waited on so that their
	// exit is let go (onExit) and stopped when the instance stops.
	for name, st := range mine {
		if st.Running && rec.service(name) == nil {
			in.adoptRunning(name, st, now)
			adopted++
		}
	}
	in.log.Info("instance adopted", "token", rec.token(), "adopted_services", adopted, "restarted_services", restarted,
		"restarts_pending", pending)
	in.publish()
}

// noteUnlabelled tells the Manager, once per binding, that the instance
// runs on services made before cluster ids: they carry no cluster id, and
// Docker cannot add a label to a container, so they stay so until the
// instance is next created.
func (in *instance) noteUnlabelled(rec *Record, mine map[string]runtime.ServiceStatus) {
	if rec.UnlabelledNoted {
		return
	}
	var old []runtime.ServiceStatus
	for _, st := range mine {
		if st.ClusterID == "" {
			old = append(old, st)
		}
	}
	if len(old) == 0 {
		return
	}
	in.sup.host.Notify(in.key, rec.token(), noticeAdoptedUnlabelled, fmt.Sprintf(
		"adopted services %s made before cluster ids: they carry no cluster id (a container cannot be re-labelled) and keep running as they are until the instance is next created",
		serviceNames(old)))
	rec.UnlabelledNoted = true
	if err := in.save(rec); err != nil {
		in.log.Error("cannot record that the unlabelled services were noted", "err", err)
	}
}

// adoptRunning takes over a service that runs: it is waited on again, not
// restarted.
func (in *instance) adoptRunning(name string, st runtime.ServiceStatus, now time.Time) {
	in.gen++
	in.svcs[name] = &service{gen: in.gen, running: true, startedAt: now}
	in.ports[name] = &managerv1.ResolvedPortMappings{Mappings: st.Ports}
	in.watch(name, in.gen)
}

func (in *instance) failAdopt(err error) {
	if in.ctx().Err() != nil {
		return
	}
	in.log.Error("cannot take over the instance", "err", err)
	in.shutdown(managerv1.StoppingReason_STOPPING_REASON_JOB_FAILED, err.Error(), DefaultStopGrace, true)
}
