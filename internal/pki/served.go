package pki

import (
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/norsk-go/norsk-manager/internal/atomicfile"
	"github.com/norsk-go/norsk-manager/pkg/certpin"
)

// Served is the TLS identity of a server the Manager dials (a worker's
// NodeController stream, a host agent's HostAgent service): an ECDSA key
// kept in a directory (<name>-key.pem, 0600, made once), the CSR it
// registers with, and the certificate the Manager's CA signed (<name>.pem)
// with the CAs it came with (ca.pem), kept so that a restart serves it
// again. While it holds a certificate, Listener serves TLS with
// WorkerServerConfig (the Manager's client certificate required);
// without one, cleartext. Its methods are safe for concurrent use.
type Served struct {
	dir, certFile, caFile string
	key                   crypto.Signer
	csr                   []byte

	mu   sync.Mutex
	cert *tls.Certificate
	cas  *x509.CertPool
}

// LoadServed loads (or makes) the key name-key.pem in dir (made 0700),
// makes a CSR for it naming cn, and takes the certificate an earlier run
// kept when it still fits the key and verifies to its CAs. warn is told
// why a kept certificate is not used (nil: not told).
func LoadServed(dir, name, cn string, warn func(msg string, err error)) (*Served, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("pki: TLS directory: %w", err)
	}
	s := &Served{dir: dir, certFile: filepath.Join(dir, name+".pem"), caFile: filepath.Join(dir, "ca.pem")}
	keyPath := filepath.Join(dir, name+"-key.pem")
	b, err := os.ReadFile(keyPath)
	switch {
	case err == nil:
		if s.key, err = ParseKeyPEM(b); err != nil {
			return nil, fmt.Errorf("pki: TLS key %s: %w", keyPath, err)
		}
	case errors.Is(err, fs.ErrNotExist):
		k, err := NewKey()
		if err != nil {
			return nil, err
		}
		pemKey, err := KeyPEM(k)
		if err != nil {
			return nil, err
		}
		if err := atomicfile.WriteFile(keyPath, pemKey, 0o600); err != nil {
			return nil, fmt.Errorf("pki: TLS key: %w", err)
		}
		s.key = k
	default:
		return nil, fmt.Errorf("pki: TLS key: %w", err)
	}
	if s.csr, err = CreateCSR(s.key, cn); err != nil {
		return nil, fmt.Errorf("pki: TLS certificate request: %w", err)
	}
	if warn == nil {
		warn = func(string, error) {}
	}
	certPEM, err1 := os.ReadFile(s.certFile)
	caPEM, err2 := os.ReadFile(s.caFile)
	if err1 != nil || err2 != nil {
		return s, nil
	}
	certs, err1 := certpin.ParsePEMCertificates(certPEM)
	cas, err2 := certpin.ParsePEMCertificates(caPEM)
	if err1 != nil || err2 != nil {
		warn("ignoring unreadable TLS certificate files; the next registration replaces them", errors.Join(err1, err2))
		return s, nil
	}
	if err := s.install(certs[0], cas); err != nil {
		warn("ignoring the stored TLS certificate; the next registration replaces it", err)
	}
	return s, nil
}

// CSR is the certificate request (DER) registrations carry.
func (s *Served) CSR() []byte { return s.csr }

// Accept checks a certificate the Manager answered (DER, with its CAs'
// DER) against the key and the CAs, serves it from the next connection on
// and keeps it. check, if not nil, vets the parsed certificate first (its
// identity). On an error the previous certificate stays.
func (s *Served) Accept(certDER []byte, casDER [][]byte, check func(*x509.Certificate) error) (*x509.Certificate, error) {
	cert, err := x509.ParseCertificate(certDER)
	if err != nil {
		return nil, fmt.Errorf("the certificate is unreadable: %w", err)
	}
	if len(casDER) == 0 {
		return nil, errors.New("the certificate came with no CA")
	}
	var cas []*x509.Certificate
	for _, der := range casDER {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return nil, fmt.Errorf("a CA certificate is unreadable: %w", err)
		}
		cas = append(cas, c)
	}
	if check != nil {
		if err := check(cert); err != nil {
			return nil, err
		}
	}
	if err := s.install(cert, cas); err != nil {
		return nil, err
	}
	var caPEM []byte
	for _, c := range cas {
		caPEM = append(caPEM, CertPEM(c.Raw)...)
	}
	if err := atomicfile.WriteFile(s.caFile, caPEM, 0o600); err != nil {
		return cert, fmt.Errorf("pki: keep the cluster CA: %w", err)
	}
	if err := atomicfile.WriteFile(s.certFile, CertPEM(cert.Raw), 0o600); err != nil {
		return cert, fmt.Errorf("pki: keep the TLS certificate: %w", err)
	}
	return cert, nil
}

// install checks a certificate against the key and the CAs and serves it.
func (s *Served) install(cert *x509.Certificate, cas []*x509.Certificate) error {
	if !PublicKeysEqual(cert.PublicKey, s.key.Public()) {
		return errors.New("the certificate is not for this server's key")
	}
	pool := x509.NewCertPool()
	for _, c := range cas {
		pool.AddCert(c)
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		return fmt.Errorf("the certificate does not verify against the CA it came with: %w", err)
	}
	tc := &tls.Certificate{Certificate: [][]byte{cert.Raw}, PrivateKey: s.key, Leaf: cert}
	s.mu.Lock()
	s.cert, s.cas = tc, pool
	s.mu.Unlock()
	return nil
}

// Clear drops the certificate (a Manager that answered without one): the
// next connections are cleartext.
func (s *Served) Clear() {
	s.mu.Lock()
	s.cert, s.cas = nil, nil
	s.mu.Unlock()
	_ = os.Remove(s.certFile)
}

// State is what the TLS server serves now (nil, nil: cleartext).
func (s *Served) State() (*tls.Certificate, *x509.CertPool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cert, s.cas
}

// Expires is when the certificate served now expires (zero: none).
func (s *Served) Expires() time.Time {
	c, _ := s.State()
	if c == nil || c.Leaf == nil {
		return time.Time{}
	}
	return c.Leaf.NotAfter
}

// Serving reports whether connections are served with TLS now.
func (s *Served) Serving() bool {
	c, _ := s.State()
	return c != nil
}

// Listener accepts connections from ln as TLS (WorkerServerConfig: the
// Manager's client certificate required) while s holds a certificate,
// cleartext otherwise; the mode is decided per connection.
func (s *Served) Listener(ln net.Listener) net.Listener {
	return &modeListener{Listener: ln, s: s, cfg: WorkerServerConfig(s.State)}
}

type modeListener struct {
	net.Listener
	s   *Served
	cfg *tls.Config
}

func (l *modeListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if l.s.Serving() {
		return tls.Server(c, l.cfg), nil
	}
	return c, nil
}
