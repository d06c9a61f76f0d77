package devmode

import (
	"net"
	"net/url"
)

// transportNote is the banner's TLS line: dev serves plaintext, which is
// fine on loopback only.
func transportNote(apiURL string) string {
	u, err := url.Parse(apiURL)
	if err == nil {
		if ip := net.ParseIP(u.Hostname()); (ip != nil && ip.IsLoopback()) || u.Hostname() == "localhost" {
			return "off: plaintext (loopback only)"
		}
	}
	return "off: plaintext, and NOT on loopback: anyone on the network can read the API and its tokens (use 'norsk-manager run' for TLS)"
}
