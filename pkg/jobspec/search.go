package jobspec

import (
	"fmt"
	"regexp"
	"time"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
)

// Searchable is what a search filter looks at of a job.
type Searchable struct {
	ID        string
	Tags      map[string]string
	CreatedAt time.Time
	UpdatedAt time.Time
	// StartAt is the job's start_date_time; zero when unset.
	StartAt time.Time
}

// Matcher reports whether a job matches every filter of a search.
type Matcher func(Searchable) bool

// MaxFilters bounds the filters of one search.
const MaxFilters = 64

// CompileFilters checks a search's filters and compiles them into a Matcher
// that ANDs them. Regular expressions are RE2, matched against the whole
// value.
func CompileFilters(filters []*managerv1.JobFilter) (Matcher, error) {
	if len(filters) > MaxFilters {
		return nil, apierr.Invalid("filters", "has %d filters (at most %d)", len(filters), MaxFilters)
	}
	var preds []Matcher
	for i, f := range filters {
		field := fmt.Sprintf("filters[%d]", i)
		p, err := compileFilter(field, f)
		if err != nil {
			return nil, err
		}
		preds = append(preds, p)
	}
	return func(s Searchable) bool {
		for _, p := range preds {
			if !p(s) {
				return false
			}
		}
		return true
	}, nil
}

func compileRegexp(field, expr string) (*regexp.Regexp, error) {
	re, err := regexp.Compile(`^(?:` + expr + `)$`)
	if err != nil {
		return nil, apierr.Invalid(field, "invalid regular expression %s: %v", apierr.Quote(expr), err)
	}
	return re, nil
}

func compileFilter(field string, f *managerv1.JobFilter) (Matcher, error) {
	switch x := f.GetFilter().(type) {
	case *managerv1.JobFilter_Tag:
		t := x.Tag
		name := t.GetTagName()
		if name == "" {
			return nil, apierr.Invalid(field+".tag.tagName", "must not be empty")
		}
		switch m := t.GetMatch().(type) {
		case *managerv1.TagFilter_Eq:
			return func(s Searchable) bool { v, ok := s.Tags[name]; return ok && v == m.Eq }, nil
		case *managerv1.TagFilter_Neq:
			return func(s Searchable) bool { v, ok := s.Tags[name]; return !ok || v != m.Neq }, nil
		case *managerv1.TagFilter_Re:
			re, err := compileRegexp(field+".tag.re", m.Re)
			if err != nil {
				return nil, err
			}
			return func(s Searchable) bool { v, ok := s.Tags[name]; return ok && re.MatchString(v) }, nil
		case *managerv1.TagFilter_Exists:
			return func(s Searchable) bool { _, ok := s.Tags[name]; return ok == m.Exists }, nil
		default:
			return nil, apierr.Invalid(field+".tag", "needs one of eq, neq, re, exists")
		}
	case *managerv1.JobFilter_Id:
		switch m := x.Id.GetMatch().(type) {
		case *managerv1.IdFilter_Eq:
			return func(s Searchable) bool { return s.ID == m.Eq }, nil
		case *managerv1.IdFilter_Neq:
			return func(s Searchable) bool { return s.ID != m.Neq }, nil
		case *managerv1.IdFilter_Re:
			re, err := compileRegexp(field+".id.re", m.Re)
			if err != nil {
				return nil, err
			}
			return func(s Searchable) bool { return re.MatchString(s.ID) }, nil
		default:
			return nil, apierr.Invalid(field+".id", "needs one of eq, neq, re")
		}
	case *managerv1.JobFilter_Date:
		return compileDate(field+".date", x.Date)
	default:
		return nil, apierr.Invalid(field, "needs one of tag, id, date")
	}
}

func compileDate(field string, d *managerv1.DateFilter) (Matcher, error) {
	var pick func(Searchable) time.Time
	switch d.GetField() {
	case managerv1.DateField_DATE_FIELD_CREATED:
		pick = func(s Searchable) time.Time { return s.CreatedAt }
	case managerv1.DateField_DATE_FIELD_UPDATED:
		pick = func(s Searchable) time.Time { return s.UpdatedAt }
	case managerv1.DateField_DATE_FIELD_START:
		pick = func(s Searchable) time.Time { return s.StartAt }
	default:
		return nil, apierr.Invalid(field+".field", "unknown date field %d (want created, updated or start)", d.GetField())
	}
	ts := func(name string, t interface {
		CheckValid() error
		AsTime() time.Time
	}) (time.Time, error) {
		if err := t.CheckValid(); err != nil {
			return time.Time{}, apierr.Invalid(field+"."+name, "%v", err)
		}
		return t.AsTime(), nil
	}
	// A job without the date (an unset start) matches no comparison.
	has := func(s Searchable) (time.Time, bool) { t := pick(s); return t, !t.IsZero() }
	switch m := d.GetMatch().(type) {
	case *managerv1.DateFilter_Eq:
		at, err := ts("eq", m.Eq)
		if err != nil {
			return nil, err
		}
		return func(s Searchable) bool { t, ok := has(s); return ok && t.Equal(at) }, nil
	case *managerv1.DateFilter_Lt:
		at, err := ts("lt", m.Lt)
		if err != nil {
			return nil, err
		}
		return func(s Searchable) bool { t, ok := has(s); return ok && t.Before(at) }, nil
	case *managerv1.DateFilter_Lte:
		at, err := ts("lte", m.Lte)
		if err != nil {
			return nil, err
		}
		return func(s Searchable) bool { t, ok := has(s); return ok && !t.After(at) }, nil
	case *managerv1.DateFilter_Gt:
		at, err := ts("gt", m.Gt)
		if err != nil {
			return nil, err
		}
		return func(s Searchable) bool { t, ok := has(s); return ok && t.After(at) }, nil
	case *managerv1.DateFilter_Gte:
		at, err := ts("gte", m.Gte)
		if err != nil {
			return nil, err
		}
		return func(s Searchable) bool { t, ok := has(s); return ok && !t.Before(at) }, nil
	case *managerv1.DateFilter_Within:
		w := m.Within
		if w.GetStartDate() == nil || w.GetEndDate() == nil {
			return nil, apierr.Invalid(field+".within", "needs startDate and endDate")
		}
		from, err := ts("within.startDate", w.GetStartDate())
		if err != nil {
			return nil, err
		}
		to, err := ts("within.endDate", w.GetEndDate())
		if err != nil {
			return nil, err
		}
		if to.Before(from) {
			return nil, apierr.Invalid(field+".within", "endDate %s is before startDate %s", to.Format(time.RFC3339), from.Format(time.RFC3339))
		}
		return func(s Searchable) bool { t, ok := has(s); return ok && !t.Before(from) && !t.After(to) }, nil
	default:
		return nil, apierr.Invalid(field, "needs one of eq, lt, lte, gt, gte, within")
	}
}
