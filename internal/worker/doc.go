// Package worker is the worker agent: one per node. It registers with the
// Manager, serves the NodeController stream the Manager dials back on, runs
// job instances with a container runtime (internal/runtime), supervises their
// services under their restart policies, and reports every phase change.
//
// # Contract
//
// An Agent is made with New and driven by Run. Run returns nil when its
// context ends: the instances keep running (a worker restart never stops
// them) and a new Agent over the same DataDir adopts them. Run returns
// ErrTerminated or ErrDeregistered, after stopping every instance, when the
// Manager terminates the node (a Terminate command) or has deregistered it
// (the Manager keeps refusing the node secret; see Registration). Every
// goroutine an Agent
// starts has ended when Run returns. Several Agents may run in one process.
//
// # Registration
//
// Run first takes DataDir/worker.lock (an exclusive flock holding the pid):
// a second worker over the directory fails with *DataDirInUseError naming
// that pid; LockHolder tells whether one runs. DataDir/identity.json holds
// {nodeId, nodeSecret, managerUrl, clusterId} (0600, written atomically).
// Each Agent has an incarnation (Incarnation), sent at registration and in
// its hello: while the Manager holds a live stream with another process of
// the node, it refuses this one's registration (ALREADY_EXISTS,
// node-held-by-live-worker), which keeps asking, instances untouched, and
// takes the node over once the other is gone. The cluster id the Manager
// gives (registration answer, hello) is kept and given to the runtime; a
// Manager of another cluster is refused (see cluster.go, decision 0027). Without it the Agent registers (ClusterMemberRegister) with
// Config.Token; a refusal (an UNAUTHENTICATED gRPC status) is fatal:
// ErrTokenRefused. With it the Agent registers with the node secret. The
// slot counts as deregistered (every instance is stopped, the identity
// deleted) only when the Manager itself refuses the secret — an
// UNAUTHENTICATED gRPC status saying the node secret is not known — at least
// 3 times over at least ReregisterAfter, with no success between. A bare HTTP
// 401 (a proxy, an ingress, another service on the port) is never taken for
// a refusal, of a token or a secret. Network errors and other refusals are
// retried with a jittered backoff (250 ms doubling to RegisterRetry), and
// instances keep running meanwhile. While no Control stream has been up for
// ReregisterAfter the Agent registers again, with backoff, so a restarted
// Manager learns where to dial.
//
// # Instances
//
// The instances (keyed by job id and role, held under fencing tokens, one
// actor each), their records, supervision under restart policies and
// adoption after a worker restart are internal/worker/instance; its
// package comment states their contract. The agent routes the Manager's
// commands to them and acknowledges each after the reports it caused.
//
// # Leases
//
// Instances of lease-protected jobs (Job.lease_protected) run only while the
// worker holds a lease. Every heartbeat carries its send time
// (Heartbeat.sent_mono_ms, on the agent's clock since it started, plus one);
// a stream's first heartbeat follows its hello at once. The primary answers
// each with a LeaseGrant: the lease then runs until that send time plus the
// grant's TTL. Two thirds of the TTL after the newest granted heartbeat was
// sent, with no newer grant, every lease-protected instance is stopped
// (NODE_STOPPED, "lease expired: …") and stays stopped, unless the last
// grant said leases are paused. Until the first grant the lease runs from
// the agent's start with Config.LeaseTTL. Other instances are never
// touched. See lease.go.
//
// # Job sockets
//
// With Config.JobSocket the worker advertises the capability
// jobsocket.Capability ("jobSocket", count 1) and serves every instance it
// runs a job socket: a Unix socket (gRPC over cleartext HTTP/2, the
// JobSocket service) made before the instance's services are, named to the
// services in NORSK_JOB_SOCKET (for containers, the socket's directory is
// mounted read-only at /run/norsk), re-made at the same path when a new
// worker adopts the instance, and removed when the instance stops. Over it
// the worker relays the handover migration's handshake between the
// Manager's migration_* commands and the job, and reports the job's answers
// as MigrationReports; see internal/worker/jobsocket (paths, lifetime,
// the handshake, its locking and aborts), jobsockets.go (the commands'
// routing), migration_report.go (reports while no stream is up) and
// docs/job-socket.md.
//
// # Images
//
// With a runtime that holds images (docker, runtime.Images) the worker
// reports every image it holds in its hello and, whenever the engine's image
// events say they changed (or a container was created from one), the whole
// inventory again (WorkerMessage.images), with when this worker last used
// each (DataDir/images.json). A prefetch_images command is acknowledged at
// once; the refs are pulled one after the other and each outcome is sent as
// WorkerMessage.prefetched with the inventory after it (kept for the next
// stream while none is up). A start's pulls go to the job's history as
// image-pull notices. See internal/worker/images.
//
// This package imports nothing of the Manager's side.
package worker
