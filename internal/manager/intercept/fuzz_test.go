package intercept

import (
	"errors"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/dynamicpb"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
	"github.com/norsk-go/norsk-manager/pkg/jobspec"
)

// FuzzRequestValidators: arbitrary bytes decoded as the requests whose
// validation is the Manager's own (KV commits, audit appends, discovery
// fleets, tokens) never panic the validators.
func FuzzRequestValidators(f *testing.F) {
	seed := func(m proto.Message) {
		b, _ := proto.Marshal(m)
		f.Add(b)
	}
	v1 := uint64(1)
	seed(&managerv1.KvCommitRequest{Namespace: "ns", Writes: []*managerv1.KvWrite{{Key: "k", Op: &managerv1.KvWrite_Put{Put: []byte("v")}, ExpectedRevision: &v1}}})
	seed(&managerv1.AppendAuditEntryRequest{Source: "s", Kind: "k", Payload: "{}"})
	seed(&managerv1.PublishDiscoveryFleetRequest{Fleet: &managerv1.DiscoveryFleet{Addresses: []string{"a:1"}, LeafToken: "l", TierSecret: "t"}})
	seed(&managerv1.CreateTokenRequest{Name: "n", Role: "admin", TtlS: 60})
	f.Fuzz(func(t *testing.T, b []byte) {
		kv := &managerv1.KvCommitRequest{}
		if proto.Unmarshal(b, kv) == nil {
			opts := kv.GetOptions()
			if opts == nil {
				opts = &managerv1.KvCommitOptions{}
			}
			_ = jobspec.ValidateKVCommit(kv.GetNamespace(), kv.GetWrites(), opts)
		}
		au := &managerv1.AppendAuditEntryRequest{}
		if proto.Unmarshal(b, au) == nil {
			_ = jobspec.ValidateAuditAppend(au.GetSource(), au.GetKind(), au.GetPayload())
		}
		df := &managerv1.PublishDiscoveryFleetRequest{}
		if proto.Unmarshal(b, df) == nil {
			_ = jobspec.ValidateDiscoveryFleet(df.GetFleet())
		}
		tk := &managerv1.CreateTokenRequest{}
		if proto.Unmarshal(b, tk) == nil {
			_ = jobspec.ValidateTokenRequest(tk.GetName(), tk.GetRole(), tk.GetTtlS())
		}
	})
}

// FuzzConnectJSON fuzzes the Connect JSON decoding path every request
// takes (issue 12, item 5): the strict codec, then the field bounds. Any
// bytes, decoded as any request of the API, never panic; a refusal is
// INVALID_ARGUMENT with a bounded message; what the lenient decoder (the one
// connect had) would take but the strict one refuses — an unknown field or
// enum name — is refused naming a field; and what decodes encodes and
// decodes back to the same message.
func FuzzConnectJSON(f *testing.F) {
	for _, seed := range []string{
		`{}`,
		`{"noSuchField": 1}`,
		`{"bundle":{"bundleId":"b","pool":"live","resiliencePolicy":{"sameNode":"FORBID"},"jobs":[{"jobName":"enc","job":{"jobId":"x","services":[{"name":"main","image":"hello:dev"}]}}]}}`,
		`{"bundle":{"resiliencePolicy":{"sameNode":"ANTI_AFFINITY_FORBID","replicas":3}}}`,
		`{"job":{"jobId":"j","services":[{"name":"main","image":"hello:dev","restart":{"mode":"ALWAYS"},"ports":[{"containerPort":80,"protocol":"TCP"}],"env":{"A":"1"}}],"tags":{"k":"v"}}}`,
		`{"job":{"job_id":"j","start_date_time":"2025-01-01T00:00:00Z","services":[{"working_dir":"/a\u0000b"}]}}`,
		`{"toMs":"Infinity","fromMs":"NaN","limit":5}`,
		`{"filters":[{"tag":{"tagName":"team","re":"n.*"}},{"date":{"field":"DATE_FIELD_START","within":{"startDate":"2025-01-01T00:00:00Z"}}}]}`,
		`{"writes":[{"key":"k","put":"AAEC","expectedRevision":"3"}],"options":{"setSchemaVersion":"2"}}`,
		`{"fleet":{"addresses":["a:1"],"tierSecret":null,"leafToken":"l"}}`,
		`{"starts":[{"jobId":"a","role":"primary","nodeId":"n","options":{"placement":{"degradations":[{"rule":"r"}]}}}]}`,
		`{"migration":{"phase":7,"phaseHistory":[{"phase":"MIGRATION_PHASE_X"}]}}`,
		`{"idleExpiryMs":"9223372036854775807"}`,
		`{"a":{"b":[[[[{}]]]]}}`,
		`{"job":{"services":[{"name":1}]}}`,
		`[1,2]`,
		`{"job":{"services":{}}}`,
		`{"job":null}`,
		`{"bundle":{"jobs":[{"job":{"services":[{"env":{"A\"B":"x"}}]}}]}}`,
	} {
		for i := 0; i < 4; i++ {
			f.Add(byte(i*17), []byte(seed))
		}
	}
	roots := requestRoots()
	f.Fuzz(func(t *testing.T, which byte, data []byte) {
		md := roots[int(which)%len(roots)]
		m := dynamicpb.NewMessage(md)
		err := decodeStrictJSON(data, m)
		if err != nil {
			var ae *apierr.Error
			if !errors.As(err, &ae) || ae.Code != apierr.InvalidArgument {
				t.Fatalf("decoding %s: %v is not INVALID_ARGUMENT", md.FullName(), err)
			}
			if len(err.Error()) > 2048 {
				t.Fatalf("decoding %s: a %d-byte error", md.FullName(), len(err.Error()))
			}
			lenient := dynamicpb.NewMessage(md)
			if protojson.Unmarshal(data, lenient) != nil && (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(data, lenient) == nil && ae.Field == "" {
				t.Fatalf("decoding %s: %q is refused for an unknown field or enum name, but the refusal names no field: %v", md.FullName(), data, err)
			}
			return
		}
		_ = requestBounds.Check(m)
		out, err := strictJSON{"json"}.Marshal(m)
		if err != nil {
			t.Fatalf("encoding %s: %v", md.FullName(), err)
		}
		back := dynamicpb.NewMessage(md)
		if err := decodeStrictJSON(out, back); err != nil {
			t.Fatalf("%s: %s encodes to %s, which does not decode: %v", md.FullName(), data, out, err)
		}
		if !proto.Equal(m, back) {
			t.Fatalf("%s: %s round-trips to %v, not %v", md.FullName(), data, back, m)
		}
	})
}
