package api

import (
	"context"
	"fmt"

	"connectrpc.com/connect"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/rpcerr"
	"github.com/norsk-go/norsk-manager/internal/store/state"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
	"github.com/norsk-go/norsk-manager/pkg/jobspec"
)

// MaxGraceMs bounds a stop's grace period (one hour).
const MaxGraceMs = jobspec.MaxGraceMs

func (h *Handler) CreateJob(ctx context.Context, req *connect.Request[managerv1.CreateJobRequest]) (*connect.Response[managerv1.JobHash], error) {
	job := req.Msg.GetJob()
	if err := jobspec.ValidateJob(job); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	if err := jobspec.CheckLimits("job", job); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	if h.read().Job(nil, job.GetJobId()) != nil {
		return nil, rpcerr.ToConnect(apierr.AlreadyExistsf("job %s already exists", apierr.Quote(job.GetJobId())))
	}
	res, err := h.apply(ctx, &storev1.Command{Cmd: &storev1.Command_CreateJob{CreateJob: &storev1.CreateJob{Job: job}}})
	if err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	return connect.NewResponse(&managerv1.JobHash{Hash: res.Index}), nil
}

func (h *Handler) UpdateJob(ctx context.Context, req *connect.Request[managerv1.UpdateJobRequest]) (*connect.Response[managerv1.JobHash], error) {
	job := req.Msg.GetJob()
	if err := jobspec.ValidateJob(job); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	if err := jobspec.CheckLimits("job", job); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	cur := h.read().Job(nil, job.GetJobId())
	if cur == nil {
		return nil, rpcerr.ToConnect(apierr.NotFoundf("no job %s", apierr.Quote(job.GetJobId())))
	}
	if cur.GetJob().GetCurrentHash() != job.GetCurrentHash() {
		return nil, rpcerr.ToConnect(apierr.FailedPreconditionf("job %q has changed: the update is against hash %d, the job is at hash %d; read it again and retry",
			job.GetJobId(), job.GetCurrentHash(), cur.GetJob().GetCurrentHash()))
	}
	res, err := h.apply(ctx, &storev1.Command{Cmd: &storev1.Command_UpdateJob{UpdateJob: &storev1.UpdateJob{Job: job}}})
	if err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	return connect.NewResponse(&managerv1.JobHash{Hash: res.Index}), nil
}

// requireJob checks an id and that the job exists.
func (h *Handler) requireJob(field, id string) error {
	if err := jobspec.ValidateID(field, id); err != nil {
		return err
	}
	if h.read().Job(nil, id) == nil {
		return apierr.NotFoundf("no job %s", apierr.Quote(id))
	}
	return nil
}

func (h *Handler) DeleteJob(ctx context.Context, req *connect.Request[managerv1.DeleteJobRequest]) (*connect.Response[managerv1.DeleteJobResponse], error) {
	if err := h.requireJob("jobId", req.Msg.GetJobId()); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	if _, err := h.apply(ctx, &storev1.Command{Cmd: &storev1.Command_DeleteJob{DeleteJob: &storev1.DeleteJob{JobId: req.Msg.GetJobId()}}}); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	return connect.NewResponse(&managerv1.DeleteJobResponse{}), nil
}

func (h *Handler) JobById(ctx context.Context, req *connect.Request[managerv1.JobByIdRequest]) (*connect.Response[managerv1.JobWithHistory], error) {
	if err := jobspec.ValidateID("jobId", req.Msg.GetJobId()); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	r := h.read()
	rec := r.Job(nil, req.Msg.GetJobId())
	if rec == nil {
		return nil, rpcerr.ToConnect(apierr.NotFoundf("no job %s", apierr.Quote(req.Msg.GetJobId())))
	}
	return connect.NewResponse(r.JobView(rec, true)), nil
}

