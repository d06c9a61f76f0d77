package worker

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// identityFile is the name of the identity file in DataDir.
const identityFile = "identity.json"

// Identity is what a worker keeps of its registration: who it is, and the
// secret it registers with and the Manager dials it with.
type Identity struct {
	NodeID     string `json:"nodeId"`
	NodeSecret string `json:"nodeSecret"`
	ManagerURL string `json:"managerUrl"`
	// ManagerURLs are the Manager cluster's members as the latest hello
	// named them: after a restart the worker registers with any of them,
	// not only the one it was configured with.
	ManagerURLs []string `json:"managerUrls,omitempty"`
	// ClusterID is the Manager's store's cluster id, as its registration
	// answer or hello said: everything the worker creates is labelled with
	// it, and it touches nothing labelled with another (decision 0027).
	// Empty until a Manager that has one says so.
	ClusterID string `json:"clusterId,omitempty"`
}

// LoadIdentity reads DataDir's identity; (nil, nil) when there is none.
func LoadIdentity(dataDir string) (*Identity, error) {
	path := filepath.Join(dataDir, identityFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read identity: %w", err)
	}
	var id Identity
	if err := json.Unmarshal(b, &id); err != nil {
		return nil, fmt.Errorf("identity %s: %w", path, err)
	}
	if id.NodeID == "" || id.NodeSecret == "" {
		return nil, fmt.Errorf("identity %s: no node id or secret", path)
	}
	return &id, nil
}

// saveIdentity writes the identity atomically, readable by its owner only.
func saveIdentity(dataDir string, id *Identity) error {
	b, err := json.MarshalIndent(id, "", "  ")
	if err != nil {
		return fmt.Errorf("encode identity: %w", err)
	}
	return writeFileAtomic(filepath.Join(dataDir, identityFile), append(b, '\n'))
}

// deleteIdentity forgets the identity; a missing one is not an error.
func deleteIdentity(dataDir string) error {
	err := os.Remove(filepath.Join(dataDir, identityFile))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("delete identity: %w", err)
	}
	return syncDir(dataDir)
}

// writeFileAtomic writes data to path with mode 0600: a temp file in the same
// directory, fsync, rename over the old file, fsync of the directory.
func writeFileAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	defer os.Remove(tmp) // no-op once renamed
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("write %s: fsync: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return syncDir(dir)
}

// syncDir fsyncs a directory so that a rename or removal in it is durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open directory %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync directory %s: %w", dir, err)
	}
	return nil
}

// HasIdentity reports whether dataDir holds a usable identity, so that a
// worker started over it needs no registration token.
func HasIdentity(dataDir string) bool {
	id, err := LoadIdentity(dataDir)
	return err == nil && id != nil
}

// ClusterIDOf is the cluster id dataDir's identity holds ("" when it holds
// none, or no identity): what a tool that opens the node's runtime over
// the same directory or engine (to list or clean up what the worker left)
// gives it, since a runtime touches only its own cluster's services.
func ClusterIDOf(dataDir string) string {
	id, err := LoadIdentity(dataDir)
	if err != nil || id == nil {
		return ""
	}
	return id.ClusterID
}
