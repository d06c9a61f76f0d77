package nodes

import (
	"fmt"
	"io"
	"time"

	"github.com/norsk-go/norsk-manager/internal/cli/cmdutil"
	"github.com/norsk-go/norsk-manager/pkg/placement"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// nodesWideTable adds to nodesTable the node's pool tier, runtime, worker
// version, architecture, cloud instance type and region, how many images it
// holds, and when the Manager last heard from it.
func nodesWideTable(w io.Writer, now time.Time, nodes []*norsk.Node) {
	fmt.Fprintln(w, "ID\tNAME\tPROVIDER\tPOOL\tSTATE\tSINCE\tADDRESS\tRUNTIME\tVERSION\tARCH\tTYPE\tREGION\tCPUS\tMEMORY\tLOAD\tJOBS\tHELD\tLAST SEEN\tTAGS")
	for _, n := range nodes {
		load := "-"
		if l := n.GetLoad(); l != nil {
			load = fmt.Sprintf("%.0f%%", l.GetCpuPercent())
		}
		cpus := "-"
		if v := n.GetHardware().GetVcpus(); v > 0 {
			cpus = fmt.Sprint(v)
		}
		arch := "-"
		if a := n.GetHardware().GetArchitecture(); a != norsk.ArchitectureUnspecified {
			arch = cmdutil.EnumWord(a)
		}
		region := n.GetCloud().GetRegion()
		if z := n.GetCloud().GetZone(); z != "" {
			region = z
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\n", n.GetNodeId(), cmdutil.Dash(n.GetNodeName()),
			cmdutil.Dash(n.GetProvider()), cmdutil.Dash(n.GetTags()[placement.TagPool]), nodeStateWords(n), cmdutil.Ago(now, n.GetStateSince()), cmdutil.Dash(n.GetAddress()),
			cmdutil.Dash(n.GetRuntime()), cmdutil.Dash(n.GetWorkerVersion()), arch, cmdutil.Dash(n.GetCloud().GetInstanceType()), cmdutil.Dash(region),
			cpus, cmdutil.BytesIEC(n.GetHardware().GetMemoryBytes()), load, len(n.GetInstances()), len(n.GetHeldImages()),
			cmdutil.Ago(now, n.GetLastSeen()), cmdutil.Tags(n.GetTags()))
	}
}
