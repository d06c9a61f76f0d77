package managercmd

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/norsk-go/norsk-manager/internal/manager"
	"github.com/norsk-go/norsk-manager/internal/pki"
	"github.com/norsk-go/norsk-manager/pkg/certpin"
)

// registerTLSFlags adds the run command's TLS flags.
func registerTLSFlags(f *pflag.FlagSet, cfg *manager.Config) {
	f.StringVar(&cfg.TLS, "tls", "", "TLS of the API and the worker streams: auto (TLS unless --listen is loopback), on or off (default auto)")
	f.StringVar(&cfg.TLSCertFile, "tls-cert", "", "the API's certificate chain (PEM; bring your own; default: issued by the cluster CA)")
	f.StringVar(&cfg.TLSKeyFile, "tls-key", "", "the key of --tls-cert (PEM)")
	f.StringVar(&cfg.TLSCAFile, "tls-ca", "", "the cluster CA's certificate (PEM; bring your own; default: made in --tls-dir)")
	f.StringVar(&cfg.TLSCAKeyFile, "tls-ca-key", "", "the key of --tls-ca: the Manager signs workers' certificates with it")
	f.StringVar(&cfg.TLSDir, "tls-dir", "", "where the automatic CA and API certificate live (default <data-dir>/tls)")
	f.StringSliceVar(&cfg.TLSHosts, "tls-hosts", nil, "extra names and addresses the automatic API certificate covers (comma-separated)")
}

// printTLS tells the operator how the API is served and how to trust it.
func printTLS(w io.Writer, s *manager.Server) {
	if !s.TLSEnabled() {
		fmt.Fprintln(w, "the API and the worker streams are plaintext (TLS off)")
		return
	}
	if fp := s.CAFingerprint(); fp != "" {
		fmt.Fprintf(w, "TLS on; CA fingerprint %s\n  clients: norsk-ctl --manager-url %s --tls-ca-hash %s …\n", fp, s.URL(), fp)
		return
	}
	fmt.Fprintln(w, "TLS on (the API certificate chains to a CA the system's roots or --tls-ca must trust)")
}

func newTLSCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "tls",
		Short: "Make and show the deployment's CA and certificates",
		Long: `A Manager serving TLS (the default off loopback) needs a CA that signs its API
certificate and its workers' certificates. 'norsk-manager run' makes one at its
first start in <data-dir>/tls; 'tls init' makes it beforehand (e.g. to choose
the API certificate's host names), 'tls ca' prints it for clients.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	c.AddCommand(newTLSInitCommand(), newTLSCACommand())
	return c
}

// tlsDirOf is --dir, else <--data-dir>/tls.
func tlsDirOf(dir, dataDir string) (string, error) {
	switch {
	case dir != "":
		return dir, nil
	case dataDir != "":
		return filepath.Join(dataDir, "tls"), nil
	}
	return "", usageError{errors.New("give --dir (or --data-dir: its tls directory)")}
}

func newTLSInitCommand() *cobra.Command {
	var (
		dir, dataDir string
		hosts        []string
	)
	c := &cobra.Command{
		Use:   "init --dir DIR [--hosts h1,h2]",
		Short: "Make the CA (unless DIR has one) and an API certificate for the hosts",
		Long: `Make a CA in DIR (ca.pem, ca-key.pem) unless DIR already holds one, and issue
the API's certificate (server.pem, server-key.pem) for --hosts plus localhost,
127.0.0.1 and ::1. 'norsk-manager run --tls-dir DIR' (or --data-dir whose tls
directory DIR is) serves it and signs workers' certificates with the CA; it
adds the hosts it listens on to the certificate when they are missing.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			d, err := tlsDirOf(dir, dataDir)
			if err != nil {
				return err
			}
			ca, created, err := pki.EnsureCA(d)
			if err != nil {
				return err
			}
			if h, err := os.Hostname(); err == nil && len(hosts) == 0 {
				hosts = []string{h}
			}
			leaf, err := pki.IssueServer(ca, hosts, 0)
			if err != nil {
				return err
			}
			certPath, keyPath := filepath.Join(d, pki.ServerCertFile), filepath.Join(d, pki.ServerKeyFile)
			if err := leaf.WriteFiles(certPath, keyPath); err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if created {
				fmt.Fprintf(out, "Made a CA:             %s (key %s, 0600)\n", filepath.Join(d, pki.CACertFile), filepath.Join(d, pki.CAKeyFile))
			} else {
				fmt.Fprintf(out, "Kept the existing CA:  %s\n", filepath.Join(d, pki.CACertFile))
			}
			fmt.Fprintf(out, "API certificate:       %s (key %s) for %v, until %s\n", certPath, keyPath, pki.Hosts(leaf.Cert), leaf.Cert.NotAfter.Format("2006-01-02"))
			fmt.Fprintf(out, "CA fingerprint:        %s\n\n", ca.Fingerprint())
			fmt.Fprintf(out, "Clients and workers trust it with --tls-ca-hash %s\n(or --tls-ca %s).\n", ca.Fingerprint(), filepath.Join(d, pki.CACertFile))
			return nil
		},
	}
	c.Flags().StringVar(&dir, "dir", "", "the TLS directory (the Manager's --tls-dir)")
	c.Flags().StringVar(&dataDir, "data-dir", "", "the Manager's data directory (DIR is its tls directory)")
	c.Flags().StringSliceVar(&hosts, "hosts", nil, "names and addresses of the API certificate (default: the hostname)")
	return c
}

func newTLSCACommand() *cobra.Command {
	var (
		dir, dataDir string
		onlyFP       bool
	)
	c := &cobra.Command{
		Use:   "ca --dir DIR",
		Short: "Print the CA certificate (PEM, on stdout) and its fingerprint (on stderr)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			d, err := tlsDirOf(dir, dataDir)
			if err != nil {
				return err
			}
			path := filepath.Join(d, pki.CACertFile)
			b, err := os.ReadFile(path)
			if err != nil {
				return fmt.Errorf("CA certificate: %w", err)
			}
			certs, err := certpin.ParsePEMCertificates(b)
			if err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
			fp := pki.Fingerprint(certs[0].Raw)
			if onlyFP {
				fmt.Fprintln(cmd.OutOrStdout(), fp)
				return nil
			}
			_, _ = cmd.OutOrStdout().Write(pki.CertPEM(certs[0].Raw))
			fmt.Fprintf(cmd.ErrOrStderr(), "CA %q, fingerprint %s (until %s)\n", certs[0].Subject.CommonName, fp, certs[0].NotAfter.Format("2006-01-02"))
			return nil
		},
	}
	c.Flags().StringVar(&dir, "dir", "", "the TLS directory (the Manager's --tls-dir)")
	c.Flags().StringVar(&dataDir, "data-dir", "", "the Manager's data directory (DIR is its tls directory)")
	c.Flags().BoolVar(&onlyFP, "fingerprint", false, "print only the fingerprint")
	return c
}
