// Package pki is the small certificate authority of one Norsk Manager
// deployment and the TLS configurations built on it.
//
// The contract:
//
//   - A CA is an ECDSA P-256 key and a self-signed certificate valid for 10
//     years, kept as ca.pem and ca-key.pem (mode 0600) in a directory
//     (InitCA, LoadCA, EnsureCA), or loaded from an operator's own files
//     (LoadCAFiles).
//   - IssueServer makes the Manager API's serving certificate: DNS and IP
//     SANs from the hosts given plus localhost, 127.0.0.1 and ::1.
//   - IssueClient makes the Manager's client identity for dialling
//     workers: CN and URI SAN norsk://manager, client auth only.
//   - SignWorkerCSR signs a worker's PKCS#10 request (its signature is
//     checked) into a serving certificate for that node: URI SAN
//     norsk://node/<nodeID> plus the host it advertises as a DNS or IP SAN.
//     Only the public key of the request is used; its subject and
//     extensions are ignored. SignHostAgentCSR does the same for a Cloud
//     Hypervisor host agent: URI SAN norsk://host/<name>.
//   - The TLS configurations: APIServerConfig (TLS 1.2+, ALPN h2 and
//     http/1.1), ManagerClientConfig (the Manager's client certificate;
//     the worker's chain must verify to the CA and carry the URI SAN of
//     the node dialled; HostAgentClientConfig likewise for a host agent
//     and norsk://host/<name>), WorkerServerConfig (a worker's or a host
//     agent's server: a client certificate is required, must verify to the
//     CA and carry norsk://manager).
//   - Served is a server's identity from the CA, kept on disk: its key,
//     the CSR it registers with, the certificate and CAs the Manager
//     answered, and a listener that serves TLS while it holds one.
//   - Fingerprint ("sha256:<hex>" of a certificate's DER) is how clients
//     pin the CA (pkg/certpin).
//
// Node identity is the URI SAN, not the host name: a worker is whoever the
// CA certified as norsk://node/<id>, wherever it is reached.
package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/norsk-go/norsk-manager/internal/atomicfile"
	"github.com/norsk-go/norsk-manager/pkg/certpin"
)

// File names in a CA directory.
const (
	CACertFile     = "ca.pem"
	CAKeyFile      = "ca-key.pem"
	ServerCertFile = "server.pem"
	ServerKeyFile  = "server-key.pem"
)

// Lifetimes.
const (
	CALifetime         = 10 * 365 * 24 * time.Hour
	DefaultLeafTTL     = 365 * 24 * time.Hour
	DefaultWorkerTTL   = 365 * 24 * time.Hour
	maxCSRBytes        = 16 << 10
	backdate           = 5 * time.Minute
	managerURIString   = "norsk://manager"
	nodeURIPrefix      = "norsk://node/"
	defaultManagerName = "norsk-manager"
)

// ManagerURI is the URI SAN of the Manager's client certificate.
func ManagerURI() *url.URL { return &url.URL{Scheme: "norsk", Host: "manager"} }

// NodeURI is the URI SAN of node nodeID's serving certificate.
func NodeURI(nodeID string) *url.URL {
	return &url.URL{Scheme: "norsk", Host: "node", Path: "/" + nodeID}
}

// HostAgentURI is the URI SAN of host agent name's serving certificate.
func HostAgentURI(name string) *url.URL {
	return &url.URL{Scheme: "norsk", Host: "host", Path: "/" + name}
}

// HostAgentOf returns the host agent a certificate's URI SAN names, if any.
func HostAgentOf(c *x509.Certificate) (string, bool) {
	for _, u := range c.URIs {
		if u.Scheme == "norsk" && u.Host == "host" && len(u.Path) > 1 {
			return strings.TrimPrefix(u.Path, "/"), true
		}
	}
	return "", false
}

// MemberURI is the URI SAN of Manager member name's raft certificate.
func MemberURI(name string) *url.URL {
	return &url.URL{Scheme: "norsk", Host: "member", Path: "/" + name}
}

