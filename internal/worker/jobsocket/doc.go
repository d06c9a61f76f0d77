// Package jobsocket is the worker's side of the job sockets: one Unix
// socket per instance (gRPC over cleartext HTTP/2, the JobSocket service),
// the job's Attach stream on it, and the relay of the handover migration's
// handshake between the Manager's migration commands and the job, whose
// answers it reports as MigrationReports. pkg/jobsocket is the job's
// client of the same protocol.
//
// A worker makes one Sockets with New (its directory made 0700). The
// instance actors (internal/worker/instance) Open an instance's socket
// before its services are created and Remove it once it has stopped; the
// agent routes the migration commands to GetState, CutoverReady,
// CutoverApply and Abort, each answered through its reply function
// (internal/worker/ack), and CloseAll ends everything when the worker's
// Run ends. See sockets.go for paths and lifetime, migration.go for the
// handshake, its locking and aborts, and docs/job-socket.md.
package jobsocket
