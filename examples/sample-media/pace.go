package main

import (
	"log/slog"
	"runtime"
	"time"
)

// The frames next to a cut are paced precisely (see output): the send loop
// wakes preciseLead before one is due on an ordinary timer, then hands the
// rest of the wait to a pacer, which returns at the due time as exactly as
// the host allows and keeps the thread until the frame is written.
//
// A Go timer's wake-up is late by up to a millisecond on an idle host (the
// runtime sleeps in whole milliseconds) and by the scheduler's latency on a
// busy one, which on a loaded host is tens of milliseconds. Where it may
// (Linux, with CAP_SYS_NICE), the pacer sleeps in the kernel on a thread it
// has raised to real-time priority (SCHED_FIFO, CUTOVER_PRIORITY), which
// the kernel wakes on time whatever else the host runs; otherwise it sleeps
// on a timer until spinLead before the frame and waits the rest awake. The
// first costs nothing but the priority; the second up to spinLead of one
// core per precise frame (four per handover), and it is only as good as
// the scheduler lets a runnable thread keep its core.

// preciseLead is how long before a precise frame the send loop wakes and
// hands the wait to the pacer.
const preciseLead = 50 * time.Millisecond

// spinLead is how long before a precise frame a pacer without real-time
// priority stops sleeping and waits awake.
const spinLead = 5 * time.Millisecond

// defaultCutoverPriority is CUTOVER_PRIORITY's default: the SCHED_FIFO
// priority (1-99) of the precise frames' thread; 0 waits awake instead.
const defaultCutoverPriority = 10

// pacer waits for precise frames. It is used by the send loop alone.
type pacer struct {
	priority int
	log      *slog.Logger
	denied   bool // raising the priority was refused; wait awake from now on
}

func newPacer(priority int, log *slog.Logger) *pacer {
	return &pacer{priority: priority, log: log}
}

// realtime, where the system has it (Linux: pace_linux.go), sleeps the
// calling goroutine's thread until t at real-time priority and returns the
// release that restores it; an error means the priority was refused. Where
// it is nil the pacer always waits awake.
var realtime func(priority int, t time.Time) (release func(), err error)

// await returns at t and returns a release the caller calls once the frame
// is written (the thread is held, at its priority, until then).
func (p *pacer) await(t time.Time) (release func()) {
	if realtime != nil && p.priority > 0 && !p.denied {
		release, err := realtime(p.priority, t)
		if err == nil {
			return release
		}
		p.denied = true
		p.log.Info("cannot pace the frames next to a cut at real-time priority; waiting awake instead",
			"priority", p.priority, "err", err)
	}
	if d := time.Until(t) - spinLead; d > 0 {
		time.Sleep(d)
	}
	for time.Now().Before(t) {
		runtime.Gosched()
	}
	return func() {}
}
