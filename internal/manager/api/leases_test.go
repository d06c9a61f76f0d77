package api_test

import (
	"testing"

	"connectrpc.com/connect"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
)

// TestLeaseHandlers: pausing and resuming leases over a fake backend; the
// lease status needs the node controller, which a follower lacks.
func TestLeaseHandlers(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	h := e.h
	e.run(t, []hcase{
		{name: "PauseLeases/NoReason", do: call(h.PauseLeases, &managerv1.PauseLeasesRequest{By: "ops"}),
			code: connect.CodeInvalidArgument, names: []string{"reason:"}},
		{name: "PauseLeases/NoBy", do: call(h.PauseLeases, &managerv1.PauseLeasesRequest{Reason: "upgrade"}),
			code: connect.CodeInvalidArgument, names: []string{"by:"}},
		{name: "PauseLeases/Good", do: call(h.PauseLeases, &managerv1.PauseLeasesRequest{Reason: "upgrade", By: "ops"}),
			want: []*storev1.Command{{Cmd: &storev1.Command_SetLeasesPaused{SetLeasesPaused: &storev1.SetLeasesPaused{Paused: true, Reason: "upgrade", By: "ops"}}}}},
		{name: "ResumeLeases/NoBy", do: call(h.ResumeLeases, &managerv1.ResumeLeasesRequest{}),
			code: connect.CodeInvalidArgument, names: []string{"by:"}},
		{name: "ResumeLeases/Good", do: call(h.ResumeLeases, &managerv1.ResumeLeasesRequest{By: "ops"}),
			want: []*storev1.Command{{Cmd: &storev1.Command_SetLeasesPaused{SetLeasesPaused: &storev1.SetLeasesPaused{By: "ops"}}}}},
		{name: "GetLeaseStatus/NoController", do: call(h.GetLeaseStatus, &managerv1.GetLeaseStatusRequest{}),
			code: connect.CodeUnavailable, names: []string{"primary term"}},
	})
}
