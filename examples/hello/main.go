// Command hello is the "hello job": the smallest job the Norsk Manager can
// run, for first steps and for tests of the runtimes. It is static and uses
// only the standard library, so its image is FROM scratch.
//
// It serves HTTP:
//
//	GET /         one line naming the job, role, runtime role and node
//	GET /healthz  "ok"
//
// It logs (log/slog, text, to stderr) a line when it starts, a heartbeat
// every 10 s, and a line when it stops. On SIGTERM or SIGINT it shuts the
// HTTP server down gracefully (at most 5 s) and exits 0; it exits 1 when it
// cannot listen.
//
// Environment:
//
//	NORSK_JOB_ID, NORSK_ROLE, NORSK_RUNTIME_ROLE, NORSK_NODE_ID
//	                 set by the worker; shown in logs and in GET /
//	NORSK_PORT_8080  the process runtime's convention for "container port
//	                 8080": the host port to listen on. Wins over PORT.
//	PORT             the port to listen on when NORSK_PORT_8080 is unset;
//	                 default 8080. 0 picks a free port (logged at start).
//
// A port value may also be a full listen address ("127.0.0.1:9000").
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

const (
	// ContainerPort is the port the image exposes.
	ContainerPort = 8080
	// heartbeatInterval is how often a heartbeat line is logged.
	heartbeatInterval = 10 * time.Second
	// shutdownGrace bounds the graceful HTTP shutdown.
	shutdownGrace = 5 * time.Second
)

func main() {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := run(ctx, os.Getenv, log); err != nil {
		log.Error("hello failed", "err", err)
		os.Exit(1)
	}
}

// identity is what the worker tells the job about itself.
type identity struct {
	JobID, Role, RuntimeRole, NodeID string
}

func identityFromEnv(getenv func(string) string) identity {
	return identity{
		JobID:       getenv("NORSK_JOB_ID"),
		Role:        getenv("NORSK_ROLE"),
		RuntimeRole: getenv("NORSK_RUNTIME_ROLE"),
		NodeID:      getenv("NORSK_NODE_ID"),
	}
}

// listenAddr returns the address to listen on: NORSK_PORT_8080, else PORT,
// else ":8080". A bare port becomes ":port".
func listenAddr(getenv func(string) string) string {
	v := strings.TrimSpace(getenv(fmt.Sprintf("NORSK_PORT_%d", ContainerPort)))
	if v == "" {
		v = strings.TrimSpace(getenv("PORT"))
	}
	if v == "" {
		v = fmt.Sprint(ContainerPort)
	}
	if !strings.Contains(v, ":") {
		v = ":" + v
	}
	return v
}

// handler serves GET / and GET /healthz, counting requests in served.
func handler(id identity, served *atomic.Uint64) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintf(w, "hello from job %s role %s (runtime role %s) on node %s\n",
			orUnset(id.JobID), orUnset(id.Role), orUnset(id.RuntimeRole), orUnset(id.NodeID))
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	return mux
}

func orUnset(s string) string {
	if s == "" {
		return "(unset)"
	}
	return s
}

// run serves until ctx ends, then shuts down gracefully and returns nil. It
// returns an error when it cannot listen or the server fails.
func run(ctx context.Context, getenv func(string) string, log *slog.Logger) error {
	id := identityFromEnv(getenv)
	log = log.With("job", id.JobID, "role", id.Role, "runtime_role", id.RuntimeRole)
	ln, err := net.Listen("tcp", listenAddr(getenv))
	if err != nil {
		return err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	var served atomic.Uint64
	srv := &http.Server{
		Handler:           handler(id, &served),
		ReadHeaderTimeout: 10 * time.Second,
	}
	started := time.Now()
	log.Info("hello started", "node", id.NodeID, "addr", ln.Addr().String(), "port", port, "pid", os.Getpid())

	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()

	tick := time.NewTicker(heartbeatInterval)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			log.Info("heartbeat", "uptime", time.Since(started).Round(time.Second), "requests", served.Load())
		case err := <-errc:
			return fmt.Errorf("http server: %w", err)
		case <-ctx.Done():
			log.Info("hello stopping", "cause", context.Cause(ctx))
			sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
			defer cancel()
			if err := srv.Shutdown(sctx); err != nil {
				log.Warn("graceful shutdown incomplete", "err", err)
				_ = srv.Close()
			}
			if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
				log.Warn("http server", "err", err)
			}
			log.Info("hello stopped", "uptime", time.Since(started).Round(time.Millisecond), "requests", served.Load())
			return nil
		}
	}
}
