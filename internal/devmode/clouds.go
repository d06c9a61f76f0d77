package devmode

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/docker/docker/client"

	"github.com/norsk-go/norsk-manager/internal/buildinfo"
	"github.com/norsk-go/norsk-manager/internal/cloudsim"
	"github.com/norsk-go/norsk-manager/internal/cloudsim/ec2sim"
	"github.com/norsk-go/norsk-manager/internal/cloudsim/ocisim"
	"github.com/norsk-go/norsk-manager/internal/manager"
	"github.com/norsk-go/norsk-manager/internal/providers"
	"github.com/norsk-go/norsk-manager/internal/providers/cloudconf"

	// The cloud providers dev points at its local clouds.
	_ "github.com/norsk-go/norsk-manager/internal/providers/aws"
	_ "github.com/norsk-go/norsk-manager/internal/providers/oci"
	"github.com/norsk-go/norsk-manager/internal/worker"
)

// Facts of `dev --clouds local`.
const (
	// CloudsLocal is the --clouds value that starts the local endpoints.
	CloudsLocal = "local"
	// AWSRegion and OCIRegion are the regions the local clouds serve.
	AWSRegion = "eu-west-1"
	OCIRegion = "eu-frankfurt-1"
	// CloudPool is the elastic pool tier the AutoManager creates EC2 nodes
	// in (cheapest instance type that fits first); OCIPool OCI's.
	CloudPool = "burst"
	OCIPool   = "oci-burst"
	// The worker images the overrides file names for this build.
	devAMI      = "ami-0d0e0f0a0b0c0d0e0"
	devOCIImage = "ocid1.image.oc1.eu-frankfurt-1.aaaaaaaanorskdevworker"
	devBaseSG   = "sg-0d0e0f0a0b0c0d0e1"
	devSRTSG    = "sg-0d0e0f0a0b0c0d0e2"
	devSubnet   = "subnet-0d0e0f0a0b0c0d0e3"
)

// cloudPoolTypes are the pool's EC2 instance types, cheapest first.
var cloudPoolTypes = []string{"c6i.large", "c6i.xlarge", "c6i.2xlarge"}

// localClouds are the local EC2 and OCI endpoints of `dev --clouds local`
// and the Manager configuration pointing at them.
type localClouds struct {
	ec2 *ec2sim.Server
	oci *ocisim.Server
	dir string
}

// startClouds starts the local endpoints with their state in dir/clouds,
// their instances booting the worker as Docker containers (the docker
// runtime), host processes (workerExec cloud-instance) or agents in this
// process, and sets cfg's providers to them the way an operator would
// point the SDKs anywhere: an AWS profile with endpoint_url, an OCI config
// file with the region's endpoint.
func startClouds(ctx context.Context, dir, rt, workerExec string, log *slog.Logger, cfg *manager.Config) (*localClouds, error) {
	dir = filepath.Join(dir, "clouds")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	runner, err := cloudRunner(ctx, dir, rt, workerExec, log)
	if err != nil {
		return nil, err
	}
	e, err := ec2sim.Start(ec2sim.Options{
		Regions: map[string]ec2sim.Region{AWSRegion: {
			InstanceTypes: []string{"t3.micro", "c6i.large", "c6i.xlarge", "c6i.2xlarge", "c6i.4xlarge", "c7g.xlarge", "g5.xlarge"},
			SecurityGroups: []ec2sim.SecurityGroup{
				{ID: devBaseSG, Name: "norsk-workers", VPC: "vpc-0d0e0f0a0b0c0d0e4", Description: "the Manager dials workers on 6791",
					Ingress: []ec2sim.Rule{{Protocol: "tcp", FromPort: 6791, ToPort: 6791, CIDRs: []string{"10.0.0.0/16"}}}},
				{ID: devSRTSG, Name: "srt-ingest", VPC: "vpc-0d0e0f0a0b0c0d0e4", Description: "SRT contribution from anywhere",
					Tags:    map[string]string{providers.TagWorkerSecurityGroup: "srt"},
					Ingress: []ec2sim.Rule{{Protocol: "udp", FromPort: 5000, ToPort: 5100, CIDRs: []string{"0.0.0.0/0"}, Description: "SRT"}}},
			},
		}},
		Images: []string{devAMI}, Runner: runner, StateFile: filepath.Join(dir, "ec2-state.json"), Logger: log,
	})
	if err != nil {
		return nil, err
	}
	key, err := loadOrMakeKey(filepath.Join(dir, "oci-endpoint-key.pem"))
	if err != nil {
		_ = e.Close()
		return nil, err
	}
	o, err := ocisim.Start(ocisim.Options{Regions: map[string]ocisim.Region{OCIRegion: {}}, Key: key, Runner: runner,
		StateFile: filepath.Join(dir, "oci-state.json"), Logger: log})
	if err != nil {
		_ = e.Close()
		return nil, err
	}
	lc := &localClouds{ec2: e, oci: o, dir: dir}
	if err := lc.configure(cfg); err != nil {
		lc.close()
		return nil, err
	}
	return lc, nil
}

