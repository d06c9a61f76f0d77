package jobspec_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/pkg/jobspec"
)

func day(d int) time.Time             { return time.Date(2025, 1, d, 12, 0, 0, 0, time.UTC) }
func ts(d int) *timestamppb.Timestamp { return timestamppb.New(day(d)) }

// corpus: what the filters are tried on.
var corpus = []jobspec.Searchable{
	{ID: "alpha", Tags: map[string]string{"team": "live", "tier": "gold"}, CreatedAt: day(1), UpdatedAt: day(5), StartAt: day(20)},
	{ID: "beta", Tags: map[string]string{"team": "vod"}, CreatedAt: day(2), UpdatedAt: day(2)},
	{ID: "gamma-1", Tags: map[string]string{}, CreatedAt: day(3), UpdatedAt: day(10), StartAt: day(15)},
	{ID: "delta", Tags: map[string]string{"team": ""}, CreatedAt: day(4), UpdatedAt: day(4), StartAt: day(4)},
}

func tagEq(name, v string) *managerv1.JobFilter {
	return &managerv1.JobFilter{Filter: &managerv1.JobFilter_Tag{Tag: &managerv1.TagFilter{TagName: name, Match: &managerv1.TagFilter_Eq{Eq: v}}}}
}

func tagNeq(name, v string) *managerv1.JobFilter {
	return &managerv1.JobFilter{Filter: &managerv1.JobFilter_Tag{Tag: &managerv1.TagFilter{TagName: name, Match: &managerv1.TagFilter_Neq{Neq: v}}}}
}

func tagRe(name, re string) *managerv1.JobFilter {
	return &managerv1.JobFilter{Filter: &managerv1.JobFilter_Tag{Tag: &managerv1.TagFilter{TagName: name, Match: &managerv1.TagFilter_Re{Re: re}}}}
}

func tagExists(name string, e bool) *managerv1.JobFilter {
	return &managerv1.JobFilter{Filter: &managerv1.JobFilter_Tag{Tag: &managerv1.TagFilter{TagName: name, Match: &managerv1.TagFilter_Exists{Exists: e}}}}
}

func idEq(v string) *managerv1.JobFilter {
	return &managerv1.JobFilter{Filter: &managerv1.JobFilter_Id{Id: &managerv1.IdFilter{Match: &managerv1.IdFilter_Eq{Eq: v}}}}
}

func idNeq(v string) *managerv1.JobFilter {
	return &managerv1.JobFilter{Filter: &managerv1.JobFilter_Id{Id: &managerv1.IdFilter{Match: &managerv1.IdFilter_Neq{Neq: v}}}}
}

func idRe(re string) *managerv1.JobFilter {
	return &managerv1.JobFilter{Filter: &managerv1.JobFilter_Id{Id: &managerv1.IdFilter{Match: &managerv1.IdFilter_Re{Re: re}}}}
}

func date(field managerv1.DateField, m any) *managerv1.JobFilter {
	d := &managerv1.DateFilter{Field: field}
	switch m := m.(type) {
	case *managerv1.DateFilter_Eq:
		d.Match = m
	case *managerv1.DateFilter_Lt:
		d.Match = m
	case *managerv1.DateFilter_Lte:
		d.Match = m
	case *managerv1.DateFilter_Gt:
		d.Match = m
	case *managerv1.DateFilter_Gte:
		d.Match = m
	case *managerv1.DateFilter_Within:
		d.Match = m
	case nil:
	default:
		panic(fmt.Sprintf("not a date match: %T", m))
	}
	return &managerv1.JobFilter{Filter: &managerv1.JobFilter_Date{Date: d}}
}

const (
	created = managerv1.DateField_DATE_FIELD_CREATED
	updated = managerv1.DateField_DATE_FIELD_UPDATED
	start   = managerv1.DateField_DATE_FIELD_START
)

func within(a, b *timestamppb.Timestamp) *managerv1.DateFilter_Within {
	return &managerv1.DateFilter_Within{Within: &managerv1.DateWithin{StartDate: a, EndDate: b}}
}

