// Package testimage builds small Docker images for tests, FROM scratch, out
// of a Go main package of this module, so that no test ever pulls an image:
// the build needs nothing but the Go toolchain and the local engine.
//
// Build makes an image; Engine and EnsureImage are the helpers tests call:
//
//	cli := testimage.EnsureImage(t, "norsk-testprog:test", "github.com/norsk-go/norsk-manager/internal/runtime/runtimetest/testprog")
//
// EnsureImage skips the test with a clear message when no Docker engine
// answers, and builds each tag once per test process.
//
// The program is built with CGO_ENABLED=0 for linux and the engine's
// architecture, so it runs in an empty image; it must need no files from
// the image (no CA certificates, no time zone data, no shell).
package testimage

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
	"sync"
	"testing"
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
	gobuild := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, goPackage)
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

// Engine returns a client for the local Docker engine (from DOCKER_HOST and
// the other usual variables, with API version negotiation), closed when the
// test ends. It skips the test when no engine answers.
func Engine(t testing.TB) *client.Client {
	t.Helper()
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		t.Skipf("no Docker engine answers: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := cli.Ping(ctx); err != nil {
		_ = cli.Close()
		t.Skipf("no Docker engine answers: %v", err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

var (
	buildsMu sync.Mutex
	builds   = map[string]*buildOnce{}
)

type buildOnce struct {
	once sync.Once
	err  error
}

// EnsureImage makes sure the image tag, built from goPackage, exists, and
// returns an engine client (see Engine) for the test. The image is built
// once per test process (a later test with the same tag reuses it, or gets
// the same build error); the test is skipped when no engine answers, and
// fails when the build does.
func EnsureImage(t testing.TB, tag, goPackage string) *client.Client {
	t.Helper()
	cli := Engine(t)
	buildsMu.Lock()
	b, ok := builds[tag]
	if !ok {
		b = &buildOnce{}
		builds[tag] = b
	}
	buildsMu.Unlock()
	b.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		b.err = Build(ctx, cli, tag, goPackage)
	})
	if b.err != nil {
		t.Fatalf("test image: %v", b.err)
	}
	return cli
}
