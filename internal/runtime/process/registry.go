package process

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// portRegistry is the directory the process runtimes of one host share so
// that they allocate host ports from one pool: one authority per host, as a
// node agent is for the ports of its node. A service binds its host port
// itself, after Prepare has chosen it and released it, so a bind check alone
// cannot tell a chosen-but-not-yet-bound port from a free one; only the
// state files that record the choice can. Every runtime registers its state
// directory here (a symlink named by a hash of the path), and Prepare
// allocates under the registry's lock, counting as taken every port that a
// state file in any registered directory holds.
//
// An entry whose directory no longer exists is removed when the registry is
// read. Two runtimes given different registries do not see each other's
// ports.
type portRegistry struct {
	dir string
}

// DefaultPortRegistry is the port registry of a runtime configured with
// none: one per user of the host, in the temporary directory.
func DefaultPortRegistry() string {
	return filepath.Join(os.TempDir(), "norsk-process-ports-"+strconv.Itoa(os.Geteuid()))
}

// openPortRegistry opens the registry at dir (see ensure).
func openPortRegistry(dir string) (*portRegistry, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("port registry: %w", err)
	}
	g := &portRegistry{dir: dir}
	if err := g.ensure(); err != nil {
		return nil, err
	}
	return g, nil
}

// ensure creates the registry directory if needed (mode 0700): a temporary
// directory's cleaning may remove it while runtimes use it. It must be a
// directory owned by this process's user that no one else can write to, not
// a symlink: another user who could write to it could make every allocation
// fail or let two services share a port.
func (g *portRegistry) ensure() error {
	if err := os.MkdirAll(g.dir, 0o700); err != nil {
		return fmt.Errorf("port registry: %w", err)
	}
	fi, err := os.Lstat(g.dir)
	if err != nil {
		return fmt.Errorf("port registry: %w", err)
	}
	sys, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || !ok || int(sys.Uid) != os.Geteuid() || fi.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("port registry %s: not a directory of this user (uid %d) that only it can write to", g.dir, os.Geteuid())
	}
	return nil
}

// entry is the name of a runtime directory's entry in the registry.
func (g *portRegistry) entry(runtimeDir string) string {
	sum := sha256.Sum256([]byte(runtimeDir))
	return filepath.Join(g.dir, "dir-"+hex.EncodeToString(sum[:12]))
}

// register records runtimeDir (absolute) in the registry; recording it again
// changes nothing. It needs no lock.
func (g *portRegistry) register(runtimeDir string) error {
	link := g.entry(runtimeDir)
	if got, err := os.Readlink(link); err == nil && got == runtimeDir {
		return nil
	}
	// Made aside and renamed over the entry: the entry is the right link
	// or absent, never half made, and a stray file there is replaced.
	tmp := link + ".tmp-" + strconv.FormatUint(rand.Uint64(), 36)
	if err := os.Symlink(runtimeDir, tmp); err != nil {
		return fmt.Errorf("port registry: register %s: %w", runtimeDir, err)
	}
	if err := os.Rename(tmp, link); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("port registry: register %s: %w", runtimeDir, err)
	}
	return nil
}

// lock takes the registry's exclusive flock: the host's allocations happen
// one at a time. Separate calls conflict even within one process.
func (g *portRegistry) lock() (unlock func(), err error) {
	if err := g.ensure(); err != nil {
		return nil, err
	}
	unlock, err = flockFile(filepath.Join(g.dir, ".lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("port registry: %w", err)
	}
	return unlock, nil
}

// dirs returns the registered runtime directories that exist, and removes
// the entries of those that do not (a removed worker's, a finished test's).
// Call it under the lock.
func (g *portRegistry) dirs() ([]string, error) {
	entries, err := os.ReadDir(g.dir)
	if err != nil {
		return nil, fmt.Errorf("port registry: %w", err)
	}
	var out []string
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), "dir-") || strings.Contains(e.Name(), ".tmp-") {
			continue
		}
		link := filepath.Join(g.dir, e.Name())
		target, err := os.Readlink(link)
		if err != nil {
			continue // not a symlink: not an entry
		}
		if _, err := os.Stat(target); errors.Is(err, fs.ErrNotExist) {
			_ = os.Remove(link)
			continue
		}
		out = append(out, target)
	}
	return out, nil
}
