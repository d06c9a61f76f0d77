package worker

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/norsk-go/norsk-manager/internal/worker/hostinfo"
	"github.com/norsk-go/norsk-manager/pkg/apierr"

	"connectrpc.com/connect"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1/managerv1connect"
)

// registerCallTimeout bounds one ClusterMemberRegister call.
const registerCallTimeout = 10 * time.Second

// firstRetry is the first wait of the registration backoff.
const firstRetry = 250 * time.Millisecond

// refusalConfirmations is how many refusals of the node secret, spanning at
// least ReregisterAfter, confirm that the node's slot was deregistered. A
// single refusal may come from a Manager member that has not caught up, or
// from a member answering while the cluster changes; wiping the node on it
// would take every live channel down.
const refusalConfirmations = 3

// errRefused wraps an UNAUTHENTICATED answer to a registration that the
// server sent as a gRPC status (a bare HTTP 401 is never one): the token is
// unknown or used, or the secret is not known.
type errRefused struct{ err error }

func (e *errRefused) Error() string { return "registration refused: " + e.err.Error() }
func (e *errRefused) Unwrap() error { return e.err }

// secretUnknown reports whether the refusal is the Manager's own word that
// it does not know the node secret (apierr.RefusalHeader). An
// UNAUTHENTICATED status without it (another gRPC service's
// authentication, a gRPC-aware proxy) does not say that the slot is gone.
func (e *errRefused) secretUnknown() bool {
	var ce *connect.Error
	return errors.As(e.err, &ce) && ce.Meta().Get(apierr.RefusalHeader) == apierr.RefusalNodeSecretUnknown
}

// errNodeHeld is the Manager's ALREADY_EXISTS answer, in its own words
// (apierr.RefusalNodeHeldByLiveWorker), that another worker process holds
// the node's live stream: this process is a second one with the same node
// identity. It is never dialled while the other lives; it keeps asking,
// slowly, and takes the node over only once the other's stream is gone.
type errNodeHeld struct{ err error }

func (e *errNodeHeld) Error() string { return "registration refused: " + e.err.Error() }
func (e *errNodeHeld) Unwrap() error { return e.err }

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

	mu   sync.Mutex
	urls []string // the configured ones first
	// configured: how many of urls were configured (the rest were learned).
	configured int
	next       int
	clients    map[string]managerv1connect.ManagerClient
}

