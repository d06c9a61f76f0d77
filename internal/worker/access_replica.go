package worker

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"connectrpc.com/connect"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/atomicfile"
	"github.com/norsk-go/norsk-manager/internal/worker/ack"
	"github.com/norsk-go/norsk-manager/pkg/accessreplica"
)

// The access replica on a worker: norsk-mgr's role store, as the Manager
// forwards it (an AccessReplicaUpdate: the publication it verified and
// stored, and the JWKS of its trusted keys). The worker verifies it again
// with pkg/accessreplica before it uses it, keeps the newest version in
// DataDir/access-replica.json and ignores older ones.
//
// Trust model: the keys come from the Manager, on the Control stream that
// only the Manager can open (the node secret, mutual TLS when the Manager
// runs TLS). The worker's own check therefore guards against a replica
// damaged or altered on its way from the Manager's store (or on the
// worker's disk: the kept replica is verified again at start, with the keys
// kept beside it), and makes the worker refuse anything unsigned, older or
// inconsistent; it does not guard against a compromised Manager, which
// could send other keys. Pinning keys on the worker is not done.

// accessReplicaFile is the name of the access replica file in DataDir.
const accessReplicaFile = "access-replica.json"

// accessReplicaFileFormat is the version of its format; another one is
// ignored (the Manager sends the replica again after every hello).
const accessReplicaFileFormat = 1

// accessReplicaRecord is the replica as the worker keeps it: the signed
// material and the keys to verify it with. The version and roles are what
// verifying it gives (kept for people reading the file; not trusted).
type accessReplicaRecord struct {
	Format         int             `json:"format"`
	Version        uint64          `json:"version"`
	SnapshotJws    string          `json:"snapshotJws"`
	DeltaJws       string          `json:"deltaJws,omitempty"`
	AttestationJws string          `json:"attestationJws,omitempty"`
	TrustedJwks    json.RawMessage `json:"trustedJwks"`
	Roles          json.RawMessage `json:"roles"`
	ReceivedAt     time.Time       `json:"receivedAt"`
}

// accessReplicaStore is the replica in force.
type accessReplicaStore struct {
	mu    sync.Mutex
	state *accessreplica.State
	pub   *managerv1.AccessReplicaPublication
}

// AccessReplica is the newest access replica the worker holds (kept across
// restarts): its version and its roles (canonical JSON, a copy). Version 0
// and nil when it holds none.
func (a *Agent) AccessReplica() (version uint64, rolesJSON []byte) {
	a.access.mu.Lock()
	defer a.access.mu.Unlock()
	if a.access.state == nil {
		return 0, nil
	}
	return a.access.state.Version, bytes.Clone(a.access.state.RolesJSON)
}

// loadAccessReplica reads the replica an earlier run kept and verifies it
// again. A missing or unusable file is not an error: the Manager sends the
// replica after every hello.
func (a *Agent) loadAccessReplica() {
	b, err := os.ReadFile(filepath.Join(a.cfg.DataDir, accessReplicaFile))
	if errors.Is(err, fs.ErrNotExist) {
		return
	}
	var rec accessReplicaRecord
	if err == nil {
		err = json.Unmarshal(b, &rec)
	}
	if err == nil && rec.Format != accessReplicaFileFormat {
		err = fmt.Errorf("format %d (want %d)", rec.Format, accessReplicaFileFormat)
	}
	var keys *accessreplica.KeySet
	if err == nil {
		keys, err = accessreplica.ParseJWKS(rec.TrustedJwks)
	}
	pub := &managerv1.AccessReplicaPublication{SnapshotJws: rec.SnapshotJws, DeltaJws: rec.DeltaJws, AttestationJws: rec.AttestationJws}
	var v accessreplica.Verified
	if err == nil {
		v, err = accessreplica.VerifyReplica(pub, keys, nil)
	}
	if err != nil {
		a.logger().Warn("ignoring the kept access replica", "file", accessReplicaFile, "err", err)
		return
	}
	a.access.mu.Lock()
	a.access.state = &accessreplica.State{Version: v.Version, RolesJSON: v.RolesJSON}
	a.access.pub = pub
	a.access.mu.Unlock()
	a.logger().Info("access replica loaded", "version", v.Version)
}

