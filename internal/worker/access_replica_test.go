package worker_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	jose "github.com/go-jose/go-jose/v4"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/pkg/accessreplica"
)

func replicaMsg(pub *managerv1.AccessReplicaPublication, jwks string) *managerv1.ControllerMessage {
	return &managerv1.ControllerMessage{Msg: &managerv1.ControllerMessage_AccessReplica{AccessReplica: &managerv1.AccessReplicaUpdate{
		Publication: pub, TrustedJwks: jwks,
	}}}
}

// signed returns s, panicking on err (signing with a good key does not fail).
func signed(s string, err error) string {
	if err != nil {
		panic(err)
	}
	return s
}

func TestAccessReplicaKept(t *testing.T) {
	t.Parallel()
	key, _ := accessreplica.GenerateKey(jose.EdDSA, "k1")
	other, _ := accessreplica.GenerateKey(jose.EdDSA, "k1")
	doc, err := accessreplica.PublicJWKS(key)
	if err != nil {
		t.Fatal(err)
	}
	jwks := string(doc)
	roles1 := []byte(`{"alice":{"role":"admin"}}`)
	roles2 := []byte(`{"alice":{"role":"admin"},"bob":{"role":"viewer"}}`)
	ops, _ := accessreplica.Diff(roles1, roles2)
	pub1 := &managerv1.AccessReplicaPublication{SnapshotJws: signed(accessreplica.SignSnapshot(key, 1, roles1))}
	pub2 := &managerv1.AccessReplicaPublication{
		SnapshotJws: signed(accessreplica.SignSnapshot(key, 2, roles2)),
		DeltaJws:    signed(accessreplica.SignDelta(key, 1, 2, ops)),
	}

	e := newEnv(t)
	a := e.run(e.config())
	if v, r := a.AccessReplica(); v != 0 || r != nil {
		t.Fatalf("a replica before any was sent: %d %s", v, r)
	}
	c, _ := e.dial(a, noHeartbeats)

	// Refused, nothing kept: no keys, bad keys, a wrong key, a tampered
	// snapshot, no snapshot.
	tampered := []byte(pub1.SnapshotJws)
	tampered[len(tampered)-5] ^= 1
	for name, msg := range map[string]*managerv1.ControllerMessage{
		"no keys":        replicaMsg(pub1, ""),
		"bad keys":       replicaMsg(pub1, `{"keys":[]}`),
		"wrong key":      replicaMsg(&managerv1.AccessReplicaPublication{SnapshotJws: signed(accessreplica.SignSnapshot(other, 1, roles1))}, jwks),
		"tampered":       replicaMsg(&managerv1.AccessReplicaPublication{SnapshotJws: string(tampered)}, jwks),
		"no snapshot":    replicaMsg(&managerv1.AccessReplicaPublication{AttestationJws: signed(accessreplica.SignAttestation(key, 1))}, jwks),
		"no publication": replicaMsg(nil, jwks),
	} {
		seq := send(t, c, msg)
		expectAck(t, c, seq, "INVALID_ARGUMENT")
		if v, _ := a.AccessReplica(); v != 0 {
			t.Fatalf("%s: kept version %d", name, v)
		}
	}
	path := filepath.Join(e.dataDir, "access-replica.json")
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("a file after refusals: %v", err)
	}

	// Version 1, then 2: kept, on disk with mode 0600.
	seq := send(t, c, replicaMsg(pub1, jwks))
	expectAck(t, c, seq, "")
	if v, r := a.AccessReplica(); v != 1 || !bytes.Equal(r, roles1) {
		t.Fatalf("after version 1: %d %s", v, r)
	}
	seq = send(t, c, replicaMsg(pub2, jwks))
	expectAck(t, c, seq, "")
	if v, r := a.AccessReplica(); v != 2 || !bytes.Equal(r, roles2) {
		t.Fatalf("after version 2: %d %s", v, r)
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("%s: %v %v", path, st, err)
	}

	// An older version is ignored (FAILED_PRECONDITION); a delta from the
	// held version that does not apply is refused.
	seq = send(t, c, replicaMsg(pub1, jwks))
	expectAck(t, c, seq, "FAILED_PRECONDITION")
	roles3 := []byte(`{"bob":{"role":"viewer"}}`)
	bad := &managerv1.AccessReplicaPublication{
		SnapshotJws: signed(accessreplica.SignSnapshot(key, 3, roles3)),
		DeltaJws:    signed(accessreplica.SignDelta(key, 2, 3, []accessreplica.Op{{Op: "delete", Key: "carol"}})),
	}
	seq = send(t, c, replicaMsg(bad, jwks))
	expectAck(t, c, seq, "INVALID_ARGUMENT")
	if v, _ := a.AccessReplica(); v != 2 {
		t.Fatalf("after refusals: version %d", v)
	}
	// The same version with an attestation: accepted, kept.
	pub2att := &managerv1.AccessReplicaPublication{SnapshotJws: pub2.SnapshotJws, DeltaJws: pub2.DeltaJws, AttestationJws: signed(accessreplica.SignAttestation(key, 2))}
	seq = send(t, c, replicaMsg(pub2att, jwks))
	expectAck(t, c, seq, "")
	if b, _ := os.ReadFile(path); !strings.Contains(string(b), pub2att.AttestationJws) {
		t.Fatal("the attestation was not kept")
	}

	// A restarted worker holds version 2 at once, before a Manager dials it.
	if err := a.stop(t); err != nil {
		t.Fatal(err)
	}
	b := e.run(e.config())
	if v, r := b.AccessReplica(); v != 2 || !bytes.Equal(r, roles2) {
		t.Fatalf("after a restart: %d %s", v, r)
	}
	// …and still ignores version 1.
	c2, _ := e.dial(b, noHeartbeats)
	seq = send(t, c2, replicaMsg(pub1, jwks))
	expectAck(t, c2, seq, "FAILED_PRECONDITION")
	if err := b.stop(t); err != nil {
		t.Fatal(err)
	}

	// A damaged file, or one whose snapshot does not verify, is ignored.
	kept, _ := os.ReadFile(path)
	for _, content := range []string{"{not json", strings.Replace(string(kept), pub2.SnapshotJws[:40], pub2.SnapshotJws[:39]+"x", 1)} {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		r := e.run(e.config())
		if v, _ := r.AccessReplica(); v != 0 {
			t.Fatalf("loaded a damaged file as version %d", v)
		}
		if err := r.stop(t); err != nil {
			t.Fatal(err)
		}
	}
}
