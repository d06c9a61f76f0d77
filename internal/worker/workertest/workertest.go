// Package workertest holds test helpers for the worker agent and for code
// that talks to workers: Manager, a fake Manager API that answers
// ClusterMemberRegister as the real one does (one-shot tokens, node
// secrets, deregistration), and Controller, the Manager's side of a
// NodeController Control stream (h2c, bearer node secret), which sends
// commands and reads what the worker sends.
//
// Nothing here is for production use.
package workertest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/norsk-go/norsk-manager/pkg/apierr"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1/managerv1connect"
)

// Manager is a fake Manager API serving ClusterMemberRegister over HTTP/1.1
// and cleartext HTTP/2; it serves that call only.
type Manager struct {
	// URL is the API's base URL (http://127.0.0.1:port).
	URL string
	// HeartbeatIntervalMs is returned in registration answers (0: none).
	HeartbeatIntervalMs uint32
	// ClusterID is returned in registration answers (a Manager older than
	// cluster ids returns none): NewManager makes one; set it before the
	// first registration to change it.
	ClusterID string

	srv *httptest.Server

	mu          sync.Mutex
	tokens      map[string]string // unused token → node id
	nodes       map[string]*Node
	regs        []Registration
	refused     int
	unavailable bool
	// held: node id → the incarnation whose live stream the Manager holds
	// (HoldNode).
	held    map[string]string
	held409 int
}

// Node is a worker slot as the fake Manager knows it.
type Node struct {
	ID     string
	Secret string
	// Address is the last address the worker registered.
	Address       string
	Deregistered  bool
	Registrations int
	Last          *managerv1.ClusterMemberRegisterRequest
}

// Registration is one accepted ClusterMemberRegister call.
type Registration struct {
	NodeID    string
	WithToken bool
	Request   *managerv1.ClusterMemberRegisterRequest
}

// NewManager starts a fake Manager, closed when the test ends.
func NewManager(t testing.TB) *Manager {
	t.Helper()
	m := &Manager{tokens: map[string]string{}, nodes: map[string]*Node{}, ClusterID: randomHex(16), held: map[string]string{}}
	mux := http.NewServeMux()
	mux.Handle(managerv1connect.ManagerClusterMemberRegisterProcedure,
		connect.NewUnaryHandler(managerv1connect.ManagerClusterMemberRegisterProcedure, managerHandler{m: m}.ClusterMemberRegister))
	srv := httptest.NewUnstartedServer(mux)
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	srv.Config.Protocols = &p
	srv.Start()
	m.srv = srv
	m.URL = srv.URL
	t.Cleanup(srv.Close)
	return m
}

// AddToken makes a one-shot registration token for a new node id.
func (m *Manager) AddToken(nodeID string) string {
	tok := "tok-" + randomHex(8)
	m.mu.Lock()
	m.tokens[tok] = nodeID
	m.mu.Unlock()
	return tok
}

// Deregister invalidates a node's secret: its next registration is refused.
func (m *Manager) Deregister(nodeID string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if n := m.nodes[nodeID]; n != nil {
		n.Deregistered = true
	}
}

// Refused is how many registrations with a node secret were refused.
func (m *Manager) Refused() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.refused
}

// Reinstate undoes Deregister: the node's secret is accepted again.
func (m *Manager) Reinstate(nodeID string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if n := m.nodes[nodeID]; n != nil {
		n.Deregistered = false
	}
}

// HoldNode makes the Manager behave as if it held a live stream with the
// worker process incarnation of node: registrations of the node by another
// incarnation are refused (ALREADY_EXISTS, node-held-by-live-worker) until
// ReleaseNode.
func (m *Manager) HoldNode(nodeID, incarnation string) {
	m.mu.Lock()
	m.held[nodeID] = incarnation
	m.mu.Unlock()
}

// ReleaseNode ends HoldNode.
func (m *Manager) ReleaseNode(nodeID string) {
	m.mu.Lock()
	delete(m.held, nodeID)
	m.mu.Unlock()
}

// RefusedHeld is how many registrations HoldNode refused.
func (m *Manager) RefusedHeld() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.held409
}

// SetUnavailable makes registrations fail with UNAVAILABLE while on.
func (m *Manager) SetUnavailable(on bool) {
	m.mu.Lock()
	m.unavailable = on
	m.mu.Unlock()
}

// Node returns a copy of what the Manager knows of a node.
func (m *Manager) Node(nodeID string) (Node, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := m.nodes[nodeID]
	if n == nil {
		return Node{}, false
	}
	return *n, true
}

// Registrations returns the accepted registrations, oldest first.
func (m *Manager) Registrations() []Registration {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]Registration(nil), m.regs...)
}

// managerHandler answers the one call a worker makes of the Manager API.
type managerHandler struct {
	m *Manager
}

