package providers

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"
)

// OverridesVersion is the overrides file format this Manager reads.
const OverridesVersion = 1

// Overrides is the overrides file (config.yaml providers.overridesFile):
// for each cloud provider, the regions the Manager runs and, per region,
// the worker image of each worker version. docs/operations.md documents
// the format:
//
//	version: 1
//	aws:
//	  regions:
//	    eu-west-1:
//	      workerImages:
//	        "1.4.0": ami-0123456789abcdef0
//	oci:
//	  regions:
//	    eu-frankfurt-1:
//	      workerImages:
//	        "1.4.0": ocid1.image.oc1.eu-frankfurt-1.aaaa…
//
// An Overrides is immutable once loaded; Reload replaces it whole.
type Overrides struct {
	Version int `json:"version"`
	// Providers by name (aws, oci).
	Providers map[string]ProviderOverrides `json:"-"`
	// Path and Digest (SHA-256 hex of the file) say where it came from.
	Path   string `json:"-"`
	Digest string `json:"-"`
}

// ProviderOverrides are one provider's regions.
type ProviderOverrides struct {
	Regions map[string]RegionOverrides `json:"regions"`
}

// RegionOverrides is one region's worker image table: worker version →
// image (an AMI id, an OCI image OCID).
type RegionOverrides struct {
	WorkerImages map[string]string `json:"workerImages"`
}

// overridesFile is the file's shape.
type overridesFile struct {
	Version int                `json:"version"`
	AWS     *ProviderOverrides `json:"aws,omitempty"`
	OCI     *ProviderOverrides `json:"oci,omitempty"`
	// CloudHypervisor's regions are its host agents; its images the base
	// images the hosts hold.
	CloudHypervisor *ProviderOverrides `json:"cloudHypervisor,omitempty"`
}

// cloudHypervisor is the cloud-hypervisor provider's name (cloudconf's
// CloudHypervisorName; cloudconf imports this package).
const cloudHypervisor = "cloud-hypervisor"

// Formats of the overrides file's names.
var (
	awsRegionRE  = regexp.MustCompile(`^[a-z]{2}(-[a-z]+)+-[0-9]+$`)
	awsImageRE   = regexp.MustCompile(`^ami-[0-9a-f]{8,17}$`)
	ociRegionRE  = regexp.MustCompile(`^[a-z]{2}-[a-z]+-[0-9]+$`)
	ociImageRE   = regexp.MustCompile(`^ocid1\.image\.[a-z0-9-]+\.[a-z0-9-]*\.[A-Za-z0-9._-]+$`)
	chHostRE     = regexp.MustCompile(`^[a-z0-9]([a-z0-9.-]{0,61}[a-z0-9])?$`)
	chImageRE    = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)
	versionKeyRE = regexp.MustCompile(`^[0-9A-Za-z][0-9A-Za-z.+_-]{0,63}$`)
)

// LoadOverrides reads and validates the overrides file at path.
func LoadOverrides(path string) (*Overrides, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("overrides file: %w", err)
	}
	o, err := ParseOverrides(b)
	if err != nil {
		return nil, fmt.Errorf("overrides file %s: %w", path, err)
	}
	o.Path = path
	return o, nil
}

// ParseOverrides decodes and validates an overrides file's contents; an
// unknown key is an error naming it.
func ParseOverrides(b []byte) (*Overrides, error) {
	var f overridesFile
	if err := yaml.UnmarshalStrict(b, &f); err != nil {
		return nil, err
	}
	if f.Version != OverridesVersion {
		return nil, fmt.Errorf("version: %d is not a format this Manager reads (want version: %d)", f.Version, OverridesVersion)
	}
	sum := sha256.Sum256(b)
	o := &Overrides{Version: f.Version, Providers: map[string]ProviderOverrides{}, Digest: hex.EncodeToString(sum[:])}
	for name, po := range map[string]*ProviderOverrides{"aws": f.AWS, "oci": f.OCI, cloudHypervisor: f.CloudHypervisor} {
		if po == nil {
			continue
		}
		if err := po.validate(name); err != nil {
			return nil, err
		}
		o.Providers[name] = *po
	}
	return o, nil
}

