// Package cloudconf is the cloud providers' configuration (config.yaml
// providers.aws and providers.oci): plain types with their validation,
// free of the clouds' SDKs, so that the Manager can read and check them
// without linking the SDKs. The providers themselves (internal/providers/aws,
// internal/providers/oci) register a factory for them with
// providers.RegisterCloud; the binaries link them.
package cloudconf

import (
	"errors"
	"fmt"
	"strings"

	"github.com/norsk-go/norsk-manager/internal/providers"
)

// The cloud providers' names.
const (
	AWSName = "aws"
	OCIName = "oci"
)

// AWS is config.yaml's providers.aws (the aws provider's configuration).
type AWS struct {
	// Profile is the shared-config profile the SDK loads ("" = the default
	// chain); a region's own profile wins.
	Profile string `json:"profile,omitempty"`
	// SharedConfigFiles and SharedCredentialsFiles replace the SDK's
	// default files (~/.aws/config, ~/.aws/credentials) when given.
	SharedConfigFiles      []string `json:"sharedConfigFiles,omitempty"`
	SharedCredentialsFiles []string `json:"sharedCredentialsFiles,omitempty"`
	// Regions are per-region settings; a region the overrides file names
	// and this does not runs with the defaults.
	Regions map[string]AWSRegion `json:"regions,omitempty"`
	// Pools are elastic pool tiers created on EC2 when nothing fits.
	Pools map[string]AWSPool `json:"pools,omitempty"`
	// RetryMaxAttempts is the SDK retryer's attempts per call (default 8);
	// RetryBaseDelay and RetryMaxBackoff bound its jittered exponential
	// backoff (defaults 500 ms and 20 s).
	RetryMaxAttempts int                `json:"retryMaxAttempts,omitempty"`
	RetryBaseDelay   providers.Duration `json:"retryBaseDelay,omitempty"`
	RetryMaxBackoff  providers.Duration `json:"retryMaxBackoff,omitempty"`
}

// AWSRegion is one region's settings.
type AWSRegion struct {
	// Profile is the shared-config profile for this region.
	Profile string `json:"profile,omitempty"`
	// Subnet is the default subnet of the region's workers ("" = the
	// default VPC's).
	Subnet string `json:"subnet,omitempty"`
	// BaseSecurityGroups are attached to every worker (never selectable).
	BaseSecurityGroups []string `json:"baseSecurityGroups,omitempty"`
	// KeyName is an EC2 key pair for the instances ("" = none).
	KeyName string `json:"keyName,omitempty"`
	// IAMInstanceProfile names the instances' instance profile.
	IAMInstanceProfile string `json:"iamInstanceProfile,omitempty"`
}

// AWSPool is an elastic pool tier on EC2.
type AWSPool struct {
	// Regions to create nodes in, in order of preference.
	Regions []string `json:"regions"`
	// InstanceTypes, cheapest first: placement picks the first a new node
	// of which takes the work; a capacity refusal tries the next.
	InstanceTypes []string `json:"instanceTypes"`
	// Zones to try, in order, on a capacity refusal ("" = the subnet's).
	Zones []string `json:"zones,omitempty"`
	// SecurityGroups are worker security-group labels to attach.
	SecurityGroups []string `json:"securityGroups,omitempty"`
	// Subnet overrides the region's default.
	Subnet string `json:"subnet,omitempty"`
}

// Validate checks the configuration.
func (c AWS) Validate() error {
	for r, rc := range c.Regions {
		if r == "" {
			return errors.New("providers.aws.regions: a region has an empty name")
		}
		for i, g := range rc.BaseSecurityGroups {
			if !strings.HasPrefix(g, "sg-") {
				return fmt.Errorf("providers.aws.regions.%s.baseSecurityGroups[%d]: %q is not a security group id (sg-…)", r, i, g)
			}
		}
	}
	for name, p := range c.Pools {
		where := "providers.aws.pools." + name
		switch {
		case name == "":
			return errors.New("providers.aws.pools: a pool has an empty name")
		case len(p.Regions) == 0:
			return fmt.Errorf("%s.regions: name at least one region", where)
		case len(p.InstanceTypes) == 0:
			return fmt.Errorf("%s.instanceTypes: name at least one instance type, cheapest first", where)
		}
	}
	if c.RetryMaxAttempts < 0 {
		return errors.New("providers.aws.retryMaxAttempts: must not be negative")
	}
	return nil
}

// OCI is config.yaml's providers.oci (the oci provider's configuration).
type OCI struct {
	// ConfigFile is the OCI config file (default ~/.oci/config) and
	// Profile its profile (default DEFAULT).
	ConfigFile string `json:"configFile,omitempty"`
	Profile    string `json:"profile,omitempty"`
	// CompartmentID is the compartment the instances live in (default: the
	// profile's tenancy).
	CompartmentID string `json:"compartmentId,omitempty"`
	// Regions are per-region settings.
	Regions map[string]OCIRegion `json:"regions,omitempty"`
	// Pools are elastic pool tiers created on OCI when nothing fits.
	Pools map[string]OCIPool `json:"pools,omitempty"`
	// RetryMaxAttempts, RetryBaseDelay and RetryMaxBackoff bound the
	// retries of throttled (429) and failed (5xx) calls (defaults 8,
	// 500 ms, 20 s).
	RetryMaxAttempts int                `json:"retryMaxAttempts,omitempty"`
	RetryBaseDelay   providers.Duration `json:"retryBaseDelay,omitempty"`
	RetryMaxBackoff  providers.Duration `json:"retryMaxBackoff,omitempty"`
}

