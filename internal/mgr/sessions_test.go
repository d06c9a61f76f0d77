package mgr

import (
	"strings"
	"testing"
	"time"
)

func testSessions() *sessions {
	return newSessions([]sessionKey{{ID: "k1", Secret: []byte("0123456789abcdef0123456789abcdef")}})
}

func TestSessionCookieRoundTripAndTampering(t *testing.T) {
	ss := testSessions()
	now := time.Unix(1_700_000_000, 0)
	s := session{ID: "sid-1", User: "alice", Epoch: 3, Expires: now.Add(time.Hour).Unix()}
	v := ss.encode(s)
	got, ok := ss.decode(v, now)
	if !ok || *got != s {
		t.Fatalf("decode(encode(s)) = %+v, %v", got, ok)
	}
	if _, ok := ss.decode(v, now.Add(2*time.Hour)); ok {
		t.Error("an expired session was accepted")
	}
	kid, rest, _ := strings.Cut(v, ".")
	payload, sum, _ := strings.Cut(rest, ".")
	for name, bad := range map[string]string{
		"other key id":  "k2." + rest,
		"payload":       kid + "." + payload[:len(payload)-2] + "AA." + sum,
		"mac":           kid + "." + payload + "." + strings.Repeat("A", len(sum)),
		"no mac":        kid + "." + payload,
		"empty":         "",
		"another's key": newSessions([]sessionKey{{ID: "k1", Secret: []byte("another secret of thirty-two b..")}}).encode(s),
	} {
		if _, ok := ss.decode(bad, now); ok {
			t.Errorf("%s: a tampered cookie was accepted", name)
		}
	}
	csrf := ss.csrf(&s)
	if !ss.checkCSRF(&s, csrf) {
		t.Error("the session's own CSRF token was refused")
	}
	other := s
	other.ID = "sid-2"
	if ss.checkCSRF(&other, csrf) || ss.checkCSRF(&s, "") || ss.checkCSRF(&s, "!!") {
		t.Error("a CSRF token of another session (or none) was accepted")
	}
}

func FuzzSessionDecode(f *testing.F) {
	ss := testSessions()
	now := time.Unix(1_700_000_000, 0)
	f.Add(ss.encode(session{ID: "x", User: "u", Epoch: 1, Expires: now.Add(time.Hour).Unix()}))
	f.Add("k1..")
	f.Add("k1.e30.AAAA")
	f.Fuzz(func(t *testing.T, v string) {
		s, ok := ss.decode(v, now)
		if ok && (s == nil || s.ID == "" || s.Expires <= now.Unix()) {
			t.Fatalf("decode accepted %q as %+v", v, s)
		}
		if ok && ss.encode(*s) == "" {
			t.Fatal("re-encode failed")
		}
	})
}

func TestSignInLimiter(t *testing.T) {
	l := newSignInLimiter(2, time.Minute)
	now := time.Unix(0, 0)
	if !l.allow(now, "ip:a", "user:x") || !l.allow(now, "ip:a", "user:x") {
		t.Fatal("the burst was refused")
	}
	if l.allow(now, "ip:a", "user:x") {
		t.Fatal("a third attempt at once was allowed")
	}
	if !l.allow(now, "ip:b", "user:y") {
		t.Fatal("another client and user were throttled")
	}
	if !l.allow(now.Add(time.Minute), "ip:a", "user:x") {
		t.Fatal("an attempt a minute later was refused")
	}
}
