package testcluster

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"path/filepath"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/norsk-go/norsk-manager/internal/manager"
	"github.com/norsk-go/norsk-manager/internal/runtime/process"
	"github.com/norsk-go/norsk-manager/internal/testcluster/faultnet"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// Member is one in-process Manager member. Stop and Start it like an
// operator stops and starts the daemon; its addresses stay the same.
type Member struct {
	c       *Cluster
	Name    string
	Witness bool
	Dir     string
	// ClusterState is what the member starts with ("new" or "existing").
	ClusterState string

	apiAddr  string
	raftAddr string
	// apiHold and raftHold hold the member's ports from the moment they
	// are chosen until its first start takes them over, so that no other
	// listener (another cluster's, another test process's) takes them
	// meanwhile; nil once taken.
	apiHold, raftHold net.Listener

	mu     sync.Mutex
	srv    *manager.Server
	client *norsk.Manager
	// Extra, if set, adjusts the member's configuration before each start.
	Extra func(*manager.Config)
}

// Clustered reports whether the cluster has more than one member.
func (c *Cluster) Clustered() bool { return c.opts.Members+c.opts.Witnesses > 1 }

// newMembers makes the members' configuration: their listeners' addresses
// are taken now (port 0), so every member knows the others'.
func (c *Cluster) newMembers() {
	c.t.Helper()
	if !c.Clustered() {
		c.Members = []*Member{{c: c, Name: "m1", Dir: filepath.Join(c.Dir, "manager"), apiAddr: "127.0.0.1:0"}}
		return
	}
	c.Net = faultnet.New()
	for i := range c.opts.Members + c.opts.Witnesses {
		m := &Member{c: c, Name: fmt.Sprintf("m%d", i+1)}
		if i >= c.opts.Members {
			m.Name, m.Witness = fmt.Sprintf("w%d", i-c.opts.Members+1), true
		}
		m.Dir = filepath.Join(c.Dir, "members", m.Name)
		m.reservePorts()
		c.Net.Register(m.Name, m.apiAddr)
		c.Net.Register(m.Name, m.raftAddr)
		c.Members = append(c.Members, m)
	}
}

// reservePorts chooses the member's API and raft addresses and holds them
// (every member must know the others' addresses before any starts): the
// listeners stay open until the member's first start serves on them, and
// are closed with the test if it never does.
func (m *Member) reservePorts() {
	m.apiHold = reserve(m.c.t)
	m.raftHold = reserve(m.c.t)
	m.apiAddr, m.raftAddr = m.apiHold.Addr().String(), m.raftHold.Addr().String()
	m.c.t.Cleanup(func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		for _, ln := range []net.Listener{m.apiHold, m.raftHold} {
			if ln != nil {
				_ = ln.Close()
			}
		}
	})
}

// takeHold hands over a held listener (nil once taken).
func (m *Member) takeHold(ln *net.Listener) net.Listener {
	m.mu.Lock()
	defer m.mu.Unlock()
	l := *ln
	*ln = nil
	return l
}

// reserve opens a loopback listener on a port drawn below the kernel's
// ephemeral range (32768 and up on Linux): a port the kernel hands out
// for ":0" is soon handed to a client socket of the same busy test run,
// which would then hold the member's port when it restarts on it.
func reserve(t interface{ Fatalf(string, ...any) }) net.Listener {
	var last error
	for range 200 {
		port, ok := drawPort()
		if !ok {
			continue
		}
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", fmt.Sprint(port)))
		if err == nil {
			return ln
		}
		last = err
	}
	t.Fatalf("no free port in [%d, %d): %v", freePortLow, freePortHigh, last)
	return nil
}

// FreePort is a TCP port free now on host, drawn below the kernel's
// ephemeral range (see reserve), for a listener that must be known before
// it is opened.
func FreePort(t interface{ Fatalf(string, ...any) }, host string) int {
	var last error
	for range 200 {
		port, ok := drawPort()
		if !ok {
			continue
		}
		ln, err := net.Listen("tcp", net.JoinHostPort(host, fmt.Sprint(port)))
		if err != nil {
			last = err
			continue
		}
		_ = ln.Close()
		return port
	}
	t.Fatalf("no free port in [%d, %d): %v", freePortLow, freePortHigh, last)
	return 0
}

