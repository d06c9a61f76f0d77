package devmode

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"

	"github.com/docker/docker/client"

	"github.com/norsk-go/norsk-manager/internal/localregistry"
)

// DefaultRegistryListen is where dev's image registry listens: a fixed
// loopback port, so that the refs pushed into it stay valid across runs
// over one data directory.
const DefaultRegistryListen = "127.0.0.1:6796"

// devRegistry is dev's image registry and the example images pushed into
// it.
type devRegistry struct {
	reg  *localregistry.Registry
	refs []string
}

// startRegistry runs Debian's docker-registry over dir/registry at listen
// and pushes the example images into it (built first when absent): the
// workers then pull them from it like from any registry, and a prefetch
// has something real to pull. Nothing is pulled from outside the machine.
func startRegistry(ctx context.Context, dir, listen string, log *slog.Logger) (*devRegistry, error) {
	if listen == "" {
		listen = DefaultRegistryListen
	}
	reg, err := localregistry.Start(ctx, filepath.Join(dir, "registry"), listen, log)
	if err != nil {
		return nil, err
	}
	if err := ensureExamples(ctx, "docker", log); err != nil {
		reg.Close()
		return nil, err
	}
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		reg.Close()
		return nil, err
	}
	defer cli.Close()
	r := &devRegistry{reg: reg}
	for _, e := range examples {
		ref, err := reg.Push(ctx, cli, e.image, e.image)
		if err != nil {
			reg.Close()
			return nil, fmt.Errorf("push %s into the dev registry: %w", e.image, err)
		}
		r.refs = append(r.refs, ref)
	}
	return r, nil
}

func (r *devRegistry) close() { _ = r.reg.Close() }

func (r *devRegistry) banner(w io.Writer, node string) {
	fmt.Fprintf(w, `
An image registry (Debian's docker-registry) runs at %s with the example
images pushed into it; workers pull from it as from any registry:
`, r.reg.Host)
	for _, ref := range r.refs {
		fmt.Fprintf(w, "  %s\n", ref)
	}
	if node != "" {
		fmt.Fprintf(w, `Warm a node ahead of need, and see what each node holds:
  go run ./cmd/norsk-ctl node prefetch %s %s
  go run ./cmd/norsk-ctl node list
`, node, r.refs[0])
	}
}
