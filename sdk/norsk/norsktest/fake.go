// Package norsktest is a fake Norsk Manager for unit tests of code that uses
// the Go SDK (package norsk) or the CLI: an in-memory implementation of the
// norsk.manager.v1.Manager service served over cleartext HTTP/2 by an
// httptest server. It is for tests only: it keeps everything in memory,
// simulates workers instantly, and offers hooks to inject errors and to break
// event streams.
//
// The fake follows the wire contract of the proto comments: job hashes and
// fencing tokens are store indexes, every write appends events at a new
// index, and the event stream implements after_index, skip_snapshot and the
// resync snapshot of a Manager that no longer holds the events asked for.
//
// Input is checked by the Manager's own bounds table (pkg/apibounds) and
// validators (pkg/jobspec) and refused with the Manager's codes
// (pkg/apierr), so a malformed request gets the INVALID_ARGUMENT, field name
// and words the Manager gives it. A token CreateToken made may be presented
// (Settings.Token): it holds its role's permissions and no more, decided by
// the Manager's own table (pkg/apiauth), and is refused once revoked or
// expired. tests/sdkcontract runs one suite of the SDK's behaviour against
// this fake and a real Manager (decision 0045); what it checks is what a
// program may rely on from both. The fake runs no AutoManager, and its
// simulated workers confirm every start and stop at once.
//
// The audit log, the key/value store and the store calls are simple
// in-memory stand-ins, enough for unit tests of their clients: the audit log
// is a real hash chain (pkg/auditchain) with paging, filters and pruning,
// and TamperAuditEntry alters a stored entry so that a client-side check
// can be seen to catch it; KV commits check revisions and schema versions
// all or nothing and take a new index as their revision (and leave an "api"
// audit entry, as the Manager does); GetStoreInfo answers what SetStoreInfo
// set (a plain default otherwise); SnapshotSave streams a genuine
// pkg/snapshotfile snapshot of the fake's jobs, nodes, audit log and KV
// store, or the bytes SetSnapshotData gave. Nothing here is durable, and
// the fake does not audit its other calls.
//
// The Manager cluster is a small model (cluster.go): the fake is member
// MemberName, the primary of a cluster of one, and the membership calls
// (AddClusterMember, RemoveClusterMember, ForceStandalone, LeaveQuorum)
// check, refuse with the Manager's codes, and change the model;
// GetClusterStatus and GetClusterEvents report it. SetQuorumLost,
// JoinClusterMember and SetMemberReachable play the other members, and a
// call with "Norsk-Consistency: linearizable" fails with UNAVAILABLE while
// the quorum is lost, as a linearizable read does.
//
// Bundles and leases (bundles.go) follow the Manager's rules for what the
// fake holds: a bundle is validated and expanded into its replica jobs
// (tagged and named as the Manager does, dormant for manual start), start
// and stop of a bundle job flip its dormant mark, and deletion removes the
// bundle and its jobs; the fake runs no AutoManager, so nothing is placed by
// itself, and ExpireBundles plays its sweep of stop times and leases. Lease
// pauses are kept, and GetLeaseStatus reports the leases of the fake's
// lease-protected instances.
package norsktest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1/managerv1connect"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/norsk-go/norsk-manager/pkg/apiauth"
	"github.com/norsk-go/norsk-manager/pkg/apibounds"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
	"github.com/norsk-go/norsk-manager/pkg/eventsubject"
	"github.com/norsk-go/norsk-manager/pkg/jobspec"
)

// DefaultIdleExpiry is the daemon-wide idle expiry the fake reports.
const DefaultIdleExpiry = 10 * time.Minute

// StreamFault decides, before the fake sends ev as the sent-th event (from 0)
// of event-stream connection conn (from 0), whether to end that connection
// instead: a non-nil error ends it with that error (use connect.NewError for
// a status code).
type StreamFault func(conn, sent int, ev *managerv1.Event) error

// ErrEndStream, returned by a StreamFault, ends the connection cleanly (no
// error status), as a server does when it shuts down gracefully.
var ErrEndStream = errors.New("norsktest: end the stream")

// StartOutcome says what the fake's simulated worker does with a started
// instance: by default it runs (or is prepared, with defer_start) at the
// index after the binding.
type StartOutcome struct {
	// Fail, when set, makes the instance stop at once with reason job_failed
	// and this text.
	Fail string
	// Hold leaves the instance provisioned: no further history.
	Hold bool
}

// The fake answers every RPC of the Manager service.
var _ managerv1connect.ManagerHandler = (*Server)(nil)

// Server is the fake Manager. Its methods are safe for concurrent use.
type Server struct {
	// URL is the base URL of the fake ("http://127.0.0.1:port").
	URL string

	hs      *httptest.Server
	closing chan struct{}
	once    sync.Once

	mu          sync.Mutex
	now         func() time.Time
	index       uint64
	jobs        map[string]*managerv1.JobWithHistory
	nodes       map[string]*managerv1.Node
	slots       map[string]*managerv1.ClusterSlot
	secrets     map[string]string // node secret → node id
	log         []*managerv1.Event
	heldFrom    uint64 // the oldest index whose events are held
	notify      chan struct{}
	hello       *managerv1.DaemonHello
	errs        map[string]error
	fault       StreamFault
	streamConns int
	streamReqs  []*managerv1.EventStreamRequest
	token       string
	lastAuth    string
	outcome     StartOutcome
	nextID      int
	// migrations are the migration records; migCalls the relays made.
	migrations map[string]*managerv1.MigrationState
	migCalls   []MigrationCall
	// prefetchFail are the refs a prefetch fails to pull, with why.
	prefetchFail map[string]string
	// mockHosts, mockVCPUs and mockPools are the fake mock provider (SetMockHosts).
	mockHosts int
	mockVCPUs uint32
	mockPools []string
	nextPort  uint32

	// The audit log (audit_kv.go): retained entries oldest first.
	audit        []*managerv1.AuditLogEntry
	auditCkpt    *managerv1.AuditCheckpoint
	auditNextSeq int64
	auditLast    string
	auditBootOK  bool
	auditBoot    string
	// The KV store: namespace → key → entry, and schema versions.
	kv       map[string]map[string]*managerv1.KvEntry
	kvSchema map[string]int64
	// Store calls.
	storeInfo    *managerv1.StoreInfo
	snapshotData []byte
	// Tokens, discovery and access replicas (security.go).
	security *securityState
	// The Manager cluster (cluster.go), and the consistency header of the
	// last call.
	cluster         *clusterState
	lastConsistency string
	// Bundles and leases (bundles.go).
	bundles map[string]*managerv1.Bundle
	leases  leaseState
}

// NewServer starts a fake Manager and stops it when the test ends.
func NewServer(tb testing.TB) *Server {
	tb.Helper()
	s := &Server{
		closing:  make(chan struct{}),
		now:      time.Now,
		jobs:     map[string]*managerv1.JobWithHistory{},
		nodes:    map[string]*managerv1.Node{},
		slots:    map[string]*managerv1.ClusterSlot{},
		secrets:  map[string]string{},
		heldFrom: 1,
		notify:   make(chan struct{}),
		errs:     map[string]error{},
		nextPort: 32768,

		auditNextSeq: 1,
		auditBootOK:  true,
		kv:           map[string]map[string]*managerv1.KvEntry{},
		kvSchema:     map[string]int64{},
	}
	mux := http.NewServeMux()
	mux.Handle(managerv1connect.NewManagerHandler(s, connect.WithInterceptors(interceptor{s}, apibounds.Interceptor(apibounds.ManagerRequests, refuse))))
	s.hs = httptest.NewUnstartedServer(mux)
	s.hs.Config.Protocols = new(http.Protocols)
	s.hs.Config.Protocols.SetHTTP1(true)
	s.hs.Config.Protocols.SetUnencryptedHTTP2(true)
	s.hs.Start()
	s.URL = s.hs.URL
	tb.Cleanup(s.Close)
	return s
}

