// Package jobs holds the example job specifications (the *.yaml files
// beside this file, embedded in FS) and decodes job specifications written
// in YAML.
//
// A YAML job spec is the protobuf JSON form of norsk.manager.v1.Job written
// as YAML: field names are the lowerCamelCase JSON names (jobId, services,
// containerPort, volumeMounts, periodS, …), enums are their value names
// (RESTART_MODE_ON_FAILURE), a port's host port is one of ephemeral: {},
// range: {minPort, maxPort} or specific: <port>, and env values are strings
// (quote numbers).
package jobs

import (
	"embed"
	"fmt"
	"io/fs"
	"sort"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"sigs.k8s.io/yaml"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
)

// FS holds the example specs, one per *.yaml file.
//
//go:embed *.yaml
var FS embed.FS

// Parse decodes a YAML job spec: YAML to JSON (sigs.k8s.io/yaml), then
// protojson into a Job. Unknown fields and wrongly typed values are errors.
// Parse checks the form only; whether the Manager accepts the job (ids,
// names, ports) is the Manager's to say.
func Parse(spec []byte) (*managerv1.Job, error) {
	js, err := yaml.YAMLToJSON(spec)
	if err != nil {
		return nil, fmt.Errorf("job spec: %w", err)
	}
	job := &managerv1.Job{}
	if err := protojson.Unmarshal(js, job); err != nil {
		return nil, fmt.Errorf("job spec: %w", err)
	}
	return job, nil
}

// Names lists the embedded examples, sorted ("hello", "hello-process", …).
func Names() []string {
	paths, _ := fs.Glob(FS, "*.yaml") // the pattern is valid
	names := make([]string, len(paths))
	for i, p := range paths {
		names[i] = strings.TrimSuffix(p, ".yaml")
	}
	sort.Strings(names)
	return names
}

// Load returns the embedded example called name (the file name without
// .yaml), parsed; each call returns a new Job the caller may change.
func Load(name string) (*managerv1.Job, error) {
	b, err := FS.ReadFile(name + ".yaml")
	if err != nil {
		return nil, fmt.Errorf("example job %q: %w", name, err)
	}
	job, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("example job %q: %w", name, err)
	}
	return job, nil
}
