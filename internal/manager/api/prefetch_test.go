package api_test

import (
	"testing"

	"connectrpc.com/connect"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
)

// TestProvisioningHandlers: the calls that act through the member's node
// controller or providers (image prefetch, mock and cloud nodes, placement
// explained) refuse bad input, and what this member cannot do, before
// anything is written or sent. The fake backend has no node controller
// (as a follower, or between primary terms) and no mock provider.
func TestProvisioningHandlers(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	e.seedNode(t, "n1")
	e.seed(t,
		&storev1.Command{Cmd: &storev1.Command_RegisterSlot{RegisterSlot: &storev1.RegisterSlot{NodeId: "idle", NodeName: "idle", Token: "nrt_seed-idle"}}},
		&storev1.Command{Cmd: &storev1.Command_RegisterSlot{RegisterSlot: &storev1.RegisterSlot{NodeId: "proc", NodeName: "proc", Token: "nrt_seed-proc"}}},
		&storev1.Command{Cmd: &storev1.Command_MemberRegister{MemberRegister: &storev1.MemberRegister{Token: "nrt_seed-proc", NodeSecret: "nns_seed-proc", Address: "10.0.0.4:7000", Runtime: "process"}}},
		&storev1.Command{Cmd: &storev1.Command_NodeOnline{NodeOnline: &storev1.NodeOnline{NodeId: "proc", Hello: &managerv1.WorkerHello{NodeId: "proc"}}}},
	)
	h := e.h
	e.run(t, []hcase{
		{name: "PrefetchImages/BadNodeID", do: call(h.PrefetchImages, &managerv1.PrefetchImagesRequest{ImageRefs: []string{"hello:1"}}),
			code: connect.CodeInvalidArgument, names: []string{"nodeId:"}},
		{name: "PrefetchImages/UnknownNode", do: call(h.PrefetchImages, &managerv1.PrefetchImagesRequest{NodeId: "n9", ImageRefs: []string{"hello:1"}}),
			code: connect.CodeNotFound, names: []string{`"n9"`}},
		{name: "PrefetchImages/NoRefs", do: call(h.PrefetchImages, &managerv1.PrefetchImagesRequest{NodeId: "n1"}),
			code: connect.CodeInvalidArgument, names: []string{"imageRefs:"}},
		{name: "PrefetchImages/BadRef", do: call(h.PrefetchImages, &managerv1.PrefetchImagesRequest{NodeId: "n1", ImageRefs: []string{"hello:1", "UPPER CASE"}}),
			code: connect.CodeInvalidArgument, names: []string{"imageRefs[1]:"}},
		{name: "PrefetchImages/RefTwice", do: call(h.PrefetchImages, &managerv1.PrefetchImagesRequest{NodeId: "n1", ImageRefs: []string{"hello:1", "hello:1"}}),
			code: connect.CodeInvalidArgument, names: []string{"imageRefs[1]:"}},
		{name: "PrefetchImages/NotOnline", do: call(h.PrefetchImages, &managerv1.PrefetchImagesRequest{NodeId: "idle", ImageRefs: []string{"hello:1"}}),
			code: connect.CodeFailedPrecondition, names: []string{`"idle"`, "not online"}},
		{name: "PrefetchImages/ProcessRuntime", do: call(h.PrefetchImages, &managerv1.PrefetchImagesRequest{NodeId: "proc", ImageRefs: []string{"hello:1"}}),
			code: connect.CodeFailedPrecondition, names: []string{`"proc"`, "process runtime"}},
		{name: "PrefetchImages/NoController", do: call(h.PrefetchImages, &managerv1.PrefetchImagesRequest{NodeId: "n1", ImageRefs: []string{"hello:1"}}),
			code: connect.CodeUnavailable, names: []string{"primary term"}},
		{name: "CreateMockNode/NoMockProvider", do: call(h.CreateMockNode, &managerv1.CreateMockNodeRequest{}),
			code: connect.CodeFailedPrecondition, names: []string{"no mock provider"}},
		{name: "CreateOciNode/NoDomain", do: call(h.CreateOciNode, &managerv1.CreateOciNodeRequest{Shape: "VM.Standard.E4.Flex"}),
			code: connect.CodeInvalidArgument, names: []string{"availabilityDomain:"}},
		{name: "CreateOciNode/NegativeOCPUs", do: call(h.CreateOciNode, &managerv1.CreateOciNodeRequest{AvailabilityDomain: "AD-1", Ocpus: -1}),
			code: connect.CodeInvalidArgument, names: []string{"ocpus:"}},
		{name: "ExplainPlacement/BadJobID", do: call(h.ExplainPlacement, &managerv1.ExplainPlacementRequest{JobId: "a b"}),
			code: connect.CodeInvalidArgument, names: []string{"jobId:"}},
		{name: "ExplainPlacement/UnknownJob", do: call(h.ExplainPlacement, &managerv1.ExplainPlacementRequest{JobId: "nope"}),
			code: connect.CodeNotFound, names: []string{`"nope"`}},
	})
}
