package ocisim

import (
	"crypto"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// verifySignature checks an OCI request signature (draft-cavage HTTP
// signatures, version 1, rsa-sha256) the way OCI does: keyId names the
// tenancy, user and key fingerprint; the signing string is rebuilt from
// the headers the signature lists; a body's x-content-sha256 must match
// it; and the signature must verify with the user's public key.
func verifySignature(r *http.Request, body []byte, keyID string, pub *rsa.PublicKey, now time.Time) error {
	auth := r.Header.Get("Authorization")
	if !strings.HasPrefix(auth, "Signature ") {
		return errors.New("the request is not signed")
	}
	params := map[string]string{}
	for _, kv := range splitParams(strings.TrimPrefix(auth, "Signature ")) {
		k, v, ok := strings.Cut(kv, "=")
		if ok {
			params[strings.TrimSpace(k)] = strings.Trim(strings.TrimSpace(v), `"`)
		}
	}
	switch {
	case params["version"] != "1":
		return fmt.Errorf("signature version %q is not 1", params["version"])
	case params["algorithm"] != "rsa-sha256":
		return fmt.Errorf("signature algorithm %q is not rsa-sha256", params["algorithm"])
	case params["keyId"] != keyID:
		return fmt.Errorf("the key %q is not known", params["keyId"])
	}
	headers := strings.Fields(params["headers"])
	need := []string{"date", "(request-target)", "host"}
	if r.Method == http.MethodPost || r.Method == http.MethodPut || r.Method == http.MethodPatch {
		need = append(need, "content-length", "content-type", "x-content-sha256")
		sum := sha256.Sum256(body)
		if r.Header.Get("X-Content-Sha256") != base64.StdEncoding.EncodeToString(sum[:]) {
			return errors.New("x-content-sha256 does not match the body")
		}
	}
	for _, h := range need {
		found := false
		for _, have := range headers {
			found = found || have == h
		}
		if !found {
			return fmt.Errorf("the signature does not cover %q", h)
		}
	}
	date, err := http.ParseTime(r.Header.Get("Date"))
	if err != nil {
		return fmt.Errorf("date %q: %v", r.Header.Get("Date"), err)
	}
	if d := now.Sub(date); d > 5*time.Minute || d < -5*time.Minute {
		return fmt.Errorf("the request's date %s is more than 5 minutes from now", r.Header.Get("Date"))
	}
	lines := make([]string, len(headers))
	for i, h := range headers {
		var v string
		switch h {
		case "(request-target)":
			v = strings.ToLower(r.Method) + " " + r.URL.RequestURI()
		case "host":
			v = r.Host
		case "content-length":
			v = r.Header.Get("Content-Length")
			if v == "" {
				v = fmt.Sprint(len(body))
			}
		default:
			v = r.Header.Get(h)
		}
		lines[i] = h + ": " + v
	}
	sig, err := base64.StdEncoding.DecodeString(params["signature"])
	if err != nil {
		return errors.New("the signature is not base64")
	}
	hashed := sha256.Sum256([]byte(strings.Join(lines, "\n")))
	if err := rsa.VerifyPKCS1v15(pub, crypto.SHA256, hashed[:], sig); err != nil {
		return errors.New("the signature does not verify with the key")
	}
	return nil
}

// splitParams splits k="v",k="v" on the commas outside quotes.
func splitParams(s string) []string {
	var out []string
	var cur strings.Builder
	inQuote := false
	for _, c := range s {
		switch {
		case c == '"':
			inQuote = !inQuote
			cur.WriteRune(c)
		case c == ',' && !inQuote:
			out = append(out, cur.String())
			cur.Reset()
		default:
			cur.WriteRune(c)
		}
	}
	if cur.Len() > 0 {
		out = append(out, cur.String())
	}
	return out
}
