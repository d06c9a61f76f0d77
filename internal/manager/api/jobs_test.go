package api_test

import (
	"strings"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
)

// TestJobHandlers: the job calls over a fake backend. Each case builds on
// the store the cases before it left.
func TestJobHandlers(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	e.seedNode(t, "n1")
	h := e.h
	badImage := job("bad-image")
	badImage.Services[0].Image = ""
	e.run(t, []hcase{
		{name: "CreateJob/NoJob", do: call(h.CreateJob, &managerv1.CreateJobRequest{}),
			code: connect.CodeInvalidArgument, names: []string{"job:"}},
		{name: "CreateJob/BadID", do: call(h.CreateJob, &managerv1.CreateJobRequest{Job: job("no spaces")}),
			code: connect.CodeInvalidArgument, names: []string{"job.jobId:"}},
		{name: "CreateJob/NoServices", do: call(h.CreateJob, &managerv1.CreateJobRequest{Job: &managerv1.Job{JobId: "empty"}}),
			code: connect.CodeInvalidArgument, names: []string{"job.services:"}},
		{name: "CreateJob/ServiceWithoutImage", do: call(h.CreateJob, &managerv1.CreateJobRequest{Job: badImage}),
			code: connect.CodeInvalidArgument, names: []string{"job.services[0]"}},
		{name: "CreateJob/Good", do: call(h.CreateJob, &managerv1.CreateJobRequest{Job: job("life")}),
			want: []*storev1.Command{{Cmd: &storev1.Command_CreateJob{CreateJob: &storev1.CreateJob{Job: job("life")}}}},
			check: func(t *testing.T, resp proto.Message, _ []*storev1.Command) {
				if resp.(*managerv1.JobHash).GetHash() == 0 {
					t.Error("CreateJob answered hash 0; want the write's index")
				}
			}},
		{name: "CreateJob/Exists", do: call(h.CreateJob, &managerv1.CreateJobRequest{Job: job("life")}),
			code: connect.CodeAlreadyExists, names: []string{`"life"`}},
		{name: "UpdateJob/Unknown", do: call(h.UpdateJob, &managerv1.UpdateJobRequest{Job: job("nope")}),
			code: connect.CodeNotFound, names: []string{`"nope"`}},
		{name: "UpdateJob/StaleHash", do: call(h.UpdateJob, &managerv1.UpdateJobRequest{Job: withHash(job("life"), 1)}),
			code: connect.CodeFailedPrecondition, names: []string{`"life"`, "hash 1"}},
		{name: "UpdateJob/BadSpec", do: call(h.UpdateJob, &managerv1.UpdateJobRequest{Job: &managerv1.Job{JobId: "life"}}),
			code: connect.CodeInvalidArgument, names: []string{"job.services:"}},
		{name: "DeleteJob/BadID", do: call(h.DeleteJob, &managerv1.DeleteJobRequest{JobId: ""}),
			code: connect.CodeInvalidArgument, names: []string{"jobId:"}},
		{name: "DeleteJob/Unknown", do: call(h.DeleteJob, &managerv1.DeleteJobRequest{JobId: "nope"}),
			code: connect.CodeNotFound, names: []string{`"nope"`}},
		{name: "StartJob/BadRole", do: call(h.StartJob, &managerv1.StartJobRequest{JobId: "life", Role: "", NodeId: "n1"}),
			code: connect.CodeInvalidArgument, names: []string{"role:"}},
		{name: "StartJob/UnknownNode", do: call(h.StartJob, &managerv1.StartJobRequest{JobId: "life", Role: "primary", NodeId: "n9"}),
			code: connect.CodeNotFound, names: []string{`"n9"`}},
		{name: "StartJob/UnknownJob", do: call(h.StartJob, &managerv1.StartJobRequest{JobId: "nope", Role: "primary", NodeId: "n1"}),
			code: connect.CodeNotFound, names: []string{`"nope"`}},
		{name: "StartJob/Good", do: call(h.StartJob, &managerv1.StartJobRequest{JobId: "life", Role: "primary", NodeId: "n1"}),
			want: []*storev1.Command{{Cmd: &storev1.Command_BindInstance{BindInstance: &storev1.BindInstance{JobId: "life", Role: "primary", NodeId: "n1"}}}}},
		{name: "StartJobs/None", do: call(h.StartJobs, &managerv1.StartJobsRequest{}),
			code: connect.CodeInvalidArgument, names: []string{"starts:"}},
		{name: "StartJobs/OneMalformedRefusesAll", do: call(h.StartJobs, &managerv1.StartJobsRequest{Starts: []*managerv1.StartJobRequest{
			{JobId: "life", Role: "backup", NodeId: "n1"}, {JobId: "life", Role: "", NodeId: "n1"},
		}}), code: connect.CodeInvalidArgument, names: []string{"starts[1].role:"}},
		{name: "StartJobs/UnknownJobAnsweredAlone", do: call(h.StartJobs, &managerv1.StartJobsRequest{Starts: []*managerv1.StartJobRequest{
			{JobId: "nope", Role: "primary", NodeId: "n1"}, {JobId: "life", Role: "backup", NodeId: "n1"},
		}}),
			want: []*storev1.Command{{Cmd: &storev1.Command_BindInstances{BindInstances: &storev1.BindInstances{Binds: []*storev1.BindInstance{
				{JobId: "life", Role: "backup", NodeId: "n1"},
			}}}}},
			check: func(t *testing.T, resp proto.Message, _ []*storev1.Command) {
				res := resp.(*managerv1.StartJobsResponse).GetResults()
				if len(res) != 2 || res[0].GetErrorCode() != "NOT_FOUND" || !strings.Contains(res[0].GetErrorMessage(), `"nope"`) ||
					res[1].GetErrorCode() != "" || res[1].GetFencingToken() == 0 {
					t.Errorf("results %v; want nope NOT_FOUND, then life/backup bound", res)
				}
			}},
		{name: "StopJob/GraceTooLong", do: call(h.StopJob, &managerv1.StopJobRequest{JobId: "life", Role: "primary", NodeId: "n1",
			Options: &managerv1.StopJobOptions{GraceMs: 3600001}}),
			code: connect.CodeInvalidArgument, names: []string{"options.graceMs:"}},
		{name: "StopJob/BadNode", do: call(h.StopJob, &managerv1.StopJobRequest{JobId: "life", Role: "primary", NodeId: "a b"}),
			code: connect.CodeInvalidArgument, names: []string{"nodeId:"}},
		{name: "StopJob/Good", do: call(h.StopJob, &managerv1.StopJobRequest{JobId: "life", Role: "primary", NodeId: "n1",
			Options: &managerv1.StopJobOptions{GraceMs: 5000, Reason: "maintenance"}}),
			want: []*storev1.Command{{Cmd: &storev1.Command_StopInstance{StopInstance: &storev1.StopInstance{
				JobId: "life", Role: "primary", NodeId: "n1", GraceMs: 5000, Reason: "maintenance"}}}}},
		{name: "MarkJobFailed/NoReason", do: call(h.MarkJobFailed, &managerv1.MarkJobFailedRequest{JobId: "life"}),
			code: connect.CodeInvalidArgument, names: []string{"reason:"}},
		{name: "MarkJobFailed/ReasonTooLong", do: call(h.MarkJobFailed, &managerv1.MarkJobFailedRequest{JobId: "life", Reason: strings.Repeat("x", 64<<10)}),
			code: connect.CodeInvalidArgument, names: []string{"reason:"}},
		{name: "CompleteJob/Unknown", do: call(h.CompleteJob, &managerv1.CompleteJobRequest{JobId: "nope"}),
			code: connect.CodeNotFound, names: []string{`"nope"`}},
		{name: "JobSearch/BadFilter", do: call(h.JobSearch, &managerv1.JobSearchRequest{Filters: []*managerv1.JobFilter{{}}}),
			code: connect.CodeInvalidArgument, names: []string{"filters[0]"}},
		{name: "DeleteJob/Good", do: call(h.DeleteJob, &managerv1.DeleteJobRequest{JobId: "life"}),
			want: []*storev1.Command{{Cmd: &storev1.Command_DeleteJob{DeleteJob: &storev1.DeleteJob{JobId: "life"}}}}},
	})
}

func withHash(j *managerv1.Job, hash uint64) *managerv1.Job {
	j.CurrentHash = hash
	return j
}
