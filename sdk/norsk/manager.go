package norsk

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1/managerv1connect"
)

// DefaultURL is the Manager Connect dials when neither Settings.URL nor
// NORSK_MANAGER_URL says otherwise: the local development Manager.
const DefaultURL = "http://127.0.0.1:6790"

// Environment variables that supply defaults for Settings.
const (
	EnvManagerURL = "NORSK_MANAGER_URL"
	EnvToken      = "NORSK_TOKEN"
)

// Settings say which Manager to connect to and how.
type Settings struct {
	// URL of the Manager: "host:port" (plain HTTP), "http://host:port" or
	// "https://host:port". Empty: $NORSK_MANAGER_URL, else DefaultURL. In
	// a Manager cluster it may name several members, comma-separated:
	// Connect uses the first that answers (the others are tried only when
	// one cannot be reached; a refusal, such as a bad token, is final).
	URL string
	// Token is the API bearer token, sent as "Authorization: Bearer <token>".
	// Empty: $NORSK_TOKEN; no header when that is empty too.
	Token string
	// HTTPClient, when set, carries every call instead of the clients
	// Connect builds. It must speak HTTP/2 (over cleartext for http://
	// URLs): the event stream and SnapshotSave are gRPC. Unary calls go
	// over whichever HTTP version it speaks.
	HTTPClient *http.Client
	// GRPC sends every call in the gRPC protocol over one multiplexed
	// HTTP/2 connection, as SDKs before decision 0067 did — for a gRPC-only
	// proxy between the SDK and the Manager. By default unary calls go in
	// the Connect protocol (binary protobuf, the same messages) over
	// HTTP/1.1 keep-alive connections — one per call in flight, reused, at
	// most 64 kept idle — which costs the SDK and the Manager about a third
	// less CPU per call; the event stream and SnapshotSave are gRPC over
	// HTTP/2 either way.
	GRPC bool
	// TLSConfig is the TLS configuration of https:// URLs (e.g. RootCAs
	// holding the Manager's CA); nil = the system's roots. Ignored with
	// HTTPClient.
	TLSConfig *tls.Config
	// CAFile is a PEM file of CA certificates that verify an https://
	// Manager instead of the system's roots (--tls-ca). Empty:
	// $NORSK_TLS_CA.
	CAFile string
	// CAFingerprint pins the CA the Manager's certificate chain ends in by
	// its fingerprint, "sha256:<hex>" (--tls-ca-hash; `norsk-manager tls ca`
	// prints it). Empty: $NORSK_TLS_CA_HASH. The environment is read only
	// when neither CAFile nor CAFingerprint is set, and only for https://
	// URLs; set explicitly with an http:// URL, either is an error.
	CAFingerprint string
	// ClientLabel names the caller in the daemon's logs (sent with Hello).
	ClientLabel string
	// LinearizableReads makes every read of the replicated state
	// linearizable, as Linearizable does for one call: it sees every write
	// committed before it began, on any member, at the cost of a round trip
	// to the primary (and ErrUnavailable when there is none). Member-local
	// calls (GetClusterStatus, ForceStandalone, …) are not affected.
	LinearizableReads bool
	// Logger receives the SDK's own log lines (event-stream reconnects).
	// Nil: slog.Default().
	Logger *slog.Logger
}

// Manager is a connection to a Norsk Manager. Its methods are safe for
// concurrent use. Close it when done.
type Manager struct {
	// client makes the unary calls; streams the server-streaming ones
	// (gRPC over HTTP/2; see Settings.GRPC).
	client, streams managerv1connect.ManagerClient
	hello           *DaemonHello
	version         *VersionInfo
	url             string
	logger          *slog.Logger
	// transports are the transports Connect built (none when the caller
	// supplied the HTTP client).
	transports []*http.Transport

	// closed is cancelled by Close; event streams stop with it.
	closed    context.Context
	closeFunc context.CancelFunc
	closeOnce sync.Once

	// Event-stream reconnect backoff; tests shorten them.
	backoffMin, backoffMax time.Duration
}

