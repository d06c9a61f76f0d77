// Package rolestore is norsk-mgr's role store: the console's local users,
// each with an argon2id password hash and one role (admin, operator,
// viewer), kept in the Manager's KV store under norsk-mgr's namespace and
// changed only with compare-and-set, so that any norsk-mgr (and norsk-ctl
// mgr user) can change it and none keeps state of its own.
//
// Layout (namespace Namespace):
//
//	users/<name>   {"name", "role", "hash", "epoch", "created", "updated"}
//	roles/version  {"version": n}
//
// Every change writes its user and bumps roles/version in one commit,
// conditional on the revisions read: two writers never both succeed from
// the same read, and the version orders the role-store replicas norsk-mgr
// publishes (RolesJSON is the replica's content). A user's epoch grows with
// every password change, so sessions signed before it end.
package rolestore

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"golang.org/x/crypto/argon2"

	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// Namespace is norsk-mgr's KV namespace.
const Namespace = "norsk-mgr"

// Keys of the role store in Namespace.
const (
	UserPrefix = "users/"
	VersionKey = "roles/version"
)

// Roles, from the most to the least able.
const (
	RoleAdmin    = "admin"
	RoleOperator = "operator"
	RoleViewer   = "viewer"
)

// Roles are the roles a user may have.
var Roles = []string{RoleAdmin, RoleOperator, RoleViewer}

// MinPasswordLen is the shortest password accepted.
const MinPasswordLen = 8

// Errors.
var (
	ErrNotFound      = errors.New("no such user")
	ErrExists        = errors.New("the user exists")
	ErrInvalid       = errors.New("invalid")
	ErrBadCredential = errors.New("wrong user name or password")
	// ErrLastAdmin: the change would leave no admin.
	ErrLastAdmin = errors.New("the last admin cannot be removed or demoted")
)

// User is one console user. Hash is the PHC string of its argon2id hash.
type User struct {
	Name    string    `json:"name"`
	Role    string    `json:"role"`
	Hash    string    `json:"hash"`
	Epoch   int64     `json:"epoch"`
	Created time.Time `json:"created"`
	Updated time.Time `json:"updated"`
	// Revision is the KV revision the user was read at (not stored).
	Revision uint64 `json:"-"`
}

// KV is what the store needs of the Manager (a *norsk.Manager has it).
// KvGet answers an error matching norsk.ErrNotFound for an absent key.
type KV interface {
	KvGet(ctx context.Context, namespace, key string) (*norsk.KvEntry, error)
	KvList(ctx context.Context, namespace, keyPrefix string) ([]*norsk.KvEntry, int64, error)
	KvCommit(ctx context.Context, namespace string, writes []norsk.KvWrite, opts norsk.KvCommitOptions) (uint64, error)
}

// Store is the role store over a Manager's KV.
type Store struct {
	kv  KV
	now func() time.Time
}

