package norsk_test

import (
	"strings"
	"testing"

	"github.com/norsk-go/norsk-manager/sdk/norsk"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

const fullSpecYAML = `
jobId: live-1
description: A live channel
tags: {channel: news, tier: gold}
startDateTime: 2025-03-01T12:00:00Z
volumes: [media]
services:
  - name: encoder
    image: registry.example.com/encoder:1.2
    command: [/bin/encoder]
    args: [--preset, medium]
    env: {PORT: 8080, MODE: live}
    workingDir: /work
    shmSizeBytes: 268435456
    cpuSet: [0, 1]
    dependsOn: [ingest]
    restart: {mode: on-failure, count: 3, periodS: 60}
    ports:
      - {containerPort: 8080, protocol: tcp}
      - {containerPort: 5000, protocol: udp, specific: 5000}
      - {containerPort: 6000, range: {minPort: 6000, maxPort: 6100}, hostAddress: 0.0.0.0}
      - {containerPort: 7000, ephemeral: {}}
    volumeMounts:
      - {source: media, containerPath: /media, readOnly: true}
  - name: ingest
    image: ingest:3
autoPlacement:
  requirements:
    requiredCapacity: 2.5
    requiredCores: 2
    requiredCapabilities: [{name: nvenc, count: 1}]
    priorityBand: gold
`

func fullSpec() *norsk.Job {
	cores := uint32(2)
	return &norsk.Job{
		JobId:         "live-1",
		Description:   "A live channel",
		Tags:          map[string]string{"channel": "news", "tier": "gold"},
		StartDateTime: timestamppb.New(mustTime("2025-03-01T12:00:00Z")),
		Volumes:       []string{"media"},
		Services: []*norsk.Service{{
			Name: "encoder", Image: "registry.example.com/encoder:1.2",
			Command: []string{"/bin/encoder"}, Args: []string{"--preset", "medium"},
			Env:        map[string]string{"PORT": "8080", "MODE": "live"},
			WorkingDir: "/work", ShmSizeBytes: 268435456, CpuSet: []uint32{0, 1}, DependsOn: []string{"ingest"},
			Restart: &norsk.RestartPolicy{Mode: norsk.RestartModeOnFailure, Count: 3, PeriodS: 60},
			Ports: []*norsk.PortMapping{
				{ContainerPort: 8080, Protocol: norsk.ProtocolTCP},
				{ContainerPort: 5000, Protocol: norsk.ProtocolUDP, HostPort: &norsk.PortMapping_Specific{Specific: 5000}},
				{ContainerPort: 6000, HostPort: &norsk.PortMapping_Range{Range: &norsk.PortRange{MinPort: 6000, MaxPort: 6100}}, HostAddress: "0.0.0.0"},
				{ContainerPort: 7000, HostPort: &norsk.PortMapping_Ephemeral{Ephemeral: &norsk.Ephemeral{}}},
			},
			VolumeMounts: []*norsk.VolumeMount{{Source: "media", ContainerPath: "/media", ReadOnly: true}},
		}, {Name: "ingest", Image: "ingest:3"}},
		AutoPlacement: &norsk.AutoPlacement{Requirements: &norsk.JobRequirements{
			RequiredCapacity: 2.5, RequiredCores: &cores,
			RequiredCapabilities: []*norsk.CapabilityRequirement{{Name: "nvenc", Count: 1}},
			PriorityBand:         "gold",
		}},
	}
}

func TestDecodeJobSpecFull(t *testing.T) {
	t.Parallel()
	want := fullSpec()
	got, err := norsk.DecodeJobSpec([]byte(fullSpecYAML))
	if err != nil {
		t.Fatalf("YAML: %v", err)
	}
	if !proto.Equal(got, want) {
		t.Errorf("YAML decoded to\n%v\nwant\n%v", protojson.Format(got), protojson.Format(want))
	}
	// The protojson of the job decodes to the job again, with either naming.
	for _, opts := range []protojson.MarshalOptions{{}, {UseProtoNames: true}, {UseEnumNumbers: true}} {
		js, err := opts.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		got, err := norsk.DecodeJobSpec(js)
		if err != nil {
			t.Fatalf("JSON %s: %v", js, err)
		}
		if !proto.Equal(got, want) {
			t.Errorf("JSON %s decoded to %v", js, got)
		}
	}
}

func TestDecodeJobSpecEnums(t *testing.T) {
	t.Parallel()
	for _, in := range []string{"on-failure", "onFailure", "ON_FAILURE", "on_failure", "RESTART_MODE_ON_FAILURE", "On-Failure", "2", "mode-on-failure"} {
		value := in
		if in != "2" {
			value = `"` + in + `"`
		}
		job, err := norsk.DecodeJobSpec([]byte(`{"jobId": "j", "services": [{"name": "s", "restart": {"mode": ` + value + `}}]}`))
		if err != nil {
			t.Errorf("%s: %v", in, err)
			continue
		}
		if got := job.Services[0].Restart.Mode; got != norsk.RestartModeOnFailure {
			t.Errorf("%s: mode = %v", in, got)
		}
	}
	for in, want := range map[string]norsk.Protocol{"udp": norsk.ProtocolUDP, "UDP": norsk.ProtocolUDP, "Tcp": norsk.ProtocolTCP, "any": norsk.ProtocolAny, "PROTOCOL_UDP": norsk.ProtocolUDP} {
		job, err := norsk.DecodeJobSpec([]byte("jobId: j\nservices: [{name: s, ports: [{containerPort: 1, protocol: " + in + "}]}]"))
		if err != nil {
			t.Errorf("%s: %v", in, err)
			continue
		}
		if got := job.Services[0].Ports[0].Protocol; got != want {
			t.Errorf("%s: protocol = %v, want %v", in, got, want)
		}
	}
}

func TestDecodeJobSpecErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, in, want string }{
		{"unknown enum", "services: [{restart: {mode: sometimes}}]", `services[0].restart.mode: unknown value "sometimes" (want one of never, on-failure, always)`},
		{"unknown protocol", "services: [{ports: [{protocol: sctp}]}]", `services[0].ports[0].protocol: unknown value "sctp" (want one of any, tcp, udp)`},
		{"enum of the wrong type", "services: [{restart: {mode: [a]}}]", `services[0].restart.mode: want one of never, on-failure, always, got a list`},
		{"unknown field", "jobId: j\nservices: [{name: s, restrat: {}}]", `services[0]: unknown field "restrat"`},
		{"near miss", "JobID: j", `job spec: unknown field "JobID" (did you mean "jobId"?)`},
		{"unknown top-level", "jobs: {}", `job spec: unknown field "jobs"`},
		{"duplicate key", "jobId: a\njobId: b", `already set`},
		{"both names", `{"jobId": "a", "job_id": "b"}`, `field "jobId" given twice`},
		{"oneof twice", "services: [{ports: [{specific: 1, ephemeral: {}}]}]", `services[0].ports[0]: "ephemeral" and "specific" are alternatives`},
		{"number for a string", "tags: {version: 1.10}", `tags["version"]: want a string, got the number 1.1 (quote it)`},
		{"bool for a string", "tags: {on: yes}", `want a string, got a boolean (quote it)`},
		{"negative port", "services: [{ports: [{containerPort: -1}]}]", `services[0].ports[0].containerPort: -1 is not a uint32`},
		{"fraction", "services: [{restart: {count: 1.5}}]", `services[0].restart.count: 1.5 is not a uint32`},
		{"string for an int", "services: [{restart: {count: three}}]", `services[0].restart.count: want an integer, got "three"`},
		{"list for an object", "services: {name: x}", `services: want a list, got an object`},
		{"scalar for a message", "services: [web]", `services[0]: want an object, got the string "web"`},
		{"map of the wrong type", "tags: [a]", `tags: want a map, got a list`},
		{"bad timestamp", "startDateTime: yesterday", `startDateTime: invalid google.protobuf.Timestamp value "yesterday"`},
		{"bool", "services: [{volumeMounts: [{readOnly: maybe}]}]", `services[0].volumeMounts[0].readOnly: want true or false`},
		{"empty", "", "job spec: empty"},
		{"list", "- a", "job spec: want an object, got a list"},
		{"bad yaml", "jobId: [", "job spec: "},
		{"bad json", `{"jobId": }`, "job spec: "},
		{"two json values", `{"jobId": "a"} {"jobId": "b"}`, "more than one JSON value"},
		{"null list element", "services: [null]", "services[0]: want a value, got null"},
	} {
		_, err := norsk.DecodeJobSpec([]byte(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v; want it to contain %q", tc.name, err, tc.want)
		}
	}
}

