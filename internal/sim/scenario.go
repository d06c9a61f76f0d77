package sim

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// Options configure a scenario.
type Options struct {
	// Nodes, Jobs and JobsPerBundle: the fleet's size, and the jobs
	// created in bundles of JobsPerBundle (default 10; at most 64).
	Nodes, Jobs, JobsPerBundle int
	// Capacity is each job's required capacity in vCPUs (default 0.1).
	Capacity float64
	// Subscribers follow the event stream while the jobs are placed.
	Subscribers int
	// SubscriberWait bounds the wait, once every instance runs, for the
	// subscribers to see every job running (0: as long as they make
	// progress; two minutes without any ends it).
	SubscriberWait time.Duration
	// Failover takes the primary away once FailoverAt of the jobs
	// (default 0.5) are running on the fleet, and brings it back once
	// another member is primary.
	Failover   bool
	FailoverAt float64
	// IdleWindow is how long the idle fleet's heartbeats are measured
	// (default 10 s).
	IdleWindow time.Duration
	// Parallel is how many API calls the scenario makes at once (default
	// 32).
	Parallel int
	// Fleet configures the simulated nodes (ManagerURLs is filled in).
	Fleet Config
	// Prefix names the nodes and bundles (default "sim").
	Prefix string
	// Logger receives progress lines (default: discarded).
	Logger *slog.Logger
	// JobsStarting, if set, is called (on Run's goroutine; it must not
	// block) just before the first CreateBundle, with the primary's name:
	// a caller can start profiling it.
	JobsStarting func(primary string)
}