// New returns the role store kept in kv.
func New(kv KV) *Store { return &Store{kv: kv, now: time.Now} }

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._@-]{0,63}$`)

// ValidName checks a user name: 1–64 of a-z 0-9 . _ @ -, starting with a
// letter or digit.
func ValidName(name string) error {
	if !nameRE.MatchString(name) {
		return fmt.Errorf("%w: user name %q (1-64 of a-z 0-9 . _ @ -, starting with a letter or digit)", ErrInvalid, name)
	}
	return nil
}

// ValidRole checks a role.
func ValidRole(role string) error {
	if !slices.Contains(Roles, role) {
		return fmt.Errorf("%w: role %q (want %s)", ErrInvalid, role, strings.Join(Roles, ", "))
	}
	return nil
}

func validPassword(pw string) error {
	if len(pw) < MinPasswordLen {
		return fmt.Errorf("%w: a password has at least %d characters", ErrInvalid, MinPasswordLen)
	}
	if len(pw) > 1024 {
		return fmt.Errorf("%w: a password has at most 1024 bytes", ErrInvalid)
	}
	return nil
}

// argon2id parameters (OWASP's minimum: 19 MiB, 2 passes, 1 lane).
const (
	argonTime    = 2
	argonMemory  = 19 * 1024
	argonThreads = 1
	argonKeyLen  = 32
)

// HashPassword returns the PHC string of pw's argon2id hash with a fresh
// salt.
func HashPassword(pw string) (string, error) {
	salt := make([]byte, 16)
	if _, err := rand.Read(salt); err != nil {
		return "", err
	}
	key := argon2.IDKey([]byte(pw), salt, argonTime, argonMemory, argonThreads, argonKeyLen)
	b64 := base64.RawStdEncoding
	return fmt.Sprintf("$argon2id$v=%d$m=%d,t=%d,p=%d$%s$%s", argon2.Version, argonMemory, argonTime, argonThreads,
		b64.EncodeToString(salt), b64.EncodeToString(key)), nil
}

// CheckPassword reports whether pw matches a PHC argon2id hash, comparing
// in constant time.
func CheckPassword(hash, pw string) bool {
	parts := strings.Split(hash, "$")
	if len(parts) != 6 || parts[1] != "argon2id" {
		return false
	}
	var v int
	var m uint32
	var t uint32
	var p uint8
	if _, err := fmt.Sscanf(parts[2], "v=%d", &v); err != nil || v != argon2.Version {
		return false
	}
	if _, err := fmt.Sscanf(parts[3], "m=%d,t=%d,p=%d", &m, &t, &p); err != nil || m == 0 || m > 1<<21 || t == 0 || t > 16 || p == 0 {
		return false
	}
	b64 := base64.RawStdEncoding
	salt, err1 := b64.DecodeString(parts[4])
	want, err2 := b64.DecodeString(parts[5])
	if err1 != nil || err2 != nil || len(want) == 0 || len(want) > 128 {
		return false
	}
	got := argon2.IDKey([]byte(pw), salt, t, m, p, uint32(len(want)))
	return subtle.ConstantTimeCompare(got, want) == 1
}

// dummyHash is checked against when a user does not exist, so that a
// sign-in takes as long either way.
var dummyHash, _ = HashPassword("not a password of anyone")

// versionDoc is roles/version's value.
type versionDoc struct {
	Version uint64 `json:"version"`
}

// Version returns the role store's version (0: never changed) and the
// revision of its key (0: absent).
func (s *Store) Version(ctx context.Context) (version uint64, revision uint64, err error) {
	e, err := s.kv.KvGet(ctx, Namespace, VersionKey)
	if errors.Is(err, norsk.ErrNotFound) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, err
	}
	var d versionDoc
	if err := json.Unmarshal(e.GetValue(), &d); err != nil {
		return 0, 0, fmt.Errorf("role store: %s: %w", VersionKey, err)
	}
	return d.Version, e.GetRevision(), nil
}

// Get returns one user (ErrNotFound when absent).
func (s *Store) Get(ctx context.Context, name string) (*User, error) {
	if err := ValidName(name); err != nil {
		return nil, err
	}
	e, err := s.kv.KvGet(ctx, Namespace, UserPrefix+name)
	if errors.Is(err, norsk.ErrNotFound) {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, name)
	}
	if err != nil {
		return nil, err
	}
	return decodeUser(e)
}

func decodeUser(e *norsk.KvEntry) (*User, error) {
	var u User
	if err := json.Unmarshal(e.GetValue(), &u); err != nil {
		return nil, fmt.Errorf("role store: %s: %w", e.GetKey(), err)
	}
	u.Revision = e.GetRevision()
	return &u, nil
}

// List returns every user, in name order.
func (s *Store) List(ctx context.Context) ([]*User, error) {
	entries, _, err := s.kv.KvList(ctx, Namespace, UserPrefix)
	if err != nil {
		return nil, err
	}
	out := make([]*User, 0, len(entries))
	for _, e := range entries {
		u, err := decodeUser(e)
		if err != nil {
			return nil, err
		}
		out = append(out, u)
	}
	return out, nil
}

// State is the role store as one read: its version and users.
type State struct {
	Version uint64
	Users   []*User
}

// Read returns the version and every user. The two are read one after the
// other; Read retries until the version did not move between them.
func (s *Store) Read(ctx context.Context) (*State, error) {
	for range 10 {
		v1, _, err := s.Version(ctx)
		if err != nil {
			return nil, err
		}
		users, err := s.List(ctx)
		if err != nil {
			return nil, err
		}
		v2, _, err := s.Version(ctx)
		if err != nil {
			return nil, err
		}
		if v1 == v2 {
			return &State{Version: v1, Users: users}, nil
		}
	}
	return nil, errors.New("role store: changing too fast to read")
}

// RolesJSON is the role-store replica's roles: {"<user>": {"role": r,
// "epoch": n}, …} — no password hash ever leaves norsk-mgr.
func (st *State) RolesJSON() []byte {
	type entry struct {
		Role  string `json:"role"`
		Epoch int64  `json:"epoch"`
	}
	m := map[string]entry{}
	for _, u := range st.Users {
		m[u.Name] = entry{u.Role, u.Epoch}
	}
	b, _ := json.Marshal(m)
	return b
}

// change commits one user write with the version bump, conditional on both
// revisions read. It retries (a few times) when another writer moved the
// version only.
func (s *Store) change(ctx context.Context, name string, write func(cur *User) (*norsk.KvWrite, error)) error {
	var lastErr error
	for range 5 {
		v, vrev, err := s.Version(ctx)
		if err != nil {
			return err
		}
		var cur *User
		e, err := s.kv.KvGet(ctx, Namespace, UserPrefix+name)
		if err != nil && !errors.Is(err, norsk.ErrNotFound) {
			return err
		}
		if err == nil {
			if cur, err = decodeUser(e); err != nil {
				return err
			}
		}
		w, err := write(cur)
		if err != nil {
			return err
		}
		rev := uint64(0)
		if cur != nil {
			rev = cur.Revision
		}
		vb, _ := json.Marshal(versionDoc{Version: v + 1})
		writes := []norsk.KvWrite{w.IfRevision(rev), norsk.KvPut(VersionKey, vb).IfRevision(vrev)}
		if _, err := s.kv.KvCommit(ctx, Namespace, writes, norsk.KvCommitOptions{}); err != nil {
			if errors.Is(err, norsk.ErrFailedPrecondition) {
				lastErr = err
				continue // someone else wrote meanwhile: read again
			}
			return err
		}
		return nil
	}
	return fmt.Errorf("role store: too many concurrent changes: %w", lastErr)
}

// Add creates a user with a password and a role.
func (s *Store) Add(ctx context.Context, name, role, password string) error {
	if err := ValidName(name); err != nil {
		return err
	}
	if err := ValidRole(role); err != nil {
		return err
	}
	if err := validPassword(password); err != nil {
		return err
	}
	hash, err := HashPassword(password)
	if err != nil {
		return err
	}
	return s.change(ctx, name, func(cur *User) (*norsk.KvWrite, error) {
		if cur != nil {
			return nil, fmt.Errorf("%w: %s", ErrExists, name)
		}
		now := s.now().UTC()
		b, _ := json.Marshal(User{Name: name, Role: role, Hash: hash, Epoch: 1, Created: now, Updated: now})
		w := norsk.KvPut(UserPrefix+name, b)
		return &w, nil
	})
}

// SetPassword replaces a user's password; its sessions end.
func (s *Store) SetPassword(ctx context.Context, name, password string) error {
	if err := ValidName(name); err != nil {
		return err
	}
	if err := validPassword(password); err != nil {
		return err
	}
	hash, err := HashPassword(password)
	if err != nil {
		return err
	}
	return s.change(ctx, name, func(cur *User) (*norsk.KvWrite, error) {
		if cur == nil {
			return nil, fmt.Errorf("%w: %s", ErrNotFound, name)
		}
		u := *cur
		u.Hash, u.Epoch, u.Updated = hash, cur.Epoch+1, s.now().UTC()
		b, _ := json.Marshal(u)
		w := norsk.KvPut(UserPrefix+name, b)
		return &w, nil
	})
}

// SetRole changes a user's role. The last admin cannot be demoted.
func (s *Store) SetRole(ctx context.Context, name, role string) error {
	if err := ValidName(name); err != nil {
		return err
	}
	if err := ValidRole(role); err != nil {
		return err
	}
	return s.change(ctx, name, func(cur *User) (*norsk.KvWrite, error) {
		if cur == nil {
			return nil, fmt.Errorf("%w: %s", ErrNotFound, name)
		}
		if cur.Role == RoleAdmin && role != RoleAdmin {
			if err := s.notLastAdmin(ctx, name); err != nil {
				return nil, err
			}
		}
		u := *cur
		u.Role, u.Updated = role, s.now().UTC()
		b, _ := json.Marshal(u)
		w := norsk.KvPut(UserPrefix+name, b)
		return &w, nil
	})
}

// Remove deletes a user. The last admin cannot be removed.
func (s *Store) Remove(ctx context.Context, name string) error {
	if err := ValidName(name); err != nil {
		return err
	}
	return s.change(ctx, name, func(cur *User) (*norsk.KvWrite, error) {
		if cur == nil {
			return nil, fmt.Errorf("%w: %s", ErrNotFound, name)
		}
		if cur.Role == RoleAdmin {
			if err := s.notLastAdmin(ctx, name); err != nil {
				return nil, err
			}
		}
		w := norsk.KvDelete(UserPrefix + name)
		return &w, nil
	})
}

// notLastAdmin fails when name is the only admin. (The version bump of the
// change makes a concurrent demotion of the other admin fail and retry.)
func (s *Store) notLastAdmin(ctx context.Context, name string) error {
	users, err := s.List(ctx)
	if err != nil {
		return err
	}
	for _, u := range users {
		if u.Role == RoleAdmin && u.Name != name {
			return nil
		}
	}
	return ErrLastAdmin
}

// Authenticate checks a user's password and returns the user; a wrong name
// and a wrong password are the same ErrBadCredential, and take as long.
func (s *Store) Authenticate(ctx context.Context, name, password string) (*User, error) {
	if ValidName(name) != nil {
		CheckPassword(dummyHash, password)
		return nil, ErrBadCredential
	}
	u, err := s.Get(ctx, name)
	if errors.Is(err, ErrNotFound) {
		CheckPassword(dummyHash, password)
		return nil, ErrBadCredential
	}
	if err != nil {
		return nil, err
	}
	if !CheckPassword(u.Hash, password) {
		return nil, ErrBadCredential
	}
	return u, nil
}

// EnsureAdmin creates the admin user name with password when the store has
// no user at all, and reports whether it did (norsk-manager dev's admin).
func (s *Store) EnsureAdmin(ctx context.Context, name, password string) (bool, error) {
	users, err := s.List(ctx)
	if err != nil {
		return false, err
	}
	if len(users) > 0 {
		return false, nil
	}
	if err := s.Add(ctx, name, RoleAdmin, password); err != nil {
		if errors.Is(err, ErrExists) {
			return false, nil
		}
		return false, err
	}
	return true, nil
}
