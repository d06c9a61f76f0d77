package testcluster

import (
	"crypto/rand"
	"crypto/rsa"
	"encoding/hex"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/norsk-go/norsk-manager/internal/buildinfo"
	"github.com/norsk-go/norsk-manager/internal/cloudsim"
	"github.com/norsk-go/norsk-manager/internal/cloudsim/ec2sim"
	"github.com/norsk-go/norsk-manager/internal/cloudsim/ocisim"
	"github.com/norsk-go/norsk-manager/internal/manager"
	"github.com/norsk-go/norsk-manager/internal/providers"
	"github.com/norsk-go/norsk-manager/internal/providers/cloudconf"
	"github.com/norsk-go/norsk-manager/internal/worker"
)

// Facts of the clouds Options.Clouds starts.
const (
	AWSRegion = "eu-west-1"
	OCIRegion = "eu-frankfurt-1"
	// AWSPool and OCIPool are the elastic pool tiers created there.
	AWSPool = "aws-burst"
	OCIPool = "oci-burst"
	// AWSImage and OCIImage are the worker images of this build's version.
	AWSImage = "ami-0123456789abcdef0"
	OCIImage = "ocid1.image.oc1.eu-frankfurt-1.aaaaaaaanorskworker"
	// BaseGroup is the region's base worker security group, SRTGroup one
	// labelled "srt".
	BaseGroup = "sg-0base0000000000a"
	SRTGroup  = "sg-0srt00000000000b"
)

// AWSPoolTypes are AWSPool's instance types, cheapest first.
var AWSPoolTypes = []string{"c6i.large", "c6i.xlarge", "c6i.2xlarge"}

// Clouds are the cloud endpoints of a cluster (Options.Clouds): an EC2 and
// an OCI endpoint whose instances boot in-process workers (the process
// runtime), and the Manager's aws and oci providers pointed at them
// through their SDKs' own settings (a profile with endpoint_url; an OCI
// config file and endpoint override). The test binary must link the
// providers (import _ internal/providers/aws and …/oci): testcluster does
// not, so that the tests that do not use them do not build the SDKs.
type Clouds struct {
	EC2 *ec2sim.Server
	OCI *ocisim.Server
	// Overrides is the overrides file the members read.
	Overrides string
	// ClusterID tags the cluster's instances.
	ClusterID string

	aws cloudconf.AWS
	oci cloudconf.OCI
}

var (
	ociKeyOnce sync.Once
	ociKey     *rsa.PrivateKey
)

