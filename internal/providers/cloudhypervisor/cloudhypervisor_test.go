package cloudhypervisor

import (
	"errors"
	"strings"
	"testing"

	"connectrpc.com/connect"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/providers"
	"github.com/norsk-go/norsk-manager/internal/providers/cloudconf"
)

func TestInstanceStates(t *testing.T) {
	t.Parallel()
	for state, want := range map[string]string{
		"Running": providers.StateRunning, "Paused": providers.StateRunning, "Created": providers.StatePending,
		"Shutdown": providers.StateTerminated, "Lost": providers.StateTerminated,
	} {
		in := instanceOf("enc-01", &managerv1.MicroVm{Id: "vm-1", NodeId: "n", ClusterId: "c", State: state, CreatedAt: "2026-12-02T10:00:00Z"})
		if in.State != want || in.ID != "enc-01/vm-1" || in.Region != "enc-01" || in.LaunchedAt.IsZero() {
			t.Errorf("%s: %+v, want state %s", state, in, want)
		}
		if want == providers.StateTerminated && in.StateReason == "" {
			t.Errorf("%s: no reason", state)
		}
	}
	if _, _, err := splitID("no-slash"); !errors.Is(err, providers.ErrInvalid) {
		t.Errorf("splitID of a bad id: %v", err)
	}
}

func TestErrorsMapToTheSeam(t *testing.T) {
	t.Parallel()
	for code, want := range map[connect.Code]error{
		connect.CodeResourceExhausted: providers.ErrCapacity,
		connect.CodeInvalidArgument:   providers.ErrInvalid,
		connect.CodeAlreadyExists:     providers.ErrInvalid,
		connect.CodeNotFound:          providers.ErrNotFound,
	} {
		err := cloudErr("enc-01", connect.NewError(code, errors.New("why")))
		if !errors.Is(err, want) || !strings.Contains(err.Error(), "host enc-01: why") {
			t.Errorf("%v: %v, want %v", code, err, want)
		}
	}
	if err := cloudErr("enc-01", connect.NewError(connect.CodeUnavailable, errors.New("down"))); errors.Is(err, providers.ErrCapacity) || errors.Is(err, providers.ErrInvalid) {
		t.Errorf("unavailable: %v", err)
	}
}

func TestConfigAndOverrides(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cfg  cloudconf.CloudHypervisor
		err  string
	}{
		{"bad url", cloudconf.CloudHypervisor{Hosts: map[string]cloudconf.CloudHypervisorHost{"a": {URL: "a:1", Token: "t"}}}, "not an http(s) URL"},
		{"no secret", cloudconf.CloudHypervisor{Hosts: map[string]cloudconf.CloudHypervisorHost{"a": {URL: "http://a:1"}}}, "host secret"},
		{"pool host empty", cloudconf.CloudHypervisor{Hosts: map[string]cloudconf.CloudHypervisorHost{"a": {URL: "http://a:1", Token: "t"}},
			Pools: map[string]cloudconf.CloudHypervisorPool{"p": {Hosts: []string{""}, Shapes: []string{"s"}}}}, "empty host"},
		{"pool without shapes", cloudconf.CloudHypervisor{Hosts: map[string]cloudconf.CloudHypervisorHost{"a": {URL: "http://a:1", Token: "t"}},
			Pools: map[string]cloudconf.CloudHypervisorPool{"p": {}}}, "at least one shape"},
	} {
		if _, err := New(tc.cfg, nil, nil); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.err)
		}
	}
	p, err := New(cloudconf.CloudHypervisor{Hosts: map[string]cloudconf.CloudHypervisorHost{"enc-01": {URL: "http://127.0.0.1:1", Token: "t"}}}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	o, err := providers.ParseOverrides([]byte("version: 1\ncloudHypervisor:\n  regions:\n    enc-02:\n      workerImages:\n        \"1\": w\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.ApplyOverrides(o); err != nil {
		t.Fatal(err)
	}
	// enc-02 is run but unknown until it registers.
	if _, err := p.client("enc-02"); !errors.Is(err, providers.ErrNoRegion) {
		t.Errorf("a host neither configured nor registered: %v", err)
	}
	if _, err := p.PickHost(t.Context(), "s", nil); err == nil || errors.Is(err, providers.ErrCapacity) || !strings.Contains(err.Error(), "no host answered") {
		t.Errorf("PickHost with no host answering: %v", err)
	}
	p.SetRegistered(func() map[string]Host { return map[string]Host{"enc-02": {URL: "http://127.0.0.1:2", Secret: "s"}} })
	if c, err := p.client("enc-02"); err != nil || c == nil {
		t.Errorf("a registered host: %v", err)
	}
}
