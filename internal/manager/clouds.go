package manager

import (
	"fmt"
	"log/slog"
	"slices"
	"sort"

	"github.com/norsk-go/norsk-manager/internal/automanager"
	"github.com/norsk-go/norsk-manager/internal/providers"
	"github.com/norsk-go/norsk-manager/internal/providers/cloudconf"
	"github.com/norsk-go/norsk-manager/internal/providers/cloudhypervisor"
)

// The cloud providers' RPCs: thin handlers over the fleet
// (internal/providers), which checks, creates and answers from the
// instance-type cache.

// buildClouds makes the cloud providers the configuration names.
func (c *Config) buildClouds(log *slog.Logger) ([]providers.Provider, error) {
	var out []providers.Provider
	if c.AWS != nil {
		p, err := providers.BuildCloud(cloudconf.AWSName, c.AWS, log)
		if err != nil {
			return nil, fmt.Errorf("manager: %w", err)
		}
		out = append(out, p)
	}
	if c.OCI != nil {
		p, err := providers.BuildCloud(cloudconf.OCIName, c.OCI, log)
		if err != nil {
			return nil, fmt.Errorf("manager: %w", err)
		}
		out = append(out, p)
	}
	if c.CloudHypervisor != nil {
		p, err := cloudhypervisor.New(*c.CloudHypervisor, nil, log)
		if err != nil {
			return nil, fmt.Errorf("manager: %w", err)
		}
		out = append(out, p)
	}
	return out, nil
}

// cloudTiers are the elastic tiers of the cloud providers' pools, each
// with the instance types the cache knows in the regions the overrides
// file runs, cheapest (as listed) first.
func (s *Server) cloudTiers() []automanager.ElasticTier {
	reg := s.fleet.Registry()
	types, o := reg.Types(), reg.Overrides()
	var out []automanager.ElasticTier
	if a := s.cfg.AWS; a != nil {
		for _, tier := range sortedKeysOf(a.Pools) {
			pc := a.Pools[tier]
			et := automanager.ElasticTier{Tier: tier, Provider: cloudconf.AWSName}
			for _, region := range pc.Regions {
				if !o.RunsRegion(cloudconf.AWSName, region) {
					continue
				}
				zones := pc.Zones
				if len(zones) == 0 {
					zones = []string{""}
				}
				var offered []providers.InstanceType
				for _, name := range pc.InstanceTypes {
					if it, ok, err := types.Type(cloudconf.AWSName, region, name); err == nil && ok && len(it.Regions) > 0 {
						offered = append(offered, it)
					}
				}
				et.Types = append(et.Types, typeLadder(offered, zones, region, func(t *automanager.ElasticType) {
					t.SecurityGroups, t.Subnet = pc.SecurityGroups, pc.Subnet
				})...)
			}
			out = append(out, et)
		}
	}
	if c := s.cfg.OCI; c != nil {
		for _, tier := range sortedKeysOf(c.Pools) {
			pc := c.Pools[tier]
			et := automanager.ElasticTier{Tier: tier, Provider: cloudconf.OCIName}
			for _, region := range pc.Regions {
				if !o.RunsRegion(cloudconf.OCIName, region) {
					continue
				}
				ads := pc.AvailabilityDomains
				if len(ads) == 0 {
					ads, _ = types.Locations(cloudconf.OCIName, region)
				}
				var offered []providers.InstanceType
				for _, name := range pc.Shapes {
					if it, ok, err := types.Type(cloudconf.OCIName, region, name); err == nil && ok {
						offered = append(offered, it)
					}
				}
				et.Types = append(et.Types, typeLadder(offered, ads, region, func(t *automanager.ElasticType) {
					t.Subnet, t.OCPUs, t.MemoryGBs = pc.Subnet, pc.OCPUs, pc.MemoryGBs
				})...)
			}
			out = append(out, et)
		}
	}
	out = append(out, s.hypervisorTiers()...)
	return out
}

// hypervisorTiers are the cloud-hypervisor pools' tiers: each host's
// shapes (smallest first, as the pool lists them), a shape on a host with
// no room for it marked so (job why says it).
func (s *Server) hypervisorTiers() []automanager.ElasticTier {
	c := s.cfg.CloudHypervisor
	if c == nil {
		return nil
	}
	reg := s.fleet.Registry()
	pp, ok := reg.Provider(cloudconf.CloudHypervisorName)
	if !ok {
		return nil
	}
	prov := pp.(*cloudhypervisor.Provider)
	types, o := reg.Types(), reg.Overrides()
	var out []automanager.ElasticTier
	for _, tier := range sortedKeysOf(c.Pools) {
		pc := c.Pools[tier]
		et := automanager.ElasticTier{Tier: tier, Provider: cloudconf.CloudHypervisorName}
		hosts := pc.Hosts
		if len(hosts) == 0 {
			hosts = o.Regions(cloudconf.CloudHypervisorName)
		}
		for _, name := range pc.Shapes {
			for _, host := range hosts {
				if !o.RunsRegion(cloudconf.CloudHypervisorName, host) {
					continue
				}
				it, found, err := types.Type(cloudconf.CloudHypervisorName, host, name)
				if err != nil || !found {
					continue
				}
				et.Types = append(et.Types, automanager.ElasticType{Name: it.Name, VCPUs: it.VCPUs, Region: host, Zone: host,
					Unavailable: prov.OutOfRoom(host, it.VCPUs, it.MemoryBytes, it.GPUs)})
			}
		}
		out = append(out, et)
	}
	return out
}

// typeLadder is one region's types of a tier, cheapest first, each in the
// first zone offering it, with every later (type, zone) as its fallbacks.
func typeLadder(offered []providers.InstanceType, zones []string, region string, set func(*automanager.ElasticType)) []automanager.ElasticType {
	type step struct {
		it   providers.InstanceType
		zone string
	}
	var steps []step
	for _, it := range offered {
		for _, z := range zones {
			if z == "" || slices.Contains(it.Regions, z) || slices.Contains(it.Regions, region) {
				steps = append(steps, step{it, z})
			}
		}
	}
	var out []automanager.ElasticType
	seen := map[string]bool{}
	for i, st := range steps {
		if seen[st.it.Name] {
			continue // a type's first zone; the others are fallbacks
		}
		seen[st.it.Name] = true
		t := automanager.ElasticType{Name: st.it.Name, VCPUs: st.it.VCPUs, Region: region, Zone: st.zone}
		for _, next := range steps[i+1:] {
			fb := next.it.Name
			if next.zone != "" {
				fb += "@" + next.zone
			}
			t.Fallbacks = append(t.Fallbacks, fb)
		}
		set(&t)
		out = append(out, t)
	}
	return out
}

func sortedKeysOf[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
