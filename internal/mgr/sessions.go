package mgr

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/norsk-go/norsk-manager/internal/mgr/rolestore"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// SessionKeysKey holds the sessions' signing keys in rolestore.Namespace.
const SessionKeysKey = "session-keys"

// CookieName is the session cookie; CSRFHeader carries the session's CSRF
// token on every action.
const (
	CookieName = "norsk_mgr_session"
	CSRFHeader = "X-CSRF-Token"
	// SessionTTL is how long a sign-in lasts.
	SessionTTL = 12 * time.Hour
)

type sessionKey struct {
	ID      string    `json:"id"`
	Secret  []byte    `json:"secret"`
	Created time.Time `json:"created"`
}

type sessionKeysDoc struct {
	Keys []sessionKey `json:"keys"`
}

// loadSessionKeys reads the sessions' signing keys, making the first one
// (compare-and-set: whoever comes first wins, the others read it) when
// there is none.
func loadSessionKeys(ctx context.Context, m *norsk.Manager) ([]sessionKey, error) {
	for range 3 {
		e, err := m.KvGet(ctx, rolestore.Namespace, SessionKeysKey)
		if err != nil && !errors.Is(err, norsk.ErrNotFound) {
			return nil, err
		}
		if err == nil {
			var d sessionKeysDoc
			if err := json.Unmarshal(e.GetValue(), &d); err != nil || len(d.Keys) == 0 {
				return nil, fmt.Errorf("%s is unreadable: %v", SessionKeysKey, err)
			}
			return d.Keys, nil
		}
		secret := make([]byte, 32)
		if _, err := rand.Read(secret); err != nil {
			return nil, err
		}
		b, _ := json.Marshal(sessionKeysDoc{Keys: []sessionKey{{ID: randomID(6), Secret: secret, Created: time.Now().UTC()}}})
		_, err = m.KvCommit(ctx, rolestore.Namespace, []norsk.KvWrite{norsk.KvPut(SessionKeysKey, b).IfAbsent()}, norsk.KvCommitOptions{})
		if err != nil && !errors.Is(err, norsk.ErrFailedPrecondition) {
			return nil, err
		}
	}
	return nil, errors.New("could not read or make the sessions' signing keys")
}

func randomID(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// session is a signed-in user's session, carried in the cookie, signed
// with the newest session key: any norsk-mgr of the cluster verifies it.
type session struct {
	ID      string `json:"sid"`
	User    string `json:"u"`
	Epoch   int64  `json:"e"`
	Expires int64  `json:"x"` // unix seconds
}

// sessions signs and verifies session cookies and their CSRF tokens.
type sessions struct {
	keys []sessionKey // newest last
}

func newSessions(keys []sessionKey) *sessions { return &sessions{keys: keys} }

func (ss *sessions) newest() sessionKey { return ss.keys[len(ss.keys)-1] }

func mac(secret []byte, parts ...string) []byte {
	h := hmac.New(sha256.New, secret)
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return h.Sum(nil)
}

// encode is the cookie value: <kid>.<payload>.<mac>.
func (ss *sessions) encode(s session) string {
	k := ss.newest()
	b, _ := json.Marshal(s)
	payload := base64.RawURLEncoding.EncodeToString(b)
	return k.ID + "." + payload + "." + base64.RawURLEncoding.EncodeToString(mac(k.Secret, "session", k.ID, payload))
}

// decode verifies a cookie value and returns its session (not checked
// against the user: see Server.authenticate).
func (ss *sessions) decode(v string, now time.Time) (*session, bool) {
	kid, rest, ok := strings.Cut(v, ".")
	if !ok {
		return nil, false
	}
	payload, sum, ok := strings.Cut(rest, ".")
	if !ok {
		return nil, false
	}
	got, err := base64.RawURLEncoding.DecodeString(sum)
	if err != nil {
		return nil, false
	}
	for _, k := range ss.keys {
		if k.ID == kid && hmac.Equal(got, mac(k.Secret, "session", k.ID, payload)) {
			b, err := base64.RawURLEncoding.DecodeString(payload)
			if err != nil {
				return nil, false
			}
			var s session
			if json.Unmarshal(b, &s) != nil || s.ID == "" || now.Unix() >= s.Expires {
				return nil, false
			}
			return &s, true
		}
	}
	return nil, false
}

// csrf is the session's CSRF token: a MAC of its id, so that it needs no
// storage and any norsk-mgr checks it.
func (ss *sessions) csrf(s *session) string {
	k := ss.newest()
	return base64.RawURLEncoding.EncodeToString(mac(k.Secret, "csrf", s.ID))
}

func (ss *sessions) checkCSRF(s *session, token string) bool {
	got, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil {
		return false
	}
	for _, k := range ss.keys {
		if hmac.Equal(got, mac(k.Secret, "csrf", s.ID)) {
			return true
		}
	}
	return false
}

// cookie is the session cookie: HttpOnly, Secure, SameSite=Strict.
// Browsers accept a Secure cookie from http://localhost and 127.0.0.1 (a
// secure context), so the console on loopback works without TLS.
func (ss *sessions) cookie(value string, maxAge int) *http.Cookie {
	return &http.Cookie{Name: CookieName, Value: value, Path: "/", MaxAge: maxAge,
		HttpOnly: true, Secure: true, SameSite: http.SameSiteStrictMode}
}

// signInLimiter bounds sign-in attempts per client address and per user
// name.
type signInLimiter struct {
	mu     sync.Mutex
	burst  int
	every  time.Duration
	byKey  map[string]*rate.Limiter
	pruned time.Time
}

func newSignInLimiter(burst int, every time.Duration) *signInLimiter {
	return &signInLimiter{burst: burst, every: every, byKey: map[string]*rate.Limiter{}}
}

// allow takes one attempt for every key; false when any is exhausted.
func (l *signInLimiter) allow(now time.Time, keys ...string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.pruned) > 10*time.Minute {
		for k, lim := range l.byKey {
			if lim.TokensAt(now) >= float64(l.burst) {
				delete(l.byKey, k)
			}
		}
		l.pruned = now
	}
	ok := true
	for _, k := range keys {
		lim := l.byKey[k]
		if lim == nil {
			lim = rate.NewLimiter(rate.Every(l.every), l.burst)
			l.byKey[k] = lim
		}
		if !lim.AllowN(now, 1) {
			ok = false
		}
	}
	return ok
}
