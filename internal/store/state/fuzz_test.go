package state_test

import (
	"bytes"
	"strings"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/store/state"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
)

var (
	seedOnce  sync.Once
	seedBytes []byte
	seedIndex uint64
)

// seededSnapshot is the snapshot of world(): nodes and jobs in every state.
func seededSnapshot(tb testing.TB) ([]byte, uint64) {
	seedOnce.Do(func() {
		f := world(tb)
		seedBytes, seedIndex = f.snap(), f.index
	})
	return seedBytes, seedIndex
}

// fuzzSeeds are commands of every type aimed at the seeded state.
func fuzzSeeds() []*storev1.Command {
	return []*storev1.Command{
		{},
		cCreate(jobSpec("job-new")),
		cCreate(jobSpec("job-pre")),
		cUpdate(&managerv1.Job{JobId: "job-pre", CurrentHash: 10, Services: []*managerv1.Service{{Name: "a", Image: "x"}}}),
		cDelete("job-run"),
		cDelete("job-stopping"),
		cBind("job-pre", "primary", "n-other"),
		cBindOpts("job-pre", "p@1", "n-online", &managerv1.StartJobOptions{DeferStart: true, RuntimeRole: "p", MigrationInitialState: []byte{1}}),
		cBind("job-lost", "primary", "n-other"),
		cStop("job-run", "primary", "n-online"),
		cStartPrepared("job-prep", "primary", "n-online"),
		cComplete("job-run"),
		cFail("job-run", "x"),
		cReports("n-online", report("job-run", "primary", 30, phaseStopped), report("job-prep", "primary", 40, phaseRunning)),
		cReports("n-lost", report("job-lost", "primary", 50, phaseRunning)),
		cRegister("n-new", "new", "pool", "tok-new"),
		cMember("tok-n-reg", "sec-new", "a:1"),
		cMember("", "sec-n-online", "a:1"),
		cDereg("n-online"),
		cPool("n-online", "gold"),
		cOnline("n-lost", report("job-lost", "primary", 50, phaseRunning), report("job-prep-lost", "primary", 45, phasePrepared)),
		cOnline("n-online"),
		cLost("n-online", "gone"),
		cTerminate("n-online"),
		cTerminated("n-online", "gone"),
		cTerminated("n-dereg", "gone"),
		cTags("n-reg", map[string]string{"spare": "true"}),
		cIdle("n-online", 5),
		// Input today's handlers refuse, as an older release may have
		// logged it (decision 0046): it applies, or is refused by state.
		cCreate(&managerv1.Job{JobId: "job-bare"}),
		cCreateBundle(&managerv1.Bundle{BundleId: "b", Jobs: []*managerv1.BundleJobSpec{{JobName: "x"}, {JobName: "x", CoLocateWith: []string{"y"}}}}),
		cTags("n-online", map[string]string{"bad key": "v"}),
		cBind("job-pre", "pri mary", "n-online"),
	}
}

// FuzzApply decodes arbitrary bytes as a command, as the raft FSM does, and
// applies it to a seeded state: Apply must not panic, a refusal must change
// nothing but the index, and whatever it leaves must snapshot and restore
// to the same bytes.
func FuzzApply(f *testing.F) {
	for _, c := range fuzzSeeds() {
		b, err := proto.Marshal(c)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	snap, index := seededSnapshot(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		cmd := &storev1.Command{}
		if err := proto.Unmarshal(data, cmd); err != nil {
			return // the FSM refuses undecodable entries before Apply
		}
		s := state.New(state.Limits{MaxHistory: 20})
		if _, err := s.Restore(bytes.NewReader(snap)); err != nil {
			t.Fatal(err)
		}
		res := s.Apply(index+1, cmd)
		after := snapBytes(t, s)
		if res.Err != nil {
			// INTERNAL is a proposer's bug: a stamp missing, or (decision
			// 0046) a command without the key its table needs.
			proposerBug := cmd.GetRegisterSlot() != nil || cmd.GetMemberRegister() != nil || strings.Contains(res.Err.Error(), "the command carries no")
			if apierr.CodeOf(res.Err) == apierr.Internal && !proposerBug {
				t.Errorf("%s refused as INTERNAL: %v", cmdName(cmd), res.Err)
			}
			if d := diffRecords(t, snap, after); d != "" {
				t.Fatalf("refused %s (%v) changed the state: %s", cmdName(cmd), res.Err, d)
			}
		}
		for _, e := range res.Events {
			if e.GetIndex() != index+1 {
				t.Fatalf("event not stamped: %v", e)
			}
			if _, err := proto.Marshal(e); err != nil {
				t.Fatalf("event does not encode: %v", err)
			}
		}
		g := state.New(state.Limits{MaxHistory: 20})
		if _, err := g.Restore(bytes.NewReader(after)); err != nil {
			t.Fatalf("the state %s left does not restore: %v", cmdName(cmd), err)
		}
		if b := snapBytes(t, g); !bytes.Equal(b, after) {
			t.Fatalf("round trip after %s differs: %s", cmdName(cmd), diffRecords(t, after, b))
		}
	})
}
