package jobspec_test

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
	"github.com/norsk-go/norsk-manager/pkg/jobspec"
)

// fullJob uses every part of a job specification, validly.
func fullJob() *managerv1.Job {
	gpu := float32(0.5)
	cores := uint32(2)
	return &managerv1.Job{
		JobId:         "live-1.encoder_A",
		Description:   "an encoder",
		Tags:          map[string]string{"team": "live", "example.com/tier": "gold"},
		StartDateTime: timestamppb.New(time.Date(2025, 6, 1, 18, 0, 0, 0, time.UTC)),
		Volumes:       []string{"data", "cache.1"},
		Services: []*managerv1.Service{
			{
				Name:    "encoder",
				Image:   "registry.example.com/enc:1.2",
				Command: []string{"/bin/enc"},
				Args:    []string{"--fast"},
				Env:     map[string]string{"LOG_LEVEL": "debug", "_X": ""},
				Ports: []*managerv1.PortMapping{
					{ContainerPort: 5000, Protocol: managerv1.Protocol_PROTOCOL_UDP, HostPort: &managerv1.PortMapping_Range{Range: &managerv1.PortRange{MinPort: 30000, MaxPort: 30010}}},
					{ContainerPort: 5000, Protocol: managerv1.Protocol_PROTOCOL_TCP, HostPort: &managerv1.PortMapping_Specific{Specific: 8080}, HostAddress: "127.0.0.1"},
					{ContainerPort: 6000, HostPort: &managerv1.PortMapping_Ephemeral{Ephemeral: &managerv1.Ephemeral{}}, HostAddress: "::1"},
					{ContainerPort: 65535},
				},
				VolumeMounts: []*managerv1.VolumeMount{
					{Source: "data", ContainerPath: "/data"},
					{Source: "/var/log", ContainerPath: "/host-logs", ReadOnly: true},
				},
				Restart:      &managerv1.RestartPolicy{Mode: managerv1.RestartMode_RESTART_MODE_ON_FAILURE, Count: 3, PeriodS: 60},
				DependsOn:    []string{"sidecar"},
				ShmSizeBytes: 1 << 20,
				CpuSet:       []uint32{0, 4095},
			},
			{Name: "sidecar", Command: []string{"sleep", "inf"}},
			{Name: "0-late", Image: "x", DependsOn: []string{"encoder", "sidecar"}},
		},
		AutoPlacement: &managerv1.AutoPlacement{Requirements: &managerv1.JobRequirements{
			RequiredCapacity:     1.5,
			RequiredCores:        &cores,
			RequiredGpuCapacity:  &gpu,
			RequiredCapabilities: []*managerv1.CapabilityRequirement{{Name: "nvenc", Count: 1}},
		}},
	}
}

func TestValidateJobAccepts(t *testing.T) {
	tests := []struct {
		name string
		job  func() *managerv1.Job
	}{
		{"full", fullJob},
		{"minimal docker", func() *managerv1.Job {
			return &managerv1.Job{JobId: "a", Services: []*managerv1.Service{{Name: "a", Image: "x"}}}
		}},
		{"minimal process", func() *managerv1.Job {
			return &managerv1.Job{JobId: "0", Services: []*managerv1.Service{{Name: "0", Command: []string{"/bin/true"}}}}
		}},
		{"longest id", func() *managerv1.Job {
			j := fullJob()
			j.JobId = strings.Repeat("a", jobspec.MaxJobIDLen)
			return j
		}},
		{"longest service name", func() *managerv1.Job {
			j := fullJob()
			j.Services[1].Name = strings.Repeat("s", jobspec.MaxServiceNameLen)
			j.Services[0].DependsOn = []string{j.Services[1].Name}
			j.Services[2].DependsOn = nil
			return j
		}},
		{"diamond dependencies", func() *managerv1.Job {
			return &managerv1.Job{JobId: "d", Services: []*managerv1.Service{
				{Name: "a", Image: "x", DependsOn: []string{"b", "c"}},
				{Name: "b", Image: "x", DependsOn: []string{"d"}},
				{Name: "c", Image: "x", DependsOn: []string{"d"}},
				{Name: "d", Image: "x"},
			}}
		}},
		{"restart unspecified", func() *managerv1.Job {
			j := fullJob()
			j.Services[0].Restart = &managerv1.RestartPolicy{}
			return j
		}},
		{"zero capacity", func() *managerv1.Job {
			j := fullJob()
			j.AutoPlacement.Requirements = &managerv1.JobRequirements{}
			return j
		}},
		{"no requirements", func() *managerv1.Job {
			j := fullJob()
			j.AutoPlacement = &managerv1.AutoPlacement{}
			return j
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j := tt.job()
			orig := proto.Clone(j)
			if err := jobspec.ValidateJob(j); err != nil {
				t.Fatalf("ValidateJob: %v", err)
			}
			if !proto.Equal(j, orig) {
				t.Error("ValidateJob changed the job")
			}
		})
	}
}

