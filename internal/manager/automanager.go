package manager

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/norsk-go/norsk-manager/internal/automanager"
	"github.com/norsk-go/norsk-manager/internal/providers/mock"
	"github.com/norsk-go/norsk-manager/pkg/placement"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// runAutoManager runs the AutoManager for one primary term: it connects the
// Go SDK to this member (its own listener, with the process's internal
// credential) for its writes, reads the store and follows the event broker
// in process (localAPI), and drives it until ctx ends, reconnecting if the
// SDK cannot connect yet.
func (s *Server) runAutoManager(ctx context.Context) {
	if s.cfg.DisableAutoManager {
		return
	}
	for ctx.Err() == nil {
		m, err := norsk.Connect(ctx, norsk.Settings{
			URL:         s.url,
			Token:       s.authz.InternalCredential(),
			HTTPClient:  s.selfHTTPClient(),
			ClientLabel: "automanager",
			Logger:      s.base,
		})
		if err != nil {
			s.log.Warn("automanager: cannot connect to this member; retrying", "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
			continue
		}
		am := automanager.New(automanager.Config{
			// Reads and events in process; writes through the SDK.
			API: newLocalAPI(s, m),
			Policy: automanager.Policy{
				RestartCeiling: s.cfg.RestartCeiling,
				RestartWindow:  s.cfg.RestartWindow,
				Placement:      s.placementConfig(),
				Elastic:        s.elasticTiers(),
				Migration:      s.cfg.MigrationDeadlines,
				Repair:         s.cfg.Repair,
				Spares:         s.cfg.Spares,
			},
			Elastic: s.elasticTiers,
			Clock:   s.cfg.Clock,
			Logger:  s.base,
			Metrics: s.amMetrics,
		})
		unregister := s.migrator.Set(am)
		s.log.Info("automanager started")
		_ = am.Run(ctx)
		unregister()
		_ = m.Close()
		s.log.Info("automanager stopped")
		return
	}
}

// elasticTiers are the tiers the configured providers create nodes in.
func (s *Server) elasticTiers() []automanager.ElasticTier {
	var out []automanager.ElasticTier
	if mp := s.mockProvider(); mp != nil {
		for _, p := range mp.Config().Pools {
			out = append(out, automanager.ElasticTier{Tier: p, Provider: mock.Name, VCPUs: mp.Config().VCPUs})
		}
	}
	return append(out, s.cloudTiers()...)
}

// placementConfig is placement's configuration from this member's (the
// job socket counted as the AutoManager counts it).
func (s *Server) placementConfig() placement.Config {
	return automanager.WithJobSocketPresence(placement.Config{Pools: s.cfg.Pools, PoolSpread: s.cfg.PoolSpread})
}

// selfHTTPClient dials this member's own listener whatever the URL's host,
// over HTTP/2 (cleartext, or TLS accepting only the certificate this
// listener serves).
func (s *Server) selfHTTPClient() *http.Client {
	var p http.Protocols
	p.SetHTTP2(true)
	p.SetUnencryptedHTTP2(true)
	addr := s.ln.Addr().String()
	tr := &http.Transport{
		Protocols: &p,
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{Timeout: 2 * time.Second}).DialContext(ctx, network, addr)
		},
	}
	if s.tls != nil && s.tls.on && s.tls.server != nil {
		srv := s.tls.server
		tr.TLSClientConfig = &tls.Config{
			MinVersion: tls.VersionTLS12,
			// The peer is this process's own listener: it is verified by
			// being the very certificate the listener serves, not by a CA.
			InsecureSkipVerify: true,
			VerifyConnection: func(cs tls.ConnectionState) error {
				if len(cs.PeerCertificates) == 0 {
					return errors.New("self: no certificate")
				}
				var own *tls.Certificate
				if srv.GetCertificate != nil {
					own, _ = srv.GetCertificate(&tls.ClientHelloInfo{ServerName: cs.ServerName})
				} else if len(srv.Certificates) > 0 {
					own = &srv.Certificates[0]
				}
				if own == nil || len(own.Certificate) == 0 || !bytes.Equal(own.Certificate[0], cs.PeerCertificates[0].Raw) {
					return errors.New("self: the listener answered with a certificate that is not this member's")
				}
				return nil
			},
		}
	}
	return &http.Client{Transport: tr}
}
