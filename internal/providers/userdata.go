package providers

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// UserDataHeader is the first line of a worker's user data.
const UserDataHeader = "#norsk-worker"

// MaxUserData bounds user data (EC2 takes 16 KiB before base64; OCI 32 KB).
const MaxUserData = 16 << 10

// UserData is what a cloud node's instance boots its worker from: the
// instance's user data, a header line and one JSON object:
//
//	#norsk-worker
//	{"nodeId":"aws-1a2b","managerUrls":["https://mgr-1:6790"],"token":"nrt_…","caHash":"sha256:…"}
//
// The worker image runs `norsk-ctl worker --user-data <file>` on cloud-init's
// copy (/var/lib/cloud/instance/user-data.txt), which registers with the
// one-shot token at whichever member answers. The token is worth nothing
// once used, and the CA pin lets the worker verify the Manager.
type UserData struct {
	NodeID      string   `json:"nodeId"`
	ManagerURLs []string `json:"managerUrls"`
	Token       string   `json:"token"`
	CAHash      string   `json:"caHash,omitempty"`
	// Listen is where the worker serves its NodeController stream (""
	// = the worker's default for a cloud instance, 0.0.0.0:6791).
	Listen string `json:"listen,omitempty"`
}

// Encode renders the user data.
func (u UserData) Encode() []byte {
	b, _ := json.Marshal(u) // strings and a slice of strings: cannot fail
	return append([]byte(UserDataHeader+"\n"), append(b, '\n')...)
}

// DecodeUserData parses and checks a worker's user data.
//
// Trailing NUL bytes are ignored: a microVM's raw first-boot disk
// (/dev/vdb) is the user data padded with NULs to whole sectors.
func DecodeUserData(b []byte) (UserData, error) {
	var u UserData
	b = bytes.TrimRight(b, "\x00")
	if len(b) > MaxUserData {
		return u, fmt.Errorf("user data: %d bytes is more than %d", len(b), MaxUserData)
	}
	first, rest, _ := bytes.Cut(b, []byte("\n"))
	if strings.TrimSpace(string(first)) != UserDataHeader {
		return u, fmt.Errorf("user data: the first line is not %q: this is not a Norsk worker's user data", UserDataHeader)
	}
	dec := json.NewDecoder(bytes.NewReader(rest))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&u); err != nil {
		return UserData{}, fmt.Errorf("user data: %w", err)
	}
	if dec.More() {
		return UserData{}, errors.New("user data: more than one JSON object")
	}
	return u, u.validate()
}

func (u UserData) validate() error {
	switch {
	case u.NodeID == "":
		return errors.New("user data: nodeId is empty")
	case u.Token == "":
		return errors.New("user data: token is empty")
	case len(u.ManagerURLs) == 0:
		return errors.New("user data: managerUrls is empty")
	}
	for i, s := range u.ManagerURLs {
		p, err := url.Parse(s)
		if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			return fmt.Errorf("user data: managerUrls[%d] %q is not an http(s) URL", i, s)
		}
	}
	return nil
}
