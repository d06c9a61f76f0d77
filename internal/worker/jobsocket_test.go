package worker_test

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"connectrpc.com/connect"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/runtime/runtimetest"
	"github.com/norsk-go/norsk-manager/internal/worker/workertest"
	"github.com/norsk-go/norsk-manager/pkg/jobsocket"
)

const (
	kindState     = managerv1.MigrationReportKind_MIGRATION_REPORT_KIND_STATE
	kindDelivered = managerv1.MigrationReportKind_MIGRATION_REPORT_KIND_INITIAL_STATE_DELIVERED
	kindReady     = managerv1.MigrationReportKind_MIGRATION_REPORT_KIND_TARGET_READY
	kindStopped   = managerv1.MigrationReportKind_MIGRATION_REPORT_KIND_SOURCE_STOPPED_OUTPUT
	kindApplied   = managerv1.MigrationReportKind_MIGRATION_REPORT_KIND_TARGET_APPLIED
	kindAborted   = managerv1.MigrationReportKind_MIGRATION_REPORT_KIND_ABORTED

	codeFailedPrecondition = "FAILED_PRECONDITION"
	codeNotFound           = "NOT_FOUND"

	migA = "3f9c1e2a-0000-4000-8000-00000000000a"
	migB = "77aa0b1c-0000-4000-8000-00000000000b"
)

func hasCapability(caps []*managerv1.Capability, name string) bool {
	return slices.ContainsFunc(caps, func(c *managerv1.Capability) bool { return c.GetName() == name && c.GetCount() == 1 })
}

