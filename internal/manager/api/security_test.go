package api_test

import (
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/auth"
	"github.com/norsk-go/norsk-manager/internal/manager/api"
	"github.com/norsk-go/norsk-manager/internal/providers/cloudconf"
)

// TestTokenHandlers: API tokens over a fake backend. The handler mints the
// id and secret (the store keeps only the secret's hash) and stamps the
// expiry from its clock.
func TestTokenHandlers(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	h := e.h
	e.run(t, []hcase{
		{name: "CreateToken/BadName", do: call(h.CreateToken, &managerv1.CreateTokenRequest{Name: "-x", Role: "operator"}),
			code: connect.CodeInvalidArgument, names: []string{"name:"}},
		{name: "CreateToken/UnknownRole", do: call(h.CreateToken, &managerv1.CreateTokenRequest{Name: "ci", Role: "root"}),
			code: connect.CodeInvalidArgument, names: []string{"role:", `"root"`}},
		{name: "CreateToken/NegativeTTL", do: call(h.CreateToken, &managerv1.CreateTokenRequest{Name: "ci", Role: "operator", TtlS: -1}),
			code: connect.CodeInvalidArgument, names: []string{"ttlS:"}},
		{name: "CreateToken/TTLOverACentury", do: call(h.CreateToken, &managerv1.CreateTokenRequest{Name: "ci", Role: "operator", TtlS: 100*365*24*3600 + 1}),
			code: connect.CodeInvalidArgument, names: []string{"ttlS:"}},
		{name: "CreateToken/Good", do: call(h.CreateToken, &managerv1.CreateTokenRequest{Name: "ci", Role: "operator", TtlS: 3600}),
			check: func(t *testing.T, resp proto.Message, writes []*storev1.Command) {
				w := oneWrite(t, writes, func(c *storev1.Command) *storev1.CreateToken { return c.GetCreateToken() })
				r := resp.(*managerv1.CreateTokenResponse)
				id, hash, err := auth.ParseToken(r.GetSecret())
				if err != nil || id != w.GetToken().GetId() || hash != w.GetSecretHash() {
					t.Errorf("answered secret %q (%v) does not parse to the written id %q and hash", r.GetSecret(), err, w.GetToken().GetId())
				}
				want := &managerv1.ApiToken{Id: id, Name: "ci", Role: "operator", ExpiresAt: timestamppb.New(t0.Add(time.Hour))}
				if !proto.Equal(w.GetToken(), want) {
					t.Errorf("wrote %v; want %v", w.GetToken(), want)
				}
				if strings.Contains(w.String(), r.GetSecret()) {
					t.Error("the write holds the bearer secret; the store keeps only its hash")
				}
			}},
		{name: "RevokeToken/Unknown", do: call(h.RevokeToken, &managerv1.RevokeTokenRequest{Id: "0123456789abcdef"}),
			code: connect.CodeNotFound, names: []string{`"0123456789abcdef"`}},
	})
}

