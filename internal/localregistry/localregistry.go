// Package localregistry runs a real image registry on a loopback port —
// Debian's docker-registry, the CNCF distribution registry — for the tests
// that pull and for `norsk-manager dev --registry`, and pushes locally
// built images into it. Nothing is ever pulled from outside the machine:
// the images pushed are built here (internal/imagebuild, FROM scratch).
//
// The Docker engine pulls from 127.0.0.0/8 over plain HTTP without being
// told (loopback registries are insecure registries by default), so the
// registry needs no TLS.
package localregistry

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"
)

// BinaryEnv names the environment variable that overrides where the
// registry binary is ("" = docker-registry on PATH, else
// /usr/bin/docker-registry).
const BinaryEnv = "NORSK_REGISTRY_BIN"

// startTimeout bounds the wait for the registry to say where it listens.
const startTimeout = 15 * time.Second

// ErrNoBinary: the registry binary is not installed.
var ErrNoBinary = errors.New("docker-registry is not installed (Debian: apt-get install docker-registry)")

// Binary returns the path of the registry binary, or ErrNoBinary.
func Binary() (string, error) {
	if p := os.Getenv(BinaryEnv); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%s=%s: %w", BinaryEnv, p, err)
		}
		return p, nil
	}
	if p, err := exec.LookPath("docker-registry"); err == nil {
		return p, nil
	}
	if _, err := os.Stat("/usr/bin/docker-registry"); err == nil {
		return "/usr/bin/docker-registry", nil
	}
	return "", ErrNoBinary
}

// Registry is a running registry process.
type Registry struct {
	// Host is where it listens, "127.0.0.1:port": image refs in it are
	// Host + "/" + repository + ":" + tag.
	Host string

	cmd  *exec.Cmd
	done chan struct{}
	once sync.Once
	err  error
}

var listening = regexp.MustCompile(`listening on (127\.0\.0\.1:\d+)`)

// Start runs a registry storing its blobs under dir (created if absent)
// on a free loopback port (addr "" = 127.0.0.1:0; give a port to keep one
// across restarts), and returns once it listens. Its log goes to logger
// (debug). Close stops it; so does ctx ending.
func Start(ctx context.Context, dir, addr string, logger *slog.Logger) (*Registry, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	if logger == nil {
		logger = slog.Default()
	}
	if err := os.MkdirAll(filepath.Join(dir, "data"), 0o700); err != nil {
		return nil, fmt.Errorf("registry: %w", err)
	}
	conf := fmt.Sprintf(`version: 0.1
log:
  level: info
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: %s
  delete:
    enabled: true
http:
  addr: %s
`, filepath.Join(dir, "data"), addr)
	confPath := filepath.Join(dir, "config.yml")
	if err := os.WriteFile(confPath, []byte(conf), 0o600); err != nil {
		return nil, fmt.Errorf("registry: %w", err)
	}
	cmd := exec.CommandContext(ctx, bin, "serve", confPath)
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.StderrPipe()
	if err != nil {
		return nil, fmt.Errorf("registry: %w", err)
	}
	cmd.Stdout = cmd.Stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("registry: start %s: %w", bin, err)
	}
	r := &Registry{cmd: cmd, done: make(chan struct{})}
	found := make(chan string, 1)
	var tail []string
	var tailMu sync.Mutex
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			line := sc.Text()
			if m := listening.FindStringSubmatch(line); m != nil {
				select {
				case found <- m[1]:
				default:
				}
			}
			tailMu.Lock()
			tail = append(tail, line)
			if len(tail) > 20 {
				tail = tail[1:]
			}
			tailMu.Unlock()
			logger.Debug("registry", "line", line)
		}
	}()
	go func() {
		r.err = cmd.Wait()
		close(r.done)
	}()
	t := time.NewTimer(startTimeout)
	defer t.Stop()
	select {
	case host := <-found:
		r.Host = host
		logger.Info("image registry listening", "host", host, "dir", dir)
		return r, nil
	case <-r.done:
		tailMu.Lock()
		defer tailMu.Unlock()
		return nil, fmt.Errorf("registry: %s exited before it listened (%v): %s", bin, r.err, strings.Join(tail, " | "))
	case <-t.C:
		r.Close()
		return nil, fmt.Errorf("registry: %s did not say where it listens within %s", bin, startTimeout)
	case <-ctx.Done():
		r.Close()
		return nil, ctx.Err()
	}
}

// Close stops the registry and waits for it to exit.
func (r *Registry) Close() error {
	r.once.Do(func() {
		if r.cmd.Process != nil {
			_ = r.cmd.Process.Kill()
		}
		<-r.done
	})
	return nil
}

// Ref is the reference of repo:tag in this registry.
func (r *Registry) Ref(repoTag string) string { return r.Host + "/" + repoTag }

// Push tags the engine's image local as r.Ref(repoTag) and pushes it into
// the registry; it returns the pushed reference. The engine keeps both
// tags.
func (r *Registry) Push(ctx context.Context, cli *client.Client, local, repoTag string) (string, error) {
	ref := r.Ref(repoTag)
	if err := cli.ImageTag(ctx, local, ref); err != nil {
		return "", fmt.Errorf("tag %s as %s: %w", local, ref, err)
	}
	rc, err := cli.ImagePush(ctx, ref, image.PushOptions{RegistryAuth: base64.URLEncoding.EncodeToString([]byte("{}"))})
	if err != nil {
		return "", fmt.Errorf("push %s: %w", ref, err)
	}
	defer rc.Close()
	if err := streamError(rc); err != nil {
		return "", fmt.Errorf("push %s: %w", ref, err)
	}
	return ref, nil
}

// streamError reads an engine progress stream to its end and returns the
// error it reported, if any.
func streamError(rd io.Reader) error {
	dec := json.NewDecoder(rd)
	for {
		var m struct {
			Error       string `json:"error"`
			ErrorDetail *struct {
				Message string `json:"message"`
			} `json:"errorDetail"`
		}
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return err
		}
		if m.ErrorDetail != nil && m.ErrorDetail.Message != "" {
			return errors.New(m.ErrorDetail.Message)
		}
		if m.Error != "" {
			return errors.New(m.Error)
		}
	}
}
