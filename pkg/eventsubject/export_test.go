package eventsubject

import managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"

// OfFieldsForTest is Of's fallback for kinds without a case, on any event.
func OfFieldsForTest(ev *managerv1.Event) Subject {
	var s Subject
	fromFields(ev, &s, func(id string) {
		if id != "" {
			s.NodeIDs = append(s.NodeIDs, id)
		}
	})
	return s
}
