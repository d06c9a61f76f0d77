package manager

import (
	"context"

	"connectrpc.com/connect"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/apierr"
	"github.com/norsk-go/norsk-manager/internal/jobspec"
)

// MaxGraceMs bounds a stop's grace period (one hour).
const MaxGraceMs = 3_600_000

func (h *handler) CreateJob(ctx context.Context, req *connect.Request[managerv1.CreateJobRequest]) (*connect.Response[managerv1.JobHash], error) {
	job := req.Msg.GetJob()
	if err := jobspec.ValidateJob(job); err != nil {
		return nil, toConnect(err)
	}
	if h.read().Job(nil, job.GetJobId()) != nil {
		return nil, toConnect(apierr.AlreadyExistsf("job %q already exists", job.GetJobId()))
	}
	res, err := h.apply(ctx, &storev1.Command{Cmd: &storev1.Command_CreateJob{CreateJob: &storev1.CreateJob{Job: job}}})
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&managerv1.JobHash{Hash: int64(res.Index)}), nil
}

func (h *handler) UpdateJob(ctx context.Context, req *connect.Request[managerv1.UpdateJobRequest]) (*connect.Response[managerv1.JobHash], error) {
	job := req.Msg.GetJob()
	if err := jobspec.ValidateJob(job); err != nil {
		return nil, toConnect(err)
	}
	cur := h.read().Job(nil, job.GetJobId())
	if cur == nil {
		return nil, toConnect(apierr.NotFoundf("no job %q", job.GetJobId()))
	}
	if cur.GetJob().GetCurrentHash() != job.GetCurrentHash() {
		return nil, toConnect(apierr.FailedPreconditionf("job %q has changed: the update is against hash %d, the job is at hash %d; read it again and retry",
			job.GetJobId(), job.GetCurrentHash(), cur.GetJob().GetCurrentHash()))
	}
	res, err := h.apply(ctx, &storev1.Command{Cmd: &storev1.Command_UpdateJob{UpdateJob: &storev1.UpdateJob{Job: job}}})
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&managerv1.JobHash{Hash: int64(res.Index)}), nil
}

// requireJob checks an id and that the job exists.
func (h *handler) requireJob(field, id string) error {
	if err := jobspec.ValidateID(field, id); err != nil {
		return err
	}
	if h.read().Job(nil, id) == nil {
		return apierr.NotFoundf("no job %q", id)
	}
	return nil
}

func (h *handler) DeleteJob(ctx context.Context, req *connect.Request[managerv1.DeleteJobRequest]) (*connect.Response[managerv1.DeleteJobResponse], error) {
	if err := h.requireJob("jobId", req.Msg.GetJobId()); err != nil {
		return nil, toConnect(err)
	}
	if _, err := h.apply(ctx, &storev1.Command{Cmd: &storev1.Command_DeleteJob{DeleteJob: &storev1.DeleteJob{JobId: req.Msg.GetJobId()}}}); err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&managerv1.DeleteJobResponse{}), nil
}

func (h *handler) JobById(ctx context.Context, req *connect.Request[managerv1.JobByIdRequest]) (*connect.Response[managerv1.JobWithHistory], error) {
	if err := jobspec.ValidateID("jobId", req.Msg.GetJobId()); err != nil {
		return nil, toConnect(err)
	}
	r := h.read()
	rec := r.Job(nil, req.Msg.GetJobId())
	if rec == nil {
		return nil, toConnect(apierr.NotFoundf("no job %q", req.Msg.GetJobId()))
	}
	return connect.NewResponse(r.JobView(rec, true)), nil
}

func (h *handler) JobSearch(ctx context.Context, req *connect.Request[managerv1.JobSearchRequest]) (*connect.Response[managerv1.JobSearchResponse], error) {
	match, err := jobspec.CompileFilters(req.Msg.GetFilters())
	if err != nil {
		return nil, toConnect(err)
	}
	limit := int(req.Msg.GetLimit())
	r := h.read()
	out := &managerv1.JobSearchResponse{Index: r.Index()}
	r.Jobs(nil, req.Msg.GetAfterJobId(), func(rec *storev1.JobRecord) bool {
		if ctx.Err() != nil {
			return false
		}
		if !match(searchable(rec)) {
			return true
		}
		out.Jobs = append(out.Jobs, r.JobView(rec, req.Msg.GetIncludeHistory()))
		return limit == 0 || len(out.Jobs) < limit
	})
	if err := ctx.Err(); err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(out), nil
}

func searchable(rec *storev1.JobRecord) jobspec.Searchable {
	s := jobspec.Searchable{
		ID:        rec.GetJob().GetJobId(),
		Tags:      rec.GetJob().GetTags(),
		CreatedAt: rec.GetCreatedAt().AsTime(),
		UpdatedAt: rec.GetUpdatedAt().AsTime(),
	}
	if st := rec.GetJob().GetStartDateTime(); st != nil {
		s.StartAt = st.AsTime()
	}
	return s
}

// instanceArgs checks the (job, role, node) of an instance call.
func instanceArgs(jobID, role, nodeID string) error {
	if err := jobspec.ValidateID("jobId", jobID); err != nil {
		return err
	}
	if err := jobspec.ValidateRole("role", role); err != nil {
		return err
	}
	return jobspec.ValidateID("nodeId", nodeID)
}

