package migrations

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/norsk-go/norsk-manager/internal/cli/cmdutil"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// A repair migration says so in `migration show` and in `events`.
func TestRepairMigrationShown(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	st := &norsk.MigrationState{MigrationId: "3f9c1e2a-1", SourceJobId: "news.channel.1", SourceRole: "backup", SourceNodeId: "w1",
		TargetRole: "backup@3f9c1e2a", TargetNodeId: "w2", Strategy: norsk.StrategyOverlap, Phase: norsk.PhaseLaunching,
		StartedAt: timestamppb.New(now), RequestedBy: "automanager (repair)", Repair: true,
		Reason: "antiAffinity.sameNode: node w1 also runs job \"channel\" of replica 0 (on w1); moving backup (news.channel.1) to w2, which complies"}
	var b bytes.Buffer
	migrationTable(&b, now, st)
	if !strings.Contains(b.String(), "Repair\tantiAffinity.sameNode: node w1 also runs") {
		t.Errorf("migration show:\n%s", b.String())
	}
	ev := &norsk.Event{Kind: &norsk.Event_MigrationUpdated{MigrationUpdated: st}}
	if got := cmdutil.EventSubject(ev); !strings.HasSuffix(got, "(w1 → w2) repair of "+st.GetReason()) {
		t.Errorf("event line %q", got)
	}
}
