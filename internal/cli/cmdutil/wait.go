package cmdutil

import (
	"time"

	"github.com/spf13/cobra"
)

// WaitFlags are how every long operation is followed, the same on every
// command: it waits by default (--wait), --no-wait returns as soon as the
// Manager has accepted it, and --wait-timeout bounds the wait (the
// operation itself goes on).
type WaitFlags struct {
	wait, noWait bool
	Timeout      time.Duration
}

// Add registers --wait, --no-wait and --wait-timeout; what completes "follow
// … until".
func (w *WaitFlags) Add(cmd *cobra.Command, what string, timeout time.Duration) {
	w.AddDefault(cmd, what, timeout, true)
}

// AddDefault is add for a command that does not wait unless asked: one
// that declares what should be (bundle create, as kubectl apply) rather
// than performs an operation.
func (w *WaitFlags) AddDefault(cmd *cobra.Command, what string, timeout time.Duration, byDefault bool) {
	usage := "follow " + what + " (the default; --no-wait returns at once)"
	if !byDefault {
		usage = "follow " + what
	}
	cmd.Flags().BoolVar(&w.wait, "wait", byDefault, usage)
	cmd.Flags().BoolVar(&w.noWait, "no-wait", false, "return as soon as the Manager has accepted it, without following it")
	cmd.Flags().DurationVar(&w.Timeout, "wait-timeout", timeout, "how long to follow before giving up (what was started goes on)")
}

// Waiting reports whether to follow.
func (w *WaitFlags) Waiting() bool { return w.wait && !w.noWait }

// Check refuses a non-positive --wait-timeout and --wait=true with
// --no-wait.
func (w *WaitFlags) Check(cmd *cobra.Command) error {
	if w.Timeout <= 0 {
		return UsageErrorf("--wait-timeout must be positive")
	}
	if f := cmd.Flag("wait"); f != nil && f.Changed && w.wait && w.noWait {
		return UsageErrorf("--wait and --no-wait contradict each other")
	}
	return nil
}