func TestValidateJobRefuses(t *testing.T) {
	svc := func(j *managerv1.Job) *managerv1.Service { return j.Services[0] }
	tests := []struct {
		name  string
		mut   func(j *managerv1.Job)
		field string
		msg   string
	}{
		// The job
		{"empty id", func(j *managerv1.Job) { j.JobId = "" }, "job.jobId", "must not be empty"},
		{"id with a space", func(j *managerv1.Job) { j.JobId = "my job" }, "job.jobId", `"my job"`},
		{"id with a slash", func(j *managerv1.Job) { j.JobId = "a/b" }, "job.jobId", `"a/b"`},
		{"id starting with a dot", func(j *managerv1.Job) { j.JobId = ".a" }, "job.jobId", `".a"`},
		{"id starting with a dash", func(j *managerv1.Job) { j.JobId = "-a" }, "job.jobId", `"-a"`},
		{"id with unicode", func(j *managerv1.Job) { j.JobId = "jöb" }, "job.jobId", "jöb"},
		{"id too long", func(j *managerv1.Job) { j.JobId = strings.Repeat("a", jobspec.MaxJobIDLen+1) }, "job.jobId", "129"},
		{"description too long", func(j *managerv1.Job) { j.Description = strings.Repeat("d", jobspec.MaxDescriptionLen+1) }, "job.description", "4097"},
		{"tag name bad", func(j *managerv1.Job) { j.Tags["bad tag"] = "x" }, "job.tags", `"bad tag"`},
		{"tag name empty", func(j *managerv1.Job) { j.Tags[""] = "x" }, "job.tags", `""`},
		{"tag value too long", func(j *managerv1.Job) { j.Tags["big"] = strings.Repeat("v", jobspec.MaxTagValueLen+1) }, "job.tags.big", "1025"},
		{"too many tags", func(j *managerv1.Job) {
			for i := range jobspec.MaxTags + 1 {
				j.Tags[fmt.Sprint("t", i)] = ""
			}
		}, "job.tags", "at most 256"},
		{"bad start time", func(j *managerv1.Job) { j.StartDateTime = &timestamppb.Timestamp{Nanos: -1} }, "job.startDateTime", ""},
		{"volume name bad", func(j *managerv1.Job) { j.Volumes[1] = "Data" }, "job.volumes[1]", `"Data"`},
		{"volume name empty", func(j *managerv1.Job) { j.Volumes[0] = "" }, "job.volumes[0]", `""`},
		{"volume duplicate", func(j *managerv1.Job) { j.Volumes[1] = "data" }, "job.volumes[1]", "duplicate"},
		{"too many volumes", func(j *managerv1.Job) {
			for i := range jobspec.MaxVolumes {
				j.Volumes = append(j.Volumes, fmt.Sprint("v", i))
			}
		}, "job.volumes", "at most 64"},
		// Services
		{"no services", func(j *managerv1.Job) { j.Services = nil }, "job.services", "at least one"},
		{"too many services", func(j *managerv1.Job) {
			for i := range jobspec.MaxServices {
				j.Services = append(j.Services, &managerv1.Service{Name: fmt.Sprint("x", i), Image: "x"})
			}
		}, "job.services", "at most 64"},
		{"nil service", func(j *managerv1.Job) { j.Services[1] = nil }, "job.services[1]", "empty"},
		{"empty service name", func(j *managerv1.Job) { j.Services[2].Name = "" }, "job.services[2].name", "must not be empty"},
		{"upper-case service name", func(j *managerv1.Job) { j.Services[2].Name = "Late" }, "job.services[2].name", `"Late"`},
		{"service name with underscore", func(j *managerv1.Job) { j.Services[2].Name = "a_b" }, "job.services[2].name", `"a_b"`},
		{"service name too long", func(j *managerv1.Job) { j.Services[2].Name = strings.Repeat("s", jobspec.MaxServiceNameLen+1) }, "job.services[2].name", ""},
		{"duplicate service names", func(j *managerv1.Job) { j.Services[2].Name = "encoder" }, "job.services[2].name", "also job.services[0]"},
		{"neither image nor command", func(j *managerv1.Job) { j.Services[2].Image = "" }, "job.services[2]", "image"},
		{"image with a space", func(j *managerv1.Job) { svc(j).Image = "enc :1" }, "job.services[0].image", `"enc :1"`},
		{"command with NUL", func(j *managerv1.Job) { svc(j).Command = []string{"a\x00b"} }, "job.services[0].command[0]", "NUL"},
		{"arg with NUL", func(j *managerv1.Job) { svc(j).Args = []string{"ok", "\x00"} }, "job.services[0].args[1]", "NUL"},
		{"too many args", func(j *managerv1.Job) { svc(j).Args = make([]string, jobspec.MaxArgs) }, "job.services[0].args", "at most 1024"},
		{"env name bad", func(j *managerv1.Job) { svc(j).Env["1X"] = "v" }, "job.services[0].env", `"1X"`},
		{"env name with dash", func(j *managerv1.Job) { svc(j).Env["A-B"] = "v" }, "job.services[0].env", `"A-B"`},
		{"env value NUL", func(j *managerv1.Job) { svc(j).Env["K"] = "a\x00" }, "job.services[0].env.K", "NUL"},
		{"env value too long", func(j *managerv1.Job) { svc(j).Env["K"] = strings.Repeat("v", jobspec.MaxEnvValueLen+1) }, "job.services[0].env.K", ""},
		{"too many env", func(j *managerv1.Job) {
			for i := range jobspec.MaxEnv {
				svc(j).Env[fmt.Sprint("E", i)] = ""
			}
		}, "job.services[0].env", "at most 512"},
		// Ports
		{"nil port", func(j *managerv1.Job) { svc(j).Ports[1] = nil }, "job.services[0].ports[1]", "empty"},
		{"port 0", func(j *managerv1.Job) { svc(j).Ports[0].ContainerPort = 0 }, "job.services[0].ports[0].containerPort", "0 is not a port"},
		{"port too high", func(j *managerv1.Job) { svc(j).Ports[3].ContainerPort = 65536 }, "job.services[0].ports[3].containerPort", "65536"},
		{"unknown protocol", func(j *managerv1.Job) { svc(j).Ports[0].Protocol = 7 }, "job.services[0].ports[0].protocol", "unknown protocol 7"},
		{"negative protocol", func(j *managerv1.Job) { svc(j).Ports[0].Protocol = -1 }, "job.services[0].ports[0].protocol", "-1"},
		{"duplicate port", func(j *managerv1.Job) { svc(j).Ports[1].Protocol = managerv1.Protocol_PROTOCOL_UDP }, "job.services[0].ports[1]", "ports[0]"},
		{"range min 0", func(j *managerv1.Job) { svc(j).Ports[0].GetRange().MinPort = 0 }, "job.services[0].ports[0].range", "0-30010"},
		{"range reversed", func(j *managerv1.Job) { svc(j).Ports[0].GetRange().MinPort = 30011 }, "job.services[0].ports[0].range", "30011-30010"},
		{"range above 65535", func(j *managerv1.Job) { svc(j).Ports[0].GetRange().MaxPort = 65536 }, "job.services[0].ports[0].range", "65536"},
		{"range missing", func(j *managerv1.Job) { svc(j).Ports[0].HostPort = &managerv1.PortMapping_Range{} }, "job.services[0].ports[0].range", "bad port range"},
		{"specific 0", func(j *managerv1.Job) { svc(j).Ports[1].HostPort = &managerv1.PortMapping_Specific{} }, "job.services[0].ports[1].specific", "0 is not a port"},
		{"specific too high", func(j *managerv1.Job) { svc(j).Ports[1].HostPort = &managerv1.PortMapping_Specific{Specific: 70000} }, "job.services[0].ports[1].specific", "70000"},
		{"host address a name", func(j *managerv1.Job) { svc(j).Ports[1].HostAddress = "localhost" }, "job.services[0].ports[1].hostAddress", `"localhost"`},
		{"host address out of range", func(j *managerv1.Job) { svc(j).Ports[1].HostAddress = "300.1.1.1" }, "job.services[0].ports[1].hostAddress", `"300.1.1.1"`},
		{"host address with port", func(j *managerv1.Job) { svc(j).Ports[1].HostAddress = "127.0.0.1:80" }, "job.services[0].ports[1].hostAddress", ""},
		{"too many ports", func(j *managerv1.Job) {
			for i := range jobspec.MaxPorts {
				svc(j).Ports = append(svc(j).Ports, &managerv1.PortMapping{ContainerPort: uint32(10000 + i)})
			}
		}, "job.services[0].ports", "at most 256"},
		// Volume mounts
		{"nil mount", func(j *managerv1.Job) { svc(j).VolumeMounts[0] = nil }, "job.services[0].volumeMounts[0]", "empty"},
		{"mount without source", func(j *managerv1.Job) { svc(j).VolumeMounts[0].Source = "" }, "job.services[0].volumeMounts[0].source", "must not be empty"},
		{"mount source not a volume", func(j *managerv1.Job) { svc(j).VolumeMounts[0].Source = "logs" }, "job.services[0].volumeMounts[0].source", `"logs" is neither`},
		{"mount source relative path", func(j *managerv1.Job) { svc(j).VolumeMounts[0].Source = "./data" }, "job.services[0].volumeMounts[0].source", "neither"},
		{"mount source unclean", func(j *managerv1.Job) { svc(j).VolumeMounts[1].Source = "/var/../etc" }, "job.services[0].volumeMounts[1].source", "clean"},
		{"mount source trailing slash", func(j *managerv1.Job) { svc(j).VolumeMounts[1].Source = "/var/log/" }, "job.services[0].volumeMounts[1].source", "clean"},
		{"mount target relative", func(j *managerv1.Job) { svc(j).VolumeMounts[0].ContainerPath = "data" }, "job.services[0].volumeMounts[0].containerPath", `"data"`},
		{"mount target empty", func(j *managerv1.Job) { svc(j).VolumeMounts[0].ContainerPath = "" }, "job.services[0].volumeMounts[0].containerPath", ""},
		{"mount target unclean", func(j *managerv1.Job) { svc(j).VolumeMounts[0].ContainerPath = "/data/./x" }, "job.services[0].volumeMounts[0].containerPath", ""},
		{"mount target twice", func(j *managerv1.Job) { svc(j).VolumeMounts[1].ContainerPath = "/data" }, "job.services[0].volumeMounts[1].containerPath", "volumeMounts[0]"},
		// Restart, shm, cpus
		{"unknown restart policy", func(j *managerv1.Job) { svc(j).Restart.Mode = 9 }, "job.services[0].restart.mode", "unknown restart policy 9"},
		{"negative restart policy", func(j *managerv1.Job) { svc(j).Restart.Mode = -2 }, "job.services[0].restart.mode", "-2"},
		{"unknown pull policy", func(j *managerv1.Job) { svc(j).PullPolicy = 9 }, "job.services[0].pullPolicy", "unknown pull policy 9"},
		{"negative shm", func(j *managerv1.Job) { svc(j).ShmSizeBytes = -1 }, "job.services[0].shmSizeBytes", "negative"},
		{"cpu out of range", func(j *managerv1.Job) { svc(j).CpuSet = []uint32{1, 4096} }, "job.services[0].cpuSet[1]", "4096"},
		// dependsOn
		{"depends on unknown", func(j *managerv1.Job) { svc(j).DependsOn = []string{"sidecar", "db"} }, "job.services[0].dependsOn[1]", `"db"`},
		{"depends on itself", func(j *managerv1.Job) { j.Services[2].DependsOn = []string{"0-late"} }, "job.services[2].dependsOn[0]", "itself"},
		{"two-cycle", func(j *managerv1.Job) { j.Services[1].DependsOn = []string{"encoder"} }, "job.services", "encoder → sidecar → encoder"},
		{"three-cycle", func(j *managerv1.Job) { j.Services[1].DependsOn = []string{"0-late"} }, "job.services", "cycle"},
		// Requirements
		{"negative capacity", func(j *managerv1.Job) { j.AutoPlacement.Requirements.RequiredCapacity = -1 }, "job.autoPlacement.requirements.requiredCapacity", "-1"},
		{"NaN capacity", func(j *managerv1.Job) { j.AutoPlacement.Requirements.RequiredCapacity = math.NaN() }, "job.autoPlacement.requirements.requiredCapacity", "NaN"},
		{"infinite capacity", func(j *managerv1.Job) { j.AutoPlacement.Requirements.RequiredCapacity = math.Inf(1) }, "job.autoPlacement.requirements.requiredCapacity", "Inf"},
		{"negative GPU capacity", func(j *managerv1.Job) {
			g := float32(-0.5)
			j.AutoPlacement.Requirements.RequiredGpuCapacity = &g
		}, "job.autoPlacement.requirements.requiredGpuCapacity", "-0.5"},
		{"NaN GPU capacity", func(j *managerv1.Job) {
			g := float32(math.NaN())
			j.AutoPlacement.Requirements.RequiredGpuCapacity = &g
		}, "job.autoPlacement.requirements.requiredGpuCapacity", "NaN"},
		{"capability without a name", func(j *managerv1.Job) {
			j.AutoPlacement.Requirements.RequiredCapabilities = append(j.AutoPlacement.Requirements.RequiredCapabilities, &managerv1.CapabilityRequirement{Count: 1})
		}, "job.autoPlacement.requirements.requiredCapabilities[1].name", "empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j := fullJob()
			tt.mut(j)
			checkInvalid(t, jobspec.ValidateJob(j), tt.field, tt.msg)
		})
	}
	t.Run("nil job", func(t *testing.T) {
		checkInvalid(t, jobspec.ValidateJob(nil), "job", "required")
	})
}