// TestJobSocketHelloAndEnvironment: a worker with --job-socket advertises
// the capability, gives the instance its socket's path, and answers the
// job's hello with the instance's identity.
func TestJobSocketHelloAndEnvironment(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.run(e.jsConfig())
	c, hello := e.dial(a, noHeartbeats)
	if !hasCapability(hello.GetCapabilities(), jobsocket.Capability) || len(hello.GetCapabilities()) != 2 {
		t.Fatalf("hello capabilities: %v", hello.GetCapabilities())
	}
	if regs := e.mgr.Registrations(); len(regs) == 0 || !hasCapability(regs[0].Request.GetCapabilities(), jobsocket.Capability) {
		t.Fatalf("registration capabilities: %v", regs)
	}
	startRunning(t, c, job("cam", svc("media")), "primary", 5)

	path := a.JobSocketPath("cam", "primary")
	if len(path) > 107 || filepath.Base(path) != jobsocket.SocketName {
		t.Fatalf("socket path %q", path)
	}
	if env := readEnvOfService(t, e, "cam", "media"); env[jobsocket.EnvSocket] != path {
		t.Fatalf("%s=%q, want %q", jobsocket.EnvSocket, env[jobsocket.EnvSocket], path)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Type() != fs.ModeSocket || fi.Mode().Perm() != 0o666 {
		t.Fatalf("socket: %v %v", fi, err)
	}
	if base, err := os.Stat(e.jsDir); err != nil || base.Mode().Perm() != 0o700 {
		t.Fatalf("socket directory: %v %v", base, err)
	}

	_, ack := attachJob(t, path)
	if ack.GetProtocol() != jobsocket.Protocol || ack.GetJobId() != "cam" || ack.GetRole() != "primary" ||
		ack.GetRuntimeRole() != "primary" || ack.GetNodeId() != e.nodeID || ack.GetMigrationId() != "" {
		t.Fatalf("hello_ack: %v", ack)
	}

	// A stream must begin with hello.
	bad := dialJob(t, path)
	bad.send(jobReady(migA, nil))
	if err := bad.ended(); !isCode(err, connect.CodeInvalidArgument) {
		t.Fatalf("a stream without hello ended with %v", err)
	}

	// The socket goes with the instance.
	seq := send(t, c, stopMsg("cam", "primary", 5, 0, reasonUser, ""))
	expectReport(t, c, phaseStopping)
	expectReport(t, c, phaseStopped)
	expectAck(t, c, seq, "")
	if _, err := os.Stat(filepath.Dir(path)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the socket's directory is still there after the stop: %v", err)
	}
}

// TestJobSocketOff: without --job-socket nothing is served or advertised,
// not even a capability of that name the operator gave, and the handshake's
// commands are refused.
func TestJobSocketOff(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := e.config()
	cfg.Capabilities = append(cfg.Capabilities, &managerv1.Capability{Name: jobsocket.Capability, Count: 1})
	a := e.run(cfg)
	c, hello := e.dial(a, noHeartbeats)
	if hasCapability(hello.GetCapabilities(), jobsocket.Capability) || len(hello.GetCapabilities()) != 1 {
		t.Fatalf("hello capabilities: %v", hello.GetCapabilities())
	}
	startRunning(t, c, job("cam", svc("media")), "primary", 5)
	if env := readEnvOfService(t, e, "cam", "media"); env[jobsocket.EnvSocket] != "" || a.JobSocketPath("cam", "primary") != "" {
		t.Fatalf("a job socket without --job-socket: %q", env[jobsocket.EnvSocket])
	}
	seq := send(t, c, getStateMsg("cam", "primary", 5, migA))
	expectRefusal(t, c, seq, codeFailedPrecondition, "serves no job sockets")
}

// TestJobSocketSourceHandshake drives a source through the propose, the
// lock, the cutover and an abort.
func TestJobSocketSourceHandshake(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.run(e.jsConfig())
	c, _ := e.dial(a, noHeartbeats)
	startRunning(t, c, job("cam", svc("media")), "primary", 9)

	// Unknown instance, wrong token, no session.
	seq := send(t, c, getStateMsg("nope", "primary", 9, migA))
	expectRefusal(t, c, seq, codeNotFound, "no instance nope/primary")
	seq = send(t, c, getStateMsg("cam", "primary", 8, migA))
	expectRefusal(t, c, seq, codeNotFound, "token 9, not 8")

	// The job has not attached yet (it has just started): the propose
	// waits for it and reaches it right after its hello_ack; its answer is
	// reported and locks it.
	seq = send(t, c, getStateMsg("cam", "primary", 9, migA))
	j, _ := attachJob(t, a.JobSocketPath("cam", "primary"))
	expectAck(t, c, seq, "")
	if m := j.next(); m.GetGetState().GetMigrationId() != migA {
		t.Fatalf("job got %v", m)
	}
	j.send(jobState(migA, []byte(`{"nextSeq":100}`), ""))
	r := expectMigration(t, c, kindState, "cam", "primary", 9, migA)
	if string(r.GetPayload()) != `{"nextSeq":100}` || r.GetRefused() != "" {
		t.Fatalf("state report: %v", r)
	}
	for _, msg := range []*managerv1.ControllerMessage{
		getStateMsg("cam", "primary", 9, migB),
		cutoverReadyMsg("cam", "primary", 9, migB, nil),
	} {
		seq = send(t, c, msg)
		expectRefusal(t, c, seq, codeFailedPrecondition, "instance cam/primary is already in migration "+migA+" (source, stateReported)")
	}

	// A stale answer (another migration) is ignored: the next report is
	// the stopped_output's.
	j.send(jobState(migB, nil, ""))
	seq = send(t, c, cutoverReadyMsg("cam", "primary", 9, migA, []byte("ready-at")))
	expectAck(t, c, seq, "")
	if m := j.next(); m.GetStopOutputAt().GetMigrationId() != migA || string(m.GetStopOutputAt().GetPayload()) != "ready-at" {
		t.Fatalf("job got %v", m)
	}
	// Told again before the job answered (a new primary took the migration
	// over): acknowledged, and the job is not told twice.
	seq = send(t, c, cutoverReadyMsg("cam", "primary", 9, migA, []byte("ready-at")))
	expectAck(t, c, seq, "")
	j.send(jobStopped(migA, []byte("stopped-at")))
	if r := expectMigration(t, c, kindStopped, "cam", "primary", 9, migA); string(r.GetPayload()) != "stopped-at" {
		t.Fatalf("stopped report: %v", r)
	}
	// Told again after it answered: the worker repeats the answer.
	seq = send(t, c, cutoverReadyMsg("cam", "primary", 9, migA, []byte("ready-at")))
	expectAck(t, c, seq, "")
	if r := expectMigration(t, c, kindStopped, "cam", "primary", 9, migA); string(r.GetPayload()) != "stopped-at" {
		t.Fatalf("repeated stopped report: %v", r)
	}

	// An abort of another migration is acknowledged and ignored; the abort
	// of this one reaches the job (the next thing it gets) and unlocks it.
	seq = send(t, c, abortMsg("cam", "primary", migB, "not yours"))
	expectAck(t, c, seq, "")
	seq = send(t, c, abortMsg("cam", "primary", migA, "operator"))
	expectAck(t, c, seq, "")
	if m := j.next(); m.GetAbort().GetMigrationId() != migA || m.GetAbort().GetReason() != "operator" {
		t.Fatalf("job got %v", m)
	}
	seq = send(t, c, abortMsg("cam", "primary", migA, "again")) // idempotent
	expectAck(t, c, seq, "")
	if m := j.next(); m.GetAbort().GetReason() != "again" {
		t.Fatalf("job got %v", m)
	}
	seq = send(t, c, getStateMsg("cam", "primary", 9, migB))
	expectAck(t, c, seq, "")
	if m := j.next(); m.GetGetState().GetMigrationId() != migB {
		t.Fatalf("job got %v", m)
	}

	// A refusal locks too, until the job itself gives up: ABORTED.
	j.send(jobState(migB, nil, "busy"))
	if r := expectMigration(t, c, kindState, "cam", "primary", 9, migB); r.GetRefused() != "busy" {
		t.Fatalf("state report: %v", r)
	}
	seq = send(t, c, getStateMsg("cam", "primary", 9, migA))
	expectRefusal(t, c, seq, codeFailedPrecondition, "already in migration "+migB)
	j.send(jobAbort(migB, "cannot"))
	if r := expectMigration(t, c, kindAborted, "cam", "primary", 9, migB); r.GetReason() != "cannot" {
		t.Fatalf("aborted report: %v", r)
	}
	seq = send(t, c, getStateMsg("cam", "primary", 9, migA))
	expectAck(t, c, seq, "")
	if m := j.next(); m.GetGetState().GetMigrationId() != migA {
		t.Fatalf("job got %v", m)
	}
}

// TestJobSocketTargetHandshake: a target is handed its initial state after
// hello_ack, reports ready and applied, gets its state again after a
// reconnect only until its ready, and is a plain instance once applied.
func TestJobSocketTargetHandshake(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.run(e.jsConfig())
	c, _ := e.dial(a, noHeartbeats)
	role := "primary@" + migA[:8]
	state := []byte(`{"nextSeq":7}`)
	seq := send(t, c, targetStartMsg(job("cam", svc("media")), "primary", 12, migA, state))
	expectReport(t, c, phaseRunning)
	expectAck(t, c, seq, "")
	path := a.JobSocketPath("cam", role)
	env := readEnvOfService(t, e, "cam", "media")
	if env[jobsocket.EnvSocket] != path || env["NORSK_MIGRATION_ID"] != migA || env[jobsocket.EnvHandover] != "1" || env["NORSK_RUNTIME_ROLE"] != "primary" {
		t.Fatalf("environment: %v", env)
	}

	// A get_state of its own migration is not for a target.
	seq = send(t, c, getStateMsg("cam", role, 12, migA))
	expectRefusal(t, c, seq, codeFailedPrecondition, "")

	j, ack := attachJob(t, path)
	if ack.GetRole() != role || ack.GetRuntimeRole() != "primary" || ack.GetMigrationId() != migA || !ack.GetHandover() {
		t.Fatalf("hello_ack: %v", ack)
	}
	if m := j.next(); m.GetInitialState().GetMigrationId() != migA || !bytes.Equal(m.GetInitialState().GetPayload(), state) {
		t.Fatalf("job got %v", m)
	}
	expectMigration(t, c, kindDelivered, "cam", role, 12, migA)

	// Reconnect before ready: the state again.
	j.close()
	j, _ = attachJob(t, path)
	if m := j.next(); m.GetInitialState().GetMigrationId() != migA {
		t.Fatalf("job got %v", m)
	}
	expectMigration(t, c, kindDelivered, "cam", role, 12, migA)
	j.send(jobReady(migA, []byte("can-start")))
	if r := expectMigration(t, c, kindReady, "cam", role, 12, migA); string(r.GetPayload()) != "can-start" {
		t.Fatalf("ready report: %v", r)
	}

	// Reconnect after ready: hello_ack, and no state: the next message is
	// the apply.
	j.close()
	j, ack = attachJob(t, path)
	if ack.GetMigrationId() != migA {
		t.Fatalf("hello_ack: %v", ack)
	}
	seq = send(t, c, cutoverApplyMsg("cam", role, 12, migB, nil))
	expectRefusal(t, c, seq, codeFailedPrecondition, "already in migration "+migA+" (target, ready)")
	seq = send(t, c, cutoverApplyMsg("cam", role, 12, migA, []byte("stopped-at")))
	expectAck(t, c, seq, "")
	if m := j.next(); m.GetApplyFrom().GetMigrationId() != migA || string(m.GetApplyFrom().GetPayload()) != "stopped-at" {
		t.Fatalf("job got %v", m)
	}
	summary := []byte(`{"applied":["frames"],"failed":[],"skewMs":1.5}`)
	j.send(jobApplied(migA, summary))
	if r := expectMigration(t, c, kindApplied, "cam", role, 12, migA); !bytes.Equal(r.GetPayload(), summary) {
		t.Fatalf("applied report: %v", r)
	}

	// Applied: the job is itself now, and may be migrated again.
	j.close()
	j, ack = attachJob(t, path)
	if ack.GetMigrationId() != "" || ack.GetHandover() {
		t.Fatalf("hello_ack after applied: %v", ack)
	}
	// A resend (a new primary's AutoManager took the migration over): the
	// job is not told again, the worker repeats its answer.
	seq = send(t, c, cutoverApplyMsg("cam", role, 12, migA, nil))
	expectAck(t, c, seq, "")
	if r := expectMigration(t, c, kindApplied, "cam", role, 12, migA); !bytes.Equal(r.GetPayload(), summary) {
		t.Fatalf("repeated applied report: %v", r)
	}
	seq = send(t, c, getStateMsg("cam", role, 12, migB))
	expectAck(t, c, seq, "")
	if m := j.next(); m.GetGetState().GetMigrationId() != migB {
		t.Fatalf("job got %v", m)
	}
}

// TestJobSocketOtherStrategyTarget: the target of another strategy is told
// its migration id, is no handover's target, and gets no initial state.
func TestJobSocketOtherStrategyTarget(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.run(e.jsConfig())
	c, _ := e.dial(a, noHeartbeats)
	role := "primary@" + migA[:8]
	seq := send(t, c, &managerv1.ControllerMessage{Msg: &managerv1.ControllerMessage_Start{Start: &managerv1.StartInstance{
		Job: job("cam", svc("media")), Role: role, RuntimeRole: "primary", FencingToken: 4, MigrationId: migA,
	}}})
	expectReport(t, c, phaseRunning)
	expectAck(t, c, seq, "")
	if env := readEnvOfService(t, e, "cam", "media"); env[jobsocket.EnvHandover] != "" || env["NORSK_MIGRATION_ID"] != migA {
		t.Fatalf("environment: %v", env)
	}
	j, ack := attachJob(t, a.JobSocketPath("cam", role))
	if ack.GetMigrationId() != migA || ack.GetHandover() {
		t.Fatalf("hello_ack: %v", ack)
	}
	seq = send(t, c, cutoverApplyMsg("cam", role, 4, migA, nil))
	expectRefusal(t, c, seq, codeFailedPrecondition, "is not the target of migration "+migA)
	// The job's first message from the worker is the propose, not a state.
	seq = send(t, c, getStateMsg("cam", role, 4, migB))
	expectAck(t, c, seq, "")
	if m := j.next(); m.GetGetState().GetMigrationId() != migB {
		t.Fatalf("job got %v", m)
	}
}

// TestJobSocketAbortWhileDetached: an abort the job cannot be told at once
// follows its next hello_ack; a target told abort stays silent and refuses
// the apply.
func TestJobSocketAbortWhileDetached(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.run(e.jsConfig())
	c, _ := e.dial(a, noHeartbeats)
	startRunning(t, c, job("cam", svc("media")), "primary", 3)
	role := "primary@" + migA[:8]
	seq := send(t, c, targetStartMsg(job("cam", svc("media")), "primary", 4, migA, nil))
	expectReport(t, c, phaseRunning)
	expectAck(t, c, seq, "")

	src, _ := attachJob(t, a.JobSocketPath("cam", "primary"))
	seq = send(t, c, getStateMsg("cam", "primary", 3, migA))
	expectAck(t, c, seq, "")
	src.next()
	src.send(jobState(migA, nil, ""))
	expectMigration(t, c, kindState, "cam", "primary", 3, migA)
	src.close()
	runtimetest.Eventually(t, wait, "the worker sees the source detach", func() bool { return !a.JobAttached("cam", "primary") })

	// An empty role aborts every instance of the job here.
	seq = send(t, c, abortMsg("cam", "", migA, "given up"))
	expectAck(t, c, seq, "")

	src, _ = attachJob(t, a.JobSocketPath("cam", "primary"))
	if m := src.next(); m.GetAbort().GetMigrationId() != migA || m.GetAbort().GetReason() != "given up" {
		t.Fatalf("source got %v", m)
	}
	tgt, ack := attachJob(t, a.JobSocketPath("cam", role))
	if ack.GetMigrationId() != migA || !ack.GetHandover() {
		t.Fatalf("target hello_ack (an aborted target stays a handover's, silent): %v", ack)
	}
	if m := tgt.next(); m.GetAbort().GetMigrationId() != migA {
		t.Fatalf("target got %v (want the abort, and no initial state)", m)
	}
	seq = send(t, c, cutoverApplyMsg("cam", role, 4, migA, nil))
	expectRefusal(t, c, seq, codeFailedPrecondition, "was aborted")
	tgt.send(jobReady(migA, nil)) // ignored
	seq = send(t, c, getStateMsg("cam", "primary", 3, migB))
	expectAck(t, c, seq, "") // the source is unlocked; the target's ready was not reported
}

// TestJobSocketReportsWaitForTheStream: reports made while no Control
// stream is up are sent on the next one, after its hello.
func TestJobSocketReportsWaitForTheStream(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.run(e.jsConfig())
	c, _ := e.dial(a, noHeartbeats)
	seq := send(t, c, targetStartMsg(job("cam", svc("media")), "primary", 4, migA, []byte("s")))
	expectReport(t, c, phaseRunning)
	expectAck(t, c, seq, "")
	role := "primary@" + migA[:8]
	c.Close()
	runtimetest.Eventually(t, wait, "the stream is down", func() bool { return !a.Connected() })

	j, _ := attachJob(t, a.JobSocketPath("cam", role))
	j.next() // initial state
	j.send(jobReady(migA, []byte("r")))
	j.send(jobAbort(migA, "changed my mind"))
	j.send(jobAbort(migB, "stale")) // not reported
	runtimetest.Eventually(t, wait, "three reports kept", func() bool { return a.KeptMigrationReports() == 3 })
	c2, _ := e.dial(a, noHeartbeats)
	expectMigration(t, c2, kindDelivered, "cam", role, 4, migA)
	expectMigration(t, c2, kindReady, "cam", role, 4, migA)
	if r := expectMigration(t, c2, kindAborted, "cam", role, 4, migA); r.GetReason() != "changed my mind" {
		t.Fatalf("aborted report: %v", r)
	}
}

// TestJobSocketSurvivesWorkerRestart: the client library redials when the
// worker restarts; the adopted instance's socket is at the same path.
func TestJobSocketSurvivesWorkerRestart(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.run(e.jsConfig())
	c, _ := e.dial(a, noHeartbeats)
	startRunning(t, c, job("cam", svc("media")), "primary", 5)
	path := a.JobSocketPath("cam", "primary")

	h := newRecordingHandler()
	runSession(t, path, h)
	h.awaitAttached(t)
	if err := a.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("socket left after the worker stopped: %v", err)
	}

	cfg := e.jsConfig()
	cfg.Token = ""
	b := e.run(cfg)
	if b.JobSocketPath("cam", "primary") != path {
		t.Fatalf("path %q after the restart, was %q", b.JobSocketPath("cam", "primary"), path)
	}
	id := h.awaitAttached(t)
	if id.JobID != "cam" || id.Role != "primary" {
		t.Fatalf("identity after the restart: %+v", id)
	}
	c2, _ := e.dial(b, noHeartbeats)
	seq := send(t, c2, getStateMsg("cam", "primary", 5, migA))
	expectAck(t, c2, seq, "")
	if r := expectMigration(t, c2, kindState, "cam", "primary", 5, migA); string(r.GetPayload()) != "state-of-"+migA {
		t.Fatalf("state report: %v", r)
	}
}

