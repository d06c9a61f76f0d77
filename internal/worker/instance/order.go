package instance

import (
	"fmt"
	"slices"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/runtime"
)

// startOrder returns the job's service names in an order where every
// service comes after the services it depends on, ties broken by the order
// the job declares them. An unknown dependency, a duplicate name or a cycle
// is an error wrapping runtime.ErrInvalidSpec.
func startOrder(job *managerv1.Job) ([]string, error) {
	svcs := job.GetServices()
	if len(svcs) == 0 {
		return nil, fmt.Errorf("job %s has no services: %w", job.GetJobId(), runtime.ErrInvalidSpec)
	}
	known := map[string]bool{}
	for _, s := range svcs {
		if s.GetName() == "" {
			return nil, fmt.Errorf("a service of job %s has no name: %w", job.GetJobId(), runtime.ErrInvalidSpec)
		}
		if known[s.GetName()] {
			return nil, fmt.Errorf("service %s appears twice: %w", s.GetName(), runtime.ErrInvalidSpec)
		}
		known[s.GetName()] = true
	}
	for _, s := range svcs {
		for _, d := range s.GetDependsOn() {
			if !known[d] {
				return nil, fmt.Errorf("service %s depends on unknown service %s: %w", s.GetName(), d, runtime.ErrInvalidSpec)
			}
		}
	}
	placed := map[string]bool{}
	out := make([]string, 0, len(svcs))
	for len(out) < len(svcs) {
		progress := false
		for _, s := range svcs {
			if placed[s.GetName()] {
				continue
			}
			ready := true
			for _, d := range s.GetDependsOn() {
				if !placed[d] {
					ready = false
					break
				}
			}
			if ready {
				placed[s.GetName()] = true
				out = append(out, s.GetName())
				progress = true
			}
		}
		if !progress {
			var cyc []string
			for _, s := range svcs {
				if !placed[s.GetName()] {
					cyc = append(cyc, s.GetName())
				}
			}
			return nil, fmt.Errorf("services %v depend on each other in a cycle: %w", cyc, runtime.ErrInvalidSpec)
		}
	}
	return out, nil
}

// stopOrder is the reverse of startOrder: dependents first. A job whose
// dependencies do not resolve is stopped in reverse declaration order.
func stopOrder(job *managerv1.Job) []string {
	order, err := startOrder(job)
	if err != nil {
		order = order[:0]
		for _, s := range job.GetServices() {
			order = append(order, s.GetName())
		}
	}
	slices.Reverse(order)
	return order
}
