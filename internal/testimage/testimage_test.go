package testimage

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"go.uber.org/goleak"

	"github.com/norsk-go/norsk-manager/internal/runtime/runtimetest"
)

// selfTestTag is this package's own tag, apart from the tags other
// packages' tests build, so that test processes running side by side do not
// rebuild each other's images.
const selfTestTag = "norsk-testimage-selftest:test"

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestBuildAndRun(t *testing.T) {
	cli := EnsureImage(t, selfTestTag, runtimetest.TestProgPackage)
	again := EnsureImage(t, selfTestTag, runtimetest.TestProgPackage) // built once
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	img, err := again.ImageInspect(ctx, selfTestTag)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(img.Config.Entrypoint, []string{"/prog"}) || img.Config.Labels["norsk.manager/test-image"] != runtimetest.TestProgPackage {
		t.Errorf("image config: entrypoint %v, labels %v", img.Config.Entrypoint, img.Config.Labels)
	}

	created, err := cli.ContainerCreate(ctx, &container.Config{Image: selfTestTag, Cmd: []string{"-exit", "7", "-run", "1ms"}}, nil, nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := cli.ContainerRemove(ctx, created.ID, container.RemoveOptions{Force: true}); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	if err := cli.ContainerStart(ctx, created.ID, container.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	waitC, errC := cli.ContainerWait(ctx, created.ID, container.WaitConditionNotRunning)
	select {
	case res := <-waitC:
		if res.StatusCode != 7 {
			t.Errorf("exit code %d, want 7", res.StatusCode)
		}
	case err := <-errC:
		t.Fatal(err)
	}
}

func TestBuildReportsGoBuildErrors(t *testing.T) {
	cli := Engine(t)
	err := Build(t.Context(), cli, "norsk-testimage-never:test", "github.com/norsk-go/norsk-manager/internal/no/such/package")
	// The go command's own answer (go list, which digests the source
	// first, or go build), naming the package.
	if err == nil || !strings.Contains(err.Error(), "internal/no/such/package") ||
		!(strings.Contains(err.Error(), "go build") || strings.Contains(err.Error(), "go list")) {
		t.Fatalf("Build of a missing package = %v, want the go command's error naming it", err)
	}
}

func writeFile(path, content string) error {
	return os.WriteFile(path, []byte(content), 0o755)
}
