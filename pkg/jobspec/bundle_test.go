package jobspec

import (
	"testing"

	"google.golang.org/protobuf/proto"
	"pgregory.net/rapid"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
)

// sameTemplateRef is SameTemplate as it was first written: both jobs
// copied, the Manager's fields and the dormant tag cleared on each.
func sameTemplateRef(stored, expanded *managerv1.Job) bool {
	a := proto.Clone(stored).(*managerv1.Job)
	b := proto.Clone(expanded).(*managerv1.Job)
	for _, j := range []*managerv1.Job{a, b} {
		j.State, j.TerminalState, j.CurrentHash = 0, nil, 0
		delete(j.Tags, TagDormant)
	}
	return proto.Equal(a, b)
}

// genTemplateJob draws a job from a small space, so that two draws are
// often alike, and alike but for the fields SameTemplate ignores.
func genTemplateJob(t *rapid.T, label string) *managerv1.Job {
	j := &managerv1.Job{JobId: rapid.SampledFrom([]string{"b.channel.0", "b.channel.1"}).Draw(t, label+"-id")}
	if rapid.Bool().Draw(t, label+"-tags") {
		j.Tags = map[string]string{}
		for _, k := range []string{TagDormant, "bundleId", "env"} {
			if rapid.Bool().Draw(t, label+"-tag-"+k) {
				j.Tags[k] = rapid.SampledFrom([]string{"true", "x"}).Draw(t, label+"-val-"+k)
			}
		}
	}
	for i := range rapid.IntRange(0, 2).Draw(t, label+"-services") {
		j.Services = append(j.Services, &managerv1.Service{Name: []string{"main", "side"}[i],
			Image: rapid.SampledFrom([]string{"enc:1", "enc:2"}).Draw(t, label+"-image")})
	}
	j.State = managerv1.JobState(rapid.IntRange(0, 2).Draw(t, label+"-state"))
	j.CurrentHash = uint64(rapid.IntRange(0, 2).Draw(t, label+"-hash"))
	if rapid.Bool().Draw(t, label+"-terminal") {
		j.TerminalState = &managerv1.TerminalState{}
	}
	return j
}

// TestSameTemplateMatchesTheReference: SameTemplate, which copies only
// the expanded job, answers as copying and clearing both does, and
// changes neither job.
func TestSameTemplateMatchesTheReference(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		stored, expanded := genTemplateJob(t, "stored"), genTemplateJob(t, "expanded")
		s0, e0 := proto.Clone(stored), proto.Clone(expanded)
		if got, want := SameTemplate(stored, expanded), sameTemplateRef(stored, expanded); got != want {
			t.Fatalf("SameTemplate = %v, the reference %v\nstored %v\nexpanded %v", got, want, stored, expanded)
		}
		if !proto.Equal(stored, s0) || !proto.Equal(expanded, e0) {
			t.Fatal("SameTemplate changed a job it compared")
		}
	})
}

func BenchmarkSameTemplate(b *testing.B) {
	j := &managerv1.Job{JobId: "b.channel.0", Tags: map[string]string{"bundleId": "b", "jobName": "channel"},
		Services: []*managerv1.Service{{Name: "main", Image: "enc:1", Command: []string{"/enc", "--in", "srt://x"}, Env: map[string]string{"A": "1", "B": "2"}}}}
	e := proto.Clone(j).(*managerv1.Job)
	for b.Loop() {
		if !SameTemplate(j, e) {
			b.Fatal("differ")
		}
	}
}
