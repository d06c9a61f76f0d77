package sdkcontract

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/norsk-go/norsk-manager/pkg/jobspec"
	"github.com/norsk-go/norsk-manager/pkg/snapshotfile"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// invalidArguments: malformed input is INVALID_ARGUMENT and the message
// names the field by its API path, as the seed asks; nothing is written.
func invalidArguments(t *testing.T, e *env) {
	c := ctx(t)
	_, err := e.m.CreateJob(c, e.job("inv-ok", nil))
	must(t, "CreateJob", err)
	_, err = e.m.CreateBundle(c, &norsk.Bundle{BundleId: "inv-bundle", Jobs: []*norsk.BundleJobSpec{{JobName: "a", StartMode: "manual", Job: e.job("", nil)}}})
	must(t, "CreateBundle", err)
	badService := e.job("inv-svc", nil)
	badService.Services[0].Name = "Bad_Name"
	tests := []struct {
		name, field string
		call        func() error
	}{
		{"CreateJob bad id", "job.jobId", func() error { _, err := e.m.CreateJob(c, e.job("has space", nil)); return err }},
		{"CreateJob no services", "job.services", func() error { _, err := e.m.CreateJob(c, &norsk.Job{JobId: "inv-empty"}); return err }},
		{"CreateJob bad service name", "job.services[0].name", func() error { _, err := e.m.CreateJob(c, badService); return err }},
		{"UpdateJob bad service name", "job.services[0].name", func() error { _, err := e.m.UpdateJob(c, badService); return err }},
		{"JobById empty id", "jobId", func() error { _, err := e.m.JobById(c, ""); return err }},
		{"StartJob empty role", "role", func() error { _, err := e.m.StartJob(c, "inv-ok", "", e.node, norsk.StartJobOptions{}); return err }},
		{"StartJob bad runtime role", "options.runtimeRole", func() error {
			_, err := e.m.StartJob(c, "inv-ok", "primary", e.node, norsk.StartJobOptions{RuntimeRole: "-x"})
			return err
		}},
		{"StopJob grace over an hour", "options.graceMs", func() error {
			return e.m.StopJob(c, "inv-ok", "primary", e.node, norsk.StopJobOptions{Grace: 2 * time.Hour})
		}},
		{"MarkJobFailed no reason", "reason", func() error { return e.m.MarkJobFailed(c, "inv-ok", "") }},
		{"JobSearch bad regexp", "filters[0].id.re", func() error {
			_, err := e.m.JobSearch(c, norsk.JobSearchSettings{Filters: []*norsk.JobFilter{norsk.IdRegex("(")}})
			return err
		}},
		{"SetNodeTags bad name", "tags", func() error { _, err := e.m.SetNodeTags(c, e.node, map[string]string{"bad key": "v"}); return err }},
		{"SetNodeTags none", "tags", func() error { _, err := e.m.SetNodeTags(c, e.node, nil); return err }},
		{"SetNodeIdleExpiry negative", "idleExpiryMs", func() error { _, err := e.m.SetNodeIdleExpiry(c, e.node, -time.Second); return err }},
		{"RegisterClusterNode bad name", "nodeName", func() error { _, err := e.m.RegisterClusterNode(c, "a b", ""); return err }},
		{"KvCommit no namespace", "namespace", func() error {
			_, err := e.m.KvCommit(c, "", []norsk.KvWrite{norsk.KvPut("k", nil)}, norsk.KvCommitOptions{})
			return err
		}},
		{"KvCommit a key twice", "writes[1].key", func() error {
			_, err := e.m.KvCommit(c, "inv", []norsk.KvWrite{norsk.KvPut("k", nil), norsk.KvDelete("k")}, norsk.KvCommitOptions{})
			return err
		}},
		{"KvGet no key", "key", func() error { _, err := e.m.KvGet(c, "inv", ""); return err }},
		{"CreateToken bad role", "role", func() error { _, _, err := e.m.CreateToken(c, "inv", "root", 0); return err }},
		{"PauseLeases no reason", "reason", func() error { return e.m.PauseLeases(c, "", "me") }},
		{"ResumeLeases nobody", "by", func() error { return e.m.ResumeLeases(c, "") }},
		// The bounds table (pkg/apibounds), applied before any handler.
		{"CreateJob description too long", "job.description", func() error {
			j := e.job("inv-desc", nil)
			j.Description = strings.Repeat("d", jobspec.MaxDescriptionLen+1)
			_, err := e.m.CreateJob(c, j)
			return err
		}},
		{"CreateJob control character in a working dir", "job.services[0].workingDir", func() error {
			j := e.job("inv-wd", nil)
			j.Services[0].WorkingDir = "/srv\x01"
			_, err := e.m.CreateJob(c, j)
			return err
		}},
		{"AppendAuditEntry payload too long", "payload", func() error {
			_, err := e.m.AppendAuditEntry(c, "ci", "deploy", strings.Repeat("p", jobspec.MaxAuditPayloadLen+1))
			return err
		}},
		{"KvCommit NUL in a key", "writes[0].key", func() error {
			_, err := e.m.KvCommit(c, "inv", []norsk.KvWrite{norsk.KvPut("k\x00", nil)}, norsk.KvCommitOptions{})
			return err
		}},
		{"CreateBundle bad start mode", "bundle.jobs[0].startMode", func() error {
			_, err := e.m.CreateBundle(c, &norsk.Bundle{BundleId: "inv-b", Jobs: []*norsk.BundleJobSpec{{JobName: "a", StartMode: "later", Job: e.job("", nil)}}})
			return err
		}},
		{"CreateBundle bad template", "bundle.jobs[0].job.services", func() error {
			_, err := e.m.CreateBundle(c, &norsk.Bundle{BundleId: "inv-b", Jobs: []*norsk.BundleJobSpec{{JobName: "a", Job: &norsk.Job{}}}})
			return err
		}},
		{"RenewBundleLease too short", "ttlMs", func() error { _, err := e.m.RenewBundleLease(c, "inv-bundle", time.Millisecond); return err }},
		{"StopBundleJob grace over an hour", "graceMs", func() error {
			return e.m.StopBundleJob(c, "inv-bundle", 0, "a", norsk.StopBundleJobOptions{Grace: 2 * time.Hour})
		}},
		{"AppendAuditEntry no source", "source", func() error { _, err := e.m.AppendAuditEntry(c, "", "deploy", ""); return err }},
		{"GetAuditLog page too long", "limit", func() error { _, err := e.m.GetAuditLog(c, norsk.AuditLogQuery{Limit: 1001}); return err }},
		{"PruneAuditLog in the future", "beforeTimestampMs", func() error { _, _, err := e.m.PruneAuditLog(c, time.Now().Add(time.Hour)); return err }},
		{"PrefetchImages no image", "imageRefs", func() error { _, err := e.m.PrefetchImages(c, e.node, nil); return err }},
		{"PrefetchImages bad reference", "imageRefs[1]", func() error { _, err := e.m.PrefetchImages(c, e.node, []string{"hello:dev", "Not A Ref"}); return err }},
		{"NotifyMigrationGetState no role", "sourceJobKey.role", func() error {
			return e.m.NotifyMigrationGetState(c, &norsk.JobKey{JobId: "inv-ok"}, "m1")
		}},
		{"NotifyMigrationCutoverApply no id", "migrationId", func() error {
			return e.m.NotifyMigrationCutoverApply(c, &norsk.JobKey{JobId: "inv-ok", Role: "primary"}, "", nil)
		}},
		{"GetClusterEvents page too long", "limit", func() error { _, err := e.m.GetClusterEvents(c, norsk.ClusterEventsQuery{Limit: 1001}); return err }},
		{"AnnounceControlPlane not a URL", "url", func() error { return e.m.AnnounceControlPlane(c, "ftp://x", time.Second) }},
		{"AddClusterMember bad name", "node", func() error {
			_, err := e.m.AddClusterMember(c, "a b", "me", norsk.AddClusterMemberOptions{})
			return err
		}},
		{"RotateDiscoveryTierSecret unknown step", "step", func() error { _, err := e.m.RotateDiscoveryTierSecret(c, "spin", ""); return err }},
		{"RotateDiscoveryTierSecret secret at flip", "newTierSecret", func() error { _, err := e.m.RotateDiscoveryTierSecret(c, "flip", "x"); return err }},
		{"CreateOciNode no availability domain", "availabilityDomain", func() error { _, err := e.m.CreateOciNode(c, norsk.OciNode{Shape: "VM.Standard.E4.Flex"}); return err }},
		{"DescribeInstanceType no type", "instanceType", func() error { _, err := e.m.DescribeInstanceType(c, " ", norsk.InstanceTypeOptions{}); return err }},
		{"ListWorkerSecurityGroups no region", "region", func() error { _, err := e.m.ListWorkerSecurityGroups(c, ""); return err }},
		{"DrainNode too parallel", "parallel", func() error { _, _, err := e.m.DrainNode(c, e.node, norsk.DrainOptions{Parallel: 65}); return err }},
		{"DrainNode undo with options", "undo", func() error {
			_, _, err := e.m.DrainNode(c, e.node, norsk.DrainOptions{Undo: true, Parallel: 3})
			return err
		}},
		{"DrainNode deadline and none", "noDeadline", func() error {
			_, _, err := e.m.DrainNode(c, e.node, norsk.DrainOptions{Deadline: time.Minute, NoDeadline: true})
			return err
		}},
		{"RecordMigration no role", "migration.sourceRole", func() error {
			_, err := e.m.RecordMigration(c, &norsk.MigrationState{MigrationId: "inv-m", SourceJobId: "inv-ok", Phase: norsk.PhasePlacing}, 0, true)
			return err
		}},
		{"RecordNodeDrain malformed item", "drain.items[0].jobId", func() error {
			_, err := e.m.RecordNodeDrain(c, &norsk.NodeDrain{NodeId: e.node, Items: []*norsk.DrainItem{{Role: "primary"}}}, 0)
			return err
		}},
	}
	for _, tc := range tests {
		err := tc.call()
		wantCode(t, tc.name, err, norsk.ErrInvalidArgument, tc.field+":")
	}
	if _, err := e.m.JobById(c, "inv-empty"); !errors.Is(err, norsk.ErrNotFound) {
		t.Errorf("a refused CreateJob left a job: JobById = %v", err)
	}
}

