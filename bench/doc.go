// Package bench holds end-to-end benchmarks of the Manager, written for Go's
// benchmark harness. Each benchmark starts a real Manager member in-process
// (manager.New with its data in b.TempDir(), listening on 127.0.0.1:0, raft
// with raft-wal and one fsync per append batch, exactly as the daemon runs)
// and talks to it through the Go SDK (sdk/norsk) over the real gRPC path:
// connect-go, cleartext HTTP/2 on loopback. Client and server share the
// machine's cores, so the client's cost (SDK, HTTP/2 client) is part of
// what is measured.
//
// The benchmarks report figures; nothing here asserts a time. The package
// has no tests, so run it with -run '^$'. Each reports what was done
// (calls answered, bindings made), not what was asked for. The comparison
// with etcd on the same machine is bench/compare (make bench-compare);
// the FSM's commit cost against the store's size is commit_test.go, the
// CPU a worker heartbeat costs heartbeat_test.go.
//
// # Running
//
// Everything, with enough samples for stable percentiles (each benchmark
// takes a few seconds to a few tens of seconds on a 2-core machine):
//
//	go test ./bench -run '^$' -bench . -benchtime=5000x -count=3
//
// One benchmark, with profiles of where the time goes:
//
//	go test ./bench -run '^$' -bench 'CreateJob/clients=32' -benchtime=10000x \
//	    -cpuprofile cpu.out -mutexprofile mutex.out -blockprofile block.out
//	go tool pprof -top bench.test cpu.out
//
// Use an "Nx" -benchtime: with a time (-benchtime=5s) the harness first
// runs each benchmark with small b.N to size it, and every such run starts
// its own Manager, which makes the run long and the small runs' figures
// noisy. Each run of a benchmark function starts a fresh Manager on an
// empty store, so b.N is also the number of jobs in the store at the end;
// stay below the raft snapshot threshold (8192 entries) or accept that a
// snapshot can land in the measurement.
//
// Flags, passed after -args:
//
//	-conn=shared|per-client  BenchmarkCreateJob: one SDK connection shared by
//	                         every client goroutine (default), or one each
//	-fanout.writers=N        BenchmarkEventFanout: concurrent writers (default 4)
//
// # BenchmarkCreateJob/clients=1, /clients=32
//
// b.N CreateJob calls spread over 1 or 32 client goroutines that call as fast
// as the Manager answers (closed loop). Each job is a small valid spec (one
// service, image "bench:dev", two tags, a unique id). By default the
// goroutines share one SDK connection (one HTTP/2 connection, many
// streams), which is how a real client process (the CLI, the AutoManager,
// a controller) uses the SDK; -conn=per-client gives each goroutine its own
// connection, which models many separate client processes. Reported:
//
//	jobs/s   completed calls per second of wall time
//	p50-ms   median latency of one CreateJob, measured around the SDK call
//	p99-ms   99th percentile of the same
//	max-ms   the slowest call
//
// A CreateJob is acknowledged only after its raft entry is fsynced and
// applied, so latency at 1 client is about one fsync plus the RPC; with 32
// clients raft batches the concurrent proposals into one append and one
// fsync, which is what throughput depends on.
//
// # BenchmarkEventFanout/subscribers=100
//
// 100 event-stream subscribers (EventStream with SkipSnapshot, each with its
// own SDK connection, as 100 separate consumers such as web UIs or
// controllers would have) follow the Manager while a few writers create b.N
// jobs as fast as they can. Each CreateJob raises one jobCreated event,
// delivered to every subscriber, so 100×b.N events are delivered in all.
// Reported:
//
//	events/s         events delivered, summed over subscribers, per second
//	                 from the first write until the last subscriber has the
//	                 last event
//	writes/s         CreateJob calls per second while the writers ran
//	last-event-ms    time from the first write until the last subscriber has
//	                 the last event
//	drain-ms         of that, the time after the last write was acknowledged
//	deliver-p50-ms,  delay from a job's creation time (stamped by the
//	deliver-p99-ms   Manager) to its event's arrival at a subscriber, over
//	                 every delivered event
//	reconnects       stream reconnects during the run (a subscriber cut off
//	                 for falling behind); normally 0
//
// # BenchmarkEventDelivery/subscribers=1, /10, /100
//
// The Manager's fan-out alone (decision 0062): 1, 10 or 100 subscribers,
// each on its own HTTP/2 connection with a codec that counts messages and
// decodes none, follow a real Manager's stream (live events only) while
// b.N job events shaped like the simulator's (about 380 bytes encoded,
// built before the clock starts) are published straight into its event
// broker, ten to an index, the publisher never more than 8,192 events
// ahead of the slowest subscriber. No write path, no client decoding: the
// handler, connect, HTTP/2 on loopback and the subscribers' reading of
// frames, in one process. Reported, per event delivered to one subscriber:
//
//	cpu-µs/delivery  the process's CPU time (user + system)
//	allocs/delivery  heap allocations
//	B/delivery       bytes allocated
//	wire-B/delivery  the message's bytes as the subscriber got them
//	deliveries/s     wall-clock rate, summed over subscribers
package bench
