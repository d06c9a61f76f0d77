package norsk_test

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/norsk-go/norsk-manager/sdk/norsk"
	"github.com/norsk-go/norsk-manager/sdk/norsk/norsktest"
)

func memberNames(st *norsk.ClusterStatus) string {
	var out []string
	for _, m := range st.GetMembers() {
		out = append(out, fmt.Sprintf("%s:%s", m.GetName(), strings.ToLower(strings.TrimPrefix(m.GetRole().String(), "MEMBER_ROLE_"))))
	}
	return strings.Join(out, " ")
}

func eventKinds(p *norsk.ClusterEventsPage) string {
	var out []string
	for _, e := range p.GetEvents() {
		out = append(out, e.GetKind())
	}
	return strings.Join(out, " ")
}

func TestClusterMembership(t *testing.T) {
	t.Parallel()
	srv := norsktest.NewServer(t)
	clk := &stepClock{t: t0}
	srv.SetClock(clk.now)
	m := connectTo(t, srv)
	ctx := t.Context()

	st, err := m.GetClusterStatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if memberNames(st) != "fake-1:primary" || st.GetPrimary() != norsktest.MemberName || st.GetGeneration() != 1 || st.GetVoters() != 1 ||
		st.GetQuorum() != 1 || !st.GetQuorumHealthy() || st.GetAnsweredBy() != norsktest.MemberName {
		t.Fatalf("initial status = %v", st)
	}

	// Add: validated, idempotent, every expected member returned.
	for _, bad := range []string{"", "-x", "a b", strings.Repeat("n", 129)} {
		if _, err := m.AddClusterMember(ctx, bad, "ops", norsk.AddClusterMemberOptions{}); !errors.Is(err, norsk.ErrInvalidArgument) {
			t.Errorf("AddClusterMember(%q) = %v; want ErrInvalidArgument", bad, err)
		}
	}
	for range 2 {
		members, err := m.AddClusterMember(ctx, "mgr-2", "ops", norsk.AddClusterMemberOptions{})
		if err != nil || fmt.Sprint(members) != "[fake-1 mgr-2]" {
			t.Fatalf("AddClusterMember(mgr-2) = %v, %v", members, err)
		}
	}
	members, err := m.AddClusterMember(ctx, "wit-1", "ops", norsk.AddClusterMemberOptions{Witness: true})
	if err != nil || fmt.Sprint(members) != "[fake-1 mgr-2 wit-1]" {
		t.Fatalf("AddClusterMember(wit-1, witness) = %v, %v", members, err)
	}
	if _, err := m.AddClusterMember(ctx, "wit-1", "ops", norsk.AddClusterMemberOptions{}); !errors.Is(err, norsk.ErrFailedPrecondition) {
		t.Errorf("re-adding a witness as a full member = %v; want ErrFailedPrecondition", err)
	}

	// Expected members are not voters until they join.
	st, _ = m.GetClusterStatus(ctx)
	if memberNames(st) != "fake-1:primary mgr-2:unknown wit-1:unknown" || st.GetVoters() != 1 || !st.GetQuorumHealthy() {
		t.Fatalf("status with expected members = %v", st)
	}
	if d := st.GetMembers()[1].GetDetail(); !strings.Contains(d, "not yet joined") {
		t.Errorf("expected member's detail = %q", d)
	}
	srv.JoinClusterMember("mgr-2")
	srv.JoinClusterMember("wit-1")
	st, _ = m.GetClusterStatus(ctx)
	if memberNames(st) != "fake-1:primary mgr-2:follower wit-1:witness" || st.GetVoters() != 3 || st.GetVotersReachable() != 3 || st.GetQuorum() != 2 || !st.GetQuorumHealthy() {
		t.Fatalf("status with three voters = %v", st)
	}
	srv.SetMemberReachable("mgr-2", false)
	srv.SetMemberReachable("wit-1", false)
	st, _ = m.GetClusterStatus(ctx)
	if st.GetVotersReachable() != 1 || st.GetQuorumHealthy() || st.GetMembers()[1].GetReachable() {
		t.Fatalf("status with two voters unreachable = %v", st)
	}
	srv.SetMemberReachable("mgr-2", true)
	srv.SetMemberReachable("wit-1", true)

	// Remove: unknown, the last full member, then a real removal.
	if err := m.RemoveClusterMember(ctx, "nobody"); !errors.Is(err, norsk.ErrNotFound) {
		t.Errorf("RemoveClusterMember(nobody) = %v; want ErrNotFound", err)
	}
	if err := m.RemoveClusterMember(ctx, "wit-1"); err != nil {
		t.Fatal(err)
	}
	if err := m.RemoveClusterMember(ctx, "mgr-2"); err != nil {
		t.Fatal(err)
	}
	if err := m.RemoveClusterMember(ctx, norsktest.MemberName); !errors.Is(err, norsk.ErrFailedPrecondition) || !strings.Contains(err.Error(), "last full member") {
		t.Errorf("removing the last full member = %v; want ErrFailedPrecondition", err)
	}
	if st, _ = m.GetClusterStatus(ctx); memberNames(st) != "fake-1:primary" {
		t.Fatalf("status after removals = %v", st)
	}

	// Events, newest first, filtered by kind, since and limit.
	page, err := m.GetClusterEvents(ctx, norsk.ClusterEventsQuery{})
	if err != nil || page.GetMember() != norsktest.MemberName {
		t.Fatalf("GetClusterEvents = %v, %v", page, err)
	}
	if got := eventKinds(page); got != "member-retired member-retired member-joined member-joined member-expected member-expected member-expected role-change" {
		t.Errorf("events = %s", got)
	}
	page, _ = m.GetClusterEvents(ctx, norsk.ClusterEventsQuery{Kinds: []string{"member-retired", "role-change"}, Limit: 2})
	if got := eventKinds(page); got != "member-retired member-retired" {
		t.Errorf("events of two kinds, limit 2 = %s", got)
	}
	all, _ := m.GetClusterEvents(ctx, norsk.ClusterEventsQuery{})
	since := all.GetEvents()[1].GetAt().AsTime()
	if page, _ = m.GetClusterEvents(ctx, norsk.ClusterEventsQuery{Since: since}); len(page.GetEvents()) != 2 {
		t.Errorf("events since %v = %s", since, eventKinds(page))
	}
	if !strings.Contains(all.GetEvents()[len(all.GetEvents())-2].GetDetail(), "was added by ops") {
		t.Errorf("member-expected detail = %q", all.GetEvents()[len(all.GetEvents())-2].GetDetail())
	}
	for _, q := range []norsk.ClusterEventsQuery{{Limit: -1}, {Limit: norsk.MaxClusterEvents + 1}} {
		if _, err := m.GetClusterEvents(ctx, q); !errors.Is(err, norsk.ErrInvalidArgument) {
			t.Errorf("GetClusterEvents(%+v) = %v; want ErrInvalidArgument", q, err)
		}
	}
}

