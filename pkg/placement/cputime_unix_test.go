//go:build unix

package placement

import (
	"syscall"
	"time"
)

// processCPU is the CPU time (user and system) the test process has used,
// all its threads together (the garbage collector's included).
func processCPU() time.Duration {
	var u syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &u); err != nil {
		return 0
	}
	return time.Duration(u.Utime.Nano() + u.Stime.Nano())
}
