package instance

import (
	"errors"
	"io"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/clock"
	"github.com/norsk-go/norsk-manager/internal/runtime"
)

func named(name string, deps ...string) *managerv1.Service {
	return &managerv1.Service{Name: name, DependsOn: deps}
}

func TestStartOrder(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		svcs    []*managerv1.Service
		want    []string
		invalid bool
	}{
		{"declaration order without deps", []*managerv1.Service{named("a"), named("b"), named("c")}, []string{"a", "b", "c"}, false},
		{"chain", []*managerv1.Service{named("web", "api"), named("api", "db"), named("db")}, []string{"db", "api", "web"}, false},
		{"diamond", []*managerv1.Service{named("top", "l", "r"), named("l", "base"), named("r", "base"), named("base")}, []string{"base", "l", "r", "top"}, false},
		{"cycle", []*managerv1.Service{named("a", "b"), named("b", "a")}, nil, true},
		{"self", []*managerv1.Service{named("a", "a")}, nil, true},
		{"unknown dependency", []*managerv1.Service{named("a", "zz")}, nil, true},
		{"duplicate", []*managerv1.Service{named("a"), named("a")}, nil, true},
		{"no services", nil, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := startOrder(&managerv1.Job{JobId: "j", Services: tc.svcs})
			if tc.invalid {
				if !errors.Is(err, runtime.ErrInvalidSpec) {
					t.Fatalf("err %v, want ErrInvalidSpec", err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %v, %v; want %v", got, err, tc.want)
			}
		})
	}
	if got := stopOrder(&managerv1.Job{Services: []*managerv1.Service{named("web", "db"), named("db")}}); !reflect.DeepEqual(got, []string{"web", "db"}) {
		t.Fatalf("stop order %v", got)
	}
	if got := stopOrder(&managerv1.Job{Services: []*managerv1.Service{named("a", "b"), named("b", "a")}}); !reflect.DeepEqual(got, []string{"b", "a"}) {
		t.Fatalf("stop order of a cycle %v", got)
	}
}

func TestNextBackoff(t *testing.T) {
	t.Parallel()
	d := time.Duration(0)
	var got []time.Duration
	for range 7 {
		d = nextBackoff(d, time.Second)
		got = append(got, d)
	}
	want := []time.Duration{1 * time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 30 * time.Second, 30 * time.Second}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("backoffs %v, want %v", got, want)
	}
	if d := nextBackoff(30*time.Second, 61*time.Second); d != time.Second {
		t.Fatalf("after a long run: %v, want 1s", d)
	}
}

func testInstance(pol *managerv1.RestartPolicy) *instance {
	s := &Supervisor{log: slog.New(slog.NewTextHandler(io.Discard, nil)), clock: clock.NewFake(time.Unix(0, 0))}
	in := newInstance(s, runtime.Key{JobID: "j", Role: "r"})
	in.rec = newRecord(&managerv1.StartInstance{
		Job:          &managerv1.Job{JobId: "j", Services: []*managerv1.Service{{Name: "main", Restart: pol}}},
		Role:         "r",
		FencingToken: 1,
	}, "process")
	return in
}