// handedOut is every port reserve and FreePort have drawn in this process.
// A port is drawn once: one a test let go of (a member stopped, a
// FreePort whose process has not bound it yet) looks free, and handing it
// to another test would have two listeners want it.
var handedOut struct {
	sync.Mutex
	ports map[int]bool
}

// drawPort draws a port from the range not drawn before in this process.
func drawPort() (int, bool) {
	port := freePortLow + rand.IntN(freePortHigh-freePortLow)
	handedOut.Lock()
	defer handedOut.Unlock()
	if handedOut.ports[port] {
		return 0, false
	}
	if handedOut.ports == nil {
		handedOut.ports = map[int]bool{}
	}
	handedOut.ports[port] = true
	return port, true
}

// The range reserve and FreePort draw from: below Linux's ephemeral ports,
// and below the process runtime's range for jobs' ephemeral host ports
// (process.EphemeralPortMin), so a test's listener never takes a port a
// job was just given.
const (
	freePortLow  = 20000
	freePortHigh = process.EphemeralPortMin
)

// ClusterNodes is the members as config.yaml names them.
func (c *Cluster) ClusterNodes() []manager.ClusterNode {
	var out []manager.ClusterNode
	for _, m := range c.Members {
		if m.ClusterState == manager.ClusterStateExisting {
			continue // added at run time
		}
		out = append(out, manager.ClusterNode{Name: m.Name, Raft: m.raftAddr, API: "http://" + m.apiAddr, Witness: m.Witness})
	}
	return out
}

// AddMember makes a new member (not started): add it with
// AddClusterMember, then Start it; it joins the running cluster.
func (c *Cluster) AddMember(name string, witness bool) *Member {
	c.t.Helper()
	m := &Member{c: c, Name: name, Witness: witness, Dir: filepath.Join(c.Dir, "members", name),
		ClusterState: manager.ClusterStateExisting}
	m.reservePorts()
	c.Net.Register(m.Name, m.apiAddr)
	c.Net.Register(m.Name, m.raftAddr)
	c.Members = append(c.Members, m)
	return m
}

// Member returns the member named name.
func (c *Cluster) Member(name string) *Member {
	for _, m := range c.Members {
		if m.Name == name {
			return m
		}
	}
	c.t.Fatalf("no member %q", name)
	return nil
}

// Server is the member's running server (nil while stopped).
func (m *Member) Server() *manager.Server {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.srv
}

// Client is an SDK client of this member (nil while stopped).
func (m *Member) Client() *norsk.Manager {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.client
}

// URL is the member's API URL.
func (m *Member) URL() string {
	if s := m.Server(); s != nil {
		return s.URL()
	}
	return "http://" + m.apiAddr
}

// Running reports whether the member is started.
func (m *Member) Running() bool { return m.Server() != nil }

// Start starts the member on its data directory and connects its client
// (in a new cluster, once a primary has made the admin token).
func (m *Member) Start() {
	m.c.t.Helper()
	m.startServer()
	m.connect()
}

// startServer starts the member's server.
func (m *Member) startServer() {
	c := m.c
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var s *manager.Server
	var err error
	// The port of a just-closed listener can take a moment to be free.
	for attempt := 0; ; attempt++ {
		s, err = manager.New(ctx, m.config())
		if err == nil || attempt == 50 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		c.t.Fatalf("start member %s: %v", m.Name, err)
	}
	m.mu.Lock()
	m.srv, m.apiAddr = s, s.Addr()
	m.mu.Unlock()
}