func TestCompileFiltersMatches(t *testing.T) {
	tests := []struct {
		name    string
		filters []*managerv1.JobFilter
		want    string
	}{
		{"no filters", nil, "alpha beta gamma-1 delta"},
		{"tag eq", []*managerv1.JobFilter{tagEq("team", "live")}, "alpha"},
		{"tag eq empty value", []*managerv1.JobFilter{tagEq("team", "")}, "delta"},
		{"tag eq missing tag", []*managerv1.JobFilter{tagEq("nope", "")}, ""},
		{"tag neq", []*managerv1.JobFilter{tagNeq("team", "live")}, "beta gamma-1 delta"},
		{"tag re", []*managerv1.JobFilter{tagRe("team", "l.*|v.d")}, "alpha beta"},
		{"tag re is anchored", []*managerv1.JobFilter{tagRe("team", "iv")}, ""},
		{"tag re matching empty", []*managerv1.JobFilter{tagRe("team", ".*")}, "alpha beta delta"},
		{"tag exists", []*managerv1.JobFilter{tagExists("team", true)}, "alpha beta delta"},
		{"tag absent", []*managerv1.JobFilter{tagExists("team", false)}, "gamma-1"},
		{"id eq", []*managerv1.JobFilter{idEq("beta")}, "beta"},
		{"id neq", []*managerv1.JobFilter{idNeq("beta")}, "alpha gamma-1 delta"},
		{"id re", []*managerv1.JobFilter{idRe(`[a-z]+-\d`)}, "gamma-1"},
		{"id re alternation is anchored", []*managerv1.JobFilter{idRe("alp|bet")}, ""},
		{"id re alternation", []*managerv1.JobFilter{idRe("alpha|beta")}, "alpha beta"},
		{"created eq", []*managerv1.JobFilter{date(created, &managerv1.DateFilter_Eq{Eq: ts(2)})}, "beta"},
		{"created lt", []*managerv1.JobFilter{date(created, &managerv1.DateFilter_Lt{Lt: ts(3)})}, "alpha beta"},
		{"created lte", []*managerv1.JobFilter{date(created, &managerv1.DateFilter_Lte{Lte: ts(3)})}, "alpha beta gamma-1"},
		{"created gt", []*managerv1.JobFilter{date(created, &managerv1.DateFilter_Gt{Gt: ts(3)})}, "delta"},
		{"created gte", []*managerv1.JobFilter{date(created, &managerv1.DateFilter_Gte{Gte: ts(3)})}, "gamma-1 delta"},
		{"created within", []*managerv1.JobFilter{date(created, within(ts(2), ts(3)))}, "beta gamma-1"},
		{"within one instant", []*managerv1.JobFilter{date(created, within(ts(4), ts(4)))}, "delta"},
		{"updated gt", []*managerv1.JobFilter{date(updated, &managerv1.DateFilter_Gt{Gt: ts(4)})}, "alpha gamma-1"},
		{"updated within", []*managerv1.JobFilter{date(updated, within(ts(1), ts(4)))}, "beta delta"},
		{"start lt: jobs without a start never match", []*managerv1.JobFilter{date(start, &managerv1.DateFilter_Lt{Lt: ts(31)})}, "alpha gamma-1 delta"},
		{"start gte", []*managerv1.JobFilter{date(start, &managerv1.DateFilter_Gte{Gte: ts(15)})}, "alpha gamma-1"},
		{"start eq", []*managerv1.JobFilter{date(start, &managerv1.DateFilter_Eq{Eq: ts(20)})}, "alpha"},
		{"start within", []*managerv1.JobFilter{date(start, within(ts(1), ts(16)))}, "gamma-1 delta"},
		{"and", []*managerv1.JobFilter{tagExists("team", true), idNeq("alpha"), date(created, &managerv1.DateFilter_Lte{Lte: ts(3)})}, "beta"},
		{"and excluding all", []*managerv1.JobFilter{idEq("alpha"), idEq("beta")}, ""},
		{"and of the same kind", []*managerv1.JobFilter{tagNeq("team", "vod"), tagNeq("team", "")}, "alpha gamma-1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := jobspec.CompileFilters(tt.filters)
			if err != nil {
				t.Fatalf("CompileFilters: %v", err)
			}
			var got []string
			for _, s := range corpus {
				if m(s) {
					got = append(got, s.ID)
				}
			}
			if g := strings.Join(got, " "); g != tt.want {
				t.Errorf("matched %q, want %q", g, tt.want)
			}
		})
	}
}

