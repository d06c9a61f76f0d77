package worker

import (
	"context"
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/atomicfile"
	"github.com/norsk-go/norsk-manager/internal/pki"
	"github.com/norsk-go/norsk-manager/pkg/certpin"
)

// The worker's TLS material, in DataDir/tls.
const (
	tlsDirName  = "tls"
	tlsKeyFile  = "node-key.pem" // the serving key (0600), made once
	tlsCertFile = "node.pem"     // the certificate the Manager signed
	tlsCAFile   = "ca.pem"       // the cluster CA(s) it came with
)

// tlsRecheck bounds how long the renewal loop sleeps before looking again.
const tlsRecheck = time.Hour

// workerTLS is the worker's side of mutual TLS with its Manager. With an
// https Manager URL the worker keeps an ECDSA key, sends a CSR with every
// registration, and serves the NodeController stream with the certificate
// the Manager returns, accepting only the Manager's client certificate. A
// registration answered without a certificate (a Manager with no cluster
// CA) puts the stream back to cleartext HTTP/2.
type workerTLS struct {
	enabled bool // the Manager URL is https
	dir     string
	key     crypto.Signer
	csr     []byte

	mu   sync.Mutex
	cert *tls.Certificate // nil: the stream is served in cleartext
	cas  *x509.CertPool
}

// managerTLSConfig is the TLS client configuration for the Manager's API
// from --tls-ca / --tls-ca-hash (nil: the system's roots).
func managerTLSConfig(cfg Config) (*tls.Config, error) {
	c, err := certpin.ClientConfig(certpin.Options{CAFile: cfg.TLSCAFile, Fingerprint: cfg.TLSCAHash})
	if err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	return c, nil
}

// initTLS loads (or makes) the serving key and loads the certificate an
// earlier run received. Without an https Manager URL it does nothing.
func (a *Agent) initTLS() error {
	t := &a.tlsw
	t.enabled = isHTTPS(a.cfg.ManagerURL)
	if !t.enabled {
		return nil
	}
	t.dir = filepath.Join(a.cfg.DataDir, tlsDirName)
	if err := os.MkdirAll(t.dir, 0o700); err != nil {
		return fmt.Errorf("worker: TLS directory: %w", err)
	}
	keyPath := filepath.Join(t.dir, tlsKeyFile)
	b, err := os.ReadFile(keyPath)
	switch {
	case err == nil:
		if t.key, err = pki.ParseKeyPEM(b); err != nil {
			return fmt.Errorf("worker: TLS key %s: %w", keyPath, err)
		}
	case errors.Is(err, fs.ErrNotExist):
		k, err := pki.NewKey()
		if err != nil {
			return err
		}
		pemKey, err := pki.KeyPEM(k)
		if err != nil {
			return err
		}
		if err := atomicfile.WriteFile(keyPath, pemKey, 0o600); err != nil {
			return fmt.Errorf("worker: TLS key: %w", err)
		}
		t.key = k
	default:
		return fmt.Errorf("worker: TLS key: %w", err)
	}
	host, _ := os.Hostname()
	if t.csr, err = pki.CreateCSR(t.key, "norsk-worker "+host); err != nil {
		return fmt.Errorf("worker: TLS certificate request: %w", err)
	}
	// The certificate of an earlier run, if it still fits the key.
	certPEM, err1 := os.ReadFile(filepath.Join(t.dir, tlsCertFile))
	caPEM, err2 := os.ReadFile(filepath.Join(t.dir, tlsCAFile))
	if err1 != nil || err2 != nil {
		return nil
	}
	certs, err1 := certpin.ParsePEMCertificates(certPEM)
	cas, err2 := certpin.ParsePEMCertificates(caPEM)
	if err1 != nil || err2 != nil {
		a.logger().Warn("ignoring unreadable TLS certificate files; the next registration replaces them", "dir", t.dir)
		return nil
	}
	if err := t.install(certs[0], cas); err != nil {
		a.logger().Warn("ignoring the stored TLS certificate; the next registration replaces it", "err", err)
	}
	return nil
}

func isHTTPS(u string) bool { return strings.HasPrefix(u, "https://") }

// csrDER is what registrations carry (nil without TLS).
func (a *Agent) csrDER() []byte {
	if !a.tlsw.enabled {
		return nil
	}
	return a.tlsw.csr
}

