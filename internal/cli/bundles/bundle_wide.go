package bundles

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/norsk-go/norsk-manager/internal/cli/cmdutil"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// bundlesWideTable adds to bundlesTable the nodes its replica jobs are
// placed on, its revision, its age, its stop time and its lease.
func bundlesWideTable(w io.Writer, now time.Time, list []*norsk.BundleWithJobs) {
	fmt.Fprintln(w, "BUNDLE\tSTATE\tPOOL\tREPLICAS\tJOBS\tPLACED\tNODES\tREVISION\tAGE\tSTOPS\tLEASE")
	for _, bw := range list {
		b := bw.GetBundle()
		placedN := 0
		var nodes []string
		for _, j := range bw.GetJobs() {
			if placed(j) {
				placedN++
				if !slices.Contains(nodes, j.GetNodeId()) {
					nodes = append(nodes, j.GetNodeId())
				}
			}
		}
		slices.Sort(nodes)
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%d\t%d/%d\t%s\t%d\t%s\t%s\t%s\n", b.GetBundleId(), cmdutil.EnumWord(b.GetState()), cmdutil.Dash(b.GetPool()),
			bundleReplicas(bw), len(b.GetJobs()), placedN, len(bw.GetJobs()), cmdutil.Dash(strings.Join(nodes, ",")), b.GetRevision(),
			cmdutil.Ago(now, b.GetCreatedAt()), cmdutil.Ago(now, b.GetStopAt()), cmdutil.Ago(now, b.GetLeaseExpiresAt()))
	}
}
