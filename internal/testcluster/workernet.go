package testcluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/norsk-go/norsk-manager/internal/runtime/process"
	"github.com/norsk-go/norsk-manager/internal/worker"
	"github.com/norsk-go/norsk-manager/pkg/certpin"
)

// A Link is one worker's network path to the Manager members, there when
// the cluster was made with Options.WorkerLinks: the Manager dials the
// worker's NodeController through a proxy the link owns (the address the
// worker advertises), and the worker calls the Manager API (every member,
// the ones a hello names included) through the link's dialer. Cut severs
// both directions at once and Heal restores them; the worker's agent, its
// processes and its other connections are untouched.
//
// A link lives as long as its cluster: the worker keeps its advertised
// address across restarts.
type Link struct {
	w  *Worker
	ln net.Listener
	hc *http.Client

	mu     sync.Mutex
	mode   CutMode
	healed chan struct{} // closed when a silent cut ends
	agent  *worker.Agent // the agent connections are forwarded to
	conns  map[*linkConn]struct{}
	// deferred are connections closed during a silent cut: their sockets
	// stay open (a dead host sends no FIN) until the cut ends.
	deferred []net.Conn
	// faults degrade the traffic while the link is up (Degrade).
	faults Faults
	closed bool
	wg     sync.WaitGroup
}

// Faults degrade a link that is up, both ways, on the connections the
// Manager opens to the worker (its NodeController stream): each chunk of
// bytes is held for Delay plus a uniform random part of Jitter, and a
// fraction StallRate of chunks is held Stall longer — a lost segment that
// waits for its retransmission, holding up what follows it (TCP delivers
// in order). Delays overlap as on a real path: they add latency, not a
// queue of their own. The zero Faults is a clean link.
type Faults struct {
	Delay, Jitter time.Duration
	StallRate     float64
	Stall         time.Duration
}

// Degrade sets the link's faults (the zero Faults: none). It applies to
// bytes read from now on, open connections included.
func (l *Link) Degrade(f Faults) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.faults = f
}

// lag is how long the next chunk is held.
func (l *Link) lag() time.Duration {
	l.mu.Lock()
	f := l.faults
	l.mu.Unlock()
	d := f.Delay
	if f.Jitter > 0 {
		d += rand.N(f.Jitter)
	}
	if f.StallRate > 0 && rand.Float64() < f.StallRate {
		d += f.Stall
	}
	return d
}

// CutMode is how a cut link fails.
type CutMode int

const (
	// linkUp: the link carries traffic.
	linkUp CutMode = iota
	// CutRefuse resets every open connection and refuses new ones: both
	// sides notice at once (a firewall rejecting, a crashed router
	// answering with resets).
	CutRefuse
	// CutSilent closes nothing: every byte either way is held and new
	// connections get no answer until Heal, when the held traffic flows
	// again (a pulled cable, a dead switch). The sides notice only by
	// their own timeouts. Nothing the worker's side closes meanwhile
	// reaches the Manager either (a dead host sends no FIN): those
	// sockets are closed when the cut ends.
	CutSilent
)

func (m CutMode) String() string {
	switch m {
	case linkUp:
		return "up"
	case CutRefuse:
		return "refuse"
	case CutSilent:
		return "silent"
	}
	return fmt.Sprintf("CutMode(%d)", int(m))
}

// Link is the worker's link (nil unless Options.WorkerLinks).
func (w *Worker) Link() *Link { return w.link }

// newAgent makes the worker's agent from cfg, routed through its link when
// the cluster has links.
func (w *Worker) newAgent(cfg worker.Config) (*worker.Agent, error) {
	if !w.c.opts.WorkerLinks {
		return worker.New(cfg)
	}
	if w.link == nil {
		l, err := newLink(w)
		if err != nil {
			return nil, err
		}
		w.link = l
	}
	cfg.Advertise = w.link.ln.Addr().String()
	cfg.HTTPClient = w.link.hc
	a, err := worker.New(cfg)
	if err != nil {
		return nil, err
	}
	w.link.mu.Lock()
	w.link.agent = a
	w.link.mu.Unlock()
	return a, nil
}

func newLink(w *Worker) (*Link, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("link of %s: %w", w.Name, err)
	}
	l := &Link{w: w, ln: ln, conns: map[*linkConn]struct{}{}}
	var tlsCfg *tls.Config
	if fp := w.c.Manager().CAFingerprint(); fp != "" {
		if tlsCfg, err = certpin.ClientConfig(certpin.Options{Fingerprint: fp}); err != nil {
			_ = ln.Close()
			return nil, fmt.Errorf("link of %s: %w", w.Name, err)
		}
	}
	// The same client the worker makes for itself (HTTP/2, cleartext with
	// prior knowledge for http:// URLs), dialling through the link.
	var p http.Protocols
	p.SetHTTP2(true)
	p.SetUnencryptedHTTP2(true)
	l.hc = &http.Client{Transport: &http.Transport{
		Protocols:       &p,
		DialContext:     l.dial,
		TLSClientConfig: tlsCfg,
	}}
	l.wg.Add(1)
	go l.serve()
	return l, nil
}

