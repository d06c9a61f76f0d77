package manager

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/norsk-go/norsk-manager/internal/pki"
)

// TLS modes (Config.TLS).
const (
	// TLSAuto (the default) serves TLS unless the API listens on a loopback
	// address.
	TLSAuto = "auto"
	// TLSOn always serves TLS.
	TLSOn = "on"
	// TLSOff serves cleartext HTTP/2 (h2c); on a non-loopback address the
	// Manager logs a loud warning at every start.
	TLSOff = "off"
)

// renewBefore is how long before its expiry a certificate the Manager
// issues itself is replaced.
const renewBefore = 30 * 24 * time.Hour

// tlsState is the Manager's TLS: the API's serving configuration and the
// cluster CA that signs workers' certificates and the Manager's client
// certificate. A zero tlsState is TLS off.
type tlsState struct {
	on     bool
	server *tls.Config
	// ca signs worker CSRs; nil: workers' streams stay cleartext.
	ca *pki.CA
	// fingerprint is the CA the API's chain ends in ("" if unknown).
	fingerprint string
	name        string
	// raft carries raft between members (a member certificate issued by
	// the cluster CA at each start; mutual, verified by URI SAN).
	raft *tls.Config

	mu     sync.Mutex
	client *pki.Leaf
	member *pki.Leaf
}

// tlsOn reports whether the API of a listener at addr is served with TLS.
func (c *Config) tlsOn(addr net.Addr, log *slog.Logger) (bool, error) {
	loopback := false
	if tcp, ok := addr.(*net.TCPAddr); ok {
		loopback = tcp.IP.IsLoopback()
	}
	switch c.TLS {
	case "", TLSAuto:
		return !loopback, nil
	case TLSOn:
		return true, nil
	case TLSOff:
		if !loopback {
			log.Warn("TLS IS OFF on a non-loopback address: the API (tokens included) and the worker streams travel in cleartext; use tls: on (or auto), or keep this address on a trusted private network", "listen", addr.String())
		}
		return false, nil
	}
	return false, fmt.Errorf("manager: TLS %q: want auto, on or off", c.TLS)
}

// setupTLS resolves the TLS mode for the listener and, when it is on,
// loads or makes the CA and the API certificate.
func setupTLS(cfg *Config, addr net.Addr, log *slog.Logger) (*tlsState, error) {
	on, err := cfg.tlsOn(addr, log)
	if err != nil {
		return nil, err
	}
	if !on {
		return &tlsState{}, nil
	}
	if (cfg.TLSCertFile == "") != (cfg.TLSKeyFile == "") {
		return nil, errors.New("manager: TLSCertFile and TLSKeyFile go together (the API certificate and its key)")
	}
	if (cfg.TLSCAFile == "") != (cfg.TLSCAKeyFile == "") {
		return nil, errors.New("manager: TLSCAFile and TLSCAKeyFile go together: the Manager signs workers' certificates with the CA's key")
	}
	if u, err := url.Parse(cfg.AdvertiseURL); err == nil && u.Scheme == "http" {
		log.Warn("TLS is on but the advertised URL is http://: workers and clients told it will fail; advertise https://", "advertise_url", cfg.AdvertiseURL)
	}
	dir := cfg.TLSDir
	if dir == "" {
		dir = filepath.Join(cfg.DataDir, "tls")
	}
	t := &tlsState{on: true, name: cfg.NodeName}

	// The cluster CA.
	if cfg.TLSCAFile != "" {
		if t.ca, err = pki.LoadCAFiles(cfg.TLSCAFile, cfg.TLSCAKeyFile); err != nil {
			return nil, fmt.Errorf("manager: %w", err)
		}
		log.Info("TLS: cluster CA loaded", "ca", cfg.TLSCAFile, "fingerprint", t.ca.Fingerprint())
	} else {
		ca, created, err := pki.EnsureCA(dir)
		if err != nil {
			return nil, fmt.Errorf("manager: TLS CA: %w", err)
		}
		t.ca = ca
		if created {
			log.Warn("TLS: made a new cluster CA; give workers and clients its fingerprint (--tls-ca-hash) or ca.pem (--tls-ca)", "ca", filepath.Join(dir, pki.CACertFile), "fingerprint", ca.Fingerprint())
		} else {
			log.Info("TLS: cluster CA", "ca", filepath.Join(dir, pki.CACertFile), "fingerprint", ca.Fingerprint())
		}
	}

	// The API's certificate.
	var get pki.CertGetter
	if cfg.TLSCertFile != "" {
		fc := pki.NewFileCert(cfg.TLSCertFile, cfg.TLSKeyFile, log)
		leaf, err := fc.Load()
		if err != nil {
			return nil, fmt.Errorf("manager: TLS certificate: %w", err)
		}
		get = fc.Get
		t.fingerprint = apiChainRoot(leaf, t.ca)
		log.Info("TLS: API certificate from files", "cert", cfg.TLSCertFile, "subject", leaf.Leaf.Subject.CommonName, "expires", leaf.Leaf.NotAfter, "ca_fingerprint", t.fingerprint)
	} else {
		leaf, err := ensureServerCert(t.ca, dir, tlsHosts(cfg, addr), log)
		if err != nil {
			return nil, err
		}
		get = pki.Static(leaf.TLSCertificate())
		t.fingerprint = t.ca.Fingerprint()
	}
	t.server = pki.APIServerConfig(get)
	if _, err := t.clientCert(); err != nil {
		return nil, err
	}
	if _, err := t.memberCert(); err != nil {
		return nil, err
	}
	t.raft = pki.MemberTLSConfig(t.ca, t.memberCert)
	return t, nil
}

