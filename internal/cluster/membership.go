package cluster

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/types/known/timestamppb"

	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/atomicfile"
	"github.com/norsk-go/norsk-manager/internal/store"
	"github.com/norsk-go/norsk-manager/internal/store/state"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
)

// statusTimeout bounds each member's answer to a status query.
const statusTimeout = time.Second

// requireClustered refuses membership calls on a standalone member.
func (m *Member) requireClustered(what string) error {
	if !m.Clustered() {
		return apierr.FailedPreconditionf("%s: this Manager runs standalone; name the members in config.yaml (clusterNodes) to run a cluster (docs/operations.md)", what)
	}
	return nil
}

func witnessOrMember(w bool) string {
	if w {
		return "witness"
	}
	return "member"
}

// errHandedOver: the primary handed its role over before removing itself;
// the new primary finishes the removal.
var errHandedOver = fmt.Errorf("handed the primary role over")

// removeMember takes node out of the raft configuration and retires it.
// Primary only. Removing the primary hands its role to another full member
// first (errHandedOver).
func (m *Member) removeMember(ctx context.Context, st *store.Store, node string) error {
	r := st.State().Snapshot()
	rec := r.Member(node)
	conf, err := st.Configuration()
	if err != nil {
		return err
	}
	inConf := slices.ContainsFunc(conf, func(sv raft.Server) bool { return string(sv.ID) == node })
	if (rec == nil || rec.GetStatus() == state.MemberRetired) && !inConf {
		return apierr.NotFoundf("no member %s in this cluster (members: %s)", apierr.Quote(node), strings.Join(r.ExpectedMembers(), ", "))
	}
	// Another full member must remain to lead.
	if len(m.fullVoters(conf, node)) == 0 {
		return apierr.FailedPreconditionf("%s is the last full member: add another before removing it", node)
	}
	if node == m.cfg.Name {
		if err := m.handOff(ctx, st, "this primary is being removed"); err != nil {
			return apierr.Unavailablef("could not hand the primary role over before removing this member: %v", err)
		}
		return errHandedOver
	}
	if inConf {
		if err := st.RemoveServer(node); err != nil {
			return err
		}
	}
	if rec != nil && rec.GetStatus() != state.MemberRetired {
		cmd := &storev1.Command{
			Time: timestamppb.New(m.cfg.Clock.Now()),
			Cmd:  &storev1.Command_MemberRetired{MemberRetired: &storev1.MemberRetired{Name: node}},
		}
		cmd.Audit = m.cfg.Audit(ctx, cmd)
		if _, err := st.Apply(ctx, cmd); err != nil {
			return fmt.Errorf("record %s as retired: %w", node, err)
		}
	}
	m.events.Record("member-retired", node+" was removed from the cluster", st.Term(), r.Generation())
	return nil
}

// forceStandalone checks that a forced recovery is safe and starts it: the
// member restarts its store as a cluster of one at the next generation.
func (m *Member) forceStandalone(ctx context.Context, by string) (uint64, error) {
	if m.cfg.Witness {
		return 0, apierr.FailedPreconditionf("this member is a witness: it holds no job state to recover from; run force-standalone on a full member")
	}
	if err := m.requireClustered("force standalone"); err != nil {
		return 0, err
	}
	st := m.Store()
	if st == nil {
		return 0, apierr.FailedPreconditionf("this member has no store open (a recovery is under way)")
	}
	r := st.State().Snapshot()
	if r.Index() == 0 || r.Generation() == 0 {
		return 0, apierr.FailedPreconditionf("this member has no store to recover from (it never received the cluster's state); run force-standalone on a member that did")
	}
	if leader, _ := st.Leader(); leader != "" {
		return 0, apierr.FailedPreconditionf("the primary %s is reachable: the cluster has quorum, nothing to recover (remove a lost member with RemoveClusterMember instead)", leader)
	}
	for _, p := range m.peerStatuses(ctx) {
		if p.err == nil && p.status.GetLeader() != "" {
			return 0, apierr.FailedPreconditionf("member %s reports a primary (%s): the cluster has quorum; this member is cut off from it, not the other way round", p.name, p.status.GetLeader())
		}
	}
	gen := r.Generation() + 1
	marker := filepath.Join(m.cfg.DataDir, forcedMarker)
	if err := atomicfile.WriteFile(marker, []byte(strconv.FormatUint(gen, 10)+"\n"+by+"\n"), 0o600); err != nil {
		return 0, fmt.Errorf("record the forced recovery: %w", err)
	}
	m.events.Record("force-standalone", fmt.Sprintf("%s forced this member standalone: it restarts as a cluster of one at generation %d keeping its state (index %d)",
		orNone(by), gen, r.Index()), st.Term(), r.Generation())
	cfg := m.storeConfig(false)
	if !m.requestRestart(func() error {
		idx, err := store.RecoverStandalone(cfg)
		if err != nil {
			return err
		}
		m.log.Warn("forced standalone: recovered the store as a cluster of one", "index", idx, "generation", gen)
		return nil
	}) {
		_ = os.Remove(marker)
		return 0, apierr.Unavailablef("a recovery is already under way on this member")
	}
	return gen, nil
}

