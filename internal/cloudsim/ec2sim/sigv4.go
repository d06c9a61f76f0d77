package ec2sim

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"
)

// credential is the scope a request was signed for.
type credential struct {
	accessKey, date, region, service string
}

// verifySigV4 checks a request's AWS Signature Version 4 against secret,
// the way EC2 does: the canonical request is rebuilt from the headers the
// signature names, and the signature must match. It returns the scope.
func verifySigV4(r *http.Request, body []byte, accessKey, secret string, now time.Time) (credential, error) {
	auth := r.Header.Get("Authorization")
	const algo = "AWS4-HMAC-SHA256 "
	if !strings.HasPrefix(auth, algo) {
		return credential{}, errors.New("the request is not signed with AWS4-HMAC-SHA256")
	}
	parts := map[string]string{}
	for _, kv := range strings.Split(strings.TrimPrefix(auth, algo), ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if ok {
			parts[k] = v
		}
	}
	scope := strings.Split(parts["Credential"], "/")
	if len(scope) != 5 || scope[4] != "aws4_request" {
		return credential{}, fmt.Errorf("malformed credential %q", parts["Credential"])
	}
	cred := credential{accessKey: scope[0], date: scope[1], region: scope[2], service: scope[3]}
	if cred.accessKey != accessKey {
		return cred, fmt.Errorf("AWS was not able to validate the provided access credentials (access key %q)", cred.accessKey)
	}
	amzDate := r.Header.Get("X-Amz-Date")
	t, err := time.Parse("20060102T150405Z", amzDate)
	if err != nil {
		return cred, fmt.Errorf("X-Amz-Date %q: %v", amzDate, err)
	}
	if d := now.Sub(t); d > 15*time.Minute || d < -15*time.Minute {
		return cred, fmt.Errorf("signature expired: %s is not within 15 minutes of %s", amzDate, now.UTC().Format("20060102T150405Z"))
	}
	signed := strings.Split(parts["SignedHeaders"], ";")
	sort.Strings(signed)
	var canonHeaders strings.Builder
	for _, h := range signed {
		var v string
		if h == "host" {
			v = r.Host
		} else {
			v = strings.Join(r.Header.Values(h), ",")
		}
		canonHeaders.WriteString(h + ":" + strings.Join(strings.Fields(v), " ") + "\n")
	}
	payloadHash := r.Header.Get("X-Amz-Content-Sha256")
	if payloadHash == "" || payloadHash == "UNSIGNED-PAYLOAD" {
		sum := sha256.Sum256(body)
		payloadHash = hex.EncodeToString(sum[:])
	} else {
		sum := sha256.Sum256(body)
		if payloadHash != hex.EncodeToString(sum[:]) {
			return cred, errors.New("the body does not match X-Amz-Content-Sha256")
		}
	}
	canonical := strings.Join([]string{
		r.Method,
		canonicalURI(r.URL),
		canonicalQuery(r.URL.Query()),
		canonHeaders.String(),
		strings.Join(signed, ";"),
		payloadHash,
	}, "\n")
	hashed := sha256.Sum256([]byte(canonical))
	scopeStr := strings.Join(scope[1:], "/")
	toSign := strings.Join([]string{"AWS4-HMAC-SHA256", amzDate, scopeStr, hex.EncodeToString(hashed[:])}, "\n")
	key := hmacSHA256([]byte("AWS4"+secret), cred.date)
	key = hmacSHA256(key, cred.region)
	key = hmacSHA256(key, cred.service)
	key = hmacSHA256(key, "aws4_request")
	want := hex.EncodeToString(hmacSHA256(key, toSign))
	if !hmac.Equal([]byte(want), []byte(parts["Signature"])) {
		return cred, errors.New("the request signature we calculated does not match the signature you provided")
	}
	return cred, nil
}

func hmacSHA256(key []byte, data string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(data))
	return m.Sum(nil)
}

func canonicalURI(u *url.URL) string {
	p := u.EscapedPath()
	if p == "" {
		return "/"
	}
	return p
}

func canonicalQuery(q url.Values) string {
	keys := make([]string, 0, len(q))
	for k := range q {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		vs := append([]string(nil), q[k]...)
		sort.Strings(vs)
		for _, v := range vs {
			parts = append(parts, awsEscape(k)+"="+awsEscape(v))
		}
	}
	return strings.Join(parts, "&")
}

// awsEscape is RFC 3986 escaping, as SigV4 wants it.
func awsEscape(s string) string {
	return strings.ReplaceAll(url.QueryEscape(s), "+", "%20")
}
