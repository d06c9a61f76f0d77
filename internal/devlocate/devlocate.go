// Package devlocate is how norsk-ctl finds the admin token of a
// `norsk-manager dev` on this machine without being told where it is.
//
// A dev keeps its admin token in its data directory (admin.token, mode
// 0600). While it runs it also records, in a well-known directory of the
// user's (Dir: $XDG_DATA_HOME/norsk-manager/dev-servers, by default
// ~/.local/share/norsk-manager/dev-servers), one small file per loopback
// port it serves: the URL and the path of its token file (never the token
// itself). norsk-ctl, given a loopback URL and no token, looks the port up
// there (TokenFileFor), so a dev on any --listen port and any --data-dir
// (an --ephemeral one's temporary directory too) is found; the record goes
// when the dev stops.
//
// Nothing here is trusted beyond this user's own files: the records are
// written 0600 in a 0700 directory, and a record only ever names a file the
// user can read anyway.
package devlocate

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
)

// DefaultPort is the port of the default Manager URL, http://127.0.0.1:6790.
const DefaultPort = "6790"

// TokenFileName is the name of dev's admin token in its data directory.
const TokenFileName = "admin.token"

// record is what a running dev writes for one port.
type record struct {
	URL       string `json:"url"`
	TokenFile string `json:"tokenFile"`
	PID       int    `json:"pid"`
}

// dataHome is $XDG_DATA_HOME, else ~/.local/share ("" when neither is
// known).
func dataHome() string {
	if base := os.Getenv("XDG_DATA_HOME"); base != "" {
		return base
	}
	home, err := os.UserHomeDir()
	if err != nil || home == "" {
		return ""
	}
	return filepath.Join(home, ".local", "share")
}

// Dir is the directory of the records of running devs ("" when the user
// has no home directory and no XDG_DATA_HOME).
func Dir() string {
	base := dataHome()
	if base == "" {
		return ""
	}
	return filepath.Join(base, "norsk-manager", "dev-servers")
}

// DefaultTokenFile is the token file of a dev with the default data
// directory ("" when the user has no home directory and no XDG_DATA_HOME).
func DefaultTokenFile() string {
	base := dataHome()
	if base == "" {
		return ""
	}
	return filepath.Join(base, "norsk-manager", "dev", TokenFileName)
}

// Record notes that the dev serving url (a loopback http:// URL) keeps its
// admin token in tokenFile, and returns the function that removes the
// record again (call it when the dev stops). A url that is not on loopback
// is not recorded (norsk-ctl finds tokens only for local Managers).
func Record(serveURL, tokenFile string) (remove func(), err error) {
	port, ok := localPort(serveURL)
	if !ok {
		return func() {}, nil
	}
	dir := Dir()
	if dir == "" {
		return func() {}, errors.New("record the dev Manager's address: no home directory and no XDG_DATA_HOME")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return func() {}, fmt.Errorf("record the dev Manager's address: %w", err)
	}
	abs, err := filepath.Abs(tokenFile)
	if err != nil {
		return func() {}, fmt.Errorf("record the dev Manager's address: %w", err)
	}
	b, err := json.Marshal(record{URL: serveURL, TokenFile: abs, PID: os.Getpid()})
	if err != nil {
		return func() {}, err
	}
	path := filepath.Join(dir, port+".json")
	tmp := path + fmt.Sprintf(".%d.tmp", os.Getpid())
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return func() {}, fmt.Errorf("record the dev Manager's address: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return func() {}, fmt.Errorf("record the dev Manager's address: %w", err)
	}
	return func() {
		// Only this dev's own record: another may have the port since.
		if r, err := read(path); err == nil && r.PID == os.Getpid() {
			_ = os.Remove(path)
		}
	}, nil
}

func read(path string) (record, error) {
	var r record
	b, err := os.ReadFile(path)
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("%s: %w", path, err)
	}
	return r, nil
}

// TokenFileFor returns the token file of the dev serving managerURL (the
// first of a comma-separated list; host:port, http://… or https://…): the
// one a running dev recorded for the URL's port when the URL is on this
// machine's loopback, else — for the default URL — the default data
// directory's. ok is false when there is none (or the file it names is
// gone).
func TokenFileFor(managerURL string) (path string, ok bool) {
	port, local := localPort(managerURL)
	if !local {
		return "", false
	}
	if dir := Dir(); dir != "" {
		if r, err := read(filepath.Join(dir, port+".json")); err == nil && r.TokenFile != "" {
			if _, err := os.Stat(r.TokenFile); err == nil {
				return r.TokenFile, true
			}
		}
	}
	if port == DefaultPort {
		if p := DefaultTokenFile(); p != "" {
			if _, err := os.Stat(p); err == nil {
				return p, true
			}
		}
	}
	return "", false
}

// localPort returns the port of a URL that names this machine (localhost,
// a loopback or an unspecified address); ok is false for any other host.
func localPort(raw string) (port string, ok bool) {
	raw = strings.TrimSpace(strings.Split(raw, ",")[0])
	if raw == "" {
		return "", false
	}
	if !strings.Contains(raw, "://") {
		raw = "http://" + raw
	}
	u, err := url.Parse(raw)
	if err != nil || u.Hostname() == "" {
		return "", false
	}
	port = u.Port()
	if port == "" {
		switch u.Scheme {
		case "http":
			port = "80"
		case "https":
			port = "443"
		default:
			return "", false
		}
	}
	host := u.Hostname()
	if strings.EqualFold(host, "localhost") {
		return port, true
	}
	ip := net.ParseIP(host)
	return port, ip != nil && (ip.IsLoopback() || ip.IsUnspecified())
}
