package api_test

import (
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/manager/api"
)

// TestDrainHandlers: starting, re-attaching to and undoing a node's drain,
// and the AutoManager's drain records, over a fake backend. A drain's
// defaults and deadline are the handler's (from its clock).
func TestDrainHandlers(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	e.seedNode(t, "n1")
	h := e.h
	e.run(t, []hcase{
		{name: "DrainNode/BadNodeID", do: call(h.DrainNode, &managerv1.DrainNodeRequest{NodeId: ""}),
			code: connect.CodeInvalidArgument, names: []string{"nodeId:"}},
		{name: "DrainNode/UndoWithOptions", do: call(h.DrainNode, &managerv1.DrainNodeRequest{NodeId: "n1", Undo: true, Parallel: 3}),
			code: connect.CodeInvalidArgument, names: []string{"undo:"}},
		{name: "DrainNode/DeadlineAndNone", do: call(h.DrainNode, &managerv1.DrainNodeRequest{NodeId: "n1", DeadlineMs: 1000, NoDeadline: true}),
			code: connect.CodeInvalidArgument, names: []string{"noDeadline:"}},
		{name: "DrainNode/TooParallel", do: call(h.DrainNode, &managerv1.DrainNodeRequest{NodeId: "n1", Parallel: 65}),
			code: connect.CodeInvalidArgument, names: []string{"parallel:"}},
		{name: "DrainNode/UnknownStrategy", do: call(h.DrainNode, &managerv1.DrainNodeRequest{NodeId: "n1", Strategy: 99}),
			code: connect.CodeInvalidArgument, names: []string{"strategy:"}},
		{name: "DrainNode/DefaultsFromTheClock", do: call(h.DrainNode, &managerv1.DrainNodeRequest{NodeId: "n1"}),
			want: []*storev1.Command{{Cmd: &storev1.Command_StartNodeDrain{StartNodeDrain: &storev1.StartNodeDrain{Drain: &managerv1.NodeDrain{
				NodeId: "n1", Strategy: managerv1.MigrationStrategy_MIGRATION_STRATEGY_OVERLAP, Parallel: api.DefaultDrainParallel,
				Deadline: timestamppb.New(t0.Add(api.DefaultDrainDeadline)),
			}}}}},
			check: func(t *testing.T, resp proto.Message, _ []*storev1.Command) {
				if r := resp.(*managerv1.DrainNodeResponse); r.GetAttached() || r.GetDrain().GetNodeId() != "n1" {
					t.Errorf("answered %v; want the new drain, not attached", r)
				}
			}},
		{name: "DrainNode/RunningReattaches", do: call(h.DrainNode, &managerv1.DrainNodeRequest{NodeId: "n1", Parallel: 5}),
			check: func(t *testing.T, resp proto.Message, writes []*storev1.Command) {
				if len(writes) != 0 {
					t.Errorf("re-attaching to a running drain asked for writes: %v", writes)
				}
				if r := resp.(*managerv1.DrainNodeResponse); !r.GetAttached() || r.GetDrain().GetParallel() != api.DefaultDrainParallel {
					t.Errorf("answered %v; want attached to the drain as it runs", r)
				}
			}},
		{name: "DrainNode/Undo", do: call(h.DrainNode, &managerv1.DrainNodeRequest{NodeId: "n1", Undo: true}),
			want: []*storev1.Command{{Cmd: &storev1.Command_SetNodeDraining{SetNodeDraining: &storev1.SetNodeDraining{NodeId: "n1"}}}}},
		{name: "RecordNodeDrain/NoDrain", do: call(h.RecordNodeDrain, &managerv1.RecordNodeDrainRequest{}),
			code: connect.CodeInvalidArgument, names: []string{"drain:"}},
		{name: "RecordNodeDrain/BadStrategy", do: call(h.RecordNodeDrain, &managerv1.RecordNodeDrainRequest{Drain: &managerv1.NodeDrain{NodeId: "n1", Strategy: 99}}),
			code: connect.CodeInvalidArgument, names: []string{"drain.strategy:"}},
	})
}