// connect connects the member's client.
func (m *Member) connect() {
	c := m.c
	c.t.Helper()
	s := m.Server()
	ctx, cancel := context.WithTimeout(context.Background(), WaitTimeout)
	defer cancel()
	// A new cluster's members answer once a primary has made the token.
	var cl *norsk.Manager
	var err error
	for {
		cl, err = norsk.Connect(ctx, norsk.Settings{URL: s.URL(), Token: c.token, Logger: c.opts.Logger, CAFingerprint: s.CAFingerprint()})
		if err == nil || ctx.Err() != nil || !c.Clustered() {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		_ = s.Close()
		c.t.Fatalf("connect to member %s: %v", m.Name, err)
	}
	m.mu.Lock()
	m.client = cl
	m.mu.Unlock()
}

func (m *Member) config() manager.Config {
	c := m.c
	cfg := manager.Config{
		NodeName:          m.Name,
		DataDir:           m.Dir,
		Listen:            m.apiAddr,
		Listener:          m.takeHold(&m.apiHold),
		LostGrace:         c.opts.LostGrace,
		HeartbeatInterval: c.opts.HeartbeatInterval,
		Clock:             c.opts.Clock,
		Logger:            c.opts.Logger.With("process", m.Name),
		BootstrapToken:    c.token,
		TLS:               c.opts.TLS,

		AccessReplicaKeysFile: c.opts.AccessReplicaKeysFile,
	}
	if c.Clustered() {
		cfg.ClusterNodes = c.ClusterNodes()
		if m.ClusterState == manager.ClusterStateExisting {
			cfg.ClusterNodes = append(cfg.ClusterNodes, manager.ClusterNode{Name: m.Name, Raft: m.raftAddr, API: "http://" + m.apiAddr, Witness: m.Witness})
		}
		cfg.ClusterState = m.ClusterState
		cfg.ClusterSecret = c.secret
		cfg.Witness = m.Witness
		cfg.RaftAdvertise = m.raftAddr
		cfg.MemberHTTPClient = c.Net.HTTPClient(m.Name, nil)
		cfg.RaftStreamLayer = func() (raft.StreamLayer, error) {
			// The port of a just-closed listener can take a moment to be free.
			if ln := m.takeHold(&m.raftHold); ln != nil {
				return c.Net.StreamLayer(m.Name, ln), nil
			}
			var err error
			for range 50 {
				var ln net.Listener
				if ln, err = net.Listen("tcp", m.raftAddr); err == nil {
					return c.Net.StreamLayer(m.Name, ln), nil
				}
				time.Sleep(50 * time.Millisecond)
			}
			return nil, err
		}
	}
	c.mockProvider(&cfg)
	c.cloudProviders(&cfg)
	c.chProvider(&cfg)
	if c.opts.ManagerConfig != nil {
		c.opts.ManagerConfig(&cfg)
	}
	if m.Extra != nil {
		m.Extra(&cfg)
	}
	return cfg
}

// Stop closes the member cleanly; its store stays on disk.
func (m *Member) Stop() {
	m.mu.Lock()
	s, cl := m.srv, m.client
	m.srv, m.client = nil, nil
	m.mu.Unlock()
	if cl != nil {
		_ = cl.Close()
	}
	if s != nil {
		if err := s.Close(); err != nil {
			m.c.t.Errorf("stop member %s: %v", m.Name, err)
		}
	}
}

// Restart stops and starts the member.
func (m *Member) Restart() {
	m.c.t.Helper()
	m.Stop()
	m.Start()
}

// Primary waits until one running member is the primary and has finished
// taking over, and returns it.
func (c *Cluster) Primary() *Member {
	c.t.Helper()
	var p *Member
	c.Eventually("a primary", func() bool {
		for _, m := range c.Members {
			if s := m.Server(); s != nil && s.IsPrimaryReady() {
				p = m
				return true
			}
		}
		return false
	})
	return p
}

// anyClient is a running member's client (the primary's if there is one).
func (c *Cluster) anyClient() *norsk.Manager {
	var first *norsk.Manager
	for _, m := range c.Members {
		s, cl := m.Server(), m.Client()
		if s == nil || cl == nil {
			continue
		}
		if s.IsPrimaryReady() {
			return cl
		}
		if first == nil && !m.Witness {
			first = cl
		}
	}
	return first
}