// Cut severs the worker from every Manager member, both ways, in mode
// (CutRefuse or CutSilent).
func (l *Link) Cut(mode CutMode) {
	if mode != CutRefuse && mode != CutSilent {
		panic(fmt.Sprintf("testcluster: Link.Cut(%v)", mode))
	}
	l.mu.Lock()
	var deferred []net.Conn
	if l.mode == CutSilent && mode != CutSilent {
		close(l.healed)
		deferred, l.deferred = l.deferred, nil
	}
	if mode == CutSilent && l.mode != CutSilent {
		l.healed = make(chan struct{})
	}
	l.mode = mode
	var open []*linkConn
	if mode == CutRefuse {
		for c := range l.conns {
			open = append(open, c)
		}
	}
	l.mu.Unlock()
	for _, c := range open {
		_ = c.Close()
	}
	for _, c := range deferred {
		_ = c.Close()
	}
}

// Heal restores the link: new connections pass again and, after a silent
// cut, the held traffic flows on.
func (l *Link) Heal() {
	l.mu.Lock()
	var deferred []net.Conn
	if l.mode == CutSilent {
		close(l.healed)
		deferred, l.deferred = l.deferred, nil
	}
	l.mode = linkUp
	l.mu.Unlock()
	for _, c := range deferred {
		_ = c.Close()
	}
}

// Mode is the link's state: 0 while up, else how it is cut.
func (l *Link) Mode() CutMode {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mode
}

// close ends the link for good (the cluster's shutdown).
func (l *Link) close() {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return
	}
	l.closed = true
	if l.mode == CutSilent {
		close(l.healed)
	}
	l.mode = linkUp
	open := make([]*linkConn, 0, len(l.conns))
	for c := range l.conns {
		open = append(open, c)
	}
	deferred := l.deferred
	l.deferred = nil
	l.mu.Unlock()
	_ = l.ln.Close()
	for _, c := range open {
		_ = c.Close()
	}
	for _, c := range deferred {
		_ = c.Close()
	}
	l.hc.CloseIdleConnections()
	l.wg.Wait()
}

// errCut is what a dial over a refusing link returns.
func (l *Link) errCut(addr string) error {
	return &net.OpError{Op: "dial", Net: "tcp", Addr: nil,
		Err: fmt.Errorf("testcluster: the link of %s is cut (dialling %s)", l.w.Name, addr)}
}

// dial is the worker's dialler to the Manager API.
func (l *Link) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	for {
		l.mu.Lock()
		mode, healed, closed := l.mode, l.healed, l.closed
		l.mu.Unlock()
		switch {
		case closed:
			return nil, net.ErrClosed
		case mode == CutRefuse:
			return nil, l.errCut(addr)
		case mode == CutSilent:
			// A dial into a black hole: no answer until the cut heals or
			// the caller gives up.
			select {
			case <-healed:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		var d net.Dialer
		raw, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		c, ok := l.track(raw)
		if !ok {
			_ = raw.Close()
			continue // cut meanwhile: look again
		}
		return c, nil
	}
}

// serve accepts the Manager's connections to the worker's advertised
// address and forwards them to the agent's listener.
func (l *Link) serve() {
	defer l.wg.Done()
	for {
		in, err := l.ln.Accept()
		if err != nil {
			return
		}
		c, ok := l.track(in)
		if !ok {
			_ = in.Close() // refused
			continue
		}
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			l.forward(c)
		}()
	}
}

// forward pipes c (the Manager's side) to the agent's listener.
func (l *Link) forward(c *linkConn) {
	defer c.Close()
	l.mu.Lock()
	a := l.agent
	l.mu.Unlock()
	addr := ""
	if a != nil {
		addr = a.Addr()
	}
	if addr == "" {
		return // no agent listening (yet): as a connection refused
	}
	out, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return
	}
	defer out.Close()
	done := make(chan struct{}, 2)
	go func() { _, _ = l.copyDelayed(out, c); closeWrite(out); done <- struct{}{} }()
	go func() {
		_, _ = l.copyDelayed(c, out)
		if c.l.pass(c) == nil { // the worker's FIN, once it may pass
			closeWrite(c.Conn)
		}
		done <- struct{}{}
	}()
	<-done
	<-done
}

