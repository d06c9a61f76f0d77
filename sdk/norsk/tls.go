package norsk

import (
	"crypto/tls"
	"fmt"
	"os"
	"strings"

	"connectrpc.com/connect"

	"github.com/norsk-go/norsk-manager/pkg/certpin"
)

// Environment variables that supply TLS defaults for https:// URLs.
const (
	// EnvTLSCA names a PEM file of CA certificates (Settings.CAFile).
	EnvTLSCA = "NORSK_TLS_CA"
	// EnvTLSCAHash is a CA fingerprint to pin (Settings.CAFingerprint).
	EnvTLSCAHash = "NORSK_TLS_CA_HASH"
)

// tlsConfig is the TLS configuration for base: Settings.TLSConfig (or the
// defaults) with the Manager's certificate verified as CAFile and
// CAFingerprint say. nil keeps the transport's default.
func (s Settings) tlsConfig(base string) (*tls.Config, error) {
	https := strings.HasPrefix(base, "https://")
	if !https {
		if s.CAFile != "" || s.CAFingerprint != "" {
			return nil, &Error{Op: "Connect", Code: connect.CodeInvalidArgument, Message: fmt.Sprintf("a TLS CA (CAFile or CAFingerprint) is set but the Manager URL %s is not https://", base)}
		}
		return nil, nil
	}
	opts := certpin.Options{CAFile: s.CAFile, Fingerprint: s.CAFingerprint}
	if opts.Empty() {
		opts = certpin.Options{CAFile: os.Getenv(EnvTLSCA), Fingerprint: os.Getenv(EnvTLSCAHash)}
	}
	verify, err := certpin.ClientConfig(opts)
	if err != nil {
		return nil, &Error{Op: "Connect", Code: connect.CodeInvalidArgument, Message: err.Error()}
	}
	if verify == nil {
		if s.TLSConfig != nil {
			return s.TLSConfig.Clone(), nil
		}
		return nil, nil
	}
	if s.TLSConfig == nil {
		return verify, nil
	}
	out := s.TLSConfig.Clone()
	out.RootCAs = verify.RootCAs
	out.InsecureSkipVerify = verify.InsecureSkipVerify
	out.VerifyConnection = verify.VerifyConnection
	if out.MinVersion < tls.VersionTLS12 {
		out.MinVersion = tls.VersionTLS12
	}
	return out, nil
}