func TestCompileFiltersRefuses(t *testing.T) {
	ok := idEq("x")
	tests := []struct {
		name    string
		filters []*managerv1.JobFilter
		field   string
		msg     string
	}{
		{"tag re invalid", []*managerv1.JobFilter{ok, tagRe("team", "(")}, "filters[1].tag.re", `"("`},
		{"tag re invalid repeat", []*managerv1.JobFilter{tagRe("team", "a**")}, "filters[0].tag.re", "invalid regular expression"},
		{"tag re backreference", []*managerv1.JobFilter{tagRe("team", `(a)\1`)}, "filters[0].tag.re", ""},
		{"id re invalid", []*managerv1.JobFilter{ok, ok, idRe("[")}, "filters[2].id.re", `"["`},
		{"tag without a name", []*managerv1.JobFilter{tagEq("", "x")}, "filters[0].tag.tagName", "empty"},
		{"tag without a match", []*managerv1.JobFilter{{Filter: &managerv1.JobFilter_Tag{Tag: &managerv1.TagFilter{TagName: "a"}}}}, "filters[0].tag", "eq, neq, re, exists"},
		{"id without a match", []*managerv1.JobFilter{{Filter: &managerv1.JobFilter_Id{Id: &managerv1.IdFilter{}}}}, "filters[0].id", "eq, neq, re"},
		{"empty filter", []*managerv1.JobFilter{ok, {}}, "filters[1]", "tag, id, date"},
		{"nil filter", []*managerv1.JobFilter{nil}, "filters[0]", "tag, id, date"},
		{"date without a match", []*managerv1.JobFilter{date(created, nil)}, "filters[0].date", "eq, lt, lte, gt, gte, within"},
		{"unknown date field", []*managerv1.JobFilter{date(7, &managerv1.DateFilter_Eq{Eq: ts(1)})}, "filters[0].date.field", "unknown date field 7"},
		{"invalid eq", []*managerv1.JobFilter{date(created, &managerv1.DateFilter_Eq{Eq: &timestamppb.Timestamp{Nanos: -1}})}, "filters[0].date.eq", ""},
		{"nil lt", []*managerv1.JobFilter{date(created, &managerv1.DateFilter_Lt{})}, "filters[0].date.lt", ""},
		{"invalid lte", []*managerv1.JobFilter{date(updated, &managerv1.DateFilter_Lte{Lte: &timestamppb.Timestamp{Seconds: 1 << 62}})}, "filters[0].date.lte", ""},
		{"invalid gt", []*managerv1.JobFilter{date(start, &managerv1.DateFilter_Gt{Gt: &timestamppb.Timestamp{Nanos: 1e9}})}, "filters[0].date.gt", ""},
		{"invalid gte", []*managerv1.JobFilter{date(start, &managerv1.DateFilter_Gte{Gte: &timestamppb.Timestamp{Seconds: -1 << 62}})}, "filters[0].date.gte", ""},
		{"within without end", []*managerv1.JobFilter{date(created, within(ts(1), nil))}, "filters[0].date.within", "startDate and endDate"},
		{"within without start", []*managerv1.JobFilter{date(created, within(nil, ts(1)))}, "filters[0].date.within", "startDate and endDate"},
		{"within nil", []*managerv1.JobFilter{date(created, &managerv1.DateFilter_Within{})}, "filters[0].date.within", ""},
		{"within reversed", []*managerv1.JobFilter{date(created, within(ts(2), ts(1)))}, "filters[0].date.within", "before"},
		{"within invalid start", []*managerv1.JobFilter{date(created, within(&timestamppb.Timestamp{Nanos: -5}, ts(1)))}, "filters[0].date.within.startDate", ""},
		{"within invalid end", []*managerv1.JobFilter{date(created, within(ts(1), &timestamppb.Timestamp{Nanos: -5}))}, "filters[0].date.within.endDate", ""},
		{"too many filters", func() []*managerv1.JobFilter {
			f := make([]*managerv1.JobFilter, jobspec.MaxFilters+1)
			for i := range f {
				f[i] = ok
			}
			return f
		}(), "filters", "65"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := jobspec.CompileFilters(tt.filters)
			if m != nil {
				t.Error("a matcher was returned with the error")
			}
			checkInvalid(t, err, tt.field, tt.msg)
		})
	}
	t.Run("at the limit", func(t *testing.T) {
		f := make([]*managerv1.JobFilter, jobspec.MaxFilters)
		for i := range f {
			f[i] = tagExists("team", true)
		}
		if _, err := jobspec.CompileFilters(f); err != nil {
			t.Fatal(err)
		}
	})
}
