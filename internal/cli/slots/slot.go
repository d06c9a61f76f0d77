package slots

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/url"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/norsk-go/norsk-manager/internal/cli/cmdutil"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// NewSlotCommand is the slot group (alias cluster-node): pre-registered
// local servers and their registration tokens.
func NewSlotCommand(g *cmdutil.Globals) *cobra.Command {
	cmd := cmdutil.NewGroup("slot", "Register local servers (cluster slots) and hand out their worker tokens", "cluster-node", "slots")
	cmd.AddCommand(
		newSlotRegisterCommand(g),
		newSlotListCommand(g),
		newSlotDeregisterCommand(g),
		newSlotSetPoolCommand(g),
	)
	return cmd
}

// Registration is what slot register prints in json and yaml.
type Registration struct {
	NodeID        string `json:"nodeId"`
	NodeName      string `json:"nodeName"`
	Pool          string `json:"pool,omitempty"`
	Token         string `json:"token"`
	ManagerURL    string `json:"managerUrl"`
	CAFingerprint string `json:"caFingerprint,omitempty"`
	WorkerCommand string `json:"workerCommand"`
}

// memberURLs are the URLs a worker is given: the Manager called first, then
// the cluster's other full members (none standalone, or when the status
// cannot be read).
func memberURLs(ctx context.Context, m *norsk.Manager) []string {
	urls := []string{m.URL()}
	st, err := m.GetClusterStatus(ctx)
	if err != nil {
		return urls
	}
	for _, mb := range st.GetMembers() {
		if u := mb.GetApiUrl(); u != "" && !mb.GetWitness() && mb.GetName() != st.GetAnsweredBy() && !slices.Contains(urls, u) {
			urls = append(urls, u)
		}
	}
	return urls
}

func newSlotRegisterCommand(g *cmdutil.Globals) *cobra.Command {
	var pool string
	cmd := &cobra.Command{
		Use:   "register NAME [--pool POOL]",
		Short: "Register a local server; prints the one-shot token and the command its worker runs",
		Args:  cmdutil.ExactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			m, err := g.Manager(cmd.Context())
			if err != nil {
				return err
			}
			ctx, cancel := g.Call(cmd.Context())
			defer cancel()
			res, err := m.RegisterClusterNode(ctx, args[0], pool)
			if err != nil {
				return fmt.Errorf("register cluster slot %s: %w", args[0], err)
			}
			r := Registration{
				NodeID: res.GetNodeId(), NodeName: args[0], Pool: pool, Token: res.GetToken(), ManagerURL: m.URL(),
				WorkerCommand: fmt.Sprintf("norsk-ctl worker --token %s --manager-url %s", res.GetToken(), strings.Join(memberURLs(ctx, m), ",")),
			}
			// An https Manager's CA, pinned by fingerprint: the worker needs
			// no file copied to trust it.
			if fp := m.Hello().GetCaFingerprint(); fp != "" && strings.HasPrefix(m.URL(), "https://") {
				r.CAFingerprint = fp
				r.WorkerCommand += " --tls-ca-hash " + fp
			}
			return g.Printer().Print(cmdutil.Result{Data: r, Table: func(w io.Writer) {
				fmt.Fprintf(w, "Registered cluster slot %s as node %s", r.NodeName, r.NodeID)
				if pool != "" {
					fmt.Fprintf(w, " in pool %s", pool)
				}
				fmt.Fprintf(w, ".\nToken (one-shot; \"slot list\" shows it again): %s\n\n", r.Token)
				fmt.Fprintf(w, "Run this on the server:\n\n  %s\n", r.WorkerCommand)
				if isLoopback(r.ManagerURL) {
					fmt.Fprintf(w, "\n(%s is this machine: on another server, use an address of the Manager it can reach.)\n", r.ManagerURL)
				}
			}})
		},
	}
	cmd.Flags().StringVar(&pool, "pool", "", "the pool the server joins (its nodes' \"pool\" tag)")
	return cmd
}

// isLoopback reports whether a Manager URL names this machine only.
func isLoopback(raw string) bool {
	u, err := url.Parse(raw)
	if err != nil {
		return false
	}
	host := u.Hostname()
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func newSlotListCommand(g *cmdutil.Globals) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List cluster slots, active or not, with their registration tokens",
		Args:  cmdutil.ExactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			slots, err := cmdutil.Ask(g, cmd, func(ctx context.Context, m *norsk.Manager) ([]*norsk.ClusterSlot, error) {
				return m.ListClusterNodes(ctx)
			}, "list cluster slots")
			if err != nil {
				return err
			}
			return g.Printer().Print(cmdutil.Result{Data: cmdutil.Messages(slots), Table: func(w io.Writer) {
				fmt.Fprintln(w, "ID\tNAME\tPOOL\tSTATE\tACTIVE\tADDRESS\tTOKEN\tUSED\tREGISTERED")
				for _, s := range slots {
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%v\t%s\t%s\t%v\t%s\n", s.GetNodeId(), s.GetNodeName(), cmdutil.Dash(s.GetPool()),
						cmdutil.EnumWord(s.GetState()), s.GetActive(), cmdutil.Dash(s.GetAddress()), cmdutil.Dash(s.GetToken()), s.GetTokenUsed(), cmdutil.Ago(g.Now(), s.GetRegisteredAt()))
				}
			}})
		},
	}
}

func newSlotDeregisterCommand(g *cmdutil.Globals) *cobra.Command {
	return &cobra.Command{
		Use:               "deregister ID",
		Short:             "Remove a cluster slot: its token stops working, its worker is disconnected and its jobs stopped",
		Args:              cmdutil.ExactArgs("ID"),
		ValidArgsFunction: g.CompleteSlotIDs,
		Annotations:       cmdutil.TakesIDs("slot"),
		RunE: func(cmd *cobra.Command, args []string) error {
			m, err := g.Manager(cmd.Context())
			if err != nil {
				return err
			}
			ctx, cancel := g.Call(cmd.Context())
			defer cancel()
			if err := m.DeregisterClusterNode(ctx, args[0]); err != nil {
				return fmt.Errorf("deregister cluster slot %s: %w", args[0], err)
			}
			return g.PrintDone("slot", args[0], "deregistered")
		},
	}
}

func newSlotSetPoolCommand(g *cmdutil.Globals) *cobra.Command {
	return &cobra.Command{
		Use:   "set-pool ID POOL",
		Short: `Move a cluster slot to another pool ("" = none); an active node briefly reconnects`,
		Long: `Move a cluster slot to POOL ("" for none). An active slot's node cycles
stopping → terminated → online so that placement sees its new pool tag; its
containers survive. Make sure no job is being placed on it meanwhile.`,
		Args:              cmdutil.ExactArgs("ID", "POOL"),
		ValidArgsFunction: g.CompleteSlotIDs,
		Annotations:       cmdutil.TakesIDs("slot"),
		RunE: func(cmd *cobra.Command, args []string) error {
			m, err := g.Manager(cmd.Context())
			if err != nil {
				return err
			}
			ctx, cancel := g.Call(cmd.Context())
			defer cancel()
			if err := m.SetClusterNodePool(ctx, args[0], args[1]); err != nil {
				return fmt.Errorf("set the pool of cluster slot %s: %w", args[0], err)
			}
			what := "moved to pool " + args[1]
			if args[1] == "" {
				what = "removed from its pool"
			}
			return g.PrintDone("slot", args[0], what)
		},
	}
}
