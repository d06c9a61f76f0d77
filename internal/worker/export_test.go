package worker

import "github.com/norsk-go/norsk-manager/internal/runtime"

// FenceChecks is how many times the fencing loop has looked at the lease
// (lease.go): a test that changed something waits for the next look.
func (a *Agent) FenceChecks() uint64 { return a.fenceChecks.Load() }

// JobAttached reports whether the job of (jobID, role) has a stream on its
// job socket, as the worker sees it.
func (a *Agent) JobAttached(jobID, role string) bool {
	if a.js == nil {
		return false
	}
	return a.js.Attached(runtime.Key{JobID: jobID, Role: role})
}

// KeptMigrationReports is how many handshake reports wait for a Control
// stream.
func (a *Agent) KeptMigrationReports() int {
	a.pubMu.Lock()
	defer a.pubMu.Unlock()
	return len(a.migPending)
}
