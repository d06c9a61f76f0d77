package state_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
)

// world builds a state with nodes and jobs in every state the refusals
// need:
//
//	nodes: n-online, n-other (online), n-reg (registered, token unused),
//	       n-lost (lost), n-stopping (terminate requested), n-term
//	       (terminated), n-dereg (deregistering, worker had registered),
//	       n-reg-dereg (deregistering, token never used)
//	jobs:  job-pre (no instance), job-run (primary running on n-online),
//	       job-stopping (primary stopping on n-online), job-stopped (primary
//	       stopped on n-online), job-prep (primary prepared on n-online),
//	       job-prep-lost (primary prepared on n-lost), job-lost (primary
//	       running on n-lost), job-done (completed), job-failed (failed)
func world(tb testing.TB) *fixture {
	tb.Helper()
	f := newFixture(tb)
	for _, n := range []string{"n-online", "n-other", "n-lost", "n-stopping", "n-term", "n-dereg"} {
		f.onlineNode(n)
	}
	f.registerNode("n-reg")
	f.registerNode("n-reg-dereg")
	for _, j := range []string{"job-pre", "job-run", "job-stopping", "job-stopped", "job-prep", "job-prep-lost", "job-lost", "job-done", "job-failed"} {
		f.createJob(j)
	}
	f.running("job-run", "primary", "n-online")
	f.running("job-stopping", "primary", "n-online")
	f.must(cStop("job-stopping", "primary", "n-online"))
	tok := f.running("job-stopped", "primary", "n-online")
	f.must(cStop("job-stopped", "primary", "n-online"))
	f.must(cReports("n-online", report("job-stopped", "primary", tok, phaseStopped)))
	for _, p := range []struct{ job, node string }{{"job-prep", "n-online"}, {"job-prep-lost", "n-lost"}} {
		tok := f.must(cBindOpts(p.job, "primary", p.node, &managerv1.StartJobOptions{DeferStart: true})).Value.(uint64)
		f.must(cReports(p.node, report(p.job, "primary", tok, phasePrepared)))
	}
	f.running("job-lost", "primary", "n-lost")
	f.running("job-done", "primary", "n-online")
	f.must(cComplete("job-done"))
	f.must(cFail("job-failed", "gave up"))
	f.must(cLost("n-lost", "stream gone"))
	f.must(cTerminate("n-stopping"))
	f.must(cTerminate("n-term"))
	f.must(cTerminated("n-term", "gone"))
	f.must(cDereg("n-dereg"))
	f.must(cDereg("n-reg-dereg"))
	return f
}

func manyTags(n int, prefix string) map[string]string {
	m := map[string]string{}
	for i := range n {
		m[fmt.Sprintf("%s%03d", prefix, i)] = "v"
	}
	return m
}

