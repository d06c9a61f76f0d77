package tokens

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/norsk-go/norsk-manager/internal/cli/cmdutil"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// NewTokenCommand is the token group: API bearer tokens (admin only).
func NewTokenCommand(g *cmdutil.Globals) *cobra.Command {
	cmd := cmdutil.NewGroup("token", "Create, list and revoke API tokens (admin)")
	cmd.AddCommand(newTokenCreateCommand(g), newTokenListCommand(g), newTokenRevokeCommand(g))
	return cmd
}

func newTokenCreateCommand(g *cmdutil.Globals) *cobra.Command {
	var (
		role string
		ttl  time.Duration
	)
	c := &cobra.Command{
		Use:   "create NAME --role ROLE [--ttl DURATION]",
		Short: "Create an API token; its secret is printed once",
		Long: `Create an API token with a role:

  admin      everything, including tokens, operator snapshots and audit pruning
  operator   read, and change jobs, nodes, slots and KV
  read-only  read (cluster-slot tokens are blanked)
  worker     register a worker
  publisher  publish discovery and access data, read the fleet, append audit entries, KV

The token is printed once; the Manager keeps only its hash.`,
		Args: cmdutil.ExactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if role == "" {
				return cmdutil.UsageErrorf("--role is required (admin, operator, read-only, worker or publisher)")
			}
			m, err := g.Manager(cmd.Context())
			if err != nil {
				return err
			}
			ctx, cancel := g.Call(cmd.Context())
			defer cancel()
			tok, secret, err := m.CreateToken(ctx, args[0], role, ttl)
			if err != nil {
				return fmt.Errorf("create token %s: %w", args[0], err)
			}
			return g.Printer().Print(cmdutil.Result{
				Data: map[string]any{"token": tok, "secret": secret},
				Table: func(w io.Writer) {
					fmt.Fprintf(w, "Token %s (%s, role %s) — shown only now:\n\n  %s\n", tok.GetId(), tok.GetName(), tok.GetRole(), secret)
					if exp := tok.GetExpiresAt(); exp != nil {
						fmt.Fprintf(w, "\nIt expires at %s.\n", cmdutil.Timestamp(exp))
					}
				},
			})
		},
	}
	c.Flags().StringVar(&role, "role", "", "admin, operator, read-only, worker or publisher")
	c.Flags().DurationVar(&ttl, "ttl", 0, "lifetime (0 = never expires)")
	return c
}

func newTokenListCommand(g *cmdutil.Globals) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List API tokens (no secrets)",
		Args:  cmdutil.ExactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			toks, err := cmdutil.Ask(g, cmd, func(ctx context.Context, m *norsk.Manager) ([]*norsk.ApiToken, error) { return m.ListTokens(ctx) }, "list tokens")
			if err != nil {
				return err
			}
			return g.Printer().Print(cmdutil.Result{Data: toks, Table: func(w io.Writer) { tokenTable(g, w, toks) }})
		},
	}
}

func tokenTable(g *cmdutil.Globals, w io.Writer, toks []*norsk.ApiToken) {
	fmt.Fprintln(w, "ID\tNAME\tROLE\tCREATED\tBY\tEXPIRES\tSTATE")
	for _, t := range toks {
		st := "active"
		switch {
		case t.GetRevoked():
			st = "revoked " + cmdutil.Ago(g.Now(), t.GetRevokedAt())
		case t.GetExpiresAt() != nil && !g.Now().Before(t.GetExpiresAt().AsTime()):
			st = "expired"
		}
		exp := "never"
		if t.GetExpiresAt() != nil {
			exp = cmdutil.Timestamp(t.GetExpiresAt())
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", t.GetId(), t.GetName(), t.GetRole(), cmdutil.Ago(g.Now(), t.GetCreatedAt()), cmdutil.Dash(t.GetCreatedBy()), exp, st)
	}
}

func newTokenRevokeCommand(g *cmdutil.Globals) *cobra.Command {
	return &cobra.Command{
		Use:         "revoke ID",
		Short:       "Revoke an API token at once",
		Args:        cmdutil.ExactArgs("ID"),
		Annotations: cmdutil.TakesIDs("token"),
		RunE: func(cmd *cobra.Command, args []string) error {
			m, err := g.Manager(cmd.Context())
			if err != nil {
				return err
			}
			ctx, cancel := g.Call(cmd.Context())
			defer cancel()
			if err := m.RevokeToken(ctx, args[0]); err != nil {
				return fmt.Errorf("revoke token %s: %w", args[0], err)
			}
			fmt.Fprintf(g.Out, "Token %s revoked.\n", args[0])
			return nil
		},
	}
}
