package worker

import (
	"context"
	"io"
	"log/slog"
	"testing"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
)

func reportAgent(t *testing.T) *Agent {
	t.Helper()
	a, err := New(Config{ManagerURL: "http://127.0.0.1:1", DataDir: t.TempDir(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func migrationReport(n int) *managerv1.MigrationReport {
	return &managerv1.MigrationReport{JobId: "j", Role: "r", FencingToken: uint64(n), Kind: managerv1.MigrationReportKind_MIGRATION_REPORT_KIND_STATE}
}

// TestMigrationReportsKeptBounded: without a stream reports are kept, the
// oldest dropped past the bound, and the rest sent after the next hello.
func TestMigrationReportsKeptBounded(t *testing.T) {
	t.Parallel()
	a := reportAgent(t)
	for i := range maxPendingMigrationReports + 10 {
		a.reportMigration(migrationReport(i))
	}
	if n := len(a.migPending); n != maxPendingMigrationReports {
		t.Fatalf("kept %d, want %d", n, maxPendingMigrationReports)
	}
	if got := a.migPending[0].GetMigration().GetFencingToken(); got != 10 {
		t.Fatalf("oldest kept is #%d, want #10", got)
	}
	a.id = &Identity{NodeID: "n"}
	s, err := a.openSession(context.Background(), Epoch{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.closeSession(s)
	if m, _ := s.pop(); m.msg.GetHello() == nil {
		t.Fatalf("first message %v, want the hello", m.msg)
	}
	for i := 10; i < maxPendingMigrationReports+10; i++ {
		m, ok := s.pop()
		if !ok || m.msg.GetMigration().GetFencingToken() != uint64(i) {
			t.Fatalf("message %d: %v", i, m.msg)
		}
	}
	if len(a.migPending) != 0 {
		t.Fatalf("%d still kept", len(a.migPending))
	}
}

// TestMigrationReportsRescuedFromAnEndedStream: reports a stream had not
// sent when it ended are kept for the next.
func TestMigrationReportsRescuedFromAnEndedStream(t *testing.T) {
	t.Parallel()
	a := reportAgent(t)
	a.id = &Identity{NodeID: "n"}
	s, err := a.openSession(context.Background(), Epoch{})
	if err != nil {
		t.Fatal(err)
	}
	a.reportMigration(migrationReport(1))
	a.reportMigration(migrationReport(2))
	a.closeSession(s) // nothing was sent
	if len(a.migPending) != 2 || a.migPending[0].GetMigration().GetFencingToken() != 1 {
		t.Fatalf("kept %v", a.migPending)
	}
}
