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

// Match reports whether ev passes f. initial_data_complete always passes:
// it ends a snapshot and carries the index to resume after.
func (f *Filter) Match(ev *managerv1.Event) bool {
	if f == nil || ev.GetInitialDataComplete() != nil {
		return true
	}
	if f.kinds != nil && !f.kinds[Kind(ev)] {
		return false
	}
	if f.jobs == nil && f.nodes == nil && f.bundles == nil {
		return true
	}
	s := Of(ev)
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
