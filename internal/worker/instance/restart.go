package instance

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
)

// Restart backoff: the first restart of a service waits backoffMin, each
// further one twice the last, up to backoffMax; a service that ran for
// backoffReset before it exited starts again from backoffMin.
const (
	backoffMin   = 1 * time.Second
	backoffMax   = 30 * time.Second
	backoffReset = 60 * time.Second
)

// What a failed instance's report quotes of the failed service's output.
const (
	failTailLines = 20
	failTailBytes = 2 << 10
)

// nextBackoff is the wait before the next restart of a service whose last
// wait was prev and that ran for ranFor.
func nextBackoff(prev, ranFor time.Duration) time.Duration {
	if prev <= 0 || ranFor >= backoffReset {
		return backoffMin
	}
	return min(2*prev, backoffMax)
}

// restartDecision applies a service's restart policy to its exit. When the
// service is to be restarted it books the restart (restart times, backoff)
// in the record and returns the backoff; otherwise it says why not.
func (in *instance) restartDecision(name string, code int, ranFor time.Duration, now time.Time) (restart bool, delay time.Duration, why string) {
	pol := in.rec.service(name).GetRestart()
	switch pol.GetMode() {
	case managerv1.RestartMode_RESTART_MODE_ALWAYS:
	case managerv1.RestartMode_RESTART_MODE_ON_FAILURE:
		if code == 0 {
			return false, 0, "exited cleanly; restart policy is on-failure"
		}
	default:
		return false, 0, "restart policy is never"
	}
	var times []time.Time
	if count := pol.GetCount(); count > 0 {
		times = in.rec.RestartTimes[name]
		if p := time.Duration(pol.GetPeriodS()) * time.Second; p > 0 {
			kept := times[:0:0]
			for _, t := range times {
				if now.Sub(t) < p {
					kept = append(kept, t)
				}
			}
			times = kept
		}
		if uint32(len(times)) >= count {
			if pol.GetPeriodS() > 0 {
				return false, 0, fmt.Sprintf("restart budget spent: %d restarts within %d s", len(times), pol.GetPeriodS())
			}
			return false, 0, fmt.Sprintf("restart budget spent: %d restarts", len(times))
		}
	}
	if in.rec.BackoffMs == nil {
		in.rec.BackoffMs = map[string]int64{}
	}
	delay = nextBackoff(time.Duration(in.rec.BackoffMs[name])*time.Millisecond, ranFor)
	in.rec.BackoffMs[name] = delay.Milliseconds()
	if pol.GetCount() > 0 {
		if in.rec.RestartTimes == nil {
			in.rec.RestartTimes = map[string][]time.Time{}
		}
		in.rec.RestartTimes[name] = append(times, now)
	}
	return true, delay, ""
}

// onExit handles a service that exited while its instance runs: restart it
// after its backoff, or fail the instance. A service that an update removed
// from the job is neither: it is let go.
func (in *instance) onExit(ev exitEvent) {
	if in.rec == nil || in.rec.Stopped || in.phase != managerv1.InstancePhase_INSTANCE_PHASE_RUNNING {
		return
	}
	svc := in.svcs[ev.service]
	if svc == nil || svc.gen != ev.gen || !svc.running {
		return
	}
	svc.running = false
	delete(in.ports, ev.service)
	code := ev.code
	if ev.err != nil {
		in.log.Warn("lost track of a service", "service", ev.service, "err", ev.err)
		code = -1
	}
	if in.rec.service(ev.service) == nil {
		// An update removed it from the job; it ran on because updates
		// never stop running services. Its end is expected, not a failure,
		// and the job no longer has it to restart.
		in.log.Info("a service an update removed from the job exited; not restarting it", "service", ev.service, "exit_code", code)
		delete(in.svcs, ev.service)
		in.publish()
		return
	}
	in.exitCodes[ev.service] = int32(code)
	now := in.sup.clock.Now()
	restart, delay, why := in.restartDecision(ev.service, code, now.Sub(svc.startedAt), now)
	if !restart {
		in.log.Warn("service exited; the instance has failed", "service", ev.service, "exit_code", code, "why", why)
		in.failOnExit(ev.service, code)
		return
	}
	in.bookRestart(ev.service, now.Add(delay))
	if err := in.save(in.rec); err != nil {
		in.log.Error("cannot record a restart", "err", err)
	}
	in.log.Info("service exited; restarting it after a backoff", "service", ev.service, "exit_code", code, "backoff", delay)
	in.scheduleRestart(ev.service, svc.gen, delay)
}

