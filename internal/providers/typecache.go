package providers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// Errors of the instance-type cache.
var (
	// ErrNotRun: the Manager runs no such provider (or it has no instance
	// types, as the mock provider).
	ErrNotRun = errors.New("provider not run")
	// ErrNotWarm: the cache has not loaded the provider's types yet.
	ErrNotWarm = errors.New("instance-type cache not warm yet")
)

// TypeCache is the instance-type cache: every Catalog provider's instance
// types by region, loaded at start and refreshed periodically (Registry.Run).
// Reads never call the cloud. It is safe for concurrent use.
type TypeCache struct {
	reg *Registry
	mu  sync.RWMutex
	by  map[string]*providerTypes
}

// providerTypes is one provider's types.
type providerTypes struct {
	// regions maps each catalog region to its types and the locations
	// (regions; OCI availability domains) queries name.
	regions map[string]regionTypes
	loaded  time.Time
	err     error
}

type regionTypes struct {
	types     map[string]InstanceType
	locations []string
}

func newTypeCache(r *Registry) *TypeCache {
	return &TypeCache{reg: r, by: map[string]*providerTypes{}}
}

// refreshAll loads every Catalog provider's types for every region it runs;
// it reports whether any failed.
func (c *TypeCache) refreshAll(ctx context.Context) (failed bool) {
	for _, name := range c.reg.Names() {
		p, _ := c.reg.Provider(name)
		cat, ok := p.(Catalog)
		if !ok {
			continue
		}
		if err := c.Refresh(ctx, name, cat); err != nil {
			failed = true
			c.reg.log.Warn("instance-type cache: load failed; trying again soon", "provider", name, "err", err)
		}
	}
	return failed
}

// Refresh loads provider's types for every region it runs now. Regions
// that fail keep what was loaded before; the error names them.
func (c *TypeCache) Refresh(ctx context.Context, provider string, cat Catalog) error {
	c.mu.RLock()
	prev := c.by[provider]
	c.mu.RUnlock()
	next := &providerTypes{regions: map[string]regionTypes{}, loaded: c.reg.cfg.Clock.Now()}
	var errs []error
	for _, region := range cat.Regions() {
		cctx, cancel := context.WithTimeout(ctx, time.Minute)
		types, locs, err := cat.InstanceTypes(cctx, region)
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", region, err))
			if prev != nil {
				if old, ok := prev.regions[region]; ok {
					next.regions[region] = old
				}
			}
			continue
		}
		rt := regionTypes{types: make(map[string]InstanceType, len(types)), locations: append([]string(nil), locs...)}
		for _, t := range types {
			rt.types[t.Name] = t
		}
		next.regions[region] = rt
	}
	next.err = errors.Join(errs...)
	c.mu.Lock()
	c.by[provider] = next
	c.mu.Unlock()
	return next.err
}

// Describe is DescribeInstanceType: the type's facts across the regions
// the provider runs (Regions: the locations offering it), whether it is
// offered in location (when given: a region, or an OCI availability
// domain), and found=false for a type the provider does not know.
// Errors: ErrNotRun, ErrNoRegion (a location the provider does not run),
// ErrNotWarm.
func (c *TypeCache) Describe(provider, typ, location string) (t InstanceType, found, offered bool, err error) {
	pt, err := c.warm(provider)
	if err != nil {
		return InstanceType{}, false, false, err
	}
	if location != "" && !pt.hasLocation(location) {
		return InstanceType{}, false, false, fmt.Errorf("%w: %s %q (it runs %s)", ErrNoRegion, provider, location, strings.Join(pt.allLocations(), ", "))
	}
	var merged InstanceType
	for _, region := range sortedRegions(pt.regions) {
		it, ok := pt.regions[region].types[typ]
		if !ok {
			continue
		}
		if !found {
			merged = it
			merged.Regions = nil
			found = true
		}
		merged.Regions = append(merged.Regions, it.Regions...)
	}
	if !found {
		return InstanceType{}, false, false, nil
	}
	sort.Strings(merged.Regions)
	merged.Regions = slices.Compact(merged.Regions)
	if location != "" {
		offered = slices.Contains(merged.Regions, location)
	}
	return merged, true, offered, nil
}

