package providers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/norsk-go/norsk-manager/internal/clock"
)

// Defaults of RegistryConfig.
const (
	DefaultCatalogRefresh = time.Hour
	// catalogRetry is how soon a failed warm-up of the instance-type cache
	// is tried again.
	catalogRetry = 10 * time.Second
)

// RegistryConfig configures a Registry.
type RegistryConfig struct {
	// Providers are the providers this member runs (at most one per name).
	Providers []Provider
	// OverridesFile is the overrides file ("" = none: the cloud providers
	// run no region).
	OverridesFile string
	// CatalogRefresh is how often the instance-type cache is refreshed
	// (default 1 h).
	CatalogRefresh time.Duration
	Clock          clock.Clock
	Logger         *slog.Logger
}

// Registry is the providers a member runs, the overrides file in force and
// the instance-type cache. It is safe for concurrent use.
type Registry struct {
	cfg   RegistryConfig
	log   *slog.Logger
	byNam map[string]Provider
	names []string
	types *TypeCache

	mu        sync.RWMutex
	overrides *Overrides
	// reloadMu serialises reloads.
	reloadMu sync.Mutex
	// kick asks the cache loop to refresh now (after a reload).
	kick chan struct{}
}

// NewRegistry builds a registry and loads the overrides file (an invalid
// one is an error: the member does not start on it).
func NewRegistry(cfg RegistryConfig) (*Registry, error) {
	if cfg.CatalogRefresh <= 0 {
		cfg.CatalogRefresh = DefaultCatalogRefresh
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	r := &Registry{cfg: cfg, log: cfg.Logger.With("component", "providers"), byNam: map[string]Provider{}, kick: make(chan struct{}, 1)}
	for _, p := range cfg.Providers {
		if p == nil {
			continue
		}
		if _, dup := r.byNam[p.Name()]; dup {
			return nil, fmt.Errorf("providers: %s is configured twice", p.Name())
		}
		r.byNam[p.Name()] = p
		r.names = append(r.names, p.Name())
	}
	sort.Strings(r.names)
	r.types = newTypeCache(r)
	if cfg.OverridesFile != "" {
		o, err := LoadOverrides(cfg.OverridesFile)
		if err != nil {
			return nil, err
		}
		if err := r.apply(o); err != nil {
			return nil, err
		}
	} else if r.hasCatalog() {
		r.log.Warn("no overrides file (providers.overridesFile): the cloud providers run no region until one is given")
	}
	return r, nil
}

func (r *Registry) hasCatalog() bool {
	for _, p := range r.byNam {
		if _, ok := p.(Catalog); ok {
			return true
		}
	}
	return false
}

// Empty reports whether the registry holds no provider.
func (r *Registry) Empty() bool { return r == nil || len(r.byNam) == 0 }

// Names are the providers' names, sorted.
func (r *Registry) Names() []string {
	if r == nil {
		return nil
	}
	return append([]string(nil), r.names...)
}

// Provider returns the provider named name.
func (r *Registry) Provider(name string) (Provider, bool) {
	if r == nil {
		return nil, false
	}
	p, ok := r.byNam[name]
	return p, ok
}

// Overrides is the overrides file in force (nil: none).
func (r *Registry) Overrides() *Overrides {
	if r == nil {
		return nil
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.overrides
}

// Types is the instance-type cache.
func (r *Registry) Types() *TypeCache { return r.types }

// apply hands o to every provider that takes it, then puts it in force. A
// provider that refuses it leaves the providers already given it with it:
// callers validate first (ParseOverrides), so a refusal here is a
// provider's own failure (e.g. building a region's client) and is
// reported.
func (r *Registry) apply(o *Overrides) error {
	var errs []error
	for _, name := range r.names {
		if rp, ok := r.byNam[name].(Reloadable); ok {
			if err := rp.ApplyOverrides(o); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", name, err))
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	r.mu.Lock()
	r.overrides = o
	r.mu.Unlock()
	return nil
}

// ReloadResult is what a reload did.
type ReloadResult struct {
	Path    string
	Digest  string
	Changes []string
}

// ErrNoOverridesFile: the member was started without an overrides file.
var ErrNoOverridesFile = errors.New("no overrides file is configured (providers.overridesFile in config.yaml)")

// Reload re-reads the overrides file and applies it to the running
// providers. A file that does not parse or validate is refused with the
// error and the old one stays in force.
func (r *Registry) Reload() (ReloadResult, error) {
	if r == nil || r.cfg.OverridesFile == "" {
		return ReloadResult{}, ErrNoOverridesFile
	}
	r.reloadMu.Lock()
	defer r.reloadMu.Unlock()
	o, err := LoadOverrides(r.cfg.OverridesFile)
	if err != nil {
		return ReloadResult{Path: r.cfg.OverridesFile}, err
	}
	old := r.Overrides()
	res := ReloadResult{Path: o.Path, Digest: o.Digest, Changes: o.Diff(old)}
	if err := r.apply(o); err != nil {
		// Put the old file back into the providers that took the new one.
		if old != nil {
			_ = r.apply(old)
		}
		return res, fmt.Errorf("apply the overrides file: %w", err)
	}
	r.log.Info("overrides file reloaded", "file", o.Path, "digest", o.Digest, "changes", len(res.Changes))
	select {
	case r.kick <- struct{}{}:
	default:
	}
	return res, nil
}

// Run keeps the instance-type cache warm until ctx ends: it loads it at
// once, then refreshes every CatalogRefresh (and after a reload); a
// provider whose load failed is tried again sooner.
func (r *Registry) Run(ctx context.Context) {
	if r == nil || !r.hasCatalog() {
		return
	}
	clk := r.cfg.Clock
	for {
		failed := r.types.refreshAll(ctx)
		wait := r.cfg.CatalogRefresh
		if failed {
			wait = min(wait, catalogRetry)
		}
		t := clk.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-r.kick:
			t.Stop()
		case <-t.C():
		}
	}
}

// CloudFactory builds a cloud provider from its configuration (the
// provider package's Config, by pointer).
type CloudFactory func(cfg any, log *slog.Logger) (Provider, error)

var (
	factoriesMu sync.Mutex
	factories   = map[string]CloudFactory{}
)

// RegisterCloud makes a cloud provider available to BuildCloud; the
// provider packages (internal/providers/aws, …/oci) call it from init, so
// a binary has the clouds whose packages it links. Registering a name twice
// panics.
func RegisterCloud(name string, f CloudFactory) {
	factoriesMu.Lock()
	defer factoriesMu.Unlock()
	if _, dup := factories[name]; dup {
		panic("providers: cloud " + name + " registered twice")
	}
	factories[name] = f
}

// BuildCloud builds the cloud provider name from cfg.
func BuildCloud(name string, cfg any, log *slog.Logger) (Provider, error) {
	factoriesMu.Lock()
	f, ok := factories[name]
	factoriesMu.Unlock()
	if !ok {
		return nil, fmt.Errorf("providers.%s: this binary has no %s provider (it links internal/providers/%s)", name, name, name)
	}
	return f(cfg, log)
}
