package norsk

import (
	"context"
	"time"

	"connectrpc.com/connect"
	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// JobSearchSettings select jobs for JobSearch. Every filter must match (AND);
// no filters select every job. Build filters with TagEq, TagNeq, TagRegex,
// TagExists, TagAbsent, IdEq, IdNeq, IdRegex and the Date… functions.
type JobSearchSettings struct {
	Filters []*JobFilter
	// Limit is the most jobs returned, in id order; 0 = no limit.
	Limit uint32
	// AfterJobID pages: only jobs whose id sorts after it.
	AfterJobID string
	// IncludeHistory returns each job's history too.
	IncludeHistory bool
}

// JobSearch returns the jobs the settings select, in id order. Errors:
// ErrInvalidArgument (e.g. a regular expression that does not compile, a
// filter with no match set).
func (m *Manager) JobSearch(ctx context.Context, s JobSearchSettings) ([]*JobWithHistory, error) {
	res, err := m.JobSearchWithIndex(ctx, s)
	if err != nil {
		return nil, err
	}
	return res.GetJobs(), nil
}

// JobSearchWithIndex is JobSearch returning the whole answer, including the
// store index it reflects: an event stream resumed after that index sees
// every later change of the jobs.
func (m *Manager) JobSearchWithIndex(ctx context.Context, s JobSearchSettings) (*JobSearchResponse, error) {
	const op = "JobSearch"
	if err := m.alive(op); err != nil {
		return nil, err
	}
	res, err := m.client.JobSearch(ctx, connect.NewRequest(&managerv1.JobSearchRequest{
		Filters:        s.Filters,
		Limit:          s.Limit,
		AfterJobId:     s.AfterJobID,
		IncludeHistory: s.IncludeHistory,
	}))
	if err != nil {
		return nil, wrapError(op, err)
	}
	return res.Msg, nil
}

func tagFilter(f *TagFilter) *JobFilter { return &JobFilter{Filter: &JobFilter_Tag{Tag: f}} }
func idFilter(f *IdFilter) *JobFilter   { return &JobFilter{Filter: &JobFilter_Id{Id: f}} }
func dateFilter(f *DateFilter) *JobFilter {
	return &JobFilter{Filter: &JobFilter_Date{Date: f}}
}

// TagEq matches jobs whose tag name has exactly value.
func TagEq(name, value string) *JobFilter {
	return tagFilter(&TagFilter{TagName: name, Match: &TagFilter_Eq{Eq: value}})
}

// TagNeq matches jobs whose tag name is absent or has a value other than value.
func TagNeq(name, value string) *JobFilter {
	return tagFilter(&TagFilter{TagName: name, Match: &TagFilter_Neq{Neq: value}})
}

// TagRegex matches jobs whose tag name's whole value matches the RE2 regular
// expression re.
func TagRegex(name, re string) *JobFilter {
	return tagFilter(&TagFilter{TagName: name, Match: &TagFilter_Re{Re: re}})
}

// TagExists matches jobs that have the tag name, whatever its value.
func TagExists(name string) *JobFilter {
	return tagFilter(&TagFilter{TagName: name, Match: &TagFilter_Exists{Exists: true}})
}

// TagAbsent matches jobs that do not have the tag name.
func TagAbsent(name string) *JobFilter {
	return tagFilter(&TagFilter{TagName: name, Match: &TagFilter_Exists{Exists: false}})
}

// IdEq matches the job whose id is id.
func IdEq(id string) *JobFilter { return idFilter(&IdFilter{Match: &IdFilter_Eq{Eq: id}}) }

// IdNeq matches every job but id.
func IdNeq(id string) *JobFilter { return idFilter(&IdFilter{Match: &IdFilter_Neq{Neq: id}}) }

// IdRegex matches jobs whose whole id matches the RE2 regular expression re.
func IdRegex(re string) *JobFilter { return idFilter(&IdFilter{Match: &IdFilter_Re{Re: re}}) }

// DateEq matches jobs whose date field is exactly t.
func DateEq(field DateField, t time.Time) *JobFilter {
	return dateFilter(&DateFilter{Field: field, Match: &DateFilter_Eq{Eq: timestamppb.New(t)}})
}

// DateBefore matches jobs whose date field is strictly before t.
func DateBefore(field DateField, t time.Time) *JobFilter {
	return dateFilter(&DateFilter{Field: field, Match: &DateFilter_Lt{Lt: timestamppb.New(t)}})
}

// DateAtOrBefore matches jobs whose date field is t or before it.
func DateAtOrBefore(field DateField, t time.Time) *JobFilter {
	return dateFilter(&DateFilter{Field: field, Match: &DateFilter_Lte{Lte: timestamppb.New(t)}})
}

// DateAfter matches jobs whose date field is strictly after t.
func DateAfter(field DateField, t time.Time) *JobFilter {
	return dateFilter(&DateFilter{Field: field, Match: &DateFilter_Gt{Gt: timestamppb.New(t)}})
}

// DateAtOrAfter matches jobs whose date field is t or after it.
func DateAtOrAfter(field DateField, t time.Time) *JobFilter {
	return dateFilter(&DateFilter{Field: field, Match: &DateFilter_Gte{Gte: timestamppb.New(t)}})
}

// DateWithinRange matches jobs whose date field is in [start, end], both ends
// included.
func DateWithinRange(field DateField, start, end time.Time) *JobFilter {
	return dateFilter(&DateFilter{Field: field, Match: &DateFilter_Within{Within: &DateWithin{
		StartDate: timestamppb.New(start),
		EndDate:   timestamppb.New(end),
	}}})
}
