package cli

import (
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// eventFilter is events' --kind, --job, --node and --bundle: an event
// passes when it is of one of the kinds (if any are given) and names each
// of the job, node and bundle given, anywhere in it (a job's instances
// name their nodes; a bundle's replica jobs their bundle).
type eventFilter struct {
	kinds             []string
	job, node, bundle string
}

func (f *eventFilter) active() bool {
	return len(f.kinds) > 0 || f.job != "" || f.node != "" || f.bundle != ""
}

// kindKey folds job_created, jobCreated and JobCreated together.
func kindKey(s string) string { return strings.ToLower(strings.ReplaceAll(s, "_", "")) }

func (f *eventFilter) match(ev *norsk.Event) bool {
	if len(f.kinds) > 0 {
		k, ok := kindKey(eventKind(ev)), false
		for _, want := range f.kinds {
			ok = ok || kindKey(want) == k
		}
		if !ok {
			return false
		}
	}
	if f.job == "" && f.node == "" && f.bundle == "" {
		return true
	}
	names := map[string]map[string]bool{"job_id": {}, "node_id": {}, "bundle_id": {}}
	collectIDs(ev.ProtoReflect(), names, 0)
	return (f.job == "" || names["job_id"][f.job]) &&
		(f.node == "" || names["node_id"][f.node]) &&
		(f.bundle == "" || names["bundle_id"][f.bundle])
}

// collectIDs gathers the values of the id fields in names, at any depth
// (bounded: events are shallow).
func collectIDs(m protoreflect.Message, names map[string]map[string]bool, depth int) {
	if depth > 8 {
		return
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.Kind() == protoreflect.StringKind && !fd.IsList() && !fd.IsMap():
			if set, ok := names[string(fd.Name())]; ok {
				set[v.String()] = true
			}
		case fd.Kind() == protoreflect.MessageKind && fd.IsList():
			l := v.List()
			for i := 0; i < l.Len(); i++ {
				collectIDs(l.Get(i).Message(), names, depth+1)
			}
		case fd.Kind() == protoreflect.MessageKind && !fd.IsMap():
			collectIDs(v.Message(), names, depth+1)
		}
		return true
	})
}
