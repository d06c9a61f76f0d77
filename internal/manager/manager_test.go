package manager

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"connectrpc.com/connect"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1/managerv1connect"
	"github.com/norsk-go/norsk-manager/internal/auth"
	"github.com/norsk-go/norsk-manager/internal/nodes"
)

func startServer(t *testing.T, dir string) (*Server, managerv1connect.ManagerClient) {
	t.Helper()
	return startServerWith(t, func(cfg *Config) { cfg.DataDir = dir })
}

// startServerWith starts a standalone member on a new data directory, its
// configuration adjusted by adjust, and returns it with an admin client.
func startServerWith(t *testing.T, adjust func(*Config)) (*Server, managerv1connect.ManagerClient) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	tok := auth.NewToken()
	cfg := Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", NodeName: "m1", Logger: slog.New(slog.DiscardHandler), BootstrapToken: tok}
	adjust(&cfg)
	s, err := New(ctx, cfg)
	if err != nil {
		t.Fatalf("start manager: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, managerv1connect.NewManagerClient(nodes.H2CClient(), s.URL(), connect.WithGRPC(), auth.WithBearer(tok))
}

func code(err error) connect.Code {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce.Code()
	}
	return connect.CodeUnknown
}

func job(id string) *managerv1.Job {
	return &managerv1.Job{JobId: id, Tags: map[string]string{"team": "news"}, Services: []*managerv1.Service{{Name: "main", Image: "hello:dev"}}}
}

func TestAPIRefusesBadInputAndChangesNothing(t *testing.T) {
	t.Parallel()
	s, c := startServer(t, t.TempDir())
	ctx := context.Background()
	if _, err := c.CreateJob(ctx, connect.NewRequest(&managerv1.CreateJobRequest{Job: job("a")})); err != nil {
		t.Fatal(err)
	}
	before := s.st().State().Snapshot().Index()
	cases := []struct {
		name string
		call func() error
		want connect.Code
	}{
		{"empty id", func() error {
			_, err := c.CreateJob(ctx, connect.NewRequest(&managerv1.CreateJobRequest{Job: job("")}))
			return err
		}, connect.CodeInvalidArgument},
		{"duplicate", func() error {
			_, err := c.CreateJob(ctx, connect.NewRequest(&managerv1.CreateJobRequest{Job: job("a")}))
			return err
		}, connect.CodeAlreadyExists},
		{"stale hash", func() error {
			j := job("a")
			j.CurrentHash = 1
			_, err := c.UpdateJob(ctx, connect.NewRequest(&managerv1.UpdateJobRequest{Job: j}))
			return err
		}, connect.CodeFailedPrecondition},
		{"unknown job", func() error {
			_, err := c.JobById(ctx, connect.NewRequest(&managerv1.JobByIdRequest{JobId: "nope"}))
			return err
		}, connect.CodeNotFound},
		{"unknown node", func() error {
			_, err := c.StartJob(ctx, connect.NewRequest(&managerv1.StartJobRequest{JobId: "a", Role: "primary", NodeId: "n1"}))
			return err
		}, connect.CodeNotFound},
		{"bad regex", func() error {
			_, err := c.JobSearch(ctx, connect.NewRequest(&managerv1.JobSearchRequest{Filters: []*managerv1.JobFilter{
				{Filter: &managerv1.JobFilter_Tag{Tag: &managerv1.TagFilter{TagName: "team", Match: &managerv1.TagFilter_Re{Re: "("}}}},
			}}))
			return err
		}, connect.CodeInvalidArgument},
		{"bad token", func() error {
			_, err := c.ClusterMemberRegister(ctx, connect.NewRequest(&managerv1.ClusterMemberRegisterRequest{Token: "nope", Address: "127.0.0.1:1"}))
			return err
		}, connect.CodeUnauthenticated},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := code(tc.call()); got != tc.want {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
	// A slot on which no worker has called in is not online.
	if _, err := c.RegisterClusterNode(ctx, connect.NewRequest(&managerv1.RegisterClusterNodeRequest{NodeName: "n1"})); err != nil {
		t.Fatal(err)
	}
	before = s.st().State().Snapshot().Index()
	_, err := c.StartJob(ctx, connect.NewRequest(&managerv1.StartJobRequest{JobId: "a", Role: "primary", NodeId: "n1"}))
	if code(err) != connect.CodeFailedPrecondition {
		t.Fatalf("start on a registered-but-inactive node: %v", err)
	}
	jh, err := c.JobById(ctx, connect.NewRequest(&managerv1.JobByIdRequest{JobId: "a"}))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(jh.Msg.GetHistory()); n != 1 || len(jh.Msg.GetInstances()) != 0 {
		t.Fatalf("refused start changed the job: %d history entries, %d instances", n, len(jh.Msg.GetInstances()))
	}
	_ = before
}