// notFound: an unknown job, node, slot, bundle, token or key is NOT_FOUND
// naming it.
func notFound(t *testing.T, e *env) {
	c := ctx(t)
	_, err := e.m.CreateJob(c, e.job("nf-job", nil))
	must(t, "CreateJob", err)
	tests := []struct {
		name string
		call func() error
	}{
		{"JobById", func() error { _, err := e.m.JobById(c, "nf-nope"); return err }},
		{"UpdateJob", func() error { _, err := e.m.UpdateJob(c, e.job("nf-nope", nil)); return err }},
		{"DeleteJob", func() error { return e.m.DeleteJob(c, "nf-nope") }},
		{"StartJob unknown job", func() error {
			_, err := e.m.StartJob(c, "nf-nope", "primary", e.node, norsk.StartJobOptions{})
			return err
		}},
		{"StartJob unknown node", func() error {
			_, err := e.m.StartJob(c, "nf-job", "primary", "nf-nope", norsk.StartJobOptions{})
			return err
		}},
		{"StopJob", func() error { return e.m.StopJob(c, "nf-nope", "primary", e.node, norsk.StopJobOptions{}) }},
		{"CompleteJob", func() error { return e.m.CompleteJob(c, "nf-nope") }},
		{"MarkJobFailed", func() error { return e.m.MarkJobFailed(c, "nf-nope", "x") }},
		{"TerminateNode", func() error { return e.m.TerminateNode(c, "nf-nope") }},
		{"SetNodeTags", func() error { _, err := e.m.SetNodeTags(c, "nf-nope", map[string]string{"a": "b"}); return err }},
		{"GetNodeIdleExpiry", func() error { _, err := e.m.GetNodeIdleExpiry(c, "nf-nope"); return err }},
		// The node is looked up before the tags are checked. (Not so a
		// negative idle expiry: the Manager's bounds table refuses it
		// before the handler runs, and the fake has no bounds table.)
		{"SetNodeTags with bad tags", func() error { _, err := e.m.SetNodeTags(c, "nf-nope", map[string]string{"bad key": "b"}); return err }},
		{"DeregisterClusterNode", func() error { return e.m.DeregisterClusterNode(c, "nf-nope") }},
		{"SetClusterNodePool", func() error { return e.m.SetClusterNodePool(c, "nf-nope", "gold") }},
		{"BundleById", func() error { _, err := e.m.BundleById(c, "nf-nope"); return err }},
		{"DeleteBundle", func() error { return e.m.DeleteBundle(c, "nf-nope") }},
		{"KvGet", func() error { _, err := e.m.KvGet(c, "nf", "nf-nope"); return err }},
	}
	for _, tc := range tests {
		err := tc.call()
		wantCode(t, tc.name, err, norsk.ErrNotFound, "nf-nope")
	}
	err = e.m.StartPreparedJob(c, "nf-job", "primary", e.node)
	wantCode(t, "StartPreparedJob of an instance never started", err, norsk.ErrNotFound, "nf-job")
	err = e.m.StopJob(c, "nf-job", "primary", e.node, norsk.StopJobOptions{})
	wantCode(t, "StopJob of an instance never started", err, norsk.ErrNotFound, "nf-job")
	err = e.m.RevokeToken(c, "0123456789abcdef")
	wantCode(t, "RevokeToken", err, norsk.ErrNotFound, "0123456789abcdef")
}

