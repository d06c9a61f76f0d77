package api_test

import (
	"context"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/manager/api"
)

// TestNodeHandlers: the node calls (tags, idle expiry, termination,
// drains) over a fake backend.
func TestNodeHandlers(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	e.seedNode(t, "n1")
	e.seedNode(t, "n2")
	h := e.h
	e.run(t, []hcase{
		{name: "SetNodeTags/None", do: call(h.SetNodeTags, &managerv1.SetNodeTagsRequest{NodeId: "n1"}),
			code: connect.CodeInvalidArgument, names: []string{"tags:"}},
		{name: "SetNodeTags/BadName", do: call(h.SetNodeTags, &managerv1.SetNodeTagsRequest{NodeId: "n1", Tags: map[string]string{"no spaces": "x"}}),
			code: connect.CodeInvalidArgument, names: []string{"tags:", `"no spaces"`}},
		{name: "SetNodeTags/ControlInValue", do: call(h.SetNodeTags, &managerv1.SetNodeTagsRequest{NodeId: "n1", Tags: map[string]string{"zone": "a\x00"}}),
			code: connect.CodeInvalidArgument, names: []string{"tags.zone:"}},
		{name: "SetNodeTags/UnknownNode", do: call(h.SetNodeTags, &managerv1.SetNodeTagsRequest{NodeId: "n9", Tags: map[string]string{"zone": "a"}}),
			code: connect.CodeNotFound, names: []string{`"n9"`}},
		{name: "SetNodeTags/Good", do: call(h.SetNodeTags, &managerv1.SetNodeTagsRequest{NodeId: "n1", Tags: map[string]string{"zone": "a"}}),
			want: []*storev1.Command{{Cmd: &storev1.Command_SetNodeTags{SetNodeTags: &storev1.SetNodeTags{NodeId: "n1", Tags: map[string]string{"zone": "a"}}}}},
			check: func(t *testing.T, resp proto.Message, _ []*storev1.Command) {
				if got := resp.(*managerv1.SetNodeTagsResponse).GetNode().GetTags()["zone"]; got != "a" {
					t.Errorf("answered node's zone tag %q; want the tag just set", got)
				}
			}},
		{name: "SetNodeIdleExpiry/Negative", do: call(h.SetNodeIdleExpiry, &managerv1.SetNodeIdleExpiryRequest{NodeId: "n1", IdleExpiryMs: -1}),
			code: connect.CodeInvalidArgument, names: []string{"idleExpiryMs:"}},
		{name: "SetNodeIdleExpiry/Good", do: call(h.SetNodeIdleExpiry, &managerv1.SetNodeIdleExpiryRequest{NodeId: "n1", IdleExpiryMs: 5000}),
			want: []*storev1.Command{{Cmd: &storev1.Command_SetNodeIdleExpiry{SetNodeIdleExpiry: &storev1.SetNodeIdleExpiry{NodeId: "n1", IdleExpiryMs: 5000}}}},
			check: func(t *testing.T, resp proto.Message, _ []*storev1.Command) {
				if got := resp.(*managerv1.NodeIdleExpiry); got.GetEffectiveIdleExpiryMs() != 5000 {
					t.Errorf("answered %v; want the override in effect", got)
				}
			}},
		{name: "GetNodeIdleExpiry/Default", do: call(h.GetNodeIdleExpiry, &managerv1.GetNodeIdleExpiryRequest{NodeId: "n2"}),
			check: func(t *testing.T, resp proto.Message, writes []*storev1.Command) {
				if got := resp.(*managerv1.NodeIdleExpiry); got.GetIdleExpiryMs() != 0 || got.GetEffectiveIdleExpiryMs() != 60000 {
					t.Errorf("answered %v; want no override, the member's default (1m) in effect", got)
				}
				if len(writes) != 0 {
					t.Errorf("a read asked for writes: %v", writes)
				}
			}},
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
		{name: "TerminateNode/Unknown", do: call(h.TerminateNode, &managerv1.TerminateNodeRequest{NodeId: "n9"}),
			code: connect.CodeNotFound, names: []string{`"n9"`}},
		{name: "TerminateNode/Good", do: call(h.TerminateNode, &managerv1.TerminateNodeRequest{NodeId: "n2"}),
			want: []*storev1.Command{{Cmd: &storev1.Command_TerminateNode{TerminateNode: &storev1.TerminateNode{NodeId: "n2"}}}}},
	})
}

