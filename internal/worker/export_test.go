package worker

// FenceChecks is how many times the fencing loop has looked at the lease
// (lease.go): a test that changed something waits for the next look.
func (a *Agent) FenceChecks() uint64 { return a.fenceChecks.Load() }
