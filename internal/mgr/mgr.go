// Package mgr is norsk-mgr: the control-plane companion that runs beside
// each Manager member. It serves the operator console (embedded static
// files, live through server-sent events fed by the Manager's event
// stream), announces its public URL to its member, takes the active role
// with a compare-and-set lease in the Manager's KV store when the active
// norsk-mgr goes stale, and — active only — publishes the discovery fleet
// and the role-store replica; every norsk-mgr serves a discovery replica.
//
// It talks to its member only through the Go SDK (sdk/norsk) and keeps no
// state of its own: users, roles, the sessions' signing keys, the lease and
// each replica's record live in the KV namespace rolestore.Namespace, so
// that any norsk-mgr can take over from any other.
package mgr

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/norsk-go/norsk-manager/internal/mgr/rolestore"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// Defaults.
const (
	DefaultListen          = "127.0.0.1:6795"
	DefaultDiscoveryListen = "127.0.0.1:6796"
	DefaultInterval        = 2 * time.Second
	// AuditSource is the audit log source of norsk-mgr's own entries
	// (sign-ins and console actions): a sub-source of the external ones.
	AuditSource = "external/norsk-mgr"
)

// Config configures a norsk-mgr.
type Config struct {
	// Manager is how to reach this norsk-mgr's Manager member (URL, API
	// token with the admin role, TLS pinning). ClientLabel defaults to
	// "norsk-mgr".
	Manager norsk.Settings
	// Listen is the console's address (DefaultListen); ":0" picks a port.
	Listen string
	// PublicURL is the console's URL as browsers and workers reach it,
	// announced to the member. Default: http(s)://<Listen's address>.
	PublicURL string
	// TLSCertFile and TLSKeyFile, when set, serve the console over HTTPS.
	TLSCertFile, TLSKeyFile string
	// DiscoveryListen is the discovery replica's address
	// (DefaultDiscoveryListen); DiscoveryAddress is the host:port the fleet
	// names for it (default: the listener's address).
	DiscoveryListen, DiscoveryAddress string
	// Interval is how often norsk-mgr announces itself and checks the
	// lease (DefaultInterval): a standby takes over once the active one's
	// announcement is three intervals old.
	Interval time.Duration
	// SigningKeys sign the role-store replica: the last one signs; the
	// Manager's --access-replica-keys JWKS must hold its public half.
	// SigningKeysFile is a JWKS file of private keys read at start (used
	// when SigningKeys is empty). Neither: no replica is published.
	SigningKeys     []*jose.JSONWebKey
	SigningKeysFile string
	// AdminUser and AdminPassword, when both set, create that admin when
	// the role store has no user at all (norsk-manager dev's admin).
	AdminUser, AdminPassword string
	// SignInRate bounds sign-in attempts per client address and per user
	// name: SignInBurst at once, then one per SignInRate (defaults 5, 2 s).
	SignInBurst int
	SignInRate  time.Duration
	Logger      *slog.Logger
}

func (c *Config) defaults() error {
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	if c.DiscoveryListen == "" {
		c.DiscoveryListen = DefaultDiscoveryListen
	}
	if c.Interval <= 0 {
		c.Interval = DefaultInterval
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Manager.ClientLabel == "" {
		c.Manager.ClientLabel = "norsk-mgr"
	}
	if c.SignInBurst <= 0 {
		c.SignInBurst = 5
	}
	if c.SignInRate <= 0 {
		c.SignInRate = 2 * time.Second
	}
	if len(c.SigningKeys) == 0 && c.SigningKeysFile != "" {
		keys, err := LoadSigningKeys(c.SigningKeysFile)
		if err != nil {
			return err
		}
		c.SigningKeys = keys
	}
	return nil
}

// LoadSigningKeys reads a JWKS file of private signing keys.
func LoadSigningKeys(path string) ([]*jose.JSONWebKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("signing keys: %w", err)
	}
	var set jose.JSONWebKeySet
	if err := json.Unmarshal(b, &set); err != nil {
		return nil, fmt.Errorf("signing keys %s: %w", path, err)
	}
	var out []*jose.JSONWebKey
	for i := range set.Keys {
		k := set.Keys[i]
		if k.IsPublic() {
			return nil, fmt.Errorf("signing keys %s: key %q is public (norsk-mgr signs: it needs the private keys)", path, k.KeyID)
		}
		out = append(out, &k)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("signing keys %s: no key", path)
	}
	return out, nil
}

// Server is one running norsk-mgr.
type Server struct {
	cfg    Config
	log    *slog.Logger
	m      *norsk.Manager
	roles  *rolestore.Store
	member string

	consoleLn, discoLn net.Listener
	console, disco     *http.Server
	url                string
	discoAddr          string

	view     *view
	hub      *hub
	sessions *sessions
	limiter  *signInLimiter
	lease    *leaseState
	replica  *replicaState
	pubState *publishState

	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
}

