package state_test

import (
	"bytes"
	"go/ast"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/store/state"
	"github.com/norsk-go/norsk-manager/pkg/jobspec"
)

// looserLog is a log an older release wrote, whose handlers accepted what
// today's refuse: each entry breaks a rule pkg/jobspec has now (checked by
// the test, so the log stays "looser" if the rules move).
func looserLog() (log []*storev1.Command, tighter []error) {
	job := jobSpec("encoder")
	job.Services[0].Name = "Encoder_Main" // today: lower-case letters, digits and '-'
	bundle := &managerv1.Bundle{BundleId: "live", Jobs: []*managerv1.BundleJobSpec{{
		JobName: "enc", Job: &managerv1.Job{Services: []*managerv1.Service{{Name: "main", Image: "hello:dev"}}},
		StartMode: "later", // today: auto or manual
	}}}
	tags := map[string]string{"rack id": "7"} // today: no spaces in a tag name
	kv := []*managerv1.KvWrite{kvPut(strings.Repeat("k", jobspec.MaxKVKeyLen+1), "v", nil)}
	log = []*storev1.Command{
		cRegister("n1", "n1", "", "tok-n1"),
		cCreate(job),
		cCreateBundle(bundle),
		cTags("n1", tags),
		cKV("ns", nil, kv...),
		cAppendAudit("", "deploy", "x"), // today: a source is required
	}
	tighter = []error{
		jobspec.ValidateJob(job),
		jobspec.ValidateBundle(bundle),
		jobspec.ValidateTags("tags", tags),
		jobspec.ValidateKVCommit("ns", kv, &managerv1.KvCommitOptions{}),
		jobspec.ValidateAuditAppend("", "deploy", "x"),
	}
	return log, tighter
}

// TestReplayLogWrittenUnderLooserRules: entries an older release committed
// under looser validation apply on replay exactly as they did then — the
// FSM does not re-validate input (decision 0046) — so a member on a new
// binary and one on the old, or a member replaying its log after an
// upgrade, reach the same state.
func TestReplayLogWrittenUnderLooserRules(t *testing.T) {
	t.Parallel()
	log, tighter := looserLog()
	for i, err := range tighter {
		if err == nil {
			t.Fatalf("entry %d: today's rules accept it; the test needs a rule that is tighter now", i)
		}
	}
	apply := func() (*fixture, []state.Result) {
		f := newFixture(t)
		var out []state.Result
		for _, c := range log {
			out = append(out, f.must(proto.Clone(c).(*storev1.Command)))
		}
		return f, out
	}
	first, firstRes := apply()
	replay, replayRes := apply()
	if !bytes.Equal(first.snap(), replay.snap()) {
		t.Fatalf("the replayed state differs: %s", diffRecords(t, first.snap(), replay.snap()))
	}
	for i := range firstRes {
		if len(firstRes[i].Events) != len(replayRes[i].Events) {
			t.Errorf("entry %d raised %d events on replay, %d at first", i, len(replayRes[i].Events), len(firstRes[i].Events))
		}
	}
	// What the entries wrote is there, as written.
	r := replay.read()
	if got := r.Job(nil, "encoder").GetJob().GetServices()[0].GetName(); got != "Encoder_Main" {
		t.Errorf("job encoder's service is %q", got)
	}
	if r.Bundle(nil, "live") == nil || r.Job(nil, jobspec.BundleJobID("live", "enc", 0)) == nil {
		t.Error("bundle live or its job is missing")
	}
	if got := replay.node("n1").GetNode().GetTags()["rack id"]; got != "7" {
		t.Errorf("node n1's tag rack id = %q", got)
	}
	if r.KVGet(nil, "ns", strings.Repeat("k", jobspec.MaxKVKeyLen+1)) == nil {
		t.Error("the long key is missing")
	}
	// A snapshot of it restores to the same state, and the log goes on.
	g := state.New(state.Limits{})
	if _, err := g.Restore(bytes.NewReader(replay.snap())); err != nil {
		t.Fatalf("restore: %v", err)
	}
	if !bytes.Equal(snapBytes(t, g), replay.snap()) {
		t.Error("the restored state's snapshot differs")
	}
}

// TestFSMDoesNotValidateInput reads the package's source: no non-test file
// calls a validator of pkg/jobspec (Validate…, Check…, CompileFilters).
// Validation happens once, where a request enters (decision 0046); a rule
// the FSM needs on stored data is keyed to the schema version (rules.go).
func TestFSMDoesNotValidateInput(t *testing.T) {
	t.Parallel()
	fset, files := stateSource(t)
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if x, ok := sel.X.(*ast.Ident); ok && x.Name == "jobspec" {
				fn := sel.Sel.Name
				if strings.HasPrefix(fn, "Validate") || strings.HasPrefix(fn, "Check") || fn == "CompileFilters" {
					t.Errorf("%s: the FSM calls jobspec.%s; validate in the handler instead (decision 0046)", fset.Position(sel.Pos()), fn)
				}
			}
			return true
		})
	}
}
