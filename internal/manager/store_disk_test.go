package manager_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
)

// TestFullDiskIsReportedAndHealsByItself is issue 12 item 7 through the
// API, on a real filesystem that fills up (a 200 MB tmpfs; root only): a
// write on the nearly full disk is RESOURCE_EXHAUSTED naming the disk, not
// an INTERNAL `segment is sealed`; /healthz says "disk full" and why; and
// once space is back, writes and /healthz recover by themselves, with no
// restart.
func TestFullDiskIsReportedAndHealsByItself(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a small tmpfs (a filesystem that fills up)")
	}
	mnt := filepath.Join(t.TempDir(), "disk")
	if err := os.Mkdir(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=200m", "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs here (%v: %s)", err, strings.TrimSpace(string(out)))
	}
	t.Cleanup(func() { _ = exec.Command("umount", mnt).Run() })

	s, c := stStart(t, stConfig(mnt, nil))
	ctx := stCtx(t)
	put := func(key string) error {
		_, err := c.KvCommit(ctx, connect.NewRequest(&managerv1.KvCommitRequest{Namespace: "ns", Writes: []*managerv1.KvWrite{
			{Key: key, Op: &managerv1.KvWrite_Put{Put: []byte("v")}},
		}}))
		return err
	}
	health := func() (int, map[string]any) {
		t.Helper()
		resp, err := http.Get(s.URL() + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, body
	}
	if err := put("before"); err != nil {
		t.Fatal(err)
	}
	if code, body := health(); code != http.StatusOK {
		t.Fatalf("healthz before: %d %v", code, body)
	}

	// Something else fills the disk, leaving less than the store keeps
	// free (a 64 MiB segment and 16 MiB).
	filler := filepath.Join(mnt, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 1<<20)
	for range 90 {
		if _, err := f.Write(chunk); err != nil {
			break
		}
	}
	_ = f.Sync()
	_ = f.Close()

	// The store reads the free space at most every 25 ms: a write within
	// that of the fill may still see the old reading. The first write
	// after a fresh one is refused.
	deadline := time.Now().Add(5 * time.Second)
	for err = put("while-full"); err == nil && time.Now().Before(deadline); err = put("while-full") {
		time.Sleep(10 * time.Millisecond)
	}
	if connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), mnt) {
		t.Fatalf("regression: a write on the nearly full disk got %v (code %v), want RESOURCE_EXHAUSTED naming %s", err, connect.CodeOf(err), mnt)
	}
	code, body := health()
	if code != http.StatusServiceUnavailable || body["status"] != "disk full" || !strings.Contains(fmt.Sprint(body["store"]), mnt) {
		t.Errorf("healthz on the full disk: %d %v", code, body)
	}

	// A restart on the full disk: the member boots and serves reads; writes
	// are still refused, saying why.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, c = stStart(t, stConfig(mnt, nil))
	if got, err := c.KvGet(ctx, connect.NewRequest(&managerv1.KvGetRequest{Namespace: "ns", Key: "before"})); err != nil || string(got.Msg.GetEntry().GetValue()) != "v" {
		t.Errorf("a read after a restart on the full disk: %v %v", got, err)
	}
	if err := put("while-full"); connect.CodeOf(err) != connect.CodeResourceExhausted {
		t.Errorf("a write after a restart on the full disk: %v, want RESOURCE_EXHAUSTED", err)
	}

	// Space comes back: the member takes writes again by itself.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(10 * time.Second)
	for put("after") != nil {
		if time.Now().After(deadline) {
			t.Fatalf("writes did not resume within 10 s of space coming back: %v", put("after"))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if code, body := health(); code != http.StatusOK {
		t.Errorf("healthz after space came back: %d %v", code, body)
	}
}
