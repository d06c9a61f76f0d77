package norsk_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
	"github.com/norsk-go/norsk-manager/sdk/norsk/norsktest"
)

// connectTo connects to the fake and closes the connection when the test ends.
func connectTo(t *testing.T, srv *norsktest.Server) *norsk.Manager {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		logger = slog.New(slog.NewTextHandler(tWriter{t}, nil))
	}
	m, err := norsk.Connect(t.Context(), norsk.Settings{URL: srv.URL, ClientLabel: t.Name(), Logger: logger})
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	norsk.SetBackoffForTest(m, time.Millisecond, 5*time.Millisecond)
	t.Cleanup(func() { m.Close() })
	return m
}

// tWriter writes log lines to the test's log.
type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

func TestNormalizeURL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want, err string }{
		{in: "127.0.0.1:6790", want: "http://127.0.0.1:6790"},
		{in: "http://mgr:6790/", want: "http://mgr:6790"},
		{in: "https://mgr.example.com", want: "https://mgr.example.com"},
		{in: " localhost:1 ", want: "http://localhost:1"},
		{in: "ftp://x", err: "scheme"},
		{in: "http://", err: "no host"},
	} {
		got, err := norsk.NormalizeURL(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) || !errors.Is(err, norsk.ErrInvalidArgument) {
				t.Errorf("NormalizeURL(%q) = %q, %v; want an invalid-argument error containing %q", tc.in, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("NormalizeURL(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

func TestConnectHello(t *testing.T) {
	t.Parallel()
	srv := norsktest.NewServer(t)
	m := connectTo(t, srv)
	if h := m.Hello(); h.GetProtocolVersion() != norsk.ProtocolVersion || !h.GetCompatible() || h.GetBuildLabel() != "norsktest" {
		t.Errorf("Hello() = %v", h)
	}
	if v := m.Version(); v.GetLabel() != "norsktest" || v.GetMinorVersion() != 10 {
		t.Errorf("Version() = %v", v)
	}
	if s := m.Skew(); s.Minor != 0 || s.String() != "same protocol 1.10" {
		t.Errorf("Skew() = %+v (%s)", s, s)
	}
}

// A Manager of another minor protocol is served, its skew said in words;
// the calls an older one predates are refused before they are sent, with
// ErrUnimplemented naming both versions; Version is known even when its
// hello does not carry it (a Manager before 1.10).
func TestProtocolSkew(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		manager string
		minor   int
		words   string
		refused bool // ListInstanceTypes (1.10)
	}{
		{"1.4", -6, "Manager protocol 1.4 is 6 minor versions older than this SDK's 1.10: the calls it predates are refused", true},
		{"1.9", -1, "Manager protocol 1.9 is 1 minor version older than this SDK's 1.10", true},
		{"1.12", 2, "Manager protocol 1.12 is 2 minor versions newer than this SDK's 1.10", false},
	} {
		srv := norsktest.NewServer(t)
		srv.SetHello(&managerv1.DaemonHello{ProtocolVersion: tc.manager, Compatible: true, BuildLabel: "mgr-" + tc.manager})
		m, err := norsk.Connect(t.Context(), norsk.Settings{URL: srv.URL})
		if err != nil {
			t.Fatalf("Connect to a %s Manager: %v", tc.manager, err)
		}
		defer m.Close()
		if s := m.Skew(); s.Minor != tc.minor || s.Manager != tc.manager || !strings.HasPrefix(s.String(), tc.words) {
			t.Errorf("%s: Skew() = %+v, %q; want minor %d, %q", tc.manager, s, s, tc.minor, tc.words)
		}
		if v := m.Version(); v == nil || v.GetLabel() != "norsktest" {
			t.Errorf("%s: Version() = %v; want the Version call's answer", tc.manager, v)
		}
		_, _, err = m.ListInstanceTypes(t.Context(), norsk.InstanceTypeOptions{Provider: "mock"})
		if refused := errors.Is(err, norsk.ErrUnimplemented); refused != tc.refused {
			t.Errorf("%s: ListInstanceTypes: %v; refused %v, want %v", tc.manager, err, refused, tc.refused)
		} else if refused && (!strings.Contains(err.Error(), "needs wire protocol 1.10") || !strings.Contains(err.Error(), "speaks "+tc.manager)) {
			t.Errorf("%s: ListInstanceTypes refused with %q; want both versions named", tc.manager, err)
		}
		err = m.PauseLeases(t.Context(), "test", "me")
		if refused, want := errors.Is(err, norsk.ErrUnimplemented), tc.manager == "1.4"; refused != want {
			t.Errorf("%s: PauseLeases (1.6): %v; refused %v, want %v", tc.manager, err, refused, want)
		}
	}
}

func TestConnectIncompatible(t *testing.T) {
	t.Parallel()
	for _, h := range []*managerv1.DaemonHello{
		{ProtocolVersion: "2.3", BuildLabel: "mgr-2", Compatible: false},
		// A daemon that claims compatibility across a major version is still refused.
		{ProtocolVersion: "2.0", BuildLabel: "mgr-2", Compatible: true},
	} {
		srv := norsktest.NewServer(t)
		srv.SetHello(h)
		m, err := norsk.Connect(t.Context(), norsk.Settings{URL: srv.URL})
		if err == nil {
			m.Close()
			t.Fatalf("Connect to a %s daemon succeeded", h.ProtocolVersion)
		}
		if !errors.Is(err, norsk.ErrIncompatible) {
			t.Errorf("Connect: %v; want ErrIncompatible", err)
		}
		if msg := err.Error(); !strings.Contains(msg, h.ProtocolVersion) || !strings.Contains(msg, norsk.ProtocolVersion) {
			t.Errorf("error %q does not name both versions", msg)
		}
	}
	// Another minor version is fine.
	srv := norsktest.NewServer(t)
	srv.SetHello(&managerv1.DaemonHello{ProtocolVersion: "1.14", Compatible: true, Skew: 4})
	m, err := norsk.Connect(t.Context(), norsk.Settings{URL: srv.URL})
	if err != nil {
		t.Fatalf("Connect to a 1.14 daemon: %v", err)
	}
	defer m.Close()
	if m.Hello().GetSkew() != 4 || m.Skew().Minor != 4 {
		t.Errorf("skew = %d, %+v", m.Hello().GetSkew(), m.Skew())
	}
}

func TestConnectUnreachable(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	_, err := norsk.Connect(ctx, norsk.Settings{URL: "127.0.0.1:1"})
	if !errors.Is(err, norsk.ErrUnavailable) {
		t.Fatalf("Connect to a closed port: %v; want ErrUnavailable", err)
	}
}

// Several members, comma-separated: Connect uses the first that answers;
// a refusal from a member that answers is final; none answering is
// ErrUnavailable.
func TestConnectToAnyMember(t *testing.T) {
	t.Parallel()
	srv := norsktest.NewServer(t)
	m, err := norsk.Connect(t.Context(), norsk.Settings{URL: "127.0.0.1:1, " + srv.URL})
	if err != nil {
		t.Fatalf("Connect past a member that does not answer: %v", err)
	}
	if m.URL() != srv.URL {
		t.Errorf("connected to %s, want %s", m.URL(), srv.URL)
	}
	m.Close()

	srv.RequireToken("s3cret")
	if _, err := norsk.Connect(t.Context(), norsk.Settings{URL: srv.URL + ",127.0.0.1:1", Token: "wrong"}); !errors.Is(err, norsk.ErrUnauthenticated) {
		t.Errorf("a refused token: %v, want ErrUnauthenticated from the first member", err)
	}
	if _, err := norsk.Connect(t.Context(), norsk.Settings{URL: "127.0.0.1:1,127.0.0.1:2"}); !errors.Is(err, norsk.ErrUnavailable) {
		t.Errorf("no member answers: %v, want ErrUnavailable", err)
	}
	if _, err := norsk.Connect(t.Context(), norsk.Settings{URL: srv.URL + ",ftp://x"}); !errors.Is(err, norsk.ErrInvalidArgument) {
		t.Errorf("a malformed member URL: %v, want ErrInvalidArgument", err)
	}
}

func TestToken(t *testing.T) {
	srv := norsktest.NewServer(t)
	srv.RequireToken("s3cret")
	if _, err := norsk.Connect(t.Context(), norsk.Settings{URL: srv.URL, Token: "wrong"}); !errors.Is(err, norsk.ErrUnauthenticated) {
		t.Fatalf("Connect with a wrong token: %v; want ErrUnauthenticated", err)
	}
	t.Setenv(norsk.EnvToken, "s3cret")
	t.Setenv(norsk.EnvManagerURL, srv.URL)
	m, err := norsk.Connect(t.Context(), norsk.Settings{})
	if err != nil {
		t.Fatalf("Connect with the token from the environment: %v", err)
	}
	defer m.Close()
	if _, err := m.ListNodes(t.Context()); err != nil {
		t.Fatalf("ListNodes: %v", err)
	}
	if got := srv.LastAuthorization(); got != "Bearer s3cret" {
		t.Errorf("Authorization = %q", got)
	}
	// The event stream carries the token too.
	s := m.EventStream(t.Context(), norsk.EventStreamSettings{})
	defer s.Close()
	if !s.Next() {
		t.Fatalf("event stream: %v", s.Err())
	}
}

func TestErrorMapping(t *testing.T) {
	t.Parallel()
	sentinels := map[connect.Code]error{
		connect.CodeCanceled:           norsk.ErrCanceled,
		connect.CodeUnknown:            norsk.ErrUnknown,
		connect.CodeInvalidArgument:    norsk.ErrInvalidArgument,
		connect.CodeDeadlineExceeded:   norsk.ErrDeadlineExceeded,
		connect.CodeNotFound:           norsk.ErrNotFound,
		connect.CodeAlreadyExists:      norsk.ErrAlreadyExists,
		connect.CodePermissionDenied:   norsk.ErrPermissionDenied,
		connect.CodeResourceExhausted:  norsk.ErrResourceExhausted,
		connect.CodeFailedPrecondition: norsk.ErrFailedPrecondition,
		connect.CodeAborted:            norsk.ErrAborted,
		connect.CodeOutOfRange:         norsk.ErrOutOfRange,
		connect.CodeUnimplemented:      norsk.ErrUnimplemented,
		connect.CodeInternal:           norsk.ErrInternal,
		connect.CodeUnavailable:        norsk.ErrUnavailable,
		connect.CodeDataLoss:           norsk.ErrDataLoss,
		connect.CodeUnauthenticated:    norsk.ErrUnauthenticated,
	}
	srv := norsktest.NewServer(t)
	m := connectTo(t, srv)
	for code, want := range sentinels {
		msg := "the server says " + code.String()
		srv.SetError("JobById", connect.NewError(code, errors.New(msg)))
		_, err := m.JobById(t.Context(), "j")
		if !errors.Is(err, want) {
			t.Errorf("%v: errors.Is(%v, %v) = false", code, err, want)
		}
		for other, s := range sentinels {
			if other != code && errors.Is(err, s) {
				t.Errorf("%v: error also matches %v", code, s)
			}
		}
		var e *norsk.Error
		if !errors.As(err, &e) || e.Code != code || e.Message != msg || e.Op != "JobById" {
			t.Errorf("%v: error = %#v; want an *Error with the code and the server's message", code, err)
		}
		if errors.Is(err, norsk.ErrIncompatible) {
			t.Errorf("%v: matches ErrIncompatible", code)
		}
	}
	srv.SetError("JobById", nil)

	// Errors that come from the fake's own logic.
	if _, err := m.JobById(t.Context(), "missing"); !errors.Is(err, norsk.ErrNotFound) {
		t.Errorf("JobById(missing) = %v; want ErrNotFound", err)
	}
	// A cancelled context maps to ErrCanceled and still unwraps to context.Canceled.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := m.ListNodes(ctx)
	if !errors.Is(err, norsk.ErrCanceled) || !errors.Is(err, context.Canceled) {
		t.Errorf("ListNodes(cancelled) = %v; want ErrCanceled wrapping context.Canceled", err)
	}
	// A closed Manager refuses calls.
	m.Close()
	if _, err := m.ListNodes(t.Context()); !errors.Is(err, norsk.ErrCanceled) {
		t.Errorf("ListNodes after Close = %v; want ErrCanceled", err)
	}
}

func TestJobLifecycle(t *testing.T) {
	t.Parallel()
	srv := norsktest.NewServer(t)
	m := connectTo(t, srv)
	ctx := t.Context()
	srv.AddNode(&managerv1.Node{NodeId: "n1", NodeName: "worker-1", Address: "10.0.0.1:7000"})

	job := &norsk.Job{JobId: "j1", Tags: map[string]string{"env": "prod"}, Services: []*norsk.Service{{
		Name: "web", Image: "nginx", Ports: []*norsk.PortMapping{{ContainerPort: 80, Protocol: norsk.ProtocolTCP}},
	}}}
	hash, err := m.CreateJob(ctx, job)
	if err != nil {
		t.Fatalf("CreateJob: %v", err)
	}
	if _, err := m.CreateJob(ctx, job); !errors.Is(err, norsk.ErrAlreadyExists) {
		t.Errorf("CreateJob twice: %v; want ErrAlreadyExists", err)
	}
	job.Description = "v2"
	job.CurrentHash = hash + 100
	if _, err := m.UpdateJob(ctx, job); !errors.Is(err, norsk.ErrFailedPrecondition) {
		t.Errorf("UpdateJob with a stale hash: %v; want ErrFailedPrecondition", err)
	}
	job.CurrentHash = hash
	hash2, err := m.UpdateJob(ctx, job)
	if err != nil || hash2 == hash {
		t.Fatalf("UpdateJob = %d, %v", hash2, err)
	}
	if _, err := m.CreateJob(ctx, &norsk.Job{JobId: "j2", Tags: map[string]string{"env": "dev"}, Services: testJob("j2").Services}); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name    string
		filters []*norsk.JobFilter
		want    string
	}{
		{"all", nil, "j1,j2"},
		{"tag eq", []*norsk.JobFilter{norsk.TagEq("env", "prod")}, "j1"},
		{"tag neq", []*norsk.JobFilter{norsk.TagNeq("env", "prod")}, "j2"},
		{"tag re", []*norsk.JobFilter{norsk.TagRegex("env", "d.*")}, "j2"},
		{"tag exists", []*norsk.JobFilter{norsk.TagExists("env")}, "j1,j2"},
		{"tag absent", []*norsk.JobFilter{norsk.TagAbsent("env")}, ""},
		{"id eq", []*norsk.JobFilter{norsk.IdEq("j2")}, "j2"},
		{"id neq", []*norsk.JobFilter{norsk.IdNeq("j2")}, "j1"},
		{"id re", []*norsk.JobFilter{norsk.IdRegex("j[0-9]")}, "j1,j2"},
		{"created after", []*norsk.JobFilter{norsk.DateAfter(norsk.DateFieldCreated, time.Now().Add(-time.Hour))}, "j1,j2"},
		{"created before", []*norsk.JobFilter{norsk.DateBefore(norsk.DateFieldCreated, time.Now().Add(-time.Hour))}, ""},
		{"within", []*norsk.JobFilter{norsk.DateWithinRange(norsk.DateFieldUpdated, time.Now().Add(-time.Hour), time.Now().Add(time.Hour))}, "j1,j2"},
		{"and", []*norsk.JobFilter{norsk.TagExists("env"), norsk.IdNeq("j1")}, "j2"},
	} {
		jobs, err := m.JobSearch(ctx, norsk.JobSearchSettings{Filters: tc.filters})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		var ids []string
		for _, j := range jobs {
			ids = append(ids, j.GetJob().GetJobId())
		}
		if got := strings.Join(ids, ","); got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.name, got, tc.want)
		}
	}
	if _, err := m.JobSearch(ctx, norsk.JobSearchSettings{Filters: []*norsk.JobFilter{norsk.IdRegex("(")}}); !errors.Is(err, norsk.ErrInvalidArgument) {
		t.Errorf("JobSearch with a bad regex: %v; want ErrInvalidArgument", err)
	}

	if _, err := m.StartJob(ctx, "j1", "primary", "nope", norsk.StartJobOptions{}); !errors.Is(err, norsk.ErrNotFound) {
		t.Errorf("StartJob on an unknown node: %v", err)
	}
	token, err := m.StartJob(ctx, "j1", "primary", "n1", norsk.StartJobOptions{})
	if err != nil || token == 0 {
		t.Fatalf("StartJob = %d, %v", token, err)
	}
	if _, err := m.StartJob(ctx, "j1", "primary", "n1", norsk.StartJobOptions{}); !errors.Is(err, norsk.ErrFailedPrecondition) {
		t.Errorf("StartJob twice: %v; want ErrFailedPrecondition", err)
	}
	j, err := m.JobById(ctx, "j1")
	if err != nil {
		t.Fatal(err)
	}
	if in := j.GetInstances(); len(in) != 1 || in[0].GetPhase() != norsk.InstancePhaseRunning || in[0].GetFencingToken() != token {
		t.Errorf("instances = %v", in)
	}
	if err := m.StopJob(ctx, "j1", "primary", "n1", norsk.StopJobOptions{Grace: 2 * time.Second}); err != nil {
		t.Fatalf("StopJob: %v", err)
	}
	if got := srv.Job("j1").GetInstances()[0].GetStopGraceMs(); got != 2000 {
		t.Errorf("grace = %d ms", got)
	}
	if err := m.MarkJobFailed(ctx, "j1", "gave up"); err != nil {
		t.Fatalf("MarkJobFailed: %v", err)
	}
	if err := m.CompleteJob(ctx, "j1"); !errors.Is(err, norsk.ErrFailedPrecondition) {
		t.Errorf("CompleteJob of a failed job: %v", err)
	}
	if err := m.DeleteJob(ctx, "j1"); err != nil {
		t.Fatalf("DeleteJob: %v", err)
	}

	// Deferred start, then StartPreparedJob.
	if _, err := m.StartJob(ctx, "j2", "backup", "n1", norsk.StartJobOptions{DeferStart: true, RuntimeRole: "standby"}); err != nil {
		t.Fatal(err)
	}
	if ph := srv.Job("j2").GetInstances()[0].GetPhase(); ph != norsk.InstancePhasePrepared {
		t.Errorf("phase after a deferred start = %v", ph)
	}
	if err := m.StartPreparedJob(ctx, "j2", "backup", "n1"); err != nil {
		t.Fatal(err)
	}
	if in := srv.Job("j2").GetInstances()[0]; in.GetPhase() != norsk.InstancePhaseRunning || in.GetRuntimeRole() != "standby" {
		t.Errorf("instance = %v", in)
	}
	if err := m.CompleteJob(ctx, "j2"); err != nil {
		t.Fatal(err)
	}
}

