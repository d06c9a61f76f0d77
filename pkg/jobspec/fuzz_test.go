package jobspec_test

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
	"github.com/norsk-go/norsk-manager/pkg/jobspec"
)

// FuzzValidateJob feeds protojson-encoded jobs (as the Connect JSON protocol
// and `norsk-ctl job create -f` deliver them) to ValidateJob: it must not
// panic, must not change the job, must answer the same twice, and must
// refuse only with an INVALID_ARGUMENT naming a field under "job".
func FuzzValidateJob(f *testing.F) {
	seeds := []string{
		`{}`,
		`{"jobId":"a","services":[{"name":"a","image":"x"}]}`,
		`{"jobId":"a","services":[{"name":"a","image":"x","dependsOn":["a"]}]}`,
		`{"jobId":"a","services":[{"name":"a","image":"x","dependsOn":["b"]},{"name":"b","image":"x","dependsOn":["a"]}]}`,
		`{"jobId":"a","services":[{"name":"a","image":"x","dependsOn":["zz"]}]}`,
		`{"jobId":"a","volumes":["v"],"services":[{"name":"a","command":["c"],"volumeMounts":[{"source":"v","containerPath":"/v"},{"source":"/h/../x","containerPath":"/x"}]}]}`,
		`{"jobId":"a","services":[{"name":"a","image":"x","ports":[{"containerPort":1,"range":{"minPort":5,"maxPort":1}},{"containerPort":0},{"containerPort":2,"protocol":9,"hostAddress":"::1"}]}]}`,
		`{"jobId":"a","services":[{"name":"a","image":"x","restart":{"mode":17}}]}`,
		`{"jobId":"a","services":[null]}`,
		`{"jobId":"a","services":[{"name":"a","image":"x"}],"autoPlacement":{"requirements":{"requiredCapacity":-1,"requiredGpuCapacity":"NaN","requiredCapabilities":[{}]}}}`,
		`{"jobId":"a","tags":{"":"x"},"startDateTime":"2025-01-01T00:00:00Z","services":[{"name":"a","image":"x","env":{"1":"x"}}]}`,
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	if b, err := protojson.Marshal(fullJob()); err == nil {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		job := &managerv1.Job{}
		if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(data, job); err != nil {
			return
		}
		orig := proto.Clone(job)
		err := jobspec.ValidateJob(job)
		if !proto.Equal(job, orig) {
			t.Fatal("ValidateJob changed the job")
		}
		again := jobspec.ValidateJob(job)
		if (err == nil) != (again == nil) || (err != nil && err.Error() != again.Error()) {
			t.Fatalf("ValidateJob is not deterministic: %v, then %v", err, again)
		}
		if err == nil {
			return
		}
		var ae *apierr.Error
		if !errors.As(err, &ae) || ae.Code != apierr.InvalidArgument {
			t.Fatalf("refusal %v is not an INVALID_ARGUMENT", err)
		}
		if ae.Field != "job" && !strings.HasPrefix(ae.Field, "job.") {
			t.Fatalf("refusal %v names field %q, not one under job", err, ae.Field)
		}
	})
}

// FuzzCompileFilters feeds protojson-encoded search requests to
// CompileFilters and runs the matcher: no panic, and a refusal is an
// INVALID_ARGUMENT naming a field under "filters".
func FuzzCompileFilters(f *testing.F) {
	seeds := []string{
		`{}`,
		`{"filters":[{"tag":{"tagName":"team","re":"l.*"}},{"id":{"neq":"x"}}]}`,
		`{"filters":[{"date":{"field":"DATE_FIELD_START","within":{"startDate":"2025-01-01T00:00:00Z","endDate":"2024-01-01T00:00:00Z"}}}]}`,
		`{"filters":[{"date":{"field":7,"lt":"2025-01-01T00:00:00Z"}},{"tag":{"tagName":"","exists":true}}]}`,
		`{"filters":[{"id":{"re":"("}},{}]}`,
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		req := &managerv1.JobSearchRequest{}
		if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(data, req); err != nil {
			return
		}
		m, err := jobspec.CompileFilters(req.GetFilters())
		if err != nil {
			var ae *apierr.Error
			if !errors.As(err, &ae) || ae.Code != apierr.InvalidArgument || !strings.HasPrefix(ae.Field, "filters") {
				t.Fatalf("refusal %v is not an INVALID_ARGUMENT under filters", err)
			}
			return
		}
		for _, s := range corpus {
			_ = m(s)
		}
		_ = m(jobspec.Searchable{})
	})
}
