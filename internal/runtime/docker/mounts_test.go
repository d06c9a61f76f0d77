package docker

import (
	"errors"
	"slices"
	"testing"

	"github.com/docker/docker/api/types/mount"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/runtime"
)

// TestPlanServiceWorkerMounts: the worker's mounts (the job socket's
// directory) are bind mounts of every service, after the service's own.
func TestPlanServiceWorkerMounts(t *testing.T) {
	t.Parallel()
	svc := &managerv1.Service{Name: "enc", Image: "img", VolumeMounts: []*managerv1.VolumeMount{{Source: "/srv/media", ContainerPath: "/media"}}}
	spec := runtime.InstanceSpec{
		Key: runtime.Key{JobID: "job1", Role: "primary"}, NodeID: "n1", Token: 3,
		Job:    &managerv1.Job{JobId: "job1", Services: []*managerv1.Service{svc}},
		Mounts: []runtime.Mount{{Source: "/tmp/norsk-js-1/ab", Target: "/run/norsk", ReadOnly: true}},
	}
	p, err := planService("n1", "", "", spec, svc)
	if err != nil {
		t.Fatal(err)
	}
	want := []mount.Mount{
		{Type: mount.TypeBind, Source: "/srv/media", Target: "/media"},
		{Type: mount.TypeBind, Source: "/tmp/norsk-js-1/ab", Target: "/run/norsk", ReadOnly: true},
	}
	if !slices.Equal(p.host.Mounts, want) {
		t.Fatalf("mounts %+v, want %+v", p.host.Mounts, want)
	}
	spec.Mounts = []runtime.Mount{{Source: "relative", Target: "/run/norsk"}}
	if _, err := planService("n1", "", "", spec, svc); !errors.Is(err, runtime.ErrInvalidSpec) {
		t.Fatalf("a relative mount source: %v", err)
	}
}
