package jobspec_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
	"github.com/norsk-go/norsk-manager/pkg/jobspec"
)

// TestRequestValidators: each request check accepts what the Manager takes
// and refuses the rest as INVALID_ARGUMENT naming the field, the same for
// the Manager's handlers and the SDK's fake.
func TestRequestValidators(t *testing.T) {
	t.Parallel()
	start := func(job, role, node string) *managerv1.StartJobRequest {
		return &managerv1.StartJobRequest{JobId: job, Role: role, NodeId: node}
	}
	many := make([]*managerv1.StartJobRequest, jobspec.MaxStartJobs+1)
	for i := range many {
		many[i] = start("j", "r"+strings.Repeat("x", i%50)+string(rune('a'+i%26)), "n")
	}
	tests := []struct {
		name  string
		err   error
		field string // "" = accepted
	}{
		{"start", jobspec.ValidateStart("", start("j", "primary", "n")), ""},
		{"start bad role", jobspec.ValidateStart("starts[2].", start("j", "pri mary", "n")), "starts[2].role"},
		{"start bad runtime role", jobspec.ValidateStart("", &managerv1.StartJobRequest{JobId: "j", Role: "p", NodeId: "n", Options: &managerv1.StartJobOptions{RuntimeRole: "-x"}}), "options.runtimeRole"},
		{"starts", jobspec.ValidateStarts([]*managerv1.StartJobRequest{start("j", "primary", "n"), start("j", "backup", "n")}), ""},
		{"starts none", jobspec.ValidateStarts(nil), "starts"},
		{"starts too many", jobspec.ValidateStarts(many), "starts"},
		{"starts twice", jobspec.ValidateStarts([]*managerv1.StartJobRequest{start("j", "primary", "n"), start("j", "primary", "m")}), "starts[1].role"},
		{"grace", jobspec.ValidateGrace("graceMs", jobspec.MaxGraceMs), ""},
		{"grace over", jobspec.ValidateGrace("graceMs", jobspec.MaxGraceMs+1), "graceMs"},
		{"fail reason none", jobspec.ValidateFailReason(""), "reason"},
		{"fail reason long", jobspec.ValidateFailReason(strings.Repeat("r", jobspec.MaxReasonLen+1)), "reason"},
		{"lease ttl", jobspec.ValidateLeaseTTL(time.Minute.Milliseconds()), ""},
		{"lease ttl short", jobspec.ValidateLeaseTTL(999), "ttlMs"},
		{"lease ttl long", jobspec.ValidateLeaseTTL((jobspec.MaxBundleLeaseTTL + time.Millisecond).Milliseconds()), "ttlMs"},
		{"pause", jobspec.ValidateLeasePause("upgrade", "ops"), ""},
		{"pause nobody", jobspec.ValidateLeasePause("upgrade", ""), "by"},
		{"resume nobody", jobspec.ValidateLeaseResume(""), "by"},
		{"node tags none", jobspec.ValidateNodeTags(nil), "tags"},
		{"idle negative", jobspec.ValidateIdleExpiry(-1), "idleExpiryMs"},
		{"drain", jobspec.ValidateDrainRequest(&managerv1.DrainNodeRequest{NodeId: "n", Parallel: 3}), ""},
		{"drain undo with options", jobspec.ValidateDrainRequest(&managerv1.DrainNodeRequest{Undo: true, Parallel: 3}), "undo"},
		{"drain unknown strategy", jobspec.ValidateDrainRequest(&managerv1.DrainNodeRequest{Strategy: 99}), "strategy"},
		{"drain deadline long", jobspec.ValidateDrainRequest(&managerv1.DrainNodeRequest{DeadlineMs: jobspec.MaxDrainDeadline.Milliseconds() + 1}), "deadlineMs"},
		{"relay", jobspec.ValidateMigrationRelay("sourceJobKey", &managerv1.JobKey{JobId: "j", Role: "primary"}, "m1", nil), ""},
		{"relay no key", jobspec.ValidateMigrationRelay("targetJobKey", nil, "m1", nil), "targetJobKey"},
		{"relay long id", jobspec.ValidateMigrationRelay("sourceJobKey", &managerv1.JobKey{JobId: "j", Role: "primary"}, strings.Repeat("m", 65), nil), "migrationId"},
		{"relay big payload", jobspec.ValidateMigrationRelay("sourceJobKey", &managerv1.JobKey{JobId: "j", Role: "primary"}, "m1", make([]byte, jobspec.MaxMigrationPayload+1)), "payload"},
		{"rotation stage", jobspec.ValidateRotation(jobspec.RotationStage, ""), ""},
		{"rotation secret at finish", jobspec.ValidateRotation(jobspec.RotationFinish, "s"), "newTierSecret"},
		{"rotation long secret", jobspec.ValidateRotation(jobspec.RotationStage, strings.Repeat("s", 1025)), "newTierSecret"},
		{"rotation unknown step", jobspec.ValidateRotation("spin", ""), "step"},
		{"audit source", func() error { _, err := jobspec.ExternalAuditSource("external/ops"); return err }(), ""},
		{"audit no source", func() error { _, err := jobspec.ExternalAuditSource(jobspec.AuditSourceExternal); return err }(), "source"},
		{"audit page", jobspec.ValidateAuditQuery(&managerv1.GetAuditLogRequest{Limit: jobspec.MaxAuditPage + 1}), "limit"},
		{"prune future", jobspec.ValidatePruneBefore(2000, 1000), "beforeTimestampMs"},
		{"images", jobspec.ValidateImageRefs([]string{"hello:dev", "registry.local:5000/a/b@sha256:" + strings.Repeat("a", 64)}), ""},
		{"images twice", jobspec.ValidateImageRefs([]string{"hello:dev", "hello:dev"}), "imageRefs[1]"},
		{"control plane url", jobspec.ValidateControlPlaneURL("https://mgr.example:8443/"), ""},
		{"control plane not http", jobspec.ValidateControlPlaneURL("ftp://x"), "url"},
		{"oci node", jobspec.ValidateOciNode(&managerv1.CreateOciNodeRequest{}), "availabilityDomain"},
		{"region", jobspec.ValidateRegion(""), "region"},
	}
	for _, tc := range tests {
		if tc.field == "" {
			if tc.err != nil {
				t.Errorf("%s: refused: %v", tc.name, tc.err)
			}
			continue
		}
		var e *apierr.Error
		if !errors.As(tc.err, &e) || e.Code != apierr.InvalidArgument || e.Field != tc.field {
			t.Errorf("%s = %v; want INVALID_ARGUMENT naming %s", tc.name, tc.err, tc.field)
		}
	}
	if _, _, err := jobspec.ClusterEventsQuery(&managerv1.GetClusterEventsRequest{Limit: jobspec.MaxClusterEvents + 1}); apierr.CodeOf(err) != apierr.InvalidArgument {
		t.Errorf("ClusterEventsQuery over the limit = %v", err)
	}
	if limit, _, err := jobspec.ClusterEventsQuery(&managerv1.GetClusterEventsRequest{}); err != nil || limit != jobspec.DefaultClusterEvents {
		t.Errorf("ClusterEventsQuery() = %d, %v; want the default page", limit, err)
	}
}