// Close ends every event stream and stops the server.
func (s *Server) Close() {
	s.once.Do(func() {
		close(s.closing)
		s.hs.Close()
	})
}

// SetClock makes the fake stamp times with now.
func (s *Server) SetClock(now func() time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.now = now
}

// SetHello makes Hello answer h (its compatible and skew fields are sent as
// given). Nil restores the default: the SDK's protocol (ProtocolVersion), compatible with a 1.x
// caller.
func (s *Server) SetHello(h *managerv1.DaemonHello) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hello = h
}

// SetError makes every call of the RPC method (its short name, e.g.
// "StartJob" or "EventStream") fail with err until it is cleared with nil.
func (s *Server) SetError(method string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil {
		delete(s.errs, method)
		return
	}
	s.errs[method] = err
}

// SetStreamFault installs f on every event-stream connection; nil removes it.
func (s *Server) SetStreamFault(f StreamFault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fault = f
}

// SetStartOutcome sets what later StartJob calls lead to.
func (s *Server) SetStartOutcome(o StartOutcome) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.outcome = o
}

// RequireToken makes every call without "Authorization: Bearer token" fail
// with UNAUTHENTICATED. "" turns the check off.
func (s *Server) RequireToken(token string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.token = token
}

// LastConsistency is the Norsk-Consistency header of the last call ("" when
// it had none; "linearizable" for a linearizable read).
func (s *Server) LastConsistency() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastConsistency
}

// LastAuthorization is the Authorization header of the last call.
func (s *Server) LastAuthorization() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastAuth
}

// StreamRequests returns the requests of every event-stream connection so
// far, in order.
func (s *Server) StreamRequests() []*managerv1.EventStreamRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*managerv1.EventStreamRequest, len(s.streamReqs))
	for i, r := range s.streamReqs {
		out[i] = proto.Clone(r).(*managerv1.EventStreamRequest)
	}
	return out
}

// WaitStreams blocks until n event-stream connections have been opened since
// the server started (they may have ended since), or ctx ends.
func (s *Server) WaitStreams(ctx context.Context, n int) error {
	for {
		s.mu.Lock()
		got, wait := s.streamConns, s.notify
		s.mu.Unlock()
		if got >= n {
			return nil
		}
		select {
		case <-wait:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Index is the fake's current store index.
func (s *Server) Index() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.index
}

// ForgetEventsThrough drops the events of every index up to and including
// index, as a Manager that has compacted its log: a stream resuming before
// them gets a resync snapshot.
func (s *Server) ForgetEventsThrough(index uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.heldFrom = max(s.heldFrom, index+1)
	s.log = slices.DeleteFunc(s.log, func(ev *managerv1.Event) bool { return ev.GetIndex() <= index })
}

// AppendEvents records evs at one new index (they share it) and returns it.
// The fake's state is not changed: it is for testing event consumers.
func (s *Server) AppendEvents(evs ...*managerv1.Event) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := s.nextIndex()
	for _, ev := range evs {
		ev = proto.Clone(ev).(*managerv1.Event)
		ev.Index = i
		if ev.Timestamp == nil {
			ev.Timestamp = timestamppb.New(s.now())
		}
		s.log = append(s.log, ev)
	}
	s.wake()
	return i
}

// AddNode adds an online node (a copy of n; node_id required) as a worker
// would after registering, and returns its copy.
func (s *Server) AddNode(n *managerv1.Node) *managerv1.Node {
	s.mu.Lock()
	defer s.mu.Unlock()
	n = proto.Clone(n).(*managerv1.Node)
	i := s.nextIndex()
	if n.State == managerv1.NodeState_NODE_STATE_UNSPECIFIED {
		n.State = managerv1.NodeState_NODE_STATE_ONLINE
		n.Connected = true
	}
	if n.Provider == "" {
		n.Provider = "cluster"
	}
	if n.Address == "" {
		n.Address = "127.0.0.1:7000"
	}
	n.RegisteredAt = timestamppb.New(s.now())
	n.StateSince = n.RegisteredAt
	s.nodes[n.NodeId] = n
	s.emit(i, &managerv1.Event{Kind: &managerv1.Event_NodeOnline{NodeOnline: &managerv1.NodeEvent{Node: proto.Clone(n).(*managerv1.Node)}}})
	return proto.Clone(n).(*managerv1.Node)
}

// Job returns a copy of the job id as the fake holds it, or nil.
func (s *Server) Job(id string) *managerv1.JobWithHistory {
	s.mu.Lock()
	defer s.mu.Unlock()
	if j, ok := s.jobs[id]; ok {
		return proto.Clone(j).(*managerv1.JobWithHistory)
	}
	return nil
}

// nextIndex advances the store index. Callers hold mu.
func (s *Server) nextIndex() uint64 {
	s.index++
	return s.index
}

// emit appends ev at index i and wakes the streams. Callers hold mu.
func (s *Server) emit(i uint64, ev *managerv1.Event) {
	ev.Index = i
	ev.Timestamp = timestamppb.New(s.now())
	s.log = append(s.log, ev)
	s.wake()
}

func (s *Server) wake() {
	close(s.notify)
	s.notify = make(chan struct{})
}

// interceptor checks the token (a token CreateToken made holds its role's
// permissions, decided by pkg/apiauth as the Manager decides them), injects
// the errors of SetError and refuses a linearizable read while the quorum
// is lost.
type interceptor struct{ s *Server }

// authzTable is who may call each procedure (the descriptors' `allow`).
var authzTable = func() apiauth.Table {
	t, err := apiauth.BuildTable()
	if err != nil {
		panic(err) // the descriptors are compiled in: a test of apiauth catches this
	}
	return t
}()

func (i interceptor) check(procedure string, h http.Header) error {
	s := i.s
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lastAuth = h.Get("Authorization")
	s.lastConsistency = h.Get(consistencyHeader)
	tok, isToken, err := s.callerToken(strings.TrimPrefix(s.lastAuth, "Bearer "))
	switch {
	case err != nil:
		return refuse(err)
	case isToken:
		if perms := authzTable[procedure]; !apiauth.Can(tok.GetRole(), perms...) {
			return refuse(apiauth.Denied("token:"+tok.GetName()+"/"+tok.GetId(), tok.GetRole(), procedure, perms))
		}
	case s.token != "" && s.lastAuth != "Bearer "+s.token:
		return connect.NewError(connect.CodeUnauthenticated, fmt.Errorf("missing or invalid API token"))
	}
	if err := s.errs[procedure[strings.LastIndexByte(procedure, '/')+1:]]; err != nil {
		return err
	}
	// A linearizable read needs a primary to confirm it (SetQuorumLost).
	if s.lastConsistency == "linearizable" && s.clu().primary == "" {
		return errorf(connect.CodeUnavailable, "no primary to confirm a linearizable read; retry, or read without %s", consistencyHeader)
	}
	return nil
}

func (i interceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if err := i.check(req.Spec().Procedure, req.Header()); err != nil {
			return nil, err
		}
		return next(ctx, req)
	}
}