// startClouds starts the endpoints of Options.Clouds.
func (c *Cluster) startClouds() {
	if !c.opts.Clouds {
		return
	}
	t := c.t
	dir := filepath.Join(c.Dir, "clouds")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	var runner cloudsim.Runner = &cloudsim.InProcess{Dir: filepath.Join(dir, "machines"), Logger: c.opts.Logger.With("process", "cloud"),
		Worker: worker.Config{ReregisterAfter: 500 * time.Millisecond, RegisterRetry: 500 * time.Millisecond, Version: buildinfo.Version}}
	if c.opts.CloudRunner != nil {
		runner = c.opts.CloudRunner
	}
	e, err := ec2sim.Start(ec2sim.Options{
		Regions: map[string]ec2sim.Region{AWSRegion: {
			InstanceTypes: []string{"t3.micro", "c6i.large", "c6i.xlarge", "c6i.2xlarge", "c7g.xlarge"},
			SecurityGroups: []ec2sim.SecurityGroup{
				{ID: BaseGroup, Name: "norsk-workers", VPC: "vpc-0cloudsim", Description: "the Manager dials workers",
					Ingress: []ec2sim.Rule{{Protocol: "tcp", FromPort: 6791, ToPort: 6791, CIDRs: []string{"10.0.0.0/16"}}}},
				{ID: SRTGroup, Name: "srt-ingest", VPC: "vpc-0cloudsim", Description: "SRT from anywhere",
					Tags:    map[string]string{providers.TagWorkerSecurityGroup: "srt"},
					Ingress: []ec2sim.Rule{{Protocol: "udp", FromPort: 5000, ToPort: 5100, CIDRs: []string{"0.0.0.0/0"}, Description: "SRT"}}},
			},
		}},
		Runner: runner, Logger: c.opts.Logger.With("process", "ec2"),
	})
	if err != nil {
		t.Fatal(err)
	}
	ociKeyOnce.Do(func() { ociKey, _ = rsa.GenerateKey(rand.Reader, 2048) })
	o, err := ocisim.Start(ocisim.Options{Key: ociKey, Regions: map[string]ocisim.Region{OCIRegion: {}}, Runner: runner,
		Logger: c.opts.Logger.With("process", "oci")})
	if err != nil {
		_ = e.Close()
		t.Fatal(err)
	}
	cl := &Clouds{EC2: e, OCI: o, Overrides: filepath.Join(dir, "overrides.yaml")}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	cl.ClusterID = "test-" + hex.EncodeToString(b)
	conf, creds, err := e.WriteProfile(dir, "cloudsim", AWSRegion)
	if err != nil {
		t.Fatal(err)
	}
	ociConf, err := o.WriteConfig(dir, "DEFAULT")
	if err != nil {
		t.Fatal(err)
	}
	cl.aws = cloudconf.AWS{
		Profile: "cloudsim", SharedConfigFiles: []string{conf}, SharedCredentialsFiles: []string{creds},
		Regions: map[string]cloudconf.AWSRegion{AWSRegion: {Subnet: "subnet-0a1b2c3d4e5f60718", BaseSecurityGroups: []string{BaseGroup}}},
		Pools:   map[string]cloudconf.AWSPool{AWSPool: {Regions: []string{AWSRegion}, InstanceTypes: AWSPoolTypes}},
		// Quick retries: a test throttles on purpose.
		RetryMaxAttempts: 4,
	}
	cl.aws.RetryBaseDelay.Duration, cl.aws.RetryMaxBackoff.Duration = time.Millisecond, 10*time.Millisecond
	cl.oci = cloudconf.OCI{
		ConfigFile:       ociConf,
		Regions:          map[string]cloudconf.OCIRegion{OCIRegion: {Endpoint: o.URL(OCIRegion), Subnet: "ocid1.subnet.oc1.eu-frankfurt-1.aaaatest"}},
		Pools:            map[string]cloudconf.OCIPool{OCIPool: {Regions: []string{OCIRegion}, Shapes: []string{"VM.Standard2.1", "VM.Standard2.2"}}},
		RetryMaxAttempts: 4,
	}
	cl.oci.RetryBaseDelay.Duration, cl.oci.RetryMaxBackoff.Duration = time.Millisecond, 10*time.Millisecond
	c.Clouds = cl
	c.WriteOverrides(DefaultOverrides())
}

// DefaultOverrides is the overrides file of Options.Clouds: both regions,
// with this build's worker image.
func DefaultOverrides() string {
	return "version: 1\naws:\n  regions:\n    " + AWSRegion + ":\n      workerImages:\n        \"" + buildinfo.Version + "\": " + AWSImage +
		"\noci:\n  regions:\n    " + OCIRegion + ":\n      workerImages:\n        \"" + buildinfo.Version + "\": " + OCIImage + "\n"
}

// WriteOverrides replaces the overrides file the members read (they take
// it at their next start, or at ReloadExternalConfig).
func (c *Cluster) WriteOverrides(content string) {
	c.t.Helper()
	if err := os.WriteFile(c.Clouds.Overrides, []byte(content), 0o600); err != nil {
		c.t.Fatal(err)
	}
}

// cloudProviders gives a member's configuration the clouds' providers,
// with quick loops.
func (c *Cluster) cloudProviders(cfg *manager.Config) {
	cl := c.Clouds
	if cl == nil {
		return
	}
	a, o := cl.aws, cl.oci
	cfg.AWS, cfg.OCI = &a, &o
	cfg.ClusterID, cfg.OverridesFile = cl.ClusterID, cl.Overrides
	cfg.ReaperInterval = 100 * time.Millisecond
	cfg.ReconcileInterval = 300 * time.Millisecond
	cfg.ListGrace = time.Second
	cfg.CloudStartTimeout = 30 * time.Second
	cfg.ProviderBackoff = providers.Backoff{Attempts: 3, Base: time.Millisecond, Max: 10 * time.Millisecond}
}

// stopClouds stops the endpoints and every machine they run.
func (c *Cluster) stopClouds() {
	if c.Clouds == nil {
		return
	}
	_ = c.Clouds.EC2.Close()
	_ = c.Clouds.OCI.Close()
}
