package migrations

import (
	"fmt"
	"io"
	"time"

	"github.com/norsk-go/norsk-manager/internal/cli/cmdutil"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// migrationsWideTable adds to the migration list the source and target
// roles, how long the migration took (or has taken so far), whether it is
// past the point of no return, and who asked for it.
func migrationsWideTable(w io.Writer, now time.Time, all []*norsk.MigrationState) {
	fmt.Fprintln(w, "ID\tJOB\tSTRATEGY\tPHASE\tFROM\tTO\tROLES\tSTARTED\tTOOK\tNO RETURN\tBY\tREASON")
	for _, st := range all {
		took := "-"
		if start := st.GetStartedAt(); start != nil {
			end := now
			if p := st.GetPhase(); p == norsk.PhaseDone || p == norsk.PhaseAborted {
				if h := st.GetPhaseHistory(); len(h) > 0 {
					end = h[len(h)-1].GetAt().AsTime()
				}
			}
			took = cmdutil.FmtDur(end.Sub(start.AsTime()))
		}
		by := st.GetRequestedBy()
		if st.GetRepair() {
			by = "repair"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s→%s\t%s\t%s\t%v\t%s\t%s\n", st.GetMigrationId(), st.GetSourceJobId(), norsk.StrategyName(st.GetStrategy()),
			norsk.PhaseName(st.GetPhase()), cmdutil.Dash(st.GetSourceNodeId()), cmdutil.Dash(st.GetTargetNodeId()), cmdutil.Dash(st.GetSourceRole()), cmdutil.Dash(st.GetTargetRole()),
			cmdutil.Ago(now, st.GetStartedAt()), took, st.GetPastPointOfNoReturn(), cmdutil.Dash(by), cmdutil.Dash(st.GetAbortReason()))
	}
}