func nodes(t *testing.T, e *env) {
	c := ctx(t)
	list, err := e.m.ListNodes(c)
	must(t, "ListNodes", err)
	var n *norsk.Node
	for _, x := range list {
		if x.GetNodeId() == e.node {
			n = x
		}
	}
	if n == nil || n.GetState() != norsk.NodeStateOnline || !n.GetConnected() {
		t.Fatalf("ListNodes: node %s = %v; want online and connected", e.node, n)
	}
	got, err := e.m.SetNodeTags(c, e.node, map[string]string{"contract": "yes"})
	must(t, "SetNodeTags", err)
	if got.GetTags()["contract"] != "yes" || got.GetNodeId() != e.node {
		t.Errorf("SetNodeTags answered %v", got)
	}
	ie, err := e.m.GetNodeIdleExpiry(c, e.node)
	must(t, "GetNodeIdleExpiry", err)
	if ie.GetIdleExpiryMs() != 0 || ie.GetEffectiveIdleExpiryMs() <= 0 {
		t.Errorf("GetNodeIdleExpiry = %v; want no override and a daemon-wide value", ie)
	}
	ie, err = e.m.SetNodeIdleExpiry(c, e.node, 90*time.Second)
	must(t, "SetNodeIdleExpiry", err)
	if ie.GetIdleExpiryMs() != 90_000 || ie.GetEffectiveIdleExpiryMs() != 90_000 {
		t.Errorf("SetNodeIdleExpiry = %v; want 90000 in force", ie)
	}
}

func slots(t *testing.T, e *env) {
	c := ctx(t)
	res, err := e.m.RegisterClusterNode(c, "slot-a", "gold")
	must(t, "RegisterClusterNode", err)
	if res.GetNodeId() == "" || res.GetToken() == "" {
		t.Fatalf("RegisterClusterNode = %v; want a node id and a token", res)
	}
	_, err = e.m.RegisterClusterNode(c, "slot-a", "")
	wantCode(t, "RegisterClusterNode of a name taken", err, norsk.ErrAlreadyExists, "slot-a")
	find := func() *norsk.ClusterSlot {
		slots, err := e.m.ListClusterNodes(c)
		must(t, "ListClusterNodes", err)
		for _, s := range slots {
			if s.GetNodeId() == res.GetNodeId() {
				return s
			}
		}
		return nil
	}
	s := find()
	if s == nil || s.GetNodeName() != "slot-a" || s.GetPool() != "gold" || s.GetState() != norsk.NodeStateRegistered || s.GetTokenUsed() {
		t.Errorf("ListClusterNodes: slot = %v; want slot-a in pool gold, registered, token unused", s)
	}
	must(t, "SetClusterNodePool", e.m.SetClusterNodePool(c, res.GetNodeId(), "silver"))
	if s := find(); s.GetPool() != "silver" {
		t.Errorf("after SetClusterNodePool: pool %q", s.GetPool())
	}
	nodes, err := e.m.ListNodes(c)
	must(t, "ListNodes", err)
	for _, n := range nodes {
		if n.GetNodeId() == res.GetNodeId() && (n.GetTags()["pool"] != "silver" || n.GetState() != norsk.NodeStateRegistered || n.GetNodeName() != "slot-a") {
			t.Errorf("ListNodes: the slot's node = %v; want registered slot-a with tag pool=silver", n)
		}
	}
	if res.GetNodeId() != "slot-a" {
		t.Errorf("the slot's node id is %q; want its name (decision 0004)", res.GetNodeId())
	}
	must(t, "DeregisterClusterNode", e.m.DeregisterClusterNode(c, res.GetNodeId()))
	eventually(t, "the deregistered slot leaves the list", func() error {
		if s := find(); s != nil {
			return errors.New("still listed")
		}
		return nil
	})
	err = e.m.DeregisterClusterNode(c, res.GetNodeId())
	wantCode(t, "DeregisterClusterNode again", err, norsk.ErrNotFound, `"slot-a"`)
}

