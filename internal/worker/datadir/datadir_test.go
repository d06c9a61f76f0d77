package datadir

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/pkg/discovery"
)

func TestIdentityRoundTrip(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if id, err := LoadIdentity(dir); id != nil || err != nil || HasIdentity(dir) {
		t.Fatalf("empty directory: %v, %v", id, err)
	}
	want := &Identity{NodeID: "n1", NodeSecret: "s", ManagerURL: "http://m", ClusterID: "c1"}
	if err := SaveIdentity(dir, want); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(dir, identityFile)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("identity file: %v, %v", fi, err)
	}
	got, err := LoadIdentity(dir)
	if err != nil || got.NodeID != "n1" || got.NodeSecret != "s" || ClusterIDOf(dir) != "c1" || !HasIdentity(dir) {
		t.Fatalf("loaded %+v, %v", got, err)
	}
	if err := DeleteIdentity(dir); err != nil || HasIdentity(dir) {
		t.Fatalf("after delete: %v", err)
	}
	if err := DeleteIdentity(dir); err != nil {
		t.Fatalf("deleting a missing identity: %v", err)
	}
}

func TestLockIsExclusive(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	l, err := TakeLock(dir)
	if err != nil {
		t.Fatal(err)
	}
	var inUse *InUseError
	if _, err := TakeLock(dir); !errors.As(err, &inUse) || inUse.PID != os.Getpid() {
		t.Fatalf("second lock = %v, want *InUseError naming this process", err)
	}
	if pid, held, err := LockHolder(dir); err != nil || !held || pid != os.Getpid() {
		t.Fatalf("LockHolder = %d, %v, %v", pid, held, err)
	}
	l.Release()
	if _, held, err := LockHolder(dir); err != nil || held {
		t.Fatalf("LockHolder after release = %v, %v", held, err)
	}
}

func TestDiscoveryKeptForItsNodeOnly(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	acc := &managerv1.DiscoveryAccess{Addresses: []string{"a:1"}, LeafToken: "leaf", NodeToken: discovery.MintNodeToken("secret", "n1")}
	kept := &Discovery{Dir: dir}
	if err := kept.Keep(acc, time.Unix(0, 0)); err != nil {
		t.Fatal(err)
	}
	acc.Addresses[0] = "changed" // Keep took a copy
	tests := []struct {
		node string
		want bool
	}{{"n1", true}, {"n2", false}}
	for _, tc := range tests {
		d := &Discovery{Dir: dir}
		err := d.Load(tc.node)
		if got := d.Get(); (got != nil) != tc.want || (err == nil) != tc.want {
			t.Fatalf("Load for %s: %v, %v; want kept %v", tc.node, got, err, tc.want)
		}
		if tc.want && d.Get().GetAddresses()[0] != "a:1" {
			t.Fatalf("loaded %v", d.Get())
		}
	}
	if err := kept.Forget(); err != nil || kept.Get() != nil {
		t.Fatalf("Forget: %v", err)
	}
	d := &Discovery{Dir: dir}
	if err := d.Load("n1"); err != nil || d.Get() != nil {
		t.Fatalf("after Forget: %v, %v", d.Get(), err)
	}
}
