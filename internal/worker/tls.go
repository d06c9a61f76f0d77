package worker

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/pki"
	"github.com/norsk-go/norsk-manager/pkg/certpin"
)

// The worker's TLS material, in DataDir/tls (pki.Served): node-key.pem
// (the serving key, 0600, made once), node.pem (the certificate the
// Manager signed) and ca.pem (the cluster CA(s) it came with).
const (
	tlsDirName = "tls"
	tlsName    = "node"
	tlsKeyFile = tlsName + "-key.pem"
)

// tlsRecheck bounds how long the renewal loop sleeps before looking again.
const tlsRecheck = time.Hour

// workerTLS is the worker's side of mutual TLS with its Manager. With an
// https Manager URL the worker keeps an ECDSA key, sends a CSR with every
// registration, and serves the NodeController stream with the certificate
// the Manager returns, accepting only the Manager's client certificate. A
// registration answered without a certificate (a Manager with no cluster
// CA) puts the stream back to cleartext HTTP/2. The key, the certificate
// and the listener are pki.Served's (as a host agent's are).
type workerTLS struct {
	enabled bool // the Manager URL is https
	served  *pki.Served
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
	host, _ := os.Hostname()
	s, err := pki.LoadServed(filepath.Join(a.cfg.DataDir, tlsDirName), tlsName, "norsk-worker "+host, func(msg string, err error) {
		a.logger().Warn(msg, "dir", filepath.Join(a.cfg.DataDir, tlsDirName), "err", err)
	})
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	t.served = s
	return nil
}

func isHTTPS(u string) bool { return strings.HasPrefix(u, "https://") }

// csrDER is what registrations carry (nil without TLS).
func (a *Agent) csrDER() []byte {
	if !a.tlsw.enabled {
		return nil
	}
	return a.tlsw.served.CSR()
}

// state is what the TLS server serves now.
func (t *workerTLS) state() (*tls.Certificate, *x509.CertPool) {
	if t.served == nil {
		return nil, nil
	}
	return t.served.State()
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
		t.served.Clear()
		return
	}
	cert, err := t.served.Accept(resp.GetCertificateDer(), resp.GetCaCertificatesDer(), func(c *x509.Certificate) error {
		if id, ok := pki.NodeIDOf(c); !ok || (resp.GetNodeId() != "" && id != resp.GetNodeId()) {
			return fmt.Errorf("the Manager's certificate names another node (%q, not %q)", id, resp.GetNodeId())
		}
		return nil
	})
	switch {
	case cert == nil:
		log.Error("cannot use the Manager's certificate; keeping the previous one", "err", err)
		return
	case err != nil:
		log.Warn("serving the Manager's certificate, but cannot keep it for the next start", "err", err)
	}
	log.Info("serving the NodeController stream with mutual TLS", "certificate_expires", cert.NotAfter, "ca", pki.Fingerprint(resp.GetCaCertificatesDer()[0]))
}

// tlsListener accepts connections for the NodeController server: TLS (the
// Manager's client certificate required) while the worker holds a
// certificate, cleartext otherwise. The mode is decided per connection.
func (a *Agent) tlsListener(ln net.Listener) net.Listener {
	if !a.tlsw.enabled {
		return ln
	}
	return a.tlsw.served.Listener(ln)
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
