package proccluster

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/norsk-go/norsk-manager/internal/manager"
)

// statsReply is a member process's stats endpoint's answer.
type statsReply struct {
	HeapBytes  uint64 `json:"heapBytes"`
	CPUNanos   int64  `json:"cpuNanos"`
	Goroutines int    `json:"goroutines"`
}

// MemberMain runs one member until SIGTERM or SIGINT (the simulator's
// "member" subcommand; its arguments are the ones Start passes).
func MemberMain(args []string) error {
	fs := flag.NewFlagSet("member", flag.ContinueOnError)
	name := fs.String("name", "", "member name")
	dir := fs.String("dir", "", "data directory")
	api := fs.String("api", "", "API listen address")
	raftAddr := fs.String("raft", "", "raft listen address")
	stats := fs.String("stats", "", "stats listen address")
	peers := fs.String("peers", "", "every member: name=raft=api, comma-separated")
	token := fs.String("token", "", "bootstrap admin token")
	secret := fs.String("secret", "", "cluster secret")
	heartbeat := fs.Duration("heartbeat", 0, "heartbeat interval workers are told (0: the Manager's default)")
	lostGrace := fs.Duration("lost-grace", 0, "lost grace (0: the Manager's default)")
	logLevel := fs.String("log-level", "warn", "log level")
	raftTimeout := fs.Duration("raft-timeout", 0, "raft heartbeat and election timeouts (0: the Manager's defaults)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(*logLevel)); err != nil {
		return fmt.Errorf("member: --log-level: %w", err)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl})).With("process", *name)
	var nodes []manager.ClusterNode
	for _, p := range strings.Split(*peers, ",") {
		f := strings.Split(p, "=")
		if len(f) != 3 {
			return fmt.Errorf("member: bad peer %q (want name=raft=api)", p)
		}
		nodes = append(nodes, manager.ClusterNode{Name: f[0], Raft: f[1], API: "http://" + f[2]})
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	sln, err := net.Listen("tcp", *stats)
	if err != nil {
		return fmt.Errorf("member: stats listener: %w", err)
	}
	ssrv := &http.Server{Handler: statsMux(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = ssrv.Serve(sln) }()
	defer func() { _ = ssrv.Close() }()

	srv, err := manager.New(ctx, manager.Config{
		NodeName:             *name,
		DataDir:              *dir,
		Listen:               *api,
		TLS:                  "off",
		ClusterNodes:         nodes,
		ClusterState:         manager.ClusterStateNew,
		ClusterSecret:        *secret,
		RaftListen:           *raftAddr,
		RaftAdvertise:        *raftAddr,
		BootstrapToken:       *token,
		RateLimit:            1e9, // the simulator is one caller making every call
		HeartbeatInterval:    *heartbeat,
		LostGrace:            *lostGrace,
		BackupInterval:       -1,
		RaftHeartbeatTimeout: *raftTimeout,
		RaftElectionTimeout:  *raftTimeout,
		Logger:               logger,
	})
	if err != nil {
		return fmt.Errorf("member %s: %w", *name, err)
	}
	<-ctx.Done()
	if err := srv.Close(); err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("member %s: close: %w", *name, err)
	}
	return nil
}

// statsMux serves GET /stats (a forced collection first) and pprof.
func statsMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, _ *http.Request) {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		var ru syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(statsReply{
			HeapBytes:  ms.HeapAlloc,
			CPUNanos:   ru.Utime.Nano() + ru.Stime.Nano(),
			Goroutines: runtime.NumGoroutine(),
		})
	})
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	return mux
}
