package events

import (
	"strings"

	"github.com/norsk-go/norsk-manager/internal/cli/cmdutil"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// eventFilter is events' --kind, --job, --node and --bundle, which the
// Manager applies before it sends (EventStreamSettings' filters).
type eventFilter struct {
	kinds             []string
	job, node, bundle string
}

// kindKey folds job_created, jobCreated and JobCreated together.
func kindKey(s string) string { return strings.ToLower(strings.ReplaceAll(s, "_", "")) }

// apply puts the filter in s; a kind that is none is a usage error naming
// the kinds there are.
func (f *eventFilter) apply(s *norsk.EventStreamSettings) error {
	all := norsk.EventKinds()
	for _, k := range f.kinds {
		found := false
		for _, c := range all {
			if kindKey(string(c)) == kindKey(k) {
				s.Kinds, found = append(s.Kinds, c), true
				break
			}
		}
		if !found {
			names := make([]string, len(all))
			for i, c := range all {
				names[i] = string(c)
			}
			return cmdutil.UsageErrorf("--kind %q is no event kind (one of %s)", k, strings.Join(names, ", "))
		}
	}
	if f.job != "" {
		s.JobIDs = []string{f.job}
	}
	if f.node != "" {
		s.NodeIDs = []string{f.node}
	}
	if f.bundle != "" {
		s.BundleIDs = []string{f.bundle}
	}
	return nil
}
