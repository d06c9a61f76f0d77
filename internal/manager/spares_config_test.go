package manager

import (
	"strings"
	"testing"

	"github.com/norsk-go/norsk-manager/internal/automanager"
	"github.com/norsk-go/norsk-manager/internal/providers/cloudconf"
	"github.com/norsk-go/norsk-manager/internal/providers/mock"
)

// A spares section the providers cannot honour is refused at start, naming
// the field; one they can is taken.
func TestCheckSpares(t *testing.T) {
	t.Parallel()
	aws := &cloudconf.AWS{Pools: map[string]cloudconf.AWSPool{"burst": {Regions: []string{"eu-west-1"}, InstanceTypes: []string{"c6i.large", "c6i.xlarge"}}}}
	mockP := &mock.Config{Pools: []string{"local"}}
	cases := []struct {
		name    string
		cfg     Config
		spares  map[string]automanager.SpareSpec
		wantErr string
	}{
		{name: "cloud tier, listed type", cfg: Config{AWS: aws}, spares: map[string]automanager.SpareSpec{"burst": {Count: 2, InstanceType: "c6i.xlarge"}}},
		{name: "cloud tier, cheapest", cfg: Config{AWS: aws}, spares: map[string]automanager.SpareSpec{"burst": {Count: 2}}},
		{name: "mock tier", cfg: Config{MockProvider: mockP}, spares: map[string]automanager.SpareSpec{"local": {Count: 1}}},
		{name: "type not listed", cfg: Config{AWS: aws}, spares: map[string]automanager.SpareSpec{"burst": {Count: 1, InstanceType: "m7i.large"}},
			wantErr: `spares.burst.instanceType: "m7i.large" is not one of the tier's instance types (c6i.large, c6i.xlarge)`},
		{name: "type on a mock tier", cfg: Config{MockProvider: mockP}, spares: map[string]automanager.SpareSpec{"local": {Count: 1, InstanceType: "c6i.large"}},
			wantErr: "spares.local.instanceType"},
		{name: "unknown tier", cfg: Config{AWS: aws, MockProvider: mockP}, spares: map[string]automanager.SpareSpec{"nope": {Count: 1}},
			wantErr: "spares.nope: not an elastic tier (the providers create nodes in burst, local)"},
		{name: "no provider", spares: map[string]automanager.SpareSpec{"burst": {Count: 1}}, wantErr: "spares.burst: no provider creates nodes"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := tc.cfg
			c.Spares = tc.spares
			err := c.checkSpares()
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want %q", err, tc.wantErr)
			}
		})
	}
}
