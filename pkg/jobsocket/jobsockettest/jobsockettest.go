// Package jobsockettest is a fake worker's side of a job socket, for testing
// media applications (and package jobsocket) without a worker: it serves
// JobSocket.Attach on a Unix socket, answers hello with a hello_ack the test
// chooses, and lets the test send the worker's messages and read the job's.
//
// Nothing here is for production use.
package jobsockettest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1/managerv1connect"
	"github.com/norsk-go/norsk-manager/pkg/jobsocket"
)

// Worker is a fake worker serving one job socket. Every stream a job
// opens is answered: hello → the hello_ack set with SetAck, then the
// greeting set with SetGreeting; a newer stream replaces the older (which
// ends, like a real worker's). Safe for concurrent use.
type Worker struct {
	// Path is the socket's path (a short one under os.TempDir()).
	Path string

	from chan *managerv1.JobSocketFromJob

	mu       sync.Mutex
	srv      *http.Server
	ack      *managerv1.JobSocketHelloAck
	greeting []*managerv1.JobSocketToJob
	cur      *stream
	hellos   chan *managerv1.JobSocketHello
	closed   bool
	wg       sync.WaitGroup // the server, the handlers and their receivers
}

type stream struct {
	out    chan *managerv1.JobSocketToJob
	cancel context.CancelFunc
}

// NewWorker serves a job socket until the test ends. ack is the hello_ack
// it answers with (Protocol is filled in when empty).
func NewWorker(t testing.TB, ack *managerv1.JobSocketHelloAck) *Worker {
	t.Helper()
	dir, err := os.MkdirTemp("", "jst")
	if err != nil {
		t.Fatal(err)
	}
	w := &Worker{
		Path:   filepath.Join(dir, jobsocket.SocketName),
		from:   make(chan *managerv1.JobSocketFromJob, 256),
		hellos: make(chan *managerv1.JobSocketHello, 64),
	}
	w.SetAck(ack)
	if err := w.serve(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		w.mu.Lock()
		w.closed = true
		srv := w.srv
		w.mu.Unlock()
		_ = srv.Close()
		w.wg.Wait()
		_ = os.RemoveAll(dir)
	})
	return w
}

// serve listens on Path and serves it.
func (w *Worker) serve() error {
	ln, err := net.Listen("unix", w.Path)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle(managerv1connect.NewJobSocketHandler(handler{w}))
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	srv := &http.Server{Handler: mux, Protocols: &p}
	w.mu.Lock()
	w.srv = srv
	w.mu.Unlock()
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		_ = srv.Serve(ln)
	}()
	return nil
}

// Restart closes the socket (every stream ends, the file goes) and, after
// down, serves it again at the same path, as a restarted worker does.
func (w *Worker) Restart(down time.Duration) error {
	w.mu.Lock()
	srv := w.srv
	w.mu.Unlock()
	_ = srv.Close()
	time.Sleep(down)
	return w.serve()
}

// SetAck sets the hello_ack of the next streams.
func (w *Worker) SetAck(ack *managerv1.JobSocketHelloAck) {
	ack = proto.Clone(ack).(*managerv1.JobSocketHelloAck)
	if ack.GetProtocol() == "" {
		ack.Protocol = jobsocket.Protocol
	}
	w.mu.Lock()
	w.ack = ack
	w.mu.Unlock()
}

// SetGreeting sets what the next streams are sent right after hello_ack
// (a target's initial_state, say).
func (w *Worker) SetGreeting(msgs ...*managerv1.JobSocketToJob) {
	w.mu.Lock()
	w.greeting = msgs
	w.mu.Unlock()
}

// AwaitAttach returns the hello of the next stream that attached.
func (w *Worker) AwaitAttach(timeout time.Duration) (*managerv1.JobSocketHello, error) {
	select {
	case h := <-w.hellos:
		return h, nil
	case <-time.After(timeout):
		return nil, fmt.Errorf("no job attached within %s", timeout)
	}
}

// Send sends a message on the current stream; an error when none is up.
func (w *Worker) Send(msg *managerv1.JobSocketToJob) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cur == nil {
		return errors.New("jobsockettest: no job is attached")
	}
	w.cur.out <- msg
	return nil
}

// Next returns the next message the job sent (hellos excepted), from any
// of its streams.
func (w *Worker) Next(timeout time.Duration) (*managerv1.JobSocketFromJob, error) {
	select {
	case m := <-w.from:
		return m, nil
	case <-time.After(timeout):
		return nil, fmt.Errorf("no message from the job within %s", timeout)
	}
}

// Drop ends the current stream (the job sees it end, as when a worker
// restarts).
func (w *Worker) Drop() {
	w.mu.Lock()
	cur := w.cur
	w.cur = nil
	w.mu.Unlock()
	if cur != nil {
		cur.cancel()
	}
}

type handler struct{ w *Worker }

func (h handler) Attach(ctx context.Context, st *connect.BidiStream[managerv1.JobSocketFromJob, managerv1.JobSocketToJob]) error {
	w := h.w
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return connect.NewError(connect.CodeUnavailable, errors.New("closed"))
	}
	w.wg.Add(1)
	w.mu.Unlock()
	defer w.wg.Done()
	first, err := st.Receive()
	if err != nil {
		return nil
	}
	hello := first.GetHello()
	if hello == nil {
		return connect.NewError(connect.CodeInvalidArgument, errors.New("the first message must be hello"))
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s := &stream{out: make(chan *managerv1.JobSocketToJob, 64), cancel: cancel}
	w.mu.Lock()
	if w.cur != nil {
		w.cur.cancel()
	}
	w.cur = s
	s.out <- &managerv1.JobSocketToJob{Msg: &managerv1.JobSocketToJob_HelloAck{HelloAck: proto.Clone(w.ack).(*managerv1.JobSocketHelloAck)}}
	for _, g := range w.greeting {
		s.out <- proto.Clone(g).(*managerv1.JobSocketToJob)
	}
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		if w.cur == s {
			w.cur = nil
		}
		w.mu.Unlock()
	}()
	w.hellos <- hello

	w.wg.Add(1) // the handler's count is held: safe against Cleanup's Wait
	go func() {
		defer w.wg.Done()
		defer cancel()
		for {
			m, err := st.Receive()
			if err != nil {
				return
			}
			w.from <- m
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case m := <-s.out:
			if err := st.Send(m); err != nil {
				return nil
			}
		}
	}
}
