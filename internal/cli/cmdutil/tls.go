package cmdutil

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/pflag"

	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// RegisterTLSFlags adds --tls-ca and --tls-ca-hash, which verify an https
// Manager's certificate: against a CA file, or against the CA whose
// fingerprint is given (so that nothing needs copying but one line, as
// 'norsk-ctl slot register' and 'norsk-manager tls ca' print it). The
// worker command uses them for its registration calls too.
func RegisterTLSFlags(f *pflag.FlagSet, g *Globals) {
	f.StringVar(&g.tlsCA, "tls-ca", "", "PEM file of the CA that signed an https Manager's certificate (env "+norsk.EnvTLSCA+")")
	f.StringVar(&g.tlsCAHash, "tls-ca-hash", "", "pin an https Manager's CA by fingerprint, sha256:<hex> (env "+norsk.EnvTLSCAHash+")")
}

// TlsTrust is the CA file and fingerprint in force: the flags, else — for
// an https Manager only — the environment.
func (g *Globals) TlsTrust() (caFile, caHash string) {
	if g.tlsCA != "" || g.tlsCAHash != "" {
		return g.tlsCA, g.tlsCAHash
	}
	if strings.HasPrefix(g.ManagerURL, "https://") {
		return os.Getenv(norsk.EnvTLSCA), os.Getenv(norsk.EnvTLSCAHash)
	}
	return "", ""
}

// tlsHint adds what to do to an untrusted-certificate error.
func tlsHint(err error) error {
	if err != nil && strings.Contains(err.Error(), "certificate signed by unknown authority") {
		return fmt.Errorf("%w\n(trust the Manager's CA with --tls-ca FILE or --tls-ca-hash sha256:…; 'norsk-manager tls ca' on the Manager prints both)", err)
	}
	return err
}