func (h *Handler) JobSearch(ctx context.Context, req *connect.Request[managerv1.JobSearchRequest]) (*connect.Response[managerv1.JobSearchResponse], error) {
	match, err := jobspec.CompileFilters(req.Msg.GetFilters())
	if err != nil {
		return nil, rpcerr.ToConnect(err)
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
		return nil, rpcerr.ToConnect(err)
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
	return jobspec.ValidateInstance("", jobID, role, nodeID)
}

// checkStart validates one start (field prefixes the item's fields) and
// checks its job and node exist, so an obviously refused start writes
// nothing.
func (h *Handler) checkStart(r *state.Read, field string, m *managerv1.StartJobRequest) error {
	if err := jobspec.ValidateStart(field, m); err != nil {
		return err
	}
	if r.Job(nil, m.GetJobId()) == nil {
		return apierr.NotFoundf("no job %s", apierr.Quote(m.GetJobId()))
	}
	if r.Node(nil, m.GetNodeId()) == nil {
		return apierr.NotFoundf("no node %s", apierr.Quote(m.GetNodeId()))
	}
	return nil
}

func bindOf(m *managerv1.StartJobRequest) *storev1.BindInstance {
	return &storev1.BindInstance{JobId: m.GetJobId(), Role: m.GetRole(), NodeId: m.GetNodeId(), Options: m.GetOptions()}
}

func (h *Handler) StartJob(ctx context.Context, req *connect.Request[managerv1.StartJobRequest]) (*connect.Response[managerv1.StartJobResponse], error) {
	if err := h.checkStart(h.read(), "", req.Msg); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	res, err := h.apply(ctx, &storev1.Command{Cmd: &storev1.Command_BindInstance{BindInstance: bindOf(req.Msg)}})
	if err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	return connect.NewResponse(&managerv1.StartJobResponse{FencingToken: res.Index}), nil
}

// MaxStartJobs bounds the starts of one StartJobs call.
const MaxStartJobs = jobspec.MaxStartJobs

// StartJobs binds many instances in one write. Malformed input refuses
// the whole call; a start the store refuses (an unknown job or node, an
// offline node, a running instance) is answered in its own result and the
// others still bind.
func (h *Handler) StartJobs(ctx context.Context, req *connect.Request[managerv1.StartJobsRequest]) (*connect.Response[managerv1.StartJobsResponse], error) {
	starts := req.Msg.GetStarts()
	if err := jobspec.ValidateStarts(starts); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	r := h.read()
	out := make([]*managerv1.StartResult, len(starts))
	cmd := &storev1.BindInstances{}
	var which []int
	for i, m := range starts {
		if err := h.checkStart(r, fmt.Sprintf("starts[%d].", i), m); err != nil {
			out[i] = resultOf(err)
			continue
		}
		cmd.Binds = append(cmd.Binds, bindOf(m))
		which = append(which, i)
	}
	if len(cmd.Binds) > 0 {
		res, err := h.apply(ctx, &storev1.Command{Cmd: &storev1.Command_BindInstances{BindInstances: cmd}})
		if err != nil {
			return nil, rpcerr.ToConnect(err)
		}
		got, _ := res.Value.(*managerv1.StartJobsResponse)
		if len(got.GetResults()) != len(which) {
			return nil, rpcerr.ToConnect(apierr.New(apierr.Internal, "StartJobs: the store answered %d results for %d starts", len(got.GetResults()), len(which)))
		}
		for k, i := range which {
			out[i] = got.GetResults()[k]
		}
	}
	return connect.NewResponse(&managerv1.StartJobsResponse{Results: out}), nil
}

// resultOf is a refused start's result.
func resultOf(err error) *managerv1.StartResult {
	return &managerv1.StartResult{ErrorCode: apierr.CodeOf(err).String(), ErrorMessage: err.Error()}
}

func (h *Handler) StopJob(ctx context.Context, req *connect.Request[managerv1.StopJobRequest]) (*connect.Response[managerv1.StopJobResponse], error) {
	m := req.Msg
	if err := instanceArgs(m.GetJobId(), m.GetRole(), m.GetNodeId()); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	if err := jobspec.ValidateGrace("options.graceMs", m.GetOptions().GetGraceMs()); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	if err := h.requireJob("jobId", m.GetJobId()); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	if _, err := h.apply(ctx, &storev1.Command{Cmd: &storev1.Command_StopInstance{StopInstance: &storev1.StopInstance{
		JobId: m.GetJobId(), Role: m.GetRole(), NodeId: m.GetNodeId(),
		GraceMs: m.GetOptions().GetGraceMs(), MigrationId: m.GetOptions().GetMigrationId(), Reason: m.GetOptions().GetReason(),
	}}}); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	return connect.NewResponse(&managerv1.StopJobResponse{}), nil
}

func (h *Handler) StartPreparedJob(ctx context.Context, req *connect.Request[managerv1.StartPreparedJobRequest]) (*connect.Response[managerv1.StartPreparedJobResponse], error) {
	m := req.Msg
	if err := instanceArgs(m.GetJobId(), m.GetRole(), m.GetNodeId()); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	if err := h.requireJob("jobId", m.GetJobId()); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	if _, err := h.apply(ctx, &storev1.Command{Cmd: &storev1.Command_StartPrepared{StartPrepared: &storev1.StartPreparedInstance{
		JobId: m.GetJobId(), Role: m.GetRole(), NodeId: m.GetNodeId(),
	}}}); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	return connect.NewResponse(&managerv1.StartPreparedJobResponse{}), nil
}

func (h *Handler) CompleteJob(ctx context.Context, req *connect.Request[managerv1.CompleteJobRequest]) (*connect.Response[managerv1.CompleteJobResponse], error) {
	if err := h.requireJob("jobId", req.Msg.GetJobId()); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	if _, err := h.apply(ctx, &storev1.Command{Cmd: &storev1.Command_CompleteJob{CompleteJob: &storev1.CompleteJob{JobId: req.Msg.GetJobId()}}}); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	return connect.NewResponse(&managerv1.CompleteJobResponse{}), nil
}

// MaxReasonLen bounds a failure reason.
const MaxReasonLen = jobspec.MaxReasonLen

func (h *Handler) MarkJobFailed(ctx context.Context, req *connect.Request[managerv1.MarkJobFailedRequest]) (*connect.Response[managerv1.MarkJobFailedResponse], error) {
	if err := h.requireJob("jobId", req.Msg.GetJobId()); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	reason := req.Msg.GetReason()
	if err := jobspec.ValidateFailReason(reason); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	if _, err := h.apply(ctx, &storev1.Command{Cmd: &storev1.Command_MarkJobFailed{MarkJobFailed: &storev1.MarkJobFailed{JobId: req.Msg.GetJobId(), Reason: reason}}}); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	return connect.NewResponse(&managerv1.MarkJobFailedResponse{}), nil
}
