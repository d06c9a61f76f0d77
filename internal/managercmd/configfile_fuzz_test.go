package managercmd

import (
	"testing"

	"github.com/norsk-go/norsk-manager/internal/manager"
)

// FuzzParseConfigFile: any bytes as a config.yaml either decode or are
// refused; they never panic, and what decodes applies to a Config.
func FuzzParseConfigFile(f *testing.F) {
	for _, seed := range []string{
		"nodeName: m1\ndataDir: /var/lib/norsk\nlisten: 127.0.0.1:6790\n",
		"lostGrace: 20s\nbackupInterval: -1s\nbackupRetain: 3\n",
		"tls: on\ntlsCertFile: /a\n",
		"clusterNodes:\n- {name: m1, raft: 'm1:6792', api: 'http://m1:6790'}\n- {name: w1, raft: 'w1:6792', api: 'http://w1:6790', witness: true}\nclusterSecretFile: /s\n",
		"unknownKey: 1\n",
		"lostGrace: [1, 2]\n",
		"{",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		fc, err := ParseConfigFile(b)
		if err != nil {
			return
		}
		var cfg manager.Config
		fc.Apply(&cfg)
	})
}
