// Package imagebuild builds small Docker images FROM scratch out of a Go
// main package of this module, so nothing ever has to be pulled: the build
// needs only the Go toolchain and the local engine. Dev mode uses it for the
// example images; tests use it through internal/testimage.
//
// The program is built with CGO_ENABLED=0 for linux and the engine's
// architecture, so it runs in an empty image; it must need no files from
// the image (no CA certificates, no time zone data, no shell).
package imagebuild

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"
)

// binaryName is the program's path inside the image.
const binaryName = "prog"

// Build compiles goPackage (an import path or a path the go command
// accepts, resolved from the current directory) and builds the image tag
// from it: FROM scratch, the binary at /prog, ENTRYPOINT ["/prog"]. It never
// pulls. When a rebuild moves the tag, the image it left behind is removed
// (unless a container still uses it).
func Build(ctx context.Context, cli *client.Client, tag string, goPackage string) error {
	dir, err := os.MkdirTemp("", "testimage-")
	if err != nil {
		return fmt.Errorf("build image %s: %w", tag, err)
	}
	defer os.RemoveAll(dir)

	ver, err := cli.ServerVersion(ctx)
	if err != nil {
		return fmt.Errorf("build image %s: ask the engine its platform: %w", tag, err)
	}
	if ver.Os != "" && ver.Os != "linux" {
		return fmt.Errorf("build image %s: engine runs %s containers, not linux", tag, ver.Os)
	}
	bin := filepath.Join(dir, binaryName)
	// No -trimpath: it keys the compile cache apart from every other build
	// of the same packages, so an image of the Manager would compile its
	// whole dependency tree (the cloud SDKs among it) a second time.
	gobuild := exec.CommandContext(ctx, "go", "build", "-ldflags=-s -w", "-o", bin, goPackage)
	gobuild.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	if ver.Arch != "" {
		gobuild.Env = append(gobuild.Env, "GOARCH="+ver.Arch)
	}
	if out, err := gobuild.CombinedOutput(); err != nil {
		return fmt.Errorf("build image %s: go build %s: %w\n%s", tag, goPackage, err, out)
	}

	buildCtx, err := contextTar(bin)
	if err != nil {
		return fmt.Errorf("build image %s: %w", tag, err)
	}

	var oldID string
	if old, err := cli.ImageInspect(ctx, tag); err == nil {
		oldID = old.ID
	} else if !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("build image %s: inspect: %w", tag, err)
	}

	resp, err := cli.ImageBuild(ctx, buildCtx, build.ImageBuildOptions{
		Tags:        []string{tag},
		Dockerfile:  "Dockerfile",
		PullParent:  false, // FROM scratch needs nothing; never pull
		Remove:      true,
		ForceRemove: true,
		Labels:      map[string]string{"norsk.manager/test-image": goPackage},
	})
	if err != nil {
		return fmt.Errorf("build image %s: %w", tag, err)
	}
	defer resp.Body.Close()
	if err := readBuildOutput(resp.Body); err != nil {
		return fmt.Errorf("build image %s: %w", tag, err)
	}

	if oldID != "" {
		if now, err := cli.ImageInspect(ctx, tag); err == nil && now.ID != oldID {
			// Best effort: a container may still use the old image.
			_, _ = cli.ImageRemove(ctx, oldID, image.RemoveOptions{})
		}
	}
	return nil
}

// contextTar makes the build context: the Dockerfile and the binary.
func contextTar(bin string) (io.Reader, error) {
	dockerfile := fmt.Sprintf("FROM scratch\nCOPY %s /%s\nENTRYPOINT [\"/%s\"]\n", binaryName, binaryName, binaryName)
	prog, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	files := []struct {
		name string
		mode int64
		data []byte
	}{
		{"Dockerfile", 0o644, []byte(dockerfile)},
		{binaryName, 0o755, prog},
	}
	for _, f := range files {
		hdr := &tar.Header{Name: f.name, Mode: f.mode, Size: int64(len(f.data)), ModTime: time.Unix(0, 0)}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, fmt.Errorf("build context: %w", err)
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, fmt.Errorf("build context: %w", err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("build context: %w", err)
	}
	return &buf, nil
}

// readBuildOutput drains the engine's JSON message stream and returns the
// first error it reports.
func readBuildOutput(r io.Reader) error {
	dec := json.NewDecoder(r)
	var tail []string
	for {
		var msg struct {
			Stream      string `json:"stream"`
			Error       string `json:"error"`
			ErrorDetail struct {
				Message string `json:"message"`
			} `json:"errorDetail"`
		}
		if err := dec.Decode(&msg); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("read build output: %w", err)
		}
		if s := strings.TrimSpace(msg.Stream); s != "" {
			tail = append(tail, s)
			if len(tail) > 10 {
				tail = tail[1:]
			}
		}
		if msg.Error != "" || msg.ErrorDetail.Message != "" {
			m := msg.ErrorDetail.Message
			if m == "" {
				m = msg.Error
			}
			return fmt.Errorf("engine: %s (after: %s)", m, strings.Join(tail, " | "))
		}
	}
}