func (h *handler) StartJob(ctx context.Context, req *connect.Request[managerv1.StartJobRequest]) (*connect.Response[managerv1.StartJobResponse], error) {
	m := req.Msg
	if err := instanceArgs(m.GetJobId(), m.GetRole(), m.GetNodeId()); err != nil {
		return nil, toConnect(err)
	}
	if rr := m.GetOptions().GetRuntimeRole(); rr != "" {
		if err := jobspec.ValidateRole("options.runtimeRole", rr); err != nil {
			return nil, toConnect(err)
		}
	}
	if n := len(m.GetOptions().GetMigrationInitialState()); n > 4<<20 {
		return nil, toConnect(apierr.Invalid("options.migrationInitialState", "is %d bytes (at most 4 MiB)", n))
	}
	if err := h.requireJob("jobId", m.GetJobId()); err != nil {
		return nil, toConnect(err)
	}
	if h.read().Node(nil, m.GetNodeId()) == nil {
		return nil, toConnect(apierr.NotFoundf("no node %q", m.GetNodeId()))
	}
	res, err := h.apply(ctx, &storev1.Command{Cmd: &storev1.Command_BindInstance{BindInstance: &storev1.BindInstance{
		JobId: m.GetJobId(), Role: m.GetRole(), NodeId: m.GetNodeId(), Options: m.GetOptions(),
	}}})
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&managerv1.StartJobResponse{FencingToken: res.Index}), nil
}

func (h *handler) StopJob(ctx context.Context, req *connect.Request[managerv1.StopJobRequest]) (*connect.Response[managerv1.StopJobResponse], error) {
	m := req.Msg
	if err := instanceArgs(m.GetJobId(), m.GetRole(), m.GetNodeId()); err != nil {
		return nil, toConnect(err)
	}
	if g := m.GetOptions().GetGraceMs(); g > MaxGraceMs {
		return nil, toConnect(apierr.Invalid("options.graceMs", "%d is more than an hour (%d)", g, MaxGraceMs))
	}
	if err := h.requireJob("jobId", m.GetJobId()); err != nil {
		return nil, toConnect(err)
	}
	if _, err := h.apply(ctx, &storev1.Command{Cmd: &storev1.Command_StopInstance{StopInstance: &storev1.StopInstance{
		JobId: m.GetJobId(), Role: m.GetRole(), NodeId: m.GetNodeId(),
		GraceMs: m.GetOptions().GetGraceMs(), MigrationId: m.GetOptions().GetMigrationId(),
	}}}); err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&managerv1.StopJobResponse{}), nil
}

func (h *handler) StartPreparedJob(ctx context.Context, req *connect.Request[managerv1.StartPreparedJobRequest]) (*connect.Response[managerv1.StartPreparedJobResponse], error) {
	m := req.Msg
	if err := instanceArgs(m.GetJobId(), m.GetRole(), m.GetNodeId()); err != nil {
		return nil, toConnect(err)
	}
	if err := h.requireJob("jobId", m.GetJobId()); err != nil {
		return nil, toConnect(err)
	}
	if _, err := h.apply(ctx, &storev1.Command{Cmd: &storev1.Command_StartPrepared{StartPrepared: &storev1.StartPreparedInstance{
		JobId: m.GetJobId(), Role: m.GetRole(), NodeId: m.GetNodeId(),
	}}}); err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&managerv1.StartPreparedJobResponse{}), nil
}

func (h *handler) CompleteJob(ctx context.Context, req *connect.Request[managerv1.CompleteJobRequest]) (*connect.Response[managerv1.CompleteJobResponse], error) {
	if err := h.requireJob("jobId", req.Msg.GetJobId()); err != nil {
		return nil, toConnect(err)
	}
	if _, err := h.apply(ctx, &storev1.Command{Cmd: &storev1.Command_CompleteJob{CompleteJob: &storev1.CompleteJob{JobId: req.Msg.GetJobId()}}}); err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&managerv1.CompleteJobResponse{}), nil
}

// MaxReasonLen bounds a failure reason.
const MaxReasonLen = 4096

func (h *handler) MarkJobFailed(ctx context.Context, req *connect.Request[managerv1.MarkJobFailedRequest]) (*connect.Response[managerv1.MarkJobFailedResponse], error) {
	if err := h.requireJob("jobId", req.Msg.GetJobId()); err != nil {
		return nil, toConnect(err)
	}
	reason := req.Msg.GetReason()
	switch {
	case reason == "":
		return nil, toConnect(apierr.Invalid("reason", "must say why the job failed"))
	case len(reason) > MaxReasonLen:
		return nil, toConnect(apierr.Invalid("reason", "is %d bytes (at most %d)", len(reason), MaxReasonLen))
	}
	if _, err := h.apply(ctx, &storev1.Command{Cmd: &storev1.Command_MarkJobFailed{MarkJobFailed: &storev1.MarkJobFailed{JobId: req.Msg.GetJobId(), Reason: reason}}}); err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&managerv1.MarkJobFailedResponse{}), nil
}
