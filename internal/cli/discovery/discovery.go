package discovery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/norsk-go/norsk-manager/internal/cli/cmdutil"
	"github.com/norsk-go/norsk-manager/pkg/discovery"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// Environment variables the discovery commands read secrets from, so that
// they need not be on the command line (where ps shows them).
const (
	EnvTierSecret    = "NORSK_DISCOVERY_TIER_SECRET"
	EnvLeafToken     = "NORSK_DISCOVERY_LEAF_TOKEN"
	envNewTierSecret = "NORSK_DISCOVERY_NEW_TIER_SECRET"
)

// NewDiscoveryCommand is the discovery group: the discovery fleet, its
// tier-secret rotation, and node-token verification.
func NewDiscoveryCommand(g *cmdutil.Globals) *cobra.Command {
	cmd := cmdutil.NewGroup("discovery", "Publish the discovery fleet, rotate its tier secret, verify node tokens")
	cmd.Long = `The deployment's discovery fleet: every replica's host:port, the leaf token and
the tier secret. The Manager sends each node its access — the addresses, the
leaf token and a node token minted for it from the tier secret (HMAC-SHA256,
"nnt1.<nodeID>.<mac>") — and never the tier secret itself.

The first tier secret and leaf token published stay in force; a later publish
changes only the addresses (and says when its secrets were kept).

Rotating the tier secret: "rotate stage" (replicas also accept the new secret),
wait until every replica has taken it; "rotate flip" (the new secret mints
tokens, every running node is sent its new one, the old one is still accepted),
wait until every replica and node has taken it; "rotate finish" (the old secret
is refused).

Secrets are masked in tables unless --show-secrets; -o json and -o yaml print
them in full.`
	cmd.AddCommand(
		newDiscoveryPublishCommand(g),
		newDiscoveryGetCommand(g),
		newDiscoveryRotateCommand(g),
		newDiscoveryVerifyCommand(g),
	)
	return cmd
}

// secretFlag is a secret given as --NAME, --NAME-file or an environment
// variable (in that order of precedence; only one of the flags).
type secretFlag struct {
	name, env, what string
	value, file     string
}

func (s *secretFlag) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&s.value, s.name, "", s.what+" (prefer --"+s.name+"-file or $"+s.env+": arguments are visible to other users)")
	cmd.Flags().StringVar(&s.file, s.name+"-file", "", "read "+s.what+" from FILE (- for stdin; trailing newlines dropped)")
}

// get returns the secret ("" when none was given).
func (s *secretFlag) get(g *cmdutil.Globals) (string, error) {
	switch {
	case s.value != "" && s.file != "":
		return "", cmdutil.UsageErrorf("--%s and --%s-file exclude each other", s.name, s.name)
	case s.value != "":
		return s.value, nil
	case s.file != "":
		b, err := g.ReadInput(s.file, s.what)
		if err != nil {
			return "", err
		}
		v := strings.TrimRight(string(b), "\r\n")
		if v == "" {
			return "", fmt.Errorf("%s: %s is empty", s.what, s.file)
		}
		return v, nil
	}
	return os.Getenv(s.env), nil
}

// maskSecret hides a secret in a table.
func maskSecret(s string, show bool) string {
	switch {
	case s == "":
		return "-"
	case show:
		return s
	}
	return "******** (hidden; --show-secrets shows it)"
}

// fleetTable writes a fleet for people.
func fleetTable(w io.Writer, f *norsk.DiscoveryFleet, show bool) {
	if len(f.GetAddresses()) == 0 {
		fmt.Fprintf(w, "Addresses:\t-\n")
	}
	for i, a := range f.GetAddresses() {
		label := ""
		if i == 0 {
			label = "Addresses:"
		}
		fmt.Fprintf(w, "%s\t%s\n", label, a)
	}
	if f.GetAddress() != "" {
		fmt.Fprintf(w, "Address (1.4):\t%s\n", f.GetAddress())
	}
	fmt.Fprintf(w, "Leaf token:\t%s\n", maskSecret(f.GetLeafToken(), show))
	fmt.Fprintf(w, "Tier secret:\t%s\n", maskSecret(f.GetTierSecret(), show))
	phase := f.GetRotationPhase()
	switch phase {
	case "":
		fmt.Fprintf(w, "Rotation:\tnone\n")
	case norsk.RotationStage:
		fmt.Fprintf(w, "Rotation:\tstaged: replicas also accept the new secret; next: flip, once every replica has it\n")
	case norsk.RotationFlip:
		fmt.Fprintf(w, "Rotation:\tflipped: the new secret mints tokens, the old is still accepted; next: finish, once every replica and node has it\n")
	default:
		fmt.Fprintf(w, "Rotation:\t%s\n", phase)
	}
	if phase != "" || f.GetTierSecretAlt() != "" {
		fmt.Fprintf(w, "Tier secret (alt):\t%s\n", maskSecret(f.GetTierSecretAlt(), show))
	}
}