// checkInvalid checks that err is an INVALID_ARGUMENT naming field, with msg
// in its message.
func checkInvalid(t *testing.T, err error, field, msg string) {
	t.Helper()
	if err == nil {
		t.Fatalf("accepted; want an error on %s", field)
	}
	var ae *apierr.Error
	if !errors.As(err, &ae) {
		t.Fatalf("%v (%T) is not an *apierr.Error", err, err)
	}
	if ae.Code != apierr.InvalidArgument || apierr.CodeOf(err) != apierr.InvalidArgument {
		t.Errorf("code = %v, want INVALID_ARGUMENT", ae.Code)
	}
	if ae.Field != field {
		t.Errorf("field = %q, want %q (%v)", ae.Field, field, err)
	}
	if !strings.Contains(ae.Msg, msg) {
		t.Errorf("message %q does not say %q", ae.Msg, msg)
	}
	if !strings.HasPrefix(err.Error(), field+": ") {
		t.Errorf("error %q does not start with the field", err)
	}
}

func TestValidateID(t *testing.T) {
	tests := []struct {
		id string
		ok bool
	}{
		{"a", true}, {"A", true}, {"0", true}, {"a.b_c-d", true}, {"job-2025.01.01", true},
		{strings.Repeat("x", 128), true},
		{"", false}, {strings.Repeat("x", 129), false}, {"_a", false}, {".", false}, {"a b", false},
		{"a/b", false}, {"a:b", false}, {"a\x00", false}, {"a\n", false}, {"é", false}, {"a@b", false},
	}
	for _, tt := range tests {
		err := jobspec.ValidateID("nodeId", tt.id)
		if (err == nil) != tt.ok {
			t.Errorf("ValidateID(%q) = %v, want ok=%v", tt.id, err, tt.ok)
		}
		if err != nil {
			var ae *apierr.Error
			if !errors.As(err, &ae) || ae.Field != "nodeId" || ae.Code != apierr.InvalidArgument {
				t.Errorf("ValidateID(%q) = %#v, want INVALID_ARGUMENT on nodeId", tt.id, err)
			}
		}
	}
}