func kv(t *testing.T, e *env) {
	c := ctx(t)
	rev, err := e.m.KvCommit(c, "contract", []norsk.KvWrite{norsk.KvPut("app/a", []byte("1")).IfAbsent(), norsk.KvPut("app/b", []byte("2"))}, norsk.KvCommitOptions{})
	must(t, "KvCommit", err)
	got, err := e.m.KvGet(c, "contract", "app/a")
	must(t, "KvGet", err)
	if string(got.GetValue()) != "1" || got.GetRevision() != rev || got.GetCreateRevision() != rev {
		t.Errorf("KvGet = %v; want value 1 at revision %d", got, rev)
	}
	_, err = e.m.KvCommit(c, "contract", []norsk.KvWrite{norsk.KvPut("app/a", []byte("x")).IfAbsent()}, norsk.KvCommitOptions{})
	wantCode(t, "KvCommit IfAbsent of a key that exists", err, norsk.ErrFailedPrecondition, "app/a")
	one := int64(1)
	rev2, err := e.m.KvCommit(c, "contract", []norsk.KvWrite{norsk.KvPut("app/a", []byte("3")).IfRevision(rev), norsk.KvDelete("app/b")}, norsk.KvCommitOptions{SetSchemaVersion: &one})
	must(t, "KvCommit", err)
	if rev2 <= rev {
		t.Errorf("second commit's revision %d is not after %d", rev2, rev)
	}
	entries, schema, err := e.m.KvList(c, "contract", "app/")
	must(t, "KvList", err)
	if len(entries) != 1 || entries[0].GetKey() != "app/a" || string(entries[0].GetValue()) != "3" || entries[0].GetCreateRevision() != rev || schema != 1 {
		t.Errorf("KvList = %v schema %d; want app/a=3 created at %d, schema 1", entries, schema, rev)
	}
	_, err = e.m.KvGet(c, "contract", "app/b")
	wantCode(t, "KvGet of a deleted key", err, norsk.ErrNotFound, "app/b")
	zero := int64(0)
	_, err = e.m.KvCommit(c, "contract", []norsk.KvWrite{norsk.KvPut("app/c", nil)}, norsk.KvCommitOptions{ExpectSchemaVersion: &zero})
	wantCode(t, "KvCommit at the wrong schema version", err, norsk.ErrFailedPrecondition, "contract")
	_, err = e.m.KvCommit(c, "contract", []norsk.KvWrite{norsk.KvDelete("absent")}, norsk.KvCommitOptions{})
	must(t, "KvCommit deleting an absent key", err)
	_, err = e.m.KvCommit(c, "contract", []norsk.KvWrite{norsk.KvPut("absent", nil).IfRevision(5)}, norsk.KvCommitOptions{})
	wantCode(t, "KvCommit expecting a revision of an absent key", err, norsk.ErrFailedPrecondition, "absent")
	two := int64(2)
	_, err = e.m.KvCommit(c, "contract", nil, norsk.KvCommitOptions{SetSchemaVersion: &two})
	must(t, "KvCommit of a schema version alone", err)
	if _, schema, err := e.m.KvList(c, "contract", "none/"); err != nil || schema != 2 {
		t.Errorf("KvList after setting the schema = %d, %v; want 2", schema, err)
	}
}

func leases(t *testing.T, e *env) {
	c := ctx(t)
	must(t, "PauseLeases", e.m.PauseLeases(c, "maintenance", "contract"))
	st, err := e.m.GetLeaseStatus(c)
	must(t, "GetLeaseStatus", err)
	if !st.GetPaused() || st.GetReason() != "maintenance" || st.GetBy() != "contract" || st.GetSince() == nil || st.GetTtlMs() <= 0 {
		t.Errorf("GetLeaseStatus after a pause = %v", st)
	}
	must(t, "PauseLeases again (idempotent)", e.m.PauseLeases(c, "maintenance", "contract"))
	must(t, "ResumeLeases", e.m.ResumeLeases(c, "contract"))
	st, err = e.m.GetLeaseStatus(c)
	must(t, "GetLeaseStatus", err)
	if st.GetPaused() {
		t.Errorf("GetLeaseStatus after resuming = %v", st)
	}
}

func bundles(t *testing.T, e *env) {
	c := ctx(t)
	b := &norsk.Bundle{
		BundleId:         "channel",
		ResiliencePolicy: &norsk.ResiliencePolicy{Replicas: 2},
		Jobs:             []*norsk.BundleJobSpec{{JobName: "enc", StartMode: "manual", Job: e.job("", map[string]string{"app": "tv"})}},
	}
	id, err := e.m.CreateBundle(c, b)
	must(t, "CreateBundle", err)
	if id != "channel" {
		t.Errorf("CreateBundle = %q", id)
	}
	_, err = e.m.CreateBundle(c, b)
	wantCode(t, "CreateBundle of an existing id", err, norsk.ErrAlreadyExists, "channel")
	bw, err := e.m.BundleById(c, "channel")
	must(t, "BundleById", err)
	if bw.GetBundle().GetState() != norsk.BundleStateLive || bw.GetBundle().GetRevision() == 0 || len(bw.GetJobs()) != 2 {
		t.Fatalf("BundleById = %v", bw)
	}
	for i, st := range bw.GetJobs() {
		role := []string{"primary", "backup"}[i]
		if st.GetJobId() != "channel.enc."+string(rune('0'+i)) || st.GetRole() != role || !st.GetDormant() || st.GetJobName() != "enc" {
			t.Errorf("bundle job %d = %v; want channel.enc.%d, %s, dormant", i, st, i, role)
		}
	}
	j, err := e.m.JobById(c, "channel.enc.1")
	must(t, "JobById of a replica job", err)
	tags := j.GetJob().GetTags()
	if tags["bundleId"] != "channel" || tags["replicaIndex"] != "1" || tags["jobName"] != "enc" || tags["dormant"] != "true" || tags["app"] != "tv" {
		t.Errorf("replica job tags = %v", tags)
	}
	at, err := e.m.RenewBundleLease(c, "channel", time.Hour)
	must(t, "RenewBundleLease", err)
	if d := time.Until(at); d < 50*time.Minute || d > 70*time.Minute {
		t.Errorf("RenewBundleLease expires at %v; want about an hour from now", at)
	}
	// An update against a stale revision is refused; one that adds a job
	// creates its replicas (dormant, as manual) and keeps the others.
	bw, err = e.m.BundleById(c, "channel")
	must(t, "BundleById", err)
	stale := proto.Clone(bw.GetBundle()).(*norsk.Bundle)
	stale.Revision = bw.GetBundle().GetRevision() - 1
	_, err = e.m.UpdateBundle(c, stale)
	wantCode(t, "UpdateBundle at a stale revision", err, norsk.ErrFailedPrecondition, "channel")
	upd := proto.Clone(bw.GetBundle()).(*norsk.Bundle)
	upd.Jobs = append(upd.Jobs, &norsk.BundleJobSpec{JobName: "thumbs", StartMode: "manual", Job: e.job("", nil)})
	rev, err := e.m.UpdateBundle(c, upd)
	must(t, "UpdateBundle", err)
	if rev <= bw.GetBundle().GetRevision() {
		t.Errorf("UpdateBundle revision %d is not after %d", rev, bw.GetBundle().GetRevision())
	}
	for _, id := range []string{"channel.thumbs.0", "channel.thumbs.1", "channel.enc.0"} {
		j, err := e.m.JobById(c, id)
		must(t, "JobById "+id, err)
		if j.GetJob().GetTags()["dormant"] != "true" {
			t.Errorf("%s after the update: tags %v", id, j.GetJob().GetTags())
		}
	}
	must(t, "StopBundleJob of a dormant job (idempotent)", e.m.StopBundleJob(c, "channel", 0, "enc", norsk.StopBundleJobOptions{}))
	err = e.m.StartBundleJob(c, "channel", 5, "enc")
	wantCode(t, "StartBundleJob of a replica the bundle does not have", err, norsk.ErrInvalidArgument, "replicaIndex:")
	must(t, "DeleteBundle", e.m.DeleteBundle(c, "channel"))
	eventually(t, "the deleted bundle and its jobs go", func() error {
		if _, err := e.m.BundleById(c, "channel"); !errors.Is(err, norsk.ErrNotFound) {
			return errors.New("BundleById: " + errString(err))
		}
		if _, err := e.m.JobById(c, "channel.enc.0"); !errors.Is(err, norsk.ErrNotFound) {
			return errors.New("JobById: " + errString(err))
		}
		return nil
	})
}

