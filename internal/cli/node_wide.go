package cli

import (
	"fmt"
	"io"
	"time"

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
			arch = enumWord(a)
		}
		region := n.GetCloud().GetRegion()
		if z := n.GetCloud().GetZone(); z != "" {
			region = z
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\n", n.GetNodeId(), dash(n.GetNodeName()),
			dash(n.GetProvider()), dash(n.GetTags()[placement.TagPool]), nodeStateWords(n), ago(now, n.GetStateSince()), dash(n.GetAddress()),
			dash(n.GetRuntime()), dash(n.GetWorkerVersion()), arch, dash(n.GetCloud().GetInstanceType()), dash(region),
			cpus, bytesIEC(n.GetHardware().GetMemoryBytes()), load, len(n.GetInstances()), len(n.GetHeldImages()),
			ago(now, n.GetLastSeen()), tags(n.GetTags()))
	}
}