// install checks a certificate against the key and the CAs and serves it.
func (t *workerTLS) install(cert *x509.Certificate, cas []*x509.Certificate) error {
	if !pki.PublicKeysEqual(cert.PublicKey, t.key.Public()) {
		return errors.New("the certificate is not for this worker's key")
	}
	pool := x509.NewCertPool()
	for _, c := range cas {
		pool.AddCert(c)
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		return fmt.Errorf("the certificate does not verify against the CA it came with: %w", err)
	}
	tc := &tls.Certificate{Certificate: [][]byte{cert.Raw}, PrivateKey: t.key, Leaf: cert}
	t.mu.Lock()
	t.cert, t.cas = tc, pool
	t.mu.Unlock()
	return nil
}

// state is what the TLS server serves now.
func (t *workerTLS) state() (*tls.Certificate, *x509.CertPool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.cert, t.cas
}

// serving reports whether the stream is served with TLS now.
func (t *workerTLS) serving() bool {
	c, _ := t.state()
	return c != nil
}

// onRegistered takes the TLS material of a registration answer: a new
// certificate is checked, stored and served from the next connection on;
// none means cleartext.
func (a *Agent) onRegistered(resp *managerv1.ClusterMemberRegisterResponse) {
	t := &a.tlsw
	if !t.enabled {
		return
	}
	log := a.logger()
	if len(resp.GetCertificateDer()) == 0 {
		if t.serving() {
			log.Warn("the Manager answered without a certificate: serving the NodeController stream in cleartext from now on")
		}
		t.mu.Lock()
		t.cert, t.cas = nil, nil
		t.mu.Unlock()
		_ = os.Remove(filepath.Join(t.dir, tlsCertFile))
		return
	}
	cert, err := x509.ParseCertificate(resp.GetCertificateDer())
	if err != nil {
		log.Error("the Manager's certificate for this worker is unreadable; keeping the previous one", "err", err)
		return
	}
	var cas []*x509.Certificate
	for _, der := range resp.GetCaCertificatesDer() {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			log.Error("a CA certificate from the Manager is unreadable; keeping the previous certificate", "err", err)
			return
		}
		cas = append(cas, c)
	}
	if id, ok := pki.NodeIDOf(cert); !ok || (resp.GetNodeId() != "" && id != resp.GetNodeId()) {
		log.Error("the Manager's certificate names another node; keeping the previous one", "names", id, "node", resp.GetNodeId())
		return
	}
	if err := t.install(cert, cas); err != nil {
		log.Error("cannot use the Manager's certificate; keeping the previous one", "err", err)
		return
	}
	var caPEM []byte
	for _, c := range cas {
		caPEM = append(caPEM, pki.CertPEM(c.Raw)...)
	}
	if err := atomicfile.WriteFile(filepath.Join(t.dir, tlsCAFile), caPEM, 0o600); err != nil {
		log.Warn("cannot store the cluster CA", "err", err)
	}
	if err := atomicfile.WriteFile(filepath.Join(t.dir, tlsCertFile), pki.CertPEM(cert.Raw), 0o600); err != nil {
		log.Warn("cannot store the TLS certificate", "err", err)
	}
	log.Info("serving the NodeController stream with mutual TLS", "certificate_expires", cert.NotAfter, "ca", pki.Fingerprint(cas[0].Raw))
}

// tlsListener accepts connections for the NodeController server: TLS (the
// Manager's client certificate required) while the worker holds a
// certificate, cleartext otherwise. The mode is decided per connection.
func (a *Agent) tlsListener(ln net.Listener) net.Listener {
	if !a.tlsw.enabled {
		return ln
	}
	return &modeListener{Listener: ln, t: &a.tlsw, cfg: pki.WorkerServerConfig(a.tlsw.state)}
}

type modeListener struct {
	net.Listener
	t   *workerTLS
	cfg *tls.Config
}

func (l *modeListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if l.t.serving() {
		return tls.Server(c, l.cfg), nil
	}
	return c, nil
}

// renewTLS registers again (with a new CSR's certificate in the answer)
// once two thirds of the certificate's lifetime have passed, so that a
// worker whose stream stays up for months never serves an expired one.
func (a *Agent) renewTLS(ctx context.Context) {
	if !a.tlsw.enabled {
		return
	}
	for {
		wait := tlsRecheck
		if c, _ := a.tlsw.state(); c != nil && c.Leaf != nil {
			life := c.Leaf.NotAfter.Sub(c.Leaf.NotBefore)
			due := c.Leaf.NotBefore.Add(life * 2 / 3)
			wait = min(max(due.Sub(a.clock.Now()), 0), tlsRecheck)
			if wait == 0 {
				a.logger().Info("renewing the TLS certificate", "expires", c.Leaf.NotAfter)
				if !a.reregister(ctx, true) || !a.sleep(ctx, time.Minute) {
					return
				}
				continue
			}
		}
		if !a.sleep(ctx, wait) {
			return
		}
	}
}
