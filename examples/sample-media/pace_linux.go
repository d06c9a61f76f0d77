package main

import (
	"runtime"
	"syscall"
	"time"
	"unsafe"
)

func init() { realtime = sleepRealtime }

// sleepRealtime raises the calling goroutine's thread to SCHED_FIFO at
// priority and sleeps it in the kernel until t; the release lowers it again
// and lets the thread go (one that cannot be lowered stays with this
// goroutine, never reused raised).
func sleepRealtime(priority int, t time.Time) (release func(), err error) {
	runtime.LockOSThread()
	if err := raisePriority(priority); err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	sleepUntil(t)
	return func() {
		if lowerPriority() == nil {
			runtime.UnlockOSThread()
		}
	}, nil
}

const (
	schedOther = 0
	schedFIFO  = 1
)

// setScheduler sets the calling thread's scheduling policy.
func setScheduler(policy, priority int) error {
	param := struct{ priority int32 }{int32(priority)}
	if _, _, e := syscall.RawSyscall(syscall.SYS_SCHED_SETSCHEDULER, 0, uintptr(policy), uintptr(unsafe.Pointer(&param))); e != 0 {
		return e
	}
	return nil
}

// raisePriority makes the calling thread SCHED_FIFO at priority.
func raisePriority(priority int) error { return setScheduler(schedFIFO, priority) }

// lowerPriority makes the calling thread an ordinary one again.
func lowerPriority() error { return setScheduler(schedOther, 0) }

// sleepUntil sleeps the calling thread in the kernel until t.
func sleepUntil(t time.Time) {
	for {
		d := time.Until(t)
		if d <= 0 {
			return
		}
		ts := syscall.NsecToTimespec(d.Nanoseconds())
		_ = syscall.Nanosleep(&ts, nil) // EINTR: go round
	}
}
