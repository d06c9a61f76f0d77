package worker

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/clock"
	"github.com/norsk-go/norsk-manager/internal/runtime"
	"github.com/norsk-go/norsk-manager/internal/worker/instance"
	"github.com/norsk-go/norsk-manager/pkg/certpin"
)

// Defaults of Config fields left zero.
const (
	DefaultListen          = "127.0.0.1:0"
	DefaultRegisterRetry   = 10 * time.Second
	DefaultReregisterAfter = 15 * time.Second
	// DefaultHeartbeat is the heartbeat interval when neither the Manager's
	// hello nor its registration answer gives one.
	DefaultHeartbeat = 5 * time.Second
	// DefaultStopGrace is the grace a stop without one gives services.
	DefaultStopGrace = instance.DefaultStopGrace
	// DefaultLeaseTTL is the lease TTL before the first LeaseGrant.
	DefaultLeaseTTL = 15 * time.Second
)

// Config configures an Agent.
type Config struct {
	// ManagerURL is the Manager API's base URL, http://host:port or
	// https://host:port (required). In a Manager cluster it may name
	// several members, comma-separated: the worker registers with whichever
	// answers, and also remembers every member a primary's hello names.
	ManagerURL string
	// Token is the one-shot registration token; needed only when DataDir
	// holds no identity.
	Token string
	// DataDir holds the identity, the instance records and the process
	// runtime's state (required). It belongs to one node.
	DataDir string
	// Listen is where the NodeController server listens (default
	// "127.0.0.1:0").
	Listen string
	// Advertise is the host:port the Manager dials. Default: the listen
	// address, with an unspecified IP replaced by the address this host
	// reaches the Manager from (or the hostname).
	Advertise string
	// Runtime is "docker", "process", or "" (docker when an engine answers,
	// else process; an existing worker keeps the runtime its instance
	// records were made with).
	Runtime string
	// PublishHost is the host IP the docker runtime publishes a job's port
	// on when the port mapping names no host address: "127.0.0.1" keeps job
	// ports off the network (dev). Empty: every address.
	PublishHost string
	// RuntimeImpl, when set, is used instead of building a runtime (tests).
	// The Agent does not close it.
	RuntimeImpl runtime.Runtime
	// CommandDir is what the process runtime resolves relative executable
	// paths against (default: the working directory).
	CommandDir string
	// Capabilities and GPUs are reported at registration and in the hello.
	Capabilities []*managerv1.Capability
	GPUs         []*managerv1.Gpu
	// Version is the worker version reported to the Manager.
	Version string
	// Clock times backoffs, heartbeats and re-registration (default: real).
	Clock clock.Clock
	// Logger receives the agent's logs (default: slog.Default()).
	Logger *slog.Logger
	// HTTPClient calls the Manager API. Default: a client speaking HTTP/2,
	// over TLS for https:// and cleartext (h2c) for http:// URLs.
	HTTPClient *http.Client
	// TLSCAFile (PEM) and TLSCAHash ("sha256:<hex>", the CA certificate's
	// fingerprint, as `norsk-ctl slot register` prints it) verify an https
	// Manager's certificate instead of the system's roots (ignored with
	// HTTPClient). With an https Manager the worker also asks, at every
	// registration, for a certificate of its own and serves its
	// NodeController stream with mutual TLS (tls.go).
	TLSCAFile string
	TLSCAHash string
	// RegisterRetry is the longest wait between registration attempts
	// (default 10 s); the first retry waits 250 ms.
	RegisterRetry time.Duration
	// ReregisterAfter is how long without a Control stream before the
	// worker registers again (default 15 s).
	ReregisterAfter time.Duration
	// JobSocket serves every instance a job socket (job_socket.proto,
	// docs/job-socket.md) and advertises the capability jobsocket.Capability
	// (count 1) at registration and in the hello. Off, the worker serves
	// none and never advertises it (a Capabilities entry of that name is
	// dropped), and refuses the migration handshake's commands.
	JobSocket bool
	// JobSocketDir is the directory the job sockets are made in, one
	// sub-directory per instance (default: os.TempDir()/norsk-js-<12 hex
	// digits of a hash of DataDir's absolute path>, short enough for a Unix
	// socket path and the same across restarts of the worker). It is
	// created 0700 and must not be shared by two workers.
	JobSocketDir string
	// JobSocketAttachGrace is how long after an instance's socket opens a
	// handover's get_state waits for the job's first attach before it is
	// refused (default jobsocket.DefaultAttachGrace, 10 s: a job that has
	// just started is about to attach).
	JobSocketAttachGrace time.Duration
	// LeaseTTL is the lease of the lease-protected instances until a
	// Manager member's first LeaseGrant since the agent started (default
	// 15 s; then each grant says): a worker that hears no grant stops them
	// two thirds of it after its start, instances it adopted included.
	LeaseTTL time.Duration

	// managerURLs: ManagerURL split (the first is ManagerURL).
	managerURLs []string
}