// publishedFleet is what discovery publish prints in json and yaml.
type publishedFleet struct {
	Fleet       json.RawMessage `json:"fleet"`
	SecretsKept bool            `json:"secretsKept"`
}

func newDiscoveryPublishCommand(g *cmdutil.Globals) *cobra.Command {
	var addresses []string
	var single string
	var show bool
	tier := &secretFlag{name: "tier-secret", env: EnvTierSecret, what: "the tier secret"}
	leaf := &secretFlag{name: "leaf-token", env: EnvLeafToken, what: "the leaf token"}
	cmd := &cobra.Command{
		Use:   "publish --address HOST:PORT… --leaf-token-file F --tier-secret-file F",
		Short: "Publish the discovery fleet: replica addresses, leaf token, tier secret",
		Long: `Publish the discovery fleet. Give every replica with --address (repeat it, or
separate with commas), the leaf token and the tier secret (each as a flag, from
a file with --…-file, or from $` + EnvLeafToken + ` and $` + EnvTierSecret + `).

The first tier secret and leaf token published stay in force: publishing others
keeps them (the output says so) and prints the ones in force, to adopt. Refused
when the tier secret is empty or equals the leaf token, or an address is not
host:port.`,
		Args: cmdutil.ExactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ts, err := tier.get(g)
			if err != nil {
				return err
			}
			lt, err := leaf.get(g)
			if err != nil {
				return err
			}
			if len(addresses) == 0 && single == "" {
				return cmdutil.UsageErrorf("give the replicas with --address HOST:PORT (or --single-address for a protocol 1.4 single server)")
			}
			if ts == "" {
				return cmdutil.UsageErrorf("give the tier secret with --tier-secret-file, $%s or --tier-secret", EnvTierSecret)
			}
			m, err := g.Manager(cmd.Context())
			if err != nil {
				return err
			}
			ctx, cancel := g.Call(cmd.Context())
			defer cancel()
			f, kept, err := m.PublishDiscoveryFleet(ctx, &norsk.DiscoveryFleet{
				Addresses: addresses, Address: single, LeafToken: lt, TierSecret: ts,
			})
			if err != nil {
				return fmt.Errorf("discovery publish: %w", err)
			}
			if kept {
				fmt.Fprintln(g.ErrOut, "Note: a fleet was published before: its tier secret and leaf token stay in force (shown below); adopt them.")
			}
			return g.Printer().Print(cmdutil.Result{Data: publishedFleet{Fleet: cmdutil.ProtoObject(f), SecretsKept: kept}, Table: func(w io.Writer) {
				fmt.Fprintf(w, "Published the discovery fleet.\n")
				fleetTable(w, f, show)
				if kept {
					fmt.Fprintf(w, "Secrets kept:\tyes: the first tier secret and leaf token stay in force\n")
				}
			}})
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&addresses, "address", nil, "a replica's HOST:PORT (repeatable)")
	f.StringVar(&single, "single-address", "", "the single server of protocol 1.4 (HOST:PORT)")
	f.BoolVar(&show, "show-secrets", false, "show the secrets in force in the table")
	tier.add(cmd)
	leaf.add(cmd)
	return cmd
}

func newDiscoveryGetCommand(g *cmdutil.Globals) *cobra.Command {
	var show bool
	cmd := &cobra.Command{
		Use:     "get [--show-secrets]",
		Aliases: []string{"show"},
		Short:   "Show the discovery fleet in force and any rotation under way",
		Long: `Show the discovery fleet in force: the replica addresses, the leaf token, the
tier secret and, during a rotation, the alternate secret and the phase. The
secrets are masked in the table unless --show-secrets; -o json prints them in
full (null when no fleet has been published).`,
		Args: cmdutil.ExactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			f, err := cmdutil.Ask(g, cmd, func(ctx context.Context, m *norsk.Manager) (*norsk.DiscoveryFleet, error) {
				return m.GetDiscoveryFleet(ctx)
			}, "discovery get")
			if err != nil {
				return err
			}
			var data any = f
			if f == nil {
				data = json.RawMessage("null")
			}
			return g.Printer().Print(cmdutil.Result{Data: data, Table: func(w io.Writer) {
				if f == nil {
					fmt.Fprintln(w, "No discovery fleet has been published.")
					return
				}
				fleetTable(w, f, show)
			}})
		},
	}
	cmd.Flags().BoolVar(&show, "show-secrets", false, "show the secrets in the table")
	return cmd
}

