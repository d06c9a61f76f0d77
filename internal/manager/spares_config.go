package manager

import (
	"fmt"
	"slices"
	"strings"
)

// checkSpares refuses, at start, a spares section the configured providers
// cannot honour: a tier no provider creates nodes in, or an instance type
// the tier does not list (a mock tier lists none). Whether a listed type is
// offered in a region the tier runs is known only once the instance-type
// cache has it; the AutoManager says so when it cannot make a spare.
func (c *Config) checkSpares() error {
	tiers := c.configuredElasticTiers()
	for _, tier := range sortedKeysOf(c.Spares) {
		sp := c.Spares[tier]
		types, ok := tiers[tier]
		if !ok {
			names := sortedKeysOf(tiers)
			if len(names) == 0 {
				return fmt.Errorf("manager: spares.%s: no provider creates nodes (configure the mock provider or a cloud's pools first)", tier)
			}
			return fmt.Errorf("manager: spares.%s: not an elastic tier (the providers create nodes in %s)", tier, strings.Join(names, ", "))
		}
		if sp.InstanceType == "" || slices.Contains(types, sp.InstanceType) {
			continue
		}
		if len(types) == 0 {
			return fmt.Errorf("manager: spares.%s.instanceType: %q, but the tier's provider has no instance types (leave it empty)", tier, sp.InstanceType)
		}
		return fmt.Errorf("manager: spares.%s.instanceType: %q is not one of the tier's instance types (%s)", tier, sp.InstanceType, strings.Join(types, ", "))
	}
	return nil
}

// configuredElasticTiers maps each tier a configured provider creates nodes
// in to the instance types its configuration lists, cheapest first.
func (c *Config) configuredElasticTiers() map[string][]string {
	out := map[string][]string{}
	if c.MockProvider != nil {
		for _, p := range c.MockProvider.Pools {
			out[p] = nil
		}
	}
	if c.AWS != nil {
		for tier, p := range c.AWS.Pools {
			out[tier] = append(out[tier], p.InstanceTypes...)
		}
	}
	if c.OCI != nil {
		for tier, p := range c.OCI.Pools {
			out[tier] = append(out[tier], p.Shapes...)
		}
	}
	if c.CloudHypervisor != nil {
		for tier, p := range c.CloudHypervisor.Pools {
			out[tier] = append(out[tier], p.Shapes...)
		}
	}
	return out
}
