package mock

import (
	"strings"
	"testing"
)

func TestConfigWithDefaults(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		err  string
	}{
		{"no hosts", Config{}, "give at least one mock host"},
		{"not a URL", Config{Hosts: []string{"host:7101"}}, "is not http(s)://host:port"},
		{"twice", Config{Hosts: []string{"http://a:1", "http://a:1/"}}, "listed twice"},
		{"empty pool", Config{Hosts: []string{"http://a:1"}, Pools: []string{""}}, "empty pool"},
		{"ok", Config{Hosts: []string{"http://a:1/"}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.cfg.WithDefaults()
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Hosts[0] != "http://a:1" || got.Pools[0] != DefaultPool || got.VCPUs != DefaultVCPUs || got.StartTimeout != DefaultStartTimeout || !got.Serves(DefaultPool) || got.Serves("x") {
				t.Errorf("defaults = %+v", got)
			}
		})
	}
}
