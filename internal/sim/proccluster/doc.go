// Package proccluster runs a Manager cluster for the simulator as separate
// processes on this machine: each member is the simulator's own executable
// re-run as "member" (MemberMain), which starts the real manager.New with
// its store on disk and serves, beside the Manager's API, a small stats
// endpoint of its own process (live heap after a forced collection, CPU
// time, goroutines; and net/http/pprof). Members in their own processes
// give the primary's memory and CPU alone, and a primary can be killed
// with SIGKILL like a crashed daemon and started again.
package proccluster