// tlsHosts are the names and addresses the API certificate must cover: the
// listen address (every interface's when it is unspecified), the
// advertised URL's host, the hostname and TLSHosts.
func tlsHosts(cfg *Config, addr net.Addr) []string {
	var hosts []string
	hosts = append(hosts, cfg.TLSHosts...)
	if u, err := url.Parse(cfg.AdvertiseURL); err == nil && u.Hostname() != "" {
		hosts = append(hosts, u.Hostname())
	}
	if h, err := os.Hostname(); err == nil && h != "" {
		hosts = append(hosts, h)
	}
	if tcp, ok := addr.(*net.TCPAddr); ok {
		if tcp.IP.IsUnspecified() {
			if addrs, err := net.InterfaceAddrs(); err == nil {
				for _, a := range addrs {
					if n, ok := a.(*net.IPNet); ok && !n.IP.IsLinkLocalUnicast() {
						hosts = append(hosts, n.IP.String())
					}
				}
			}
		} else {
			hosts = append(hosts, tcp.IP.String())
		}
	}
	return hosts
}

// ensureServerCert returns the API certificate in dir (server.pem and
// server-key.pem, as `norsk-manager tls init` or an earlier start made
// them), issuing a new one when there is none, it is not the CA's, it
// expires within renewBefore, or it does not cover every host (the new one
// covers the old one's hosts too).
func ensureServerCert(ca *pki.CA, dir string, hosts []string, log *slog.Logger) (*pki.Leaf, error) {
	certPath, keyPath := filepath.Join(dir, pki.ServerCertFile), filepath.Join(dir, pki.ServerKeyFile)
	old, err := pki.LoadLeaf(certPath, keyPath)
	if err == nil {
		_, verr := old.Cert.Verify(x509.VerifyOptions{Roots: ca.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
		switch {
		case verr != nil:
			log.Warn("TLS: the API certificate in the TLS directory is not the cluster CA's; issuing a new one", "cert", certPath, "err", verr)
			old = nil
		case time.Until(old.Cert.NotAfter) < renewBefore:
			log.Info("TLS: the API certificate expires soon; issuing a new one", "expires", old.Cert.NotAfter)
		case !pki.Covers(old.Cert, hosts):
			log.Info("TLS: the API certificate does not cover every address; issuing a new one", "has", pki.Hosts(old.Cert), "needs", hosts)
		default:
			// The served chain is always leaf + CA (pinning needs the CA).
			if len(old.Chain) == 1 {
				old.Chain = append(old.Chain, ca.Cert.Raw)
			}
			return old, nil
		}
		if old != nil {
			hosts = append(hosts, pki.Hosts(old.Cert)...)
		}
	}
	leaf, err := pki.IssueServer(ca, hosts, 0)
	if err != nil {
		return nil, fmt.Errorf("manager: TLS certificate: %w", err)
	}
	if err := leaf.WriteFiles(certPath, keyPath); err != nil {
		return nil, fmt.Errorf("manager: TLS certificate: %w", err)
	}
	log.Info("TLS: issued the API certificate", "cert", certPath, "hosts", pki.Hosts(leaf.Cert), "expires", leaf.Cert.NotAfter)
	return leaf, nil
}

// apiChainRoot is the fingerprint of the CA an operator's certificate chain
// ends in, when the Manager knows it: the cluster CA if the chain verifies
// to it, else a self-signed last certificate of the chain; "" otherwise
// (a public CA: clients use their system roots).
func apiChainRoot(c *tls.Certificate, ca *pki.CA) string {
	if c.Leaf == nil {
		return ""
	}
	inter := x509.NewCertPool()
	var certs []*x509.Certificate
	for _, der := range c.Certificate[1:] {
		if x, err := x509.ParseCertificate(der); err == nil {
			inter.AddCert(x)
			certs = append(certs, x)
		}
	}
	if ca != nil {
		if _, err := c.Leaf.Verify(x509.VerifyOptions{Roots: ca.Pool(), Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err == nil {
			return ca.Fingerprint()
		}
	}
	if n := len(certs); n > 0 {
		last := certs[n-1]
		if last.IsCA && last.CheckSignatureFrom(last) == nil {
			return pki.Fingerprint(last.Raw)
		}
	}
	return ""
}

// clientCert is the Manager's client certificate for dialling workers,
// issued at start and again when it nears its expiry.
func (t *tlsState) clientCert() (*tls.Certificate, error) {
	if t.ca == nil {
		return nil, errors.New("no cluster CA")
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.client == nil || time.Until(t.client.Cert.NotAfter) < renewBefore {
		name := "norsk-manager"
		if t.name != "" {
			name += " " + t.name
		}
		l, err := pki.IssueClient(t.ca, name)
		if err != nil {
			return nil, fmt.Errorf("manager: TLS client certificate: %w", err)
		}
		t.client = l
	}
	c := t.client.TLSCertificate()
	return &c, nil
}

// memberCert is this member's raft certificate, issued at start and again
// when it nears its expiry.
func (t *tlsState) memberCert() (*tls.Certificate, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.member == nil || time.Until(t.member.Cert.NotAfter) < renewBefore {
		l, err := pki.IssueMember(t.ca, t.name, 0)
		if err != nil {
			return nil, fmt.Errorf("manager: TLS member certificate: %w", err)
		}
		t.member = l
	}
	c := t.member.TLSCertificate()
	return &c, nil
}

// workerTLS is the client configuration for node nodeID's stream; nil
// without a cluster CA.
func (t *tlsState) workerTLS() func(nodeID string) *tls.Config {
	if t == nil || t.ca == nil {
		return nil
	}
	roots := t.ca.Pool()
	return func(nodeID string) *tls.Config { return pki.ManagerClientConfig(roots, t.clientCert, nodeID) }
}

// hostAgentTLS is the client configuration for a registered host agent's
// https URL (mutual TLS, the agent's certificate naming the host); nil
// without a cluster CA.
func (t *tlsState) hostAgentTLS() func(host string) *tls.Config {
	if t == nil || t.ca == nil {
		return nil
	}
	roots := t.ca.Pool()
	return func(host string) *tls.Config { return pki.HostAgentClientConfig(roots, t.clientCert, host) }
}

// scheme is the API's URL scheme.
func (t *tlsState) scheme() string {
	if t != nil && t.on {
		return "https"
	}
	return "http"
}

// TLSEnabled reports whether the API is served with TLS.
func (s *Server) TLSEnabled() bool { return s.tls != nil && s.tls.on }

// CAFingerprint is the fingerprint of the CA the API's certificate chains
// to ("" without TLS or when unknown).
func (s *Server) CAFingerprint() string {
	if s.tls == nil {
		return ""
	}
	return s.tls.fingerprint
}

// CACertPEM is the cluster CA's certificate (nil without one).
func (s *Server) CACertPEM() []byte {
	if s.tls == nil || s.tls.ca == nil {
		return nil
	}
	return slices.Clone(s.tls.ca.CertPEM)
}

// caCert is the cluster CA's certificate (nil without one).
func (t *tlsState) caCert() *x509.Certificate {
	if t == nil || t.ca == nil {
		return nil
	}
	return t.ca.Cert
}