// Errors Run returns.
var (
	// ErrTerminated: the Manager terminated the node; every instance was
	// stopped.
	ErrTerminated = errors.New("worker: node terminated by the Manager")
	// ErrDeregistered: the node's slot was deregistered; every instance
	// was stopped and the identity deleted.
	ErrDeregistered = errors.New("worker: node deregistered by the Manager")
	// ErrTokenRefused: the registration token is unknown or already used.
	ErrTokenRefused = errors.New("worker: registration token is unknown or already used")
)

// withDefaults validates c and fills in defaults.
func (c Config) withDefaults() (Config, error) {
	if c.ManagerURL == "" {
		return c, errors.New("worker: ManagerURL is required")
	}
	c.managerURLs = nil
	for _, raw := range strings.Split(c.ManagerURL, ",") {
		raw = strings.TrimRight(strings.TrimSpace(raw), "/")
		v, err := url.Parse(raw)
		if err != nil || (v.Scheme != "http" && v.Scheme != "https") || v.Host == "" {
			return c, fmt.Errorf("worker: ManagerURL %q: want http://host:port or https://host:port (several comma-separated)", raw)
		}
		if len(c.managerURLs) > 0 && (v.Scheme == "https") != isHTTPS(c.managerURLs[0]) {
			return c, fmt.Errorf("worker: ManagerURL %q: every member must use the same scheme", raw)
		}
		c.managerURLs = append(c.managerURLs, raw)
	}
	c.ManagerURL = c.managerURLs[0]
	u, _ := url.Parse(c.ManagerURL)
	if c.DataDir == "" {
		return c, errors.New("worker: DataDir is required")
	}
	if (c.TLSCAFile != "" || c.TLSCAHash != "") && u.Scheme != "https" {
		return c, fmt.Errorf("worker: a TLS CA (file or hash) is given but the Manager URL %q is not https://", c.ManagerURL)
	}
	if c.TLSCAHash != "" {
		if _, err := certpin.ParseFingerprint(c.TLSCAHash); err != nil {
			return c, fmt.Errorf("worker: %w", err)
		}
	}
	switch c.Runtime {
	case "", "docker", "process":
	default:
		return c, fmt.Errorf("worker: Runtime %q: want docker, process or empty", c.Runtime)
	}
	if c.PublishHost != "" && net.ParseIP(c.PublishHost) == nil {
		return c, fmt.Errorf("worker: PublishHost %q is not an IP address", c.PublishHost)
	}
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Version == "" {
		c.Version = "dev"
	}
	if c.RegisterRetry <= 0 {
		c.RegisterRetry = DefaultRegisterRetry
	}
	if c.ReregisterAfter <= 0 {
		c.ReregisterAfter = DefaultReregisterAfter
	}
	if c.LeaseTTL <= 0 {
		c.LeaseTTL = DefaultLeaseTTL
	}
	c.Capabilities = withJobSocketCapability(c.Capabilities, c.JobSocket)
	return c, nil
}