// TestSlotHandlers: registering and removing cluster slots, and a worker
// registering on one, over a fake backend. The handler makes up the
// registration token and the node secret.
func TestSlotHandlers(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	h := e.h
	var token, secret string
	e.run(t, []hcase{
		{name: "RegisterClusterNode/BadName", do: call(h.RegisterClusterNode, &managerv1.RegisterClusterNodeRequest{NodeName: "a b"}),
			code: connect.CodeInvalidArgument, names: []string{"nodeName:"}},
		{name: "RegisterClusterNode/BadPool", do: call(h.RegisterClusterNode, &managerv1.RegisterClusterNodeRequest{NodeName: "w1", Pool: "a\nb"}),
			code: connect.CodeInvalidArgument, names: []string{"pool:"}},
		{name: "RegisterClusterNode/Good", do: call(h.RegisterClusterNode, &managerv1.RegisterClusterNodeRequest{NodeName: "w1", Pool: "live"}),
			check: func(t *testing.T, resp proto.Message, writes []*storev1.Command) {
				w := oneWrite(t, writes, func(c *storev1.Command) *storev1.RegisterSlot { return c.GetRegisterSlot() })
				token = w.GetToken()
				r := resp.(*managerv1.RegisterClusterNodeResponse)
				if !strings.HasPrefix(token, "nrt_") || r.GetToken() != token || r.GetNodeId() != "w1" {
					t.Errorf("answered %v for the write %v; want the token the handler made (nrt_…), answered", r, w)
				}
				want := &storev1.RegisterSlot{NodeId: "w1", NodeName: "w1", Pool: "live", Token: token}
				if !proto.Equal(w, want) {
					t.Errorf("wrote %v; want %v", w, want)
				}
			}},
		{name: "RegisterClusterNode/Exists", do: call(h.RegisterClusterNode, &managerv1.RegisterClusterNodeRequest{NodeName: "w1"}),
			code: connect.CodeAlreadyExists, names: []string{`"w1"`}},
		{name: "ClusterMemberRegister/NotHostPort", do: call(h.ClusterMemberRegister, &managerv1.ClusterMemberRegisterRequest{Address: "w1", Token: "nrt_x"}),
			code: connect.CodeInvalidArgument, names: []string{"address:"}},
		{name: "ClusterMemberRegister/Unspecified", do: call(h.ClusterMemberRegister, &managerv1.ClusterMemberRegisterRequest{Address: "0.0.0.0:7000", Token: "nrt_x"}),
			code: connect.CodeInvalidArgument, names: []string{"address:"}},
		{name: "ClusterMemberRegister/BadIncarnation", do: call(h.ClusterMemberRegister, &managerv1.ClusterMemberRegisterRequest{Address: "10.0.0.2:7000", Token: "nrt_x", WorkerIncarnation: "a b"}),
			code: connect.CodeInvalidArgument, names: []string{"workerIncarnation:"}},
		{name: "ClusterMemberRegister/NoCredential", do: call(h.ClusterMemberRegister, &managerv1.ClusterMemberRegisterRequest{Address: "10.0.0.2:7000"}),
			code: connect.CodeUnauthenticated, names: []string{"registration token"}},
		{name: "ClusterMemberRegister/UnknownToken", do: call(h.ClusterMemberRegister, &managerv1.ClusterMemberRegisterRequest{Address: "10.0.0.2:7000", Token: "nrt_x"}),
			code: connect.CodeUnauthenticated, names: []string{"registration token is not known"}},
		{name: "ClusterMemberRegister/UnknownSecret", do: call(h.ClusterMemberRegister, &managerv1.ClusterMemberRegisterRequest{Address: "10.0.0.2:7000", NodeSecret: "nns_x"}),
			code: connect.CodeUnauthenticated, names: []string{"node secret is not known"}},
	})
	// The token and the secret the handler made, once it has.
	e.run(t, []hcase{
		{name: "ClusterMemberRegister/Good", do: func(ctx context.Context) (proto.Message, error) {
			return call(h.ClusterMemberRegister, &managerv1.ClusterMemberRegisterRequest{Address: "10.0.0.2:7000", Token: token, Runtime: "process"})(ctx)
		}, check: func(t *testing.T, resp proto.Message, writes []*storev1.Command) {
			w := oneWrite(t, writes, func(c *storev1.Command) *storev1.MemberRegister { return c.GetMemberRegister() })
			secret = w.GetNodeSecret()
			r := resp.(*managerv1.ClusterMemberRegisterResponse)
			if !strings.HasPrefix(secret, "nns_") || r.GetNodeSecret() != secret || r.GetNodeId() != "w1" || r.GetHeartbeatIntervalMs() != 1000 {
				t.Errorf("answered %v for the write %v; want node w1, the secret the handler made (nns_…), the member's heartbeat", r, w)
			}
			want := &storev1.MemberRegister{Address: "10.0.0.2:7000", Runtime: "process", Token: token, NodeSecret: secret}
			if !proto.Equal(w, want) {
				t.Errorf("wrote %v; want %v", w, want)
			}
		}},
		{name: "ClusterMemberRegister/TokenUsed", do: func(ctx context.Context) (proto.Message, error) {
			return call(h.ClusterMemberRegister, &managerv1.ClusterMemberRegisterRequest{Address: "10.0.0.2:7000", Token: token})(ctx)
		}, code: connect.CodeUnauthenticated, names: []string{"already been used", `"w1"`}},
		{name: "ClusterMemberRegister/BySecret", do: func(ctx context.Context) (proto.Message, error) {
			return call(h.ClusterMemberRegister, &managerv1.ClusterMemberRegisterRequest{Address: "10.0.0.3:7000", NodeSecret: secret, Reconnect: true})(ctx)
		}, check: func(t *testing.T, _ proto.Message, writes []*storev1.Command) {
			w := oneWrite(t, writes, func(c *storev1.Command) *storev1.MemberRegister { return c.GetMemberRegister() })
			if want := (&storev1.MemberRegister{Address: "10.0.0.3:7000", NodeSecret: secret, Reconnect: true}); !proto.Equal(w, want) {
				t.Errorf("wrote %v; want %v", w, want)
			}
		}},
		{name: "SetClusterNodePool/BadPool", do: call(h.SetClusterNodePool, &managerv1.SetClusterNodePoolRequest{NodeId: "w1", Pool: "a\tb"}),
			code: connect.CodeInvalidArgument, names: []string{"pool:"}},
		{name: "SetClusterNodePool/Good", do: call(h.SetClusterNodePool, &managerv1.SetClusterNodePoolRequest{NodeId: "w1", Pool: "spare"}),
			want: []*storev1.Command{{Cmd: &storev1.Command_SetSlotPool{SetSlotPool: &storev1.SetSlotPool{NodeId: "w1", Pool: "spare"}}}}},
		{name: "DeregisterClusterNode/Unknown", do: call(h.DeregisterClusterNode, &managerv1.DeregisterClusterNodeRequest{NodeId: "w9"}),
			code: connect.CodeNotFound, names: []string{`"w9"`}},
		{name: "DeregisterClusterNode/Good", do: call(h.DeregisterClusterNode, &managerv1.DeregisterClusterNodeRequest{NodeId: "w1"}),
			want: []*storev1.Command{{Cmd: &storev1.Command_DeregisterSlot{DeregisterSlot: &storev1.DeregisterSlot{NodeId: "w1"}}}}},
	})
}