// finishForced, on the primary of a recovered member, moves the membership
// to the generation the forced recovery chose.
func (m *Member) finishForced(ctx context.Context, st *store.Store) error {
	marker := filepath.Join(m.cfg.DataDir, forcedMarker)
	b, err := os.ReadFile(marker)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	lines := strings.SplitN(string(b), "\n", 3)
	gen, err := strconv.ParseUint(strings.TrimSpace(lines[0]), 10, 64)
	if err != nil {
		return fmt.Errorf("%s: %w", marker, err)
	}
	if cur := st.State().Snapshot().Generation(); gen > cur {
		by := ""
		if len(lines) > 1 {
			by = strings.TrimSpace(lines[1])
		}
		if _, err := st.Apply(ctx, &storev1.Command{
			Time:  timestamppb.New(m.cfg.Clock.Now()),
			Audit: &storev1.AuditStamp{Who: "member:" + m.cfg.Name + " (by " + orNone(by) + ")", Method: "ForceStandalone", Target: "cluster", Source: "manager"},
			Cmd:   &storev1.Command_SetGeneration{SetGeneration: &storev1.SetGeneration{Generation: gen}},
		}); err != nil {
			return fmt.Errorf("move to generation %d: %w", gen, err)
		}
	}
	m.events.Record("takeover-settled", fmt.Sprintf("running as a cluster of one at generation %d; other members rejoin as followers when they come back", gen), st.Term(), gen)
	return os.Remove(marker)
}

// leaveQuorum marks this member's copy for discarding at its next boot
// (it then comes back empty, as a follower, and catches up from the
// cluster) and stops running primary terms on it meanwhile.
func (m *Member) leaveQuorum(by string) error {
	if err := m.requireClustered("leave the quorum"); err != nil {
		return err
	}
	st := m.Store()
	if st != nil && st.IsLeader() {
		if err := st.TransferLeadership("", ""); err != nil {
			return apierr.FailedPreconditionf("this member is the primary and could not hand the role over (%v); it would take the cluster's only committed copy with it", err)
		}
	}
	if err := atomicfile.WriteFile(filepath.Join(m.cfg.DataDir, leaveMarker), []byte(by+"\n"), 0o600); err != nil {
		return fmt.Errorf("record leaving the quorum: %w", err)
	}
	var term, gen uint64
	if st != nil {
		term, gen = st.Term(), st.State().Snapshot().Generation()
	}
	m.events.Record("leave-quorum", orNone(by)+" asked this member to leave the quorum: it discards its copy and rejoins as a follower", term, gen)
	m.requestRestart(nil)
	return nil
}

// retired reports whether the membership records name as removed.
func (m *Member) retired(name string) bool {
	st := m.Store()
	if st == nil {
		return false
	}
	mr := st.State().Snapshot().Member(name)
	return mr != nil && mr.GetStatus() == state.MemberRetired
}

// fullVoters are the voters of conf other than except that are not
// witnesses: the members that may lead.
func (m *Member) fullVoters(conf []raft.Server, except string) []raft.Server {
	var out []raft.Server
	for _, sv := range conf {
		if string(sv.ID) != except && sv.Suffrage == raft.Voter && !m.isWitness(string(sv.ID)) {
			out = append(out, sv)
		}
	}
	return out
}

