package manager

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	jose "github.com/go-jose/go-jose/v4"
	"google.golang.org/protobuf/proto"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1/managerv1connect"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/auth"
	"github.com/norsk-go/norsk-manager/internal/nodes"
	"github.com/norsk-go/norsk-manager/pkg/accessreplica"
)

// arKeys writes a JWKS of key's public half to dir and returns its path.
func arKeys(t *testing.T, dir string, keys ...*jose.JSONWebKey) string {
	t.Helper()
	doc, err := accessreplica.PublicJWKS(keys...)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "access-keys.json")
	if err := os.WriteFile(path, doc, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func arStart(t *testing.T, keysFile string) (*Server, managerv1connect.ManagerClient) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	tok := auth.NewToken()
	s, err := New(ctx, Config{
		DataDir: t.TempDir(), Listen: "127.0.0.1:0", NodeName: "m1", Logger: slog.New(slog.DiscardHandler),
		BootstrapToken: tok, AccessReplicaKeysFile: keysFile, BackupInterval: -1,
	})
	if err != nil {
		t.Fatalf("start manager: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, managerv1connect.NewManagerClient(nodes.H2CClient(), s.URL(), connect.WithGRPC(), auth.WithBearer(tok))
}

// arSign returns s, panicking on err (signing with a good key does not fail).
func arSign(s string, err error) string {
	if err != nil {
		panic(err)
	}
	return s
}

func arPublish(c managerv1connect.ManagerClient, pub *managerv1.AccessReplicaPublication) (*managerv1.PublishAccessReplicaResponse, error) {
	res, err := c.PublishAccessReplica(context.Background(), connect.NewRequest(&managerv1.PublishAccessReplicaRequest{Publication: pub}))
	if err != nil {
		return nil, err
	}
	return res.Msg, nil
}

// arStored is the replica the store holds (a copy; nil when none).
func arStored(s *Server) *storev1.AccessReplicaState {
	if a := s.Store().State().Snapshot().AccessReplica(); a != nil {
		return proto.Clone(a).(*storev1.AccessReplicaState)
	}
	return nil
}

func TestPublishAccessReplica(t *testing.T) {
	t.Parallel()
	key, err := accessreplica.GenerateKey(jose.ES256, "mgr-1")
	if err != nil {
		t.Fatal(err)
	}
	other, err := accessreplica.GenerateKey(jose.ES256, "mgr-1")
	if err != nil {
		t.Fatal(err)
	}
	s, c := arStart(t, arKeys(t, t.TempDir(), key))

	roles1 := []byte(`{"alice":{"role":"admin"},"bob":{"role":"viewer"}}`)
	roles2 := []byte(`{"alice":{"role":"admin"},"carol":{"role":"operator"}}`)
	roles3 := []byte(`{"carol":{"role":"operator"}}`)
	snap1 := arSign(accessreplica.SignSnapshot(key, 1, roles1))
	snap2 := arSign(accessreplica.SignSnapshot(key, 2, roles2))
	ops12, _ := accessreplica.Diff(roles1, roles2)
	delta12 := arSign(accessreplica.SignDelta(key, 1, 2, ops12))

	// Refusals before anything is stored.
	refuse := func(name string, pub *managerv1.AccessReplicaPublication, want connect.Code, field string) {
		t.Helper()
		before := arStored(s)
		_, err := arPublish(c, pub)
		if connect.CodeOf(err) != want {
			t.Fatalf("%s: %v; want %v", name, err, want)
		}
		if field != "" && !strings.Contains(err.Error(), field) {
			t.Fatalf("%s: %v does not name %s", name, err, field)
		}
		if after := arStored(s); !proto.Equal(before, after) {
			t.Fatalf("%s: the store changed: %v -> %v", name, before, after)
		}
	}
	tampered := []byte(snap1)
	mid := strings.Index(snap1, ".") + 10
	tampered[mid] ^= 1
	refuse("tampered snapshot", &managerv1.AccessReplicaPublication{SnapshotJws: string(tampered)}, connect.CodeInvalidArgument, "publication.snapshotJws")
	refuse("wrong key", &managerv1.AccessReplicaPublication{SnapshotJws: arSign(accessreplica.SignSnapshot(other, 1, roles1))}, connect.CodeInvalidArgument, "publication.snapshotJws")
	refuse("attestation with nothing stored", &managerv1.AccessReplicaPublication{AttestationJws: arSign(accessreplica.SignAttestation(key, 1))}, connect.CodeFailedPrecondition, "attestationJws")
	refuse("empty", &managerv1.AccessReplicaPublication{}, connect.CodeInvalidArgument, "publication")
	if arStored(s) != nil {
		t.Fatal("a refused publication was stored")
	}

	// The first publication: a snapshot alone.
	res, err := arPublish(c, &managerv1.AccessReplicaPublication{SnapshotJws: snap1})
	if err != nil || res.GetVersion() != 1 || !res.GetChanged() {
		t.Fatalf("first: %v %v", res, err)
	}
	st := arStored(s)
	if st.GetVersion() != 1 || st.GetPublication().GetSnapshotJws() != snap1 || !bytes.Equal(st.GetRolesJson(), []byte(`{"alice":{"role":"admin"},"bob":{"role":"viewer"}}`)) {
		t.Fatalf("stored after the first: %v", st)
	}

	// Refusals against version 1.
	refuse("change without delta", &managerv1.AccessReplicaPublication{SnapshotJws: snap2}, connect.CodeInvalidArgument, "publication.deltaJws")
	bad := arSign(accessreplica.SignDelta(key, 1, 2, []accessreplica.Op{{Op: "delete", Key: "bob"}}))
	refuse("delta that does not apply", &managerv1.AccessReplicaPublication{SnapshotJws: snap2, DeltaJws: bad}, connect.CodeInvalidArgument, "does not apply")
	refuse("tampered delta", &managerv1.AccessReplicaPublication{SnapshotJws: snap2, DeltaJws: delta12[:len(delta12)-4] + "AAAA"}, connect.CodeInvalidArgument, "publication.deltaJws")
	refuse("delta signed with the wrong key", &managerv1.AccessReplicaPublication{SnapshotJws: snap2, DeltaJws: arSign(accessreplica.SignDelta(other, 1, 2, ops12))}, connect.CodeInvalidArgument, "publication.deltaJws")
	refuse("replay of version 1", &managerv1.AccessReplicaPublication{SnapshotJws: snap1}, connect.CodeFailedPrecondition, "move forward")
	refuse("attestation of a wrong version", &managerv1.AccessReplicaPublication{AttestationJws: arSign(accessreplica.SignAttestation(key, 2))}, connect.CodeFailedPrecondition, "attests version 2")

	// A change: snapshot and delta.
	res, err = arPublish(c, &managerv1.AccessReplicaPublication{SnapshotJws: snap2, DeltaJws: delta12})
	if err != nil || res.GetVersion() != 2 || !res.GetChanged() {
		t.Fatalf("change: %v %v", res, err)
	}
	// An attestation of the stored version.
	att2 := arSign(accessreplica.SignAttestation(key, 2))
	res, err = arPublish(c, &managerv1.AccessReplicaPublication{AttestationJws: att2})
	if err != nil || res.GetVersion() != 2 || res.GetChanged() {
		t.Fatalf("attestation: %v %v", res, err)
	}
	st = arStored(s)
	if st.GetVersion() != 2 || st.GetPublication().GetSnapshotJws() != snap2 || st.GetPublication().GetDeltaJws() != delta12 || st.GetPublication().GetAttestationJws() != att2 {
		t.Fatalf("stored after the attestation: %v", st)
	}

	// Replays of older versions, with their deltas.
	refuse("replay of version 2's change", &managerv1.AccessReplicaPublication{SnapshotJws: snap2, DeltaJws: delta12}, connect.CodeFailedPrecondition, "move forward")
	refuse("replay of version 1 again", &managerv1.AccessReplicaPublication{SnapshotJws: snap1}, connect.CodeFailedPrecondition, "move forward")
	// A delta from version 1 for version 3 (the publisher missed version 2).
	ops13, _ := accessreplica.Diff(roles1, roles3)
	refuse("delta from an older version", &managerv1.AccessReplicaPublication{
		SnapshotJws: arSign(accessreplica.SignSnapshot(key, 3, roles3)),
		DeltaJws:    arSign(accessreplica.SignDelta(key, 1, 3, ops13)),
	}, connect.CodeFailedPrecondition, "is from version 1")

	// The replica survives a restart of the store (it is in raft).
	dir := s.cfg.DataDir
	keysFile := s.cfg.AccessReplicaKeysFile
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s2, err := New(ctx, Config{DataDir: dir, Listen: "127.0.0.1:0", NodeName: "m1", Logger: slog.New(slog.DiscardHandler), AccessReplicaKeysFile: keysFile, BackupInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if st2 := arStored(s2); !proto.Equal(st, st2) {
		t.Fatalf("after a restart: %v, want %v", st2, st)
	}
}

func TestPublishAccessReplicaWithoutKeys(t *testing.T) {
	t.Parallel()
	key, _ := accessreplica.GenerateKey(jose.EdDSA, "k")
	s, c := arStart(t, "")
	_, err := arPublish(c, &managerv1.AccessReplicaPublication{SnapshotJws: arSign(accessreplica.SignSnapshot(key, 1, []byte(`{}`)))})
	if connect.CodeOf(err) != connect.CodeFailedPrecondition || !strings.Contains(err.Error(), "no access replica keys") {
		t.Fatalf("without keys: %v", err)
	}
	if arStored(s) != nil {
		t.Fatal("stored without keys")
	}
}

func TestAccessReplicaKeysFileRefused(t *testing.T) {
	t.Parallel()
	priv, _ := accessreplica.GenerateKey(jose.EdDSA, "k")
	b, err := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{*priv}})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "keys.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for name, p := range map[string]string{"private key": path, "missing file": filepath.Join(t.TempDir(), "none.json")} {
		if s, err := New(ctx, Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", NodeName: "m1", Logger: slog.New(slog.DiscardHandler), AccessReplicaKeysFile: p}); err == nil {
			_ = s.Close()
			t.Errorf("%s: the Manager started", name)
		}
	}
}