// MemberOf returns the member a certificate's URI SAN names, if any.
func MemberOf(c *x509.Certificate) (string, bool) {
	for _, u := range c.URIs {
		if u.Scheme == "norsk" && u.Host == "member" && len(u.Path) > 1 {
			return strings.TrimPrefix(u.Path, "/"), true
		}
	}
	return "", false
}

// IssueMember issues Manager member name's certificate for raft between
// members: URI SAN norsk://member/<name>, for both ends of a connection.
func IssueMember(ca *CA, name string, ttl time.Duration) (*Leaf, error) {
	if ttl <= 0 {
		ttl = DefaultLeafTTL
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := leafTemplate(name, ttl)
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	tmpl.URIs = []*url.URL{MemberURI(name)}
	return sign(ca, tmpl, key)
}

// NodeIDOf returns the node id a certificate's URI SAN names, if any.
func NodeIDOf(c *x509.Certificate) (string, bool) {
	for _, u := range c.URIs {
		if u.Scheme == "norsk" && u.Host == "node" && len(u.Path) > 1 {
			return strings.TrimPrefix(u.Path, "/"), true
		}
	}
	return "", false
}

// IsManager reports whether a certificate carries the Manager's URI SAN.
func IsManager(c *x509.Certificate) bool {
	for _, u := range c.URIs {
		if u.Scheme == "norsk" && u.Host == "manager" && (u.Path == "" || u.Path == "/") {
			return true
		}
	}
	return false
}

// Fingerprint is "sha256:<hex>" of a certificate's DER.
func Fingerprint(der []byte) string { return certpin.Fingerprint(der) }

// CA is a certificate authority: its certificate and its signing key.
type CA struct {
	Cert *x509.Certificate
	Key  crypto.Signer
	// CertPEM is the certificate as PEM (what `norsk-manager tls ca`
	// prints and clients trust).
	CertPEM []byte
	// Dir is where the CA was loaded from or made ("" for LoadCAFiles).
	Dir string
}

// Fingerprint is the CA certificate's fingerprint.
func (ca *CA) Fingerprint() string { return Fingerprint(ca.Cert.Raw) }

// Pool is a pool holding the CA certificate.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// ErrCAExists is InitCA's answer when the directory already holds a CA.
var ErrCAExists = errors.New("pki: a CA already exists")

// InitCA makes a new CA in dir (created 0700 if needed): ca.pem and
// ca-key.pem (0600). It refuses (ErrCAExists) to replace an existing one.
func InitCA(dir string) (*CA, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("pki: CA directory: %w", err)
	}
	certPath, keyPath := filepath.Join(dir, CACertFile), filepath.Join(dir, CAKeyFile)
	for _, p := range []string{certPath, keyPath} {
		if _, err := os.Stat(p); err == nil {
			return nil, fmt.Errorf("%w: %s", ErrCAExists, p)
		}
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	host, _ := os.Hostname()
	cn := "Norsk Manager CA"
	if host != "" {
		cn += " (" + host + ")"
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: cn, Organization: []string{"Norsk Manager"}},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(CALifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("pki: make CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	keyPEM, err := KeyPEM(key)
	if err != nil {
		return nil, err
	}
	// The key first: a ca.pem without its key is never left behind.
	if err := writeFile(keyPath, keyPEM, 0o600); err != nil {
		return nil, err
	}
	certPEM := CertPEM(der)
	if err := writeFile(certPath, certPEM, 0o644); err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key, CertPEM: certPEM, Dir: dir}, nil
}

// LoadCA loads the CA in dir; the error wraps fs.ErrNotExist when there is
// none.
func LoadCA(dir string) (*CA, error) {
	ca, err := LoadCAFiles(filepath.Join(dir, CACertFile), filepath.Join(dir, CAKeyFile))
	if err != nil {
		return nil, err
	}
	ca.Dir = dir
	return ca, nil
}

// EnsureCA loads the CA in dir, or makes one when dir holds none; created
// says which.
func EnsureCA(dir string) (ca *CA, created bool, err error) {
	ca, err = LoadCA(dir)
	if err == nil {
		return ca, false, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, false, err
	}
	ca, err = InitCA(dir)
	if err != nil {
		return nil, false, err
	}
	return ca, true, nil
}

// LoadCAFiles loads a CA from an operator's PEM files: the CA certificate
// (the first CERTIFICATE block) and its private key (EC, PKCS#8 or PKCS#1
// RSA). The certificate must be a CA and match the key.
func LoadCAFiles(certFile, keyFile string) (*CA, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return nil, fmt.Errorf("pki: CA certificate: %w", err)
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, fmt.Errorf("pki: CA key: %w", err)
	}
	certs, err := certpin.ParsePEMCertificates(certPEM)
	if err != nil {
		return nil, fmt.Errorf("pki: CA certificate %s: %w", certFile, err)
	}
	cert := certs[0]
	if !cert.IsCA {
		return nil, fmt.Errorf("pki: %s is not a CA certificate", certFile)
	}
	key, err := ParseKeyPEM(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("pki: CA key %s: %w", keyFile, err)
	}
	if !publicKeysEqual(cert.PublicKey, key.Public()) {
		return nil, fmt.Errorf("pki: the key in %s does not belong to the certificate in %s", keyFile, certFile)
	}
	return &CA{Cert: cert, Key: key, CertPEM: CertPEM(cert.Raw)}, nil
}

// Leaf is an issued certificate and its key.
type Leaf struct {
	Cert *x509.Certificate
	Key  crypto.Signer
	// Chain is the DER chain served: the leaf, then the CA.
	Chain [][]byte
}

// TLSCertificate is the leaf as tls.Config wants it (the CA sent after the
// leaf, so that clients can pin it).
func (l *Leaf) TLSCertificate() tls.Certificate {
	return tls.Certificate{Certificate: l.Chain, PrivateKey: l.Key, Leaf: l.Cert}
}

// CertPEM is the chain as PEM.
func (l *Leaf) CertPEM() []byte {
	var out []byte
	for _, der := range l.Chain {
		out = append(out, CertPEM(der)...)
	}
	return out
}

// WriteFiles writes the chain (0644) and the key (0600).
func (l *Leaf) WriteFiles(certPath, keyPath string) error {
	keyPEM, err := KeyPEM(l.Key)
	if err != nil {
		return err
	}
	if err := writeFile(keyPath, keyPEM, 0o600); err != nil {
		return err
	}
	return writeFile(certPath, l.CertPEM(), 0o644)
}

// LoadLeaf reads a certificate chain and its key (as WriteFiles wrote them,
// or an operator's files).
func LoadLeaf(certPath, keyPath string) (*Leaf, error) {
	pair, err := tls.LoadX509KeyPair(certPath, keyPath)
	if err != nil {
		return nil, fmt.Errorf("pki: %w", err)
	}
	signer, ok := pair.PrivateKey.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("pki: the key in %s cannot sign", keyPath)
	}
	return &Leaf{Cert: pair.Leaf, Key: signer, Chain: pair.Certificate}, nil
}

