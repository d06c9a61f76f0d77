package automanager

import (
	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/pkg/jobspec"
)

// templateMemo remembers the bundle jobs a roll found running their
// bundle's template, by the identity of the two messages compared.
//
// Every pass that plans a bundle compares each of its jobs with the
// template expanded for it (jobspec.SameTemplate: two deep copies and a
// deep compare per job), and a bundle is planned whenever any of its
// jobs changes. A stored row is never modified (decision 0069), so the
// same job message under the same bundle message gives the same answer:
// in process, where a job view holds the stored job and the mirror the
// stored bundle, only the jobs whose rows changed since are compared
// again. Out of process every read is a new message and the memo only
// misses. Only the passes' goroutine uses it, with mirrorMu held; a full
// pass drops the jobs it did not read (keep), so a deleted job's entry
// lasts until the next, and compares again only the jobs whose rows
// changed.
type templateMemo struct {
	same map[string]templatePair // by job id
}

type templatePair struct {
	job    *managerv1.Job
	bundle *managerv1.Bundle
}

func newTemplateMemo() *templateMemo { return &templateMemo{same: map[string]templatePair{}} }

// runs reports whether job runs template i of bundle b for replica r;
// when it does not, want is the job the template expands to, a new
// message the caller may change. A nil memo compares every time.
func (m *templateMemo) runs(b *managerv1.Bundle, i, r int, job *managerv1.Job) (want *managerv1.Job, same bool) {
	if m != nil {
		if p, ok := m.same[job.GetJobId()]; ok && p.job == job && p.bundle == b {
			return nil, true
		}
	}
	want = jobspec.ExpandBundleJob(b, i, r)
	if !jobspec.SameTemplate(job, want) {
		return want, false
	}
	if m != nil {
		m.same[job.GetJobId()] = templatePair{job: job, bundle: b}
	}
	return nil, true
}

// keep forgets the jobs for which has is false (those a full pass did
// not read).
func (m *templateMemo) keep(has func(jobID string) bool) {
	for id := range m.same {
		if !has(id) {
			delete(m.same, id)
		}
	}
}
