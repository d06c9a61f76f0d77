package apibounds_test

import (
	"errors"
	"math"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/timestamppb"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/pkg/apibounds"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
)

// table is a small table over the Manager API's messages.
var table = &apibounds.Table{
	Defaults: apibounds.Defaults{
		String: apibounds.Str(16), Bytes: apibounds.Bytes(8), Items: 3,
		MapItems: 2, MapKey: apibounds.Str(8), MapValue: apibounds.Str(8),
	},
	Fields: map[protoreflect.FullName]apibounds.Rule{
		"norsk.manager.v1.Job.description":                         apibounds.TextOf(32),
		"norsk.manager.v1.Service.args":                            apibounds.Arg(4).Items(2),
		"norsk.manager.v1.Service.env":                             apibounds.Map(1, apibounds.Str(4), apibounds.Arg(4)),
		"norsk.manager.v1.SetNodeIdleExpiryRequest.idle_expiry_ms": apibounds.Between(0, 1000),
		"norsk.manager.v1.GetAuditLogRequest.to_ms":                apibounds.Between(0, 1e13),
		"norsk.manager.v1.StopJobOptions.grace_ms":                 apibounds.Between(0, 10),
		"norsk.manager.v1.DiscoveryFleet.tier_secret":              apibounds.Str(64).AtLeast(8).Secretly(),
	},
	Names: map[protoreflect.Name]apibounds.Rule{
		"job_id": apibounds.Str(4),
	},
}

func svcJob(s *managerv1.Service) *managerv1.CreateJobRequest {
	return &managerv1.CreateJobRequest{Job: &managerv1.Job{JobId: "a", Services: []*managerv1.Service{{Name: "x"}, s}}}
}

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name  string
		msg   proto.Message
		field string // "" = accepted
		says  string
	}{
		{"empty", &managerv1.CreateJobRequest{}, "", ""},
		{"within", svcJob(&managerv1.Service{Name: "y", Args: []string{"a\tb", "c"}, Env: map[string]string{"K": "v\n"}}), "", ""},
		{"name rule", &managerv1.CreateJobRequest{Job: &managerv1.Job{JobId: "abcde"}}, "job.jobId", "is 5 bytes (at most 4)"},
		{"default string", svcJob(&managerv1.Service{Name: strings.Repeat("n", 17)}), "job.services[1].name", "at most 16"},
		{"NUL in a line", svcJob(&managerv1.Service{WorkingDir: "/a\x00b"}), "job.services[1].workingDir", `U+0000 at byte 2`},
		{"newline in a line", svcJob(&managerv1.Service{WorkingDir: "/a\nb"}), "job.services[1].workingDir", `U+000A`},
		{"DEL in a line", svcJob(&managerv1.Service{WorkingDir: "/a\x7f"}), "job.services[1].workingDir", `U+007F`},
		{"C1 in a line", svcJob(&managerv1.Service{WorkingDir: "/a\u0085"}), "job.services[1].workingDir", `U+0085`},
		{"line separator", svcJob(&managerv1.Service{WorkingDir: "/a\u2028"}), "job.services[1].workingDir", `U+2028`},
		{"text takes line breaks", &managerv1.CreateJobRequest{Job: &managerv1.Job{Description: "a\r\n\tb"}}, "", ""},
		{"text refuses escape", &managerv1.CreateJobRequest{Job: &managerv1.Job{Description: "a\x1b[2J"}}, "job.description", "U+001B"},
		{"invalid UTF-8", &managerv1.CreateJobRequest{Job: &managerv1.Job{Description: "a\xff"}}, "job.description", "not valid UTF-8"},
		{"arg takes control characters", svcJob(&managerv1.Service{Args: []string{"\x1b\t"}}), "", ""},
		{"arg refuses NUL", svcJob(&managerv1.Service{Args: []string{"a", "b\x00"}}), "job.services[1].args[1]", "U+0000"},
		{"arg too long", svcJob(&managerv1.Service{Args: []string{"abcde"}}), "job.services[1].args[0]", "at most 4"},
		{"too many args", svcJob(&managerv1.Service{Args: []string{"a", "b", "c"}}), "job.services[1].args", "has 3 entries (at most 2)"},
		{"default items", &managerv1.CreateJobRequest{Job: &managerv1.Job{Volumes: []string{"a", "b", "c", "d"}}}, "job.volumes", "at most 3"},
		{"map entries", svcJob(&managerv1.Service{Env: map[string]string{"A": "1", "B": "2"}}), "job.services[1].env", "at most 1"},
		{"map key", svcJob(&managerv1.Service{Env: map[string]string{"A\x00": "1"}}), "job.services[1].env", `key "A\x00" holds control character`},
		{"map value", svcJob(&managerv1.Service{Env: map[string]string{"A": "12345"}}), "job.services[1].env.A", "at most 4"},
		{"map value of an odd key", svcJob(&managerv1.Service{Env: map[string]string{"a b": "12345"}}), `job.services[1].env["a b"]`, "at most 4"},
		{"default map", &managerv1.SetNodeTagsRequest{Tags: map[string]string{"a": "1", "b": "2", "c": "3"}}, "tags", "at most 2"},
		{"int range", &managerv1.SetNodeIdleExpiryRequest{IdleExpiryMs: math.MaxInt64}, "idleExpiryMs", "9223372036854775807 is out of range (0 to 1000)"},
		{"int below", &managerv1.SetNodeIdleExpiryRequest{IdleExpiryMs: -1}, "idleExpiryMs", "out of range"},
		{"uint range", &managerv1.StopJobRequest{Options: &managerv1.StopJobOptions{GraceMs: 11}}, "options.graceMs", "11 is out of range (0 to 10)"},
		{"double infinite", &managerv1.GetAuditLogRequest{ToMs: math.Inf(1)}, "toMs", "not a finite number"},
		{"double NaN", &managerv1.GetAuditLogRequest{FromMs: math.NaN()}, "fromMs", "not a finite number"},
		{"double range", &managerv1.GetAuditLogRequest{ToMs: 1e14}, "toMs", "out of range (0 to 10000000000000)"},
		{"unknown enum", &managerv1.CreateBundleRequest{Bundle: &managerv1.Bundle{ResiliencePolicy: &managerv1.ResiliencePolicy{SameNode: 42}}}, "bundle.resiliencePolicy.sameNode", "42 is not a AntiAffinity value"},
		{"known enum", &managerv1.CreateBundleRequest{Bundle: &managerv1.Bundle{ResiliencePolicy: &managerv1.ResiliencePolicy{SameNode: managerv1.AntiAffinity_ANTI_AFFINITY_FORBID}}}, "", ""},
		{"bad timestamp", &managerv1.SetBundleStopTimeRequest{StopAt: &timestamppb.Timestamp{Seconds: math.MaxInt64}}, "stopAt", "not a time from year 1 to 9999"},
		{"bad nanos", &managerv1.SetBundleStopTimeRequest{StopAt: &timestamppb.Timestamp{Nanos: -1}}, "stopAt", "nanos -1"},
		{"bytes", &managerv1.KvCommitRequest{Writes: []*managerv1.KvWrite{{Op: &managerv1.KvWrite_Put{Put: make([]byte, 9)}}}}, "writes[0].put", "is 9 bytes (at most 8)"},
		{"short secret", &managerv1.PublishDiscoveryFleetRequest{Fleet: &managerv1.DiscoveryFleet{TierSecret: "x"}}, "fleet.tierSecret", "at least 8"},
		{"secret not quoted", &managerv1.PublishDiscoveryFleetRequest{Fleet: &managerv1.DiscoveryFleet{TierSecret: "supersecret\x00"}}, "fleet.tierSecret", "U+0000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := table.Check(tc.msg)
			if tc.field == "" {
				if err != nil {
					t.Fatalf("Check = %v, want nil", err)
				}
				return
			}
			var ae *apierr.Error
			if !errors.As(err, &ae) || ae.Code != apierr.InvalidArgument || ae.Field != tc.field || !strings.Contains(ae.Msg, tc.says) {
				t.Fatalf("Check = %#v, want INVALID_ARGUMENT on %s saying %q", err, tc.field, tc.says)
			}
			if strings.Contains(err.Error(), "supersecret") {
				t.Errorf("the refusal quotes a secret: %v", err)
			}
		})
	}
}