func (i interceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (i interceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		if err := i.check(conn.Spec().Procedure, conn.RequestHeader()); err != nil {
			return err
		}
		return next(ctx, conn)
	}
}

func errorf(code connect.Code, format string, args ...any) error {
	return connect.NewError(code, fmt.Errorf(format, args...))
}

// refuse answers a domain error (pkg/apierr: the Manager's own validators
// and refusals) with the status and message the Manager answers it with;
// nil stays nil and any other error is returned as it is.
func refuse(err error) error {
	var e *apierr.Error
	if errors.As(err, &e) {
		return connect.NewError(connect.Code(e.Code.GRPCCode()), errors.New(e.Error()))
	}
	return err
}

// Hello implements the Manager service.
func (s *Server) Hello(_ context.Context, req *connect.Request[managerv1.HelloRequest]) (*connect.Response[managerv1.DaemonHello], error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hello != nil {
		return connect.NewResponse(proto.Clone(s.hello).(*managerv1.DaemonHello)), nil
	}
	major, minor := parseVersion(req.Msg.GetProtocolVersion())
	return connect.NewResponse(&managerv1.DaemonHello{
		ProtocolVersion:       norsk.ProtocolVersion,
		BuildLabel:            "norsktest",
		Skew:                  int32(protocolMinor - minor),
		Compatible:            major == 1,
		NodeName:              MemberName,
		Version:               versionInfo(),
		CallerProtocolVersion: req.Msg.GetProtocolVersion(),
	}), nil
}

// protocolMinor is the minor of the protocol the fake speaks: the SDK's.
var _, protocolMinor = parseVersion(norsk.ProtocolVersion)

func parseVersion(v string) (major, minor int) {
	a, b, _ := strings.Cut(v, ".")
	major, _ = strconv.Atoi(a)
	minor, _ = strconv.Atoi(b)
	return major, minor
}

// Version implements the Manager service.
func (s *Server) Version(context.Context, *connect.Request[managerv1.VersionRequest]) (*connect.Response[managerv1.VersionInfo], error) {
	return connect.NewResponse(versionInfo()), nil
}

// versionInfo is what Version answers and Hello carries.
func versionInfo() *managerv1.VersionInfo {
	return &managerv1.VersionInfo{
		MajorVersion: 1,
		MinorVersion: uint32(protocolMinor),
		BranchName:   "main",
		Label:        "norsktest",
		GoVersion:    runtime.Version(),
		Commit:       "0000000",
	}
}

// CreateJob implements the Manager service.
func (s *Server) CreateJob(_ context.Context, req *connect.Request[managerv1.CreateJobRequest]) (*connect.Response[managerv1.JobHash], error) {
	job := req.Msg.GetJob()
	if err := validateJob(job); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.jobs[job.JobId]; ok {
		return nil, refuse(apierr.AlreadyExistsf("job %s already exists", apierr.Quote(job.GetJobId())))
	}
	i := s.nextIndex()
	s.addJob(job, i)
	return connect.NewResponse(&managerv1.JobHash{Hash: i}), nil
}

// validateJob checks a job as CreateJob and UpdateJob do.
func validateJob(job *managerv1.Job) error {
	if err := jobspec.ValidateJob(job); err != nil {
		return refuse(err)
	}
	return refuse(jobspec.CheckLimits("job", job))
}

// requireJob checks an id (field names it) and returns its job. Callers
// hold mu.
func (s *Server) requireJob(field, id string) (*managerv1.JobWithHistory, error) {
	if err := jobspec.ValidateID(field, id); err != nil {
		return nil, refuse(err)
	}
	j, ok := s.jobs[id]
	if !ok {
		return nil, notFound("job", id)
	}
	return j, nil
}

// notFound is the Manager's NOT_FOUND for an unknown thing ("no job \"x\"").
func notFound(what, id string) error {
	return refuse(apierr.NotFoundf("no %s %s", what, apierr.Quote(id)))
}

// addJob stores a copy of job, created at index i (its hash). Callers hold
// mu and have checked that the id is free.
func (s *Server) addJob(job *managerv1.Job, i uint64) {
	job = proto.Clone(job).(*managerv1.Job)
	job.State = managerv1.JobState_JOB_STATE_PRE
	job.CurrentHash = i
	job.TerminalState = nil
	j := &managerv1.JobWithHistory{Job: job}
	s.jobs[job.JobId] = j
	entry := s.record(j, i, &managerv1.JobHistoryEntry{Event: &managerv1.JobHistoryEntry_Created{Created: &managerv1.JobCreated{}}})
	s.emit(i, &managerv1.Event{Kind: &managerv1.Event_JobCreated{JobCreated: s.jobEvent(j, entry)}})
}

// record prepends entry (stamped with index i) to j's history. Callers hold
// mu.
func (s *Server) record(j *managerv1.JobWithHistory, i uint64, entry *managerv1.JobHistoryEntry) *managerv1.JobHistoryEntry {
	entry.Index = i
	entry.Timestamp = timestamppb.New(s.now())
	j.History = append([]*managerv1.JobHistoryEntry{entry}, j.History...)
	return entry
}

// jobEvent is a job event as the Manager sends it: the job as it now is,
// without its history (a snapshot carries that), and the entry the change
// added.
func (s *Server) jobEvent(j *managerv1.JobWithHistory, entry *managerv1.JobHistoryEntry) *managerv1.JobEvent {
	v := proto.Clone(j).(*managerv1.JobWithHistory)
	v.History = nil
	return &managerv1.JobEvent{Job: v, Entry: proto.Clone(entry).(*managerv1.JobHistoryEntry)}
}

func (s *Server) jobUpdated(j *managerv1.JobWithHistory, i uint64, entry *managerv1.JobHistoryEntry) {
	entry = s.record(j, i, entry)
	s.emit(i, &managerv1.Event{Kind: &managerv1.Event_JobUpdated{JobUpdated: s.jobEvent(j, entry)}})
}

// UpdateJob implements the Manager service.
func (s *Server) UpdateJob(_ context.Context, req *connect.Request[managerv1.UpdateJobRequest]) (*connect.Response[managerv1.JobHash], error) {
	job := req.Msg.GetJob()
	if err := validateJob(job); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	j, ok := s.jobs[job.GetJobId()]
	if !ok {
		return nil, notFound("job", job.GetJobId())
	}
	if j.Job.TerminalState != nil {
		return nil, errorf(connect.CodeFailedPrecondition, "job %q is %s", job.JobId, terminalWord(j.Job.TerminalState))
	}
	if job.CurrentHash != j.Job.CurrentHash {
		return nil, errorf(connect.CodeFailedPrecondition, "job %q: stale hash %d (the job is at %d)", job.JobId, job.CurrentHash, j.Job.CurrentHash)
	}
	i := s.nextIndex()
	prev := j.Job.CurrentHash
	job = proto.Clone(job).(*managerv1.Job)
	job.State = j.Job.State
	job.CurrentHash = i
	j.Job = job
	s.jobUpdated(j, i, &managerv1.JobHistoryEntry{Event: &managerv1.JobHistoryEntry_Updated{Updated: &managerv1.JobUpdated{PreviousHash: prev, Hash: i}}})
	return connect.NewResponse(&managerv1.JobHash{Hash: i}), nil
}

