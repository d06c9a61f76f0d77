package devmode

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/norsk-go/norsk-manager/internal/mgr"
	"github.com/norsk-go/norsk-manager/pkg/accessreplica"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// Files of dev's norsk-mgr in the data directory.
const (
	// SigningKeysFile: the private key norsk-mgr signs the role-store
	// replica with (JWKS); AccessReplicaKeysFile: its public half, the
	// Manager's --access-replica-keys.
	SigningKeysFile       = "norsk-mgr-signing-keys.json"
	AccessReplicaKeysFile = "access-replica-keys.json"
	// AdminPasswordFile holds the console's dev admin password.
	AdminPasswordFile = "norsk-mgr-admin-password"
	// ConsoleAdmin is the dev admin's user name.
	ConsoleAdmin = "admin"
)

// consoleKeys makes (once) the signing key of dev's norsk-mgr and the
// Manager's trusted JWKS, and returns the key.
func consoleKeys(dir string) (*jose.JSONWebKey, error) {
	priv := filepath.Join(dir, SigningKeysFile)
	if keys, err := mgr.LoadSigningKeys(priv); err == nil {
		return keys[len(keys)-1], nil
	}
	k, err := accessreplica.GenerateKey(jose.EdDSA, "dev-1")
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{*k}})
	if err != nil {
		return nil, err
	}
	pub, err := accessreplica.PublicJWKS(k)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(priv, b, 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, AccessReplicaKeysFile), pub, 0o600); err != nil {
		return nil, err
	}
	return k, nil
}

// adminPassword reads (or makes) the dev admin's password.
func adminPassword(dir string) (string, error) {
	path := filepath.Join(dir, AdminPasswordFile)
	if b, err := os.ReadFile(path); err == nil {
		if pw := strings.TrimSpace(string(b)); pw != "" {
			return pw, nil
		}
	}
	buf := make([]byte, 12)
	if _, err := rand.Read(buf); err != nil {
		return "", err
	}
	pw := base64.RawURLEncoding.EncodeToString(buf)
	if err := os.WriteFile(path, []byte(pw+"\n"), 0o600); err != nil {
		return "", err
	}
	return pw, nil
}

// startConsole starts dev's norsk-mgr beside the Manager at url.
func startConsole(ctx context.Context, dir, url, token, listen string, key *jose.JSONWebKey, log *slog.Logger) (*mgr.Server, string, error) {
	pw, err := adminPassword(dir)
	if err != nil {
		return nil, "", fmt.Errorf("console admin password: %w", err)
	}
	s, err := mgr.New(ctx, mgr.Config{
		Manager:         norsk.Settings{URL: url, Token: token},
		Listen:          listen,
		DiscoveryListen: "127.0.0.1:0",
		SigningKeys:     []*jose.JSONWebKey{key},
		AdminUser:       ConsoleAdmin,
		AdminPassword:   pw,
		Logger:          log,
	})
	if err != nil {
		return nil, "", err
	}
	return s, pw, nil
}
