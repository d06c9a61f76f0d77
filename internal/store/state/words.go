package state

import (
	"strings"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
)

// Words for error messages.

func phaseWord(p managerv1.InstancePhase) string {
	return strings.ToLower(strings.TrimPrefix(p.String(), "INSTANCE_PHASE_"))
}

func nodeStateWord(rec *storev1.NodeRecord) string {
	if rec == nil {
		return "unknown"
	}
	if rec.GetDeregistering() {
		return "being deregistered"
	}
	return strings.ToLower(strings.TrimPrefix(rec.GetNode().GetState().String(), "NODE_STATE_"))
}

func terminalWord(ts *managerv1.TerminalState) string {
	switch ts.GetKind() {
	case managerv1.TerminalKind_TERMINAL_KIND_COMPLETED:
		return "completed"
	case managerv1.TerminalKind_TERMINAL_KIND_FAILED:
		return "marked failed (" + ts.GetReason() + ")"
	}
	return "finished"
}

// MigrationPhaseName is a phase as seed 004 names it ("stoppingSource").
func MigrationPhaseName(p managerv1.MigrationPhase) string {
	w := strings.Split(strings.ToLower(strings.TrimPrefix(p.String(), "MIGRATION_PHASE_")), "_")
	for i := 1; i < len(w); i++ {
		if w[i] != "" {
			w[i] = strings.ToUpper(w[i][:1]) + w[i][1:]
		}
	}
	return strings.Join(w, "")
}
