package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/cli/audit"
	"github.com/norsk-go/norsk-manager/internal/cli/kv"
	"github.com/norsk-go/norsk-manager/internal/cli/store"
	"github.com/norsk-go/norsk-manager/pkg/snapshotfile"
)

func TestAuditKVUsageErrors(t *testing.T) {
	t.Parallel()
	f := &fixture{t: t} // no Manager: none of these may reach one
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"audit", "log", "--limit", "2000"}, "--limit must be between 1 and 1000"},
		{[]string{"audit", "log", "--since", "someday"}, `--since: "someday" is neither`},
		{[]string{"audit", "log", "--until", "x"}, "--until"},
		{[]string{"audit", "log", "extra"}, "takes 0 argument(s)"},
		{[]string{"audit", "append", "--kind", "k"}, "--source and --kind are required"},
		{[]string{"audit", "append", "--source", "s", "--kind", "k", "--payload", "x", "--payload-file", "f"}, "exclude each other"},
		{[]string{"audit", "prune"}, "--before is required"},
		{[]string{"audit", "prune", "--before", "0"}, "add --yes"},
		{[]string{"audit", "prune", "--before", "soon"}, "--before"},
		{[]string{"kv", "get", "app"}, "takes 2 argument(s) (NAMESPACE KEY)"},
		{[]string{"kv", "put", "app", "k"}, "give the value"},
		{[]string{"kv", "put", "app", "k", "v", "--file", "x"}, "not both"},
		{[]string{"kv", "put", "app"}, "takes NAMESPACE KEY [VALUE]"},
		{[]string{"kv", "put", "app", "k", "v", "--if-revision", "3", "--if-absent"}, "exclude each other"},
		{[]string{"kv", "put", "app", "k", "v", "--if-revision", "-3"}, `invalid argument "-3" for "--if-revision" flag`},
		{[]string{"kv", "delete", "app", "k", "--if-absent"}, "unknown flag: --if-absent"},
		{[]string{"kv", "commit", "app"}, "-f FILE"},
		{[]string{"kv", "list"}, "(NAMESPACE)"},
		{[]string{"store", "info", "x"}, "takes 0 argument(s)"},
		{[]string{"operator", "snapshot", "save"}, "(FILE)"},
		{[]string{"operator", "snapshot", "save", "f", "--stream-timeout", "0s"}, "--stream-timeout must be positive"},
		{[]string{"operator", "snapshot", "inspect"}, "(FILE)"},
	} {
		code, _, errOut := f.run("", tc.args...)
		if code != ExitUsage || !strings.Contains(errOut, tc.msg) {
			t.Errorf("norsk-ctl %s: exit %d, stderr %q; want exit 2 and %q", strings.Join(tc.args, " "), code, errOut, tc.msg)
		}
	}
	if code, out, _ := f.run("", "operator", "snapshot", "--help"); code != 0 || !strings.Contains(out, "norsk-manager snapshot restore --data-dir D <file>") {
		t.Errorf("operator snapshot --help: %d\n%s", code, out)
	}
	if code, out, _ := f.run("", "kv", "commit", "--help"); code != 0 || !strings.Contains(out, "putBase64") || !strings.Contains(out, "expectedSchemaVersion") {
		t.Errorf("kv commit --help: %d\n%s", code, out)
	}
}