func errString(err error) string {
	if err == nil {
		return "found"
	}
	return err.Error()
}

func events(t *testing.T, e *env) {
	c := ctx(t)
	s := e.m.EventStream(c, norsk.EventStreamSettings{})
	defer s.Close()
	// The snapshot ends with initial_data_complete.
	for s.Next() {
		if s.Event().GetInitialDataComplete() != nil {
			break
		}
	}
	hash, err := e.m.CreateJob(c, e.job("ev-job", nil))
	must(t, "CreateJob", err)
	for s.Next() {
		ev := s.Event()
		if ev.GetJobCreated() == nil || norsk.EventJobID(ev) != "ev-job" {
			continue
		}
		if ev.GetIndex() != hash || ev.GetJobCreated().GetEntry().GetCreated() == nil || norsk.EventJob(ev).GetJob().GetCurrentHash() != hash {
			t.Errorf("jobCreated = index %d, %v; want index %d, the created entry and the job", ev.GetIndex(), ev.GetJobCreated(), hash)
		}
		break
	}
	if err := s.Err(); err != nil {
		t.Fatalf("event stream: %v", err)
	}
	// Resuming after the create's index starts after it.
	must(t, "DeleteJob", e.m.DeleteJob(c, "ev-job"))
	r := e.m.EventStream(c, norsk.EventStreamSettings{AfterIndex: uint64(hash)})
	defer r.Close()
	for r.Next() {
		ev := r.Event()
		if ev.GetIndex() <= uint64(hash) {
			t.Fatalf("resumed after %d, got %v at %d", hash, norsk.EventKindOf(ev), ev.GetIndex())
		}
		if ev.GetJobDeleted().GetJobId() == "ev-job" {
			return
		}
	}
	t.Fatalf("the resumed stream ended without jobDeleted: %v", r.Err())
}

func tokens(t *testing.T, e *env) {
	c := ctx(t)
	tok, secret, err := e.m.CreateToken(c, "contract-ci", "read-only", 0)
	must(t, "CreateToken", err)
	if tok.GetId() == "" || secret == "" || tok.GetRole() != "read-only" || tok.GetName() != "contract-ci" {
		t.Fatalf("CreateToken = %v, %q", tok, secret)
	}
	list, err := e.m.ListTokens(c)
	must(t, "ListTokens", err)
	if !hasToken(list, tok.GetId(), false) {
		t.Errorf("ListTokens does not list %s", tok.GetId())
	}
	exp, _, err := e.m.CreateToken(c, "contract-ttl", "operator", time.Hour)
	must(t, "CreateToken with a ttl", err)
	if d := time.Until(exp.GetExpiresAt().AsTime()); exp.GetExpiresAt() == nil || d < 50*time.Minute || d > 70*time.Minute {
		t.Errorf("CreateToken(ttl 1h) expires at %v; want about an hour from now", exp.GetExpiresAt())
	}
	if tok.GetExpiresAt() != nil {
		t.Errorf("CreateToken(ttl 0) expires at %v; want never", tok.GetExpiresAt())
	}
	for i := 0; i < 4; i++ {
		_, _, err := e.m.CreateToken(c, fmt.Sprintf("contract-%d", i), "read-only", 0)
		must(t, "CreateToken", err)
	}
	list, err = e.m.ListTokens(c)
	must(t, "ListTokens", err)
	if !slices.IsSortedFunc(list, func(a, b *norsk.ApiToken) int { return strings.Compare(a.GetId(), b.GetId()) }) {
		t.Errorf("ListTokens is not in id order")
	}
	must(t, "RevokeToken", e.m.RevokeToken(c, tok.GetId()))
	list, err = e.m.ListTokens(c)
	must(t, "ListTokens", err)
	if !hasToken(list, tok.GetId(), true) {
		t.Errorf("ListTokens does not list %s revoked", tok.GetId())
	}
}

