// Package sdkcontract is the SDK's behaviour written once and run against
// two runners: the fake Manager unit tests use (sdk/norsk/norsktest) and a
// real Manager in this process (internal/testcluster: the same manager.New
// the binary runs, its store on disk, one worker on the process runtime, so
// no Docker is needed). What the suite asserts is what a program using the
// SDK may rely on from either; a difference it finds is a bug in the fake
// (or, where the Manager is wrong against the seed, in the Manager).
//
// Each runner starts once; the cases are subtests that run in parallel on
// it, each on its own jobs, keys and names.
package sdkcontract

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/runtime/runtimetest"
	"github.com/norsk-go/norsk-manager/internal/testcluster"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
	"github.com/norsk-go/norsk-manager/sdk/norsk/norsktest"
)

// env is one runner, started: a client and the node jobs run on.
type env struct {
	// m is an SDK client of the runner's Manager (an admin).
	m *norsk.Manager
	// node is an online node whose worker runs what is started on it.
	node string
	// command is a service command the node's worker can run until it is
	// stopped.
	command []string
	// fake is the fake server (nil for the real Manager).
	fake *norsktest.Server
	// as connects another client, calling with the API token secret.
	as func(t *testing.T, secret string) (*norsk.Manager, error)
}

// job is a job of one service the runner's worker can run.
func (e *env) job(id string, tags map[string]string) *norsk.Job {
	return &norsk.Job{JobId: id, Tags: tags, Services: []*norsk.Service{{Name: "main", Command: e.command}}}
}

// runner starts a Manager for one run of the suite.
type runner struct {
	name  string
	start func(t *testing.T) *env
}

var runners = []runner{
	{"fake", startFake},
	{"manager", startManager},
}

const workerName = "worker-1"

func startFake(t *testing.T) *env {
	srv := norsktest.NewServer(t)
	srv.AddNode(&managerv1.Node{NodeId: workerName, NodeName: workerName, Address: "127.0.0.1:7000"})
	m, err := norsk.Connect(context.Background(), norsk.Settings{URL: srv.URL, ClientLabel: t.Name(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatalf("connect to the fake: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	as := func(t *testing.T, secret string) (*norsk.Manager, error) {
		return connectAs(t, norsk.Settings{URL: srv.URL, Token: secret})
	}
	return &env{m: m, node: workerName, command: []string{"testprog"}, fake: srv, as: as}
}

// connectAs connects a client with s (and a quiet logger), closed when t ends.
func connectAs(t *testing.T, s norsk.Settings) (*norsk.Manager, error) {
	s.ClientLabel = t.Name()
	s.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	m, err := norsk.Connect(context.Background(), s)
	if err == nil {
		t.Cleanup(func() { m.Close() })
	}
	return m, err
}

func startManager(t *testing.T) *env {
	c := testcluster.New(t, testcluster.Options{Workers: 1})
	as := func(t *testing.T, secret string) (*norsk.Manager, error) {
		return connectAs(t, norsk.Settings{URL: c.URL(), Token: secret, CAFingerprint: c.Manager().CAFingerprint()})
	}
	return &env{m: c.Client(), node: workerName, command: append([]string{testcluster.TestProg(t)}, runtimetest.Behaviour{}.Args()...), as: as}
}

// ctx is a context bounded by the test (or a minute).
func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return c
}

// eventually retries check until it returns nil, failing the test with its
// last error after a while. For what the real Manager does after it has
// answered (its AutoManager, its workers); the fake does it at once.
func eventually(t *testing.T, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestContract runs every case against every runner.
func TestContract(t *testing.T) {
	for _, r := range runners {
		t.Run(r.name, func(t *testing.T) {
			t.Parallel()
			e := r.start(t)
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					if !c.serial {
						t.Parallel()
					}
					c.run(t, e)
				})
			}
		})
	}
}
