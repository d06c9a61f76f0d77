package pki

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
)

// alpn is what every server here offers: HTTP/2 (gRPC needs it) and
// HTTP/1.1 (curl, health probes, the Connect JSON protocol).
var alpn = []string{"h2", "http/1.1"}

// CertGetter returns the certificate to serve (or present) now.
type CertGetter func() (*tls.Certificate, error)

// Static is a CertGetter of one certificate.
func Static(c tls.Certificate) CertGetter { return func() (*tls.Certificate, error) { return &c, nil } }

// APIServerConfig is the Manager API's server configuration: TLS 1.2+, ALPN
// h2 and http/1.1, the certificate from get (so it can be replaced without
// a restart).
func APIServerConfig(get CertGetter) *tls.Config {
	return &tls.Config{
		MinVersion:     tls.VersionTLS12,
		NextProtos:     append([]string{}, alpn...),
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return get() },
	}
}

// ManagerClientConfig is the Manager's configuration for dialling the
// worker of node nodeID: it presents the Manager's client certificate
// (from get) and accepts the worker only when its chain verifies to roots
// and its certificate names norsk://node/<nodeID>. The host name is not
// checked: the node id is the identity.
func ManagerClientConfig(roots *x509.CertPool, get CertGetter, nodeID string) *tls.Config {
	return managerClientConfig(get, func(cs tls.ConnectionState) error {
		return VerifyWorker(cs.PeerCertificates, roots, nodeID)
	})
}

// HostAgentClientConfig is the Manager's configuration for dialling the
// host agent of host name: as ManagerClientConfig, the agent's certificate
// verifying to roots and naming norsk://host/<name>.
func HostAgentClientConfig(roots *x509.CertPool, get CertGetter, name string) *tls.Config {
	return managerClientConfig(get, func(cs tls.ConnectionState) error {
		return VerifyHostAgent(cs.PeerCertificates, roots, name)
	})
}

// VerifyHostAgent checks a host agent's presented chain (leaf first): it
// verifies to roots for server auth and the leaf names host name.
func VerifyHostAgent(presented []*x509.Certificate, roots *x509.CertPool, name string) error {
	leaf, err := verifyChain("the host agent", presented, roots, x509.ExtKeyUsageServerAuth)
	if err != nil {
		return err
	}
	got, ok := HostAgentOf(leaf)
	if !ok {
		return errors.New("the host agent's certificate names no host (no norsk://host/… URI)")
	}
	if got != name {
		return fmt.Errorf("the host agent's certificate is for host %q, not %q", got, name)
	}
	return nil
}

// managerClientConfig presents the Manager's client certificate and checks
// the server with verify (the chain and its identity, not the host name).
func managerClientConfig(get CertGetter, verify func(tls.ConnectionState) error) *tls.Config {
	return &tls.Config{
		MinVersion:           tls.VersionTLS12,
		NextProtos:           []string{"h2"},
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return get() },
		// The standard check would match the host name; VerifyConnection
		// checks the chain and the node id instead.
		InsecureSkipVerify: true,
		VerifyConnection:   verify,
	}
}

// VerifyWorker checks a worker's presented chain (leaf first): it verifies
// to roots for server auth and the leaf names node nodeID.
func VerifyWorker(presented []*x509.Certificate, roots *x509.CertPool, nodeID string) error {
	leaf, err := verifyChain("the worker", presented, roots, x509.ExtKeyUsageServerAuth)
	if err != nil {
		return err
	}
	got, ok := NodeIDOf(leaf)
	if !ok {
		return fmt.Errorf("the worker's certificate names no node (no %s… URI)", nodeURIPrefix)
	}
	if got != nodeID {
		return fmt.Errorf("the worker's certificate is for node %q, not %q", got, nodeID)
	}
	return nil
}

// verifyChain verifies a presented chain (leaf first) to roots for usage
// and returns the leaf; who names the peer in errors.
func verifyChain(who string, presented []*x509.Certificate, roots *x509.CertPool, usage x509.ExtKeyUsage) (*x509.Certificate, error) {
	if len(presented) == 0 {
		return nil, fmt.Errorf("%s presented no certificate", who)
	}
	inter := x509.NewCertPool()
	for _, c := range presented[1:] {
		inter.AddCert(c)
	}
	if _, err := presented[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
		return nil, fmt.Errorf("%s's certificate does not verify against the cluster CA: %w", who, err)
	}
	return presented[0], nil
}

// WorkerState is what a worker's TLS server needs now: its serving
// certificate and the CAs a Manager's client certificate must verify to.
// A nil certificate fails the handshake.
type WorkerState func() (cert *tls.Certificate, cas *x509.CertPool)

// WorkerServerConfig is a worker's NodeController server configuration
// (and a host agent's HostAgent server's):
// TLS 1.2+, ALPN h2 and http/1.1, a client certificate required, verified
// to the CAs of state and carrying norsk://manager. state is read at every
// handshake, so a certificate renewed at re-registration is served at once.
func WorkerServerConfig(state WorkerState) *tls.Config {
	base := &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: append([]string{}, alpn...)}
	base.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		cert, cas := state()
		if cert == nil || cas == nil {
			return nil, errors.New("this worker has no certificate from the Manager yet")
		}
		return &tls.Config{
			MinVersion:   tls.VersionTLS12,
			NextProtos:   append([]string{}, alpn...),
			Certificates: []tls.Certificate{*cert},
			ClientAuth:   tls.RequireAndVerifyClientCert,
			ClientCAs:    cas,
			VerifyConnection: func(cs tls.ConnectionState) error {
				if len(cs.PeerCertificates) == 0 || !IsManager(cs.PeerCertificates[0]) {
					return errors.New("the client certificate is not the Manager's (no " + managerURIString + " URI)")
				}
				return nil
			},
		}, nil
	}
	return base
}

// MemberTLSConfig is the TLS configuration of raft between members: each
// end presents the certificate get returns (so it can be renewed without a
// restart) and accepts only a peer whose certificate chains to ca and names
// a member (addresses are not identities: members are dialled by raft
// address, and verified by URI SAN).
func MemberTLSConfig(ca *CA, get CertGetter) *tls.Config {
	pool := ca.Pool()
	return &tls.Config{
		MinVersion:           tls.VersionTLS13,
		GetCertificate:       func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return get() },
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return get() },
		ClientAuth:           tls.RequireAnyClientCert,
		InsecureSkipVerify:   true, // verified by VerifyConnection: the CA and the member URI
		VerifyConnection: func(cs tls.ConnectionState) error {
			peer, err := verifyChain("the peer", cs.PeerCertificates, pool, x509.ExtKeyUsageAny)
			if err != nil {
				return err
			}
			if _, ok := MemberOf(peer); !ok {
				return fmt.Errorf("the peer's certificate (%s) does not name a Manager member", peer.Subject.CommonName)
			}
			return nil
		},
	}
}
