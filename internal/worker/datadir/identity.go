package datadir

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/norsk-go/norsk-manager/internal/atomicfile"
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

// LoadIdentity reads dataDir's identity; (nil, nil) when there is none.
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

// SaveIdentity writes the identity atomically, readable by its owner only.
func SaveIdentity(dataDir string, id *Identity) error {
	b, err := json.MarshalIndent(id, "", "  ")
	if err != nil {
		return fmt.Errorf("encode identity: %w", err)
	}
	return atomicfile.WriteFile(filepath.Join(dataDir, identityFile), append(b, '\n'), 0o600)
}

// DeleteIdentity forgets the identity; a missing one is not an error.
func DeleteIdentity(dataDir string) error {
	err := os.Remove(filepath.Join(dataDir, identityFile))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("delete identity: %w", err)
	}
	return atomicfile.SyncDir(dataDir)
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