// bookRestart notes in the record (the caller saves it) that a restart of
// the service, already counted by restartDecision, is due at due.
func (in *instance) bookRestart(name string, due time.Time) {
	if in.rec.RestartDue == nil {
		in.rec.RestartDue = map[string]time.Time{}
	}
	in.rec.RestartDue[name] = due
}

// restarted notes in the record (the caller saves it) that the booked
// restart of the service has happened.
func (in *instance) restarted(name string) {
	in.rec.Restarts++
	delete(in.rec.RestartDue, name)
}

// scheduleRestart tells the actor when a service's backoff has passed. The
// timer is made here, on the actor, so that a fake clock sees it at once.
func (in *instance) scheduleRestart(name string, gen uint64, delay time.Duration) {
	ctx := in.runCtx
	t := in.sup.clock.NewTimer(delay)
	in.sup.host.Go(func() {
		select {
		case <-t.C():
			in.enqueue(restartEvent{service: name, gen: gen})
		case <-ctx.Done():
			t.Stop()
		}
	})
}

// onRestartDue restarts a service whose backoff has passed.
func (in *instance) onRestartDue(ev restartEvent) {
	if in.rec == nil || in.rec.Stopped || in.phase != managerv1.InstancePhase_INSTANCE_PHASE_RUNNING {
		return
	}
	svc := in.svcs[ev.service]
	if svc == nil || svc.gen != ev.gen || svc.running {
		return
	}
	if in.rec.service(ev.service) == nil {
		// An update removed it from the job during the backoff.
		in.log.Info("not restarting a service an update removed from the job", "service", ev.service)
		delete(in.svcs, ev.service)
		delete(in.rec.RestartDue, ev.service)
		if err := in.save(in.rec); err != nil {
			in.log.Error("cannot record a dropped restart", "err", err)
		}
		return
	}
	// Started before the restart is noted: a worker that stops in between
	// leaves the service running with its restart still due, which adoption
	// notes then (adopt).
	if err := in.startService(ev.service); err != nil {
		if in.ctx().Err() != nil {
			return
		}
		in.shutdown(managerv1.StoppingReason_STOPPING_REASON_JOB_FAILED,
			fmt.Sprintf("service %s could not be restarted: %v", ev.service, err), DefaultStopGrace, true)
		return
	}
	in.restarted(ev.service)
	if err := in.save(in.rec); err != nil {
		in.log.Error("cannot record a restart", "err", err)
	}
	in.publish()
}

// failOnExit fails the instance because a service exited and may not be
// restarted: the reason quotes the exit code and the service's last output.
func (in *instance) failOnExit(name string, code int) {
	out, err := in.sup.rt.Logs(in.ctx(), in.key, name, failTailLines)
	if err != nil {
		out = "(unavailable: " + err.Error() + ")"
	}
	addl := fmt.Sprintf("service %s exited with code %d; last output: %s", name, code, lastBytes(strings.TrimRight(out, "\n"), failTailBytes))
	in.shutdown(managerv1.StoppingReason_STOPPING_REASON_JOB_FAILED, addl, DefaultStopGrace, true)
}

// lastBytes returns at most n bytes from the end of s, starting at a rune.
func lastBytes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[len(s)-n:]
	for len(s) > 0 && !utf8.RuneStart(s[0]) {
		s = s[1:]
	}
	return s
}
