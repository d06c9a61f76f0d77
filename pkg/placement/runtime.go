package placement

import (
	"fmt"
	"slices"
	"strings"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
)

// The runtimes placement tells apart (Node.Runtime, as the node's worker
// reports it).
const (
	// RuntimeDocker runs a service's image; its command, when it has one,
	// overrides the image's entrypoint.
	RuntimeDocker = "docker"
	// RuntimeProcess runs a service's command as a host process; its
	// image, when it has one, is ignored.
	RuntimeProcess = "process"
)

// Service is one of a job's services as a runtime sees it: whether it
// names an image and a command.
type Service struct {
	Name    string
	Image   bool
	Command bool
	// ImageRef is the service's image as NormalizeImageRef gives it ("" =
	// none): placement prefers nodes that hold it (Node.Images).
	ImageRef string
}

// ServicesFromProto is what the runtime rule reads of a job's services.
func ServicesFromProto(svcs []*managerv1.Service) []Service {
	if len(svcs) == 0 {
		return nil
	}
	out := make([]Service, 0, len(svcs))
	for _, s := range svcs {
		cmd := s.GetCommand()
		out = append(out, Service{Name: s.GetName(), Image: s.GetImage() != "", Command: len(cmd) > 0 && cmd[0] != "", ImageRef: NormalizeImageRef(s.GetImage())})
	}
	return out
}

// RuntimeRuns reports whether a node whose worker runs runtime rt can run
// svc. docker runs a service that has an image (a command as well only
// overrides the image's entrypoint); process runs a service that has a
// command (an image as well is ignored). A service with both runs on
// either. Any other runtime — and "", a worker that does not say, as
// workers before runtimes were told apart did not — is taken to run
// anything, as placement did before.
func RuntimeRuns(rt string, svc Service) bool {
	switch rt {
	case RuntimeDocker:
		return svc.Image
	case RuntimeProcess:
		return svc.Command
	}
	return true
}

// runtimeNeed is what a request's services ask of a node's runtime: the
// services lacking an image (docker cannot run them) and those lacking a
// command (process cannot run them).
type runtimeNeed struct {
	noImage, noCommand []Service
}

func runtimeNeedOf(svcs []Service) runtimeNeed {
	var n runtimeNeed
	for _, s := range svcs {
		if !s.Image {
			n.noImage = append(n.noImage, s)
		}
		if !s.Command {
			n.noCommand = append(n.noCommand, s)
		}
	}
	return n
}

// refuses reports whether a node of runtime rt cannot run the services.
func (n *runtimeNeed) refuses(rt string) bool {
	switch rt {
	case RuntimeDocker:
		return len(n.noImage) > 0
	case RuntimeProcess:
		return len(n.noCommand) > 0
	}
	return false
}

// why says why a node of runtime rt cannot run the services ("" if it can).
func (n *runtimeNeed) why(rt string) string {
	if !n.refuses(rt) {
		return ""
	}
	var bad []Service
	var kind string
	switch rt {
	case RuntimeDocker:
		bad, kind = n.noImage, "command-only services (docker runs images)"
	default:
		bad, kind = n.noCommand, "image-only services (process runs commands)"
	}
	parts := make([]string, 0, min(len(bad), 3))
	for _, s := range bad[:min(len(bad), 3)] {
		switch {
		case !s.Image && !s.Command:
			parts = append(parts, fmt.Sprintf("%q has neither an image nor a command", s.Name))
		case s.Command:
			parts = append(parts, fmt.Sprintf("%q has a command and no image", s.Name))
		default:
			parts = append(parts, fmt.Sprintf("%q has an image and no command", s.Name))
		}
	}
	if len(bad) > 3 {
		parts = append(parts, fmt.Sprintf("and %d more", len(bad)-3))
	}
	return fmt.Sprintf("runtime %s cannot run %s: %s", rt, kind, strings.Join(parts, ", "))
}

// RuntimeMismatch says why no node of nodes can run job's services because
// of its runtime, or "" when one can (or no node is known: there is
// nothing to say yet). Terminated nodes do not count. It is what a job
// placed nowhere for its runtime is explained with (a bundle's view, `bundle
// create`); placement refuses the nodes themselves with the same sentences.
func RuntimeMismatch(nodes []*managerv1.Node, job *managerv1.Job) string {
	need := runtimeNeedOf(ServicesFromProto(job.GetServices()))
	var runtimes []string
	for _, n := range nodes {
		if n.GetState() == managerv1.NodeState_NODE_STATE_TERMINATED {
			continue
		}
		if !need.refuses(n.GetRuntime()) {
			return ""
		}
		if !slices.Contains(runtimes, n.GetRuntime()) {
			runtimes = append(runtimes, n.GetRuntime())
		}
	}
	if len(runtimes) == 0 {
		return ""
	}
	slices.Sort(runtimes)
	whys := make([]string, len(runtimes))
	for i, rt := range runtimes {
		whys[i] = need.why(rt)
	}
	return "no node's runtime can run the job: " + strings.Join(whys, "; ")
}
