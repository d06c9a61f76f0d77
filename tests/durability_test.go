package tests

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

var (
	managerBinOnce sync.Once
	managerBin     string
	managerBinErr  error
)

// buildManager builds the norsk-manager binary once per test process.
func buildManager(t *testing.T) string {
	t.Helper()
	managerBinOnce.Do(func() {
		dir, err := os.MkdirTemp("", "norsk-manager-bin-")
		if err != nil {
			managerBinErr = err
			return
		}
		managerBin = filepath.Join(dir, "norsk-manager")
		out, err := exec.Command("go", "build", "-o", managerBin, "github.com/norsk-go/norsk-manager/cmd/norsk-manager").CombinedOutput()
		if err != nil {
			managerBinErr = fmt.Errorf("go build: %v: %s", err, out)
		}
	})
	if managerBinErr != nil {
		t.Fatalf("build norsk-manager: %v", managerBinErr)
	}
	return managerBin
}

// daemon is a norsk-manager process.
type daemon struct {
	cmd *exec.Cmd
	url string
	// token is the bootstrap admin token a new store printed ("" later).
	token string
	done  chan struct{} // closed when the process has exited
	err   error
}

var (
	servingRE = regexp.MustCompile(`serving the API at (https?://\S+)`)
	tokenRE   = regexp.MustCompile(`^\s+(nmt_\S+)$`)
)

// startDaemon runs `norsk-manager run` on dataDir and waits until it serves.
func startDaemon(t *testing.T, dataDir string) *daemon {
	t.Helper()
	cmd := exec.Command(buildManager(t), "run", "--data-dir", dataDir, "--listen", "127.0.0.1:0", "--node-name", "m1", "--log-level", "warn", "--rate-limit", "1000000")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d := &daemon{cmd: cmd, done: make(chan struct{})}
	urlc := make(chan string, 1)
	tokc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := tokenRE.FindStringSubmatch(sc.Text()); m != nil {
				tokc <- m[1]
			}
			if m := servingRE.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case urlc <- m[1]:
				default:
				}
			}
		}
	}()
	go func() { d.err = cmd.Wait(); close(d.done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-d.done
	})
	select {
	case d.url = <-urlc:
		select {
		case d.token = <-tokc:
		default:
		}
	case <-d.done:
		t.Fatalf("norsk-manager exited at start: %v", d.err)
	case <-time.After(30 * time.Second):
		t.Fatal("norsk-manager did not serve within 30s")
	}
	return d
}

func (d *daemon) kill9(t *testing.T) {
	t.Helper()
	if err := d.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-d.done
}

// Every CreateJob the API acknowledged survives kill -9 of the daemon in the
// middle of a stream of writes from concurrent clients.
func TestAcknowledgedWritesSurviveKill9(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts and kills real norsk-manager processes")
	}
	dataDir := t.TempDir()
	token := ""
	acked := map[string]bool{}
	var mu sync.Mutex
	for round := range 3 {
		d := startDaemon(t, dataDir)
		if d.token != "" {
			token = d.token
		}
		ctx, cancel := context.WithCancel(context.Background())
		cl, err := norsk.Connect(ctx, norsk.Settings{URL: d.url, Token: token})
		if err != nil {
			t.Fatal(err)
		}
		// Everything acknowledged in earlier rounds is still there.
		checkAcked(t, ctx, cl, acked, round)

		var wg sync.WaitGroup
		for c := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ctx.Err() == nil; i++ {
					id := fmt.Sprintf("r%d-c%d-%d", round, c, i)
					_, err := cl.CreateJob(ctx, &norsk.Job{JobId: id, Services: []*norsk.Service{{Name: "main", Image: "x:1"}}})
					if err != nil {
						return // the daemon is gone
					}
					mu.Lock()
					acked[id] = true
					mu.Unlock()
				}
			}()
		}
		// Let writes flow, then pull the plug with calls in flight.
		deadline := time.Now().Add(10 * time.Second)
		for {
			mu.Lock()
			n := len(acked)
			mu.Unlock()
			if n >= (round+1)*300 || time.Now().After(deadline) {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		d.kill9(t)
		cancel()
		wg.Wait()
		_ = cl.Close()
	}
	d := startDaemon(t, dataDir)
	cl, err := norsk.Connect(context.Background(), norsk.Settings{URL: d.url, Token: token})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	checkAcked(t, context.Background(), cl, acked, 3)
	t.Logf("%d acknowledged jobs survived three kill -9s", len(acked))
}

func checkAcked(t *testing.T, ctx context.Context, cl *norsk.Manager, acked map[string]bool, round int) {
	t.Helper()
	jobs, err := cl.JobSearch(ctx, norsk.JobSearchSettings{})
	if err != nil {
		t.Fatalf("round %d: search: %v", round, err)
	}
	have := map[string]bool{}
	for _, j := range jobs {
		have[j.GetJob().GetJobId()] = true
	}
	missing := 0
	for id := range acked {
		if !have[id] {
			missing++
			if missing <= 5 {
				t.Errorf("round %d: acknowledged job %s is gone", round, id)
			}
		}
	}
	if missing > 0 {
		t.Fatalf("round %d: %d of %d acknowledged jobs lost", round, missing, len(acked))
	}
}