func newRegistrar(managerURLs []string, hc *http.Client, tlsCfg *tls.Config) *registrar {
	r := &registrar{httpClient: hc, clients: map[string]managerv1connect.ManagerClient{}}
	for _, u := range managerURLs {
		r.urls = append(r.urls, strings.TrimRight(u, "/"))
	}
	r.configured = len(r.urls)
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

// setURLs makes the Manager members a hello named the known URLs after the
// configured ones, and returns the hello's (valid, distinct) URLs.
func (r *registrar) setURLs(urls []string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	// Only the configured scheme: a worker that speaks TLS to its Manager
	// never sends its secret in the clear to a member a hello named.
	scheme := "http://"
	if isHTTPS(r.urls[0]) {
		scheme = "https://"
	}
	var named []string
	for _, u := range urls {
		u = strings.TrimRight(u, "/")
		if strings.HasPrefix(u, scheme) && !slices.Contains(named, u) {
			named = append(named, u)
		}
	}
	out := slices.Clone(r.urls[:r.configured])
	for _, u := range named {
		if !slices.Contains(out, u) {
			out = append(out, u)
		}
	}
	r.urls = out
	if r.next >= len(out) {
		r.next = 0
	}
	return named
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

// register makes one ClusterMemberRegister call. An UNAUTHENTICATED status
// the server answered with is an *errRefused, a FAILED_PRECONDITION one to a
// reconnect an *errNodeTerminated. Only a status the server sent counts: the
// client maps a bare HTTP status to a code as well (401 to UNAUTHENTICATED),
// and anything at the URL may answer one (an authenticating proxy or
// ingress, another service on the port); such an answer is an ordinary
// failure, retried. Every failure moves on to the next known Manager URL, so
// that a member that does not know the credential is not the only one asked.
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
		r.rotate()
		err = fmt.Errorf("register with %s: %w", u, err)
		if connect.IsWireError(err) {
			switch connect.CodeOf(err) {
			case connect.CodeUnauthenticated:
				return nil, &errRefused{err}
			case connect.CodeFailedPrecondition:
				if req.GetReconnect() {
					return nil, &errNodeTerminated{err}
				}
			case connect.CodeAlreadyExists:
				var ce *connect.Error
				if errors.As(err, &ce) && ce.Meta().Get(apierr.RefusalHeader) == apierr.RefusalNodeHeldByLiveWorker {
					return nil, &errNodeHeld{err}
				}
			}
		}
		return nil, err
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
//
// A refused token is returned at once: nothing is lost by it. A refused node
// secret is returned only once the Manager has refused it, saying that it
// does not know it, at least refusalConfirmations times over at least
// ReregisterAfter (on the agent's clock) with no success between, because
// the caller then wipes the node. Until then, and for an UNAUTHENTICATED
// status that is not the Manager's refusal of the secret, the worker keeps
// retrying and its instances keep running.
func (a *Agent) registerUntil(ctx context.Context, req *managerv1.ClusterMemberRegisterRequest) (*managerv1.ClusterMemberRegisterResponse, error) {
	bo := backoff{min: min(firstRetry, a.cfg.RegisterRetry), max: a.cfg.RegisterRetry}
	var refusals, held int
	var firstRefusal time.Time
	for {
		resp, err := a.reg.register(ctx, req)
		if err == nil {
			if cerr := a.learnCluster(resp.GetClusterId()); cerr != nil {
				var other *errOtherCluster
				if !errors.As(cerr, &other) {
					a.logger().Error("cannot keep the cluster id the Manager gave", "err", cerr)
				} else {
					err = cerr // never follow another cluster's Manager: ask again (and again)
				}
			}
		}
		if err == nil {
			a.onRegistered(resp) // the TLS certificate, if any (tls.go)
			return resp, nil
		}
		var refused *errRefused
		var terminated *errNodeTerminated
		var nodeHeld *errNodeHeld
		var other *errOtherCluster
		msg := "registration failed; retrying"
		switch {
		case errors.As(err, &other):
			a.logger().Error("the Manager is another cluster's; not following it", "err", err)
			msg = "the Manager is another cluster's; asking again later"
		case errors.As(err, &nodeHeld):
			held++
			if held == 1 {
				a.logger().Error("another worker process with this node's identity holds the node's stream: "+
					"this one is not the node's while that one lives (is a second worker running with a copy of this identity?); "+
					"asking again, slowly, and taking over only once that one is gone", "err", err)
			}
			msg = "another worker process still holds this node; asking again"
		case errors.As(err, &terminated):
			return nil, err
		case errors.As(err, &refused) && req.GetToken() != "":
			return nil, err
		case errors.As(err, &refused) && refused.secretUnknown():
			now := a.clock.Now()
			if refusals == 0 {
				firstRefusal = now
			}
			refusals++
			if refusals >= refusalConfirmations && now.Sub(firstRefusal) >= a.cfg.ReregisterAfter {
				return nil, err
			}
			msg = fmt.Sprintf("the Manager refused the node secret (%d times since %s); asking again before taking the node for deregistered, instances keep running",
				refusals, firstRefusal.Format(time.RFC3339))
		case errors.As(err, &refused):
			msg = "the node secret was refused, but not in the Manager's words that its slot is gone; retrying, instances keep running"
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		d := bo.next()
		a.logger().Warn(msg, "err", err, "retry_in", d)
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
		Token:             token,
		NodeSecret:        secret,
		Address:           a.advertise,
		Hardware:          hostinfo.Hardware(a.cfg.GPUs),
		Capabilities:      a.cfg.Capabilities,
		Runtime:           a.runtimeName,
		WorkerVersion:     a.cfg.Version,
		CsrDer:            a.csrDER(),
		WorkerIncarnation: a.incarnation,
	}
}