// IssueServer issues the API's serving certificate for hosts (names or IP
// addresses; empty ones are skipped) plus localhost, 127.0.0.1 and ::1.
// ttl <= 0 means DefaultLeafTTL.
func IssueServer(ca *CA, hosts []string, ttl time.Duration) (*Leaf, error) {
	if ttl <= 0 {
		ttl = DefaultLeafTTL
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	all := append(append([]string{}, hosts...), "localhost", "127.0.0.1", "::1")
	dns, ips := splitHosts(all)
	cn := defaultManagerName
	if len(dns) > 0 {
		cn = dns[0]
	}
	tmpl := leafTemplate(cn, ttl)
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	tmpl.DNSNames, tmpl.IPAddresses = dns, ips
	return sign(ca, tmpl, key)
}

// IssueClient issues the Manager's client certificate for dialling
// workers: CN name (default "norsk-manager") and URI SAN norsk://manager.
// ttl <= 0 means DefaultLeafTTL.
func IssueClient(ca *CA, name string, ttl ...time.Duration) (*Leaf, error) {
	d := DefaultLeafTTL
	if len(ttl) > 0 && ttl[0] > 0 {
		d = ttl[0]
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	if name == "" {
		name = defaultManagerName
	}
	tmpl := leafTemplate(name, d)
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	tmpl.URIs = []*url.URL{ManagerURI()}
	return sign(ca, tmpl, key)
}

// SignWorkerCSR signs a worker's certificate request (PKCS#10 DER) for
// node nodeID reached at advertiseHost (a name or an IP; a host:port is
// accepted too). It returns the certificate's DER. ttl <= 0 means
// DefaultWorkerTTL.
func SignWorkerCSR(ca *CA, csrDER []byte, nodeID, advertiseHost string, ttl time.Duration) ([]byte, error) {
	if nodeID == "" {
		return nil, errors.New("pki: no node id")
	}
	return signCSR(ca, csrDER, "norsk-node "+nodeID, NodeURI(nodeID), advertiseHost, ttl)
}

// SignHostAgentCSR signs a Cloud Hypervisor host agent's certificate
// request (PKCS#10 DER) for host name reached at advertiseHost, as
// SignWorkerCSR does a worker's: URI SAN norsk://host/<name>.
func SignHostAgentCSR(ca *CA, csrDER []byte, name, advertiseHost string, ttl time.Duration) ([]byte, error) {
	if name == "" {
		return nil, errors.New("pki: no host name")
	}
	return signCSR(ca, csrDER, "norsk-host "+name, HostAgentURI(name), advertiseHost, ttl)
}

// signCSR signs a serving certificate for the public key of a checked
// certificate request: CN cn, URI SAN id, and advertiseHost as a DNS or IP
// SAN.
func signCSR(ca *CA, csrDER []byte, cn string, id *url.URL, advertiseHost string, ttl time.Duration) ([]byte, error) {
	if len(csrDER) == 0 {
		return nil, errors.New("pki: empty certificate request")
	}
	if len(csrDER) > maxCSRBytes {
		return nil, fmt.Errorf("pki: certificate request of %d bytes (at most %d)", len(csrDER), maxCSRBytes)
	}
	csr, err := x509.ParseCertificateRequest(csrDER)
	if err != nil {
		return nil, fmt.Errorf("pki: certificate request: %w", err)
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, fmt.Errorf("pki: certificate request signature: %w", err)
	}
	switch k := csr.PublicKey.(type) {
	case *ecdsa.PublicKey, ed25519.PublicKey:
	case *rsa.PublicKey:
		if k.N.BitLen() < 2048 {
			return nil, fmt.Errorf("pki: certificate request: RSA key of %d bits (at least 2048)", k.N.BitLen())
		}
	default:
		return nil, fmt.Errorf("pki: certificate request: unsupported key type %T", csr.PublicKey)
	}
	if ttl <= 0 {
		ttl = DefaultWorkerTTL
	}
	if h, _, err := net.SplitHostPort(advertiseHost); err == nil {
		advertiseHost = h
	}
	tmpl := leafTemplate(cn, ttl)
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	tmpl.URIs = []*url.URL{id}
	if advertiseHost != "" {
		tmpl.DNSNames, tmpl.IPAddresses = splitHosts([]string{advertiseHost})
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, csr.PublicKey, ca.Key)
	if err != nil {
		return nil, fmt.Errorf("pki: sign certificate request: %w", err)
	}
	return der, nil
}

// NewKey makes an ECDSA P-256 key (a worker's serving key).
func NewKey() (*ecdsa.PrivateKey, error) { return ecdsa.GenerateKey(elliptic.P256(), rand.Reader) }

// CreateCSR makes a PKCS#10 request (DER) for key, naming cn.
func CreateCSR(key crypto.Signer, cn string) ([]byte, error) {
	return x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: cn}}, key)
}

