package placement

import (
	"strconv"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
)

// The job tags a bundle's expansion stamps on each replica job.
const (
	TagBundleID     = "bundleId"
	TagReplicaIndex = "replicaIndex"
	TagJobName      = "jobName"
	// TagTemplate names a job's template for hot-spare reservations
	// (warmFor / reservedFor); a bundle job's template defaults to its
	// jobName.
	TagTemplate = "template"
)

// BundleJobOf reads a job's bundle tags: its bundle, replica index and job
// name (ok false for a job of no bundle).
func BundleJobOf(job *managerv1.Job) (bundleID string, replicaIndex int, jobName string, ok bool) {
	t := job.GetTags()
	bundleID = t[TagBundleID]
	if bundleID == "" {
		return "", 0, "", false
	}
	r, err := strconv.Atoi(t[TagReplicaIndex])
	if err != nil || r < 0 {
		return "", 0, "", false
	}
	return bundleID, r, t[TagJobName], true
}

func bundleSpec(b *managerv1.Bundle, jobName string) *managerv1.BundleJobSpec {
	for _, j := range b.GetJobs() {
		if j.GetJobName() == jobName {
			return j
		}
	}
	return nil
}

func antiAffinity(a managerv1.AntiAffinity) AntiAffinity {
	if a == managerv1.AntiAffinity_ANTI_AFFINITY_FORBID {
		return Forbid
	}
	return Allow
}

// RequestForJob is the placement request of instance role of job: its
// requirements, its services (for the runtime rule) and, for a job of bundle b (nil when it has none or the
// bundle is gone), the bundle's pools (the bundle's pool for the primary,
// the resilience policy's for the other replicas), anti-affinity between
// replicas, co-location and separation within the replica, and spread (the
// bundle's intraReplicaPlacement.spreadAttribute, else cfg.PoolSpread of
// its pool). The
// AutoManager, ExplainPlacement and `norsk-ctl job why` all place through
// it, so an explanation is the placement that would run.
func RequestForJob(cfg Config, job *managerv1.Job, b *managerv1.Bundle, role string) Request {
	req := requestForJob(job, b, role)
	if attr := cfg.PoolSpread[req.Pool]; attr != "" && req.Spread == nil && req.Pool != "" {
		req.Spread = &Spread{Attribute: attr, Group: "pool:" + req.Pool}
	}
	return req
}

func requestForJob(job *managerv1.Job, b *managerv1.Bundle, role string) Request {
	req := Request{
		JobID:        job.GetJobId(),
		Role:         role,
		Template:     job.GetTags()[TagTemplate],
		Requirements: RequirementsFromProto(job.GetAutoPlacement().GetRequirements()),
		Services:     ServicesFromProto(job.GetServices()),
	}
	bundleID, replica, name, ok := BundleJobOf(job)
	if !ok || b == nil || b.GetBundleId() != bundleID {
		return req
	}
	req.BundleID, req.ReplicaIndex, req.JobName = bundleID, replica, name
	if req.Template == "" {
		req.Template = name
	}
	req.Pool = b.GetPool()
	if p := b.GetResiliencePolicy(); p != nil {
		if replica > 0 && p.GetPool() != "" {
			req.Pool = p.GetPool()
		}
		req.AntiAffinity = AntiAffinityPolicy{
			SameNode: antiAffinity(p.GetSameNode()), SameAz: antiAffinity(p.GetSameAz()), SameCloud: antiAffinity(p.GetSameCloud()),
		}
	}
	if spec := bundleSpec(b, name); spec != nil {
		req.CoLocateWith = spec.GetCoLocateWith()
		req.SeparateFrom = spec.GetSeparateFrom()
	}
	if a := b.GetIntraReplicaPlacement().GetSpreadAttribute(); a != "" {
		req.Spread = &Spread{Attribute: a}
	}
	return req
}

// AllocationForJob is what a bound instance of job (of bundle b, or nil)
// holds on its node: the allocation its request would have committed.
func AllocationForJob(cfg Config, in *managerv1.Instance, job *managerv1.Job, b *managerv1.Bundle) Allocation {
	req := RequestForJob(cfg, job, b, in.GetRole())
	return req.Allocation(Result{NodeID: in.GetNodeId(), GPU: -1})
}
