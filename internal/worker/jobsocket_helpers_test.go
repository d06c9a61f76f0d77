package worker_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1/managerv1connect"
	"github.com/norsk-go/norsk-manager/internal/worker"
	"github.com/norsk-go/norsk-manager/internal/worker/workertest"
	"github.com/norsk-go/norsk-manager/pkg/jobsocket"
)

// jsConfig is the env's worker configuration with job sockets on, in a
// short directory of the test's own (removed when it ends).
func (e *env) jsConfig() worker.Config {
	e.t.Helper()
	if e.jsDir == "" {
		dir, err := os.MkdirTemp("", "wjs")
		if err != nil {
			e.t.Fatal(err)
		}
		e.t.Cleanup(func() { os.RemoveAll(dir) })
		e.jsDir = dir + "/sockets"
	}
	cfg := e.config()
	cfg.JobSocket = true
	cfg.JobSocketDir = e.jsDir
	return cfg
}

// fakeJob is the job's side of a job socket stream, driven by the test.
type fakeJob struct {
	t      *testing.T
	stream *connect.BidiStreamForClient[managerv1.JobSocketFromJob, managerv1.JobSocketToJob]
	cancel context.CancelFunc
	tr     *http.Transport
	msgs   chan *managerv1.JobSocketToJob
	done   chan struct{}
	err    error // why the stream ended; set before done is closed
}

// attachJob dials the socket at path, sends hello and returns the job with
// its hello_ack. It is closed when the test ends.
func attachJob(t *testing.T, path string) (*fakeJob, *managerv1.JobSocketHelloAck) {
	t.Helper()
	j := dialJob(t, path)
	j.send(&managerv1.JobSocketFromJob{Msg: &managerv1.JobSocketFromJob_Hello{Hello: &managerv1.JobSocketHello{Protocol: "1", Client: "fake-job"}}})
	m := j.next()
	ack := m.GetHelloAck()
	if ack == nil {
		t.Fatalf("want hello_ack, got %v", m)
	}
	return j, ack
}

// dialJob opens a stream on the socket at path; nothing is sent.
func dialJob(t *testing.T, path string) *fakeJob {
	t.Helper()
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: &p, DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	}}
	client := managerv1connect.NewJobSocketClient(&http.Client{Transport: tr}, "http://job-socket", connect.WithGRPC())
	ctx, cancel := context.WithCancel(context.Background())
	j := &fakeJob{t: t, stream: client.Attach(ctx), cancel: cancel, tr: tr, msgs: make(chan *managerv1.JobSocketToJob, 64), done: make(chan struct{})}
	go func() {
		defer close(j.done)
		for {
			m, err := j.stream.Receive()
			if err != nil {
				j.err = err
				return
			}
			j.msgs <- m
		}
	}()
	t.Cleanup(j.close)
	return j
}

func (j *fakeJob) send(m *managerv1.JobSocketFromJob) {
	j.t.Helper()
	if err := j.stream.Send(m); err != nil {
		j.t.Fatalf("job send: %v", err)
	}
}

// next returns the next message from the worker.
func (j *fakeJob) next() *managerv1.JobSocketToJob {
	j.t.Helper()
	select {
	case m := <-j.msgs:
		return m
	case <-j.done:
		select {
		case m := <-j.msgs:
			return m
		default:
		}
		j.t.Fatalf("the job's stream ended: %v", j.err)
	case <-time.After(wait):
		j.t.Fatal("no message from the worker on the job socket")
	}
	return nil
}

// ended waits for the stream to end and returns why.
func (j *fakeJob) ended() error {
	j.t.Helper()
	select {
	case <-j.done:
		return j.err
	case <-time.After(wait):
		j.t.Fatal("the job's stream did not end")
		return nil
	}
}

func (j *fakeJob) close() {
	_ = j.stream.CloseRequest()
	j.cancel()
	<-j.done
	_ = j.stream.CloseResponse()
	j.tr.CloseIdleConnections()
}

// Messages a job sends.
func jobState(id string, payload []byte, refused string) *managerv1.JobSocketFromJob {
	return &managerv1.JobSocketFromJob{Msg: &managerv1.JobSocketFromJob_State{State: &managerv1.JobSocketState{MigrationId: id, Payload: payload, Refused: refused}}}
}

func jobReady(id string, payload []byte) *managerv1.JobSocketFromJob {
	return &managerv1.JobSocketFromJob{Msg: &managerv1.JobSocketFromJob_Ready{Ready: &managerv1.JobSocketReady{MigrationId: id, Payload: payload}}}
}

func jobStopped(id string, payload []byte) *managerv1.JobSocketFromJob {
	return &managerv1.JobSocketFromJob{Msg: &managerv1.JobSocketFromJob_StoppedOutput{StoppedOutput: &managerv1.JobSocketStoppedOutput{MigrationId: id, Payload: payload}}}
}

func jobApplied(id string, payload []byte) *managerv1.JobSocketFromJob {
	return &managerv1.JobSocketFromJob{Msg: &managerv1.JobSocketFromJob_Applied{Applied: &managerv1.JobSocketApplied{MigrationId: id, Payload: payload}}}
}

func jobAbort(id, reason string) *managerv1.JobSocketFromJob {
	return &managerv1.JobSocketFromJob{Msg: &managerv1.JobSocketFromJob_Abort{Abort: &managerv1.JobSocketAbort{MigrationId: id, Reason: reason}}}
}

