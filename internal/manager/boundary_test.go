package manager

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1/managerv1connect"
	"github.com/norsk-go/norsk-manager/internal/auth"
	"github.com/norsk-go/norsk-manager/internal/manager/api"
	"github.com/norsk-go/norsk-manager/internal/nodes"
	"github.com/norsk-go/norsk-manager/pkg/apiauth"
)

// startWithToken starts a standalone member and returns it, an admin gRPC
// client and the admin token.
func startWithToken(t *testing.T, adjust func(*Config)) (*Server, managerv1connect.ManagerClient, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	tok := auth.NewToken()
	cfg := Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", NodeName: "m1", Logger: slog.New(slog.DiscardHandler),
		BootstrapToken: tok, DisableAutoManager: true, BackupInterval: -1, Pools: map[string][]string{"live": {"live"}}}
	if adjust != nil {
		adjust(&cfg)
	}
	s, err := New(ctx, cfg)
	if err != nil {
		t.Fatalf("start manager: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, managerv1connect.NewManagerClient(nodes.H2CClient(), s.URL(), connect.WithGRPC(), auth.WithBearer(tok)), tok
}

// invalidOn asserts err is INVALID_ARGUMENT naming field, and that its
// message is short.
func invalidOn(t *testing.T, what string, err error, field string) {
	t.Helper()
	var ce *connect.Error
	if !errors.As(err, &ce) || ce.Code() != connect.CodeInvalidArgument || !strings.HasPrefix(ce.Message(), field+": ") {
		t.Errorf("%s: %v; want INVALID_ARGUMENT naming %s", what, err, field)
		return
	}
	if len(ce.Message()) > 400 {
		t.Errorf("%s: a %d-byte message; errors quote at most a short prefix of a value", what, len(ce.Message()))
	}
}

func oneService(s *managerv1.Service) *managerv1.Job {
	if s.Name == "" {
		s.Name = "main"
	}
	if s.Image == "" && len(s.Command) == 0 {
		s.Image = "hello:dev"
	}
	return &managerv1.Job{JobId: "j", Services: []*managerv1.Service{s}}
}

func bundleWith(band string, sameNode managerv1.AntiAffinity) *managerv1.Bundle {
	return &managerv1.Bundle{BundleId: "b", Pool: "live",
		ResiliencePolicy: &managerv1.ResiliencePolicy{SameNode: sameNode},
		Jobs: []*managerv1.BundleJobSpec{{JobName: "enc", Job: oneService(&managerv1.Service{}),
			Requirements: &managerv1.JobRequirements{PriorityBand: band}}}}
}

// TestAPIRefusesValuesNothingCanUse (issue 12, item 6): values the
// handlers once stored and that failed only later — an idle expiry that
// overflows, a NUL or 1 MB working directory, a 7 MB command, a NUL priority
// band, a one-byte or NUL tier secret, an audit time of Infinity, an enum
// number the schema does not name — are INVALID_ARGUMENT naming the field,
// quoting at most a short prefix; ForgetMigration of an unknown id is
// NOT_FOUND; and nothing changes.
func TestAPIRefusesValuesNothingCanUse(t *testing.T) {
	t.Parallel()
	s, c, _ := startWithToken(t, nil)
	ctx := context.Background()
	if _, err := c.RegisterClusterNode(ctx, connect.NewRequest(&managerv1.RegisterClusterNodeRequest{NodeName: "n1"})); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SetNodeIdleExpiry(ctx, connect.NewRequest(&managerv1.SetNodeIdleExpiryRequest{NodeId: "n1", IdleExpiryMs: 5000})); err != nil {
		t.Fatal(err)
	}
	fleet := func(secret string) *managerv1.PublishDiscoveryFleetRequest {
		return &managerv1.PublishDiscoveryFleetRequest{Fleet: &managerv1.DiscoveryFleet{Addresses: []string{"d1:7000"}, LeafToken: "leaf", TierSecret: secret}}
	}
	before := s.st().State().Snapshot().Index()
	huge := strings.Repeat("/x", 1<<19)
	hugeArg := strings.Repeat("a", 7<<20)
	manyArgs := make([]string, 60)
	for i := range manyArgs {
		manyArgs[i] = strings.Repeat("a", 120<<10)
	}
	call := func(f func() error) error { return f() }
	for _, tc := range []struct {
		name  string
		err   error
		field string
	}{
		{"idle expiry that overflows", call(func() error {
			_, err := c.SetNodeIdleExpiry(ctx, connect.NewRequest(&managerv1.SetNodeIdleExpiryRequest{NodeId: "n1", IdleExpiryMs: math.MaxInt64}))
			return err
		}), "idleExpiryMs"},
		{"NUL working directory", call(func() error {
			_, err := c.CreateJob(ctx, connect.NewRequest(&managerv1.CreateJobRequest{Job: oneService(&managerv1.Service{WorkingDir: "/srv\x00/x"})}))
			return err
		}), "job.services[0].workingDir"},
		{"1 MB working directory", call(func() error {
			_, err := c.CreateJob(ctx, connect.NewRequest(&managerv1.CreateJobRequest{Job: oneService(&managerv1.Service{WorkingDir: huge})}))
			return err
		}), "job.services[0].workingDir"},
		{"7 MB command", call(func() error {
			_, err := c.CreateJob(ctx, connect.NewRequest(&managerv1.CreateJobRequest{Job: oneService(&managerv1.Service{Command: []string{"/bin/run", hugeArg}})}))
			return err
		}), "job.services[0].command[1]"},
		{"7 MB of arguments", call(func() error {
			_, err := c.CreateJob(ctx, connect.NewRequest(&managerv1.CreateJobRequest{Job: oneService(&managerv1.Service{Command: []string{"/bin/run"}, Args: manyArgs})}))
			return err
		}), "job.services[0].command"},
		{"NUL priority band", call(func() error {
			_, err := c.CreateBundle(ctx, connect.NewRequest(&managerv1.CreateBundleRequest{Bundle: bundleWith("gold\x00", managerv1.AntiAffinity_ANTI_AFFINITY_FORBID)}))
			return err
		}), "bundle.jobs[0].requirements.priorityBand"},
		{"enum number no value names", call(func() error {
			_, err := c.CreateBundle(ctx, connect.NewRequest(&managerv1.CreateBundleRequest{Bundle: bundleWith("", 42)}))
			return err
		}), "bundle.resiliencePolicy.sameNode"},
		{"one-byte tier secret", call(func() error {
			_, err := c.PublishDiscoveryFleet(ctx, connect.NewRequest(fleet("x")))
			return err
		}), "fleet.tierSecret"},
		{"NUL tier secret", call(func() error {
			_, err := c.PublishDiscoveryFleet(ctx, connect.NewRequest(fleet("secret-secret-secret-secret-\x00-secret")))
			return err
		}), "fleet.tierSecret"},
		{"short staged tier secret", call(func() error {
			_, err := c.RotateDiscoveryTierSecret(ctx, connect.NewRequest(&managerv1.RotateDiscoveryTierSecretRequest{Step: "stage", NewTierSecret: "short"}))
			return err
		}), "newTierSecret"},
		{"audit toMs Infinity", call(func() error {
			_, err := c.GetAuditLog(ctx, connect.NewRequest(&managerv1.GetAuditLogRequest{ToMs: math.Inf(1)}))
			return err
		}), "toMs"},
		{"audit fromMs past year 9999", call(func() error {
			_, err := c.GetAuditLog(ctx, connect.NewRequest(&managerv1.GetAuditLogRequest{FromMs: 1e300}))
			return err
		}), "fromMs"},
		{"token lifetime that overflows", call(func() error {
			_, err := c.CreateToken(ctx, connect.NewRequest(&managerv1.CreateTokenRequest{Name: "t", Role: "admin", TtlS: math.MaxInt64}))
			return err
		}), "ttlS"},
		{"lease that overflows", call(func() error {
			_, err := c.RenewBundleLease(ctx, connect.NewRequest(&managerv1.RenewBundleLeaseRequest{BundleId: "b", TtlMs: math.MaxInt64 / 1000}))
			return err
		}), "ttlMs"},
	} {
		invalidOn(t, tc.name, tc.err, tc.field)
		if tc.err != nil && strings.Contains(tc.err.Error(), "secret-secret") {
			t.Errorf("%s: the refusal quotes the secret: %v", tc.name, tc.err)
		}
	}
	if _, err := c.ForgetMigration(ctx, connect.NewRequest(&managerv1.ForgetMigrationRequest{MigrationId: "no-such-migration"})); code(err) != connect.CodeNotFound {
		t.Errorf("ForgetMigration of an unknown id: %v, want NOT_FOUND", err)
	}
	if after := s.st().State().Snapshot().Index(); after != before {
		t.Errorf("refused calls moved the store from index %d to %d", before, after)
	}
	ie, err := c.GetNodeIdleExpiry(ctx, connect.NewRequest(&managerv1.GetNodeIdleExpiryRequest{NodeId: "n1"}))
	if err != nil || ie.Msg.GetIdleExpiryMs() != 5000 {
		t.Errorf("idle expiry after the refusal: %v %v, want 5000", ie, err)
	}
	// A 32-byte tier secret is taken.
	if _, err := c.PublishDiscoveryFleet(ctx, connect.NewRequest(fleet(strings.Repeat("k", api.MinTierSecretLen)))); err != nil {
		t.Errorf("a 32-byte tier secret: %v", err)
	}
}

// postJSON calls procedure over the Connect protocol with a JSON body (a
// unary call, or for a server stream one enveloped message) and returns the
// error code and message it answered ("" for success).
func postJSON(t *testing.T, s *Server, token, procedure string, stream bool, body string) (code, msg string) {
	t.Helper()
	data := []byte(body)
	ctype := "application/json"
	if stream {
		ctype = "application/connect+json"
		env := make([]byte, 5, 5+len(data))
		binary.BigEndian.PutUint32(env[1:], uint32(len(data)))
		data = append(env, data...)
	}
	req, err := http.NewRequest(http.MethodPost, s.URL()+procedure, bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", ctype)
	req.Header.Set("Connect-Protocol-Version", "1")
	req.Header.Set("Authorization", "Bearer "+token)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatalf("%s: %v", procedure, err)
	}
	defer res.Body.Close()
	out, _ := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	var wire struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	if !stream {
		if res.StatusCode == http.StatusOK {
			return "", ""
		}
		_ = json.Unmarshal(out, &wire)
		return wire.Code, wire.Message
	}
	// The stream's messages, the last one its end (flag 2).
	for len(out) >= 5 {
		n := binary.BigEndian.Uint32(out[1:5])
		if int(n) > len(out)-5 {
			break
		}
		if out[0]&2 != 0 {
			var end struct {
				Error *struct{ Code, Message string }
			}
			_ = json.Unmarshal(out[5:5+n], &end)
			if end.Error != nil {
				return end.Error.Code, end.Error.Message
			}
			return "", ""
		}
		out = out[5+n:]
	}
	return "", ""
}

// TestConnectJSONRefusesUnknownFieldsAndEnumNames (issue 12, item 5): over
// the Connect JSON API an unknown field is INVALID_ARGUMENT naming it, for
// every RPC; an enum typo ("sameNode": "FORBID", a restart mode, a
// protocol, a strategy) is INVALID_ARGUMENT naming the field by its path,
// and nothing is stored. The real names are taken.
func TestConnectJSONRefusesUnknownFieldsAndEnumNames(t *testing.T) {
	t.Parallel()
	const clusterSecret = "a-cluster-secret-for-the-members-service"
	s, c, tok := startWithToken(t, func(cfg *Config) { cfg.ClusterSecret = clusterSecret })
	for _, svc := range apiauth.Services {
		cred := tok
		if svc.Name() == "Members" {
			cred = auth.ClusterSecretPrefix + clusterSecret
		}
		ms := svc.Methods()
		for i := 0; i < ms.Len(); i++ {
			m := ms.Get(i)
			procedure := fmt.Sprintf("/%s/%s", svc.FullName(), m.Name())
			code, msg := postJSON(t, s, cred, procedure, m.IsStreamingServer(), `{"noSuchField": 1}`)
			if code != "invalid_argument" || !strings.Contains(msg, "noSuchField") || !strings.Contains(msg, "unknown field") {
				t.Errorf("%s with an unknown field: %s %q; want invalid_argument naming noSuchField", procedure, code, msg)
			}
		}
	}
	before := s.st().State().Snapshot().Index()
	for _, tc := range []struct{ procedure, body, field, typo string }{
		{managerv1connect.ManagerCreateBundleProcedure,
			`{"bundle":{"bundleId":"b","pool":"live","resiliencePolicy":{"sameNode":"FORBID"},"jobs":[{"jobName":"enc","job":{"jobId":"x","services":[{"name":"main","image":"hello:dev"}]}}]}}`,
			"bundle.resiliencePolicy.sameNode", "FORBID"},
		{managerv1connect.ManagerCreateJobProcedure,
			`{"job":{"jobId":"j","services":[{"name":"main","image":"hello:dev","restart":{"mode":"ALWAYS"}}]}}`,
			"job.services[0].restart.mode", "ALWAYS"},
		{managerv1connect.ManagerCreateJobProcedure,
			`{"job":{"jobId":"j","services":[{"name":"main","image":"hello:dev","ports":[{"containerPort":80,"protocol":"TCP"}]}]}}`,
			"job.services[0].ports[0].protocol", "TCP"},
		{managerv1connect.ManagerCreateJobProcedure,
			`{"job":{"jobId":"j","services":[{"name":"main","image":"hello:dev","workingDirectory":"/srv"}]}}`,
			"job.services[0].workingDirectory", "unknown field"},
		{managerv1connect.ManagerMigrateJobProcedure, `{"jobId":"j","strategy":"OVERLAP"}`, "strategy", "OVERLAP"},
	} {
		code, msg := postJSON(t, s, tok, tc.procedure, false, tc.body)
		if code != "invalid_argument" || !strings.Contains(msg, tc.field+": ") || !strings.Contains(msg, tc.typo) {
			t.Errorf("%s %s: %s %q; want invalid_argument naming %s", tc.procedure, tc.body, code, msg, tc.field)
		}
	}
	if after := s.st().State().Snapshot().Index(); after != before {
		t.Errorf("refused calls moved the store from index %d to %d", before, after)
	}
	// The real names, and either field spelling, are taken.
	if code, msg := postJSON(t, s, tok, managerv1connect.ManagerCreateJobProcedure, false,
		`{"job":{"job_id":"j","services":[{"name":"main","image":"hello:dev","restart":{"mode":"RESTART_MODE_ALWAYS"},"ports":[{"containerPort":80,"protocol":"PROTOCOL_TCP"}]}]}}`); code != "" {
		t.Fatalf("a job with real enum names: %s %q", code, msg)
	}
	j, err := c.JobById(context.Background(), connect.NewRequest(&managerv1.JobByIdRequest{JobId: "j"}))
	if err != nil {
		t.Fatal(err)
	}
	if svc := j.Msg.GetJob().GetServices()[0]; svc.GetRestart().GetMode() != managerv1.RestartMode_RESTART_MODE_ALWAYS || svc.GetPorts()[0].GetProtocol() != managerv1.Protocol_PROTOCOL_TCP {
		t.Errorf("stored service %v", svc)
	}
	// Infinity is JSON for a double: the bounds refuse it.
	if code, msg := postJSON(t, s, tok, managerv1connect.ManagerGetAuditLogProcedure, false, `{"toMs":"Infinity"}`); code != "invalid_argument" || !strings.HasPrefix(msg, "toMs: ") {
		t.Errorf(`GetAuditLog {"toMs":"Infinity"}: %s %q`, code, msg)
	}
}