func TestAuditCommands(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	out := f.ok("audit", "append", "--source", "external/deploy", "--kind", "release", "--payload", `{"version":"1.4.2"}`)
	if !regexp.MustCompile(`^Appended audit entry 1 at 2025-03-01T11:57:00.000Z \(hash [0-9a-f]{12}…\)\n$`).MatchString(out) {
		t.Errorf("audit append: %q", out)
	}
	code, out, errOut := f.run("a note\nfrom stdin\n", "audit", "append", "--source", "ops", "--kind", "note", "--payload-file", "-", "-o", "json")
	var e map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &e) != nil || e["payload"] != "a note\nfrom stdin\n" || e["seq"] != "2" {
		t.Errorf("audit append --payload-file -: %d %s %s", code, out, errOut)
	}
	f.fails(ExitError, "INVALID_ARGUMENT", "audit", "append", "--source", strings.Repeat("s", 200), "--kind", "k")
	f.ok("kv", "put", "app", "a", "1") // leaves an api entry: 3

	out = f.ok("audit", "log")
	for _, re := range []string{
		`(?m)^SEQ\s+TIME\s+SOURCE\s+CALLER\s+KIND\s+PAYLOAD$`,
		`(?m)^3\s+2025-03-01T11:57:00.000Z\s+api\s+-\s+KvCommit\s+who=peer:127.0.0.1:\d+ method=KvCommit target=kv/app outcome=ok index=\d+$`,
		`(?m)^2\s+\S+\s+external/ops\s+-\s+note\s+a note from stdin$`,
		`(?m)^1\s+\S+\s+external/deploy\s+-\s+release\s+version=1.4.2$`,
		`(?m)^Chain: verified by the Manager at boot$`,
		`(?m)^Retained: seq 1–3, never pruned$`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("audit log lacks %s:\n%s", re, out)
		}
	}
	out = f.ok("audit", "log", "--limit", "1")
	if !strings.Contains(out, "More: --before-seq 3") || strings.Contains(out, "deploy") {
		t.Errorf("audit log --limit 1:\n%s", out)
	}
	out = f.ok("audit", "log", "--limit", "1", "--before-seq", "3", "-o", "json")
	var page struct {
		Entries []struct {
			Seq  string `json:"seq"`
			Hash string `json:"hash"`
		} `json:"entries"`
		NextBeforeSeq string `json:"nextBeforeSeq"`
	}
	if err := json.Unmarshal([]byte(out), &page); err != nil || len(page.Entries) != 1 || page.Entries[0].Seq != "2" || page.Entries[0].Hash == "" || page.NextBeforeSeq != "2" {
		t.Errorf("audit log --before-seq 3 -o json = %+v (%v)\n%s", page, err, out)
	}
	if out := f.ok("audit", "log", "--source", "external/deploy", "--kind", "release", "--since", "1h", "--until", "2025-03-02"); !regexp.MustCompile(`(?m)^1\s`).MatchString(out) || strings.Contains(out, "KvCommit") {
		t.Errorf("audit log with filters:\n%s", out)
	}
	if out := f.ok("audit", "log", "--since", "2m"); !strings.Contains(out, "No audit entries match.") {
		t.Errorf("audit log --since 2m (the entries are 3m old):\n%s", out)
	}
	// --all pages through everything.
	for i := 0; i < 3; i++ {
		f.ok("audit", "append", "--source", "s", "--kind", "k")
	}
	out = f.ok("audit", "log", "--all", "-o", "json")
	page.NextBeforeSeq = ""
	if err := json.Unmarshal([]byte(out), &page); err != nil || len(page.Entries) != 6 || page.NextBeforeSeq != "" {
		t.Errorf("audit log --all = %d entries, next %q (%v)", len(page.Entries), page.NextBeforeSeq, err)
	}

	// verify: intact, then tampered.
	out = f.ok("audit", "verify")
	if !strings.Contains(out, "verified 6 entries from checkpoint seq 0 (never pruned) (seq 1–6)") || !strings.Contains(out, "Manager's check at boot: verified") {
		t.Errorf("audit verify:\n%s", out)
	}
	f.srv.TamperAuditEntry(2, func(e *managerv1.AuditLogEntry) { e.Payload = "a forged note" })
	f.srv.SetAuditBootVerdict(false, "audit chain broken at entry 2: altered")
	code, out, errOut = f.run("", "audit", "verify")
	if code != ExitError || !strings.Contains(errOut, "Error: audit chain broken at entry 2: its hash") || !strings.Contains(errOut, "does not match its contents (it was altered)") ||
		!strings.Contains(out, "BROKEN at entry 2") || !strings.Contains(out, "Manager's check at boot: NOT verified: audit chain broken at entry 2: altered") {
		t.Errorf("audit verify of a tampered chain: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	code, out, _ = f.run("", "audit", "verify", "-o", "json")
	var v audit.Verification
	if code != ExitError || json.Unmarshal([]byte(out), &v) != nil || v.Verified || v.BrokenAtSeq != "2" || v.Checked != 6 || v.ChainVerifiedAtBoot {
		t.Errorf("audit verify -o json of a tampered chain: %d %+v", code, v)
	}
	if out := f.ok("audit", "log", "--limit", "1"); !strings.Contains(out, "Chain: NOT verified by the Manager at boot: audit chain broken at entry 2: altered") {
		t.Errorf("audit log footer:\n%s", out)
	}

	// prune: nothing older than an hour; the future is refused; everything.
	if out := f.ok("audit", "prune", "--before", "1h"); !strings.Contains(out, "Pruned 0 audit entries; the chain now starts after checkpoint seq 0") {
		t.Errorf("audit prune --before 1h: %s", out)
	}
	f.fails(ExitError, "in the future", "audit", "prune", "--before", "2099-01-01")
	out = f.ok("audit", "prune", "--before", "0", "--yes", "-o", "json")
	var p audit.Pruned
	if err := json.Unmarshal([]byte(out), &p); err != nil || p.Removed != "7" || p.CheckpointSeq != "7" {
		t.Errorf("audit prune --before 0 --yes -o json = %+v (%v)\n%s", p, err, out)
	}
	out = f.ok("audit", "verify")
	if !strings.Contains(out, "verified 1 entries from checkpoint seq 7 (seq 8–8)") {
		t.Errorf("audit verify after pruning everything:\n%s", out)
	}
	if out := f.ok("audit", "log"); !strings.Contains(out, "Retained: seq 8–8, after checkpoint seq 7 (pruned up to 2025-03-01T11:57:00.000Z)") || !strings.Contains(out, "audit-pruned") {
		t.Errorf("audit log after a prune:\n%s", out)
	}
}

func TestKVCommands(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	revOf := func(out string) string {
		t.Helper()
		m := regexp.MustCompile(`at revision (\d+)\n$`).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("no revision in %q", out)
		}
		return m[1]
	}
	r1 := revOf(f.ok("kv", "put", "app", "config/region", "eu-west-1", "--if-absent"))
	if out := f.ok("kv", "get", "app", "config/region"); out != "eu-west-1\n" {
		t.Errorf("kv get = %q", out)
	}
	if out := f.ok("kv", "get", "app", "config/region", "--raw"); out != "eu-west-1" {
		t.Errorf("kv get --raw = %q", out)
	}
	out := f.ok("kv", "get", "app", "config/region", "-o", "json")
	var entry map[string]string
	if err := json.Unmarshal([]byte(out), &entry); err != nil || entry["revision"] != r1 || entry["createRevision"] != r1 || entry["value"] != "ZXUtd2VzdC0x" {
		t.Errorf("kv get -o json = %v (%v)", entry, err)
	}
	f.fails(ExitError, `NOT_FOUND: key "nope" of namespace "app" not found`, "kv", "get", "app", "nope")
	f.fails(ExitError, "INVALID_ARGUMENT", "kv", "get", "app", "bad\x00key")

	// Guards.
	f.fails(ExitError, `FAILED_PRECONDITION: writes[0]: key "config/region" exists`, "kv", "put", "app", "config/region", "x", "--if-absent")
	r2 := revOf(f.ok("kv", "put", "app", "config/region", "eu-north-1", "--if-revision", r1))
	f.fails(ExitError, fmt.Sprintf(`is at revision %s; the write expects %s`, r2, r1), "kv", "put", "app", "config/region", "x", "--if-revision", r1)
	f.fails(ExitError, "FAILED_PRECONDITION", "kv", "delete", "app", "config/region", "--if-revision", r1)

	// A binary value from stdin.
	code, out, errOut := f.run("\x00\x01\x02binary", "kv", "put", "app", "blob", "--file", "-")
	if code != 0 || !strings.HasPrefix(out, "Put app/blob at revision ") {
		t.Fatalf("kv put --file -: %d %q %q", code, out, errOut)
	}
	code, out, errOut = f.run("", "kv", "get", "app", "blob")
	if code != 0 || out != "AAECYmluYXJ5\n" || !strings.Contains(errOut, "binary value of 9 bytes") {
		t.Errorf("kv get of a binary value: %d %q %q", code, out, errOut)
	}
	f.ok("kv", "put", "app", "config/ladder", "--file", writeFile(t, "ladder.json", `{"rungs": [1080, 720]}`))

	// list.
	out = f.ok("kv", "list", "app")
	for _, re := range []string{
		`(?m)^Namespace app: schema version 0, 3 keys$`,
		`(?m)^KEY\s+REVISION\s+SIZE\s+VALUE$`,
		`(?m)^blob\s+\d+\s+9\s+\(binary, 9 bytes\)$`,
		`(?m)^config/ladder\s+\d+\s+22\s+\{"rungs": \[1080, 720\]\}$`,
		`(?m)^config/region\s+` + r2 + `\s+10\s+eu-north-1$`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("kv list lacks %s:\n%s", re, out)
		}
	}
	out = f.ok("kv", "list", "app", "--prefix", "config/", "-o", "json")
	var listing struct {
		Namespace     string `json:"namespace"`
		SchemaVersion string `json:"schemaVersion"`
		Entries       []struct {
			Key      string `json:"key"`
			Revision string `json:"revision"`
		} `json:"entries"`
	}
	if err := json.Unmarshal([]byte(out), &listing); err != nil || listing.Namespace != "app" || len(listing.Entries) != 2 || listing.Entries[1].Key != "config/region" || listing.Entries[1].Revision != r2 {
		t.Errorf("kv list --prefix -o json = %+v (%v)", listing, err)
	}
	if out := f.ok("kv", "list", "empty"); out != "Namespace empty: schema version 0, 0 keys\n" {
		t.Errorf("kv list of an empty namespace = %q", out)
	}

	// commit: an object with schema options (YAML), then a bare list (JSON
	// from stdin).
	commit := writeFile(t, "commit.yaml", fmt.Sprintf(`
expectedSchemaVersion: 0
setSchemaVersion: 2
writes:
  - key: config/region
    put: us-east-1
    expectedRevision: %s
  - key: logo
    putBase64: AAEC
  - key: lock
    put: ""
    expectedRevision: 0
  - key: blob
    delete: true
`, r2))
	out = f.ok("kv", "commit", "app", "-f", commit)
	if !regexp.MustCompile(`^Committed 4 write\(s\) to app at revision \d+\n$`).MatchString(out) {
		t.Errorf("kv commit: %q", out)
	}
	if out := f.ok("kv", "list", "app"); !strings.Contains(out, "schema version 2, 4 keys") || !regexp.MustCompile(`(?m)^lock\s+\d+\s+0\s+$`).MatchString(out) || strings.Contains(out, "blob") {
		t.Errorf("kv list after the commit:\n%s", out)
	}
	// The same commit again: its expectations no longer hold; nothing changes.
	f.fails(ExitError, "FAILED_PRECONDITION: namespace \"app\" is at schema version 2, the commit expects 0", "kv", "commit", "app", "-f", commit)
	code, out, errOut = f.run(`[{"key": "a", "put": "1"}, {"key": "logo", "delete": true, "expectedRevision": 1}]`, "kv", "commit", "app", "-f", "-")
	if code != ExitError || !strings.Contains(errOut, `writes[1]: key "logo" is at revision`) {
		t.Errorf("kv commit of a stale list: %d %q %q", code, out, errOut)
	}
	if code, _, _ := f.run("", "kv", "get", "app", "a"); code != ExitError {
		t.Errorf("a refused commit wrote key a")
	}
	out = f.ok("kv", "commit", "app", "-f", writeFile(t, "c.json", `[{"key": "a", "put": "1"}, {"key": "logo", "delete": true}]`), "-o", "json")
	var c kv.Committed
	if err := json.Unmarshal([]byte(out), &c); err != nil || c.Writes != 2 || c.Namespace != "app" || c.Revision == "" {
		t.Errorf("kv commit -o json = %+v (%v)", c, err)
	}
	// Delete (unguarded: an absent key is fine).
	if out := f.ok("kv", "delete", "app", "a"); !strings.HasPrefix(out, "Deleted app/a at revision ") {
		t.Errorf("kv delete: %q", out)
	}
	f.ok("kv", "delete", "app", "a")

	// Malformed commit files.
	for _, tc := range []struct{ file, msg string }{
		{`[{"key": "a", "put": "1", "delete": true}]`, "writes[0] (key \"a\"): give exactly one of put, putBase64 and delete: true"},
		{`[{"key": "a"}]`, "give exactly one of"},
		{`[{"key": "a", "putBase64": "!!"}]`, "writes[0].putBase64"},
		{`{"writes": [], "color": "red"}`, `unknown field "color"`},
		{`"just text"`, "want a list of writes"},
		{"writes: [", "yaml"},
	} {
		f.fails(ExitError, tc.msg, "kv", "commit", "app", "-f", writeFile(t, "bad.yaml", tc.file))
	}
	f.fails(ExitError, "INVALID_ARGUMENT: writes: nothing to commit", "kv", "commit", "app", "-f", writeFile(t, "empty.yaml", "[]"))
}