// Commands the Manager sends.
func getStateMsg(jobID, role string, token uint64, id string) *managerv1.ControllerMessage {
	return &managerv1.ControllerMessage{Msg: &managerv1.ControllerMessage_MigrationGetState{MigrationGetState: &managerv1.MigrationGetState{
		JobId: jobID, Role: role, FencingToken: token, MigrationId: id,
	}}}
}

func cutoverReadyMsg(jobID, role string, token uint64, id string, payload []byte) *managerv1.ControllerMessage {
	return &managerv1.ControllerMessage{Msg: &managerv1.ControllerMessage_MigrationCutoverReady{MigrationCutoverReady: &managerv1.MigrationCutoverReady{
		JobId: jobID, Role: role, FencingToken: token, MigrationId: id, Payload: payload,
	}}}
}

func cutoverApplyMsg(jobID, role string, token uint64, id string, payload []byte) *managerv1.ControllerMessage {
	return &managerv1.ControllerMessage{Msg: &managerv1.ControllerMessage_MigrationCutoverApply{MigrationCutoverApply: &managerv1.MigrationCutoverApply{
		JobId: jobID, Role: role, FencingToken: token, MigrationId: id, Payload: payload,
	}}}
}

func abortMsg(jobID, role, id, reason string) *managerv1.ControllerMessage {
	return &managerv1.ControllerMessage{Msg: &managerv1.ControllerMessage_MigrationAbort{MigrationAbort: &managerv1.MigrationAbort{
		JobId: jobID, Role: role, MigrationId: id, Reason: reason,
	}}}
}

// targetStartMsg starts the target of a handover migration: its key is the
// slot and the first eight hex digits of the migration id, and it is told
// the slot.
func targetStartMsg(j *managerv1.Job, slot string, token uint64, id string, state []byte) *managerv1.ControllerMessage {
	return &managerv1.ControllerMessage{Msg: &managerv1.ControllerMessage_Start{Start: &managerv1.StartInstance{
		Job: j, Role: slot + "@" + id[:8], RuntimeRole: slot, FencingToken: token, MigrationId: id, MigrationInitialState: state,
		MigrationHandover: true,
	}}}
}

// expectMigration reads the next message and checks that it is a handshake
// report of kind for (jobID, role) and migration id.
func expectMigration(t *testing.T, c *workertest.Controller, kind managerv1.MigrationReportKind, jobID, role string, token uint64, id string) *managerv1.MigrationReport {
	t.Helper()
	m := next(t, c)
	r := m.GetMigration()
	if r == nil || r.GetKind() != kind || r.GetJobId() != jobID || r.GetRole() != role || r.GetFencingToken() != token || r.GetMigrationId() != id {
		t.Fatalf("want a %s report of %s/%s token %d migration %s, got %v", kind, jobID, role, token, id, m)
	}
	return r
}

// expectRefusal reads the next message and checks that it refuses seq with
// code and a message containing want.
func expectRefusal(t *testing.T, c *workertest.Controller, seq uint64, code, want string) {
	t.Helper()
	ack := expectAck(t, c, seq, code)
	if !strings.Contains(ack.GetError(), want) {
		t.Fatalf("refusal %q does not say %q", ack.GetError(), want)
	}
}

// isCode reports whether err is a connect error with code.
func isCode(err error, code connect.Code) bool {
	var ce *connect.Error
	return errors.As(err, &ce) && ce.Code() == code
}

// recordingHandler is a jobsocket.Handler that records the identities it
// is attached with and answers get-state with "state-of-<migration id>".
type recordingHandler struct {
	jobsocket.NopHandler
	attached chan jobsocket.Identity
}

func newRecordingHandler() *recordingHandler {
	return &recordingHandler{attached: make(chan jobsocket.Identity, 16)}
}

func (h *recordingHandler) OnAttached(_ context.Context, id jobsocket.Identity) { h.attached <- id }

func (h *recordingHandler) OnGetState(_ context.Context, id string) ([]byte, string) {
	return []byte("state-of-" + id), ""
}

// awaitAttached returns the identity of the handler's next attach.
func (h *recordingHandler) awaitAttached(t *testing.T) jobsocket.Identity {
	t.Helper()
	select {
	case id := <-h.attached:
		return id
	case <-time.After(wait):
		t.Fatal("the job did not attach")
		return jobsocket.Identity{}
	}
}

// runSession runs a jobsocket session on path with h until the test ends.
func runSession(t *testing.T, path string, h jobsocket.Handler) *jobsocket.Session {
	t.Helper()
	s, err := jobsocket.Dial(context.Background(), path, jobsocket.WithLogger(testLogger()), jobsocket.WithBackoff(20*time.Millisecond, 200*time.Millisecond))
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, h) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		_ = s.Close()
	})
	return s
}

// expectRefusalAmong reads the controller's messages until the ack of seq,
// skipping the others (the reports and acks of a command sent after it),
// and checks that it refuses with code and says want.
func expectRefusalAmong(t *testing.T, c *workertest.Controller, seq uint64, code, want string) {
	t.Helper()
	for range 16 {
		m := next(t, c)
		ack := m.GetAck()
		if ack == nil || ack.GetSeq() != seq {
			continue
		}
		if ack.GetErrorCode() != code || !strings.Contains(ack.GetError(), want) {
			t.Fatalf("the ack of %d is %v: want %s saying %q", seq, ack, code, want)
		}
		return
	}
	t.Fatalf("no ack of %d among 16 messages", seq)
}