// TestJobSocketGetStateBeforeFirstAttach: a get_state that finds a job not
// yet attached waits for its first attach, within the grace; it is refused
// when the grace runs out, when the instance stops, when its migration is
// aborted, and at once for a job that attached before and dropped its
// stream.
func TestJobSocketGetStateBeforeFirstAttach(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// grace is the worker's attach grace: short only where it is meant
		// to run out, long enough elsewhere that only the event ends the
		// wait, however loaded the machine.
		grace time.Duration
		// then happens after the get_state was sent to job "cam" (token 3),
		// which has not attached; it returns the refusal's code and text.
		then func(t *testing.T, c *workertest.Controller) (string, string)
	}{
		{"the grace runs out", 300 * time.Millisecond, func(*testing.T, *workertest.Controller) (string, string) {
			return codeFailedPrecondition, "the job did not attach within 300ms of its start"
		}},
		{"the instance stops", time.Hour, func(t *testing.T, c *workertest.Controller) (string, string) {
			send(t, c, stopMsg("cam", "primary", 3, 0, reasonUser, ""))
			return codeNotFound, "instance cam/primary has stopped"
		}},
		{"its migration is aborted", time.Hour, func(t *testing.T, c *workertest.Controller) (string, string) {
			send(t, c, abortMsg("cam", "primary", migA, "operator"))
			return codeFailedPrecondition, "migration " + migA + " was aborted before the job attached"
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			cfg := e.jsConfig()
			cfg.JobSocketAttachGrace = tc.grace
			a := e.run(cfg)
			c, _ := e.dial(a, noHeartbeats)
			startRunning(t, c, job("cam", svc("media")), "primary", 3)
			seq := send(t, c, getStateMsg("cam", "primary", 3, migA))
			code, msg := tc.then(t, c)
			expectRefusalAmong(t, c, seq, code, msg)
		})
	}

	t.Run("a job that attached before", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		a := e.run(e.jsConfig())
		c, _ := e.dial(a, noHeartbeats)
		startRunning(t, c, job("cam", svc("media")), "primary", 3)
		j, _ := attachJob(t, a.JobSocketPath("cam", "primary"))
		j.close()
		runtimetest.Eventually(t, wait, "the job's stream ends", func() bool { return !a.JobAttached("cam", "primary") })
		seq := send(t, c, getStateMsg("cam", "primary", 3, migA))
		expectRefusal(t, c, seq, codeFailedPrecondition, "instance cam/primary has no job socket session (is --job-socket on and does the job attach?)")
	})
}
