package worker

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/atomicfile"
	"github.com/norsk-go/norsk-manager/internal/worker/ack"
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

// discoveryStore is the latest discovery access the Manager sent.
type discoveryStore struct {
	mu     sync.Mutex
	access *managerv1.DiscoveryAccess
}

// DiscoveryAccess is the node's access to the discovery fleet as the Manager
// last sent it (kept across restarts in DataDir/discovery.json): every
// replica address, the leaf token and the node's token. Nil when none has
// been received. The caller may modify the copy returned.
func (a *Agent) DiscoveryAccess() *managerv1.DiscoveryAccess {
	a.disco.mu.Lock()
	defer a.disco.mu.Unlock()
	if a.disco.access == nil {
		return nil
	}
	return proto.Clone(a.disco.access).(*managerv1.DiscoveryAccess)
}

// loadDiscovery reads the access an earlier run kept. A missing or unusable
// file is not an error: the Manager sends the access after every hello.
func (a *Agent) loadDiscovery() {
	b, err := os.ReadFile(filepath.Join(a.cfg.DataDir, discoveryFile))
	if errors.Is(err, fs.ErrNotExist) {
		return
	}
	var rec discoveryRecord
	if err == nil {
		err = json.Unmarshal(b, &rec)
	}
	if err == nil && (rec.Version != discoveryFileVersion || rec.NodeToken == "") {
		err = fmt.Errorf("version %d or no node token", rec.Version)
	}
	if err == nil {
		if id, _, perr := discovery.ParseNodeToken(rec.NodeToken); perr != nil || id != a.NodeID() {
			err = errors.New("its node token is not this node's")
		}
	}
	if err != nil {
		// The error of json.Unmarshal quotes no content of the file.
		a.logger().Warn("ignoring the kept discovery access", "file", discoveryFile, "err", err)
		return
	}
	a.disco.mu.Lock()
	a.disco.access = &managerv1.DiscoveryAccess{
		Addresses: rec.Addresses, Address: rec.Address, LeafToken: rec.LeafToken, NodeToken: rec.NodeToken,
	}
	a.disco.mu.Unlock()
}

// onDiscoveryAccess takes a DiscoveryAccess command: it keeps the access in
// memory and on disk, then acknowledges it. A node token minted for another
// node is refused. Neither token is ever logged.
func (a *Agent) onDiscoveryAccess(sess *session, seq uint64, acc *managerv1.DiscoveryAccess) {
	if acc == nil || acc.GetNodeToken() == "" {
		sess.enqueue(ack.Message(seq, ack.Refuse(connect.CodeInvalidArgument, "the discovery access carries no node token")))
		return
	}
	if id, _, err := discovery.ParseNodeToken(acc.GetNodeToken()); err != nil || id != a.NodeID() {
		sess.enqueue(ack.Message(seq, ack.Refuse(connect.CodeInvalidArgument, "the discovery access's node token is not this node's")))
		return
	}
	acc = proto.Clone(acc).(*managerv1.DiscoveryAccess)
	a.disco.mu.Lock()
	defer a.disco.mu.Unlock() // held through the write: files land in order
	a.disco.access = acc
	rec := discoveryRecord{
		Version: discoveryFileVersion, Addresses: acc.GetAddresses(), Address: acc.GetAddress(),
		LeafToken: acc.GetLeafToken(), NodeToken: acc.GetNodeToken(), ReceivedAt: a.clock.Now().UTC(),
	}
	b, err := json.MarshalIndent(rec, "", "  ")
	if err == nil {
		err = atomicfile.WriteFile(filepath.Join(a.cfg.DataDir, discoveryFile), append(b, '\n'), 0o600)
	}
	if err != nil {
		a.logger().Error("cannot keep the discovery access", "err", err)
		sess.enqueue(ack.Message(seq, ack.Refuse(connect.CodeInternal, "the discovery access is in force but could not be kept: %s", err)))
		return
	}
	a.logger().Info("discovery access received", "addresses", len(acc.GetAddresses()))
	sess.enqueue(ack.Message(seq, nil))
}

// forgetDiscovery removes the kept access (the node was deregistered).
func (a *Agent) forgetDiscovery() {
	a.disco.mu.Lock()
	defer a.disco.mu.Unlock()
	a.disco.access = nil
	err := os.Remove(filepath.Join(a.cfg.DataDir, discoveryFile))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		a.logger().Error("cannot delete the discovery access", "err", err)
	}
}