func TestValidateRole(t *testing.T) {
	tests := []struct {
		role string
		ok   bool
	}{
		{"primary", true}, {"backup", true}, {"replica-2", true}, {"primary@3f9c1e2a", true}, {"A.b_c", true},
		{strings.Repeat("r", 64), true},
		{"", false}, {strings.Repeat("r", 65), false}, {"@x", false}, {"-x", false}, {"a b", false}, {"a/b", false},
	}
	for _, tt := range tests {
		err := jobspec.ValidateRole("role", tt.role)
		if (err == nil) != tt.ok {
			t.Errorf("ValidateRole(%q) = %v, want ok=%v", tt.role, err, tt.ok)
		}
		if err != nil {
			var ae *apierr.Error
			if !errors.As(err, &ae) || ae.Field != "role" {
				t.Errorf("ValidateRole(%q) names %v", tt.role, err)
			}
		}
	}
}

func TestValidateTags(t *testing.T) {
	many := map[string]string{}
	for i := range jobspec.MaxTags {
		many[fmt.Sprint("k", i)] = ""
	}
	tests := []struct {
		name  string
		tags  map[string]string
		field string // "" = valid
	}{
		{"nil", nil, ""},
		{"ordinary", map[string]string{"a": "b", "x.y/z-w_1": strings.Repeat("v", 1024)}, ""},
		{"empty value", map[string]string{"a": ""}, ""},
		{"at the limit", many, ""},
		{"longest key", map[string]string{strings.Repeat("k", 253): "v"}, ""},
		{"key too long", map[string]string{strings.Repeat("k", 254): "v"}, "tags"},
		{"key with space", map[string]string{"a b": "v"}, "tags"},
		{"key starting with slash", map[string]string{"/a": "v"}, "tags"},
		{"value too long", map[string]string{"k": strings.Repeat("v", 1025)}, "tags.k"},
		{"too many", func() map[string]string {
			m := map[string]string{"extra": ""}
			for k, v := range many {
				m[k] = v
			}
			return m
		}(), "tags"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := jobspec.ValidateTags("tags", tt.tags)
			if tt.field == "" {
				if err != nil {
					t.Fatalf("ValidateTags: %v", err)
				}
				return
			}
			checkInvalid(t, err, tt.field, "")
		})
	}
	t.Run("first bad key in sorted order", func(t *testing.T) {
		for range 20 {
			err := jobspec.ValidateTags("tags", map[string]string{"z z": "", "b b": "", "y y": ""})
			if err == nil || !strings.Contains(err.Error(), `"b b"`) {
				t.Fatalf("error %v does not name the first bad key", err)
			}
		}
	})
}