func TestClusterRecovery(t *testing.T) {
	t.Parallel()
	srv := norsktest.NewServer(t)
	m := connectTo(t, srv)
	ctx := t.Context()

	for _, node := range []string{"mgr-2", "mgr-3"} {
		if _, err := m.AddClusterMember(ctx, node, "ops", norsk.AddClusterMemberOptions{}); err != nil {
			t.Fatal(err)
		}
		srv.JoinClusterMember(node)
	}
	// With a primary, there is nothing to recover.
	if _, err := m.ForceStandalone(ctx, "ops"); !errors.Is(err, norsk.ErrFailedPrecondition) || !strings.Contains(err.Error(), "the primary fake-1 is reachable") {
		t.Fatalf("ForceStandalone with a primary = %v; want ErrFailedPrecondition", err)
	}

	// The quorum is lost: membership changes wait for a primary, the Big Red
	// Button works.
	srv.SetMemberReachable("mgr-2", false)
	srv.SetMemberReachable("mgr-3", false)
	srv.SetQuorumLost(true)
	st, _ := m.GetClusterStatus(ctx)
	if st.GetPrimary() != "" || st.GetQuorumHealthy() || st.GetVoters() != 3 || st.GetVotersReachable() != 1 {
		t.Fatalf("status without quorum = %v", st)
	}
	if _, err := m.AddClusterMember(ctx, "mgr-4", "ops", norsk.AddClusterMemberOptions{}); !errors.Is(err, norsk.ErrUnavailable) {
		t.Errorf("AddClusterMember without a primary = %v; want ErrUnavailable", err)
	}
	gen, err := m.ForceStandalone(ctx, "ops")
	if err != nil || gen != 2 || srv.ClusterGeneration() != 2 {
		t.Fatalf("ForceStandalone = %d, %v", gen, err)
	}
	st, _ = m.GetClusterStatus(ctx)
	if st.GetPrimary() != norsktest.MemberName || st.GetGeneration() != 2 || st.GetVoters() != 1 || !st.GetQuorumHealthy() || memberNames(st) != "fake-1:primary mgr-2:unknown mgr-3:unknown" {
		t.Fatalf("status after ForceStandalone = %v", st)
	}
	page, _ := m.GetClusterEvents(ctx, norsk.ClusterEventsQuery{Kinds: []string{"force-standalone", "takeover-settled"}})
	if got := eventKinds(page); got != "takeover-settled force-standalone" || !strings.Contains(page.GetEvents()[1].GetDetail(), "ops forced this member standalone") || page.GetEvents()[0].GetGeneration() != 2 {
		t.Errorf("recovery events = %v", page)
	}
	// The others rejoin when they come back.
	srv.JoinClusterMember("mgr-2")
	if st, _ = m.GetClusterStatus(ctx); st.GetVoters() != 2 || memberNames(st) != "fake-1:primary mgr-2:follower mgr-3:unknown" {
		t.Fatalf("status after mgr-2 rejoined = %v", st)
	}

	// Leaving the quorum hands the primary role over.
	if err := m.LeaveQuorum(ctx, "ops"); err != nil {
		t.Fatal(err)
	}
	if st, _ = m.GetClusterStatus(ctx); st.GetPrimary() != "mgr-2" || memberNames(st) != "fake-1:follower mgr-2:primary mgr-3:unknown" {
		t.Fatalf("status after LeaveQuorum = %v", st)
	}

	// A standalone Manager refuses every membership call.
	srv.SetStandalone(true)
	if _, err := m.AddClusterMember(ctx, "mgr-4", "ops", norsk.AddClusterMemberOptions{}); !errors.Is(err, norsk.ErrFailedPrecondition) || !strings.Contains(err.Error(), "standalone") {
		t.Errorf("AddClusterMember on a standalone Manager = %v", err)
	}
	if err := m.LeaveQuorum(ctx, "ops"); !errors.Is(err, norsk.ErrFailedPrecondition) {
		t.Errorf("LeaveQuorum on a standalone Manager = %v", err)
	}
	if _, err := m.ForceStandalone(ctx, "ops"); !errors.Is(err, norsk.ErrFailedPrecondition) {
		t.Errorf("ForceStandalone on a standalone Manager = %v", err)
	}
}