// OCIRegion is one region's settings.
type OCIRegion struct {
	// Subnet is the default subnet OCID of the region's workers.
	Subnet string `json:"subnet,omitempty"`
	// Endpoint overrides the core (compute) API endpoint and
	// IdentityEndpoint the identity one (default: Endpoint's).
	Endpoint         string `json:"endpoint,omitempty"`
	IdentityEndpoint string `json:"identityEndpoint,omitempty"`
}

// OCIPool is an elastic pool tier on OCI.
type OCIPool struct {
	Regions []string `json:"regions"`
	// AvailabilityDomains to use, in order ("" = the region's).
	AvailabilityDomains []string `json:"availabilityDomains,omitempty"`
	// Shapes, cheapest first.
	Shapes []string `json:"shapes"`
	Subnet string   `json:"subnet,omitempty"`
	// OCPUs and MemoryGBs size flexible shapes.
	OCPUs     float32 `json:"ocpus,omitempty"`
	MemoryGBs float32 `json:"memoryGbs,omitempty"`
}

// Validate checks the configuration.
func (c OCI) Validate() error {
	for name, p := range c.Pools {
		where := "providers.oci.pools." + name
		switch {
		case name == "":
			return errors.New("providers.oci.pools: a pool has an empty name")
		case len(p.Regions) == 0:
			return fmt.Errorf("%s.regions: name at least one region", where)
		case len(p.Shapes) == 0:
			return fmt.Errorf("%s.shapes: name at least one shape, cheapest first", where)
		}
	}
	for r, rc := range c.Regions {
		for _, ep := range []string{rc.Endpoint, rc.IdentityEndpoint} {
			if ep != "" && !strings.HasPrefix(ep, "http://") && !strings.HasPrefix(ep, "https://") {
				return fmt.Errorf("providers.oci.regions.%s: endpoint %q is not an http(s) URL", r, ep)
			}
		}
	}
	return nil
}

// CloudHypervisorName is the cloud-hypervisor provider's name.
const CloudHypervisorName = "cloud-hypervisor"

// CloudHypervisor is config.yaml's providers.cloudHypervisor: the host
// agents the Manager runs microVM nodes on.
type CloudHypervisor struct {
	// Hosts are host agents by name (the provider's "regions"; the
	// overrides file names the ones run, with their base images). Agents
	// may instead register at run time (AddHostAgent, then the agent's
	// RegisterHostAgent); this may then be empty.
	Hosts map[string]CloudHypervisorHost `json:"hosts,omitempty"`
	// Pools are elastic pool tiers created on the hosts when nothing fits.
	Pools map[string]CloudHypervisorPool `json:"pools,omitempty"`
}

// CloudHypervisorHost is one host agent.
type CloudHypervisorHost struct {
	// URL is the agent's HostAgent endpoint (http(s)://host:port).
	URL string `json:"url"`
	// Token is the host secret the agent was started with ("" = read it
	// from TokenFile).
	Token     string `json:"token,omitempty"`
	TokenFile string `json:"tokenFile,omitempty"`
}

// CloudHypervisorPool is an elastic pool tier on the host agents.
type CloudHypervisorPool struct {
	// Hosts to create VMs on ("" = every host), in order of preference
	// when they have the same room.
	Hosts []string `json:"hosts,omitempty"`
	// Shapes, smallest first: placement picks the first a new node of
	// which takes the work.
	Shapes []string `json:"shapes"`
}

// Validate checks the configuration.
func (c CloudHypervisor) Validate() error {
	for name, h := range c.Hosts {
		where := "providers.cloudHypervisor.hosts." + name
		switch {
		case name == "":
			return errors.New("providers.cloudHypervisor.hosts: a host has an empty name")
		case !strings.HasPrefix(h.URL, "http://") && !strings.HasPrefix(h.URL, "https://"):
			return fmt.Errorf("%s.url: %q is not an http(s) URL", where, h.URL)
		case h.Token == "" && h.TokenFile == "":
			return fmt.Errorf("%s: give the host secret (token or tokenFile)", where)
		}
	}
	for name, p := range c.Pools {
		where := "providers.cloudHypervisor.pools." + name
		switch {
		case name == "":
			return errors.New("providers.cloudHypervisor.pools: a pool has an empty name")
		case len(p.Shapes) == 0:
			return fmt.Errorf("%s.shapes: name at least one shape, smallest first", where)
		}
		for i, h := range p.Hosts {
			if h == "" {
				return fmt.Errorf("%s.hosts[%d]: empty host name", where, i)
			}
		}
	}
	return nil
}
