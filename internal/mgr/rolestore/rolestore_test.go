package rolestore_test

import (
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/norsk-go/norsk-manager/internal/mgr/rolestore"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
	"github.com/norsk-go/norsk-manager/sdk/norsk/norsktest"
)

func connect(t *testing.T) *norsk.Manager {
	srv := norsktest.NewServer(t)
	m, err := norsk.Connect(t.Context(), norsk.Settings{URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return m
}

func TestPasswordHash(t *testing.T) {
	t.Parallel()
	h, err := rolestore.HashPassword("correct horse")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(h, "$argon2id$v=19$m=19456,t=2,p=1$") {
		t.Fatalf("hash %q is not a PHC argon2id string", h)
	}
	h2, _ := rolestore.HashPassword("correct horse")
	if h == h2 {
		t.Error("two hashes of one password are equal: no salt")
	}
	for _, tc := range []struct {
		hash, pw string
		want     bool
	}{
		{h, "correct horse", true},
		{h, "correct horsE", false},
		{h, "", false},
		{"", "correct horse", false},
		{"$argon2i$v=19$m=19456,t=2,p=1$c2FsdA$aGFzaA", "x", false},
		{"$argon2id$v=19$m=99999999,t=2,p=1$c2FsdA$aGFzaA", "x", false},
		{"$argon2id$v=19$m=19456,t=2,p=1$!!$aGFzaA", "x", false},
		{strings.Replace(h, "t=2", "t=3", 1), "correct horse", false},
	} {
		if got := rolestore.CheckPassword(tc.hash, tc.pw); got != tc.want {
			t.Errorf("CheckPassword(%q, %q) = %v, want %v", tc.hash, tc.pw, got, tc.want)
		}
	}
}

func TestUsersAndVersion(t *testing.T) {
	t.Parallel()
	m := connect(t)
	s := rolestore.New(m)
	ctx := t.Context()
	for _, tc := range []struct {
		name, role, pw string
		want           error
	}{
		{"Alice", "admin", "password-1", rolestore.ErrInvalid},
		{"alice", "root", "password-1", rolestore.ErrInvalid},
		{"alice", "admin", "short", rolestore.ErrInvalid},
		{"alice", "admin", "password-1", nil},
		{"alice", "viewer", "password-2", rolestore.ErrExists},
		{"vera", "viewer", "password-3", nil},
	} {
		if err := s.Add(ctx, tc.name, tc.role, tc.pw); !errors.Is(err, tc.want) {
			t.Errorf("Add(%s, %s): %v, want %v", tc.name, tc.role, err, tc.want)
		}
	}
	if _, err := s.Authenticate(ctx, "alice", "password-1"); err != nil {
		t.Fatal(err)
	}
	for _, bad := range [][2]string{{"alice", "password-2"}, {"nobody", "password-1"}, {"BAD NAME", "x"}} {
		if _, err := s.Authenticate(ctx, bad[0], bad[1]); !errors.Is(err, rolestore.ErrBadCredential) {
			t.Errorf("Authenticate(%s): %v, want ErrBadCredential", bad[0], err)
		}
	}
	if err := s.Remove(ctx, "alice"); !errors.Is(err, rolestore.ErrLastAdmin) {
		t.Errorf("removing the last admin: %v", err)
	}
	if err := s.SetRole(ctx, "alice", "viewer"); !errors.Is(err, rolestore.ErrLastAdmin) {
		t.Errorf("demoting the last admin: %v", err)
	}
	u, _ := s.Get(ctx, "vera")
	if err := s.SetPassword(ctx, "vera", "password-4"); err != nil {
		t.Fatal(err)
	}
	u2, _ := s.Get(ctx, "vera")
	if u2.Epoch != u.Epoch+1 {
		t.Errorf("a password change moved the epoch %d → %d", u.Epoch, u2.Epoch)
	}
	st, err := s.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Version != 3 || len(st.Users) != 2 {
		t.Fatalf("version %d with %d users, want 3 and 2", st.Version, len(st.Users))
	}
	if roles := string(st.RolesJSON()); strings.Contains(roles, "argon2") || !strings.Contains(roles, `"vera":{"role":"viewer","epoch":2}`) {
		t.Errorf("replica roles %s", roles)
	}
}

// Concurrent changes from many writers (as several norsk-mgr and norsk-ctl
// would make them) each land once, and the version counts them all.
func TestConcurrentChangesCompareAndSet(t *testing.T) {
	t.Parallel()
	m := connect(t)
	s := rolestore.New(m)
	ctx := t.Context()
	var wg sync.WaitGroup
	names := []string{"u1", "u2", "u3", "u4", "u5", "u6"}
	errs := make(chan error, len(names))
	for _, n := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- s.Add(ctx, n, rolestore.RoleViewer, "password-"+n)
		}()
	}
	wg.Wait()
	close(errs)
	ok := 0
	for err := range errs {
		if err == nil {
			ok++
		}
	}
	st, err := s.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if int(st.Version) != ok || len(st.Users) != ok {
		t.Fatalf("%d adds succeeded; version %d, %d users", ok, st.Version, len(st.Users))
	}
	if ok < 2 {
		t.Errorf("only %d of %d concurrent adds succeeded", ok, len(names))
	}
}