// tokenRoles: a token's role decides what its caller may do (pkg/apiauth),
// and a revoked token is refused.
func tokenRoles(t *testing.T, e *env) {
	c := ctx(t)
	client := func(role string) (*norsk.Manager, *norsk.ApiToken) {
		tok, secret, err := e.m.CreateToken(c, "contract-"+role, role, 0)
		must(t, "CreateToken "+role, err)
		m, err := e.as(t, secret)
		must(t, "connect as "+role, err)
		return m, tok
	}
	ro, roTok := client("read-only")
	if _, err := ro.JobSearch(c, norsk.JobSearchSettings{}); err != nil {
		t.Errorf("read-only JobSearch: %v", err)
	}
	_, err := ro.CreateJob(c, e.job("roles-ro", nil))
	wantCode(t, "read-only CreateJob", err, norsk.ErrPermissionDenied, "may not call CreateJob", "read-only")
	op, _ := client("operator")
	if _, err := op.CreateJob(c, e.job("roles-op", nil)); err != nil {
		t.Errorf("operator CreateJob: %v", err)
	}
	_, _, err = op.CreateToken(c, "contract-escalate", "admin", 0)
	wantCode(t, "operator CreateToken", err, norsk.ErrPermissionDenied, "CreateToken")
	pub, _ := client("publisher")
	_, err = pub.JobSearch(c, norsk.JobSearchSettings{})
	wantCode(t, "publisher JobSearch", err, norsk.ErrPermissionDenied, "JobSearch")

	must(t, "RevokeToken", e.m.RevokeToken(c, roTok.GetId()))
	_, err = ro.JobSearch(c, norsk.JobSearchSettings{})
	wantCode(t, "revoked JobSearch", err, norsk.ErrUnauthenticated, "revoked")
}

func hasToken(list []*norsk.ApiToken, id string, revoked bool) bool {
	for _, t := range list {
		if t.GetId() == id && t.GetRevoked() == revoked {
			return true
		}
	}
	return false
}

func audit(t *testing.T, e *env) {
	c := ctx(t)
	entry, err := e.m.AppendAuditEntry(c, "contract", "deploy", `{"v":1}`)
	must(t, "AppendAuditEntry", err)
	if entry.GetSource() != "external/contract" || entry.GetKind() != "deploy" || entry.GetPayload() != `{"v":1}` || entry.GetSeq() <= 0 {
		t.Errorf("AppendAuditEntry = %v; want it stored under external/contract", entry)
	}
	page, err := e.m.GetAuditLog(c, norsk.AuditLogQuery{Source: "external/contract"})
	must(t, "GetAuditLog", err)
	if len(page.GetEntries()) != 1 || page.GetEntries()[0].GetSeq() != entry.GetSeq() {
		t.Errorf("GetAuditLog(external/contract) = %v", page.GetEntries())
	}
	v, err := e.m.VerifyAuditLog(c)
	must(t, "VerifyAuditLog", err)
	if v.Broken != nil || v.Checked == 0 {
		t.Errorf("VerifyAuditLog = %+v", v)
	}
}

func version(t *testing.T, e *env) {
	v := e.m.Version()
	if v.GetMajorVersion() != 1 || v.GetGoVersion() == "" {
		t.Errorf("Version = %v", v)
	}
	if h := e.m.Hello(); !h.GetCompatible() || !strings.HasPrefix(h.GetProtocolVersion(), "1.") {
		t.Errorf("Hello = %v", h)
	}
}

func eventsLiveOnly(t *testing.T, e *env) {
	c := ctx(t)
	s := e.m.EventStream(c, norsk.EventStreamSettings{SkipSnapshot: true})
	defer s.Close()
	hash, err := e.m.CreateJob(c, e.job("live-only", nil))
	must(t, "CreateJob", err)
	for s.Next() {
		ev := s.Event()
		if ev.GetJobSnapshot() != nil || ev.GetNodeSnapshot() != nil {
			t.Fatalf("a live-only stream sent a snapshot: %v", norsk.EventKindOf(ev))
		}
		if ev.GetJobCreated() != nil && norsk.EventJobID(ev) == "live-only" {
			if ev.GetIndex() != hash {
				t.Errorf("jobCreated at index %d; want %d", ev.GetIndex(), hash)
			}
			return
		}
	}
	t.Fatalf("the stream ended: %v", s.Err())
}

func clusterStatus(t *testing.T, e *env) {
	st, err := e.m.GetClusterStatus(ctx(t))
	must(t, "GetClusterStatus", err)
	if len(st.GetMembers()) != 1 || st.GetPrimary() == "" || st.GetPrimary() != st.GetAnsweredBy() || !st.GetQuorumHealthy() || st.GetVoters() != 1 || st.GetQuorum() != 1 {
		t.Errorf("GetClusterStatus of a standalone Manager = %v", st)
	}
}

func eventsNodeTags(t *testing.T, e *env) {
	c := ctx(t)
	s := e.m.EventStream(c, norsk.EventStreamSettings{SkipSnapshot: true})
	defer s.Close()
	n, err := e.m.SetNodeTags(c, e.node, map[string]string{"evtag": "1"})
	must(t, "SetNodeTags", err)
	for s.Next() {
		ev := s.Event()
		if ev.GetNodeTagsUpdated() == nil || norsk.EventNode(ev).GetTags()["evtag"] != "1" {
			continue
		}
		if got := norsk.EventNode(ev); got.GetNodeId() != e.node || got.GetTags()["evtag"] != n.GetTags()["evtag"] {
			t.Errorf("nodeTagsUpdated = %v", got)
		}
		return
	}
	t.Fatalf("the stream ended: %v", s.Err())
}

func storeInfo(t *testing.T, e *env) {
	info, err := e.m.GetStoreInfo(ctx(t))
	must(t, "GetStoreInfo", err)
	if len(info.GetStores()) == 0 || info.GetStores()[0].GetSchemaVersion() == 0 || info.GetStores()[0].GetSchemaVersion() != info.GetStores()[0].GetBinarySchemaVersion() {
		t.Errorf("GetStoreInfo stores = %v", info.GetStores())
	}
	if info.GetAppliedIndex() == 0 || info.GetBoot().GetBootedAt() == nil || info.GetDataDir() == "" {
		t.Errorf("GetStoreInfo = applied %d, boot %v, data dir %q", info.GetAppliedIndex(), info.GetBoot(), info.GetDataDir())
	}
}

