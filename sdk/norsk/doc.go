// Package norsk is the Go SDK of the Norsk Manager: the NorskManager client
// API of the seeds, one method per RPC of the norsk.manager.v1.Manager
// service.
//
// Connect dials a Manager, checks that its wire protocol is compatible with
// this SDK (see ProtocolVersion) and returns a *Manager:
//
//	m, err := norsk.Connect(ctx, norsk.Settings{URL: "http://127.0.0.1:6790"})
//	if err != nil { ... }
//	defer m.Close()
//	hash, err := m.CreateJob(ctx, job)
//
// As the seed's hello and version properties, Hello and Version are known
// once Connect returns; Skew says how the Manager's protocol compares with
// this SDK's, and a call an older Manager predates is refused with
// ErrUnimplemented before it is sent. Store indexes, revisions and fencing
// tokens are uint64 throughout.
//
// The API messages are the generated protobuf types, re-exported here as type
// aliases (Job, JobWithHistory, Node, ClusterSlot, Event, …) so that one import
// is enough.
//
// Every method returns either nil or an error that matches one of the
// sentinel errors (ErrNotFound, ErrFailedPrecondition, …) under errors.Is and
// is an *Error carrying the status code and the server's message under
// errors.As.
//
// EventStream follows the Manager's event stream and resumes by itself after
// a disconnect, so that its consumer sees every event exactly once and in
// order. DecodeJobSpec reads a job specification written in YAML or JSON.
//
// The Manager cluster's calls (AddClusterMember, RemoveClusterMember,
// ForceStandalone, LeaveQuorum, GetClusterStatus, GetClusterEvents,
// AnnounceControlPlane) reach the member connected to. Reads are served from
// that member's own copy of the store, which on a follower may trail the
// primary by a few milliseconds; Linearizable(ctx) makes one read
// linearizable, Settings.LinearizableReads every read (ConsistencyHeader).
//
// The package imports nothing of the Manager's internals; a fake Manager for
// unit tests is in package norsktest. The fake checks input with the
// Manager's own rules (package pkg/jobspec) and refuses with its codes
// (pkg/apierr), and tests/sdkcontract runs one suite of this package's
// behaviour against both, so a test that passes on the fake relies only on
// what the Manager does too.
package norsk
