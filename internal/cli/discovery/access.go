package discovery

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/norsk-go/norsk-manager/internal/cli/cmdutil"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// NewAccessReplicaCommand is the access-replica group: norsk-mgr's
// role-store replica.
func NewAccessReplicaCommand(g *cmdutil.Globals) *cobra.Command {
	cmd := cmdutil.NewGroup("access-replica", "Publish norsk-mgr's role-store replica")
	cmd.Long = `norsk-mgr's role-store replica, published as signed JWS (compact
serialization, ES256, EdDSA or RS256) that the Manager verifies against the keys
of its --access-replica-keys file before it stores anything, and forwards to
every connected worker, which verifies them again.

A change carries the new snapshot (its payload: the gzip of
{"version": n, "roles": {…}}) and, once a replica is stored, the delta from the
stored version ({"from": m, "to": n, "ops": [{"op": "put"|"delete", "key", "value"}]});
nothing changed carries an attestation of the stored version ({"version": n})
alone. A publication that does not move forward fails with FAILED_PRECONDITION;
one that does not verify with INVALID_ARGUMENT naming the JWS.`
	cmd.AddCommand(newAccessReplicaPublishCommand(g))
	return cmd
}

// accessPublished is what access-replica publish prints in json and yaml.
type accessPublished struct {
	Version uint64 `json:"version"`
	Changed bool   `json:"changed"`
}

func newAccessReplicaPublishCommand(g *cmdutil.Globals) *cobra.Command {
	var snapshot, delta, attestation string
	cmd := &cobra.Command{
		Use:   "publish --snapshot FILE [--delta FILE] | --attestation FILE",
		Short: "Publish a new version (snapshot and delta) or attest the stored one",
		Long: `Publish the role-store replica. Each FILE holds one compact JWS (- reads
stdin; surrounding white space is dropped): --snapshot and, when a replica is
stored, --delta for a change; --attestation alone when nothing changed. Prints
the version in force and whether it changed.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case snapshot == "" && attestation == "":
				return cmdutil.UsageErrorf("give --snapshot FILE (and --delta FILE) for a change, or --attestation FILE")
			case attestation != "" && (snapshot != "" || delta != ""):
				return cmdutil.UsageErrorf("--attestation comes alone (not with --snapshot or --delta)")
			}
			pub := &norsk.AccessReplicaPublication{}
			for _, part := range []struct {
				file, what string
				dst        *string
			}{
				{snapshot, "the snapshot JWS", &pub.SnapshotJws},
				{delta, "the delta JWS", &pub.DeltaJws},
				{attestation, "the attestation JWS", &pub.AttestationJws},
			} {
				if part.file == "" {
					continue
				}
				b, err := g.ReadInput(part.file, part.what)
				if err != nil {
					return err
				}
				if *part.dst = strings.TrimSpace(string(b)); *part.dst == "" {
					return fmt.Errorf("%s: %s is empty", part.what, part.file)
				}
			}
			m, err := g.Manager(cmd.Context())
			if err != nil {
				return err
			}
			ctx, cancel := g.Call(cmd.Context())
			defer cancel()
			version, changed, err := m.PublishAccessReplica(ctx, pub)
			if err != nil {
				return fmt.Errorf("access-replica publish: %w", err)
			}
			return g.Printer().Print(cmdutil.Result{
				Data: accessPublished{Version: version, Changed: changed},
				Table: func(w io.Writer) {
					if changed {
						fmt.Fprintf(w, "access replica version %d published\n", version)
					} else {
						fmt.Fprintf(w, "access replica version %d attested (unchanged)\n", version)
					}
				},
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&snapshot, "snapshot", "", "FILE holding the snapshot JWS")
	f.StringVar(&delta, "delta", "", "FILE holding the delta JWS (required once a replica is stored)")
	f.StringVar(&attestation, "attestation", "", "FILE holding the attestation JWS of the stored version")
	return cmd
}
