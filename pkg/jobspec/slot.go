package jobspec

import (
	"strings"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
)

// SlotOf is the slot an instance key belongs to: a migration target's key
// is its slot and the first eight hex of the migration id
// ("primary@3f9c1e2a" → "primary").
func SlotOf(role string) string {
	if i := strings.IndexByte(role, '@'); i >= 0 {
		return role[:i]
	}
	return role
}

// SlotInstance is a slot's current instance among a job's instances:
// among those whose key is the slot or one of its migration targets, the
// one not stopped with the highest fencing token, else the stopped one
// with the highest (nil: none).
func SlotInstance(instances []*managerv1.Instance, slot string) *managerv1.Instance {
	var live, any *managerv1.Instance
	for _, in := range instances {
		if SlotOf(in.GetRole()) != slot {
			continue
		}
		if any == nil || in.GetFencingToken() > any.GetFencingToken() {
			any = in
		}
		if in.GetPhase() != managerv1.InstancePhase_INSTANCE_PHASE_STOPPED && (live == nil || in.GetFencingToken() > live.GetFencingToken()) {
			live = in
		}
	}
	if live != nil {
		return live
	}
	return any
}
