package worker

import "github.com/norsk-go/norsk-manager/internal/worker/datadir"

// The data directory's identity and lock (internal/worker/datadir), under
// the names the worker's users know.

// Identity is what a worker keeps of its registration (datadir.Identity).
type Identity = datadir.Identity

// DataDirInUseError is Run's error when another worker process holds the
// data directory (datadir.InUseError).
type DataDirInUseError = datadir.InUseError

// LoadIdentity reads DataDir's identity; (nil, nil) when there is none.
func LoadIdentity(dataDir string) (*Identity, error) { return datadir.LoadIdentity(dataDir) }

// HasIdentity reports whether dataDir holds a usable identity, so that a
// worker started over it needs no registration token.
func HasIdentity(dataDir string) bool { return datadir.HasIdentity(dataDir) }

// ClusterIDOf is the cluster id dataDir's identity holds ("" when none).
func ClusterIDOf(dataDir string) string { return datadir.ClusterIDOf(dataDir) }

// LockHolder reports whether a worker holds dataDir's lock now, and the pid
// it wrote there (see datadir.LockHolder).
func LockHolder(dataDir string) (pid int, held bool, err error) { return datadir.LockHolder(dataDir) }