// TestCheckLimits (issue 12, item 6): what a job hands the operating
// system is bounded in total — a service's command and arguments, its
// environment — beyond the per-field bounds.
func TestCheckLimits(t *testing.T) {
	job := func(s *managerv1.Service) *managerv1.Job {
		s.Name = "main"
		return &managerv1.Job{JobId: "j", Services: []*managerv1.Service{{Name: "first", Image: "x"}, s}}
	}
	many := func(n, size int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = strings.Repeat("a", size)
		}
		return out
	}
	env := func(n, size int) map[string]string {
		out := map[string]string{}
		for i := 0; i < n; i++ {
			out[fmt.Sprintf("V%d", i)] = strings.Repeat("v", size)
		}
		return out
	}
	for _, tc := range []struct {
		name  string
		job   *managerv1.Job
		field string
	}{
		{"small", job(&managerv1.Service{Command: []string{"/bin/x"}, Args: []string{"-v"}, Env: map[string]string{"A": "1"}}), ""},
		{"at the command limit", job(&managerv1.Service{Command: many(2, 64<<10-1), Args: many(2, 64<<10-1)}), ""},
		{"7 MB of arguments", job(&managerv1.Service{Command: []string{"/bin/x"}, Args: many(60, 120<<10)}), "job.services[1].command"},
		{"one byte over", job(&managerv1.Service{Command: many(2, 64<<10-1), Args: many(2, 64<<10)}), "job.services[1].command"},
		{"environment", job(&managerv1.Service{Image: "x", Env: env(40, 32<<10)}), "job.services[1].env"},
	} {
		err := jobspec.CheckLimits("job", tc.job)
		if tc.field == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		var ae *apierr.Error
		if !errors.As(err, &ae) || ae.Field != tc.field || len(err.Error()) > 200 {
			t.Errorf("%s: %v, want INVALID_ARGUMENT naming %s", tc.name, err, tc.field)
		}
	}
	b := &managerv1.Bundle{Jobs: []*managerv1.BundleJobSpec{{}, {Job: job(&managerv1.Service{Args: many(60, 120<<10)})}}}
	var ae *apierr.Error
	if err := jobspec.CheckBundleLimits(b); !errors.As(err, &ae) || ae.Field != "bundle.jobs[1].job.services[1].command" {
		t.Errorf("CheckBundleLimits = %v", err)
	}
}