// TestLeaseAndKVHandlers: lease pauses and KV commits over a fake backend.
func TestLeaseAndKVHandlers(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	h := e.h
	put := func(k, v string) *managerv1.KvWrite {
		return &managerv1.KvWrite{Key: k, Op: &managerv1.KvWrite_Put{Put: []byte(v)}}
	}
	e.run(t, []hcase{
		{name: "PauseLeases/NoReason", do: call(h.PauseLeases, &managerv1.PauseLeasesRequest{By: "ops"}),
			code: connect.CodeInvalidArgument, names: []string{"reason:"}},
		{name: "PauseLeases/NoBy", do: call(h.PauseLeases, &managerv1.PauseLeasesRequest{Reason: "upgrade"}),
			code: connect.CodeInvalidArgument, names: []string{"by:"}},
		{name: "PauseLeases/Good", do: call(h.PauseLeases, &managerv1.PauseLeasesRequest{Reason: "upgrade", By: "ops"}),
			want: []*storev1.Command{{Cmd: &storev1.Command_SetLeasesPaused{SetLeasesPaused: &storev1.SetLeasesPaused{Paused: true, Reason: "upgrade", By: "ops"}}}}},
		{name: "ResumeLeases/NoBy", do: call(h.ResumeLeases, &managerv1.ResumeLeasesRequest{}),
			code: connect.CodeInvalidArgument, names: []string{"by:"}},
		{name: "ResumeLeases/Good", do: call(h.ResumeLeases, &managerv1.ResumeLeasesRequest{By: "ops"}),
			want: []*storev1.Command{{Cmd: &storev1.Command_SetLeasesPaused{SetLeasesPaused: &storev1.SetLeasesPaused{By: "ops"}}}}},
		{name: "GetLeaseStatus/NoController", do: call(h.GetLeaseStatus, &managerv1.GetLeaseStatusRequest{}),
			code: connect.CodeUnavailable, names: []string{"primary term"}},
		{name: "KvCommit/NoNamespace", do: call(h.KvCommit, &managerv1.KvCommitRequest{Writes: []*managerv1.KvWrite{put("a", "1")}}),
			code: connect.CodeInvalidArgument, names: []string{"namespace:"}},
		{name: "KvCommit/Nothing", do: call(h.KvCommit, &managerv1.KvCommitRequest{Namespace: "app"}),
			code: connect.CodeInvalidArgument, names: []string{"writes:"}},
		{name: "KvCommit/EmptyKey", do: call(h.KvCommit, &managerv1.KvCommitRequest{Namespace: "app", Writes: []*managerv1.KvWrite{put("a", "1"), put("", "2")}}),
			code: connect.CodeInvalidArgument, names: []string{"writes[1].key:"}},
		{name: "KvCommit/KeyTwice", do: call(h.KvCommit, &managerv1.KvCommitRequest{Namespace: "app", Writes: []*managerv1.KvWrite{put("a", "1"), put("a", "2")}}),
			code: connect.CodeInvalidArgument, names: []string{"writes[1].key:"}},
		{name: "KvCommit/NoOp", do: call(h.KvCommit, &managerv1.KvCommitRequest{Namespace: "app", Writes: []*managerv1.KvWrite{{Key: "a"}}}),
			code: connect.CodeInvalidArgument, names: []string{"writes[0]:"}},
		{name: "KvCommit/FalseDelete", do: call(h.KvCommit, &managerv1.KvCommitRequest{Namespace: "app", Writes: []*managerv1.KvWrite{{Key: "a", Op: &managerv1.KvWrite_Delete{}}}}),
			code: connect.CodeInvalidArgument, names: []string{"writes[0].delete:"}},
		{name: "KvCommit/NegativeSchema", do: call(h.KvCommit, &managerv1.KvCommitRequest{Namespace: "app", Options: &managerv1.KvCommitOptions{SetSchemaVersion: proto.Int64(-1)}}),
			code: connect.CodeInvalidArgument, names: []string{"options.setSchemaVersion:"}},
		{name: "KvCommit/Good", do: call(h.KvCommit, &managerv1.KvCommitRequest{Namespace: "app", Writes: []*managerv1.KvWrite{put("a", "1")}}),
			want: []*storev1.Command{{Cmd: &storev1.Command_KvCommit{KvCommit: &storev1.KvCommit{
				Namespace: "app", Writes: []*managerv1.KvWrite{put("a", "1")}, Options: &managerv1.KvCommitOptions{}}}}},
			check: func(t *testing.T, resp proto.Message, _ []*storev1.Command) {
				if resp.(*managerv1.KvCommitResponse).GetRevision() == 0 {
					t.Errorf("answered %v; want the commit's revision", resp)
				}
			}},
		{name: "KvGet/NoKey", do: call(h.KvGet, &managerv1.KvGetRequest{Namespace: "app"}),
			code: connect.CodeInvalidArgument, names: []string{"key:"}},
		{name: "KvGet/ReadsTheCommit", do: call(h.KvGet, &managerv1.KvGetRequest{Namespace: "app", Key: "a"}),
			check: func(t *testing.T, resp proto.Message, writes []*storev1.Command) {
				if got := string(resp.(*managerv1.KvGetResponse).GetEntry().GetValue()); got != "1" || len(writes) != 0 {
					t.Errorf("KvGet = %q with writes %v; want the committed value, no write", got, writes)
				}
			}},
	})
}

