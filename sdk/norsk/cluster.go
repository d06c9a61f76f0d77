package norsk

import (
	"context"
	"fmt"
	"math"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
)

// Limits of GetClusterEvents (the Manager's).
const (
	// DefaultClusterEvents is how many events GetClusterEvents returns when
	// ClusterEventsQuery.Limit is 0.
	DefaultClusterEvents = 100
	// MaxClusterEvents is the largest ClusterEventsQuery.Limit the Manager
	// accepts.
	MaxClusterEvents = 1000
)

// AddClusterMemberOptions are the optional parts of AddClusterMember.
type AddClusterMemberOptions struct {
	// Witness adds a witness: it votes but holds no job state, serves no API
	// and never leads.
	Witness bool
}

// AddClusterMember adds a member at run time: a Manager whose node name no
// config.yaml names. The cluster records that it expects node; the node
// joins when its Manager starts with the existing members in its own
// clusterNodes (clusterState: existing). by says who asks (recorded in the
// cluster events and the audit log). Idempotent; forwarded to the primary.
// It returns every member the cluster now expects, joined or not, by name.
// Errors: ErrInvalidArgument (a bad node name), ErrFailedPrecondition (the
// Manager runs standalone; node is already expected as the other kind,
// member or witness), ErrUnavailable (no primary).
func (m *Manager) AddClusterMember(ctx context.Context, node, by string, opts AddClusterMemberOptions) ([]string, error) {
	const op = "AddClusterMember"
	if err := m.alive(op); err != nil {
		return nil, err
	}
	res, err := m.client.AddClusterMember(ctx, connect.NewRequest(&managerv1.AddClusterMemberRequest{Node: node, By: by, Witness: opts.Witness}))
	if err != nil {
		return nil, wrapError(op, err)
	}
	return res.Msg.GetMembers(), nil
}

// RemoveClusterMember retires the member on node from the cluster's
// membership. Removing the primary first hands its role to another full
// member. The retired Manager should then be stopped. Errors:
// ErrInvalidArgument, ErrNotFound (no such member), ErrFailedPrecondition
// (node is the last full member, or the Manager runs standalone),
// ErrUnavailable (no primary).
func (m *Manager) RemoveClusterMember(ctx context.Context, node string) error {
	const op = "RemoveClusterMember"
	if err := m.alive(op); err != nil {
		return err
	}
	_, err := m.client.RemoveClusterMember(ctx, connect.NewRequest(&managerv1.RemoveClusterMemberRequest{Node: node}))
	return wrapError(op, err)
}

// ForceStandalone is the Big Red Button, for a cluster that has lost its
// quorum: it makes the member m is connected to a one-member cluster at the
// next generation, keeping its state, and returns that generation. The
// member then restarts (the connection drops); the former members rejoin as
// followers as they come back. by says who pressed it. Errors:
// ErrFailedPrecondition (the member can reach a primary — the cluster has
// quorum —, it is a witness, it has no store to recover from, or it runs
// standalone), ErrUnavailable (a recovery is already under way).
func (m *Manager) ForceStandalone(ctx context.Context, by string) (generation uint64, err error) {
	const op = "ForceStandalone"
	if err := m.alive(op); err != nil {
		return 0, err
	}
	res, err := m.client.ForceStandalone(ctx, connect.NewRequest(&managerv1.ForceStandaloneRequest{By: by}))
	if err != nil {
		return 0, wrapError(op, err)
	}
	return res.Msg.GetGeneration(), nil
}

// LeaveQuorum makes the member m is connected to leave the quorum: its copy
// of the store is discarded at its next boot and it runs as a follower
// until it has joined a peer that carries a generation (or a cluster of
// more than one). It is for the members an operator can still reach when
// ForceStandalone is pressed elsewhere. A primary hands its role over
// first. The member restarts on success (the connection drops). by says
// who asks. Errors: ErrFailedPrecondition (the member is the primary and
// could not hand its role over, or it runs standalone).
func (m *Manager) LeaveQuorum(ctx context.Context, by string) error {
	const op = "LeaveQuorum"
	if err := m.alive(op); err != nil {
		return err
	}
	_, err := m.client.LeaveQuorum(ctx, connect.NewRequest(&managerv1.LeaveQuorumRequest{By: by}))
	return wrapError(op, err)
}

