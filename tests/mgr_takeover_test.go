package tests

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/norsk-go/norsk-manager/examples/exampletest"
	"github.com/norsk-go/norsk-manager/internal/mgr"
	"github.com/norsk-go/norsk-manager/internal/mgr/rolestore"
	"github.com/norsk-go/norsk-manager/internal/testcluster"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// kill -9 of the active norsk-mgr of a three-member cluster: a standby
// (each norsk-mgr a process of its own, beside its member) takes the lease
// once the member reports the killed one stale, and publishes; no version
// of the role-store replica is published twice.
func TestNorskMgrKill9HandsPublishingToAStandby(t *testing.T) {
	t.Parallel()
	key, jwks := mgr.TestSigningKey(t)
	c := testcluster.New(t, testcluster.Options{Members: 3, AccessReplicaKeysFile: jwks})
	cl, x := c.Client(), ctx(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "norsk-mgr")
	if err := buildInto(bin, "github.com/norsk-go/norsk-manager/cmd/norsk-mgr"); err != nil {
		t.Fatal(err)
	}
	priv, err := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{*key}})
	if err != nil {
		t.Fatal(err)
	}
	keysFile := filepath.Join(dir, "signing-keys.json")
	if err := os.WriteFile(keysFile, priv, 0o600); err != nil {
		t.Fatal(err)
	}
	const interval = 300 * time.Millisecond
	procs := map[string]*exec.Cmd{}
	for _, m := range c.Members {
		cmd := exec.Command(bin, "--manager-url", m.URL(), "--token", c.Token(), "--listen", "127.0.0.1:0",
			"--discovery-listen", "127.0.0.1:0", "--interval", interval.String(), "--signing-keys", keysFile,
			"--admin-user", "admin", "--admin-password", "admin-password-1")
		log := &exampletest.Log{}
		cmd.Stdout, cmd.Stderr = log, log
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		procs[m.Name] = cmd
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			if t.Failed() {
				t.Logf("norsk-mgr beside %s:\n%s", m.Name, log.String())
			}
		})
	}
	holder := func() string {
		e, err := cl.KvGet(norsk.Linearizable(x), rolestore.Namespace, mgr.LeaseKey)
		if err != nil { // ErrNotFound: no holder
			return ""
		}
		var d struct{ Member string }
		_ = json.Unmarshal(e.GetValue(), &d)
		return d.Member
	}
	published := func() map[uint64]int {
		page, err := cl.GetAuditLog(x, norsk.AuditLogQuery{Source: mgr.AuditSource, Kind: "replica-published", Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		n := map[uint64]int{}
		for _, e := range page.GetEntries() {
			var p struct{ Version uint64 }
			_ = json.Unmarshal([]byte(e.GetPayload()), &p)
			n[p.Version]++
		}
		return n
	}
	c.Eventually("a norsk-mgr holds the lease and published version 1", func() bool { return holder() != "" && published()[1] == 1 })
	roles := rolestore.New(cl)
	if err := roles.Add(x, "olga", rolestore.RoleOperator, "operator-pass"); err != nil {
		t.Fatal(err)
	}
	c.Eventually("version 2 published", func() bool { return published()[2] == 1 })

	active := holder()
	if err := procs[active].Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	c.Eventually("a standby holds the lease", func() bool { h := holder(); return h != "" && h != active })
	t.Logf("kill -9 of the active norsk-mgr (beside %s): %s took the lease %v later (interval %v)", active, holder(), time.Since(killed).Round(10*time.Millisecond), interval)
	st, err := cl.GetClusterStatus(x)
	if err != nil {
		t.Fatal(err)
	}
	for _, mb := range st.GetMembers() {
		if mb.GetName() == active && !mb.GetControlPlaneStale() {
			t.Errorf("member %s does not report its killed norsk-mgr stale", active)
		}
	}
	if err := roles.Add(x, "vera", rolestore.RoleViewer, "viewer-pass-1"); err != nil {
		t.Fatal(err)
	}
	c.Eventually("version 3 published by the new active norsk-mgr", func() bool { return published()[3] == 1 })
	time.Sleep(3 * interval) // a few more rounds: nothing may be published again
	for v, n := range published() {
		if n != 1 {
			t.Errorf("role-store version %d published %d times", v, n)
		}
	}
}