// CertPEM encodes a DER certificate as PEM.
func CertPEM(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// KeyPEM encodes a private key as PKCS#8 PEM.
func KeyPEM(key crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("pki: encode key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// ParseKeyPEM reads the first private key of a PEM file (PKCS#8, SEC 1 EC
// or PKCS#1 RSA).
func ParseKeyPEM(b []byte) (crypto.Signer, error) {
	rest := b
	for {
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil {
			return nil, errors.New("no PEM private key")
		}
		var k any
		var err error
		switch blk.Type {
		case "PRIVATE KEY":
			k, err = x509.ParsePKCS8PrivateKey(blk.Bytes)
		case "EC PRIVATE KEY":
			k, err = x509.ParseECPrivateKey(blk.Bytes)
		case "RSA PRIVATE KEY":
			k, err = x509.ParsePKCS1PrivateKey(blk.Bytes)
		default:
			continue
		}
		if err != nil {
			return nil, err
		}
		s, ok := k.(crypto.Signer)
		if !ok {
			return nil, fmt.Errorf("key of type %T cannot sign", k)
		}
		return s, nil
	}
}

func leafTemplate(cn string, ttl time.Duration) *x509.Certificate {
	now := time.Now()
	return &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: cn, Organization: []string{"Norsk Manager"}},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(ttl),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
	}
}

func sign(ca *CA, tmpl *x509.Certificate, key crypto.Signer) (*Leaf, error) {
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		return nil, fmt.Errorf("pki: issue certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &Leaf{Cert: cert, Key: key, Chain: [][]byte{der, ca.Cert.Raw}}, nil
}

// splitHosts sorts hosts into DNS names and IP addresses, without
// duplicates; a host:port is reduced to its host, brackets are removed.
func splitHosts(hosts []string) (dns []string, ips []net.IP) {
	seen := map[string]bool{}
	for _, h := range hosts {
		h = strings.TrimSpace(h)
		if hh, _, err := net.SplitHostPort(h); err == nil {
			h = hh
		}
		h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
		if h == "" {
			continue
		}
		if ip := net.ParseIP(h); ip != nil {
			if ip.IsUnspecified() || seen[ip.String()] {
				continue
			}
			seen[ip.String()] = true
			ips = append(ips, ip)
			continue
		}
		h = strings.ToLower(h)
		if seen[h] {
			continue
		}
		seen[h] = true
		dns = append(dns, h)
	}
	return dns, ips
}

// Covers reports whether a certificate is valid for every host (names or
// IPs; empty ones and unspecified IPs are skipped).
func Covers(c *x509.Certificate, hosts []string) bool {
	dns, ips := splitHosts(hosts)
	for _, d := range dns {
		if c.VerifyHostname(d) != nil {
			return false
		}
	}
	for _, ip := range ips {
		if c.VerifyHostname(ip.String()) != nil {
			return false
		}
	}
	return true
}

// Hosts lists a certificate's DNS and IP SANs.
func Hosts(c *x509.Certificate) []string {
	out := append([]string{}, c.DNSNames...)
	for _, ip := range c.IPAddresses {
		out = append(out, ip.String())
	}
	return out
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err)
	}
	return n.Add(n, big.NewInt(1))
}

type equaler interface{ Equal(crypto.PublicKey) bool }

func publicKeysEqual(a, b crypto.PublicKey) bool {
	e, ok := a.(equaler)
	return ok && e.Equal(b)
}

// PublicKeysEqual reports whether two public keys are the same.
func PublicKeysEqual(a, b crypto.PublicKey) bool { return publicKeysEqual(a, b) }

// writeFile writes data atomically with mode, making its directory.
func writeFile(path string, data []byte, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	if err := atomicfile.WriteFile(path, data, mode); err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	return nil
}

// WriteFile writes data atomically with mode (0600 for keys).
func WriteFile(path string, data []byte, mode os.FileMode) error { return writeFile(path, data, mode) }
