package store

import (
	"crypto/tls"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// generationMagic opens every raft connection between members, followed by
// the dialling member's cluster generation (8 bytes, big-endian).
var generationMagic = [4]byte{'N', 'M', 'G', 1}

// handshakeTimeout bounds reading a connection's opening bytes.
const handshakeTimeout = 5 * time.Second

// genLayer wraps a raft stream layer so that a member refuses raft traffic
// from a member at an older generation: a former member that comes back
// after a forced recovery (ForceStandalone) must never send the recovered
// cluster its stale log — raft would make it the leader of the newer
// members and truncate their logs to its own. The older member stays
// cut off until it discards its copy and rejoins.
type genLayer struct {
	inner raft.StreamLayer
	gen   func() uint64
	log   *slog.Logger

	accepted  chan net.Conn
	done      chan struct{}
	closeOnce sync.Once

	// conns are the connections dialled and admitted and not yet closed:
	// Close closes them all, so that raft's replication to a peer that has
	// gone silent without closing its end (a member stopped in a process
	// that lives on) cannot hold up a shutdown — raft joins its
	// replication goroutines before it closes its transport, and a
	// pipeline whose peer never answers drains at one transport timeout
	// per request in flight.
	mu    sync.Mutex
	conns map[*trackedConn]struct{}
}

// trackedConn is a connection genLayer closes when it is closed.
type trackedConn struct {
	net.Conn
	g *genLayer
}

func (c *trackedConn) Close() error {
	err := c.Conn.Close()
	c.g.mu.Lock()
	delete(c.g.conns, c) // a no-op after the first, or once the layer is closed
	c.g.mu.Unlock()
	return err
}

// track registers c, or closes it and returns nil when the layer is closed.
func (g *genLayer) track(c net.Conn) *trackedConn {
	t := &trackedConn{Conn: c, g: g}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.conns == nil {
		_ = c.Close()
		return nil
	}
	g.conns[t] = struct{}{}
	return t
}

func newGenLayer(inner raft.StreamLayer, gen func() uint64, log *slog.Logger) *genLayer {
	g := &genLayer{inner: inner, gen: gen, log: log, accepted: make(chan net.Conn), done: make(chan struct{}),
		conns: map[*trackedConn]struct{}{}}
	go g.acceptLoop()
	return g
}

// Dial opens a connection and introduces it with this member's generation.
func (g *genLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	c, err := g.inner.Dial(addr, timeout)
	if err != nil {
		return nil, err
	}
	var hdr [12]byte
	copy(hdr[:4], generationMagic[:])
	binary.BigEndian.PutUint64(hdr[4:], g.gen())
	_ = c.SetWriteDeadline(time.Now().Add(handshakeTimeout))
	if _, err := c.Write(hdr[:]); err != nil {
		_ = c.Close()
		return nil, err
	}
	_ = c.SetWriteDeadline(time.Time{})
	t := g.track(c)
	if t == nil {
		return nil, net.ErrClosed
	}
	return t, nil
}

// acceptLoop accepts connections and checks each one's introduction on its
// own goroutine (a slow peer does not hold up the others).
func (g *genLayer) acceptLoop() {
	for {
		c, err := g.inner.Accept()
		if err != nil {
			select {
			case <-g.done:
				return
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		go g.admit(c)
	}
}

func (g *genLayer) admit(c net.Conn) {
	var hdr [12]byte
	_ = c.SetReadDeadline(time.Now().Add(handshakeTimeout))
	if _, err := io.ReadFull(c, hdr[:]); err != nil || [4]byte(hdr[:4]) != generationMagic {
		g.log.Warn("refused a raft connection without a member's introduction", "peer", c.RemoteAddr())
		_ = c.Close()
		return
	}
	peer, mine := binary.BigEndian.Uint64(hdr[4:]), g.gen()
	if peer < mine {
		g.log.Warn("refused raft traffic from a member at an older generation (a former member after a forced recovery); it must discard its copy and rejoin",
			"peer", c.RemoteAddr(), "peer_generation", peer, "generation", mine)
		_ = c.Close()
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	t := g.track(c)
	if t == nil {
		return
	}
	select {
	case g.accepted <- t:
	case <-g.done:
		_ = t.Close()
	}
}

// Accept returns the next admitted connection.
func (g *genLayer) Accept() (net.Conn, error) {
	select {
	case c := <-g.accepted:
		return c, nil
	case <-g.done:
		return nil, net.ErrClosed
	}
}

// Close stops accepting and closes every connection still open.
func (g *genLayer) Close() error {
	var err error
	g.closeOnce.Do(func() {
		close(g.done)
		err = g.inner.Close()
		g.mu.Lock()
		open := g.conns
		g.conns = nil
		g.mu.Unlock()
		for c := range open {
			_ = c.Conn.Close()
		}
	})
	return err
}

// Addr is the inner layer's (advertised) address.
func (g *genLayer) Addr() net.Addr { return g.inner.Addr() }

// tcpLayer is raft's stream layer over TCP, advertising a host:port as
// given (a name stays a name: a container's address may change across
// restarts, its name does not).
type tcpLayer struct {
	ln        net.Listener
	advertise net.Addr
	tls       *tls.Config // nil: plain TCP
}

// hostAddr is a net.Addr that is a host:port string.
type hostAddr string

func (a hostAddr) Network() string { return "tcp" }
func (a hostAddr) String() string  { return string(a) }

func newTCPLayer(bind, advertise string, tlsCfg *tls.Config) (*tcpLayer, error) {
	ln, err := net.Listen("tcp", bind)
	if err != nil {
		return nil, err
	}
	var adv net.Addr = ln.Addr()
	if advertise != "" {
		if _, _, err := net.SplitHostPort(advertise); err != nil {
			_ = ln.Close()
			return nil, err
		}
		adv = hostAddr(advertise)
	} else if tcp, ok := ln.Addr().(*net.TCPAddr); ok && tcp.IP.IsUnspecified() {
		_ = ln.Close()
		return nil, errors.New("listening on every address: set the advertised raft address (raftAdvertise, or this member's entry in clusterNodes)")
	}
	if tlsCfg != nil {
		ln = tls.NewListener(ln, tlsCfg)
	}
	return &tcpLayer{ln: ln, advertise: adv, tls: tlsCfg}, nil
}

func (t *tcpLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	d := &net.Dialer{Timeout: timeout}
	if t.tls == nil {
		return d.Dial("tcp", string(addr))
	}
	// The handshake is part of the dial: a peer that is not a member fails
	// here, not on raft's first message.
	return tls.DialWithDialer(d, "tcp", string(addr), t.tls)
}
func (t *tcpLayer) Accept() (net.Conn, error) { return t.ln.Accept() }
func (t *tcpLayer) Close() error              { return t.ln.Close() }
func (t *tcpLayer) Addr() net.Addr            { return t.advertise }