func (h managerHandler) ClusterMemberRegister(_ context.Context, req *connect.Request[managerv1.ClusterMemberRegisterRequest]) (*connect.Response[managerv1.ClusterMemberRegisterResponse], error) {
	m := h.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.unavailable {
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("fake Manager unavailable"))
	}
	msg := req.Msg
	var n *Node
	withToken := false
	switch {
	case msg.GetToken() != "":
		id, ok := m.tokens[msg.GetToken()]
		if !ok {
			return nil, connect.NewError(connect.CodeUnauthenticated, errors.New("registration token unknown or already used"))
		}
		delete(m.tokens, msg.GetToken())
		n = &Node{ID: id, Secret: "secret-" + randomHex(16)}
		m.nodes[id] = n
		withToken = true
	case msg.GetNodeSecret() != "":
		for _, c := range m.nodes {
			if c.Secret == msg.GetNodeSecret() && !c.Deregistered {
				n = c
			}
		}
		if n == nil {
			m.refused++
			ce := connect.NewError(connect.CodeUnauthenticated, errors.New("node secret is not known (its slot may have been deregistered)"))
			ce.Meta().Set(apierr.RefusalHeader, apierr.RefusalNodeSecretUnknown)
			return nil, ce
		}
	default:
		return nil, connect.NewError(connect.CodeUnauthenticated, errors.New("a registration needs a token or a node secret"))
	}
	if inc, ok := m.held[n.ID]; ok && !withToken && inc != msg.GetWorkerIncarnation() {
		m.held409++
		ce := connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("node %q already has a live worker process (incarnation %q)", n.ID, inc))
		ce.Meta().Set(apierr.RefusalHeader, apierr.RefusalNodeHeldByLiveWorker)
		return nil, ce
	}
	n.Address = msg.GetAddress()
	n.Registrations++
	n.Last = proto.Clone(msg).(*managerv1.ClusterMemberRegisterRequest)
	m.regs = append(m.regs, Registration{NodeID: n.ID, WithToken: withToken, Request: n.Last})
	resp := &managerv1.ClusterMemberRegisterResponse{NodeId: n.ID, NodeName: n.ID, HeartbeatIntervalMs: m.HeartbeatIntervalMs, ClusterId: m.ClusterID}
	if withToken {
		resp.NodeSecret = n.Secret
	}
	return connect.NewResponse(resp), nil
}

// Controller is the Manager's side of one Control stream to a worker.
// Notices (WorkerNotice) are kept apart from the other messages, as the
// Manager records them apart: Notices and AwaitNotice read them.
type Controller struct {
	// ClusterID, if set before Hello, is the hello's cluster id.
	ClusterID string

	stream *connect.BidiStreamForClient[managerv1.ControllerMessage, managerv1.WorkerMessage]
	cancel context.CancelFunc
	tr     *http.Transport
	msgs   chan *managerv1.WorkerMessage
	done   chan struct{}
	err    error // why the stream ended; set before done is closed

	mu      sync.Mutex
	seq     uint64
	notices []*managerv1.WorkerNotice
	noticed chan struct{} // signalled at each notice
	// sendMu serialises the stream's sends (the test's and the automatic
	// confirmations of stopped reports).
	sendMu sync.Mutex
	// holdConfirmations: a Manager that fails before committing (no
	// ReportsRecorded is sent).
	holdConfirmations atomic.Bool
}

// HoldConfirmations stops the automatic ReportsRecorded: the controller
// behaves like a Manager that received stopped reports but never committed
// them.
func (c *Controller) HoldConfirmations() { c.holdConfirmations.Store(true) }

// Dial opens a Control stream to the worker at addr (host:port) over
// cleartext HTTP/2, presenting secret as the bearer token. Nothing is sent
// until the first Send (usually Hello).
func Dial(ctx context.Context, addr, secret string) *Controller {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: &p}
	client := managerv1connect.NewNodeControllerClient(&http.Client{Transport: tr}, "http://"+addr, connect.WithGRPC())
	ctx, cancel := context.WithCancel(ctx)
	stream := client.Control(ctx)
	stream.RequestHeader().Set("Authorization", "Bearer "+secret)
	c := &Controller{stream: stream, cancel: cancel, tr: tr, msgs: make(chan *managerv1.WorkerMessage, 1024), done: make(chan struct{}),
		noticed: make(chan struct{}, 1)}
	go func() {
		defer close(c.done)
		for {
			msg, err := stream.Receive()
			if err != nil {
				c.err = err
				return
			}
			// Like the Manager, confirm STOPPED reports as recorded (the
			// worker forgets a tombstone only then).
			reports := msg.GetHello().GetInventory()
			if r := msg.GetReport(); r != nil {
				reports = append(reports, r)
			}
			c.confirmStopped(reports)
			if n := msg.GetNotice(); n != nil {
				c.mu.Lock()
				c.notices = append(c.notices, n)
				c.mu.Unlock()
				select {
				case c.noticed <- struct{}{}:
				default:
				}
				continue
			}
			select {
			case c.msgs <- msg:
			case <-ctx.Done():
				c.err = ctx.Err()
				return
			}
		}
	}()
	return c
}