// TestApplyRefusals checks every refusal of every command: its code, that
// its message names what was wrong (and, for INVALID_ARGUMENT, the field),
// and that nothing changed but the applied index.
func TestApplyRefusals(t *testing.T) {
	withHash := func(id string, hash uint64) func(*fixture) *storev1.Command {
		return func(*fixture) *storev1.Command {
			j := jobSpec(id)
			j.CurrentHash = hash
			return cUpdate(j)
		}
	}
	fixed := func(c *storev1.Command) func(*fixture) *storev1.Command {
		return func(*fixture) *storev1.Command { return c }
	}
	badJob := func(mut func(*managerv1.Job)) func(*fixture) *storev1.Command {
		return func(*fixture) *storev1.Command { j := jobSpec("job-new"); mut(j); return cCreate(j) }
	}
	tests := []struct {
		name  string
		setup func(*fixture)
		cmd   func(*fixture) *storev1.Command
		code  apierr.Code
		names []string
		field string // for INVALID_ARGUMENT; a prefix ends in "*"
	}{
		{name: "empty command", cmd: fixed(&storev1.Command{}), code: apierr.InvalidArgument, names: []string{"empty command"}},

		// CreateJob
		// The FSM does not validate input (decision 0046): a job the
		// handler would refuse (a bad id, no services) applies as logged;
		// only a command without the job's key is refused, as a
		// proposer's bug.
		{name: "create/no job", cmd: fixed(cCreate(nil)), code: apierr.Internal, names: []string{"no job"}},
		{name: "create/empty id", cmd: badJob(func(j *managerv1.Job) { j.JobId = "" }), code: apierr.Internal, names: []string{"no job id"}},
		{name: "create/exists", cmd: fixed(cCreate(jobSpec("job-pre"))), code: apierr.AlreadyExists, names: []string{`"job-pre"`}},
		{name: "create/exists even when terminal", cmd: fixed(cCreate(jobSpec("job-done"))), code: apierr.AlreadyExists, names: []string{`"job-done"`}},

		// UpdateJob
		{name: "update/no id", cmd: withHash("", 1), code: apierr.NotFound, names: []string{`""`}},
		{name: "update/unknown", cmd: withHash("job-nope", 1), code: apierr.NotFound, names: []string{`"job-nope"`}},
		{name: "update/stale hash", cmd: func(f *fixture) *storev1.Command {
			h := f.read().Job(nil, "job-pre").GetJob().GetCurrentHash()
			return withHash("job-pre", h-1)(f)
		}, code: apierr.FailedPrecondition, names: []string{`"job-pre"`, "has changed"}},
		{name: "update/no hash", cmd: withHash("job-pre", 0), code: apierr.FailedPrecondition, names: []string{`"job-pre"`, "hash 0"}},
		{name: "update/hash of another job", cmd: func(f *fixture) *storev1.Command {
			return withHash("job-pre", f.read().Job(nil, "job-run").GetJob().GetCurrentHash())(f)
		}, code: apierr.FailedPrecondition, names: []string{`"job-pre"`}},

		// DeleteJob
		{name: "delete/unknown", cmd: fixed(cDelete("job-nope")), code: apierr.NotFound, names: []string{`"job-nope"`}},
		{name: "delete/empty id", cmd: fixed(cDelete("")), code: apierr.NotFound, names: []string{`""`}},

		// BindInstance
		{name: "bind/empty role", cmd: fixed(cBind("job-pre", "", "n-online")), code: apierr.Internal, names: []string{"no role"}},
		{name: "bind/unknown job", cmd: fixed(cBind("job-nope", "primary", "n-online")), code: apierr.NotFound, names: []string{`"job-nope"`}},
		{name: "bind/completed job", cmd: fixed(cBind("job-done", "backup", "n-other")), code: apierr.FailedPrecondition, names: []string{`"job-done"`, "completed"}},
		{name: "bind/failed job", cmd: fixed(cBind("job-failed", "primary", "n-online")), code: apierr.FailedPrecondition, names: []string{`"job-failed"`, "marked failed (gave up)"}},
		{name: "bind/unknown node", cmd: fixed(cBind("job-pre", "primary", "n-nope")), code: apierr.NotFound, names: []string{`"n-nope"`}},
		{name: "bind/registered node", cmd: fixed(cBind("job-pre", "primary", "n-reg")), code: apierr.FailedPrecondition, names: []string{`"n-reg"`, "registered"}},
		{name: "bind/lost node", cmd: fixed(cBind("job-pre", "primary", "n-lost")), code: apierr.FailedPrecondition, names: []string{`"n-lost"`, "lost"}},
		{name: "bind/stopping node", cmd: fixed(cBind("job-pre", "primary", "n-stopping")), code: apierr.FailedPrecondition, names: []string{`"n-stopping"`, "stopping"}},
		{name: "bind/terminated node", cmd: fixed(cBind("job-pre", "primary", "n-term")), code: apierr.FailedPrecondition, names: []string{`"n-term"`, "terminated"}},
		{name: "bind/deregistering node", cmd: fixed(cBind("job-pre", "primary", "n-dereg")), code: apierr.FailedPrecondition, names: []string{`"n-dereg"`, "being deregistered"}},
		{name: "bind/running elsewhere", cmd: fixed(cBind("job-run", "primary", "n-other")), code: apierr.FailedPrecondition, names: []string{"job-run/primary", "running", `"n-online"`}},
		{name: "bind/running on the same node", cmd: fixed(cBind("job-run", "primary", "n-online")), code: apierr.FailedPrecondition, names: []string{"job-run/primary", "running"}},
		{name: "bind/prepared", cmd: fixed(cBind("job-prep", "primary", "n-other")), code: apierr.FailedPrecondition, names: []string{"job-prep/primary", "prepared"}},
		{name: "bind/provisioned", setup: func(f *fixture) { f.bind("job-pre", "primary", "n-online") },
			cmd: fixed(cBind("job-pre", "primary", "n-other")), code: apierr.FailedPrecondition, names: []string{"job-pre/primary", "provisioned"}},
		{name: "bind/still stopping", cmd: fixed(cBind("job-stopping", "primary", "n-other")), code: apierr.FailedPrecondition, names: []string{"job-stopping/primary", "still stopping", `"n-online"`}},

		// StopInstance
		{name: "stop/unknown job", cmd: fixed(cStop("job-nope", "primary", "n-online")), code: apierr.NotFound, names: []string{`"job-nope"`}},
		{name: "stop/no instance", cmd: fixed(cStop("job-pre", "primary", "n-online")), code: apierr.NotFound, names: []string{`"job-pre"`, `"primary"`}},
		{name: "stop/other role", cmd: fixed(cStop("job-run", "backup", "n-online")), code: apierr.NotFound, names: []string{`"job-run"`, `"backup"`}},
		{name: "stop/wrong node", cmd: fixed(cStop("job-run", "primary", "n-other")), code: apierr.NotFound, names: []string{"job-run/primary", `"n-online"`, `"n-other"`}},

		// StartPreparedInstance
		{name: "start prepared/unknown job", cmd: fixed(cStartPrepared("job-nope", "primary", "n-online")), code: apierr.NotFound, names: []string{`"job-nope"`}},
		{name: "start prepared/no instance", cmd: fixed(cStartPrepared("job-pre", "primary", "n-online")), code: apierr.NotFound, names: []string{`"job-pre"`, `"primary"`}},
		{name: "start prepared/wrong node", cmd: fixed(cStartPrepared("job-prep", "primary", "n-other")), code: apierr.NotFound, names: []string{"job-prep/primary", `"n-other"`}},
		{name: "start prepared/stopping", cmd: fixed(cStartPrepared("job-stopping", "primary", "n-online")), code: apierr.FailedPrecondition, names: []string{"job-stopping/primary", "stopping"}},
		{name: "start prepared/stopped", cmd: fixed(cStartPrepared("job-stopped", "primary", "n-online")), code: apierr.FailedPrecondition, names: []string{"job-stopped/primary", "stopped"}},
		{name: "start prepared/node lost", cmd: fixed(cStartPrepared("job-prep-lost", "primary", "n-lost")), code: apierr.FailedPrecondition, names: []string{`"n-lost"`, "lost"}},

		// CompleteJob, MarkJobFailed
		{name: "complete/unknown", cmd: fixed(cComplete("job-nope")), code: apierr.NotFound, names: []string{`"job-nope"`}},
		{name: "complete/failed", cmd: fixed(cComplete("job-failed")), code: apierr.FailedPrecondition, names: []string{`"job-failed"`, "marked failed", "gave up"}},
		{name: "fail/unknown", cmd: fixed(cFail("job-nope", "x")), code: apierr.NotFound, names: []string{`"job-nope"`}},

		// RegisterSlot
		{name: "register/empty name", cmd: fixed(cRegister("n-new", "", "", "tok-new")), code: apierr.Internal, names: []string{"no node name"}},
		{name: "register/empty id", cmd: fixed(cRegister("", "new", "", "tok-new")), code: apierr.Internal, names: []string{"no node id"}},
		{name: "register/no token", cmd: fixed(cRegister("n-new", "new", "", "")), code: apierr.Internal, names: []string{"token"}},
		{name: "register/name taken", cmd: fixed(cRegister("n-new", "name-n-online", "", "tok-new")), code: apierr.AlreadyExists, names: []string{`"name-n-online"`, `"n-online"`}},
		{name: "register/id taken", cmd: fixed(cRegister("n-online", "new", "", "tok-new")), code: apierr.AlreadyExists, names: []string{`"n-online"`}},
		{name: "register/name of a deregistering slot", cmd: fixed(cRegister("n-new", "name-n-dereg", "", "tok-new")), code: apierr.AlreadyExists, names: []string{`"name-n-dereg"`}},

		// MemberRegister
		{name: "member/unknown token", cmd: fixed(cMember("tok-nope", "sec-new", "a:1")), code: apierr.Unauthenticated, names: []string{"not known"}},
		{name: "member/token reused", cmd: fixed(cMember("tok-n-online", "sec-new", "a:1")), code: apierr.Unauthenticated, names: []string{`"n-online"`, "already been used"}},
		{name: "member/token of a deregistered slot", cmd: fixed(cMember("tok-n-reg-dereg", "sec-new", "a:1")), code: apierr.Unauthenticated, names: []string{"not known"}},
		{name: "member/token without a secret", cmd: fixed(cMember("tok-n-reg", "", "a:1")), code: apierr.Internal, names: []string{"secret"}},
		{name: "member/unknown secret", cmd: fixed(cMember("", "sec-nope", "a:1")), code: apierr.Unauthenticated, names: []string{"secret"}},
		{name: "member/nothing presented", cmd: fixed(cMember("", "", "a:1")), code: apierr.Unauthenticated, names: []string{"neither"}},
		{name: "member/deregistering", cmd: fixed(cMember("", "sec-n-dereg", "a:1")), code: apierr.Unauthenticated, names: []string{`"n-dereg"`, "deregistered"}},

		// Node commands on unknown nodes
		{name: "deregister/unknown", cmd: fixed(cDereg("n-nope")), code: apierr.NotFound, names: []string{`"n-nope"`}},
		{name: "pool/unknown", cmd: fixed(cPool("n-nope", "p")), code: apierr.NotFound, names: []string{`"n-nope"`}},
		{name: "online/unknown", cmd: fixed(cOnline("n-nope")), code: apierr.NotFound, names: []string{`"n-nope"`}},
		{name: "lost/unknown", cmd: fixed(cLost("n-nope", "x")), code: apierr.NotFound, names: []string{`"n-nope"`}},
		{name: "terminate/unknown", cmd: fixed(cTerminate("n-nope")), code: apierr.NotFound, names: []string{`"n-nope"`}},
		{name: "terminate/deregistering", cmd: fixed(cTerminate("n-dereg")), code: apierr.FailedPrecondition, names: []string{`"n-dereg"`, "deregistered"}},
		{name: "terminated/unknown", cmd: fixed(cTerminated("n-nope", "x")), code: apierr.NotFound, names: []string{`"n-nope"`}},

		// SetNodeTags
		{name: "tags/unknown node", cmd: fixed(cTags("n-nope", map[string]string{"a": "b"})), code: apierr.NotFound, names: []string{`"n-nope"`}},
		{name: "tags/too many at once", cmd: fixed(cTags("n-online", manyTags(257, "t"))), code: apierr.InvalidArgument, field: "tags"},
		{name: "tags/too many merged", setup: func(f *fixture) { f.must(cTags("n-reg", manyTags(256, "t"))) },
			cmd: fixed(cTags("n-reg", map[string]string{"one-more": "x"})), code: apierr.InvalidArgument, field: "tags", names: []string{"257"}},
		{name: "tags/spare with instances", cmd: fixed(cTags("n-online", map[string]string{"spare": "true"})), code: apierr.FailedPrecondition, names: []string{`"n-online"`, "hot spare"}},

		// SetNodeIdleExpiry
		{name: "idle/unknown", cmd: fixed(cIdle("n-nope", 5)), code: apierr.NotFound, names: []string{`"n-nope"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := world(t)
			if tt.setup != nil {
				tt.setup(f)
			}
			err := f.refused(tt.cmd(f), tt.code, tt.names...)
			if tt.code != apierr.InvalidArgument {
				return
			}
			var ae *apierr.Error
			if !errors.As(err, &ae) {
				t.Fatalf("%v is not an *apierr.Error", err)
			}
			if p, ok := strings.CutSuffix(tt.field, "*"); ok {
				if !strings.HasPrefix(ae.Field, p) {
					t.Errorf("field = %q, want %s…", ae.Field, p)
				}
			} else if ae.Field != tt.field {
				t.Errorf("field = %q, want %q (%v)", ae.Field, tt.field, err)
			}
		})
	}
}

// TestApplyIdempotentCommandsChangeNothing: commands whose effect is already
// in place succeed and change nothing but the applied index.
func TestApplyIdempotentCommandsChangeNothing(t *testing.T) {
	tests := []struct {
		name string
		cmd  *storev1.Command
	}{
		{"complete a completed job", cComplete("job-done")},
		{"fail a failed job again", cFail("job-failed", "another reason")},
		{"stop a stopping instance", cStop("job-stopping", "primary", "n-online")},
		{"stop a stopped instance", cStop("job-stopped", "primary", "n-online")},
		{"start a running instance", cStartPrepared("job-run", "primary", "n-online")},
		{"deregister a deregistering slot", cDereg("n-dereg")},
		{"terminate a stopping node", cTerminate("n-stopping")},
		{"terminate a terminated node", cTerminate("n-term")},
		{"lose a lost node", cLost("n-lost", "again")},
		{"lose a registered node", cLost("n-reg", "never came")},
		{"set the pool a slot has", cPool("n-online", "")},
		{"report nothing", cReports("n-online")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := world(t)
			before := f.snap()
			res := f.must(tt.cmd)
			if len(res.Events) != 0 {
				t.Errorf("raised %s", eventKinds(res.Events))
			}
			f.unchangedSince(before)
		})
	}
}

// TestApplyUnknownCommandType: a command of a type this binary does not
// know (a newer member proposed it) must be refused as such, changing
// nothing.
func TestApplyUnknownCommandType(t *testing.T) {
	f := world(t)
	// Field 99 of Command: a command message this binary has no field for.
	b := protowire.AppendTag(nil, 99, protowire.BytesType)
	b = protowire.AppendBytes(b, []byte{0x0a, 0x01, 'x'})
	cmd := &storev1.Command{}
	if err := proto.Unmarshal(b, cmd); err != nil {
		t.Fatal(err)
	}
	f.refused(cmd, apierr.FailedPrecondition, "unknown command")
}