func TestStoreInfoCommand(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	out := f.ok("store", "info")
	for _, want := range []string{"Data dir:", "/fake/norsktest", "Store state:", "schema version 2 (current)", "Restored:       no", "Migrated:       no", "No backups."} {
		if !strings.Contains(out, want) {
			t.Errorf("store info lacks %q:\n%s", want, out)
		}
	}
	created := timestamppb.New(now.Add(-time.Hour))
	f.srv.SetStoreInfo(&managerv1.StoreInfo{
		Stores:       []*managerv1.StoreSchema{{Name: "state", SchemaVersion: 2, BinarySchemaVersion: 3}},
		AppliedIndex: 4321,
		DataDir:      "/var/lib/norsk-manager",
		Boot: &managerv1.BootReport{
			RestoredFromBackup: true, RestoredBackup: "/var/lib/norsk-manager/backups/b-100.snap", RestoreReason: "state.db: checksum mismatch",
			UnreadableStoreMovedTo: "/var/lib/norsk-manager/unreadable-1",
			Migrated:               true, MigratedFrom: 1, MigratedTo: 2, PreUpgradeBackup: "/var/lib/norsk-manager/backups/pre-upgrade.snap",
			BootedAt: timestamppb.New(now.Add(-5 * time.Minute)),
		},
		Backups: []*managerv1.BackupInfo{
			{Path: "/var/lib/norsk-manager/backups/pre-upgrade.snap", Index: 4000, SchemaVersion: 1, CreatedAt: created, Bytes: 3 << 20, Reason: "pre-upgrade"},
			{Path: "/var/lib/norsk-manager/backups/b-100.snap", Index: 100, SchemaVersion: 1, CreatedAt: created, Bytes: 2048, Reason: "scheduled"},
		},
	})
	out = f.ok("store", "info")
	for _, re := range []string{
		`(?m)^Applied index:\s+4321$`,
		`(?m)^Store state:\s+schema version 2 \(this binary writes 3\)$`,
		`(?m)^Booted:\s+2025-03-01T11:55:00Z \(5m ago\)$`,
		`(?m)^Restored:\s+from /var/lib/norsk-manager/backups/b-100.snap: state.db: checksum mismatch; the unreadable store was moved to /var/lib/norsk-manager/unreadable-1$`,
		`(?m)^Migrated:\s+schema 1 → 2, after the pre-upgrade backup /var/lib/norsk-manager/backups/pre-upgrade.snap$`,
		`(?m)^BACKUP\s+INDEX\s+SCHEMA\s+CREATED\s+SIZE\s+REASON$`,
		`(?m)^/var/lib/norsk-manager/backups/pre-upgrade.snap\s+4000\s+1\s+2025-03-01T11:00:00Z\s+3.0 MiB\s+pre-upgrade$`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("store info lacks %s:\n%s", re, out)
		}
	}
	out = f.ok("store", "info", "-o", "json")
	if !strings.Contains(out, `"migratedFrom": 1`) || !strings.Contains(out, `"appliedIndex": "4321"`) {
		t.Errorf("store info -o json:\n%s", out)
	}
}