// TestCheckQuotesABoundedPrefix: a refusal of a huge value names its
// length and quotes at most a short prefix.
func TestCheckQuotesABoundedPrefix(t *testing.T) {
	big := strings.Repeat("é", 1<<19) + "\x00" // 1 MiB, NUL at the end
	tb := &apibounds.Table{Defaults: apibounds.Defaults{String: apibounds.Str(2 << 20), Items: 2}}
	err := tb.Check(svcJob(&managerv1.Service{WorkingDir: big}))
	if err == nil || len(err.Error()) > 300 || !strings.Contains(err.Error(), "(1048577 bytes)") || !strings.Contains(err.Error(), "at byte 1048576") {
		t.Fatalf("Check = %.400v (%d bytes)", err, len(err.Error()))
	}
	err = table.Check(svcJob(&managerv1.Service{WorkingDir: big}))
	if err == nil || len(err.Error()) > 200 || strings.Contains(err.Error(), "é") {
		t.Fatalf("Check of an over-long value = %.400v", err)
	}
}

// TestCheckOrder: the first field out of bounds in schema order is named,
// map entries in key order, so a refusal does not change between calls.
func TestCheckOrder(t *testing.T) {
	for i := 0; i < 20; i++ {
		var ae *apierr.Error
		tb := &apibounds.Table{Defaults: apibounds.Defaults{String: apibounds.Str(16), Items: 3, MapItems: 5, MapKey: apibounds.Str(8), MapValue: apibounds.Str(4)}}
		if err := tb.Check(svcJob(&managerv1.Service{Env: map[string]string{"Z": "123456", "A": "123456", "M": "123456"}})); !errors.As(err, &ae) || ae.Field != "job.services[1].env.A" {
			t.Fatalf("Check = %v, want env.A first", err)
		}
	}
}

// TestFields walks every field reachable from a message once.
func TestFields(t *testing.T) {
	seen := map[protoreflect.FullName]int{}
	apibounds.Fields(func(f protoreflect.FieldDescriptor) { seen[f.FullName()]++ },
		(&managerv1.CreateBundleRequest{}).ProtoReflect().Descriptor(), (&managerv1.CreateJobRequest{}).ProtoReflect().Descriptor())
	for _, want := range []protoreflect.FullName{"norsk.manager.v1.Bundle.resilience_policy", "norsk.manager.v1.Service.working_dir", "norsk.manager.v1.PortRange.max_port", "google.protobuf.Timestamp.seconds"} {
		if seen[want] != 1 {
			t.Errorf("%s seen %d times, want once", want, seen[want])
		}
	}
}
