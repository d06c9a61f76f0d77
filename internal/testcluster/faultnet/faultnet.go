// Package faultnet is a network between in-process Manager members that a
// test can cut: every member's raft traffic (a raft.StreamLayer) and its
// calls to the other members (an *http.Client) pass through it, and
// Partition, Isolate and Heal cut and restore links between members.
//
// A cut link refuses new connections and breaks the ones open (both
// directions: the dialler's side is closed, so the peer reads EOF). It is
// for tests only.
package faultnet

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// Network routes connections between named members. Safe for concurrent use.
type Network struct {
	mu      sync.Mutex
	byAddr  map[string]string // listener address → member
	blocked map[link]bool
	conns   map[link]map[*conn]struct{}
}

type link struct{ from, to string }

// New returns a network with every link up.
func New() *Network {
	return &Network{byAddr: map[string]string{}, blocked: map[link]bool{}, conns: map[link]map[*conn]struct{}{}}
}

// Register says that connections to addr reach member name.
func (n *Network) Register(name, addr string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.byAddr[addr] = name
}

// Partition cuts every link between a member of a and a member of b, both
// ways.
func (n *Network) Partition(a, b []string) {
	n.mu.Lock()
	var cut []*conn
	for _, x := range a {
		for _, y := range b {
			for _, l := range []link{{x, y}, {y, x}} {
				n.blocked[l] = true
				for c := range n.conns[l] {
					cut = append(cut, c)
				}
			}
		}
	}
	n.mu.Unlock()
	for _, c := range cut {
		_ = c.Close()
	}
}

// Isolate cuts name off from every other member registered.
func (n *Network) Isolate(name string) {
	n.mu.Lock()
	var others []string
	seen := map[string]bool{name: true}
	for _, m := range n.byAddr {
		if !seen[m] {
			seen[m] = true
			others = append(others, m)
		}
	}
	n.mu.Unlock()
	n.Partition([]string{name}, others)
}

// Heal restores every link.
func (n *Network) Heal() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.blocked = map[link]bool{}
}

// Cut reports whether the link from → to is cut.
func (n *Network) Cut(from, to string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.blocked[link{from, to}]
}

// dial connects member from to addr, unless the link is cut.
func (n *Network) dial(ctx context.Context, from, addr string) (net.Conn, error) {
	n.mu.Lock()
	to, known := n.byAddr[addr]
	l := link{from, to}
	cut := known && n.blocked[l]
	n.mu.Unlock()
	if cut {
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: fmt.Errorf("faultnet: the link %s → %s is cut", from, to)}
	}
	var d net.Dialer
	raw, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	c := &conn{Conn: raw, n: n, l: l}
	n.mu.Lock()
	if n.blocked[l] {
		n.mu.Unlock()
		_ = raw.Close()
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: fmt.Errorf("faultnet: the link %s → %s is cut", from, to)}
	}
	if n.conns[l] == nil {
		n.conns[l] = map[*conn]struct{}{}
	}
	n.conns[l][c] = struct{}{}
	n.mu.Unlock()
	return c, nil
}

// conn is a connection the network can cut.
type conn struct {
	net.Conn
	n    *Network
	l    link
	once sync.Once
}

func (c *conn) Close() error {
	c.once.Do(func() {
		c.n.mu.Lock()
		delete(c.n.conns[c.l], c)
		c.n.mu.Unlock()
	})
	return c.Conn.Close()
}

// StreamLayer is member name's raft stream layer over ln (which the network
// learns is name's).
func (n *Network) StreamLayer(name string, ln net.Listener) raft.StreamLayer {
	n.Register(name, ln.Addr().String())
	return &layer{n: n, name: name, ln: ln}
}

type layer struct {
	n    *Network
	name string
	ln   net.Listener
}

func (l *layer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return l.n.dial(ctx, l.name, string(addr))
}

func (l *layer) Accept() (net.Conn, error) { return l.ln.Accept() }
func (l *layer) Close() error              { return l.ln.Close() }
func (l *layer) Addr() net.Addr            { return l.ln.Addr() }

// HTTPClient is member name's client for calling the other members (HTTP/2
// without TLS, or over TLS trusting roots).
func (n *Network) HTTPClient(name string, roots *tls.Config) *http.Client {
	var p http.Protocols
	p.SetHTTP2(true)
	p.SetUnencryptedHTTP2(true)
	tr := &http.Transport{
		Protocols: &p,
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			return n.dial(ctx, name, addr)
		},
		TLSClientConfig: roots,
	}
	return &http.Client{Transport: tr}
}