func terminalWord(t *managerv1.TerminalState) string {
	if t.GetKind() == managerv1.TerminalKind_TERMINAL_KIND_FAILED {
		return "terminally failed"
	}
	return "completed"
}

// DeleteJob implements the Manager service.
func (s *Server) DeleteJob(_ context.Context, req *connect.Request[managerv1.DeleteJobRequest]) (*connect.Response[managerv1.DeleteJobResponse], error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	j, err := s.requireJob("jobId", req.Msg.GetJobId())
	if err != nil {
		return nil, err
	}
	// Its instances are stopped (decision 0006); the simulated workers
	// confirm at once.
	for _, in := range j.Instances {
		s.stopInstance(j, in, managerv1.StoppingReason_STOPPING_REASON_USER_REQUESTED, "job deleted", 0)
	}
	s.removeJob(j.Job.JobId, s.nextIndex())
	return connect.NewResponse(&managerv1.DeleteJobResponse{}), nil
}

// removeJob forgets the job id at index i. Callers hold mu.
func (s *Server) removeJob(id string, i uint64) {
	delete(s.jobs, id)
	s.emit(i, &managerv1.Event{Kind: &managerv1.Event_JobDeleted{JobDeleted: &managerv1.JobDeleted{JobId: id}}})
}

// JobById implements the Manager service.
func (s *Server) JobById(_ context.Context, req *connect.Request[managerv1.JobByIdRequest]) (*connect.Response[managerv1.JobWithHistory], error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	j, err := s.requireJob("jobId", req.Msg.GetJobId())
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(proto.Clone(j).(*managerv1.JobWithHistory)), nil
}

