package docker

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/distribution/reference"
	"github.com/docker/docker/api/types/registry"
)

// dockerHubAuthKey is the key the Docker CLI files Docker Hub's
// credentials under.
const dockerHubAuthKey = "https://index.docker.io/v1/"

// configFile is the part of a Docker CLI config.json the runtime reads.
type configFile struct {
	Auths       map[string]authEntry `json:"auths"`
	CredsStore  string               `json:"credsStore"`
	CredHelpers map[string]string    `json:"credHelpers"`
}

type authEntry struct {
	Auth          string `json:"auth"`
	Username      string `json:"username"`
	Password      string `json:"password"`
	IdentityToken string `json:"identitytoken"`
}

// DockerConfigDir is where the worker's Docker config lives: $DOCKER_CONFIG,
// else ~/.docker (as the Docker CLI finds it).
func DockerConfigDir() string {
	if d := os.Getenv("DOCKER_CONFIG"); d != "" {
		return d
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return ""
	}
	return filepath.Join(home, ".docker")
}

// registryAuth returns the X-Registry-Auth value for pulling ref with the
// credentials of the Docker config in dir ("" when it holds none for ref's
// registry, or there is no config). The file is read at every pull, so that
// a `docker login` on the node takes effect without a worker restart. A
// credential helper (credsStore, credHelpers) is run as the Docker CLI runs
// it: docker-credential-<name> get, the registry on stdin.
func registryAuth(ctx context.Context, dir, ref string) (string, error) {
	if dir == "" {
		return "", nil
	}
	raw, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read the Docker config: %w", err)
	}
	var cf configFile
	if err := json.Unmarshal(raw, &cf); err != nil {
		return "", fmt.Errorf("read the Docker config %s: %w", filepath.Join(dir, "config.json"), err)
	}
	host := registryHost(ref)
	key := host
	if host == "docker.io" {
		key = dockerHubAuthKey
	}
	if helper := cf.CredHelpers[host]; helper != "" {
		return helperAuth(ctx, helper, key)
	}
	for _, k := range []string{key, "https://" + key, "http://" + key} {
		if e, ok := cf.Auths[k]; ok {
			ac := registry.AuthConfig{ServerAddress: key, Username: e.Username, Password: e.Password, IdentityToken: e.IdentityToken}
			if e.Auth != "" {
				dec, err := base64.StdEncoding.DecodeString(e.Auth)
				if err != nil {
					return "", fmt.Errorf("the Docker config's auth for %s is not base64: %w", k, err)
				}
				user, pass, ok := strings.Cut(string(dec), ":")
				if !ok {
					return "", fmt.Errorf("the Docker config's auth for %s is not user:password", k)
				}
				ac.Username, ac.Password = user, pass
			}
			if ac.Username == "" && ac.IdentityToken == "" && cf.CredsStore != "" {
				return helperAuth(ctx, cf.CredsStore, key)
			}
			return registry.EncodeAuthConfig(ac)
		}
	}
	if cf.CredsStore != "" {
		return helperAuth(ctx, cf.CredsStore, key)
	}
	return "", nil
}

// helperAuth asks a Docker credential helper for key's credentials; a
// helper that has none gives no credentials.
func helperAuth(ctx context.Context, helper, key string) (string, error) {
	cmd := exec.CommandContext(ctx, "docker-credential-"+helper, "get")
	cmd.Stdin = strings.NewReader(key)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(out.String() + errOut.String())
		if strings.Contains(msg, "credentials not found") {
			return "", nil
		}
		return "", fmt.Errorf("credential helper docker-credential-%s for %s: %w (%s)", helper, key, err, msg)
	}
	var c struct{ Username, Secret string }
	if err := json.Unmarshal(out.Bytes(), &c); err != nil {
		return "", fmt.Errorf("credential helper docker-credential-%s for %s: %w", helper, key, err)
	}
	ac := registry.AuthConfig{ServerAddress: key, Username: c.Username, Password: c.Secret}
	if c.Username == "<token>" {
		ac = registry.AuthConfig{ServerAddress: key, IdentityToken: c.Secret}
	}
	return registry.EncodeAuthConfig(ac)
}

// registryHost is the registry a reference pulls from ("docker.io" for
// Docker Hub).
func registryHost(ref string) string {
	named, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return ""
	}
	return reference.Domain(named)
}

// NormalizeRef is ref as the engine names it: with its registry and, when
// it has neither tag nor digest, the tag "latest"
// ("nginx" → "docker.io/library/nginx:latest"). A ref that does not parse
// is returned as it is.
func NormalizeRef(ref string) string {
	named, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return ref
	}
	return reference.TagNameOnly(named).String()
}