func TestLeaveQuorumAlone(t *testing.T) {
	t.Parallel()
	srv := norsktest.NewServer(t)
	m := connectTo(t, srv)
	if err := m.LeaveQuorum(t.Context(), "ops"); !errors.Is(err, norsk.ErrFailedPrecondition) || !strings.Contains(err.Error(), "could not hand the role over") {
		t.Fatalf("LeaveQuorum of the only member = %v; want ErrFailedPrecondition", err)
	}
}

func TestAnnounceControlPlane(t *testing.T) {
	t.Parallel()
	srv := norsktest.NewServer(t)
	now := t0
	srv.SetClock(func() time.Time { return now })
	m := connectTo(t, srv)
	ctx := t.Context()

	for _, bad := range []string{"", "mgr.example.com", "ftp://x", "http://"} {
		if err := m.AnnounceControlPlane(ctx, bad, time.Second); !errors.Is(err, norsk.ErrInvalidArgument) {
			t.Errorf("AnnounceControlPlane(%q) = %v; want ErrInvalidArgument", bad, err)
		}
	}
	if err := m.AnnounceControlPlane(ctx, "https://x", -time.Second); !errors.Is(err, norsk.ErrInvalidArgument) {
		t.Errorf("a negative interval = %v; want ErrInvalidArgument", err)
	}
	self := func() *norsk.ClusterMember {
		st, err := m.GetClusterStatus(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return st.GetMembers()[0]
	}
	if err := m.AnnounceControlPlane(ctx, "https://mgr-a.example.com", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if me := self(); me.GetControlPlaneUrl() != "https://mgr-a.example.com" || me.GetControlPlaneStale() || !me.GetControlPlaneAnnouncedAt().AsTime().Equal(t0) {
		t.Fatalf("announced = %v", me)
	}
	now = t0.Add(30 * time.Second) // three intervals: not yet stale
	if self().GetControlPlaneStale() {
		t.Error("stale after exactly three intervals")
	}
	now = t0.Add(31 * time.Second)
	if !self().GetControlPlaneStale() {
		t.Error("not stale after more than three intervals")
	}
	// Without an interval an announcement never goes stale.
	if err := m.AnnounceControlPlane(ctx, "http://mgr-b:8080", 0); err != nil {
		t.Fatal(err)
	}
	now = now.Add(24 * time.Hour)
	if me := self(); me.GetControlPlaneUrl() != "http://mgr-b:8080" || me.GetControlPlaneStale() {
		t.Errorf("announced without an interval = %v", me)
	}
}

func TestLinearizableReads(t *testing.T) {
	t.Parallel()
	srv := norsktest.NewServer(t)
	m := connectTo(t, srv)
	ctx := t.Context()

	if _, _, err := m.KvList(ctx, "app", ""); err != nil || srv.LastConsistency() != "" {
		t.Fatalf("a plain read: %v, header %q", err, srv.LastConsistency())
	}
	if _, _, err := m.KvList(norsk.Linearizable(ctx), "app", ""); err != nil || srv.LastConsistency() != "linearizable" {
		t.Fatalf("a linearizable read: %v, header %q", err, srv.LastConsistency())
	}
	// Writes and member-local calls never carry it.
	if _, err := m.KvCommit(norsk.Linearizable(ctx), "app", []norsk.KvWrite{norsk.KvPut("k", []byte("v"))}, norsk.KvCommitOptions{}); err != nil || srv.LastConsistency() != "" {
		t.Fatalf("a write: %v, header %q", err, srv.LastConsistency())
	}

	// Without a primary a linearizable read fails; a plain one is served.
	srv.SetQuorumLost(true)
	if _, err := m.KvGet(norsk.Linearizable(ctx), "app", "k"); !errors.Is(err, norsk.ErrUnavailable) {
		t.Errorf("a linearizable read without a primary = %v; want ErrUnavailable", err)
	}
	if e, err := m.KvGet(ctx, "app", "k"); err != nil || string(e.GetValue()) != "v" {
		t.Errorf("a plain read without a primary = %v, %v", e, err)
	}

	// Settings.LinearizableReads: every read, but not the recovery calls
	// that must work without a primary.
	lin, err := norsk.Connect(ctx, norsk.Settings{URL: srv.URL, LinearizableReads: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatalf("Connect with LinearizableReads while the quorum is lost: %v", err)
	}
	defer lin.Close()
	if _, err := lin.ListNodes(ctx); !errors.Is(err, norsk.ErrUnavailable) {
		t.Errorf("ListNodes (linearizable) without a primary = %v; want ErrUnavailable", err)
	}
	if _, err := lin.GetClusterStatus(ctx); err != nil {
		t.Errorf("GetClusterStatus: %v", err)
	}
	if gen, err := lin.ForceStandalone(ctx, "ops"); err != nil || gen != 2 {
		t.Errorf("ForceStandalone = %d, %v", gen, err)
	}
	if _, err := lin.ListNodes(ctx); err != nil || srv.LastConsistency() != "linearizable" {
		t.Errorf("ListNodes (linearizable) with a primary again = %v, header %q", err, srv.LastConsistency())
	}
}