// JobSearch implements the Manager service.
func (s *Server) JobSearch(_ context.Context, req *connect.Request[managerv1.JobSearchRequest]) (*connect.Response[managerv1.JobSearchResponse], error) {
	match, err := jobspec.CompileFilters(req.Msg.GetFilters())
	if err != nil {
		return nil, refuse(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := make([]string, 0, len(s.jobs))
	for id := range s.jobs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	res := &managerv1.JobSearchResponse{Index: s.index}
	for _, id := range ids {
		if id <= req.Msg.GetAfterJobId() {
			continue
		}
		j := s.jobs[id]
		if !match(searchable(j)) {
			continue
		}
		j = proto.Clone(j).(*managerv1.JobWithHistory)
		if !req.Msg.GetIncludeHistory() {
			j.History = nil
		}
		res.Jobs = append(res.Jobs, j)
		if l := req.Msg.GetLimit(); l > 0 && len(res.Jobs) == int(l) {
			break
		}
	}
	return connect.NewResponse(res), nil
}

// searchable is what a search filter looks at of j: its id, tags, start
// and the times of its created and last created-or-updated entries.
func searchable(j *managerv1.JobWithHistory) jobspec.Searchable {
	out := jobspec.Searchable{ID: j.GetJob().GetJobId(), Tags: j.GetJob().GetTags()}
	if st := j.GetJob().GetStartDateTime(); st != nil {
		out.StartAt = st.AsTime()
	}
	for _, e := range j.GetHistory() { // newest first
		if out.UpdatedAt.IsZero() && (e.GetUpdated() != nil || e.GetCreated() != nil) {
			out.UpdatedAt = e.GetTimestamp().AsTime()
		}
		if e.GetCreated() != nil {
			out.CreatedAt = e.GetTimestamp().AsTime()
		}
	}
	return out
}

// StartJob implements the Manager service.
func (s *Server) StartJob(_ context.Context, req *connect.Request[managerv1.StartJobRequest]) (*connect.Response[managerv1.StartJobResponse], error) {
	r := req.Msg
	if err := jobspec.ValidateStart("", r); err != nil {
		return nil, refuse(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	j, ok := s.jobs[r.GetJobId()]
	if !ok {
		return nil, notFound("job", r.GetJobId())
	}
	n, ok := s.nodes[r.GetNodeId()]
	if !ok {
		return nil, notFound("node", r.GetNodeId())
	}
	if n.State != managerv1.NodeState_NODE_STATE_ONLINE {
		return nil, errorf(connect.CodeFailedPrecondition, "node %q is %s", n.NodeId, stateWord(n.State))
	}
	if j.Job.TerminalState != nil {
		return nil, errorf(connect.CodeFailedPrecondition, "job %q is %s", j.Job.JobId, terminalWord(j.Job.TerminalState))
	}
	if in := instance(j, r.Role); in != nil && in.Phase != managerv1.InstancePhase_INSTANCE_PHASE_STOPPED {
		return nil, errorf(connect.CodeFailedPrecondition, "instance (%s, %s) is already bound to node %q", j.Job.JobId, r.Role, in.NodeId)
	}
	f := s.nextIndex()
	opts := r.GetOptions()
	in := &managerv1.Instance{
		JobId: j.Job.JobId, Role: r.Role, NodeId: n.NodeId, FencingToken: f,
		Desired:     managerv1.InstanceDesired_INSTANCE_DESIRED_RUNNING,
		Phase:       managerv1.InstancePhase_INSTANCE_PHASE_PROVISIONED,
		RuntimeRole: cmp(opts.GetRuntimeRole(), r.Role), MigrationId: opts.GetMigrationId(),
		BoundAt: timestamppb.New(s.now()), MigrationInitialState: opts.GetMigrationInitialState(), MigrationHandover: opts.GetMigrationHandover(),
		Placement: opts.GetPlacement(),
	}
	if opts.GetDeferStart() {
		in.Desired = managerv1.InstanceDesired_INSTANCE_DESIRED_PREPARED
	}
	j.Instances = append(slices.DeleteFunc(j.Instances, func(x *managerv1.Instance) bool { return x.Role == r.Role }), in)
	j.Job.State = managerv1.JobState_JOB_STATE_ACTIVE
	ref := &managerv1.InstanceRef{Role: r.Role, NodeId: n.NodeId, FencingToken: f}
	s.jobUpdated(j, f, &managerv1.JobHistoryEntry{Event: &managerv1.JobHistoryEntry_Provisioned{Provisioned: &managerv1.InstanceProvisioned{
		Instance: ref, RuntimeRole: in.RuntimeRole, DeferStart: opts.GetDeferStart(), MigrationId: opts.GetMigrationId(),
	}}})
	switch {
	case s.outcome.Hold:
	case s.outcome.Fail != "":
		s.stopInstance(j, in, managerv1.StoppingReason_STOPPING_REASON_JOB_FAILED, s.outcome.Fail, 1)
	case opts.GetDeferStart():
		in.Phase = managerv1.InstancePhase_INSTANCE_PHASE_PREPARED
		s.jobUpdated(j, s.nextIndex(), &managerv1.JobHistoryEntry{Event: &managerv1.JobHistoryEntry_Prepared{Prepared: &managerv1.InstancePrepared{Instance: ref}}})
	default:
		s.run(j, in, n)
	}
	return connect.NewResponse(&managerv1.StartJobResponse{FencingToken: f}), nil
}

func cmp(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func stateWord(st managerv1.NodeState) string {
	return strings.ToLower(strings.TrimPrefix(st.String(), "NODE_STATE_"))
}

// instanceOn is the instance (role) of j bound to node, or the Manager's
// NOT_FOUND.
func instanceOn(j *managerv1.JobWithHistory, role, node string) (*managerv1.Instance, error) {
	id := j.GetJob().GetJobId()
	in := instance(j, role)
	switch {
	case in == nil:
		return nil, refuse(apierr.NotFoundf("job %q has no instance with role %q", id, role))
	case in.NodeId != node:
		return nil, refuse(apierr.NotFoundf("instance %s/%s is bound to node %q, not %q", id, role, in.NodeId, node))
	}
	return in, nil
}

// phaseName is an instance phase as the Manager words it ("stopping").
func phaseName(p managerv1.InstancePhase) string {
	return strings.ToLower(strings.TrimPrefix(p.String(), "INSTANCE_PHASE_"))
}

func instance(j *managerv1.JobWithHistory, role string) *managerv1.Instance {
	for _, in := range j.Instances {
		if in.Role == role {
			return in
		}
	}
	return nil
}

// run makes in running, publishing every port of the job's services.
// Callers hold mu.
func (s *Server) run(j *managerv1.JobWithHistory, in *managerv1.Instance, n *managerv1.Node) {
	host, _, _ := strings.Cut(n.Address, ":")
	ports := map[string]*managerv1.ResolvedPortMappings{}
	for _, svc := range j.Job.Services {
		var ms []*managerv1.ResolvedPortMapping
		for _, p := range svc.Ports {
			published := p.GetSpecific()
			if published == 0 {
				published = s.nextPort
				s.nextPort++
			}
			protocol := p.Protocol
			if protocol == managerv1.Protocol_PROTOCOL_ANY {
				protocol = managerv1.Protocol_PROTOCOL_TCP
			}
			ms = append(ms, &managerv1.ResolvedPortMapping{Url: fmt.Sprintf("%s:%d", host, published), Target: p.ContainerPort, Published: published, Protocol: protocol})
		}
		if len(ms) > 0 {
			ports[svc.Name] = &managerv1.ResolvedPortMappings{Mappings: ms}
		}
	}
	in.Phase = managerv1.InstancePhase_INSTANCE_PHASE_RUNNING
	in.ServicePortMappings = ports
	s.jobUpdated(j, s.nextIndex(), &managerv1.JobHistoryEntry{Event: &managerv1.JobHistoryEntry_Running{Running: &managerv1.InstanceRunning{
		Instance: &managerv1.InstanceRef{Role: in.Role, NodeId: in.NodeId, FencingToken: in.FencingToken}, ServicePortMappings: ports,
	}}})
}

// stopInstance records stopping then stopped for in. Callers hold mu.
func (s *Server) stopInstance(j *managerv1.JobWithHistory, in *managerv1.Instance, reason managerv1.StoppingReason, detail string, exit int32) {
	if in.Phase == managerv1.InstancePhase_INSTANCE_PHASE_STOPPED {
		return
	}
	ref := &managerv1.InstanceRef{Role: in.Role, NodeId: in.NodeId, FencingToken: in.FencingToken}
	in.Desired = managerv1.InstanceDesired_INSTANCE_DESIRED_STOPPED
	in.Phase = managerv1.InstancePhase_INSTANCE_PHASE_STOPPING
	in.StopReason, in.StopAdditionalReason = reason, detail
	s.jobUpdated(j, s.nextIndex(), &managerv1.JobHistoryEntry{Event: &managerv1.JobHistoryEntry_Stopping{Stopping: &managerv1.InstanceStopping{
		Instance: ref, Reason: reason, AdditionalReason: detail,
	}}})
	in.Phase = managerv1.InstancePhase_INSTANCE_PHASE_STOPPED
	in.ServicePortMappings = nil
	stopped := &managerv1.InstanceStopped{Instance: ref}
	if exit != 0 && len(j.Job.Services) > 0 {
		stopped.ExitCodes = map[string]int32{j.Job.Services[0].Name: exit}
	}
	s.jobUpdated(j, s.nextIndex(), &managerv1.JobHistoryEntry{Event: &managerv1.JobHistoryEntry_Stopped{Stopped: stopped}})
}

// StopJob implements the Manager service.
func (s *Server) StopJob(_ context.Context, req *connect.Request[managerv1.StopJobRequest]) (*connect.Response[managerv1.StopJobResponse], error) {
	r := req.Msg
	if err := jobspec.ValidateInstance("", r.GetJobId(), r.GetRole(), r.GetNodeId()); err != nil {
		return nil, refuse(err)
	}
	if err := jobspec.ValidateGrace("options.graceMs", r.GetOptions().GetGraceMs()); err != nil {
		return nil, refuse(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	j, err := s.requireJob("jobId", r.GetJobId())
	if err != nil {
		return nil, err
	}
	in, err := instanceOn(j, r.GetRole(), r.GetNodeId())
	if err != nil {
		return nil, err
	}
	if in.Phase == managerv1.InstancePhase_INSTANCE_PHASE_STOPPED {
		// Idempotent, as the Manager's: the instance is where it was asked
		// to be.
		return connect.NewResponse(&managerv1.StopJobResponse{}), nil
	}
	in.StopGraceMs = r.GetOptions().GetGraceMs()
	s.stopInstance(j, in, managerv1.StoppingReason_STOPPING_REASON_USER_REQUESTED, "", 0)
	return connect.NewResponse(&managerv1.StopJobResponse{}), nil
}

// StartPreparedJob implements the Manager service.
func (s *Server) StartPreparedJob(_ context.Context, req *connect.Request[managerv1.StartPreparedJobRequest]) (*connect.Response[managerv1.StartPreparedJobResponse], error) {
	r := req.Msg
	if err := jobspec.ValidateInstance("", r.GetJobId(), r.GetRole(), r.GetNodeId()); err != nil {
		return nil, refuse(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	j, err := s.requireJob("jobId", r.GetJobId())
	if err != nil {
		return nil, err
	}
	in, err := instanceOn(j, r.GetRole(), r.GetNodeId())
	if err != nil {
		return nil, err
	}
	switch in.Desired {
	case managerv1.InstanceDesired_INSTANCE_DESIRED_RUNNING:
		// Idempotent, as the Manager's: it was started already.
		return connect.NewResponse(&managerv1.StartPreparedJobResponse{}), nil
	case managerv1.InstanceDesired_INSTANCE_DESIRED_STOPPED:
		return nil, refuse(apierr.FailedPreconditionf("instance %s/%s is %s; only a prepared instance can be started", r.GetJobId(), r.GetRole(), phaseName(in.Phase)))
	}
	in.Desired = managerv1.InstanceDesired_INSTANCE_DESIRED_RUNNING
	s.run(j, in, s.nodes[in.NodeId])
	return connect.NewResponse(&managerv1.StartPreparedJobResponse{}), nil
}

// CompleteJob implements the Manager service.
func (s *Server) CompleteJob(_ context.Context, req *connect.Request[managerv1.CompleteJobRequest]) (*connect.Response[managerv1.CompleteJobResponse], error) {
	if err := s.terminate(req.Msg.GetJobId(), managerv1.TerminalKind_TERMINAL_KIND_COMPLETED, ""); err != nil {
		return nil, err
	}
	return connect.NewResponse(&managerv1.CompleteJobResponse{}), nil
}

// MarkJobFailed implements the Manager service.
func (s *Server) MarkJobFailed(_ context.Context, req *connect.Request[managerv1.MarkJobFailedRequest]) (*connect.Response[managerv1.MarkJobFailedResponse], error) {
	if err := jobspec.ValidateID("jobId", req.Msg.GetJobId()); err != nil {
		return nil, refuse(err)
	}
	if err := jobspec.ValidateFailReason(req.Msg.GetReason()); err != nil {
		return nil, refuse(err)
	}
	if err := s.terminate(req.Msg.GetJobId(), managerv1.TerminalKind_TERMINAL_KIND_FAILED, req.Msg.GetReason()); err != nil {
		return nil, err
	}
	return connect.NewResponse(&managerv1.MarkJobFailedResponse{}), nil
}

// terminate gives a job its terminal state, stopping its instances.
func (s *Server) terminate(id string, kind managerv1.TerminalKind, reason string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	j, err := s.requireJob("jobId", id)
	if err != nil {
		return err
	}
	switch cur := j.Job.TerminalState.GetKind(); {
	case j.Job.TerminalState == nil:
	case cur == kind:
		return nil // idempotent: the first verdict stands
	case cur == managerv1.TerminalKind_TERMINAL_KIND_FAILED:
		return refuse(apierr.FailedPreconditionf("job %q has been marked failed (%s); it cannot be completed", id, j.Job.TerminalState.GetReason()))
	default:
		return refuse(apierr.FailedPreconditionf("job %q has completed; it cannot be marked failed", id))
	}
	for _, in := range j.Instances {
		if kind == managerv1.TerminalKind_TERMINAL_KIND_FAILED {
			s.stopInstance(j, in, managerv1.StoppingReason_STOPPING_REASON_JOB_FAILED, reason, 0)
		} else {
			s.stopInstance(j, in, managerv1.StoppingReason_STOPPING_REASON_USER_REQUESTED, "job completed", 0)
		}
	}
	i := s.nextIndex()
	j.Job.TerminalState = &managerv1.TerminalState{Kind: kind, Reason: reason, At: timestamppb.New(s.now())}
	j.Job.State = managerv1.JobState_JOB_STATE_POST
	entry := &managerv1.JobHistoryEntry{Event: &managerv1.JobHistoryEntry_Completed{Completed: &managerv1.JobCompleted{}}}
	if kind == managerv1.TerminalKind_TERMINAL_KIND_FAILED {
		entry.Event = &managerv1.JobHistoryEntry_Rejected{Rejected: &managerv1.JobRejected{Reason: "marked failed: " + reason}}
	}
	s.jobUpdated(j, i, entry)
	return nil
}

// RegisterClusterNode implements the Manager service.
func (s *Server) RegisterClusterNode(_ context.Context, req *connect.Request[managerv1.RegisterClusterNodeRequest]) (*connect.Response[managerv1.RegisterClusterNodeResponse], error) {
	name := req.Msg.GetNodeName()
	if err := jobspec.ValidateID("nodeName", name); err != nil {
		return nil, refuse(err)
	}
	if err := jobspec.ValidatePool("pool", req.Msg.GetPool()); err != nil {
		return nil, refuse(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range s.nodes {
		if n.GetNodeName() == name || n.GetNodeId() == name {
			return nil, refuse(apierr.AlreadyExistsf("a node named %q is already registered (node id %q)", name, n.GetNodeId()))
		}
	}
	s.nextID++
	i := s.nextIndex()
	// A cluster slot's node id is its name (decision 0004).
	sl := &managerv1.ClusterSlot{
		NodeId: name, NodeName: name, Pool: req.Msg.GetPool(),
		Token: fmt.Sprintf("nrt_%06d_%d", s.nextID, i), State: managerv1.NodeState_NODE_STATE_REGISTERED,
		RegisteredAt: timestamppb.New(s.now()),
	}
	s.slots[sl.NodeId] = sl
	n := &managerv1.Node{NodeId: sl.NodeId, NodeName: name, Provider: "cluster", State: managerv1.NodeState_NODE_STATE_REGISTERED,
		Tags: map[string]string{}, RegisteredAt: sl.RegisteredAt, StateSince: sl.RegisteredAt}
	if sl.Pool != "" {
		n.Tags["pool"] = sl.Pool
	}
	s.nodes[n.NodeId] = n
	s.emit(i, &managerv1.Event{Kind: &managerv1.Event_ClusterSlotRegistered{ClusterSlotRegistered: slotEvent(sl)}})
	return connect.NewResponse(&managerv1.RegisterClusterNodeResponse{NodeId: sl.NodeId, Token: sl.Token}), nil
}

// ClusterMemberRegister implements the Manager service.
func (s *Server) ClusterMemberRegister(_ context.Context, req *connect.Request[managerv1.ClusterMemberRegisterRequest]) (*connect.Response[managerv1.ClusterMemberRegisterResponse], error) {
	r := req.Msg
	s.mu.Lock()
	defer s.mu.Unlock()
	var sl *managerv1.ClusterSlot
	if id, ok := s.secrets[r.GetNodeSecret()]; ok && r.GetNodeSecret() != "" {
		sl = s.slots[id]
	} else {
		for _, x := range s.slots {
			if r.GetToken() != "" && x.Token == r.GetToken() && !x.TokenUsed {
				sl = x
			}
		}
	}
	if sl == nil {
		return nil, errorf(connect.CodeUnauthenticated, "unknown registration token")
	}
	if r.GetAddress() == "" {
		return nil, errorf(connect.CodeInvalidArgument, "address: required")
	}
	i := s.nextIndex()
	secret := fmt.Sprintf("nsec_%s_%d", sl.NodeId, i)
	s.secrets[secret] = sl.NodeId
	sl.TokenUsed, sl.Active, sl.Address, sl.State = true, true, r.Address, managerv1.NodeState_NODE_STATE_ONLINE
	n := s.nodes[sl.NodeId]
	n.State, n.Connected, n.Address, n.Hardware, n.Capabilities = managerv1.NodeState_NODE_STATE_ONLINE, true, r.Address, r.Hardware, r.Capabilities
	n.Runtime, n.WorkerVersion, n.StateSince = r.Runtime, r.WorkerVersion, timestamppb.New(s.now())
	s.emit(i, &managerv1.Event{Kind: &managerv1.Event_NodeOnline{NodeOnline: &managerv1.NodeEvent{Node: proto.Clone(n).(*managerv1.Node)}}})
	return connect.NewResponse(&managerv1.ClusterMemberRegisterResponse{NodeId: sl.NodeId, NodeSecret: secret, NodeName: sl.NodeName, HeartbeatIntervalMs: 5000}), nil
}

// ListClusterNodes implements the Manager service.
func (s *Server) ListClusterNodes(context.Context, *connect.Request[managerv1.ListClusterNodesRequest]) (*connect.Response[managerv1.ListClusterNodesResponse], error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	res := &managerv1.ListClusterNodesResponse{}
	for _, id := range sortedIDs(s.slots) {
		res.Slots = append(res.Slots, proto.Clone(s.slots[id]).(*managerv1.ClusterSlot))
	}
	return connect.NewResponse(res), nil
}

// sortedIDs are m's keys in order.
func sortedIDs[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

// DeregisterClusterNode implements the Manager service.
func (s *Server) DeregisterClusterNode(_ context.Context, req *connect.Request[managerv1.DeregisterClusterNodeRequest]) (*connect.Response[managerv1.DeregisterClusterNodeResponse], error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sl, ok := s.slots[req.Msg.GetNodeId()]
	if !ok {
		return nil, notFound("node", req.Msg.GetNodeId())
	}
	// As the Manager: one write marks the node stopping (its instances
	// told to stop), the next, once its worker is gone — at once here —
	// removes it.
	n := s.nodes[sl.NodeId]
	i := s.nextIndex()
	s.stopNodeInstances(sl.NodeId, managerv1.StoppingReason_STOPPING_REASON_NODE_TERMINATED)
	sl.State = managerv1.NodeState_NODE_STATE_STOPPING
	if n != nil {
		n.State, n.Connected, n.StateSince, n.StateReason = managerv1.NodeState_NODE_STATE_STOPPING, false, timestamppb.New(s.now()), "deregistering"
		s.emit(i, &managerv1.Event{Kind: &managerv1.Event_NodeStopping{NodeStopping: &managerv1.NodeEvent{Node: s.nodeView(n), Reason: "deregistering"}}})
	}
	s.emit(i, &managerv1.Event{Kind: &managerv1.Event_ClusterSlotUpdated{ClusterSlotUpdated: slotEvent(sl)}})
	i = s.nextIndex()
	delete(s.slots, sl.NodeId)
	delete(s.nodes, sl.NodeId)
	sl.State = managerv1.NodeState_NODE_STATE_TERMINATED
	if n != nil {
		n.State, n.StateReason = managerv1.NodeState_NODE_STATE_TERMINATED, "node deregistered"
		s.emit(i, &managerv1.Event{Kind: &managerv1.Event_NodeTerminated{NodeTerminated: &managerv1.NodeEvent{Node: proto.Clone(n).(*managerv1.Node), Reason: "node deregistered"}}})
	}
	s.emit(i, &managerv1.Event{Kind: &managerv1.Event_ClusterSlotDeregistered{ClusterSlotDeregistered: slotEvent(sl)}})
	return connect.NewResponse(&managerv1.DeregisterClusterNodeResponse{}), nil
}

// slotEvent is a cluster slot event as the Manager sends it: the slot
// without its registration token (events carry no secrets).
func slotEvent(sl *managerv1.ClusterSlot) *managerv1.ClusterSlotEvent {
	c := proto.Clone(sl).(*managerv1.ClusterSlot)
	c.Token = ""
	return &managerv1.ClusterSlotEvent{Slot: c}
}

// stopNodeInstances stops every instance on node id. Callers hold mu.
func (s *Server) stopNodeInstances(id string, reason managerv1.StoppingReason) {
	for _, jid := range sortedIDs(s.jobs) {
		j := s.jobs[jid]
		for _, in := range j.Instances {
			if in.NodeId == id {
				s.stopInstance(j, in, reason, "", 0)
			}
		}
	}
}

// SetClusterNodePool implements the Manager service.
func (s *Server) SetClusterNodePool(_ context.Context, req *connect.Request[managerv1.SetClusterNodePoolRequest]) (*connect.Response[managerv1.SetClusterNodePoolResponse], error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sl, ok := s.slots[req.Msg.GetNodeId()]
	if !ok {
		return nil, notFound("node", req.Msg.GetNodeId())
	}
	sl.Pool = req.Msg.GetPool()
	if n := s.nodes[sl.NodeId]; n != nil {
		if n.Tags == nil {
			n.Tags = map[string]string{}
		}
		if sl.Pool == "" {
			delete(n.Tags, "pool")
		} else {
			n.Tags["pool"] = sl.Pool
		}
	}
	// As the Manager: the node's pool tag changed, and its slot, in one write.
	i := s.nextIndex()
	if n := s.nodes[sl.NodeId]; n != nil {
		s.emit(i, &managerv1.Event{Kind: &managerv1.Event_NodeTagsUpdated{NodeTagsUpdated: &managerv1.NodeEvent{Node: s.nodeView(n), Reason: "pool changed"}}})
	}
	s.emit(i, &managerv1.Event{Kind: &managerv1.Event_ClusterSlotUpdated{ClusterSlotUpdated: slotEvent(sl)}})
	return connect.NewResponse(&managerv1.SetClusterNodePoolResponse{}), nil
}

// ListNodes implements the Manager service.
func (s *Server) ListNodes(context.Context, *connect.Request[managerv1.ListNodesRequest]) (*connect.Response[managerv1.ListNodesResponse], error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	res := &managerv1.ListNodesResponse{}
	for _, id := range sortedIDs(s.nodes) {
		res.Nodes = append(res.Nodes, s.nodeView(s.nodes[id]))
	}
	return connect.NewResponse(res), nil
}

// nodeView is a copy of n with its instances filled in. Callers hold mu.
func (s *Server) nodeView(n *managerv1.Node) *managerv1.Node {
	n = proto.Clone(n).(*managerv1.Node)
	for _, jid := range sortedIDs(s.jobs) {
		for _, in := range s.jobs[jid].Instances {
			if in.NodeId == n.NodeId && in.Phase != managerv1.InstancePhase_INSTANCE_PHASE_STOPPED {
				n.Instances = append(n.Instances, &managerv1.InstanceSummary{JobId: jid, Role: in.Role, FencingToken: in.FencingToken})
			}
		}
	}
	return n
}

// requireNode checks a node id and returns its node. Callers hold mu.
func (s *Server) requireNode(id string) (*managerv1.Node, error) {
	if err := jobspec.ValidateID("nodeId", id); err != nil {
		return nil, refuse(err)
	}
	n, ok := s.nodes[id]
	if !ok {
		return nil, notFound("node", id)
	}
	return n, nil
}

// TerminateNode implements the Manager service.
func (s *Server) TerminateNode(_ context.Context, req *connect.Request[managerv1.TerminateNodeRequest]) (*connect.Response[managerv1.TerminateNodeResponse], error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, err := s.requireNode(req.Msg.GetNodeId())
	if err != nil {
		return nil, err
	}
	if n.State == managerv1.NodeState_NODE_STATE_TERMINATED {
		// Idempotent, as the Manager's: the node is where it was asked to be.
		return connect.NewResponse(&managerv1.TerminateNodeResponse{}), nil
	}
	// As the Manager: one write marks the node stopping (its instances told
	// to stop), the next, once its worker (or provider) confirms — at once
	// here — terminated.
	i := s.nextIndex()
	s.stopNodeInstances(n.NodeId, managerv1.StoppingReason_STOPPING_REASON_NODE_TERMINATED)
	n.State, n.StateSince, n.StateReason = managerv1.NodeState_NODE_STATE_STOPPING, timestamppb.New(s.now()), "terminate requested"
	s.emit(i, &managerv1.Event{Kind: &managerv1.Event_NodeStopping{NodeStopping: &managerv1.NodeEvent{Node: s.nodeView(n), Reason: n.StateReason}}})
	i = s.nextIndex()
	n.State, n.Connected, n.StateSince, n.StateReason = managerv1.NodeState_NODE_STATE_TERMINATED, false, timestamppb.New(s.now()), "node terminated"
	s.emit(i, &managerv1.Event{Kind: &managerv1.Event_NodeTerminated{NodeTerminated: &managerv1.NodeEvent{Node: proto.Clone(n).(*managerv1.Node), Reason: n.StateReason}}})
	if sl := s.slots[n.NodeId]; sl != nil {
		sl.State, sl.Active = managerv1.NodeState_NODE_STATE_TERMINATED, false
		s.emit(i, &managerv1.Event{Kind: &managerv1.Event_ClusterSlotUpdated{ClusterSlotUpdated: slotEvent(sl)}})
	}
	return connect.NewResponse(&managerv1.TerminateNodeResponse{}), nil
}

// SetNodeTags implements the Manager service.
func (s *Server) SetNodeTags(_ context.Context, req *connect.Request[managerv1.SetNodeTagsRequest]) (*connect.Response[managerv1.SetNodeTagsResponse], error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, err := s.requireNode(req.Msg.GetNodeId())
	if err != nil {
		return nil, err
	}
	if err := jobspec.ValidateNodeTags(req.Msg.GetTags()); err != nil {
		return nil, refuse(err)
	}
	if _, spare := req.Msg.GetTags()["spare"]; spare && n.Provider != "cluster" {
		return nil, errorf(connect.CodeFailedPrecondition, "node %q: the spare tag of an elastic node is the AutoManager's", n.NodeId)
	}
	if n.Tags == nil {
		n.Tags = map[string]string{}
	}
	for k, v := range req.Msg.GetTags() {
		n.Tags[k] = v
	}
	s.emit(s.nextIndex(), &managerv1.Event{Kind: &managerv1.Event_NodeTagsUpdated{NodeTagsUpdated: &managerv1.NodeEvent{Node: proto.Clone(n).(*managerv1.Node)}}})
	return connect.NewResponse(&managerv1.SetNodeTagsResponse{Node: s.nodeView(n)}), nil
}

// GetNodeIdleExpiry implements the Manager service.
func (s *Server) GetNodeIdleExpiry(_ context.Context, req *connect.Request[managerv1.GetNodeIdleExpiryRequest]) (*connect.Response[managerv1.NodeIdleExpiry], error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, err := s.requireNode(req.Msg.GetNodeId())
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(idleExpiry(n)), nil
}

func idleExpiry(n *managerv1.Node) *managerv1.NodeIdleExpiry {
	eff := n.IdleExpiryMs
	if eff == 0 {
		eff = DefaultIdleExpiry.Milliseconds()
	}
	return &managerv1.NodeIdleExpiry{NodeId: n.NodeId, IdleExpiryMs: n.IdleExpiryMs, EffectiveIdleExpiryMs: eff}
}

// SetNodeIdleExpiry implements the Manager service.
func (s *Server) SetNodeIdleExpiry(_ context.Context, req *connect.Request[managerv1.SetNodeIdleExpiryRequest]) (*connect.Response[managerv1.NodeIdleExpiry], error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, err := s.requireNode(req.Msg.GetNodeId())
	if err != nil {
		return nil, err
	}
	if err := jobspec.ValidateIdleExpiry(req.Msg.GetIdleExpiryMs()); err != nil {
		return nil, refuse(err)
	}
	n.IdleExpiryMs = req.Msg.GetIdleExpiryMs()
	s.nextIndex()
	return connect.NewResponse(idleExpiry(n)), nil
}

// EventStream implements the Manager service: a snapshot or the held events
// after after_index, then live events, until the client goes, the fault
// hook ends the connection or the server closes.
func (s *Server) EventStream(ctx context.Context, req *connect.Request[managerv1.EventStreamRequest], stream *connect.ServerStream[managerv1.Event]) error {
	filter, err := eventsubject.NewFilter(req.Msg)
	if err != nil {
		return errorf(connect.CodeInvalidArgument, "%v", err)
	}
	s.mu.Lock()
	conn := s.streamConns
	s.streamConns++
	s.streamReqs = append(s.streamReqs, proto.Clone(req.Msg).(*managerv1.EventStreamRequest))
	s.wake()
	after := req.Msg.GetAfterIndex()
	var first []*managerv1.Event
	switch {
	case after == 0 && !req.Msg.GetSkipSnapshot():
		first, after = s.snapshot(false), s.index
	case after == 0:
		// Live only: the empty snapshot's initial_data_complete says
		// the stream is subscribed, as the Manager's does.
		first, after = []*managerv1.Event{{Index: s.index, Timestamp: timestamppb.New(s.now()), Kind: &managerv1.Event_InitialDataComplete{InitialDataComplete: &managerv1.InitialDataComplete{Index: s.index}}}}, s.index
	case after+1 < s.heldFrom:
		first, after = s.snapshot(true), s.index
	}
	s.mu.Unlock()

	sent := 0
	send := func(ev *managerv1.Event) error {
		if !filter.Match(ev) {
			return nil
		}
		s.mu.Lock()
		fault := s.fault
		s.mu.Unlock()
		if fault != nil {
			if err := fault(conn, sent, ev); errors.Is(err, ErrEndStream) {
				return errEnded
			} else if err != nil {
				return err
			}
		}
		sent++
		return stream.Send(ev)
	}
	err = s.stream(ctx, stream, first, after, send)
	if errors.Is(err, errEnded) {
		return nil
	}
	return err
}

// errEnded is how send reports ErrEndStream.
var errEnded = errors.New("ended")

// stream sends first, then every event after index after as it comes.
func (s *Server) stream(ctx context.Context, stream *connect.ServerStream[managerv1.Event], first []*managerv1.Event, after uint64, send func(*managerv1.Event) error) error {
	for _, ev := range first {
		if err := send(ev); err != nil {
			return err
		}
	}
	for {
		s.mu.Lock()
		var next []*managerv1.Event
		for _, ev := range s.log {
			if ev.GetIndex() > after {
				next = append(next, ev)
			}
		}
		wait := s.notify
		s.mu.Unlock()
		for _, ev := range next {
			if err := send(ev); err != nil {
				return err
			}
			after = ev.GetIndex()
		}
		if len(next) > 0 {
			continue
		}
		select {
		case <-wait:
		case <-ctx.Done():
			return ctx.Err() // the client left, or the deadline it sent passed
		case <-s.closing:
			return connect.NewError(connect.CodeUnavailable, fmt.Errorf("server shutting down"))
		}
	}
}

// snapshot is one job_snapshot per job and one node_snapshot per node, at the
// current index, then initial_data_complete. Callers hold mu.
func (s *Server) snapshot(resync bool) []*managerv1.Event {
	var evs []*managerv1.Event
	ts := timestamppb.New(s.now())
	for _, id := range sortedIDs(s.jobs) {
		evs = append(evs, &managerv1.Event{Index: s.index, Timestamp: ts, Kind: &managerv1.Event_JobSnapshot{JobSnapshot: proto.Clone(s.jobs[id]).(*managerv1.JobWithHistory)}})
	}
	for _, id := range sortedIDs(s.nodes) {
		evs = append(evs, &managerv1.Event{Index: s.index, Timestamp: ts, Kind: &managerv1.Event_NodeSnapshot{NodeSnapshot: s.nodeView(s.nodes[id])}})
	}
	return append(evs, &managerv1.Event{Index: s.index, Timestamp: ts, Kind: &managerv1.Event_InitialDataComplete{InitialDataComplete: &managerv1.InitialDataComplete{Index: s.index, Resync: resync}}})
}