// GetClusterStatus returns the cluster as the member m is connected to sees
// it: every member with its role, reachability, voting, applied index,
// generation and announced norsk-mgr (and whether that announcement is
// stale); the primary, generation and term; and the quorum — voters
// reachable, voters in all, the majority needed (voters/2+1) and whether it
// is healthy (a primary, and a reachable majority). Answered by the member
// called (AnsweredBy), which asks its peers.
func (m *Manager) GetClusterStatus(ctx context.Context) (*ClusterStatus, error) {
	const op = "GetClusterStatus"
	if err := m.alive(op); err != nil {
		return nil, err
	}
	res, err := m.client.GetClusterStatus(ctx, connect.NewRequest(&managerv1.GetClusterStatusRequest{}))
	if err != nil {
		return nil, wrapError(op, err)
	}
	return res.Msg, nil
}

// ClusterEventsQuery selects events of GetClusterEvents. Every filter given
// must match.
type ClusterEventsQuery struct {
	// Limit is the most events returned: 0 = DefaultClusterEvents, at most
	// MaxClusterEvents.
	Limit int
	// Kinds are the kinds wanted (role-change, lease-failure,
	// member-expected, member-joined, member-retired, handing-over,
	// takeover-settled, force-standalone, leave-quorum, rejoined, …); empty
	// = all.
	Kinds []string
	// Since, when set, drops the events before it.
	Since time.Time
}

// GetClusterEvents returns the member's OWN cluster event log, newest
// first: what happened to it (role changes and why, lease failures,
// members joining or retiring, takeovers settling, …). Never another
// member's: for the cluster's whole picture, ask every member and merge by
// time. Errors: ErrInvalidArgument (Limit negative or over
// MaxClusterEvents).
func (m *Manager) GetClusterEvents(ctx context.Context, q ClusterEventsQuery) (*ClusterEventsPage, error) {
	const op = "GetClusterEvents"
	if err := m.alive(op); err != nil {
		return nil, err
	}
	if q.Limit < 0 || q.Limit > MaxClusterEvents {
		return nil, &Error{Op: op, Code: connect.CodeInvalidArgument, Message: fmt.Sprintf("limit: %d is out of range (0 = the default, at most %d)", q.Limit, MaxClusterEvents)}
	}
	req := &managerv1.GetClusterEventsRequest{Limit: uint32(q.Limit), Kinds: q.Kinds}
	if !q.Since.IsZero() {
		req.Since = timestamppb.New(q.Since)
	}
	res, err := m.client.GetClusterEvents(ctx, connect.NewRequest(req))
	if err != nil {
		return nil, wrapError(op, err)
	}
	return res.Msg, nil
}

// AnnounceControlPlane tells the member m is connected to where workers
// reach the norsk-mgr beside it (its public http(s) URL); every worker is
// told the whole cluster's list. Answered by that member, never forwarded.
// interval is how often the caller will announce again: GetClusterStatus
// reports the announcement stale once three intervals pass without one
// (how a standby tells the active norsk-mgr is down); 0 = never stale.
// Errors: ErrInvalidArgument (not an http(s) URL; a negative interval, or
// one beyond 2^32 ms).
func (m *Manager) AnnounceControlPlane(ctx context.Context, url string, interval time.Duration) error {
	const op = "AnnounceControlPlane"
	if err := m.alive(op); err != nil {
		return err
	}
	ms := interval.Milliseconds()
	if interval > 0 && ms == 0 {
		ms = 1 // a sub-millisecond interval is not "never stale"
	}
	if interval < 0 || ms > math.MaxUint32 {
		return &Error{Op: op, Code: connect.CodeInvalidArgument, Message: fmt.Sprintf("interval: %v is out of range (0 = never stale)", interval)}
	}
	_, err := m.client.AnnounceControlPlane(ctx, connect.NewRequest(&managerv1.AnnounceControlPlaneRequest{Url: url, IntervalMs: uint32(ms)}))
	return wrapError(op, err)
}
