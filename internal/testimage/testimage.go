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
	"context"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/client"

	"github.com/norsk-go/norsk-manager/internal/imagebuild"
)

// Build compiles goPackage and builds the image tag from it; see
// imagebuild.Build.
func Build(ctx context.Context, cli *client.Client, tag string, goPackage string) error {
	return imagebuild.Build(ctx, cli, tag, goPackage)
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
