package jobspec

import (
	"fmt"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
)

// Limits the API boundary adds to ValidateJob's on what a job's services
// hand the operating system (the Manager's table of field bounds uses the
// per-field ones; CheckLimits the totals). The FSM checks no input rule
// (decision 0046): a log written before they existed replays as committed.
const (
	// MaxArgBytes is the longest single command or argument (Linux's
	// MAX_ARG_STRLEN).
	MaxArgBytes = 128 << 10
	// MaxCommandBytes bounds a service's command and arguments together.
	MaxCommandBytes = 256 << 10
	// MaxEnvBytes bounds a service's environment, names and values
	// together.
	MaxEnvBytes = 1 << 20
	// MaxPathLen bounds a working directory or mount path (Linux's
	// PATH_MAX).
	MaxPathLen = 4096
	// MaxPriorityBandLen bounds a priority band's name.
	MaxPriorityBandLen = 64
)

// CheckLimits checks a job's services against the totals above (the field
// bounds and ValidateJob are the rest). field is the job's API path ("job",
// "bundle.jobs[2].job").
func CheckLimits(field string, job *managerv1.Job) error {
	for i, s := range job.GetServices() {
		f := fmt.Sprintf("%s.services[%d]", field, i)
		n := 0
		for _, c := range s.GetCommand() {
			n += len(c) + 1
		}
		for _, a := range s.GetArgs() {
			n += len(a) + 1
		}
		if n > MaxCommandBytes {
			return apierr.Invalid(f+".command", "the command and its arguments are %d bytes (at most %d together)", n, MaxCommandBytes)
		}
		n = 0
		for k, v := range s.GetEnv() {
			n += len(k) + len(v) + 2
		}
		if n > MaxEnvBytes {
			return apierr.Invalid(f+".env", "the environment is %d bytes (at most %d together)", n, MaxEnvBytes)
		}
	}
	return nil
}

// CheckBundleLimits is CheckLimits for each of a bundle's jobs.
func CheckBundleLimits(b *managerv1.Bundle) error {
	for i, j := range b.GetJobs() {
		if err := CheckLimits(fmt.Sprintf("bundle.jobs[%d].job", i), j.GetJob()); err != nil {
			return err
		}
	}
	return nil
}