// snapshot: SnapshotSave streams a pkg/snapshotfile snapshot that verifies
// and holds a job created before it.
func snapshot(t *testing.T, e *env) {
	c := ctx(t)
	_, err := e.m.CreateJob(c, e.job("snap-job", nil))
	must(t, "CreateJob", err)
	var buf bytes.Buffer
	n, err := e.m.SnapshotSave(c, &buf)
	must(t, "SnapshotSave", err)
	if n != int64(buf.Len()) || n == 0 {
		t.Fatalf("SnapshotSave = %d bytes, wrote %d", n, buf.Len())
	}
	r := snapshotfile.NewReader(&buf)
	found := false
	for {
		rec, err := r.Next()
		if err == io.EOF {
			break
		}
		must(t, "read the snapshot", err)
		found = found || rec.GetJob().GetJob().GetJobId() == "snap-job"
	}
	if !found {
		t.Error("the snapshot does not hold snap-job")
	}
}

// discovery: the first fleet published is in force; a later one changes
// the addresses and keeps the secrets in force, saying so.
func discovery(t *testing.T, e *env) {
	c := ctx(t)
	secret := strings.Repeat("s", 40)
	f, kept, err := e.m.PublishDiscoveryFleet(c, &norsk.DiscoveryFleet{Addresses: []string{"10.0.0.1:7000"}, TierSecret: secret, LeafToken: "leaf"})
	must(t, "PublishDiscoveryFleet", err)
	if kept || f.GetTierSecret() != secret || len(f.GetAddresses()) != 1 {
		t.Errorf("first publication: %v kept=%v", f, kept)
	}
	f, kept, err = e.m.PublishDiscoveryFleet(c, &norsk.DiscoveryFleet{Addresses: []string{"10.0.0.2:7000", "10.0.0.3:7000"}, TierSecret: strings.Repeat("t", 40), LeafToken: "leaf"})
	must(t, "PublishDiscoveryFleet", err)
	if !kept || f.GetTierSecret() != secret || len(f.GetAddresses()) != 2 {
		t.Errorf("second publication: %v kept=%v; want the first secret kept and the new addresses", f, kept)
	}
	got, err := e.m.GetDiscoveryFleet(c)
	must(t, "GetDiscoveryFleet", err)
	if got.GetTierSecret() != secret || len(got.GetAddresses()) != 2 {
		t.Errorf("GetDiscoveryFleet = %v", got)
	}
	_, _, err = e.m.PublishDiscoveryFleet(c, &norsk.DiscoveryFleet{Addresses: []string{"no-port"}, TierSecret: secret})
	wantCode(t, "PublishDiscoveryFleet of a bad address", err, norsk.ErrInvalidArgument, "fleet.addresses[0]:")
}

// eventsSnapshot: a stream from 0 starts with every job (with its history
// and instances) and every node (with the instances bound to it), all at
// one index, then initial_data_complete at that index.
func eventsSnapshot(t *testing.T, e *env) {
	c := ctx(t)
	_, err := e.m.CreateJob(c, e.job("snap-ev", map[string]string{"k": "v"}))
	must(t, "CreateJob", err)
	token, err := e.m.StartJob(c, "snap-ev", "primary", e.node, norsk.StartJobOptions{})
	must(t, "StartJob", err)
	_, err = e.m.WaitForJob(c, "snap-ev", "primary", norsk.InstancePhaseRunning)
	must(t, "WaitForJob", err)
	s := e.m.EventStream(c, norsk.EventStreamSettings{})
	defer s.Close()
	var job *norsk.JobWithHistory
	var node *norsk.Node
	var at uint64
	for s.Next() {
		ev := s.Event()
		if at == 0 {
			at = ev.GetIndex()
		}
		if ev.GetIndex() != at {
			t.Fatalf("snapshot events at %d and %d", at, ev.GetIndex())
		}
		switch {
		case ev.GetJobSnapshot().GetJob().GetJobId() == "snap-ev":
			job = ev.GetJobSnapshot()
		case ev.GetNodeSnapshot().GetNodeId() == e.node:
			node = ev.GetNodeSnapshot()
		case ev.GetInitialDataComplete() != nil:
			if ev.GetInitialDataComplete().GetIndex() != at || ev.GetInitialDataComplete().GetResync() {
				t.Errorf("initial_data_complete = %v at %d", ev.GetInitialDataComplete(), at)
			}
			if job == nil || node == nil {
				t.Fatalf("the snapshot lacks snap-ev (%v) or node %s (%v)", job != nil, e.node, node != nil)
			}
			if len(job.GetHistory()) < 3 || job.GetHistory()[len(job.GetHistory())-1].GetCreated() == nil || job.GetJob().GetTags()["k"] != "v" {
				t.Errorf("snapshot of snap-ev: history %v, tags %v", kinds(job), job.GetJob().GetTags())
			}
			if len(job.GetInstances()) != 1 || job.GetInstances()[0].GetFencingToken() != token {
				t.Errorf("snapshot of snap-ev: instances %v", job.GetInstances())
			}
			found := false
			for _, in := range node.GetInstances() {
				found = found || (in.GetJobId() == "snap-ev" && in.GetFencingToken() == token)
			}
			if !found {
				t.Errorf("snapshot of node %s does not list snap-ev: %v", e.node, node.GetInstances())
			}
			must(t, "StopJob", e.m.StopJob(c, "snap-ev", "primary", e.node, norsk.StopJobOptions{}))
			return
		}
	}
	t.Fatalf("the stream ended: %v", s.Err())
}

// terminateRegistered: a slot no worker ever held can be terminated; its
// node reads terminated (or leaves the list), and terminating it again
// changes nothing and is no error.
func terminateRegistered(t *testing.T, e *env) {
	c := ctx(t)
	slot, err := e.m.RegisterClusterNode(c, "term-slot", "")
	must(t, "RegisterClusterNode", err)
	must(t, "TerminateNode", e.m.TerminateNode(c, slot.GetNodeId()))
	eventually(t, "the terminated node reads terminated or leaves the list", func() error {
		nodes, err := e.m.ListNodes(c)
		if err != nil {
			return err
		}
		for _, n := range nodes {
			if n.GetNodeId() == slot.GetNodeId() && n.GetState() != norsk.NodeStateTerminated {
				return fmt.Errorf("node %s is %v", n.GetNodeId(), n.GetState())
			}
		}
		return nil
	})
	must(t, "TerminateNode again (idempotent)", e.m.TerminateNode(c, slot.GetNodeId()))
}

