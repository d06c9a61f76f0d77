package datadir

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/atomicfile"
	"github.com/norsk-go/norsk-manager/pkg/discovery"
)

// discoveryFile is the name of the discovery access file in DataDir.
const discoveryFile = "discovery.json"

// discoveryFileVersion is the version of its format; a newer one is ignored
// (the Manager sends the access again at the next hello).
const discoveryFileVersion = 1

// discoveryRecord is the discovery access as the worker keeps it on disk
// (mode 0600: it holds the leaf token and the node token).
type discoveryRecord struct {
	Version    int       `json:"version"`
	Addresses  []string  `json:"addresses,omitempty"`
	Address    string    `json:"address,omitempty"`
	LeafToken  string    `json:"leafToken"`
	NodeToken  string    `json:"nodeToken"`
	ReceivedAt time.Time `json:"receivedAt"`
}

// Discovery is the latest discovery access the Manager sent, kept in
// DataDir/discovery.json across restarts. The zero value keeps none; set
// Dir before use. Safe for concurrent use.
type Discovery struct {
	// Dir is the data directory.
	Dir string

	mu     sync.Mutex
	access *managerv1.DiscoveryAccess
}

// Get is a copy of the access (nil when none has been received).
func (d *Discovery) Get() *managerv1.DiscoveryAccess {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.access == nil {
		return nil
	}
	return proto.Clone(d.access).(*managerv1.DiscoveryAccess)
}

// Load reads the access an earlier run kept for nodeID. A missing file is
// not an error; an unusable one (another version, no node token, another
// node's) is returned as the error and nothing is loaded: the Manager sends
// the access after every hello. The error quotes no content of the file.
func (d *Discovery) Load(nodeID string) error {
	b, err := os.ReadFile(filepath.Join(d.Dir, discoveryFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	var rec discoveryRecord
	if err == nil {
		err = json.Unmarshal(b, &rec)
	}
	if err == nil && (rec.Version != discoveryFileVersion || rec.NodeToken == "") {
		err = fmt.Errorf("version %d or no node token", rec.Version)
	}
	if err == nil {
		if id, _, perr := discovery.ParseNodeToken(rec.NodeToken); perr != nil || id != nodeID {
			err = errors.New("its node token is not this node's")
		}
	}
	if err != nil {
		return fmt.Errorf("%s: %w", discoveryFile, err)
	}
	d.mu.Lock()
	d.access = &managerv1.DiscoveryAccess{
		Addresses: rec.Addresses, Address: rec.Address, LeafToken: rec.LeafToken, NodeToken: rec.NodeToken,
	}
	d.mu.Unlock()
	return nil
}

// Keep makes acc (a copy) the access in force and writes it, received at
// now. An error means it is in force but not kept.
func (d *Discovery) Keep(acc *managerv1.DiscoveryAccess, now time.Time) error {
	acc = proto.Clone(acc).(*managerv1.DiscoveryAccess)
	d.mu.Lock()
	defer d.mu.Unlock() // held through the write: files land in order
	d.access = acc
	rec := discoveryRecord{
		Version: discoveryFileVersion, Addresses: acc.GetAddresses(), Address: acc.GetAddress(),
		LeafToken: acc.GetLeafToken(), NodeToken: acc.GetNodeToken(), ReceivedAt: now.UTC(),
	}
	b, err := json.MarshalIndent(rec, "", "  ")
	if err == nil {
		err = atomicfile.WriteFile(filepath.Join(d.Dir, discoveryFile), append(b, '\n'), 0o600)
	}
	return err
}

// Forget drops the access and removes its file (the node was deregistered).
func (d *Discovery) Forget() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.access = nil
	err := os.Remove(filepath.Join(d.Dir, discoveryFile))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}