// New connects to the member, binds both listeners, makes sure the
// sessions' signing keys exist (and the dev admin, if asked for) and starts
// everything; Close stops it.
func New(ctx context.Context, cfg Config) (*Server, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	m, err := norsk.Connect(ctx, cfg.Manager)
	if err != nil {
		return nil, fmt.Errorf("norsk-mgr: %w", err)
	}
	s := &Server{cfg: cfg, m: m, roles: rolestore.New(m), member: m.Hello().GetNodeName()}
	if s.member == "" {
		s.member = "member"
	}
	s.log = cfg.Logger.With("component", "norsk-mgr", "member", s.member)
	fail := func(err error) (*Server, error) {
		s.closeListeners()
		_ = m.Close()
		return nil, err
	}
	if s.consoleLn, err = net.Listen("tcp", cfg.Listen); err != nil {
		return fail(fmt.Errorf("norsk-mgr: console listener: %w", err))
	}
	if s.discoLn, err = net.Listen("tcp", cfg.DiscoveryListen); err != nil {
		return fail(fmt.Errorf("norsk-mgr: discovery listener: %w", err))
	}
	scheme := "http"
	if cfg.TLSCertFile != "" {
		scheme = "https"
	}
	s.url = strings.TrimSuffix(cfg.PublicURL, "/")
	if s.url == "" {
		s.url = scheme + "://" + s.consoleLn.Addr().String()
	}
	s.discoAddr = cfg.DiscoveryAddress
	if s.discoAddr == "" {
		s.discoAddr = s.discoLn.Addr().String()
	}
	keys, err := loadSessionKeys(ctx, m)
	if err != nil {
		return fail(fmt.Errorf("norsk-mgr: sessions' signing keys: %w", err))
	}
	if cfg.AdminUser != "" && cfg.AdminPassword != "" {
		made, err := s.roles.EnsureAdmin(ctx, cfg.AdminUser, cfg.AdminPassword)
		if err != nil {
			return fail(fmt.Errorf("norsk-mgr: admin user: %w", err))
		}
		if made {
			s.log.Info("made the admin user", "user", cfg.AdminUser)
		}
	}
	s.sessions = newSessions(keys)
	s.limiter = newSignInLimiter(cfg.SignInBurst, cfg.SignInRate)
	s.hub = newHub()
	s.view = newView(s.hub)
	s.lease = &leaseState{}
	s.replica = &replicaState{}
	s.pubState = &publishState{}

	s.console = &http.Server{Handler: s.consoleHandler(), ReadHeaderTimeout: 10 * time.Second}
	s.disco = &http.Server{Handler: s.discoveryHandler(), ReadHeaderTimeout: 10 * time.Second}
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.cancel = cancel
	s.console.BaseContext = func(net.Listener) context.Context { return rctx }
	s.goRun(func() {
		var err error
		if cfg.TLSCertFile != "" {
			s.console.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
			err = s.console.ServeTLS(s.consoleLn, cfg.TLSCertFile, cfg.TLSKeyFile)
		} else {
			err = s.console.Serve(s.consoleLn)
		}
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("console server stopped", "err", err)
		}
	})
	s.goRun(func() {
		if err := s.disco.Serve(s.discoLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("discovery replica server stopped", "err", err)
		}
	})
	// Announce before the first lease check, so that a standby never finds
	// the new holder's member without an announcement.
	if err := m.AnnounceControlPlane(ctx, s.url, cfg.Interval); err != nil {
		s.log.Warn("cannot announce to the member", "err", err)
	}
	s.goRun(func() { s.view.follow(rctx, m, s.log) })
	s.goRun(func() { s.runControl(rctx) })
	s.goRun(func() { s.runReplica(rctx) })
	s.log.Info("norsk-mgr up", "console", s.url, "discovery", s.discoAddr, "interval", cfg.Interval)
	return s, nil
}

func (s *Server) goRun(f func()) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		f()
	}()
}

func (s *Server) closeListeners() {
	if s.consoleLn != nil {
		_ = s.consoleLn.Close()
	}
	if s.discoLn != nil {
		_ = s.discoLn.Close()
	}
}

// URL is the console's public URL (announced to the member).
func (s *Server) URL() string { return s.url }

// DiscoveryAddress is the discovery replica's host:port.
func (s *Server) DiscoveryAddress() string { return s.discoAddr }

// Member is the name of the Manager member this norsk-mgr is beside.
func (s *Server) Member() string { return s.member }

// Active reports whether this norsk-mgr holds the lease (and publishes).
func (s *Server) Active() bool { return s.lease.active() }

// Close stops serving and every loop, and closes the connection to the
// member. It is idempotent.
func (s *Server) Close() error {
	s.once.Do(func() {
		s.cancel()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		s.hub.close()
		_ = s.console.Shutdown(sctx)
		_ = s.disco.Shutdown(sctx)
		s.wg.Wait()
		_ = s.m.Close()
		s.lease.mu.Lock()
		s.lease.isActive = false
		s.lease.mu.Unlock()
	})
	return nil
}