func (o *Options) defaults() {
	if o.JobsPerBundle <= 0 {
		o.JobsPerBundle = 10
	}
	if o.Capacity <= 0 {
		o.Capacity = 0.1
	}
	if o.FailoverAt <= 0 || o.FailoverAt >= 1 {
		o.FailoverAt = 0.5
	}
	if o.IdleWindow <= 0 {
		o.IdleWindow = 10 * time.Second
	}
	if o.Parallel <= 0 {
		o.Parallel = 32
	}
	if o.Prefix == "" {
		o.Prefix = "sim"
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// Result is what a scenario measured.
type Result struct {
	Options Options
	// Primary is the member that was primary when the nodes registered;
	// FinalPrimary the one at the end.
	Primary, FinalPrimary string

	// Registration: the time from the first slot to every node online.
	Register time.Duration
	// Heap of the primary (after a forced collection) before the nodes,
	// with every node online, and at the end (the final primary's);
	// FinalBase is the final primary's with every node online.
	HeapBase, HeapNodes, HeapEnd, HeapFinalBase uint64
	Shared                                      bool

	// Idle heartbeats: the primary's CPU over the window, the heartbeats
	// the fleet sent in it.
	IdleCPU        time.Duration
	IdleWindow     time.Duration
	IdleHeartbeats int64

	// Jobs: from the first CreateBundle to every instance running on the
	// fleet (Placed), and to the last subscriber having seen every job's
	// running entry (Seen; zero without subscribers, or if one never did).
	Bundles int
	Placed  time.Duration
	Seen    time.Duration

	// Failover: when the primary was taken away (since the first
	// CreateBundle), how long until another member was primary, and until
	// every node had a stream with it again.
	FailoverAt     time.Duration
	FailoverNewP   time.Duration
	FailoverStream time.Duration

	// Starts is the fleet's count of starts per instance; Running the
	// instances running on it at the end.
	Starts  Starts
	Running int64

	Subscribers []SubscriberStats
	// CreateRetries: CreateBundle calls retried (a member away).
	CreateRetries int64
	// AutoManager is the final primary's AutoManager metrics at the end
	// (its term only), by series without the norsk_automanager_ prefix;
	// nil when they could not be read.
	AutoManager map[string]float64
	// Manager is the final primary's norsk_manager_ metrics at the end (the
	// event window's among them), by series without the prefix; nil when
	// they could not be read.
	Manager map[string]float64
}

// Run runs a scenario against c: it registers opts.Nodes simulated nodes,
// measures the primary, creates opts.Jobs jobs in bundles while
// subscribers follow the event stream (and, with Failover, the primary is
// taken away half way), and waits until every instance runs on the fleet.
// It returns what it measured; an error means the scenario could not
// finish (the figures gathered so far are in the Result).
func Run(ctx context.Context, c Cluster, opts Options) (*Result, error) {
	opts.defaults()
	res := &Result{Options: opts}
	// The failover's goroutine ends before Run returns: ctx is cancelled
	// first (deferred last), then it is waited for.
	var failWG sync.WaitGroup
	defer failWG.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	log := opts.Logger
	members := c.Members()
	if len(members) == 0 {
		return res, errors.New("sim: the cluster has no member")
	}
	var clients []*norsk.Manager
	var eventClients []*eventClient
	byName := map[string]*norsk.Manager{}
	for _, m := range members {
		base, err := norsk.NormalizeURL(m.URL)
		if err != nil {
			return res, fmt.Errorf("sim: member %s: %w", m.Name, err)
		}
		// One connection per member, shared by the SDK's calls and the
		// subscribers' streams.
		hc := httpClient(base)
		defer hc.CloseIdleConnections()
		cl, err := dial(ctx, base, c.Token(), hc)
		if err != nil {
			return res, err
		}
		defer func() { _ = cl.Close() }()
		clients = append(clients, cl)
		eventClients = append(eventClients, newEventClient(hc, base, c.Token()))
		byName[m.Name] = cl
	}
	primary, err := waitPrimary(ctx, clients, "")
	if err != nil {
		return res, err
	}
	res.Primary = primary
	base, err := c.Stats(ctx, primary)
	if err != nil {
		return res, err
	}
	res.HeapBase, res.Shared = base.HeapBytes, base.Shared

	fcfg := opts.Fleet
	for _, m := range members {
		fcfg.ManagerURLs = append(fcfg.ManagerURLs, m.URL)
	}
	fleet, err := New(fcfg)
	if err != nil {
		return res, err
	}
	defer func() { _ = fleet.Close() }()

	// Nodes: a slot each (through the members in turn), then the node's
	// own registration with the slot's token.
	log.Info("registering nodes", "nodes", opts.Nodes, "listener", fleet.Addr())
	start := time.Now()
	err = parallel(ctx, opts.Nodes, opts.Parallel, func(ctx context.Context, i int) error {
		return registerNode(ctx, clients, fleet, fmt.Sprintf("%s-n%05d", opts.Prefix, i), i)
	})
	if err != nil {
		return res, err
	}
	if err := waitFor(ctx, func() bool { return fleet.Stats().Connected >= int64(opts.Nodes) }); err != nil {
		return res, fmt.Errorf("wait for every node's stream (%d of %d up): %w", fleet.Stats().Connected, opts.Nodes, err)
	}
	pcl := byName[primary]
	if pcl == nil {
		pcl = clients[0] // a running cluster's members named by URL only
	}
	if err := waitOnline(ctx, pcl, opts.Nodes); err != nil {
		return res, err
	}
	res.Register = time.Since(start)
	log.Info("every node online", "took", res.Register)

	// The idle fleet: memory per node, CPU per heartbeat.
	time.Sleep(2 * time.Second)
	st, err := c.Stats(ctx, primary)
	if err != nil {
		return res, err
	}
	res.HeapNodes = st.HeapBytes
	hb0, cpu0, t0 := fleet.Stats().Heartbeats, st.CPU, time.Now()
	time.Sleep(opts.IdleWindow)
	st, err = c.Stats(ctx, primary)
	if err != nil {
		return res, err
	}
	res.IdleCPU, res.IdleWindow, res.IdleHeartbeats = st.CPU-cpu0, time.Since(t0), fleet.Stats().Heartbeats-hb0
	log.Info("idle heartbeats measured", "cpu", res.IdleCPU, "heartbeats", res.IdleHeartbeats, "window", res.IdleWindow)
	// Every member's heap with the nodes online, for the final primary's
	// per-job figure after a failover.
	nodeHeaps := map[string]uint64{}
	for _, m := range members {
		if s, err := c.Stats(ctx, m.Name); err == nil {
			nodeHeaps[m.Name] = s.HeapBytes
		}
	}

	// Subscribers, on every member in turn.
	jobs := &jobIndex{prefix: opts.Prefix, perBundle: min(opts.JobsPerBundle, 64), n: opts.Jobs}
	res.Bundles = jobs.bundles()
	subCtx, stopSubs := context.WithCancel(ctx)
	var subs []*subscriber
	var subWG sync.WaitGroup
	defer subWG.Wait()
	defer stopSubs() // before the wait: deferred calls run last first
	for i := range opts.Subscribers {
		s := newSubscriber(eventClients, i, jobs)
		es := s.ready(subCtx)
		subs = append(subs, s)
		subWG.Add(1)
		go func() {
			defer subWG.Done()
			s.run(subCtx, es)
		}()
	}

	// The failover, once FailoverAt of the jobs run.
	start = time.Now()
	failErr := make(chan error, 1)
	if opts.Failover {
		failWG.Add(1)
		go func() {
			defer failWG.Done()
			failErr <- failover(ctx, c, clients, fleet, opts, primary, start, res, log, func(member int) {
				for _, s := range subs {
					s.leave(member)
				}
			})
		}()
	}

	log.Info("creating bundles", "bundles", res.Bundles, "jobs", opts.Jobs)
	if opts.JobsStarting != nil {
		opts.JobsStarting(primary)
	}
	var retries atomic.Int64
	err = parallel(ctx, res.Bundles, opts.Parallel, func(ctx context.Context, i int) error {
		return retry(ctx, func(attempt int) error {
			if attempt > 0 {
				retries.Add(1)
			}
			_, err := clients[(i+attempt)%len(clients)].CreateBundle(ctx, jobs.bundle(i, opts.Capacity))
			if attempt > 0 && errors.Is(err, norsk.ErrAlreadyExists) {
				return nil // an earlier attempt was committed, its answer lost
			}
			return err
		})
	})
	res.CreateRetries = retries.Load()
	if err != nil {
		return res, fmt.Errorf("create bundles (%d running on the fleet): %w", fleet.Stats().Running, err)
	}
	log.Info("bundles created", "took", time.Since(start))
	lastLog := time.Now()
	err = waitFor(ctx, func() bool {
		if time.Since(lastLog) > 5*time.Second {
			lastLog = time.Now()
			log.Info("waiting for every instance to run", "running", fleet.Stats().Running, "of", opts.Jobs)
		}
		return fleet.Stats().Running >= int64(opts.Jobs)
	})
	res.Placed = time.Since(start)
	if err != nil {
		return res, fmt.Errorf("wait for every instance to run (%d of %d): %w", fleet.Stats().Running, opts.Jobs, err)
	}
	log.Info("every instance running on the fleet", "took", res.Placed)
	failWG.Wait()
	if opts.Failover {
		if err := <-failErr; err != nil {
			return res, err
		}
	}
	if len(subs) > 0 {
		// Subscribers behind the fleet get the time they need while they
		// catch up: only two minutes in which none of them received a
		// job's running entry ends the wait.
		seen, progress, since := -1, time.Now(), time.Now()
		_ = waitFor(ctx, func() bool {
			n, done := 0, true
			for _, s := range subs {
				st := s.stats()
				n += st.RunningSeen
				done = done && st.RunningSeen >= opts.Jobs
			}
			if n != seen {
				seen, progress = n, time.Now()
			}
			if time.Since(lastLog) > 5*time.Second {
				lastLog = time.Now()
				log.Info("waiting for the subscribers", "runningSeen", n, "of", opts.Jobs*len(subs))
			}
			return done || time.Since(progress) > 2*time.Minute || (opts.SubscriberWait > 0 && time.Since(since) > opts.SubscriberWait)
		})
		var last time.Time
		for _, s := range subs {
			st := s.stats()
			if st.DoneAt.IsZero() {
				last = time.Time{}
				break
			}
			if st.DoneAt.After(last) {
				last = st.DoneAt
			}
		}
		if !last.IsZero() {
			res.Seen = last.Sub(start)
		}
	}
	// Settle: nothing more should start.
	time.Sleep(2 * time.Second)
	stopSubs()
	subWG.Wait()
	for _, s := range subs {
		res.Subscribers = append(res.Subscribers, s.stats())
	}
	res.Starts = fleet.Starts()
	res.Running = fleet.Stats().Running
	final, err := waitPrimary(ctx, clients, "")
	if err != nil {
		return res, err
	}
	res.FinalPrimary = final
	res.HeapFinalBase = nodeHeaps[final]
	if opts.Failover {
		// Let the old primary catch up before the final primary is
		// measured (its heap holds what it must send it).
		time.Sleep(2 * time.Second)
	}
	if st, err := c.Stats(ctx, final); err == nil {
		res.HeapEnd = st.HeapBytes
	}
	for _, m := range members {
		if m.Name == final {
			ms, err := memberMetrics(ctx, m.URL, "norsk_automanager_", "norsk_manager_")
			if err != nil {
				opts.Logger.Warn("cannot read the member's metrics", "member", final, "err", err)
			} else {
				res.AutoManager, res.Manager = ms[0], ms[1]
			}
		}
	}
	return res, nil
}

// registerNode makes a slot (through the members in turn) and registers a
// node of the fleet with its token. A retried call may follow one that was
// committed and whose answer was lost (a member going away, a primary
// stepping down): a retried slot takes a new name, and a token refused as
// used after a retried registration is given up for a new slot (the first
// slot stays unused, never online).
func registerNode(ctx context.Context, clients []*norsk.Manager, fleet *Fleet, name string, i int) error {
	var err error
	for round := 0; round < 10; round++ {
		var slot *norsk.RegisterClusterNodeResponse
		err = retry(ctx, func(attempt int) error {
			n := name
			if round > 0 || attempt > 0 {
				n = fmt.Sprintf("%s-r%d-%d", name, round, attempt)
			}
			var err error
			slot, err = clients[(i+attempt)%len(clients)].RegisterClusterNode(ctx, n, "")
			return err
		})
		if err != nil {
			return fmt.Errorf("register slot %s: %w", name, err)
		}
		if _, err = fleet.Register(ctx, slot.GetToken()); err == nil {
			return nil
		}
		if !errors.Is(err, ErrTokenRefused) {
			return fmt.Errorf("register node %s: %w", name, err)
		}
	}
	return fmt.Errorf("register node %s: %w", name, err)
}

// failover takes the primary away once opts.FailoverAt of the jobs run on
// the fleet, and brings it back once another member is primary.
func failover(ctx context.Context, c Cluster, clients []*norsk.Manager, fleet *Fleet, opts Options, primary string, start time.Time, res *Result, log *slog.Logger, gone func(member int)) error {
	at := int64(opts.FailoverAt * float64(opts.Jobs))
	if err := waitFor(ctx, func() bool { return fleet.Stats().Running >= at }); err != nil {
		return fmt.Errorf("failover: wait for %d running: %w", at, err)
	}
	hellos := fleet.Stats().Hellos
	revive := make(chan struct{})
	var reviveOnce sync.Once
	reviveNow := func() { reviveOnce.Do(func() { close(revive) }) }
	defer reviveNow()
	res.FailoverAt = time.Since(start)
	log.Info("taking the primary away", "member", primary, "running", fleet.Stats().Running)
	if err := c.Kill(ctx, primary, revive); err != nil {
		return fmt.Errorf("failover: kill %s: %w", primary, err)
	}
	var others []*norsk.Manager
	for i, m := range c.Members() {
		if m.Name != primary {
			others = append(others, clients[i])
		} else {
			gone(i)
		}
	}
	np, err := waitPrimary(ctx, others, primary)
	if err != nil {
		return fmt.Errorf("failover: %w", err)
	}
	res.FailoverNewP = time.Since(start) - res.FailoverAt
	log.Info("new primary", "member", np, "after", res.FailoverNewP)
	reviveNow() // the old primary comes back as a follower, as after a restart
	if err := waitFor(ctx, func() bool {
		s := fleet.Stats()
		return s.Hellos-hellos >= int64(opts.Nodes) && s.Connected >= int64(opts.Nodes)
	}); err != nil {
		s := fleet.Stats()
		return fmt.Errorf("failover: wait for the nodes' streams with %s (%d hellos since the kill, %d nodes connected, of %d; without a stream: %s): %w",
			np, s.Hellos-hellos, s.Connected, opts.Nodes, strings.Join(fleet.Unconnected(5), ", "), err)
	}
	res.FailoverStream = time.Since(start) - res.FailoverAt
	log.Info("every node streams with the new primary", "after", res.FailoverStream)
	return nil
}

// httpClient is a client of the member at base as the SDK's own: HTTP/2,
// cleartext for an http URL.
func httpClient(base string) *http.Client {
	var protocols http.Protocols
	if strings.HasPrefix(base, "http://") {
		protocols.SetUnencryptedHTTP2(true)
	} else {
		protocols.SetHTTP2(true)
	}
	return &http.Client{Transport: &http.Transport{
		DialContext:     (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		Protocols:       &protocols,
		TLSClientConfig: &tls.Config{MinVersion: tls.VersionTLS12},
		HTTP2:           &http.HTTP2Config{SendPingTimeout: 30 * time.Second, PingTimeout: 15 * time.Second},
	}}
}

func dial(ctx context.Context, url, token string, hc *http.Client) (*norsk.Manager, error) {
	var cl *norsk.Manager
	err := retry(ctx, func(int) error {
		var err error
		cl, err = norsk.Connect(ctx, norsk.Settings{URL: url, Token: token, HTTPClient: hc, Logger: slog.New(slog.DiscardHandler)})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("sim: connect to %s: %w", url, err)
	}
	return cl, nil
}

// waitPrimary asks the members for the cluster's primary until one names
// a primary other than not (not may be "").
func waitPrimary(ctx context.Context, clients []*norsk.Manager, not string) (string, error) {
	var p string
	err := waitFor(ctx, func() bool {
		for _, cl := range clients {
			sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			st, err := cl.GetClusterStatus(sctx)
			cancel()
			if err == nil && st.GetPrimary() != "" && st.GetPrimary() != not {
				p = st.GetPrimary()
				return true
			}
		}
		return false
	})
	if err != nil {
		return "", fmt.Errorf("sim: wait for a primary: %w", err)
	}
	return p, nil
}

// waitOnline waits until the Manager lists n nodes online.
func waitOnline(ctx context.Context, cl *norsk.Manager, n int) error {
	online := 0
	err := waitFor(ctx, func() bool {
		nodes, err := cl.ListNodes(ctx)
		if err != nil {
			return false
		}
		online = 0
		for _, nd := range nodes {
			if nd.GetState() == norsk.NodeStateOnline {
				online++
			}
		}
		return online >= n
	})
	if err != nil {
		return fmt.Errorf("sim: wait for %d nodes online (%d): %w", n, online, err)
	}
	return nil
}

// waitFor polls cond every 50 ms until it holds or ctx ends.
func waitFor(ctx context.Context, cond func() bool) error {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}

// retry calls f until it succeeds, fails with an error that retrying
// cannot help (retryable), or ctx ends, after a growing pause.
func retry(ctx context.Context, f func(attempt int) error) error {
	wait := 20 * time.Millisecond
	for attempt := 0; ; attempt++ {
		err := f(attempt)
		if err == nil {
			return nil
		}
		if !retryable(err) || ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Second)
	}
}

func retryable(err error) bool {
	// What a member going away mid-call, or a primary changing, can
	// answer is retried; a refusal of the call itself is not.
	for _, e := range []error{norsk.ErrInvalidArgument, norsk.ErrPermissionDenied, norsk.ErrUnauthenticated,
		norsk.ErrNotFound, norsk.ErrAlreadyExists, norsk.ErrUnimplemented, norsk.ErrOutOfRange} {
		if errors.Is(err, e) {
			return false
		}
	}
	return true
}

// parallel runs f(ctx, i) for i in [0, n) on at most p goroutines, and
// returns the first error (the others are cancelled).
func parallel(ctx context.Context, n, p int, f func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(p, max(n, 1)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := f(ctx, i); err != nil {
					cancel(err)
				}
			}
		}()
	}
feed:
	for i := range n {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return ctx.Err()
}
