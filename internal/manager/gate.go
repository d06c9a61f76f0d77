package manager

import (
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/norsk-go/norsk-manager/internal/auth"
	"github.com/norsk-go/norsk-manager/internal/manager/eventwrite"
	"github.com/norsk-go/norsk-manager/internal/rpcerr"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
)

// Defaults of the gate's bounds (Config.RequestBodyTimeout,
// Config.MaxUnauthenticatedPerSource).
const (
	DefaultRequestBodyTimeout          = 30 * time.Second
	DefaultReadHeaderTimeout           = 10 * time.Second
	DefaultMaxUnauthenticatedPerSource = 16
	// maxUnauthenticated bounds the requests waiting unauthenticated from
	// every source together.
	maxUnauthenticated = 1024
	// maxHeaderBytes bounds a request's headers (net/http's default is
	// 1 MiB).
	maxHeaderBytes = 64 << 10
	// maxPublicRequestBytes bounds a message to the public services
	// (health, reflection).
	maxPublicRequestBytes = 64 << 10
)

// gate is the HTTP middleware in front of the API: nothing is spent on a
// request before it is authenticated but reading its headers.
//
//   - An API call is authenticated and authorised from its headers (the
//     bearer credential) before a byte of its body is read — connect reads
//     and decodes the whole body before any interceptor runs — and refused
//     with the body unread. The identity travels in the request's context.
//   - A request's body must arrive within Config.RequestBodyTimeout of its
//     headers (a read deadline on its stream, cleared once the body is in:
//     an event stream's request is small, and its response may last for
//     days).
//   - Requests that wait unauthenticated — an unknown credential waiting
//     for this member to catch up, a call to the public health and
//     reflection services for its whole length — are bounded per source
//     address (IPv6 per /64) and in all; more are refused with
//     RESOURCE_EXHAUSTED, their bodies unread.
type gate struct {
	authz       *auth.Authorizer
	errs        *connect.ErrorWriter
	bodyTimeout time.Duration
	perSource   int
	metrics     *metrics

	mu      sync.Mutex
	waiting map[netip.Prefix]int
	total   int
}

func newGate(a *auth.Authorizer, cfg Config, m *metrics) *gate {
	return &gate{authz: a, errs: connect.NewErrorWriter(), bodyTimeout: cfg.RequestBodyTimeout,
		perSource: cfg.MaxUnauthenticatedPerSource, metrics: m, waiting: map[netip.Prefix]int{}}
}

// api guards a connect handler of authenticated services.
func (g *gate) api(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		body := g.limitBody(rc, r)
		ctx := eventwrite.WithResponseController(r.Context(), rc)
		if g.authz.Serves(r.URL.Path) {
			src := source(r)
			var err error
			ctx, err = g.authz.AuthorizeHolding(ctx, r.URL.Path, r.Header.Get(auth.AuthorizationHeader), func() (func(), error) { return g.hold(src) })
			if err != nil {
				g.refuse(w, r, err)
				return
			}
		}
		// (Not a procedure: connect answers it, not found, unread.)
		r = r.WithContext(ctx)
		r.Body = body
		next.ServeHTTP(w, r)
	})
}

// public guards an unauthenticated handler: it holds one of its source's
// unauthenticated places for its whole length.
func (g *gate) public(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body := g.limitBody(http.NewResponseController(w), r)
		release, err := g.hold(source(r))
		if err != nil {
			g.refuse(w, r, err)
			return
		}
		defer release()
		r = r.WithContext(r.Context())
		r.Body = body
		next.ServeHTTP(w, r)
	})
}

// refuse answers a request the gate turns away, in its protocol, without
// reading its body; an HTTP/1 connection is closed after the answer so an
// unread body cannot hold it.
func (g *gate) refuse(w http.ResponseWriter, r *http.Request, err error) {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		err = rpcerr.ToConnect(err)
		errors.As(err, &ce)
	}
	if g.metrics != nil {
		g.metrics.gateRefused.WithLabelValues(ce.Code().String()).Inc()
	}
	if r.ProtoMajor < 2 {
		w.Header().Set("Connection", "close")
	}
	_ = g.errs.Write(w, r, err)
}

// hold takes one of src's places for a request waiting unauthenticated.
func (g *gate) hold(src netip.Prefix) (func(), error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case g.waiting[src] >= g.perSource:
		return nil, apierr.New(apierr.ResourceExhausted, "%s has %d requests waiting unauthenticated (at most %d); retry later", src, g.waiting[src], g.perSource)
	case g.total >= maxUnauthenticated:
		return nil, apierr.New(apierr.ResourceExhausted, "%d requests are waiting unauthenticated (at most %d); retry later", g.total, maxUnauthenticated)
	}
	g.waiting[src]++
	g.total++
	g.gauge()
	var once sync.Once
	return func() {
		once.Do(func() {
			g.mu.Lock()
			defer g.mu.Unlock()
			if g.waiting[src]--; g.waiting[src] <= 0 {
				delete(g.waiting, src)
			}
			g.total--
			g.gauge()
		})
	}, nil
}

// waitingTotal is how many requests wait unauthenticated.
func (g *gate) waitingTotal() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.total
}

func (g *gate) gauge() {
	if g.metrics != nil {
		g.metrics.unauthWaiting.Set(float64(g.total))
	}
}

// source is the address a request is counted under: its peer's IP (an IPv6
// address by its /64, which one host commonly holds whole).
func source(r *http.Request) netip.Prefix {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	ip, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"))
	if err != nil {
		return netip.Prefix{}
	}
	ip = ip.Unmap().WithZone("")
	bits := 32
	if ip.Is6() {
		bits = 64
	}
	p, _ := ip.Prefix(bits)
	return p
}

// limitBody gives the request's body its deadline and returns the body
// the handler is to read, which clears the deadline once read to its end.
// (The server's own request keeps its body: net/http recognises an unread
// one by its type, and closes the connection rather than drain it.)
func (g *gate) limitBody(rc *http.ResponseController, r *http.Request) io.ReadCloser {
	if g.bodyTimeout <= 0 || r.Body == nil || r.Body == http.NoBody {
		return r.Body
	}
	if err := rc.SetReadDeadline(time.Now().Add(g.bodyTimeout)); err != nil {
		return r.Body
	}
	return &deadlineBody{ReadCloser: r.Body, clear: func() { _ = rc.SetReadDeadline(time.Time{}) }}
}

// deadlineBody clears its stream's read deadline at the end of the body:
// over HTTP/1 the connection's reader goes on (watching for the client
// going away) and must not time out while a stream's response is sent.
type deadlineBody struct {
	io.ReadCloser
	once  sync.Once
	clear func()
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if errors.Is(err, io.EOF) {
		b.once.Do(b.clear)
	}
	return n, err
}
