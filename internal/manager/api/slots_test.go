package api_test

import (
	"context"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
)

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