// bundleStopTime: a stop time already past deletes the bundle; a bundle
// whose replica job id is taken is ALREADY_EXISTS; a job name the bundle
// does not have is INVALID_ARGUMENT.
func bundleStopTime(t *testing.T, e *env) {
	c := ctx(t)
	_, err := e.m.CreateBundle(c, &norsk.Bundle{BundleId: "timed", Jobs: []*norsk.BundleJobSpec{{JobName: "a", StartMode: "manual", Job: e.job("", nil)}}})
	must(t, "CreateBundle", err)
	err = e.m.StartBundleJob(c, "timed", 0, "zz")
	wantCode(t, "StartBundleJob of a job the bundle lacks", err, norsk.ErrInvalidArgument, "jobName:", "zz")
	past := time.Now().Add(-time.Minute)
	must(t, "SetBundleStopTime in the past", e.m.SetBundleStopTime(c, "timed", &past))
	eventually(t, "a bundle whose stop time passed is deleted", func() error {
		if _, err := e.m.BundleById(c, "timed"); !errors.Is(err, norsk.ErrNotFound) {
			return errors.New("BundleById: " + errString(err))
		}
		return nil
	})
	_, err = e.m.CreateJob(c, e.job("clash.y.0", nil))
	must(t, "CreateJob", err)
	_, err = e.m.CreateBundle(c, &norsk.Bundle{BundleId: "clash", Jobs: []*norsk.BundleJobSpec{{JobName: "y", StartMode: "manual", Job: e.job("", nil)}}})
	wantCode(t, "CreateBundle whose replica job id is taken", err, norsk.ErrAlreadyExists, "clash.y.0")
	id, err := e.m.CreateBundle(c, &norsk.Bundle{Jobs: []*norsk.BundleJobSpec{{JobName: "a", StartMode: "manual", Job: e.job("", nil)}}})
	must(t, "CreateBundle without an id", err)
	if !strings.HasPrefix(id, "b-") {
		t.Errorf("CreateBundle without an id made %q; want b-…", id)
	}
	must(t, "DeleteBundle", e.m.DeleteBundle(c, id))
}

// eventsSlotLife: a cluster slot's life on the event stream, write by write
// (each line one index, in order), with no registration token in any event.
func eventsSlotLife(t *testing.T, e *env) {
	c := ctx(t)
	s := e.m.EventStream(c, norsk.EventStreamSettings{SkipSnapshot: true})
	defer s.Close()
	slot, err := e.m.RegisterClusterNode(c, "life-slot", "")
	must(t, "RegisterClusterNode", err)
	must(t, "SetClusterNodePool", e.m.SetClusterNodePool(c, slot.GetNodeId(), "gold"))
	must(t, "DeregisterClusterNode", e.m.DeregisterClusterNode(c, slot.GetNodeId()))
	want := []string{
		"cluster_slot_registered",
		"node_tags_updated cluster_slot_updated",
		"node_stopping cluster_slot_updated",
		"node_terminated cluster_slot_deregistered",
	}
	var got []string
	var at uint64
	for len(got) < len(want) || (len(got) == len(want) && !strings.HasSuffix(got[len(got)-1], "cluster_slot_deregistered")) {
		if !s.Next() {
			t.Fatalf("the stream ended: %v (got %q)", s.Err(), got)
		}
		ev := s.Event()
		if !slices.Contains(norsk.EventNodeIDs(ev), slot.GetNodeId()) {
			continue
		}
		for _, x := range []*norsk.ClusterSlotEvent{ev.GetClusterSlotRegistered(), ev.GetClusterSlotUpdated(), ev.GetClusterSlotDeregistered()} {
			if x.GetSlot().GetToken() != "" {
				t.Errorf("%s carries the registration token", norsk.EventKindOf(ev))
			}
		}
		if ev.GetIndex() == at {
			got[len(got)-1] += " " + string(norsk.EventKindOf(ev))
		} else {
			got = append(got, string(norsk.EventKindOf(ev)))
			at = ev.GetIndex()
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("the slot's events, write by write:\n got %q\nwant %q", got, want)
	}
}

// eventsJobLife: a job's life on the event stream: each history entry
// arrives once, in order, on a job event whose index is the entry's.
func eventsJobLife(t *testing.T, e *env) {
	c := ctx(t)
	s := e.m.EventStream(c, norsk.EventStreamSettings{SkipSnapshot: true})
	defer s.Close()
	_, err := e.m.CreateJob(c, e.job("life-ev", nil))
	must(t, "CreateJob", err)
	_, err = e.m.StartJob(c, "life-ev", "primary", e.node, norsk.StartJobOptions{})
	must(t, "StartJob", err)
	_, err = e.m.WaitForJob(c, "life-ev", "primary", norsk.InstancePhaseRunning)
	must(t, "WaitForJob running", err)
	must(t, "StopJob", e.m.StopJob(c, "life-ev", "primary", e.node, norsk.StopJobOptions{}))
	_, err = e.m.WaitForJob(c, "life-ev", "primary", norsk.InstancePhaseStopped)
	must(t, "WaitForJob stopped", err)
	must(t, "DeleteJob", e.m.DeleteJob(c, "life-ev"))
	var got []string
	for s.Next() {
		ev := s.Event()
		if norsk.EventJobID(ev) != "life-ev" {
			continue
		}
		if ev.GetJobDeleted() != nil {
			break
		}
		je := ev.GetJobCreated()
		if je == nil {
			je = ev.GetJobUpdated()
		}
		if je == nil {
			continue
		}
		if je.GetEntry().GetIndex() != ev.GetIndex() {
			t.Errorf("%s: entry at %d, event at %d", norsk.EventKindOf(ev), je.GetEntry().GetIndex(), ev.GetIndex())
		}
		got = append(got, kinds(&norsk.JobWithHistory{History: []*norsk.JobHistoryEntry{je.GetEntry()}})...)
	}
	if want := []string{"created", "provisioned", "running", "stopping", "stopped"}; !slices.Equal(got, want) {
		t.Errorf("the job's entries on the stream = %q; want %q", got, want)
	}
}