// Connect dials the Manager, says Hello with ProtocolVersion and returns the
// connection. It fails with an *IncompatibleError (matching ErrIncompatible)
// when the daemon's major protocol version differs from the SDK's, with
// ErrInvalidArgument for a malformed URL, and with the Hello call's error
// (ErrUnavailable when nothing answers, ErrUnauthenticated for a bad token).
func Connect(ctx context.Context, s Settings) (*Manager, error) {
	var bases []string
	for _, raw := range strings.Split(firstNonEmpty(s.URL, os.Getenv(EnvManagerURL), DefaultURL), ",") {
		base, err := NormalizeURL(strings.TrimSpace(raw))
		if err != nil {
			return nil, err
		}
		bases = append(bases, base)
	}
	var errs []error
	for _, base := range bases {
		m, err := connectTo(ctx, s, base)
		if err == nil || !errors.Is(err, ErrUnavailable) || ctx.Err() != nil {
			return m, err
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

// connectTo is Connect to one Manager member at base.
func connectTo(ctx context.Context, s Settings, base string) (*Manager, error) {
	token := firstNonEmpty(s.Token, os.Getenv(EnvToken))
	logger := s.Logger
	if logger == nil {
		logger = slog.Default()
	}
	m := &Manager{url: base, logger: logger, backoffMin: 100 * time.Millisecond, backoffMax: 5 * time.Second}
	tlsCfg, err := s.tlsConfig(base)
	if err != nil {
		return nil, err
	}
	streamHTTP, unaryHTTP := s.HTTPClient, s.HTTPClient
	if s.HTTPClient == nil {
		// Neither transport dials before its first call.
		h2 := newTransport(strings.HasPrefix(base, "http://"))
		streamHTTP, unaryHTTP = &http.Client{Transport: h2}, &http.Client{Transport: h2}
		m.transports = append(m.transports, h2)
		if !s.GRPC {
			h1 := newUnaryTransport()
			unaryHTTP = &http.Client{Transport: oneWrite{h1}}
			m.transports = append(m.transports, h1)
		}
		if tlsCfg != nil {
			for _, tr := range m.transports {
				tr.TLSClientConfig = tlsCfg.Clone()
			}
		}
	}
	opts := []connect.ClientOption{connect.WithInterceptors(consistency{all: s.LinearizableReads})}
	if token != "" {
		opts = append(opts, connect.WithInterceptors(bearer(token)))
	}
	grpcOpts := append([]connect.ClientOption{connect.WithGRPC()}, opts...)
	m.streams = managerv1connect.NewManagerClient(streamHTTP, base, grpcOpts...)
	if s.GRPC {
		m.client = managerv1connect.NewManagerClient(unaryHTTP, base, grpcOpts...)
	} else {
		// The Connect protocol's default codec is binary protobuf.
		m.client = managerv1connect.NewManagerClient(unaryHTTP, base, opts...)
	}
	m.closed, m.closeFunc = context.WithCancel(context.Background())

	res, err := m.client.Hello(ctx, connect.NewRequest(&managerv1.HelloRequest{
		ProtocolVersion: ProtocolVersion,
		ClientLabel:     s.ClientLabel,
	}))
	if err != nil {
		m.Close()
		return nil, fmt.Errorf("connect to %s: %w", base, wrapError("Hello", err))
	}
	m.hello = res.Msg
	if !compatible(res.Msg) {
		m.Close()
		return nil, &IncompatibleError{SDKVersion: ProtocolVersion, DaemonVersion: res.Msg.GetProtocolVersion(), DaemonBuild: res.Msg.GetBuildLabel()}
	}
	m.version = res.Msg.GetVersion()
	if m.version == nil { // a daemon older than 1.10: ask
		v, err := m.client.Version(ctx, connect.NewRequest(&managerv1.VersionRequest{}))
		if err != nil {
			m.Close()
			return nil, fmt.Errorf("connect to %s: %w", base, wrapError("Version", err))
		}
		m.version = v.Msg
	}
	return m, nil
}

// compatible reports whether the daemon's hello allows this SDK to go on: the
// major versions match and the daemon did not say otherwise.
func compatible(h *DaemonHello) bool {
	return h.GetCompatible() && majorOf(h.GetProtocolVersion()) == majorOf(ProtocolVersion) && majorOf(ProtocolVersion) >= 0
}

// majorOf returns the major number of "major.minor", or -1 when v is not of
// that form.
func majorOf(v string) int {
	major, _, _ := strings.Cut(v, ".")
	n, err := strconv.Atoi(major)
	if err != nil || n < 0 {
		return -1
	}
	return n
}

// NormalizeURL turns a Manager address as users write it ("host:port",
// "http://host:port", "https://host:port/") into the base URL the SDK dials.
// It fails with ErrInvalidArgument for anything else.
func NormalizeURL(raw string) (string, error) {
	s := strings.TrimSpace(raw)
	if !strings.Contains(s, "://") {
		s = "http://" + s
	}
	u, err := url.Parse(s)
	if err != nil {
		return "", &Error{Op: "Connect", Code: connect.CodeInvalidArgument, Message: fmt.Sprintf("manager URL %q: %v", raw, err)}
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", &Error{Op: "Connect", Code: connect.CodeInvalidArgument, Message: fmt.Sprintf("manager URL %q: scheme must be http or https", raw)}
	}
	if u.Host == "" {
		return "", &Error{Op: "Connect", Code: connect.CodeInvalidArgument, Message: fmt.Sprintf("manager URL %q: no host", raw)}
	}
	return strings.TrimSuffix(u.Scheme+"://"+u.Host+u.Path, "/"), nil
}

// newTransport returns an HTTP/2-only transport: cleartext HTTP/2 (h2c) for
// plain URLs, HTTP/2 over TLS otherwise. Idle connections are pinged so that
// a dead peer ends a long event stream instead of hanging it: 45 s after
// the last frame.
func newTransport(cleartext bool) *http.Transport {
	var protocols http.Protocols
	if cleartext {
		protocols.SetUnencryptedHTTP2(true)
	} else {
		protocols.SetHTTP2(true)
	}
	tr := baseTransport(protocols, &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second})
	tr.HTTP2 = &http.HTTP2Config{
		SendPingTimeout: 30 * time.Second,
		PingTimeout:     15 * time.Second,
	}
	return tr
}

// baseTransport is what the SDK's two transports share: the proxy from the
// environment, TLS 1.2 at least, and their timeouts.
func baseTransport(protocols http.Protocols, dialer *net.Dialer) *http.Transport {
	return &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		DialContext:         dialer.DialContext,
		Protocols:           &protocols,
		TLSClientConfig:     &tls.Config{MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout: 10 * time.Second,
		IdleConnTimeout:     90 * time.Second,
	}
}

// maxIdleUnaryConns is how many idle HTTP/1.1 connections the unary
// transport keeps: as many calls as were in flight at once, up to this.
const maxIdleUnaryConns = 64

// newUnaryTransport returns the HTTP/1.1 transport of unary calls (in the
// Connect protocol; decision 0067): TLS for https:// URLs, a keep-alive
// connection per call in flight. HTTP/1.1 has no ping: TCP keep-alive
// probes in its place find a peer that vanished, even in the middle of a
// call, 45 s after the last byte from it, as the HTTP/2 transport's pings
// do.
func newUnaryTransport() *http.Transport {
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	dialer := &net.Dialer{Timeout: 10 * time.Second, KeepAliveConfig: net.KeepAliveConfig{
		Enable: true, Idle: 30 * time.Second, Interval: 5 * time.Second, Count: 3,
	}}
	tr := baseTransport(protocols, dialer)
	tr.MaxIdleConnsPerHost = maxIdleUnaryConns
	return tr
}

// Close ends every event stream of m and releases its idle connections. Calls
// made after Close fail with ErrCanceled. Close is idempotent and always returns nil.
func (m *Manager) Close() error {
	m.closeOnce.Do(func() {
		m.closeFunc()
		for _, tr := range m.transports {
			tr.CloseIdleConnections()
		}
	})
	return nil
}

// URL is the base URL m dials.
func (m *Manager) URL() string { return m.url }

// Hello is the daemon's answer to Connect's hello, as the seed's hello
// property: its wire-protocol version, build label, node name and the skew
// of its minor version against this SDK's (Skew says it in words). Known
// once connected.
func (m *Manager) Hello() *DaemonHello { return m.hello }

// bearer returns an interceptor that authenticates every call with token.
func bearer(token string) connect.Interceptor { return bearerInterceptor("Bearer " + token) }

type bearerInterceptor string

func (b bearerInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		req.Header().Set("Authorization", string(b))
		return next(ctx, req)
	}
}

func (b bearerInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		conn.RequestHeader().Set("Authorization", string(b))
		return conn
	}
}

func (b bearerInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

func firstNonEmpty(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}

// errClosed is returned (as ErrCanceled) by calls on a closed Manager.
var errClosed = errors.New("manager connection closed")

// alive fails with ErrCanceled once m is closed, and with ErrUnimplemented
// for a call the Manager's protocol predates (needsProtocol).
func (m *Manager) alive(op string) error {
	if m.closed.Err() != nil {
		return &Error{Op: op, Code: connect.CodeCanceled, Message: errClosed.Error(), cause: errClosed}
	}
	return m.needsProtocol(op)
}
