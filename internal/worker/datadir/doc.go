// Package datadir is what a worker keeps in its data directory about
// itself: its identity (DataDir/identity.json: node id, node secret, the
// Manager's members, the cluster id; 0600, written atomically) and the
// exclusive lock that makes it the directory's only worker
// (DataDir/worker.lock, an flock holding the pid); and the discovery access
// the Manager last sent (DataDir/discovery.json, 0600: it holds tokens).
// The worker's instance
// records (internal/worker/instance) and image times
// (internal/worker/images) live beside them.
package datadir