func (po *ProviderOverrides) validate(provider string) error {
	key := provider
	if provider == cloudHypervisor {
		key = "cloudHypervisor"
	}
	regionRE, imageRE, what := awsRegionRE, awsImageRE, "an AMI id (ami-…)"
	switch provider {
	case "oci":
		regionRE, imageRE, what = ociRegionRE, ociImageRE, "an image OCID (ocid1.image.…)"
	case cloudHypervisor:
		regionRE, imageRE, what = chHostRE, chImageRE, "a base image name the host agent lists"
	}
	if len(po.Regions) == 0 {
		return fmt.Errorf("%s.regions: name at least one region (or leave %s out)", key, key)
	}
	for region, ro := range po.Regions {
		where := key + ".regions." + region
		if !regionRE.MatchString(region) {
			if provider == cloudHypervisor {
				return fmt.Errorf("%s: %q is not a host name (a DNS label)", where, region)
			}
			return fmt.Errorf("%s: %q is not a %s region name", where, region, provider)
		}
		if len(ro.WorkerImages) == 0 {
			return fmt.Errorf("%s.workerImages: give the worker image of at least one worker version", where)
		}
		for v, img := range ro.WorkerImages {
			if !versionKeyRE.MatchString(v) {
				return fmt.Errorf("%s.workerImages: %q is not a worker version", where, v)
			}
			if !imageRE.MatchString(img) {
				return fmt.Errorf("%s.workerImages.%s: %q is not %s", where, v, img, what)
			}
		}
	}
	return nil
}

// Regions are the regions the file names for provider, sorted.
func (o *Overrides) Regions(provider string) []string {
	if o == nil {
		return nil
	}
	var out []string
	for r := range o.Providers[provider].Regions {
		out = append(out, r)
	}
	sort.Strings(out)
	return out
}

// RunsRegion reports whether the file names region for provider.
func (o *Overrides) RunsRegion(provider, region string) bool {
	if o == nil {
		return false
	}
	_, ok := o.Providers[provider].Regions[region]
	return ok
}

// ErrNoImage: the overrides file has no worker image for the version.
var ErrNoImage = errors.New("no worker image")

// Image is the worker image of version in provider's region.
func (o *Overrides) Image(provider, region, version string) (string, error) {
	ro, ok := o.regionOf(provider, region)
	if !ok {
		return "", fmt.Errorf("%w: the overrides file names no %s region %q", ErrNoRegion, provider, region)
	}
	if img, ok := ro.WorkerImages[version]; ok {
		return img, nil
	}
	var have []string
	for v := range ro.WorkerImages {
		have = append(have, v)
	}
	sort.Strings(have)
	return "", fmt.Errorf("%w for worker version %s in %s %s (the overrides file has %s)", ErrNoImage, version, provider, region, strings.Join(have, ", "))
}

func (o *Overrides) regionOf(provider, region string) (RegionOverrides, bool) {
	if o == nil {
		return RegionOverrides{}, false
	}
	ro, ok := o.Providers[provider].Regions[region]
	return ro, ok
}

// Diff says what changed from old to o, one line per change, in a stable
// order; none when they say the same.
func (o *Overrides) Diff(old *Overrides) []string {
	var out []string
	names := map[string]bool{}
	for n := range o.providers() {
		names[n] = true
	}
	for n := range old.providers() {
		names[n] = true
	}
	for _, p := range sortedKeys(names) {
		nr, or := o.providers()[p].Regions, old.providers()[p].Regions
		regions := map[string]bool{}
		for r := range nr {
			regions[r] = true
		}
		for r := range or {
			regions[r] = true
		}
		for _, r := range sortedKeys(regions) {
			n, inNew := nr[r]
			was, inOld := or[r]
			switch {
			case inNew && !inOld:
				out = append(out, fmt.Sprintf("%s %s: region added (%d worker images)", p, r, len(n.WorkerImages)))
				continue
			case inOld && !inNew:
				out = append(out, fmt.Sprintf("%s %s: region removed", p, r))
				continue
			}
			versions := map[string]bool{}
			for v := range n.WorkerImages {
				versions[v] = true
			}
			for v := range was.WorkerImages {
				versions[v] = true
			}
			for _, v := range sortedKeys(versions) {
				ni, nok := n.WorkerImages[v]
				oi, ook := was.WorkerImages[v]
				switch {
				case nok && !ook:
					out = append(out, fmt.Sprintf("%s %s: worker image %s = %s added", p, r, v, ni))
				case ook && !nok:
					out = append(out, fmt.Sprintf("%s %s: worker image %s (%s) removed", p, r, v, oi))
				case ni != oi:
					out = append(out, fmt.Sprintf("%s %s: worker image %s changed from %s to %s", p, r, v, oi, ni))
				}
			}
		}
	}
	return out
}

func (o *Overrides) providers() map[string]ProviderOverrides {
	if o == nil {
		return nil
	}
	return o.Providers
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// Marshal renders o as an overrides file (dev mode writes one).
func (o *Overrides) Marshal() ([]byte, error) {
	f := overridesFile{Version: OverridesVersion}
	if po, ok := o.Providers["aws"]; ok {
		f.AWS = &po
	}
	if po, ok := o.Providers["oci"]; ok {
		f.OCI = &po
	}
	if po, ok := o.Providers[cloudHypervisor]; ok {
		f.CloudHypervisor = &po
	}
	b, err := yaml.Marshal(f)
	if err != nil {
		return nil, err
	}
	return append([]byte("# Norsk Manager overrides file: the regions the Manager runs cloud workers in,\n# and the worker image each region boots for each worker version.\n"), b...), nil
}