// handOff hands the primary role to another full member, trying each in
// turn (raft bounds each attempt by an election timeout). It records why in
// the cluster events (unless why is empty). Primary only.
//
// Only a member that answers now and has applied the log up to (nearly)
// this primary's commit index is asked, the most caught-up first. That is
// not politeness: hashicorp/raft (v1.8) wedges a primary asked twice to
// hand over to a member its replication cannot reach — the second attempt
// blocks forever on the stuck replication's one-slot channel, and the
// "transfer in progress" flag it holds then refuses every write and every
// later hand-over (TestClusterPartitionedPrimaryIsReplaced: a witness led
// for good while the old primary was cut off). A member whose log keeps up
// is one whose replication drains that channel.
func (m *Member) handOff(ctx context.Context, st *store.Store, why string) error {
	conf, err := st.Configuration()
	if err != nil {
		return err
	}
	targets := m.fullVoters(conf, m.cfg.Name)
	if len(targets) == 0 {
		return errors.New("no other full member to take the primary role")
	}
	if why != "" {
		m.events.Record("handing-over", why+"; handing the primary role to another full member", st.Term(), st.State().Snapshot().Generation())
	}
	targets, err = m.caughtUpTargets(ctx, st, targets)
	if err != nil {
		return err
	}
	var last error
	for _, sv := range targets {
		if last = st.TransferLeadership(string(sv.ID), string(sv.Address)); last == nil {
			return nil
		}
		m.log.Debug("handing the primary role over", "to", sv.ID, "err", last)
		if !st.IsLeader() {
			return nil
		}
	}
	return last
}

// handOffSlack is how many entries behind this primary's commit index a
// member may have applied and still be handed the primary role.
const handOffSlack = 64

// caughtUpTargets keeps the members of targets that answer their status
// call now with the log applied to within handOffSlack of this member's
// commit index, the most caught-up first.
func (m *Member) caughtUpTargets(ctx context.Context, st *store.Store, targets []raft.Server) ([]raft.Server, error) {
	applied := map[string]uint64{}
	var why []string
	for _, p := range m.peerStatuses(ctx) {
		if p.err != nil {
			why = append(why, p.name+": "+p.err.Error())
			continue
		}
		applied[p.name] = p.status.GetAppliedIndex()
	}
	commit := st.CommitIndex()
	var out []raft.Server
	for _, sv := range targets {
		a, ok := applied[string(sv.ID)]
		switch {
		case !ok:
		case a+handOffSlack < commit:
			why = append(why, fmt.Sprintf("%s: applied %d of %d", sv.ID, a, commit))
		default:
			out = append(out, sv)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no full member is reachable and caught up (%s)", strings.Join(why, "; "))
	}
	slices.SortStableFunc(out, func(a, b raft.Server) int {
		return cmp.Compare(applied[string(b.ID)], applied[string(a.ID)])
	})
	return out, nil
}

// isWitness reports whether member name is a witness (by the membership,
// else the configuration).
func (m *Member) isWitness(name string) bool {
	if st := m.Store(); st != nil {
		if mr := st.State().Snapshot().Member(name); mr != nil {
			return mr.GetWitness()
		}
	}
	n, ok := FindNode(m.cfg.Nodes, name)
	return ok && n.Witness
}

// caughtUpSlack is how far behind the primary's commit index a joining
// member may be and still be made a voter.
const caughtUpSlack = 256

// promoteCaughtUp, on the primary, makes every non-voting member that has
// caught up with the log a voter.
func (m *Member) promoteCaughtUp(ctx context.Context, st *store.Store) {
	conf, err := st.Configuration()
	if err != nil {
		return
	}
	var waiting []raft.Server
	for _, sv := range conf {
		if sv.Suffrage == raft.Nonvoter {
			waiting = append(waiting, sv)
		}
	}
	if len(waiting) == 0 {
		return
	}
	commit := st.CommitIndex()
	for _, p := range m.peerStatuses(ctx) {
		if p.err != nil {
			continue
		}
		for _, sv := range waiting {
			if string(sv.ID) != p.name || p.status.GetAppliedIndex()+caughtUpSlack < commit {
				continue
			}
			if err := st.AddVoter(string(sv.ID), string(sv.Address)); err != nil {
				m.log.Warn("could not make a caught-up member a voter", "member", sv.ID, "err", err)
				continue
			}
			m.events.Record("member-promoted", fmt.Sprintf("%s caught up (applied %d of %d) and votes now", sv.ID, p.status.GetAppliedIndex(), commit),
				st.Term(), st.State().Snapshot().Generation())
		}
	}
}
