package worker_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/pkg/discovery"
)

func accessMsg(acc *managerv1.DiscoveryAccess) *managerv1.ControllerMessage {
	return &managerv1.ControllerMessage{Msg: &managerv1.ControllerMessage_DiscoveryAccess{DiscoveryAccess: acc}}
}

func TestDiscoveryAccessKept(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.run(e.config())
	if acc := a.DiscoveryAccess(); acc != nil {
		t.Fatalf("an access before any was sent: %v", acc)
	}
	c, _ := e.dial(a, noHeartbeats)

	// Refused: none, and another node's token; nothing is kept.
	seq := send(t, c, accessMsg(&managerv1.DiscoveryAccess{Addresses: []string{"r1:7400"}, LeafToken: "leaf"}))
	expectAck(t, c, seq, "INVALID_ARGUMENT")
	seq = send(t, c, accessMsg(&managerv1.DiscoveryAccess{Addresses: []string{"r1:7400"}, LeafToken: "leaf", NodeToken: discovery.MintNodeToken("tier", "someone-else")}))
	expectAck(t, c, seq, "INVALID_ARGUMENT")
	if acc := a.DiscoveryAccess(); acc != nil {
		t.Fatalf("a refused access was kept: %v", acc)
	}

	want := &managerv1.DiscoveryAccess{Addresses: []string{"r1:7400", "r2:7400"}, LeafToken: "leaf", NodeToken: discovery.MintNodeToken("tier", e.nodeID)}
	seq = send(t, c, accessMsg(want))
	expectAck(t, c, seq, "")
	if got := a.DiscoveryAccess(); !proto.Equal(got, want) {
		t.Fatalf("access %v, want %v", got, want)
	}
	// A copy: changing it changes nothing.
	a.DiscoveryAccess().NodeToken = "x"
	if got := a.DiscoveryAccess(); !proto.Equal(got, want) {
		t.Fatalf("the access returned is not a copy")
	}
	path := filepath.Join(e.dataDir, "discovery.json")
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("%s: %v %v", path, st, err)
	}

	// A newer access replaces it (a flip's new token).
	want2 := proto.Clone(want).(*managerv1.DiscoveryAccess)
	want2.NodeToken = discovery.MintNodeToken("tier-2", e.nodeID)
	seq = send(t, c, accessMsg(want2))
	expectAck(t, c, seq, "")
	if got := a.DiscoveryAccess(); !proto.Equal(got, want2) {
		t.Fatalf("access %v, want %v", got, want2)
	}

	// A restarted worker has it at once, before any Manager dials it.
	if err := a.stop(t); err != nil {
		t.Fatal(err)
	}
	b := e.run(e.config())
	if got := b.DiscoveryAccess(); !proto.Equal(got, want2) {
		t.Fatalf("after a restart: %v, want %v", got, want2)
	}
	if err := b.stop(t); err != nil {
		t.Fatal(err)
	}

	// A damaged file, or one of another node, is ignored.
	for _, content := range []string{"{not json", `{"version":1,"nodeToken":"` + discovery.MintNodeToken("tier", "other") + `"}`} {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		r := e.run(e.config())
		if got := r.DiscoveryAccess(); got != nil {
			t.Fatalf("loaded %q as %v", content, got)
		}
		if err := r.stop(t); err != nil {
			t.Fatal(err)
		}
	}
	if b, _ := os.ReadFile(path); strings.Contains(string(b), "tier-2") {
		t.Fatal("a tier secret in the file")
	}
}
