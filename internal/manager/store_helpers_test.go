package manager_test

// Helpers of the store tests (store_*_test.go): a Manager on a temporary
// data directory, its API client, and snapshot file surgery. Names start
// with "st" so they do not clash with other test files of the package.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1/managerv1connect"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/auth"
	"github.com/norsk-go/norsk-manager/internal/clock"
	"github.com/norsk-go/norsk-manager/internal/manager"
	"github.com/norsk-go/norsk-manager/internal/nodes"
	"github.com/norsk-go/norsk-manager/pkg/snapshotfile"
)

// stT0 is the fake clock's start in the store tests.
var stT0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func stCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// stConfig is a Manager config for dir: member m1, any port, no logs,
// scheduled backups off unless the test turns them on.
func stConfig(dir string, clk clock.Clock) manager.Config {
	return manager.Config{
		DataDir:        dir,
		Listen:         "127.0.0.1:0",
		NodeName:       "m1",
		Logger:         slog.New(slog.DiscardHandler),
		BackupInterval: -1,
		Clock:          clk,
		BootstrapToken: stToken,
		// The store tests count the clock's timers (the backup loop's);
		// the AutoManager would set its own.
		DisableAutoManager: true,
	}
}

// stToken is every test store's admin token: a store restored from another
// test store carries it too.
var stToken = auth.NewToken()

// stStart starts a Manager; it is closed when the test ends (closing it
// earlier is fine).
func stStart(t testing.TB, cfg manager.Config) (*manager.Server, managerv1connect.ManagerClient) {
	t.Helper()
	s, err := manager.New(stCtx(t), cfg)
	if err != nil {
		t.Fatalf("start manager on %s: %v", cfg.DataDir, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, stClient(s)
}

func stClient(s *manager.Server) managerv1connect.ManagerClient {
	return managerv1connect.NewManagerClient(nodes.H2CClient(), s.URL(), connect.WithGRPC(), auth.WithBearer(stToken))
}

func stJob(id string) *managerv1.Job {
	return &managerv1.Job{JobId: id, Tags: map[string]string{"team": "store"}, Services: []*managerv1.Service{{Name: "main", Image: "hello:dev"}}}
}

func stCode(err error) connect.Code {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce.Code()
	}
	return connect.CodeUnknown
}

func stCreateJobs(t testing.TB, c managerv1connect.ManagerClient, ids ...string) {
	t.Helper()
	for _, id := range ids {
		if _, err := c.CreateJob(stCtx(t), connect.NewRequest(&managerv1.CreateJobRequest{Job: stJob(id)})); err != nil {
			t.Fatalf("CreateJob %s: %v", id, err)
		}
	}
}

// stJobIDs lists every job id the Manager has.
func stJobIDs(t testing.TB, c managerv1connect.ManagerClient) []string {
	t.Helper()
	res, err := c.JobSearch(stCtx(t), connect.NewRequest(&managerv1.JobSearchRequest{}))
	if err != nil {
		t.Fatalf("JobSearch: %v", err)
	}
	var out []string
	for _, j := range res.Msg.GetJobs() {
		out = append(out, j.GetJob().GetJobId())
	}
	return out
}

func stStoreInfo(t testing.TB, c managerv1connect.ManagerClient) *managerv1.StoreInfo {
	t.Helper()
	res, err := c.GetStoreInfo(stCtx(t), connect.NewRequest(&managerv1.GetStoreInfoRequest{}))
	if err != nil {
		t.Fatalf("GetStoreInfo: %v", err)
	}
	return res.Msg
}

// stAuditLog returns the whole audit log answer (newest first).
func stAuditLog(t testing.TB, c managerv1connect.ManagerClient) *managerv1.GetAuditLogResponse {
	t.Helper()
	res, err := c.GetAuditLog(stCtx(t), connect.NewRequest(&managerv1.GetAuditLogRequest{Limit: 1000}))
	if err != nil {
		t.Fatalf("GetAuditLog: %v", err)
	}
	return res.Msg
}

// stSnapshotSave streams SnapshotSave into a file and returns its path.
func stSnapshotSave(t testing.TB, c managerv1connect.ManagerClient, path string) string {
	t.Helper()
	stream, err := c.SnapshotSave(stCtx(t), connect.NewRequest(&managerv1.SnapshotSaveRequest{}))
	if err != nil {
		t.Fatalf("SnapshotSave: %v", err)
	}
	var buf bytes.Buffer
	for stream.Receive() {
		buf.Write(stream.Msg().GetData())
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("SnapshotSave stream: %v", err)
	}
	_ = stream.Close()
	if err := os.WriteFile(path, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// stReadRecords decodes a snapshot: its records, header first, without the
// trailer (which must verify).
func stReadRecords(t testing.TB, data []byte) []*storev1.SnapshotRecord {
	t.Helper()
	r := snapshotfile.NewReader(bytes.NewReader(data))
	var out []*storev1.SnapshotRecord
	for {
		rec, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("read snapshot: %v", err)
		}
		out = append(out, rec)
	}
	return append([]*storev1.SnapshotRecord{{Record: &storev1.SnapshotRecord_Header{Header: r.Header()}}}, out...)
}

// stWriteRecords frames records (header first) as a snapshot with a
// correct trailer.
func stWriteRecords(t testing.TB, recs []*storev1.SnapshotRecord) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := snapshotfile.NewWriter(&buf)
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

// stSameRecords compares two snapshots record by record, except the header
// (it holds the applied index); "" when equal.
func stSameRecords(t testing.TB, a, b []byte) string {
	t.Helper()
	ra, rb := stReadRecords(t, a), stReadRecords(t, b)
	if len(ra) != len(rb) {
		return "record counts differ: " + strconv.Itoa(len(ra)) + " vs " + strconv.Itoa(len(rb))
	}
	for i := 1; i < len(ra); i++ {
		if ra[i].GetMember() != nil && rb[i].GetMember() != nil {
			// A member's own record follows its address (a restored
			// member listens where it is started now).
			ma, mb := proto.Clone(ra[i].GetMember()).(*storev1.MemberRecord), proto.Clone(rb[i].GetMember()).(*storev1.MemberRecord)
			ma.ApiUrl, mb.ApiUrl = "", ""
			if !proto.Equal(ma, mb) {
				return "member record " + strconv.Itoa(i) + " differs:\n" + ma.String() + "\n" + mb.String()
			}
			continue
		}
		if !proto.Equal(ra[i], rb[i]) {
			return "record " + strconv.Itoa(i) + " differs:\n" + ra[i].String() + "\n" + rb[i].String()
		}
	}
	return ""
}

// stTreeHash is a listing of every file under dir with its size and
// SHA-256, to compare a directory before and after.
func stTreeHash(t testing.TB, dir string) string {
	t.Helper()
	var lines []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		if d.IsDir() {
			lines = append(lines, rel+"/")
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		lines = append(lines, rel+" "+hex.EncodeToString(sum[:8]))
		return nil
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}
