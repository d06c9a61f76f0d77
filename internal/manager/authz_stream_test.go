package manager

import (
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1/managerv1connect"
	"github.com/norsk-go/norsk-manager/internal/auth"
	"github.com/norsk-go/norsk-manager/internal/nodes"
	"github.com/norsk-go/norsk-manager/internal/store/state"
)

// A token revoked while it holds an event stream is cut off: the stream
// rechecks its credential before each batch of events.
func TestRevokedTokenLosesItsEventStream(t *testing.T) {
	t.Parallel()
	s, admin := startServer(t, t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	tr, err := admin.CreateToken(ctx, connect.NewRequest(&managerv1.CreateTokenRequest{Name: "dashboard", Role: state.RoleReadOnly}))
	if err != nil {
		t.Fatal(err)
	}
	ro := managerv1connect.NewManagerClient(nodes.H2CClient(), s.URL(), connect.WithGRPC(), auth.WithBearer(tr.Msg.GetSecret()))
	st := openEvents(t, ctx, ro)
	if _, err := admin.RevokeToken(ctx, connect.NewRequest(&managerv1.RevokeTokenRequest{Id: tr.Msg.GetToken().GetId()})); err != nil {
		t.Fatal(err)
	}
	// The revoked token is refused for new calls…
	if _, err := ro.JobSearch(ctx, connect.NewRequest(&managerv1.JobSearchRequest{})); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("revoked token: %v", err)
	}
	// …and its open stream ends without the later event.
	if _, err := admin.CreateJob(ctx, connect.NewRequest(&managerv1.CreateJobRequest{Job: job("after-revoke")})); err != nil {
		t.Fatal(err)
	}
	for st.Receive() {
		if st.Msg().GetJobCreated() != nil {
			t.Fatalf("a revoked token's open event stream received %q created after the revocation", st.Msg().GetJobCreated().GetJob().GetJob().GetJobId())
		}
	}
}