// confirmStopped sends ReportsRecorded for the STOPPED reports among
// reports (seq 0, unacknowledged), as the Manager does once it has
// committed them.
func (c *Controller) confirmStopped(reports []*managerv1.InstanceReport) {
	var done []*managerv1.RecordedReport
	for _, r := range reports {
		if r.GetPhase() == managerv1.InstancePhase_INSTANCE_PHASE_STOPPED {
			done = append(done, &managerv1.RecordedReport{JobId: r.GetJobId(), Role: r.GetRole(), FencingToken: r.GetFencingToken()})
		}
	}
	if len(done) == 0 || c.holdConfirmations.Load() {
		return
	}
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	_ = c.stream.Send(&managerv1.ControllerMessage{Msg: &managerv1.ControllerMessage_Recorded{Recorded: &managerv1.ReportsRecorded{Reports: done}}})
}

// Send sends a message; a zero seq is replaced by the next sequence
// number, which is returned.
func (c *Controller) Send(msg *managerv1.ControllerMessage) (uint64, error) {
	c.mu.Lock()
	if msg.GetSeq() == 0 {
		c.seq++
		msg.Seq = c.seq
	}
	seq := msg.GetSeq()
	c.mu.Unlock()
	c.sendMu.Lock()
	err := c.stream.Send(msg)
	c.sendMu.Unlock()
	if errors.Is(err, io.EOF) {
		// The worker ended the stream: its reason comes with the response.
		if ended, why := c.Ended(10 * time.Second); ended && why != nil {
			return seq, why
		}
	}
	return seq, err
}

// Hello sends the Manager's hello and returns the worker's.
func (c *Controller) Hello(nodeID string, heartbeatMs uint32, timeout time.Duration) (*managerv1.WorkerHello, error) {
	if _, err := c.Send(&managerv1.ControllerMessage{Msg: &managerv1.ControllerMessage_Hello{Hello: &managerv1.ControllerHello{
		NodeId: nodeID, ManagerNodeName: "fake-manager", HeartbeatIntervalMs: heartbeatMs, ClusterId: c.ClusterID,
	}}}); err != nil {
		return nil, fmt.Errorf("send hello: %w", err)
	}
	m, err := c.Await(timeout, func(m *managerv1.WorkerMessage) bool { return m.GetHello() != nil })
	if err != nil {
		return nil, err
	}
	return m.GetHello(), nil
}

// Notices returns the notices the worker has sent on this stream, oldest
// first.
func (c *Controller) Notices() []*managerv1.WorkerNotice {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*managerv1.WorkerNotice(nil), c.notices...)
}

// AwaitNotice waits until the worker has sent a notice of kind for job (any
// job when ""), and returns it.
func (c *Controller) AwaitNotice(timeout time.Duration, kind, jobID string) (*managerv1.WorkerNotice, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		for _, n := range c.Notices() {
			if n.GetKind() == kind && (jobID == "" || n.GetJobId() == jobID) {
				return n, nil
			}
		}
		select {
		case <-c.noticed:
		case <-c.done:
			for _, n := range c.Notices() {
				if n.GetKind() == kind && (jobID == "" || n.GetJobId() == jobID) {
					return n, nil
				}
			}
			return nil, fmt.Errorf("stream ended without a %s notice: %w", kind, c.err)
		case <-t.C:
			return nil, fmt.Errorf("no %s notice from the worker within %s (got %v)", kind, timeout, c.Notices())
		}
	}
}

// Next returns the next message from the worker (notices aside).
func (c *Controller) Next(timeout time.Duration) (*managerv1.WorkerMessage, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case m := <-c.msgs:
		return m, nil
	default:
	}
	select {
	case m := <-c.msgs:
		return m, nil
	case <-c.done:
		select {
		case m := <-c.msgs:
			return m, nil
		default:
		}
		return nil, fmt.Errorf("stream ended: %w", c.err)
	case <-t.C:
		return nil, fmt.Errorf("no message from the worker within %s", timeout)
	}
}

// Await returns the first message that matches, dropping the others.
func (c *Controller) Await(timeout time.Duration, match func(*managerv1.WorkerMessage) bool) (*managerv1.WorkerMessage, error) {
	deadline := time.Now().Add(timeout)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return nil, fmt.Errorf("no matching message from the worker within %s", timeout)
		}
		m, err := c.Next(left)
		if err != nil {
			return nil, err
		}
		if match(m) {
			return m, nil
		}
	}
}

// NextNonHeartbeat returns the next message that is neither a heartbeat
// nor an image inventory (which a docker worker sends whenever its
// engine's images change, e.g. when another test pulls or tags one).
func (c *Controller) NextNonHeartbeat(timeout time.Duration) (*managerv1.WorkerMessage, error) {
	return c.Await(timeout, func(m *managerv1.WorkerMessage) bool { return m.GetHeartbeat() == nil && m.GetImages() == nil })
}

// Ended waits until the stream has ended and returns why; false if it has
// not ended within timeout.
func (c *Controller) Ended(timeout time.Duration) (ended bool, err error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-c.done:
		return true, c.err
	case <-t.C:
		return false, nil
	}
}

// Close ends the stream and releases its connection.
func (c *Controller) Close() {
	_ = c.stream.CloseRequest()
	c.cancel()
	<-c.done
	_ = c.stream.CloseResponse()
	c.tr.CloseIdleConnections()
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}