// TestAuditDiscoveryAndHostAgentHandlers: the audit log, the discovery
// fleet, host agents and the access replica over a fake backend.
func TestAuditDiscoveryAndHostAgentHandlers(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *api.Config) {
		c.CloudHypervisor = &cloudconf.CloudHypervisor{Hosts: map[string]cloudconf.CloudHypervisorHost{"hv-config": {}}}
	})
	h := e.h
	secret := strings.Repeat("s", 32)
	nowMs := float64(t0.UnixMilli())
	e.run(t, []hcase{
		{name: "AppendAuditEntry/NoSource", do: call(h.AppendAuditEntry, &managerv1.AppendAuditEntryRequest{Kind: "k"}),
			code: connect.CodeInvalidArgument, names: []string{"source:"}},
		{name: "AppendAuditEntry/OutsideACall", do: call(h.AppendAuditEntry, &managerv1.AppendAuditEntryRequest{Source: "mgr", Kind: "k"}),
			code: connect.CodeInternal, names: []string{"outside an authenticated call"}},
		{name: "GetAuditLog/TooMany", do: call(h.GetAuditLog, &managerv1.GetAuditLogRequest{Limit: api.MaxAuditPage + 1}),
			code: connect.CodeInvalidArgument, names: []string{"limit:"}},
		{name: "PruneAuditLog/Future", do: call(h.PruneAuditLog, &managerv1.PruneAuditLogRequest{BeforeTimestampMs: nowMs + 1000}),
			code: connect.CodeInvalidArgument, names: []string{"beforeTimestampMs:", "in the future"}},
		{name: "PruneAuditLog/Past", do: call(h.PruneAuditLog, &managerv1.PruneAuditLogRequest{BeforeTimestampMs: nowMs - 1000}),
			want: []*storev1.Command{{Cmd: &storev1.Command_PruneAudit{PruneAudit: &storev1.PruneAudit{BeforeTimestampMs: nowMs - 1000}}}}},
		{name: "PublishDiscoveryFleet/NoFleet", do: call(h.PublishDiscoveryFleet, &managerv1.PublishDiscoveryFleetRequest{}),
			code: connect.CodeInvalidArgument, names: []string{"fleet:"}},
		{name: "PublishDiscoveryFleet/SecretIsLeaf", do: call(h.PublishDiscoveryFleet, &managerv1.PublishDiscoveryFleetRequest{Fleet: &managerv1.DiscoveryFleet{
			Addresses: []string{"d1:443"}, LeafToken: secret, TierSecret: secret}}),
			code: connect.CodeInvalidArgument, names: []string{"fleet.tierSecret:"}},
		{name: "PublishDiscoveryFleet/ShortSecret", do: call(h.PublishDiscoveryFleet, &managerv1.PublishDiscoveryFleetRequest{Fleet: &managerv1.DiscoveryFleet{
			Addresses: []string{"d1:443"}, LeafToken: "leaf", TierSecret: "short"}}),
			code: connect.CodeInvalidArgument, names: []string{"fleet.tierSecret:", "at least 32"}},
		{name: "PublishDiscoveryFleet/Good", do: call(h.PublishDiscoveryFleet, &managerv1.PublishDiscoveryFleetRequest{Fleet: &managerv1.DiscoveryFleet{
			Addresses: []string{"d1:443"}, LeafToken: "leaf", TierSecret: secret, RotationPhase: "ignored"}}),
			want: []*storev1.Command{{Cmd: &storev1.Command_PublishDiscovery{PublishDiscovery: &storev1.PublishDiscovery{Fleet: &managerv1.DiscoveryFleet{
				Addresses: []string{"d1:443"}, LeafToken: "leaf", TierSecret: secret}}}}}},
		{name: "RotateDiscoveryTierSecret/UnknownStep", do: call(h.RotateDiscoveryTierSecret, &managerv1.RotateDiscoveryTierSecretRequest{Step: "spin"}),
			code: connect.CodeInvalidArgument, names: []string{"step:", `"spin"`}},
		{name: "RotateDiscoveryTierSecret/SecretOnFlip", do: call(h.RotateDiscoveryTierSecret, &managerv1.RotateDiscoveryTierSecretRequest{Step: "flip", NewTierSecret: secret}),
			code: connect.CodeInvalidArgument, names: []string{"newTierSecret:"}},
		{name: "RotateDiscoveryTierSecret/StageMakesASecret", do: call(h.RotateDiscoveryTierSecret, &managerv1.RotateDiscoveryTierSecretRequest{Step: "stage"}),
			check: func(t *testing.T, _ proto.Message, writes []*storev1.Command) {
				w := oneWrite(t, writes, func(c *storev1.Command) *storev1.RotateDiscovery { return c.GetRotateDiscovery() })
				if w.GetStep() != "stage" || !strings.HasPrefix(w.GetNewTierSecret(), "nts_") || len(w.GetNewTierSecret()) < 4+64 {
					t.Errorf("wrote %v; want a stage with a tier secret the handler made (nts_ and 256 bits)", w)
				}
			}},
		{name: "AddHostAgent/BadName", do: call(h.AddHostAgent, &managerv1.AddHostAgentRequest{Name: "Not A Host"}),
			code: connect.CodeInvalidArgument, names: []string{"name:"}},
		{name: "AddHostAgent/Configured", do: call(h.AddHostAgent, &managerv1.AddHostAgentRequest{Name: "hv-config"}),
			code: connect.CodeAlreadyExists, names: []string{`"hv-config"`}},
		{name: "AddHostAgent/Good", do: call(h.AddHostAgent, &managerv1.AddHostAgentRequest{Name: "hv-1"}),
			check: func(t *testing.T, resp proto.Message, writes []*storev1.Command) {
				w := oneWrite(t, writes, func(c *storev1.Command) *storev1.AddHostAgent { return c.GetAddHostAgent() })
				if w.GetName() != "hv-1" || w.GetToken() == "" || resp.(*managerv1.AddHostAgentResponse).GetToken() != w.GetToken() {
					t.Errorf("wrote %v, answered %v; want hv-1 with the token the handler made, answered", w, resp)
				}
			}},
		{name: "PublishAccessReplica/NoKeys", do: call(h.PublishAccessReplica, &managerv1.PublishAccessReplicaRequest{Publication: &managerv1.AccessReplicaPublication{SnapshotJws: "x"}}),
			code: connect.CodeFailedPrecondition, names: []string{"no access replica keys"}},
		{name: "RecordMigration/NoID", do: call(h.RecordMigration, &managerv1.RecordMigrationRequest{Migration: &managerv1.MigrationState{}}),
			code: connect.CodeInvalidArgument, names: []string{"migration.migrationId:"}},
		{name: "ForgetMigration/Unknown", do: call(h.ForgetMigration, &managerv1.ForgetMigrationRequest{MigrationId: "mig-9"}),
			code: connect.CodeNotFound, names: []string{`"mig-9"`}},
		{name: "MigrateJob/UnknownStrategy", do: call(h.MigrateJob, &managerv1.MigrateJobRequest{JobId: "j", Strategy: 99}),
			code: connect.CodeInvalidArgument, names: []string{"strategy:"}},
	})
}