// testSnapshot writes a snapshot with pkg/snapshotfile: 2 jobs, 1 instance,
// 1 node, 3 audit entries, 2 KV keys in 1 namespace, at index 77.
func testSnapshot(t *testing.T) []byte {
	var buf bytes.Buffer
	w := snapshotfile.NewWriter(&buf)
	recs := []*storev1.SnapshotRecord{
		{Record: &storev1.SnapshotRecord_Header{Header: &storev1.SnapshotHeader{SchemaVersion: 2, Index: 77}}},
		{Record: &storev1.SnapshotRecord_StoreMeta{StoreMeta: &storev1.StoreMeta{SchemaVersion: 2}}},
		{Record: &storev1.SnapshotRecord_Job{Job: &storev1.JobRecord{Job: &managerv1.Job{JobId: "news-1"}}}},
		{Record: &storev1.SnapshotRecord_Job{Job: &storev1.JobRecord{Job: &managerv1.Job{JobId: "sport-1"}}}},
		{Record: &storev1.SnapshotRecord_Instance{Instance: &managerv1.Instance{JobId: "news-1", Role: "primary"}}},
		{Record: &storev1.SnapshotRecord_Node{Node: &storev1.NodeRecord{Node: &managerv1.Node{NodeId: "worker-1"}}}},
		{Record: &storev1.SnapshotRecord_AuditState{AuditState: &storev1.AuditState{NextSeq: 4}}},
		{Record: &storev1.SnapshotRecord_KvNamespace{KvNamespace: &storev1.KvNamespace{Name: "app", SchemaVersion: 1}}},
		{Record: &storev1.SnapshotRecord_Kv{Kv: &storev1.KvRecord{Namespace: "app", Entry: &managerv1.KvEntry{Key: "a", Value: []byte("AAAAAAAAAAAAAAAA")}}}},
		{Record: &storev1.SnapshotRecord_Kv{Kv: &storev1.KvRecord{Namespace: "app", Entry: &managerv1.KvEntry{Key: "b", Value: []byte("bbb")}}}},
	}
	for i := int64(1); i <= 3; i++ {
		recs = append(recs, &storev1.SnapshotRecord{Record: &storev1.SnapshotRecord_AuditEntry{AuditEntry: &managerv1.AuditLogEntry{Seq: i, Source: "api"}}})
	}
	for _, r := range recs {
		if err := w.Put(r); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestSnapshotInspect(t *testing.T) {
	t.Parallel()
	f := &fixture{t: t} // inspect needs no Manager
	data := testSnapshot(t)
	good := writeFile(t, "good.snap", string(data))
	out := f.ok("operator", "snapshot", "inspect", good)
	for _, re := range []string{
		`(?m)^Size:\s+\d+ B \(` + fmt.Sprint(len(data)) + ` bytes\)$`,
		`(?m)^Index:\s+77$`,
		`(?m)^Schema version:\s+2$`,
		`(?m)^Records:\s+12 \(checksum OK\)$`,
		`(?m)^Audit chain:\s+next seq 4, never pruned$`,
		`(?m)^jobs\s+2$`, `(?m)^instances\s+1$`, `(?m)^nodes\s+1$`,
		`(?m)^audit entries\s+3$`, `(?m)^KV keys\s+2$`, `(?m)^KV namespaces\s+1$`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("inspect lacks %s:\n%s", re, out)
		}
	}
	out = f.ok("operator", "snapshot", "inspect", good, "-o", "json")
	var s store.SnapshotSummary
	if err := json.Unmarshal([]byte(out), &s); err != nil || s.Index != "77" || s.Counts["KV keys"] != 2 || s.Counts["jobs"] != 2 || s.Bytes != fmt.Sprint(len(data)) {
		t.Errorf("inspect -o json = %+v (%v)\n%s", s, err, out)
	}

	// One byte flipped inside a value: it still decodes, but fails its checksum.
	flipped := bytes.Clone(data)
	i := bytes.Index(flipped, []byte("AAAAAAAAAAAAAAAA"))
	flipped[i+5] = 'B'
	bad := writeFile(t, "flipped.snap", string(flipped))
	f.fails(ExitError, "DATA_LOSS: "+bad+" is damaged: snapshot fails its checksum: trailer", "operator", "snapshot", "inspect", bad)
	// Cut short: not a (complete) snapshot.
	f.fails(ExitError, "INVALID_ARGUMENT", "operator", "snapshot", "inspect", writeFile(t, "short.snap", string(data[:len(data)-4])))
	f.fails(ExitError, "is not a valid snapshot file: corrupt snapshot", "operator", "snapshot", "inspect", writeFile(t, "short2.snap", string(data[:len(data)/2])))
	f.fails(ExitError, "INVALID_ARGUMENT", "operator", "snapshot", "inspect", writeFile(t, "text.snap", "this is not a snapshot\n"))
	f.fails(ExitError, "INVALID_ARGUMENT", "operator", "snapshot", "inspect", writeFile(t, "empty.snap", ""))
	f.fails(ExitError, "no such file", "operator", "snapshot", "inspect", filepath.Join(t.TempDir(), "missing.snap"))
}

func TestSnapshotSave(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.srv.AddNode(&managerv1.Node{NodeId: "node-1"})
	f.ok("kv", "put", "app", "a", "1")
	f.ok("kv", "put", "app", "b", "2")
	dir := t.TempDir()
	file := filepath.Join(dir, "manager.snap")
	out := f.ok("operator", "snapshot", "save", file)
	m := regexp.MustCompile(`^Saved a snapshot at index (\d+) \(schema version 2, (\d+) records\) to ` + regexp.QuoteMeta(file) + `: (\d+) bytes\n$`).FindStringSubmatch(out)
	if m == nil || m[1] != fmt.Sprint(f.srv.Index()) {
		t.Fatalf("snapshot save: %q (the fake is at %d)", out, f.srv.Index())
	}
	if fi, err := os.Stat(file); err != nil || fmt.Sprint(fi.Size()) != m[3] {
		t.Fatalf("the saved file: %v, %v", fi, err)
	}
	out = f.ok("operator", "snapshot", "inspect", file)
	for _, re := range []string{`(?m)^KV keys\s+2$`, `(?m)^nodes\s+1$`, `(?m)^audit entries\s+2$`, `(?m)^Index:\s+` + m[1] + `$`} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("inspect of the saved snapshot lacks %s:\n%s", re, out)
		}
	}
	// An existing file is replaced only with --force.
	f.fails(ExitError, "exists (--force replaces it)", "operator", "snapshot", "save", file)
	f.ok("kv", "put", "app", "c", "3")
	out = f.ok("operator", "snapshot", "save", file, "--force", "-o", "json")
	var s store.SnapshotSummary
	if err := json.Unmarshal([]byte(out), &s); err != nil || s.Counts["KV keys"] != 3 || s.Index != fmt.Sprint(f.srv.Index()) {
		t.Errorf("save --force -o json = %+v (%v)", s, err)
	}

	// A missing directory is made (0700), as the README's
	// `operator snapshot save /backups/manager.snap` needs.
	nested := filepath.Join(t.TempDir(), "backups", "daily", "manager.snap")
	f.ok("operator", "snapshot", "save", nested)
	if fi, err := os.Stat(filepath.Dir(nested)); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("the made directory: %v, %v", fi, err)
	}
	if fi, err := os.Stat(nested); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the snapshot in a made directory: %v, %v", fi, err)
	}

	// A damaged stream is refused and leaves nothing behind.
	data := testSnapshot(t)
	data[bytes.Index(data, []byte("AAAA"))] = 'C'
	f.srv.SetSnapshotData(data)
	bad := filepath.Join(dir, "bad.snap")
	f.fails(ExitError, "does not verify (nothing was written to "+bad+"): DATA_LOSS", "operator", "snapshot", "save", bad)
	f.srv.SetSnapshotData(nil)
	// A failing stream too.
	f.srv.SetError("SnapshotSave", fmt.Errorf("boom"))
	f.fails(ExitError, "save a snapshot: SnapshotSave: UNKNOWN: boom", "operator", "snapshot", "save", bad)
	f.srv.SetError("SnapshotSave", nil)
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if strings.Join(names, ",") != "manager.snap" {
		t.Errorf("the directory holds %v; want the one snapshot and no partial files", names)
	}
	// Under a file, no directory can be made.
	f.fails(ExitError, "create the snapshot's directory", "operator", "snapshot", "save", filepath.Join(file, "dir.snap"))
}