func TestNodesAndSlots(t *testing.T) {
	t.Parallel()
	srv := norsktest.NewServer(t)
	m := connectTo(t, srv)
	ctx := t.Context()
	reg, err := m.RegisterClusterNode(ctx, "rack-1", "gold")
	if err != nil || reg.GetNodeId() == "" || reg.GetToken() == "" {
		t.Fatalf("RegisterClusterNode = %v, %v", reg, err)
	}
	if _, err := m.ClusterMemberRegister(ctx, &norsk.ClusterMemberRegisterRequest{Token: "bogus", Address: "h:1"}); !errors.Is(err, norsk.ErrUnauthenticated) {
		t.Errorf("ClusterMemberRegister with a bogus token: %v", err)
	}
	res, err := m.ClusterMemberRegister(ctx, &norsk.ClusterMemberRegisterRequest{Token: reg.Token, Address: "10.1.1.1:7001", Hardware: &norsk.Hardware{Vcpus: 8}})
	if err != nil || res.GetNodeId() != reg.NodeId || res.GetNodeSecret() == "" {
		t.Fatalf("ClusterMemberRegister = %v, %v", res, err)
	}
	slots, err := m.ListClusterNodes(ctx)
	if err != nil || len(slots) != 1 || !slots[0].GetActive() || slots[0].GetToken() != reg.Token {
		t.Fatalf("ListClusterNodes = %v, %v", slots, err)
	}
	if err := m.SetClusterNodePool(ctx, reg.NodeId, "silver"); err != nil {
		t.Fatal(err)
	}
	n, err := m.SetNodeTags(ctx, reg.NodeId, map[string]string{"az": "a"})
	if err != nil || n.GetTags()["az"] != "a" || n.GetTags()["pool"] != "silver" {
		t.Fatalf("SetNodeTags = %v, %v", n, err)
	}
	ie, err := m.SetNodeIdleExpiry(ctx, reg.NodeId, 90*time.Second)
	if err != nil || ie.GetIdleExpiryMs() != 90000 || ie.GetEffectiveIdleExpiryMs() != 90000 {
		t.Fatalf("SetNodeIdleExpiry = %v, %v", ie, err)
	}
	ie, err = m.SetNodeIdleExpiry(ctx, reg.NodeId, 0)
	if err != nil || ie.GetIdleExpiryMs() != 0 || ie.GetEffectiveIdleExpiryMs() != norsktest.DefaultIdleExpiry.Milliseconds() {
		t.Fatalf("SetNodeIdleExpiry(0) = %v, %v", ie, err)
	}
	if ie, err := m.GetNodeIdleExpiry(ctx, reg.NodeId); err != nil || ie.GetNodeId() != reg.NodeId {
		t.Fatalf("GetNodeIdleExpiry = %v, %v", ie, err)
	}
	nodes, err := m.ListNodes(ctx)
	if err != nil || len(nodes) != 1 || nodes[0].GetState() != norsk.NodeStateOnline {
		t.Fatalf("ListNodes = %v, %v", nodes, err)
	}
	if err := m.TerminateNode(ctx, reg.NodeId); err != nil {
		t.Fatal(err)
	}
	if err := m.TerminateNode(ctx, reg.NodeId); err != nil {
		t.Errorf("TerminateNode twice (idempotent): %v", err)
	}
	if err := m.DeregisterClusterNode(ctx, reg.NodeId); err != nil {
		t.Fatal(err)
	}
	if err := m.DeregisterClusterNode(ctx, reg.NodeId); !errors.Is(err, norsk.ErrNotFound) {
		t.Errorf("DeregisterClusterNode twice: %v", err)
	}
}

func mustTime(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

// Every call protocolSince gates is a method of *Manager, of a minor this
// SDK speaks.
func TestProtocolSinceNamesMethods(t *testing.T) {
	t.Parallel()
	mt := reflect.TypeFor[*norsk.Manager]()
	for op, minor := range norsk.ProtocolSince {
		if _, ok := mt.MethodByName(op); !ok {
			t.Errorf("protocolSince names %s, which is no method of *Manager", op)
		}
		if minor < 1 || minor > 10 {
			t.Errorf("%s: since 1.%d, beyond this SDK's %s", op, minor, norsk.ProtocolVersion)
		}
	}
}
