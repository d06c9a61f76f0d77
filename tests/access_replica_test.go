package tests

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	jose "github.com/go-jose/go-jose/v4"
	"google.golang.org/protobuf/proto"

	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/testcluster"
	"github.com/norsk-go/norsk-manager/pkg/accessreplica"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// jws returns s, panicking on err (signing with a good key does not fail).
func jws(s string, err error) string {
	if err != nil {
		panic(err)
	}
	return s
}

// storedReplica is the access replica the Manager's store holds (a copy).
func storedReplica(c *testcluster.Cluster) *storev1.AccessReplicaState {
	if a := c.Manager().Store().State().Snapshot().AccessReplica(); a != nil {
		return proto.Clone(a).(*storev1.AccessReplicaState)
	}
	return nil
}

// waitReplica waits until worker w holds version with roles.
func waitReplica(c *testcluster.Cluster, w *testcluster.Worker, version uint64, roles []byte) {
	c.Eventually(fmt.Sprintf("%s to hold access replica version %d", w.Name, version), func() bool {
		a := w.Agent()
		if a == nil {
			return false
		}
		v, r := a.AccessReplica()
		return v == version && bytes.Equal(r, roles)
	})
}

// TestAccessReplica publishes norsk-mgr's role-store replica through the SDK
// to a Manager with two workers: every refusal leaves the store as it was;
// accepted versions reach both workers, which keep the newest across
// restarts and ignore older ones.
func TestAccessReplica(t *testing.T) {
	t.Parallel()
	key, err := accessreplica.GenerateKey(jose.ES256, "norsk-mgr-1")
	if err != nil {
		t.Fatal(err)
	}
	wrong, err := accessreplica.GenerateKey(jose.ES256, "norsk-mgr-1")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := accessreplica.PublicJWKS(key)
	if err != nil {
		t.Fatal(err)
	}
	keysFile := filepath.Join(t.TempDir(), "access-keys.json")
	if err := os.WriteFile(keysFile, doc, 0o600); err != nil {
		t.Fatal(err)
	}
	c := testcluster.New(t, testcluster.Options{Workers: 2, AccessReplicaKeysFile: keysFile})
	w1, w2 := c.Worker("worker-1"), c.Worker("worker-2")

	roles1 := []byte(`{"alice":{"role":"admin"},"bob":{"role":"viewer"}}`)
	roles2 := []byte(`{"alice":{"role":"admin"},"carol":{"role":"operator"}}`)
	roles3 := []byte(`{"carol":{"role":"admin"}}`)
	ops12, _ := accessreplica.Diff(roles1, roles2)
	ops23, _ := accessreplica.Diff(roles2, roles3)
	pub1 := &norsk.AccessReplicaPublication{SnapshotJws: jws(accessreplica.SignSnapshot(key, 1, roles1))}
	pub2 := &norsk.AccessReplicaPublication{
		SnapshotJws: jws(accessreplica.SignSnapshot(key, 2, roles2)),
		DeltaJws:    jws(accessreplica.SignDelta(key, 1, 2, ops12)),
	}
	pub3 := &norsk.AccessReplicaPublication{
		SnapshotJws: jws(accessreplica.SignSnapshot(key, 3, roles3)),
		DeltaJws:    jws(accessreplica.SignDelta(key, 2, 3, ops23)),
	}

	refused := func(name string, pub *norsk.AccessReplicaPublication, want error, says string) {
		t.Helper()
		before := storedReplica(c)
		_, _, err := c.Client().PublishAccessReplica(ctx(t), pub)
		if !errors.Is(err, want) || !strings.Contains(err.Error(), says) {
			t.Fatalf("%s: %v; want %v saying %q", name, err, want, says)
		}
		if after := storedReplica(c); !proto.Equal(before, after) {
			t.Fatalf("%s: the store changed", name)
		}
	}
	flipped := func(s string, seg int) string {
		parts := strings.Split(s, ".")
		b := []byte(parts[seg])
		b[len(b)/2] ^= 0x01
		parts[seg] = string(b)
		return strings.Join(parts, ".")
	}

	// Refusals with nothing stored.
	refused("tampered snapshot payload", &norsk.AccessReplicaPublication{SnapshotJws: flipped(pub1.SnapshotJws, 1)}, norsk.ErrInvalidArgument, "snapshotJws")
	refused("tampered snapshot signature", &norsk.AccessReplicaPublication{SnapshotJws: flipped(pub1.SnapshotJws, 2)}, norsk.ErrInvalidArgument, "snapshotJws")
	refused("wrong key", &norsk.AccessReplicaPublication{SnapshotJws: jws(accessreplica.SignSnapshot(wrong, 1, roles1))}, norsk.ErrInvalidArgument, "does not verify")
	if storedReplica(c) != nil {
		t.Fatal("a refused publication was stored")
	}

	// The first publication: a snapshot alone. Both workers receive it.
	if v, changed, err := c.Client().PublishAccessReplica(ctx(t), pub1); err != nil || v != 1 || !changed {
		t.Fatalf("first publication: %d %v %v", v, changed, err)
	}
	waitReplica(c, w1, 1, roles1)
	waitReplica(c, w2, 1, roles1)

	// Refusals against version 1.
	refused("change without its delta", &norsk.AccessReplicaPublication{SnapshotJws: pub2.SnapshotJws}, norsk.ErrInvalidArgument, "deltaJws")
	refused("delta that does not apply", &norsk.AccessReplicaPublication{
		SnapshotJws: pub2.SnapshotJws,
		DeltaJws:    jws(accessreplica.SignDelta(key, 1, 2, []accessreplica.Op{{Op: "delete", Key: "bob"}})),
	}, norsk.ErrInvalidArgument, "does not apply")
	refused("replay of version 1", pub1, norsk.ErrFailedPrecondition, "move forward")
	refused("attestation of a wrong version", &norsk.AccessReplicaPublication{AttestationJws: jws(accessreplica.SignAttestation(key, 2))}, norsk.ErrFailedPrecondition, "attests version 2")

	// worker-2 is down while version 2 is published: it gets it after its
	// hello, from the version 1 it kept.
	if err := w2.Stop(); err != nil {
		t.Fatal(err)
	}
	if v, changed, err := c.Client().PublishAccessReplica(ctx(t), pub2); err != nil || v != 2 || !changed {
		t.Fatalf("change: %d %v %v", v, changed, err)
	}
	waitReplica(c, w1, 2, roles2)
	w2.Start()
	if v, _ := w2.Agent().AccessReplica(); v != 1 {
		t.Fatalf("worker-2 restarted holding version %d, want the 1 it kept", v)
	}
	waitReplica(c, w2, 2, roles2)

	// An attestation of the stored version changes nothing but the
	// attestation stored.
	att2 := jws(accessreplica.SignAttestation(key, 2))
	if v, changed, err := c.Client().PublishAccessReplica(ctx(t), &norsk.AccessReplicaPublication{AttestationJws: att2}); err != nil || v != 2 || changed {
		t.Fatalf("attestation: %d %v %v", v, changed, err)
	}
	if st := storedReplica(c); st.GetVersion() != 2 || st.GetPublication().GetAttestationJws() != att2 || st.GetPublication().GetSnapshotJws() != pub2.SnapshotJws {
		t.Fatalf("stored after the attestation: %v", st)
	}
	// The same through norsk-ctl: an attestation, a replay, a usage error.
	n := ctl{t: t, url: c.URL(), token: c.Token()}
	dir := t.TempDir()
	attFile, snapFile, deltaFile := filepath.Join(dir, "att.jws"), filepath.Join(dir, "snap.jws"), filepath.Join(dir, "delta.jws")
	for f, content := range map[string]string{attFile: att2 + "\n", snapFile: pub2.SnapshotJws, deltaFile: pub2.DeltaJws} {
		if err := os.WriteFile(f, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if out := n.ok("access-replica", "publish", "--attestation", attFile, "-o", "json"); strings.Join(strings.Fields(out), "") != `{"version":2,"changed":false}` {
		t.Fatalf("norsk-ctl access-replica publish --attestation: %q", out)
	}
	if code, _, errOut := n.run("", "access-replica", "publish", "--snapshot", snapFile, "--delta", deltaFile); code != 1 || !strings.Contains(errOut, "move forward") {
		t.Fatalf("norsk-ctl replay: exit %d, %q", code, errOut)
	}
	if code, _, _ := n.run("", "access-replica", "publish", "--attestation", attFile, "--snapshot", snapFile); code != 2 {
		t.Fatalf("norsk-ctl with --attestation and --snapshot: exit %d, want 2", code)
	}

	// Replays of older versions.
	refused("replay of version 2", pub2, norsk.ErrFailedPrecondition, "move forward")
	refused("replay of version 1 again", pub1, norsk.ErrFailedPrecondition, "move forward")

	// A worker that lost its replica gets it after its hello.
	if err := w1.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(w1.Dir, "access-replica.json")); err != nil {
		t.Fatal(err)
	}
	w1.Start()
	waitReplica(c, w1, 2, roles2)

	// Both workers keep the newest version across a restart (and a Manager
	// restart sends it again, which changes nothing).
	w1.Restart()
	w2.Restart()
	for _, w := range []*testcluster.Worker{w1, w2} {
		if v, r := w.Agent().AccessReplica(); v != 2 || !bytes.Equal(r, roles2) {
			t.Fatalf("%s after a restart: %d %s", w.Name, v, r)
		}
	}
	c.RestartManager()
	c.WaitNodeState("worker-1", norsk.NodeStateOnline)
	c.WaitNodeState("worker-2", norsk.NodeStateOnline)
	waitReplica(c, w1, 2, roles2)

	// A worker holding a newer version than the Manager sends ignores the
	// older one: worker-2 is given version 3 on disk while down.
	if err := w2.Stop(); err != nil {
		t.Fatal(err)
	}
	rec, _ := json.Marshal(map[string]any{
		"format": 1, "version": 3, "snapshotJws": pub3.SnapshotJws, "deltaJws": pub3.DeltaJws,
		"trustedJwks": json.RawMessage(doc), "roles": json.RawMessage(roles3),
	})
	if err := os.WriteFile(filepath.Join(w2.Dir, "access-replica.json"), rec, 0o600); err != nil {
		t.Fatal(err)
	}
	w2.Start()
	c.WaitNodeState("worker-2", norsk.NodeStateOnline)
	waitReplica(c, w2, 3, roles3) // loaded
	// The Manager sends it version 2 after the hello, which it refuses.
	c.Eventually("worker-2 to refuse version 2", func() bool {
		res, err := http.Get(c.URL() + "/metrics")
		if err != nil {
			return false
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		// The counter exists at 0 from the start: wait for a refusal.
		return regexp.MustCompile(`norsk_manager_worker_command_errors_total\{kind="access-replica"\} [1-9]`).Match(b)
	})
	if v, _ := w2.Agent().AccessReplica(); v != 3 {
		t.Fatalf("worker-2 took an older version: %d", v)
	}
	// Version 3 published to the Manager reaches worker-1; worker-2 keeps it.
	if v, _, err := c.Client().PublishAccessReplica(ctx(t), pub3); err != nil || v != 3 {
		t.Fatalf("version 3: %d %v", v, err)
	}
	waitReplica(c, w1, 3, roles3)
	if v, r := w2.Agent().AccessReplica(); v != 3 || !bytes.Equal(r, roles3) {
		t.Fatalf("worker-2: %d %s", v, r)
	}
}