// onAccessReplica takes an AccessReplicaUpdate: it verifies the replica with
// the keys sent along, and keeps it when it is newer than the one held (or
// the same version with a new attestation); then it acknowledges. An older
// version is refused (FAILED_PRECONDITION) and changes nothing; so does
// anything that does not verify (INVALID_ARGUMENT).
func (a *Agent) onAccessReplica(sess *session, seq uint64, upd *managerv1.AccessReplicaUpdate) {
	reply := func(e *ack.Refusal) { sess.enqueue(ack.Message(seq, e)) }
	if upd.GetPublication() == nil || upd.GetTrustedJwks() == "" {
		reply(ack.Refuse(connect.CodeInvalidArgument, "the access replica update carries no publication or no keys"))
		return
	}
	keys, err := accessreplica.ParseJWKS([]byte(upd.GetTrustedJwks()))
	if err != nil {
		reply(ack.Refuse(connect.CodeInvalidArgument, "the access replica's keys: %s", err))
		return
	}
	in := upd.GetPublication()
	pub := &managerv1.AccessReplicaPublication{SnapshotJws: in.GetSnapshotJws(), DeltaJws: in.GetDeltaJws(), AttestationJws: in.GetAttestationJws()}
	log := a.logger()
	a.access.mu.Lock()
	defer a.access.mu.Unlock() // held through the write: files land in order
	v, err := accessreplica.VerifyReplica(pub, keys, a.access.state)
	if err != nil {
		code := connect.CodeInvalidArgument
		if accessreplica.KindOf(err) == accessreplica.Stale {
			code = connect.CodeFailedPrecondition
			log.Info("ignoring an older access replica", "err", err)
		} else {
			log.Warn("refused an access replica that does not verify", "err", err)
		}
		reply(ack.Refuse(code, "access replica: %s", err))
		return
	}
	if !v.Changed && a.access.pub != nil && pub.GetAttestationJws() == a.access.pub.GetAttestationJws() {
		reply(nil) // nothing new
		return
	}
	a.access.state = &accessreplica.State{Version: v.Version, RolesJSON: v.RolesJSON}
	a.access.pub = pub
	rec := accessReplicaRecord{
		Format: accessReplicaFileFormat, Version: v.Version,
		SnapshotJws: pub.GetSnapshotJws(), DeltaJws: pub.GetDeltaJws(), AttestationJws: pub.GetAttestationJws(),
		TrustedJwks: json.RawMessage(keys.JSON()), Roles: json.RawMessage(v.RolesJSON), ReceivedAt: a.clock.Now().UTC(),
	}
	b, err := json.MarshalIndent(rec, "", "  ")
	if err == nil {
		err = atomicfile.WriteFile(filepath.Join(a.cfg.DataDir, accessReplicaFile), append(b, '\n'), 0o600)
	}
	if err != nil {
		log.Error("cannot keep the access replica", "err", err)
		reply(ack.Refuse(connect.CodeInternal, "the access replica is in force but could not be kept: %s", err))
		return
	}
	log.Info("access replica received", "version", v.Version, "changed", v.Changed)
	reply(nil)
}

// forgetAccessReplica removes the kept replica (the node was deregistered).
func (a *Agent) forgetAccessReplica() {
	a.access.mu.Lock()
	defer a.access.mu.Unlock()
	a.access.state, a.access.pub = nil, nil
	err := os.Remove(filepath.Join(a.cfg.DataDir, accessReplicaFile))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		a.logger().Error("cannot delete the access replica", "err", err)
	}
}
