package mgr

import (
	"os"
	"path/filepath"
	"testing"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/norsk-go/norsk-manager/pkg/accessreplica"
)

// TestSigningKey makes an EdDSA signing key for the role-store replica and
// writes the JWKS of its public half in a temporary directory: pass the
// file to the Manager (--access-replica-keys) and the key to Config.
func TestSigningKey(t testing.TB) (key *jose.JSONWebKey, publicJWKSFile string) {
	t.Helper()
	k, err := accessreplica.GenerateKey(jose.EdDSA, "norsk-mgr-test")
	if err != nil {
		t.Fatal(err)
	}
	pub, err := accessreplica.PublicJWKS(k)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "access-replica-keys.json")
	if err := os.WriteFile(path, pub, 0o600); err != nil {
		t.Fatal(err)
	}
	return k, path
}
