package jobs

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"sigs.k8s.io/yaml"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
)

// The forms job.proto documents for ids and service names.
var (
	jobIDForm   = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)
	serviceForm = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)
)

// TestExampleSpecs converts every *.yaml in this folder with
// sigs.k8s.io/yaml YAMLToJSON and protojson.Unmarshal into a Job, and checks
// what the examples promise.
func TestExampleSpecs(t *testing.T) {
	paths, err := filepath.Glob("*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) < 4 {
		t.Fatalf("found %d specs, want at least 4: %v", len(paths), paths)
	}
	ids := map[string]string{}
	for _, p := range paths {
		t.Run(p, func(t *testing.T) {
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			js, err := yaml.YAMLToJSON(b)
			if err != nil {
				t.Fatalf("YAMLToJSON: %v", err)
			}
			job := &managerv1.Job{}
			if err := protojson.Unmarshal(js, job); err != nil {
				t.Fatalf("protojson.Unmarshal: %v\njson: %s", err, js)
			}

			// Parse and Load say the same.
			parsed, err := Parse(b)
			if err != nil || !proto.Equal(parsed, job) {
				t.Fatalf("Parse: %v, %v", parsed, err)
			}
			loaded, err := Load(strings.TrimSuffix(p, ".yaml"))
			if err != nil || !proto.Equal(loaded, job) {
				t.Fatalf("Load: %v, %v", loaded, err)
			}

			if !jobIDForm.MatchString(job.GetJobId()) {
				t.Errorf("jobId %q is not of the documented form", job.GetJobId())
			}
			// X.yaml (docker) and X-process.yaml are one job, a spec per
			// runtime: they share the job id, and no other spec has it.
			family := strings.TrimSuffix(strings.TrimSuffix(p, ".yaml"), "-process")
			if other, dup := ids[job.GetJobId()]; dup && other != family {
				t.Errorf("jobId %q also in %s", job.GetJobId(), other)
			}
			ids[job.GetJobId()] = family
			if len(job.GetServices()) == 0 {
				t.Fatal("no services")
			}
			process := strings.HasSuffix(p, "-process.yaml")
			for _, s := range job.GetServices() {
				if !serviceForm.MatchString(s.GetName()) {
					t.Errorf("service name %q is not of the documented form", s.GetName())
				}
				switch {
				case process && len(s.GetCommand()) == 0:
					t.Errorf("service %s: a process-runtime spec needs a command", s.GetName())
				case process && !strings.HasPrefix(s.GetCommand()[0], "./build/"):
					t.Errorf("service %s: command %q is not a binary the README builds", s.GetName(), s.GetCommand())
				case !process && !strings.HasPrefix(s.GetImage(), "norsk-examples/"):
					t.Errorf("service %s: image %q is not one the README builds", s.GetName(), s.GetImage())
				}
				if s.GetRestart().GetMode() != managerv1.RestartMode_RESTART_MODE_ON_FAILURE {
					t.Errorf("service %s: restart %v, want on-failure", s.GetName(), s.GetRestart())
				}
			}
		})
	}
}

// TestSpecDetails pins what the README and other tests rely on.
func TestSpecDetails(t *testing.T) {
	for _, name := range []string{"hello", "hello-process"} {
		job, err := Load(name)
		if err != nil {
			t.Fatal(err)
		}
		ports := job.GetServices()[0].GetPorts()
		if len(ports) != 1 || ports[0].GetContainerPort() != 8080 || ports[0].GetEphemeral() == nil {
			t.Errorf("%s: ports %v, want 8080 ephemeral", name, ports)
		}
	}
	hello, _ := Load("hello")
	if got := hello.GetServices()[0].GetImage(); got != "norsk-examples/hello:dev" {
		t.Errorf("hello image %q", got)
	}
	if got := hello.GetServices()[0].GetRestart(); got.GetCount() != 3 || got.GetPeriodS() != 60 {
		t.Errorf("hello restart %v", got)
	}
	media, _ := Load("sample-media")
	svc := media.GetServices()[0]
	if svc.GetImage() != "norsk-examples/sample-media:dev" || svc.GetEnv()["SINK"] != "udp://host.docker.internal:5000" {
		t.Errorf("sample-media service %v", svc)
	}
	mediaProc, _ := Load("sample-media-process")
	if got := mediaProc.GetServices()[0].GetCommand(); !reflect.DeepEqual(got, []string{"./build/sample-media"}) {
		t.Errorf("sample-media-process command %q", got)
	}
}

func TestNames(t *testing.T) {
	want := []string{"hello", "hello-process", "sample-media", "sample-media-process"}
	if got := Names(); !reflect.DeepEqual(got, want) {
		t.Fatalf("Names() = %v, want %v", got, want)
	}
}

func TestParseRejects(t *testing.T) {
	for name, spec := range map[string]string{
		"unknown field":    "jobId: x\nservice: []\n",
		"snake_case field": "job_idd: x\n",
		"number as env":    "jobId: x\nservices: [{name: a, env: {RATE: 25}}]\n",
		"bad enum":         "jobId: x\nservices: [{name: a, restart: {mode: SOMETIMES}}]\n",
		"two host ports":   "jobId: x\nservices: [{name: a, ports: [{containerPort: 1, ephemeral: {}, specific: 2}]}]\n",
		"not yaml":         "jobId: [x\n",
	} {
		if _, err := Parse([]byte(spec)); err == nil {
			t.Errorf("%s: Parse accepted %q", name, spec)
		}
	}
	if _, err := Load("no-such-example"); err == nil {
		t.Error("Load of a missing example succeeded")
	}
}

func TestParseRangeAndSpecific(t *testing.T) {
	job, err := Parse([]byte(`
jobId: ports
services:
  - name: a
    ports:
      - {containerPort: 1, range: {minPort: 30000, maxPort: 30010}}
      - {containerPort: 2, specific: 8080, protocol: PROTOCOL_UDP}
    volumeMounts:
      - {source: data, containerPath: /data, readOnly: true}
`))
	if err != nil {
		t.Fatal(err)
	}
	ps := job.GetServices()[0].GetPorts()
	if ps[0].GetRange().GetMinPort() != 30000 || ps[0].GetRange().GetMaxPort() != 30010 || ps[1].GetSpecific() != 8080 || ps[1].GetProtocol() != managerv1.Protocol_PROTOCOL_UDP {
		t.Fatalf("ports %v", ps)
	}
	if vm := job.GetServices()[0].GetVolumeMounts()[0]; vm.GetSource() != "data" || vm.GetContainerPath() != "/data" || !vm.GetReadOnly() {
		t.Fatalf("volume mount %v", vm)
	}
}
