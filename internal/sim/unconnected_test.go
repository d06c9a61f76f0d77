package sim

import (
	"context"
	"strings"
	"testing"

	"github.com/norsk-go/norsk-manager/internal/worker"
)

// Unconnected names the registered nodes without a stream, and why a node
// refused its last hello: what a failover that never settles reports.
func TestUnconnectedNamesNodesWithoutAStream(t *testing.T) {
	t.Parallel()
	f := &Fleet{}
	add := func(id string) *node {
		n := newNode(f, "127.0.0.1:1")
		n.setIdentity(id, "secret-"+id)
		f.nodes = append(f.nodes, n)
		return n
	}
	streaming, refusing := add("node-a"), add("node-b")
	add("node-c")                                        // never dialled
	f.nodes = append(f.nodes, newNode(f, "127.0.0.1:1")) // a registration given up: no id

	ctx := context.Background()
	if _, err := streaming.open(ctx, worker.Epoch{Generation: 1, Term: 2}); err != nil {
		t.Fatal(err)
	}
	s, err := refusing.open(ctx, worker.Epoch{Generation: 1, Term: 3})
	if err != nil {
		t.Fatal(err)
	}
	refusing.close(s)
	if _, err := refusing.open(ctx, worker.Epoch{Generation: 1, Term: 2}); err == nil {
		t.Fatal("a hello from an older term was accepted")
	}

	got := f.Unconnected(10)
	if len(got) != 2 {
		t.Fatalf("Unconnected = %q, want node-b and node-c", got)
	}
	if !strings.HasPrefix(got[0], "node-b (") || !strings.Contains(got[0], "term 2 was refused") || !strings.Contains(got[0], "follows generation 1 term 3") {
		t.Errorf("Unconnected[0] = %q, want node-b with its refusal", got[0])
	}
	if got[1] != "node-c" {
		t.Errorf("Unconnected[1] = %q, want node-c", got[1])
	}
	if got := f.Unconnected(1); len(got) != 1 {
		t.Errorf("Unconnected(1) = %q, want one", got)
	}
}
