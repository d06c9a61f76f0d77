package store

import (
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// TestGenLayerCloseCutsConnections: closing the stream layer closes the
// connections it dialled and admitted, so that a raft goroutine blocked
// on a peer that went silent (its end open, nothing sent) returns at once
// instead of waiting out its timeouts, and a stopped member's shutdown
// does not hang on it.
func TestGenLayerCloseCutsConnections(t *testing.T) {
	t.Parallel()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	newLayer := func() *genLayer {
		tl, err := newTCPLayer("127.0.0.1:0", "", nil)
		if err != nil {
			t.Fatal(err)
		}
		g := newGenLayer(tl, func() uint64 { return 1 }, quiet)
		t.Cleanup(func() { _ = g.Close() })
		return g
	}
	a, b := newLayer(), newLayer()
	dialled, err := a.Dial(raft.ServerAddress(b.Addr().String()), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	admitted, err := b.Accept()
	if err != nil {
		t.Fatal(err)
	}
	// Both ends are open and silent: a read on either would block.
	read := func(c net.Conn) chan error {
		ch := make(chan error, 1)
		go func() { _, err := c.Read(make([]byte, 1)); ch <- err }()
		return ch
	}
	dialledRead, admittedRead := read(dialled), read(admitted)
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	for name, ch := range map[string]chan error{"dialled": dialledRead, "admitted": admittedRead} {
		select {
		case err := <-ch:
			if err == nil {
				t.Errorf("%s connection: a read after Close succeeded", name)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%s connection: still open after the layer was closed", name)
		}
	}
	if _, err := a.Dial(raft.ServerAddress(b.Addr().String()), time.Second); err == nil {
		t.Error("a closed layer dialled a closed one")
	}
}
