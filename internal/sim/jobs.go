package sim

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// jobIndex names a scenario's bundles and jobs and maps a job id back to
// its ordinal: bundle <prefix>-b<i> holds jobs j<k>, whose bundle job ids
// are <prefix>-b<i>.j<k>.0 and whose ordinal is i × perBundle + k.
type jobIndex struct {
	prefix    string
	perBundle int
	n         int
}

func (x *jobIndex) bundles() int { return (x.n + x.perBundle - 1) / x.perBundle }

func (x *jobIndex) bundleID(i int) string { return fmt.Sprintf("%s-b%06d", x.prefix, i) }

// bundle is bundle number i: its jobs each ask for capacity, run one
// service (a command: the process runtime's kind, which every simulated
// node reports) and are placed automatically.
func (x *jobIndex) bundle(i int, capacity float64) *norsk.Bundle {
	b := &norsk.Bundle{BundleId: x.bundleID(i)}
	for k := 0; k < x.perBundle && i*x.perBundle+k < x.n; k++ {
		b.Jobs = append(b.Jobs, &norsk.BundleJobSpec{
			JobName:      fmt.Sprintf("j%02d", k),
			Requirements: &norsk.JobRequirements{RequiredCapacity: capacity},
			Job:          &norsk.Job{Services: []*norsk.Service{{Name: "svc", Command: []string{"/bin/sim"}}}},
		})
	}
	return b
}

// ordinal is a job id's ordinal, if it is one of the scenario's jobs.
func (x *jobIndex) ordinal(jobID string) (int, bool) {
	rest, ok := strings.CutPrefix(jobID, x.prefix+"-b")
	if !ok {
		return 0, false
	}
	bs, rest, ok := strings.Cut(rest, ".j")
	if !ok {
		return 0, false
	}
	ks, _, ok := strings.Cut(rest, ".")
	if !ok {
		return 0, false
	}
	b, err1 := strconv.Atoi(bs)
	k, err2 := strconv.Atoi(ks)
	if err1 != nil || err2 != nil || k >= x.perBundle {
		return 0, false
	}
	o := b*x.perBundle + k
	if o >= x.n {
		return 0, false
	}
	return o, true
}
