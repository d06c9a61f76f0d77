package testcluster

// Close stops the cluster now, as the end of the test would: every job is
// deleted (unless KeepInstances), the workers and members stop and no
// instance is left running. For a test or benchmark that makes several
// clusters in turn; calling it again, and the test's own cleanup after it,
// do nothing.
func (c *Cluster) Close() { c.closeOnce.Do(c.shutdown) }
