package manager

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/emptypb"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1/managerv1connect"
	"github.com/norsk-go/norsk-manager/internal/auth"
	"github.com/norsk-go/norsk-manager/internal/nodes"
	"github.com/norsk-go/norsk-manager/internal/store/state"
	"github.com/norsk-go/norsk-manager/pkg/apiauth"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
)

// call invokes any procedure with an empty message, as a unary or a
// server-streaming call, and returns the call's error code (0 for none).
func call(t *testing.T, url, procedure string, streaming bool, bearer string) connect.Code {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl := connect.NewClient[emptypb.Empty, emptypb.Empty](nodes.H2CClient(), url+procedure, connect.WithGRPC())
	if streaming {
		req := connect.NewRequest(&emptypb.Empty{})
		if bearer != "" {
			req.Header().Set("Authorization", "Bearer "+bearer)
		}
		st, err := cl.CallServerStream(ctx, req)
		if err != nil {
			return connect.CodeOf(err)
		}
		defer st.Close()
		// The first message (or the error) says whether the call got in.
		if st.Receive() {
			return 0
		}
		if err := st.Err(); err != nil {
			return connect.CodeOf(err)
		}
		return 0
	}
	req := connect.NewRequest(&emptypb.Empty{})
	if bearer != "" {
		req.Header().Set("Authorization", "Bearer "+bearer)
	}
	_, err := cl.CallUnary(ctx, req)
	if err == nil {
		return 0
	}
	return connect.CodeOf(err)
}

