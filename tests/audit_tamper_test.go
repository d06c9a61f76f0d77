package tests

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/norsk-go/norsk-manager/internal/auth"
	"github.com/norsk-go/norsk-manager/internal/cli"
	"github.com/norsk-go/norsk-manager/internal/manager"
	"github.com/norsk-go/norsk-manager/pkg/snapshotfile"
	"github.com/norsk-go/norsk-manager/sdk/norsk"

	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
)

// Tampering with the stored audit log — an entry's payload edited in a
// snapshot that is then restored, its checksum re-sealed so only the chain
// can tell — is caught at boot (GetAuditLog says the chain did not verify,
// naming the entry) and by `norsk-ctl audit verify`, which names it too.
func TestAuditTamperCaughtAtBootAndByVerify(t *testing.T) {
	t.Parallel()
	quiet := slog.New(slog.DiscardHandler)
	tok := auth.NewToken()
	start := func(dir string) *manager.Server {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		s, err := manager.New(ctx, manager.Config{DataDir: dir, Listen: "127.0.0.1:0", NodeName: "m1", Logger: quiet, BackupInterval: -1, BootstrapToken: tok})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	x := ctx(t)

	// A member with a few audited writes; save its state.
	src := start(t.TempDir())
	cl, err := norsk.Connect(x, norsk.Settings{URL: src.URL(), Token: tok})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b", "c"} {
		if _, err := cl.CreateJob(x, &norsk.Job{JobId: id, Services: []*norsk.Service{{Name: "main", Image: "x:1"}}}); err != nil {
			t.Fatal(err)
		}
	}
	var saved bytes.Buffer
	if _, err := cl.SnapshotSave(x, &saved); err != nil {
		t.Fatal(err)
	}
	_ = cl.Close()
	if err := src.Close(); err != nil {
		t.Fatal(err)
	}

	// Edit entry 4's payload (1 is store-created, 2 the bootstrap token, 3
	// the CreateJob of "a", 4 of "b") and re-seal the file.
	const victim = 4
	rd := snapshotfile.NewReader(bytes.NewReader(saved.Bytes()))
	var recs []*storev1.SnapshotRecord
	for {
		rec, err := rd.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if e := rec.GetAuditEntry(); e != nil && e.GetSeq() == victim {
			e.Payload = strings.Replace(e.GetPayload(), `"job/b"`, `"job/z"`, 1)
		}
		recs = append(recs, rec)
	}
	var tampered bytes.Buffer
	w := snapshotfile.NewWriter(&tampered)
	if err := w.Put(&storev1.SnapshotRecord{Record: &storev1.SnapshotRecord_Header{Header: rd.Header()}}); err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if err := w.Put(r); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.Close(); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "tampered.nsnap")
	if err := os.WriteFile(file, tampered.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}

	// Restore it into a new member and boot.
	dst := filepath.Join(t.TempDir(), "member")
	if _, err := manager.RestoreOffline(x, manager.Config{DataDir: dst, NodeName: "m1", Logger: quiet}, file); err != nil {
		t.Fatal(err)
	}
	s := start(dst)
	defer s.Close()
	cl, err = norsk.Connect(x, norsk.Settings{URL: s.URL(), Token: tok})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	page, err := cl.GetAuditLog(x, norsk.AuditLogQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if page.GetChainVerifiedAtBoot() || !strings.Contains(page.GetVerificationDetail(), "entry 4") {
		t.Fatalf("at boot: verified=%v, detail %q; want a failure naming entry 4", page.GetChainVerifiedAtBoot(), page.GetVerificationDetail())
	}

	n := ctl{t: t, url: s.URL(), token: tok}
	code, out, errOut := n.run("", "audit", "verify")
	if code != cli.ExitError || !strings.Contains(out+errOut, "entry 4") {
		t.Fatalf("audit verify: exit %d\nstdout: %s\nstderr: %s\nwant exit 1 naming entry 4", code, out, errOut)
	}
}
