package worker

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1/managerv1connect"
)

// registerCallTimeout bounds one ClusterMemberRegister call.
const registerCallTimeout = 10 * time.Second

// firstRetry is the first wait of the registration backoff.
const firstRetry = 250 * time.Millisecond

// errRefused wraps an UNAUTHENTICATED answer to a registration: the token is
// unknown or used, or the secret's slot was deregistered.
type errRefused struct{ err error }

func (e *errRefused) Error() string { return "registration refused: " + e.err.Error() }
func (e *errRefused) Unwrap() error { return e.err }

// errNodeTerminated is a FAILED_PRECONDITION answer to a reconnecting
// worker's registration: its node was terminated while it was away.
type errNodeTerminated struct{ err error }

func (e *errNodeTerminated) Error() string { return "registration refused: " + e.err.Error() }
func (e *errNodeTerminated) Unwrap() error { return e.err }

// registrar makes ClusterMemberRegister calls, one call per method (the
// retry loop lives in link.go). It rotates through the Manager URLs it knows
// when a call fails.
type registrar struct {
	httpClient *http.Client
	ownClient  bool

	mu      sync.Mutex
	urls    []string // urls[0] is the configured one
	next    int
	clients map[string]managerv1connect.ManagerClient
}

func newRegistrar(managerURL string, hc *http.Client, tlsCfg *tls.Config) *registrar {
	r := &registrar{httpClient: hc, urls: []string{strings.TrimRight(managerURL, "/")}, clients: map[string]managerv1connect.ManagerClient{}}
	if r.httpClient == nil {
		var p http.Protocols
		p.SetHTTP2(true)
		p.SetUnencryptedHTTP2(true) // http:// URLs: HTTP/2 with prior knowledge
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.Protocols = &p
		if tlsCfg != nil {
			tr.TLSClientConfig = tlsCfg // --tls-ca / --tls-ca-hash (tls.go)
		}
		r.httpClient = &http.Client{Transport: tr}
		r.ownClient = true
	}
	return r
}

// setURLs adds the Manager members' URLs a hello named.
func (r *registrar) setURLs(urls []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := map[string]bool{}
	out := []string{r.urls[0]}
	seen[r.urls[0]] = true
	for _, u := range urls {
		u = strings.TrimRight(u, "/")
		if u == "" || seen[u] || (!strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://")) {
			continue
		}
		seen[u] = true
		out = append(out, u)
	}
	r.urls = out
	if r.next >= len(out) {
		r.next = 0
	}
}

// client returns the client for the current URL.
func (r *registrar) client() (managerv1connect.ManagerClient, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	u := r.urls[r.next]
	c := r.clients[u]
	if c == nil {
		c = managerv1connect.NewManagerClient(r.httpClient, u, connect.WithGRPC())
		r.clients[u] = c
	}
	return c, u
}

// rotate moves to the next known URL after a failed call.
func (r *registrar) rotate() {
	r.mu.Lock()
	r.next = (r.next + 1) % len(r.urls)
	r.mu.Unlock()
}

// register makes one ClusterMemberRegister call. An UNAUTHENTICATED answer is
// an *errRefused.
func (r *registrar) register(ctx context.Context, req *managerv1.ClusterMemberRegisterRequest) (*managerv1.ClusterMemberRegisterResponse, error) {
	c, u := r.client()
	ctx, cancel := context.WithTimeout(ctx, registerCallTimeout)
	defer cancel()
	creq := connect.NewRequest(req)
	// The credential is the registration token the first time, the node
	// secret afterwards; it is also the call's bearer.
	cred := req.GetToken()
	if cred == "" {
		cred = req.GetNodeSecret()
	}
	creq.Header().Set("Authorization", "Bearer "+cred)
	resp, err := c.ClusterMemberRegister(ctx, creq)
	if err != nil {
		switch connect.CodeOf(err) {
		case connect.CodeUnauthenticated:
			return nil, &errRefused{err}
		case connect.CodeFailedPrecondition:
			if req.GetReconnect() {
				return nil, &errNodeTerminated{err}
			}
		}
		r.rotate()
		return nil, fmt.Errorf("register with %s: %w", u, err)
	}
	return resp.Msg, nil
}

// close releases idle connections of a client the registrar made.
func (r *registrar) close() {
	if r.ownClient {
		r.httpClient.CloseIdleConnections()
	}
}

// backoff is a jittered exponential backoff: each wait is drawn from
// [d/2, d] where d doubles from min to max.
type backoff struct {
	min, max time.Duration
	n        int
}

func (b *backoff) next() time.Duration {
	d := b.min
	for i := 0; i < b.n && d < b.max; i++ {
		d *= 2
	}
	if d > b.max {
		d = b.max
	}
	b.n++
	half := d / 2
	if half <= 0 {
		return d
	}
	return half + rand.N(d-half+1)
}

func (b *backoff) reset() { b.n = 0 }

// registerUntil registers, retrying with backoff until an answer comes, the
// registration is refused (*errRefused) or ctx ends (ctx.Err()).
func (a *Agent) registerUntil(ctx context.Context, req *managerv1.ClusterMemberRegisterRequest) (*managerv1.ClusterMemberRegisterResponse, error) {
	bo := backoff{min: min(firstRetry, a.cfg.RegisterRetry), max: a.cfg.RegisterRetry}
	for {
		resp, err := a.reg.register(ctx, req)
		if err == nil {
			a.onRegistered(resp) // the TLS certificate, if any (tls.go)
			return resp, nil
		}
		var refused *errRefused
		var terminated *errNodeTerminated
		if errors.As(err, &refused) || errors.As(err, &terminated) {
			return nil, err
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		d := bo.next()
		a.logger().Warn("registration failed; retrying", "err", err, "retry_in", d)
		if !a.sleep(ctx, d) {
			return nil, ctx.Err()
		}
	}
}

// sleep waits d on the agent's clock; false if ctx ended first.
func (a *Agent) sleep(ctx context.Context, d time.Duration) bool {
	t := a.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return true
	case <-ctx.Done():
		return false
	}
}

// registerRequest is the registration request with the worker's facts.
func (a *Agent) registerRequest(token, secret string) *managerv1.ClusterMemberRegisterRequest {
	return &managerv1.ClusterMemberRegisterRequest{
		Token:         token,
		NodeSecret:    secret,
		Address:       a.advertise,
		Hardware:      a.hardware(),
		Capabilities:  a.cfg.Capabilities,
		Runtime:       a.runtimeName,
		WorkerVersion: a.cfg.Version,
		CsrDer:        a.csrDER(),
	}
}
