package api_test

import (
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
)

// TestNodeHandlers: the node calls (tags, idle expiry, termination) over
// a fake backend.
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
		{name: "TerminateNode/Unknown", do: call(h.TerminateNode, &managerv1.TerminateNodeRequest{NodeId: "n9"}),
			code: connect.CodeNotFound, names: []string{`"n9"`}},
		{name: "TerminateNode/Good", do: call(h.TerminateNode, &managerv1.TerminateNodeRequest{NodeId: "n2"}),
			want: []*storev1.Command{{Cmd: &storev1.Command_TerminateNode{TerminateNode: &storev1.TerminateNode{NodeId: "n2"}}}}},
	})
}