// copyDelayed copies src to dst until either fails (a failed write closes
// src), each chunk held for the link's lag (Faults) from when it was read,
// in order.
func (l *Link) copyDelayed(dst, src net.Conn) (int64, error) {
	type chunk struct {
		b   []byte
		due time.Time
		err error
	}
	q := make(chan chunk, 1024)
	l.wg.Add(1)
	go func() { // reads ahead, so that delays overlap
		defer l.wg.Done()
		defer close(q)
		buf := make([]byte, 32<<10)
		var last time.Time
		for {
			k, err := src.Read(buf)
			due := time.Now().Add(l.lag())
			if due.Before(last) {
				due = last // in order: never before the chunk ahead
			}
			last = due
			q <- chunk{b: append([]byte(nil), buf[:k]...), due: due, err: err}
			if err != nil {
				return
			}
		}
	}()
	var n int64
	for c := range q {
		if d := time.Until(c.due); d > 0 {
			time.Sleep(d)
		}
		if len(c.b) > 0 {
			w, werr := dst.Write(c.b)
			n += int64(w)
			if werr != nil {
				_ = src.Close()
				l.wg.Add(1)
				go func() { // until the reader sees the close
					defer l.wg.Done()
					for range q {
					}
				}()
				return n, werr
			}
		}
		if c.err != nil {
			return n, c.err
		}
	}
	return n, nil
}

func closeWrite(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
		return
	}
	_ = c.Close()
}

// track wraps raw as a connection of the link; false if the link refuses
// connections now.
func (l *Link) track(raw net.Conn) (*linkConn, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed || l.mode == CutRefuse {
		return nil, false
	}
	c := &linkConn{Conn: raw, l: l, done: make(chan struct{})}
	l.conns[c] = struct{}{}
	return c, true
}

// pass waits while the link is silent; an error once the connection must
// fail instead.
func (l *Link) pass(c *linkConn) error {
	for {
		l.mu.Lock()
		mode, healed := l.mode, l.healed
		l.mu.Unlock()
		switch mode {
		case linkUp:
			return nil
		case CutRefuse:
			return net.ErrClosed
		}
		select {
		case <-healed:
		case <-c.done:
			return net.ErrClosed
		}
	}
}

// linkConn is a connection through a link: its traffic passes only while
// the link is up.
type linkConn struct {
	net.Conn
	l    *Link
	done chan struct{}
	once sync.Once
}

func (c *linkConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if perr := c.l.pass(c); perr != nil { // data, an EOF or a reset alike
		return 0, perr
	}
	return n, err
}

func (c *linkConn) Write(p []byte) (int, error) {
	if err := c.l.pass(c); err != nil {
		return 0, err
	}
	return c.Conn.Write(p)
}

// Close closes the connection; during a silent cut only its end on this
// side: the socket stays open until the cut ends.
func (c *linkConn) Close() error {
	first := false
	c.once.Do(func() {
		first = true
		close(c.done)
	})
	if !first {
		return nil
	}
	l := c.l
	l.mu.Lock()
	delete(l.conns, c)
	if l.mode == CutSilent && !l.closed {
		l.deferred = append(l.deferred, c.Conn)
		l.mu.Unlock()
		return nil
	}
	l.mu.Unlock()
	return c.Conn.Close()
}

// healLinks heals every worker's link (the cluster's shutdown: the
// deletions must reach the workers).
func (c *Cluster) healLinks() {
	for _, w := range c.Workers {
		if w.link != nil {
			w.link.Heal()
		}
	}
}

// closeLinks ends every worker's link.
func (c *Cluster) closeLinks() {
	for _, w := range c.Workers {
		if w.link != nil {
			w.link.close()
		}
	}
}

// Kill kills the worker's node as a dead server dies: its agent stops and
// every process of its instances is killed (SIGKILL to each process
// group), so that nothing of the node runs on. The agent is stopped first,
// so it never reports the processes' deaths: to the Manager the node just
// went away. The node's data directory stays, so Start brings the worker
// back as a rebooted server would (finding its instances dead). Process
// runtime only.
func (w *Worker) Kill() error {
	if w.c.opts.Runtime != "process" {
		return fmt.Errorf("Kill %s: only for the process runtime (this cluster runs %s)", w.Name, w.c.opts.Runtime)
	}
	err := w.Stop()
	for _, pid := range w.PIDs() {
		if kerr := syscall.Kill(-pid, syscall.SIGKILL); kerr != nil && !errors.Is(kerr, syscall.ESRCH) {
			err = errors.Join(err, fmt.Errorf("kill process group %d of %s: %w", pid, w.Name, kerr))
		}
	}
	return err
}

// PIDs are the pids of the running processes of the worker's instances
// (process runtime), as its runtime records them.
func (w *Worker) PIDs() []int {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rt, err := process.New(process.Config{NodeID: w.Name, ClusterID: worker.ClusterIDOf(w.Dir), Dir: filepath.Join(w.Dir, "process"), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil
	}
	services, _ := rt.List(ctx)
	var out []int
	for _, s := range services {
		if s.Running && s.PID > 0 {
			out = append(out, s.PID)
		}
	}
	return out
}
