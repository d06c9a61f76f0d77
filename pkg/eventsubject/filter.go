package eventsubject

import (
	"fmt"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
)

// Filter is the event filter of an EventStreamRequest (its kinds, job_ids,
// node_ids and bundle_ids). A nil *Filter passes every event.
type Filter struct {
	kinds, jobs, nodes, bundles map[string]bool
}

// FieldError is a bad value of a filter field: Field names it as the
// request spells it ("kinds[1]").
type FieldError struct {
	Field, Message string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Message }

// NewFilter builds req's filter: nil when req has none. An unknown kind or
// an empty value is a *FieldError (INVALID_ARGUMENT to the caller).
func NewFilter(req *managerv1.EventStreamRequest) (*Filter, error) {
	oneof := (&managerv1.Event{}).ProtoReflect().Descriptor().Oneofs().ByName("kind")
	set := func(field string, values []string, known func(string) bool) (map[string]bool, error) {
		if len(values) == 0 {
			return nil, nil
		}
		m := make(map[string]bool, len(values))
		for i, v := range values {
			if v == "" {
				return nil, &FieldError{Field: fmt.Sprintf("%s[%d]", field, i), Message: "must not be empty"}
			}
			if known != nil && !known(v) {
				return nil, &FieldError{Field: fmt.Sprintf("%s[%d]", field, i), Message: fmt.Sprintf("unknown event kind %q", v)}
			}
			m[v] = true
		}
		return m, nil
	}
	var f Filter
	var err error
	if f.kinds, err = set("kinds", req.GetKinds(), func(k string) bool {
		for i := range oneof.Fields().Len() {
			if string(oneof.Fields().Get(i).Name()) == k {
				return true
			}
		}
		return false
	}); err != nil {
		return nil, err
	}
	if f.jobs, err = set("job_ids", req.GetJobIds(), nil); err != nil {
		return nil, err
	}
	if f.nodes, err = set("node_ids", req.GetNodeIds(), nil); err != nil {
		return nil, err
	}
	if f.bundles, err = set("bundle_ids", req.GetBundleIds(), nil); err != nil {
		return nil, err
	}
	if f.kinds == nil && f.jobs == nil && f.nodes == nil && f.bundles == nil {
		return nil, nil
	}
	return &f, nil
}

// Described is an event with what it is about, perhaps worked out once for
// many filters (the Manager's event broker holds its events so).
type Described interface {
	Event() *managerv1.Event
	// Kind is Kind(Event()), Subject is Of(Event()).
	Kind() string
	Subject() Subject
}

// Match reports whether ev passes f. initial_data_complete always passes:
// it ends a snapshot and carries the index to resume after.
func (f *Filter) Match(ev *managerv1.Event) bool {
	return f.MatchDescribed(described{ev})
}

// MatchDescribed is Match of d.Event(), asking d for its kind and subject
// only when f looks at them.
func (f *Filter) MatchDescribed(d Described) bool {
	if f == nil || d.Event().GetInitialDataComplete() != nil {
		return true
	}
	if f.kinds != nil && !f.kinds[d.Kind()] {
		return false
	}
	if f.jobs == nil && f.nodes == nil && f.bundles == nil {
		return true
	}
	s := d.Subject()
	if f.jobs != nil && !f.jobs[s.JobID] {
		return false
	}
	if f.bundles != nil && !f.bundles[s.BundleID] {
		return false
	}
	if f.nodes != nil {
		for _, n := range s.NodeIDs {
			if f.nodes[n] {
				return true
			}
		}
		return false
	}
	return true
}

// described works an event's kind and subject out when asked.
type described struct{ ev *managerv1.Event }

func (d described) Event() *managerv1.Event { return d.ev }
func (d described) Kind() string            { return Kind(d.ev) }
func (d described) Subject() Subject        { return Of(d.ev) }