func newDiscoveryRotateCommand(g *cmdutil.Globals) *cobra.Command {
	var show bool
	next := &secretFlag{name: "new-tier-secret", env: envNewTierSecret, what: "the new tier secret"}
	cmd := &cobra.Command{
		Use:       "rotate stage|flip|finish [--new-tier-secret-file F]",
		Short:     "Take one step of rotating the tier secret",
		ValidArgs: []string{norsk.RotationStage, norsk.RotationFlip, norsk.RotationFinish},
		Long: `Take one step of rotating the discovery fleet's tier secret, in this order:

  stage   replicas also accept the new secret (given with --new-tier-secret-file,
          $` + envNewTierSecret + ` or --new-tier-secret; none = the Manager makes one)
  flip    the new secret mints node tokens and every running node is sent its new
          token; the old secret is still accepted
  finish  the old secret is refused

Wait for every replica to have taken a step before the next, and before finish
for every node to have its new token: then no valid token is refused at any
moment. A step out of order, or before any fleet is published, fails with
FAILED_PRECONDITION. Prints the fleet in force after the step.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if err := cmdutil.ExactArgs("STEP")(cmd, args); err != nil {
				return err
			}
			switch args[0] {
			case norsk.RotationStage, norsk.RotationFlip, norsk.RotationFinish:
				return nil
			}
			return cmdutil.UsageErrorf("%q is not a rotation step (want stage, flip or finish)", args[0])
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			step := args[0]
			secret := ""
			if step == norsk.RotationStage {
				s, err := next.get(g)
				if err != nil {
					return err
				}
				secret = s
			} else if next.value != "" || next.file != "" {
				return cmdutil.UsageErrorf("only stage takes a new tier secret")
			}
			f, err := cmdutil.Ask(g, cmd, func(ctx context.Context, m *norsk.Manager) (*norsk.DiscoveryFleet, error) {
				return m.RotateDiscoveryTierSecret(ctx, step, secret)
			}, "discovery rotate %s", step)
			if err != nil {
				return err
			}
			return g.Printer().Print(cmdutil.Result{Data: f, Table: func(w io.Writer) {
				fmt.Fprintf(w, "Rotation step %s taken.\n", step)
				fleetTable(w, f, show)
			}})
		},
	}
	cmd.Flags().BoolVar(&show, "show-secrets", false, "show the secrets in force in the table")
	next.add(cmd)
	return cmd
}

// verified is what discovery verify-token prints in json and yaml.
type verified struct {
	Valid  bool   `json:"valid"`
	NodeID string `json:"nodeId"`
}

func newDiscoveryVerifyCommand(g *cmdutil.Globals) *cobra.Command {
	var secrets, secretFiles []string
	var fromManager bool
	cmd := &cobra.Command{
		Use:   "verify-token TOKEN|- [--secret S]… [--secret-file F]… [--from-manager]",
		Short: "Verify a node token against tier secrets, as a discovery replica does",
		Long: `Verify a node token ("nnt1.<nodeID>.<mac>"; - reads it from stdin) the way a
discovery replica does: it is valid when one of the tier secrets minted it.
Give the secrets with --secret or --secret-file (repeatable), and/or
--from-manager to use the secrets in force of the Manager's fleet (the tier
secret and, during a rotation, the alternate one). Prints the node id the
token was minted for; exits 1 when it is refused.`,
		Args: cmdutil.ExactArgs("TOKEN"),
		RunE: func(cmd *cobra.Command, args []string) error {
			token := args[0]
			if token == "-" {
				b, err := g.ReadInput("-", "the node token")
				if err != nil {
					return err
				}
				token = strings.TrimSpace(string(b))
			}
			all := append([]string(nil), secrets...)
			for _, name := range secretFiles {
				b, err := g.ReadInput(name, "a tier secret")
				if err != nil {
					return err
				}
				all = append(all, strings.TrimRight(string(b), "\r\n"))
			}
			if !fromManager && len(all) == 0 {
				return cmdutil.UsageErrorf("give the tier secrets with --secret or --secret-file, or use --from-manager")
			}
			if fromManager {
				f, err := cmdutil.Ask(g, cmd, func(ctx context.Context, m *norsk.Manager) (*norsk.DiscoveryFleet, error) {
					return m.GetDiscoveryFleet(ctx)
				}, "discovery verify-token")
				if err != nil {
					return err
				}
				if f == nil {
					return fmt.Errorf("discovery verify-token: no discovery fleet has been published: %w", norsk.ErrFailedPrecondition)
				}
				all = append(all, discovery.SecretsInForce(f)...)
			}
			id, err := discovery.VerifyNodeToken(token, all...)
			switch {
			case errors.Is(err, discovery.ErrMalformed):
				return errors.New("not a node token (want nnt1.<nodeID>.<mac>)")
			case errors.Is(err, discovery.ErrRefused):
				if id, _, perr := discovery.ParseNodeToken(token); perr == nil {
					return fmt.Errorf("the node token of %q is refused: no tier secret given minted it", id)
				}
				return err
			case err != nil:
				return err
			}
			return g.Printer().Print(cmdutil.Result{Data: verified{Valid: true, NodeID: id}, Table: func(w io.Writer) {
				fmt.Fprintf(w, "Valid: the node token of %s.\n", id)
			}})
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&secrets, "secret", nil, "a tier secret to accept (repeatable; visible to other users: prefer --secret-file)")
	f.StringArrayVar(&secretFiles, "secret-file", nil, "read a tier secret to accept from FILE (repeatable)")
	f.BoolVar(&fromManager, "from-manager", false, "also accept the secrets in force of the Manager's discovery fleet")
	return cmd
}