// Locations are the locations (regions; OCI availability domains) of the
// provider's catalog region, or of every region it runs with region "".
func (c *TypeCache) Locations(provider, region string) ([]string, error) {
	pt, err := c.warm(provider)
	if err != nil {
		return nil, err
	}
	if region == "" {
		return pt.allLocations(), nil
	}
	rt, ok := pt.regions[region]
	if !ok {
		return nil, fmt.Errorf("%w: %s region %q", ErrNoRegion, provider, region)
	}
	return append([]string(nil), rt.locations...), nil
}

// RegionOf is the catalog region a location belongs to (an OCI
// availability domain's region; an AWS region is its own).
func (c *TypeCache) RegionOf(provider, location string) (string, error) {
	pt, err := c.warm(provider)
	if err != nil {
		return "", err
	}
	for _, region := range sortedRegions(pt.regions) {
		if slices.Contains(pt.regions[region].locations, location) {
			return region, nil
		}
	}
	return "", fmt.Errorf("%w: %s %q (it runs %s)", ErrNoRegion, provider, location, strings.Join(pt.allLocations(), ", "))
}

// Type is one type's facts in a catalog region (found=false when the
// region does not offer it).
func (c *TypeCache) Type(provider, region, typ string) (InstanceType, bool, error) {
	pt, err := c.warm(provider)
	if err != nil {
		return InstanceType{}, false, err
	}
	rt, ok := pt.regions[region]
	if !ok {
		return InstanceType{}, false, fmt.Errorf("%w: %s region %q", ErrNoRegion, provider, region)
	}
	it, ok := rt.types[typ]
	return it, ok, nil
}

// Warm reports whether the provider's types have been loaded.
func (c *TypeCache) Warm(provider string) bool {
	_, err := c.warm(provider)
	return err == nil
}

func (c *TypeCache) warm(provider string) (*providerTypes, error) {
	p, ok := c.reg.Provider(provider)
	if !ok {
		return nil, fmt.Errorf("%w: the Manager runs no %q provider (it runs %s)", ErrNotRun, provider, orNone(c.reg.Names()))
	}
	if _, ok := p.(Catalog); !ok {
		return nil, fmt.Errorf("%w: provider %q has no instance types", ErrNotRun, provider)
	}
	c.mu.RLock()
	pt := c.by[provider]
	c.mu.RUnlock()
	if pt == nil || len(pt.regions) == 0 {
		if pt != nil && pt.err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrNotWarm, provider, pt.err)
		}
		if len(c.reg.Overrides().Regions(provider)) == 0 {
			return nil, fmt.Errorf("%w: the overrides file names no %s region", ErrNoRegion, provider)
		}
		return nil, fmt.Errorf("%w: %s's instance types are still loading", ErrNotWarm, provider)
	}
	return pt, nil
}

func (pt *providerTypes) hasLocation(loc string) bool {
	for _, rt := range pt.regions {
		if slices.Contains(rt.locations, loc) {
			return true
		}
	}
	return false
}

func (pt *providerTypes) allLocations() []string {
	var out []string
	for _, rt := range pt.regions {
		out = append(out, rt.locations...)
	}
	sort.Strings(out)
	return slices.Compact(out)
}

func sortedRegions(m map[string]regionTypes) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

// TypesIn are the types a catalog region offers (none when the cache has
// not loaded it), by name.
func (c *TypeCache) TypesIn(provider, region string) []InstanceType {
	pt, err := c.warm(provider)
	if err != nil {
		return nil
	}
	rt, ok := pt.regions[region]
	if !ok {
		return nil
	}
	out := make([]InstanceType, 0, len(rt.types))
	for _, t := range rt.types {
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
