// Package certpin verifies a Norsk Manager's TLS certificate the way its
// clients are told to: against a CA file (--tls-ca), or against a CA pinned
// by the SHA-256 fingerprint of its DER (--tls-ca-hash sha256:<hex>), so
// that an operator can trust a Manager's private CA by copying one line
// instead of a file.
//
// It is shared by the SDK (sdk/norsk), the worker and the Manager's own
// tools, and imports nothing of the module. The contract:
//
//   - Fingerprint is "sha256:" followed by the lower-case hex SHA-256 of a
//     certificate's DER. ParseFingerprint accepts that form in either case
//     and with or without colons between the bytes (openssl's form).
//   - A pinned connection succeeds when the server's chain verifies (key
//     usage server auth, validity, the host name of the URL) up to a
//     certificate whose fingerprint is the pin. The pinned certificate must
//     be presented by the server (the Manager sends its CA after its leaf)
//     or be in the CA file; a leaf certificate may be pinned itself.
//   - With both a CA file and a pin, the CA file's certificates are the
//     roots and the chain must still end in the pinned one.
package certpin

import (
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
)

// Prefix starts every fingerprint.
const Prefix = "sha256:"

// Fingerprint is "sha256:<hex>" of a certificate's DER.
func Fingerprint(der []byte) string {
	sum := sha256.Sum256(der)
	return Prefix + hex.EncodeToString(sum[:])
}

// ParseFingerprint reads a fingerprint ("sha256:ab12…", upper or lower case,
// colons between bytes allowed) and returns the 32-byte digest.
func ParseFingerprint(s string) ([]byte, error) {
	t := strings.TrimSpace(s)
	rest, ok := strings.CutPrefix(strings.ToLower(t), Prefix)
	if !ok {
		return nil, fmt.Errorf("CA fingerprint %q: want sha256:<64 hex digits>", s)
	}
	rest = strings.ReplaceAll(rest, ":", "")
	b, err := hex.DecodeString(rest)
	if err != nil || len(b) != sha256.Size {
		return nil, fmt.Errorf("CA fingerprint %q: want sha256:<64 hex digits>", s)
	}
	return b, nil
}

// Normalize returns a fingerprint in its canonical form.
func Normalize(s string) (string, error) {
	b, err := ParseFingerprint(s)
	if err != nil {
		return "", err
	}
	return Prefix + hex.EncodeToString(b), nil
}

// ParsePEMCertificates reads every CERTIFICATE block of pemBytes.
func ParsePEMCertificates(pemBytes []byte) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	rest := pemBytes
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("parse certificate: %w", err)
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, errors.New("no PEM CERTIFICATE block")
	}
	return out, nil
}

// Options say how to verify a Manager's certificate.
type Options struct {
	// CAFile is a PEM file of CA certificates to trust instead of the
	// system's roots.
	CAFile string
	// CAPEM is the same as CAFile's contents (used when CAFile is empty).
	CAPEM []byte
	// Fingerprint pins the CA (or the leaf) the chain must end in.
	Fingerprint string
}

// Empty reports whether o asks for nothing (the system's roots).
func (o Options) Empty() bool {
	return o.CAFile == "" && len(o.CAPEM) == 0 && o.Fingerprint == ""
}

// ClientConfig returns a TLS client configuration (TLS 1.2+) that verifies
// the server as o says; nil, nil when o is empty (the caller keeps its
// default: the system's roots).
func ClientConfig(o Options) (*tls.Config, error) {
	if o.Empty() {
		return nil, nil
	}
	caPEM := o.CAPEM
	if o.CAFile != "" {
		b, err := os.ReadFile(o.CAFile)
		if err != nil {
			return nil, fmt.Errorf("TLS CA file: %w", err)
		}
		caPEM = b
	}
	var cas []*x509.Certificate
	if len(caPEM) > 0 {
		var err error
		if cas, err = ParsePEMCertificates(caPEM); err != nil {
			return nil, fmt.Errorf("TLS CA file %s: %w", o.CAFile, err)
		}
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if o.Fingerprint == "" {
		pool := x509.NewCertPool()
		for _, c := range cas {
			pool.AddCert(c)
		}
		cfg.RootCAs = pool
		return cfg, nil
	}
	pin, err := ParseFingerprint(o.Fingerprint)
	if err != nil {
		return nil, err
	}
	if len(cas) > 0 && !slices.ContainsFunc(cas, func(c *x509.Certificate) bool { return matches(c, pin) }) {
		return nil, fmt.Errorf("no certificate in the TLS CA file %s has the fingerprint %s", o.CAFile, o.Fingerprint)
	}
	// The standard verification cannot use a root it learns from the peer,
	// so it is turned off and VerifyConnection does the whole check.
	cfg.InsecureSkipVerify = true
	cfg.VerifyConnection = func(cs tls.ConnectionState) error {
		return VerifyPinned(cs.PeerCertificates, cs.ServerName, cas, pin)
	}
	return cfg, nil
}

// VerifyPinned verifies a server's presented chain (leaf first) for
// serverName ("" skips the name check) against the pinned digest: the roots
// are the presented certificates with that fingerprint plus extra (a CA
// file); a chain must end in a certificate with the pin.
func VerifyPinned(presented []*x509.Certificate, serverName string, extra []*x509.Certificate, pin []byte) error {
	if len(presented) == 0 {
		return errors.New("the server presented no certificate")
	}
	leaf := presented[0]
	roots := x509.NewCertPool()
	inter := x509.NewCertPool()
	found := false
	for _, c := range append(append([]*x509.Certificate{}, presented...), extra...) {
		if matches(c, pin) {
			roots.AddCert(c)
			found = true
		}
	}
	for _, c := range presented[1:] {
		if !matches(c, pin) {
			inter.AddCert(c)
		}
	}
	if !found {
		return fmt.Errorf("the server's certificate chain does not contain the pinned CA %s (it presented %s)", Prefix+hex.EncodeToString(pin), describe(presented))
	}
	opts := x509.VerifyOptions{
		Roots:         roots,
		Intermediates: inter,
		DNSName:       serverName,
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	chains, err := leaf.Verify(opts)
	if err != nil {
		return fmt.Errorf("the server's certificate does not verify against the pinned CA: %w", err)
	}
	for _, ch := range chains {
		if matches(ch[len(ch)-1], pin) {
			return nil
		}
	}
	return fmt.Errorf("the server's certificate chain does not end in the pinned CA %s", Prefix+hex.EncodeToString(pin))
}

func matches(c *x509.Certificate, pin []byte) bool {
	sum := sha256.Sum256(c.Raw)
	return bytes.Equal(sum[:], pin)
}

func describe(cs []*x509.Certificate) string {
	parts := make([]string, len(cs))
	for i, c := range cs {
		parts[i] = fmt.Sprintf("%q %s", c.Subject.CommonName, Fingerprint(c.Raw))
	}
	return strings.Join(parts, ", ")
}