func TestRestartDecision(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1000, 0)
	t.Run("never", func(t *testing.T) {
		in := testInstance(&managerv1.RestartPolicy{Mode: managerv1.RestartMode_RESTART_MODE_NEVER})
		if ok, _, _ := in.restartDecision("main", 1, 0, t0); ok {
			t.Fatal("never restarted")
		}
		in = testInstance(nil)
		if ok, _, _ := in.restartDecision("main", 1, 0, t0); ok {
			t.Fatal("unspecified restarted")
		}
	})
	t.Run("on-failure", func(t *testing.T) {
		in := testInstance(&managerv1.RestartPolicy{Mode: managerv1.RestartMode_RESTART_MODE_ON_FAILURE})
		if ok, _, _ := in.restartDecision("main", 0, 0, t0); ok {
			t.Fatal("restarted after exit 0")
		}
		if ok, d, _ := in.restartDecision("main", 2, 0, t0); !ok || d != time.Second {
			t.Fatalf("exit 2: %v %v", ok, d)
		}
		if ok, _, _ := in.restartDecision("main", -1, 0, t0); !ok {
			t.Fatal("unknown exit code not restarted")
		}
	})
	t.Run("window", func(t *testing.T) {
		in := testInstance(&managerv1.RestartPolicy{Mode: managerv1.RestartMode_RESTART_MODE_ALWAYS, Count: 2, PeriodS: 10})
		for i, tc := range []struct {
			at   time.Duration
			want bool
		}{
			{0, true}, {time.Second, true}, {2 * time.Second, false}, // two within 10 s
			{10500 * time.Millisecond, true},  // the first fell out of the window
			{10800 * time.Millisecond, false}, // 1 s and 10.5 s are within it
			{21 * time.Second, true},
		} {
			ok, _, why := in.restartDecision("main", 0, 0, t0.Add(tc.at))
			if ok != tc.want {
				t.Fatalf("step %d at %v: restart %v (%s), want %v", i, tc.at, ok, why, tc.want)
			}
			if !ok && !strings.Contains(why, "budget") {
				t.Fatalf("why: %q", why)
			}
		}
	})
	t.Run("no window counts all", func(t *testing.T) {
		in := testInstance(&managerv1.RestartPolicy{Mode: managerv1.RestartMode_RESTART_MODE_ALWAYS, Count: 2})
		for i, want := range []bool{true, true, false} {
			if ok, _, _ := in.restartDecision("main", 0, 0, t0.Add(time.Duration(i)*time.Hour)); ok != want {
				t.Fatalf("restart %d: %v", i, ok)
			}
		}
	})
	t.Run("unlimited", func(t *testing.T) {
		in := testInstance(&managerv1.RestartPolicy{Mode: managerv1.RestartMode_RESTART_MODE_ALWAYS})
		for i := range 100 {
			if ok, _, _ := in.restartDecision("main", 0, 0, t0); !ok {
				t.Fatalf("restart %d refused", i)
			}
		}
		if len(in.rec.RestartTimes["main"]) != 0 {
			t.Fatal("unlimited restarts are not counted")
		}
	})
}

func TestLastBytes(t *testing.T) {
	t.Parallel()
	if got := lastBytes("hello", 10); got != "hello" {
		t.Fatal(got)
	}
	if got := lastBytes("abcdef", 3); got != "def" {
		t.Fatal(got)
	}
	if got := lastBytes("xé", 1); got != "" { // never half a rune
		t.Fatalf("%q", got)
	}
}

func TestRecordRoundTrip(t *testing.T) {
	t.Parallel()
	s := &Records{dir: t.TempDir(), log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	rec := newRecord(&managerv1.StartInstance{
		Job:                   &managerv1.Job{JobId: "a_b", CurrentHash: 3, Services: []*managerv1.Service{{Name: "main", Command: []string{"x"}}}},
		Role:                  "c",
		FencingToken:          9,
		DeferStart:            true,
		MigrationId:           "m",
		MigrationInitialState: []byte{1, 2, 3},
	}, "process")
	rec.Restarts = 2
	rec.RestartTimes = map[string][]time.Time{"main": {time.Unix(5, 0).UTC()}}
	if err := s.save(rec, time.Unix(10, 0)); err != nil {
		t.Fatal(err)
	}
	// A key that sanitises to the same name gets its own file.
	other := newRecord(&managerv1.StartInstance{Job: &managerv1.Job{JobId: "a"}, Role: "b_c", FencingToken: 1}, "process")
	if err := s.save(other, time.Unix(10, 0)); err != nil {
		t.Fatal(err)
	}
	recs, unreadable, err := s.LoadAll()
	if err != nil || len(recs) != 2 || len(unreadable) != 0 {
		t.Fatalf("%v %v %v", recs, unreadable, err)
	}
	got := recs[runtime.Key{JobID: "a_b", Role: "c"}]
	if got.token() != 9 || got.Desired != desiredPrepared || got.start.GetMigrationId() != "m" ||
		string(got.start.GetMigrationInitialState()) != "\x01\x02\x03" || got.job().GetCurrentHash() != 3 ||
		got.Restarts != 2 || !got.RestartTimes["main"][0].Equal(time.Unix(5, 0)) || got.Runtime != "process" {
		t.Fatalf("loaded %+v", got)
	}
	if err := s.delete(got.key()); err != nil {
		t.Fatal(err)
	}
	if recs, _, _ := s.LoadAll(); len(recs) != 1 {
		t.Fatalf("after delete: %v", recs)
	}
}