// cloudRunner is how the local clouds' instances boot their worker.
func cloudRunner(ctx context.Context, dir, rt, workerExec string, log *slog.Logger) (cloudsim.Runner, error) {
	machines := filepath.Join(dir, "machines")
	switch {
	case rt == "docker":
		cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
		if err != nil {
			return nil, err
		}
		d := &cloudsim.Docker{Client: cli, Dir: machines, Logger: log}
		bctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		defer cancel()
		if _, err := cli.ImageInspect(bctx, cloudsim.WorkerImage); err != nil {
			if !goTool() {
				return nil, fmt.Errorf("the cloud instances' image %s is not present and the go command is not here to build it", cloudsim.WorkerImage)
			}
			log.With("component", "dev").Info("dev: building the cloud instances' worker image (FROM scratch, nothing pulled)", "image", cloudsim.WorkerImage)
		}
		if err := d.EnsureImage(bctx); err != nil {
			return nil, fmt.Errorf("the cloud instances' worker image: %w", err)
		}
		return d, nil
	case workerExec != "":
		return &cloudsim.Process{Exec: workerExec, Args: []string{"cloud-instance"}, Dir: machines, Runtime: rt, Logger: log}, nil
	}
	return &cloudsim.InProcess{Dir: machines, Logger: log, Worker: worker.Config{Runtime: rt, Version: buildinfo.Version,
		ReregisterAfter: 2 * time.Second, RegisterRetry: time.Second}}, nil
}

