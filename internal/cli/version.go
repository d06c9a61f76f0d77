package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"runtime"

	"github.com/spf13/cobra"

	"github.com/norsk-go/norsk-manager/internal/cli/cmdutil"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

func newVersionCommand(g *cmdutil.Globals) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the client's version and the Manager's (its hello and version), and how their wire protocols compare",
		Args:  cmdutil.ExactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			m, err := g.Manager(cmd.Context())
			if err != nil {
				return fmt.Errorf("norsk-ctl %s (protocol %s): %w", clientVersion(), norsk.ProtocolVersion, err)
			}
			v := m.Version()
			h := m.Hello()
			skew := m.Skew()
			data := map[string]any{
				"client": map[string]string{"version": clientVersion(), "protocolVersion": norsk.ProtocolVersion, "goVersion": runtime.Version()},
				"manager": map[string]any{
					"url":     m.URL(),
					"hello":   json.RawMessage(cmdutil.ProtoObject(h)),
					"version": json.RawMessage(cmdutil.ProtoObject(v)),
				},
				"skew": map[string]any{"minor": skew.Minor, "summary": skew.String()},
			}
			return g.Printer().Print(cmdutil.Result{Data: data, Table: func(w io.Writer) {
				// One line, as kubectl version --short and nomad version:
				// the client, then the Manager it reached.
				fmt.Fprintf(w, "norsk-ctl %s (protocol %s, %s); Manager %s at %s (node %s, protocol %s): %s\n",
					clientVersion(), norsk.ProtocolVersion, runtime.Version(), cmdutil.Dash(h.GetBuildLabel()),
					m.URL(), cmdutil.Dash(h.GetNodeName()), h.GetProtocolVersion(), skew)
			}})
		},
	}
}