func TestDecodeJobSpecs(t *testing.T) {
	t.Parallel()
	jobs, err := norsk.DecodeJobSpecs([]byte("---\njobId: a\n---\n---\njobId: b\nservices: [{name: s, restart: {mode: always}}]\n"))
	if err != nil || len(jobs) != 2 || jobs[0].JobId != "a" || jobs[1].Services[0].Restart.Mode != norsk.RestartModeAlways {
		t.Fatalf("DecodeJobSpecs = %v, %v", jobs, err)
	}
	jobs, err = norsk.DecodeJobSpecs([]byte(`[{"jobId": "a"}, {"job_id": "b"}]`))
	if err != nil || len(jobs) != 2 || jobs[1].JobId != "b" {
		t.Fatalf("DecodeJobSpecs(JSON array) = %v, %v", jobs, err)
	}
	jobs, err = norsk.DecodeJobSpecs([]byte(`{"jobId": "a"}`))
	if err != nil || len(jobs) != 1 {
		t.Fatalf("DecodeJobSpecs(JSON object) = %v, %v", jobs, err)
	}
	for in, want := range map[string]string{
		"jobId: a\n---\njobId: b\nbogus: 1\n": `document 2: job spec: unknown field "bogus"`,
		"jobId: a\n---\n- x\n":                "document 2: job spec: ",
		"jobId: a\n---\njobId: b\njobId: c\n": "document 2: job spec: ",
		`[{"jobId": "a"}, {"bogus": 1}]`:      `[1]: job spec: unknown field "bogus"`,
		"":                                    "no job",
	} {
		_, err := norsk.DecodeJobSpecs([]byte(in))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("DecodeJobSpecs(%q) error %v; want it to contain %q", in, err, want)
		}
	}
}

