package jobspec

import (
	"fmt"
	"regexp"
	"strconv"

	"google.golang.org/protobuf/proto"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
	"github.com/norsk-go/norsk-manager/pkg/placement"
)

// The tags a bundle's expansion stamps on each replica job.
const (
	TagBundleID     = placement.TagBundleID
	TagReplicaIndex = placement.TagReplicaIndex
	TagJobName      = placement.TagJobName
	// TagDormant marks a manual-start bundle job that is not to be placed
	// until StartBundleJob ("true").
	TagDormant = "dormant"
)

// Bundle limits.
const (
	MaxBundleJobs     = 64
	MaxBundleReplicas = 16
	MaxBundleIDLen    = 63
)

var bundleNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]*$`)

// ValidateBundleName checks a bundle id or a bundle job name: 1–63
// characters of [a-z0-9-], starting with a letter or digit.
func ValidateBundleName(field, name string) error {
	switch {
	case name == "":
		return apierr.Invalid(field, "must not be empty")
	case len(name) > MaxBundleIDLen:
		return apierr.Invalid(field, "is %d characters long (at most %d)", len(name), MaxBundleIDLen)
	case !bundleNameRE.MatchString(name):
		return apierr.Invalid(field, "%s: use lower-case letters, digits and '-', starting with a letter or digit", apierr.Quote(name))
	}
	return nil
}

// Replicas is how many replicas a bundle runs: 1 without a resilience
// policy, else the policy's count (0 = 2: a primary and a backup).
func Replicas(b *managerv1.Bundle) int {
	p := b.GetResiliencePolicy()
	switch {
	case p == nil:
		return 1
	case p.GetReplicas() == 0:
		return 2
	}
	return int(p.GetReplicas())
}

// ReplicaRole is the role (slot) of a replica: 0 primary, 1 backup, n
// replica-n.
func ReplicaRole(replicaIndex int) string {
	switch replicaIndex {
	case 0:
		return "primary"
	case 1:
		return "backup"
	}
	return "replica-" + strconv.Itoa(replicaIndex)
}

// BundleJobID is the id of one replica job of a bundle:
// <bundleId>.<jobName>.<replicaIndex> ('.' appears in neither name).
func BundleJobID(bundleID, jobName string, replicaIndex int) string {
	return bundleID + "." + jobName + "." + strconv.Itoa(replicaIndex)
}

// BundleJobIDs are the ids of every replica job of a bundle, replica by
// replica, in the order of its jobs.
func BundleJobIDs(b *managerv1.Bundle) []string {
	var ids []string
	for r := 0; r < Replicas(b); r++ {
		for _, j := range b.GetJobs() {
			ids = append(ids, BundleJobID(b.GetBundleId(), j.GetJobName(), r))
		}
	}
	return ids
}

// ValidateBundle checks a bundle as CreateBundle and UpdateBundle receive it
// (bundle_id set). Manager-owned fields (state, times, revision) are not
// checked. Whether the pools exist is the caller's to check: it depends on
// the Manager's configuration.
func ValidateBundle(b *managerv1.Bundle) error {
	if b == nil {
		return apierr.Invalid("bundle", "is required")
	}
	if err := ValidateBundleName("bundle.bundleId", b.GetBundleId()); err != nil {
		return err
	}
	if err := ValidatePool("bundle.pool", b.GetPool()); err != nil {
		return err
	}
	if p := b.GetResiliencePolicy(); p != nil {
		if err := ValidatePool("bundle.resiliencePolicy.pool", p.GetPool()); err != nil {
			return err
		}
		if p.GetReplicas() == 1 || p.GetReplicas() > MaxBundleReplicas {
			return apierr.Invalid("bundle.resiliencePolicy.replicas", "%d: a resilience policy runs 2 to %d replicas (0 = 2)", p.GetReplicas(), MaxBundleReplicas)
		}
		for f, v := range map[string]managerv1.AntiAffinity{"sameNode": p.GetSameNode(), "sameAz": p.GetSameAz(), "sameCloud": p.GetSameCloud()} {
			if _, ok := managerv1.AntiAffinity_name[int32(v)]; !ok {
				return apierr.Invalid("bundle.resiliencePolicy."+f, "%d is not an anti-affinity (ALLOW or FORBID)", v)
			}
		}
	}
	if a := b.GetIntraReplicaPlacement().GetSpreadAttribute(); a != "" && (len(a) > MaxTagKeyLen || !tagKeyRE.MatchString(a)) {
		return apierr.Invalid("bundle.intraReplicaPlacement.spreadAttribute", "%s is not a tag name", apierr.Quote(a))
	}
	jobs := b.GetJobs()
	switch {
	case len(jobs) == 0:
		return apierr.Invalid("bundle.jobs", "a bundle needs at least one job")
	case len(jobs) > MaxBundleJobs:
		return apierr.Invalid("bundle.jobs", "has %d jobs (at most %d)", len(jobs), MaxBundleJobs)
	}
	index := make(map[string]int, len(jobs))
	for i, j := range jobs {
		f := fmt.Sprintf("bundle.jobs[%d]", i)
		if err := ValidateBundleName(f+".jobName", j.GetJobName()); err != nil {
			return err
		}
		if prev, dup := index[j.GetJobName()]; dup {
			return apierr.Invalid(f+".jobName", "%s is also the name of jobs[%d]; job names are unique within a bundle", apierr.Quote(j.GetJobName()), prev)
		}
		index[j.GetJobName()] = i
	}
	// Co-location groups (the transitive closure of coLocateWith), to find
	// a job that must both share and not share a node with another.
	group := make([]int, len(jobs))
	for i := range group {
		group[i] = i
	}
	var find func(int) int
	find = func(i int) int {
		for group[i] != i {
			group[i] = group[group[i]]
			i = group[i]
		}
		return i
	}
	for i, j := range jobs {
		f := fmt.Sprintf("bundle.jobs[%d]", i)
		switch j.GetStartMode() {
		case "", "auto", "manual":
		default:
			return apierr.Invalid(f+".startMode", "%s: use auto or manual", apierr.Quote(j.GetStartMode()))
		}
		if err := validateRequirements(f+".requirements", j.GetRequirements()); err != nil {
			return err
		}
		if j.GetJob() == nil {
			return apierr.Invalid(f+".job", "is required (the job's template)")
		}
		for k, other := range j.GetCoLocateWith() {
			ff := fmt.Sprintf("%s.coLocateWith[%d]", f, k)
			o, ok := index[other]
			switch {
			case !ok:
				return apierr.Invalid(ff, "%s names no job of the bundle", apierr.Quote(other))
			case o == i:
				return apierr.Invalid(ff, "a job cannot name itself")
			}
			group[find(i)] = find(o)
		}
		for k, other := range j.GetSeparateFrom() {
			ff := fmt.Sprintf("%s.separateFrom[%d]", f, k)
			o, ok := index[other]
			switch {
			case !ok:
				return apierr.Invalid(ff, "%s names no job of the bundle", apierr.Quote(other))
			case o == i:
				return apierr.Invalid(ff, "a job cannot name itself")
			}
		}
	}
	for i, j := range jobs {
		for k, other := range j.GetSeparateFrom() {
			if find(i) == find(index[other]) {
				return apierr.Invalid(fmt.Sprintf("bundle.jobs[%d].separateFrom[%d]", i, k),
					"%q must share a node with %q (through coLocateWith) and cannot also be kept apart from it", other, j.GetJobName())
			}
		}
	}
	// Every expanded job must be a valid job.
	for i := range jobs {
		for r := 0; r < Replicas(b); r++ {
			job := ExpandBundleJob(b, i, r)
			if err := ValidateJob(job); err != nil {
				return prefixField(fmt.Sprintf("bundle.jobs[%d].", i), err)
			}
		}
	}
	return nil
}

// prefixField renames an invalid-argument error's field "job.x" to
// prefix+"job.x" (a template's error names the template).
func prefixField(prefix string, err error) error {
	if e, ok := err.(*apierr.Error); ok && e.Field != "" {
		c := *e
		c.Field = prefix + e.Field
		return &c
	}
	return err
}

// ExpandBundleJob is replica r of the bundle's job i, as stored: the
// template with its id, the bundle's tags and the job's requirements (the
// template's own auto placement is replaced). A manual-start job carries
// the dormant tag; whether a stored job is dormant now is the store's
// (StartBundleJob clears it).
func ExpandBundleJob(b *managerv1.Bundle, i, r int) *managerv1.Job {
	spec := b.GetJobs()[i]
	job := &managerv1.Job{}
	if spec.GetJob() != nil {
		job = proto.Clone(spec.GetJob()).(*managerv1.Job)
	}
	job.JobId = BundleJobID(b.GetBundleId(), spec.GetJobName(), r)
	job.State = managerv1.JobState_JOB_STATE_PRE
	job.TerminalState = nil
	job.CurrentHash = 0
	req := spec.GetRequirements()
	if req == nil {
		req = &managerv1.JobRequirements{}
	}
	job.AutoPlacement = &managerv1.AutoPlacement{Requirements: proto.Clone(req).(*managerv1.JobRequirements)}
	if job.Tags == nil {
		job.Tags = map[string]string{}
	}
	job.Tags[TagBundleID] = b.GetBundleId()
	job.Tags[TagReplicaIndex] = strconv.Itoa(r)
	job.Tags[TagJobName] = spec.GetJobName()
	delete(job.Tags, TagDormant)
	if spec.GetStartMode() == "manual" {
		job.Tags[TagDormant] = "true"
	}
	return job
}

// SameTemplate reports whether a stored replica job runs what the expanded
// one would: everything but the Manager's fields and the dormant tag.
// It copies only the expanded job (the AutoManager compares every job of a
// bundle it plans, on every pass): the copy takes the stored job's Manager
// fields and dormant tag, and is compared with the stored job as it is.
func SameTemplate(stored, expanded *managerv1.Job) bool {
	b := proto.Clone(expanded).(*managerv1.Job)
	b.State, b.TerminalState, b.CurrentHash = stored.GetState(), stored.GetTerminalState(), stored.GetCurrentHash()
	if v, ok := stored.GetTags()[TagDormant]; ok {
		if b.Tags == nil {
			b.Tags = map[string]string{}
		}
		b.Tags[TagDormant] = v
	} else {
		delete(b.Tags, TagDormant)
	}
	return proto.Equal(stored, b)
}