// configure writes the SDKs' configuration files and the overrides file,
// and gives cfg the providers.
func (lc *localClouds) configure(cfg *manager.Config) error {
	conf, creds, err := lc.ec2.WriteProfile(lc.dir, "norsk-dev", AWSRegion)
	if err != nil {
		return err
	}
	ociConf, err := lc.oci.WriteConfig(lc.dir, "DEFAULT")
	if err != nil {
		return err
	}
	overrides := &providers.Overrides{Providers: map[string]providers.ProviderOverrides{
		"aws": {Regions: map[string]providers.RegionOverrides{AWSRegion: {WorkerImages: map[string]string{buildinfo.Version: devAMI}}}},
		"oci": {Regions: map[string]providers.RegionOverrides{OCIRegion: {WorkerImages: map[string]string{buildinfo.Version: devOCIImage}}}},
	}}
	ofile := filepath.Join(lc.dir, "overrides.yaml")
	if _, err := os.Stat(ofile); errors.Is(err, os.ErrNotExist) {
		b, err := overrides.Marshal()
		if err != nil {
			return err
		}
		if err := os.WriteFile(ofile, b, 0o600); err != nil {
			return err
		}
	}
	id, err := clusterID(filepath.Join(lc.dir, "cluster-id"))
	if err != nil {
		return err
	}
	cfg.AWS = &cloudconf.AWS{
		Profile: "norsk-dev", SharedConfigFiles: []string{conf}, SharedCredentialsFiles: []string{creds},
		Regions: map[string]cloudconf.AWSRegion{AWSRegion: {Subnet: devSubnet, BaseSecurityGroups: []string{devBaseSG}}},
		Pools:   map[string]cloudconf.AWSPool{CloudPool: {Regions: []string{AWSRegion}, InstanceTypes: cloudPoolTypes}},
	}
	cfg.OCI = &cloudconf.OCI{
		ConfigFile: ociConf,
		Regions:    map[string]cloudconf.OCIRegion{OCIRegion: {Endpoint: lc.oci.URL(OCIRegion), Subnet: "ocid1.subnet.oc1.eu-frankfurt-1.aaaaaaaanorskdev"}},
		Pools:      map[string]cloudconf.OCIPool{OCIPool: {Regions: []string{OCIRegion}, Shapes: []string{"VM.Standard2.1", "VM.Standard2.2", "VM.Standard2.4"}}},
	}
	cfg.ClusterID, cfg.OverridesFile = id, ofile
	// A dev machine's "cloud" answers at once: reconcile often, and give a
	// node little time to come online.
	cfg.ReconcileInterval = 10 * time.Second
	cfg.ListGrace = 10 * time.Second
	cfg.CloudStartTimeout = 3 * time.Minute
	cfg.ReaperInterval = time.Second
	return nil
}

func (lc *localClouds) close() {
	_ = lc.ec2.Close()
	_ = lc.oci.Close()
}

// banner says what the local clouds are and what to try.
func (lc *localClouds) banner(w io.Writer, rt string) {
	ad := lc.oci.AvailabilityDomains(OCIRegion)[0]
	bundle := "elastic"
	if rt != "docker" {
		bundle = "elastic-process"
	}
	fmt.Fprintf(w, `
Local clouds (test equipment the providers reach through their SDKs, as they
would reach AWS and OCI): EC2 %s (%s) and OCI %s (%s).
The AutoManager creates EC2 nodes in pool %s (%s, the cheapest that fits)
when nothing fits a bundle; each instance boots a worker from its user data.
Overrides file (regions, worker images): %s
Try:
  norsk-ctl node create-aws --region %s --type c6i.xlarge --pool %s
  norsk-ctl node create-oci --availability-domain %s --shape VM.Standard2.2
  norsk-ctl bundle create -f examples/bundles/%s.yaml   (nothing runs it: an EC2 node is made)
  norsk-ctl instance-types c6i.xlarge --region %s
  norsk-ctl security-groups --region %s
  norsk-ctl reload-config
`, lc.ec2.URL(), AWSRegion, lc.oci.URL(OCIRegion), OCIRegion, CloudPool, strings.Join(cloudPoolTypes, ", "),
		filepath.Join(lc.dir, "overrides.yaml"), AWSRegion, CloudPool, ad, bundle, AWSRegion, AWSRegion)
}

// clusterID is dev's cluster id, made at the first run and kept.
func clusterID(path string) (string, error) {
	if b, err := os.ReadFile(path); err == nil {
		if id := strings.TrimSpace(string(b)); id != "" {
			return id, nil
		}
	}
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	id := "dev-" + hex.EncodeToString(b)
	return id, os.WriteFile(path, []byte(id+"\n"), 0o600)
}

// loadOrMakeKey reads the OCI endpoint's API key, making it at the first
// run (its instances' state names the same key across restarts).
func loadOrMakeKey(path string) (*rsa.PrivateKey, error) {
	if b, err := os.ReadFile(path); err == nil {
		if blk, _ := pem.Decode(b); blk != nil {
			if k, err := x509.ParsePKCS1PrivateKey(blk.Bytes); err == nil {
				return k, nil
			}
		}
	}
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	b := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)})
	return k, os.WriteFile(path, b, 0o600)
}