// For every RPC in the descriptor: no token → UNAUTHENTICATED, a forged or
// revoked one → UNAUTHENTICATED, and a token whose role lacks the
// permission → PERMISSION_DENIED; a role that has it gets past the check.
func TestEveryRPCIsAuthorised(t *testing.T) {
	t.Parallel()
	admin := auth.NewToken()
	s, err := New(context.Background(), Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", NodeName: "m1",
		Logger: slog.New(slog.DiscardHandler), BootstrapToken: admin, BackupInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	api := managerv1connect.NewManagerClient(nodes.H2CClient(), s.URL(), connect.WithGRPC(), auth.WithBearer(admin))
	tokens := map[string]string{}
	for _, role := range state.Roles {
		res, err := api.CreateToken(context.Background(), connect.NewRequest(&managerv1.CreateTokenRequest{Name: "t-" + role, Role: role}))
		if err != nil {
			t.Fatal(err)
		}
		tokens[role] = res.Msg.GetSecret()
	}
	revoked, err := api.CreateToken(context.Background(), connect.NewRequest(&managerv1.CreateTokenRequest{Name: "gone", Role: state.RoleAdmin}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := api.RevokeToken(context.Background(), connect.NewRequest(&managerv1.RevokeTokenRequest{Id: revoked.Msg.GetToken().GetId()})); err != nil {
		t.Fatal(err)
	}
	forged := "nmt_" + revoked.Msg.GetToken().GetId()[:8] + "." + "00000000000000000000000000000000000000000000000000000000000000ff"

	svc := managerv1.File_norsk_manager_v1_manager_proto.Services().ByName("Manager")
	for i := 0; i < svc.Methods().Len(); i++ {
		m := svc.Methods().Get(i)
		proc := "/" + string(svc.FullName()) + "/" + string(m.Name())
		stream := m.IsStreamingServer()
		perms := apiauth.MethodPermissions(m)
		t.Run(string(m.Name()), func(t *testing.T) {
			for _, bad := range []struct{ name, bearer string }{
				{"no token", ""}, {"forged", forged}, {"revoked", revoked.Msg.GetSecret()}, {"garbage", "hello"},
			} {
				if got := call(t, s.URL(), proc, stream, bad.bearer); got != connect.CodeUnauthenticated {
					t.Errorf("%s: code %v, want unauthenticated", bad.name, got)
				}
			}
			for role, tok := range tokens {
				got := call(t, s.URL(), proc, stream, tok)
				allowed := (auth.Identity{Role: role}).Can(perms...)
				switch {
				case !allowed && got != connect.CodePermissionDenied:
					t.Errorf("role %s (not allowed): code %v, want permission_denied", role, got)
				case allowed && (got == connect.CodePermissionDenied || got == connect.CodeUnauthenticated):
					t.Errorf("role %s (allowed): code %v", role, got)
				}
			}
		})
	}
}

// A read-only caller sees cluster slots without their registration tokens.
func TestReadOnlyCallersDoNotSeeSlotTokens(t *testing.T) {
	t.Parallel()
	admin := auth.NewToken()
	s, err := New(context.Background(), Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", NodeName: "m1",
		Logger: slog.New(slog.DiscardHandler), BootstrapToken: admin, BackupInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	api := managerv1connect.NewManagerClient(nodes.H2CClient(), s.URL(), connect.WithGRPC(), auth.WithBearer(admin))
	if _, err := api.RegisterClusterNode(ctx, connect.NewRequest(&managerv1.RegisterClusterNodeRequest{NodeName: "n1"})); err != nil {
		t.Fatal(err)
	}
	ro, err := api.CreateToken(ctx, connect.NewRequest(&managerv1.CreateTokenRequest{Name: "viewer", Role: state.RoleReadOnly}))
	if err != nil {
		t.Fatal(err)
	}
	viewer := managerv1connect.NewManagerClient(nodes.H2CClient(), s.URL(), connect.WithGRPC(), auth.WithBearer(ro.Msg.GetSecret()))
	slots, err := viewer.ListClusterNodes(ctx, connect.NewRequest(&managerv1.ListClusterNodesRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if len(slots.Msg.GetSlots()) != 1 || slots.Msg.GetSlots()[0].GetToken() != "" {
		t.Fatalf("read-only ListClusterNodes = %v, want the slot without its token", slots.Msg.GetSlots())
	}
	st := openEvents(t, ctx, viewer)
	// A slot registered now reaches the viewer without its token (no event
	// carries one).
	if _, err := api.RegisterClusterNode(ctx, connect.NewRequest(&managerv1.RegisterClusterNodeRequest{NodeName: "n2"})); err != nil {
		t.Fatal(err)
	}
	for st.Receive() {
		if ev := st.Msg().GetClusterSlotRegistered(); ev != nil {
			if ev.GetSlot().GetToken() != "" {
				t.Fatal("a read-only subscriber saw a registration token")
			}
			return
		}
	}
	t.Fatalf("stream ended: %v", st.Err())
}

// A caller over its rate limit is told so.
func TestRateLimit(t *testing.T) {
	t.Parallel()
	admin := auth.NewToken()
	s, err := New(context.Background(), Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", NodeName: "m1",
		Logger: slog.New(slog.DiscardHandler), BootstrapToken: admin, BackupInterval: -1, RateLimit: 5})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	api := managerv1connect.NewManagerClient(nodes.H2CClient(), s.URL(), connect.WithGRPC(), auth.WithBearer(admin))
	var limited error
	for i := 0; i < 100 && limited == nil; i++ {
		if _, err := api.Hello(context.Background(), connect.NewRequest(&managerv1.HelloRequest{})); err != nil {
			limited = err
		}
	}
	if connect.CodeOf(limited) != connect.CodeResourceExhausted {
		t.Fatalf("after 100 calls at a limit of 5/s: %v, want resource_exhausted", limited)
	}
	var ce *connect.Error
	if !errors.As(limited, &ce) || ce.Message() == "" {
		t.Fatalf("no message: %v", limited)
	}
}

// An unknown node secret is refused with UNAUTHENTICATED and, for the
// worker to act on, apierr.RefusalHeader saying so; other refusals do not
// carry it.
func TestUnknownNodeSecretIsNamedForWorkers(t *testing.T) {
	t.Parallel()
	s, _ := startServer(t, t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, tc := range []struct {
		cred, want string
	}{
		{auth.NodeSecretPrefix + "0123456789abcdef", apierr.RefusalNodeSecretUnknown},
		{auth.RegistrationTokenPrefix + "0123456789abcdef", ""},
		{"garbage", ""},
	} {
		c := managerv1connect.NewManagerClient(nodes.H2CClient(), s.URL(), connect.WithGRPC(), auth.WithBearer(tc.cred))
		_, err := c.ClusterMemberRegister(ctx, connect.NewRequest(&managerv1.ClusterMemberRegisterRequest{Address: "127.0.0.1:1"}))
		var ce *connect.Error
		if !errors.As(err, &ce) || ce.Code() != connect.CodeUnauthenticated {
			t.Fatalf("%s: %v, want UNAUTHENTICATED", tc.cred, err)
		}
		if got := ce.Meta().Get(apierr.RefusalHeader); got != tc.want {
			t.Errorf("%s: %s = %q, want %q", tc.cred, apierr.RefusalHeader, got, tc.want)
		}
	}
}