func FuzzDecodeJobSpec(f *testing.F) {
	for _, seed := range []string{
		fullSpecYAML,
		`{"jobId": "j", "services": [{"name": "s", "restart": {"mode": "onFailure"}}]}`,
		`{"job_id": "j", "services": [{"ports": [{"container_port": 1, "range": {"min_port": 1, "max_port": 2}}]}]}`,
		"jobId: a\n---\njobId: b\n",
		"services: [{restart: {mode: sometimes}}]",
		"services: [{ports: [{specific: 1, ephemeral: {}}]}]",
		"tags: {a: 1.10, b: yes, c: ~}",
		"startDateTime: 2025-01-01",
		"services: [{restart: {count: 1e3}}]",
		"a: &x [*x]",
		"- - - -",
		"{",
		"jobId: !!binary aGVsbG8=",
		"services: [{cpuSet: [-1, 99999999999999999999]}]",
		"",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		job, err := norsk.DecodeJobSpec(data)
		if err == nil {
			// A spec that decodes survives a round trip through protojson.
			js, err := protojson.Marshal(job)
			if err != nil {
				t.Fatalf("marshal: %v", err)
			}
			again, err := norsk.DecodeJobSpec(js)
			if err != nil {
				t.Fatalf("decode of %s: %v", js, err)
			}
			if !proto.Equal(job, again) {
				t.Fatalf("round trip changed %v into %v", job, again)
			}
		}
		_, _ = norsk.DecodeJobSpecs(data)
	})
}

// What job get prints (a JobWithHistory) decodes as its job: instances and
// history are the Manager's and dropped; anything else beside job is still
// an unknown field.
func TestDecodeJobSpecTakesTheJobOfAJobWithHistory(t *testing.T) {
	t.Parallel()
	job, err := norsk.DecodeJobSpec([]byte("job:\n  jobId: a\n  currentHash: 7\n  services: [{name: s, image: x}]\nhistory: [{}]\ninstances: []\n"))
	if err != nil || job.GetJobId() != "a" || job.GetCurrentHash() != 7 || len(job.GetServices()) != 1 {
		t.Fatalf("decoded %v, %v", job, err)
	}
	if _, err := norsk.DecodeJobSpec([]byte(`{"job": {"jobId": "a"}, "extra": 1}`)); err == nil {
		t.Fatal("a job beside an unknown field decoded")
	}
}
