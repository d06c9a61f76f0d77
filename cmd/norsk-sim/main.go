// Command norsk-sim simulates thousands of worker nodes in one process,
// speaking the real NodeController protocol to a real three-member Manager
// cluster (started here as three member processes, or running already and
// named with -managers), and measures the primary: memory per node and per
// job, CPU per heartbeat, the time to place and run jobs in bundles, the
// event stream's delivery to subscribers, and a failover of the primary
// during it (see docs/simulation.md).
//
//	go run ./cmd/norsk-sim -nodes 10000 -jobs 100000 -subscribers 100 -failover
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/norsk-go/norsk-manager/internal/sim"
	"github.com/norsk-go/norsk-manager/internal/sim/proccluster"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "member" {
		if err := proccluster.MemberMain(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "norsk-sim:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		nodes       = flag.Int("nodes", 1000, "simulated nodes")
		jobs        = flag.Int("jobs", 10000, "jobs, created in bundles")
		perBundle   = flag.Int("jobs-per-bundle", 10, "jobs per bundle (at most 64)")
		capacity    = flag.Float64("capacity", 0.1, "each job's required capacity (vCPUs)")
		vcpus       = flag.Uint("vcpus", 16, "each node's vCPUs")
		subscribers = flag.Int("subscribers", 0, "event-stream subscribers during the jobs")
		subWait     = flag.Duration("subscriber-wait", 0, "once every instance runs, the most time to wait for the subscribers to see every job running (0: while they make progress)")
		failover    = flag.Bool("failover", false, "take the primary away (SIGKILL) half way through the jobs, and start it again")
		failoverAt  = flag.Float64("failover-at", 0.5, "the fraction of jobs running when the primary is taken away")
		startDelay  = flag.Duration("start-delay", 0, "how long a simulated instance takes to start")
		perNodeAddr = flag.Bool("per-node-address", true, "give every node its own loopback address (one TCP connection per node, as with real workers); false: every node shares one")
		maxFrame    = flag.Int("max-read-frame", 0, "the HTTP/2 max frame size the nodes' listener advertises (0: a worker's, 16 KiB; -1: Go's default, 1 MiB)")
		idle        = flag.Duration("idle", 10*time.Second, "how long the idle fleet's heartbeats are measured")
		parallel    = flag.Int("parallel", 32, "API calls in flight at once")
		managers    = flag.String("managers", "", "comma-separated API URLs of a running cluster (default: start three members here)")
		token       = flag.String("token", os.Getenv("NORSK_TOKEN"), "admin token of the running cluster (-managers)")
		dir         = flag.String("dir", "", "the local cluster's directory (default: a temporary one, removed at the end)")
		heartbeat   = flag.Duration("heartbeat", 0, "the local cluster's heartbeat interval (0: the Manager's default)")
		lostGrace   = flag.Duration("lost-grace", 0, "the local cluster's lost grace (0: the Manager's default)")
		raftTimeout = flag.Duration("raft-timeout", 0, "the local cluster's raft heartbeat and election timeouts (0: the Manager's defaults, 500 ms)")
		cpuprofile  = flag.String("cpuprofile", "", "write the primary's CPU profile over the jobs phase to this file (local cluster)")
		profileFor  = flag.Duration("cpuprofile-for", 30*time.Second, "how long the primary is profiled from the first CreateBundle")
		simProfile  = flag.String("sim-cpuprofile", "", "write the simulator's own CPU profile to this file")
		verbose     = flag.Bool("v", false, "log progress")
	)
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelInfo
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	if *simProfile != "" {
		f, err := os.Create(*simProfile)
		if err != nil {
			return err
		}
		defer func() { _ = f.Close() }()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}

	var cluster sim.Cluster
	var local *proccluster.Cluster
	if *managers != "" {
		if *failover {
			return fmt.Errorf("-failover needs the local cluster: this command cannot kill a member it did not start")
		}
		cluster = remote{urls: strings.Split(*managers, ","), token: *token}
	} else {
		d := *dir
		if d == "" {
			tmp, err := os.MkdirTemp("", "norsk-sim-")
			if err != nil {
				return err
			}
			defer func() { _ = os.RemoveAll(tmp) }()
			d = tmp
		}
		logger.Info("starting three members", "dir", d)
		c, err := proccluster.Start(ctx, proccluster.Options{Dir: d, HeartbeatInterval: *heartbeat, LostGrace: *lostGrace, RaftTimeout: *raftTimeout})
		if err != nil {
			return err
		}
		defer func() {
			if err := c.Close(); err != nil {
				logger.Warn("close the cluster", "err", err)
			}
		}()
		cluster, local = c, c
	}

	var profWG sync.WaitGroup
	defer profWG.Wait()
	opts := sim.Options{
		Nodes: *nodes, Jobs: *jobs, JobsPerBundle: *perBundle, Capacity: *capacity, Subscribers: *subscribers, SubscriberWait: *subWait,
		Failover: *failover, FailoverAt: *failoverAt, IdleWindow: *idle, Parallel: *parallel, Logger: logger,
		Fleet: sim.Config{StartDelay: *startDelay, PerNodeAddress: *perNodeAddr, MaxReadFrameSize: *maxFrame, VCPUs: uint32(*vcpus), Logger: logger},
	}
	if *cpuprofile != "" && local != nil {
		opts.JobsStarting = func(primary string) {
			profWG.Add(1)
			go func() {
				defer profWG.Done()
				f, err := os.Create(*cpuprofile)
				if err != nil {
					logger.Warn("cpu profile", "err", err)
					return
				}
				defer func() { _ = f.Close() }()
				if err := local.CPUProfile(ctx, primary, *profileFor, f); err != nil {
					logger.Warn("cpu profile of the primary", "member", primary, "err", err)
				}
			}()
		}
	}
	res, err := sim.Run(ctx, cluster, opts)
	if res != nil {
		res.Write(os.Stdout)
	}
	if err != nil {
		return err
	}
	if !res.OK() {
		return fmt.Errorf("something was lost or started twice")
	}
	return nil
}
