package nodes

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/norsk-go/norsk-manager/internal/cli/cmdutil"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// The cloud providers' commands: node create-aws / create-oci (with
// progress until the node is online), instance-types, security-groups and
// reload-config.

// cloudCreateFlags are what create-aws and create-oci share.
type cloudCreateFlags struct {
	tags []string
	w    cmdutil.WaitFlags
}

func (f *cloudCreateFlags) register(c *cobra.Command) {
	c.Flags().StringArrayVar(&f.tags, "tag", nil, "a tag the node (and its instance) starts with, KEY=VALUE (repeatable)")
	f.w.Add(c, "the node until it is online", 15*time.Minute)
}

func (f *cloudCreateFlags) tagMap() (map[string]string, error) {
	var out map[string]string
	for _, kv := range f.tags {
		k, v, err := cmdutil.SplitKV("--tag", kv)
		if err != nil {
			return nil, err
		}
		if out == nil {
			out = map[string]string{}
		}
		out[k] = v
	}
	return out, nil
}

func newNodeCreateAwsCommand(g *cmdutil.Globals) *cobra.Command {
	var (
		n norsk.AwsNode
		f cloudCreateFlags
	)
	c := &cobra.Command{
		Use:   "create-aws [ID] --region REGION --type TYPE",
		Short: "Create a node on a new EC2 instance and follow it until it is online",
		Long: `Launch an EC2 instance booting the worker image the Manager's overrides file
names for the region (and this Manager's version, or --worker-version). The
instance's user data carries the node's one-shot registration token, the
Manager members' URLs and the CA pin, so its worker registers by itself; the
command prints each step until the node is online (or ends, with why).
--security-group attaches the region's worker security groups of that label
besides its base groups ('norsk-ctl security-groups --region …' lists them);
--fallback names instance types tried in order when EC2 has no capacity for
--type. Without ID the Manager names the node.`,
		Example: `  norsk-ctl node create-aws --region eu-west-1 --type c6i.xlarge --pool burst
  norsk-ctl node create-aws edge-7 --region eu-west-1 --type c6i.2xlarge --security-group srt --fallback c6i.4xlarge`,
		Args: cmdutil.OptionalArgs("ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				n.NodeID = args[0]
			}
			if n.Region == "" || n.InstanceType == "" {
				return cmdutil.UsageErrorf("give --region and --type")
			}
			tags, err := f.tagMap()
			if err != nil {
				return err
			}
			n.Tags = tags
			return createCloudNode(g, cmd, f, "create an EC2 node", func(ctx context.Context, m *norsk.Manager) (*norsk.CloudNode, error) {
				return m.CreateAwsNode(ctx, n)
			})
		},
	}
	c.Flags().StringVar(&n.Region, "region", "", "the AWS region (one the overrides file names)")
	c.Flags().StringVar(&n.InstanceType, "type", "", "the instance type, e.g. c6i.xlarge")
	c.Flags().StringVar(&n.Pool, "pool", "", "the pool tier the node joins")
	c.Flags().StringArrayVar(&n.SecurityGroupLabels, "security-group", nil, "a worker security-group label to attach (repeatable)")
	c.Flags().StringVar(&n.Subnet, "subnet", "", "the subnet (default: the region's from the Manager's config)")
	c.Flags().StringVar(&n.AvailabilityZone, "zone", "", "the availability zone (default: the subnet's)")
	c.Flags().StringVar(&n.WorkerVersion, "worker-version", "", "the worker version whose image boots (default: the Manager's)")
	c.Flags().StringArrayVar(&n.FallbackInstanceTypes, "fallback", nil, "an instance type to try when EC2 has no capacity (repeatable, in order)")
	f.register(c)
	return c
}

func newNodeCreateOciCommand(g *cmdutil.Globals) *cobra.Command {
	var (
		n norsk.OciNode
		f cloudCreateFlags
	)
	c := &cobra.Command{
		Use:   "create-oci [ID] --availability-domain AD --shape SHAPE",
		Short: "Create a node on a new OCI instance and follow it until it is online",
		Long: `Launch an OCI instance in the availability domain, booting the worker image
the Manager's overrides file names for its region, and follow the node until
it is online, as create-aws does. --fallback names shapes tried in order when
the domain is out of host capacity; --ocpus and --memory-gbs size a flexible
shape.`,
		Example: `  norsk-ctl node create-oci --availability-domain Uocm:EU-FRANKFURT-1-AD-1 --shape VM.Standard.E4.Flex --ocpus 2 --pool burst`,
		Args:    cmdutil.OptionalArgs("ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				n.NodeID = args[0]
			}
			if n.AvailabilityDomain == "" || n.Shape == "" {
				return cmdutil.UsageErrorf("give --availability-domain and --shape")
			}
			tags, err := f.tagMap()
			if err != nil {
				return err
			}
			n.Tags = tags
			return createCloudNode(g, cmd, f, "create an OCI node", func(ctx context.Context, m *norsk.Manager) (*norsk.CloudNode, error) {
				return m.CreateOciNode(ctx, n)
			})
		},
	}
	c.Flags().StringVar(&n.AvailabilityDomain, "availability-domain", "", "the availability domain, e.g. Uocm:EU-FRANKFURT-1-AD-1")
	c.Flags().StringVar(&n.Shape, "shape", "", "the shape, e.g. VM.Standard.E4.Flex")
	c.Flags().StringVar(&n.Region, "region", "", "the region (default: the domain's)")
	c.Flags().StringVar(&n.Pool, "pool", "", "the pool tier the node joins")
	c.Flags().StringVar(&n.Subnet, "subnet", "", "the subnet OCID (default: the region's from the Manager's config)")
	c.Flags().StringVar(&n.WorkerVersion, "worker-version", "", "the worker version whose image boots (default: the Manager's)")
	c.Flags().StringArrayVar(&n.FallbackShapes, "fallback", nil, "a shape to try when the domain is out of capacity (repeatable, in order)")
	c.Flags().Float32Var(&n.OCPUs, "ocpus", 0, "OCPUs of a flexible shape")
	c.Flags().Float32Var(&n.MemoryGBs, "memory-gbs", 0, "memory (GB) of a flexible shape")
	f.register(c)
	return c
}

// createCloudNode creates the node, then (unless --no-wait) prints each
// step of its start until it is online.
func createCloudNode(g *cmdutil.Globals, cmd *cobra.Command, f cloudCreateFlags, what string, create func(context.Context, *norsk.Manager) (*norsk.CloudNode, error)) error {
	if err := f.w.Check(cmd); err != nil {
		return err
	}
	m, err := g.Manager(cmd.Context())
	if err != nil {
		return err
	}
	// A launch can take longer than an ordinary call (retries, fallbacks).
	ctx, cancel := context.WithTimeout(cmd.Context(), max(g.Timeout, 3*time.Minute))
	created, err := create(ctx, m)
	cancel()
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	p := g.Printer()
	_, table := p.(*cmdutil.TablePrinter)
	if !f.w.Waiting() {
		return p.Print(cmdutil.Result{Data: created, Table: func(w io.Writer) { createdLine(w, created) }})
	}
	if table {
		createdLine(g.Out, created)
	}
	node, err := followStart(g, cmd.Context(), m, created.GetNodeId(), f.w.Timeout, func(line string) {
		if table {
			fmt.Fprintln(g.Out, line)
		}
	})
	if err != nil {
		return err
	}
	return p.Print(cmdutil.Result{Data: node, Table: func(w io.Writer) {
		fmt.Fprintf(w, "Node %s is online (%d vCPUs).\n", node.GetNodeId(), node.GetHardware().GetVcpus())
	}})
}

func createdLine(w io.Writer, c *norsk.CloudNode) {
	fmt.Fprintf(w, "Node %s: %s instance %s launched (%s in %s, image %s)\n", c.GetNodeId(), c.GetProvider(), c.GetInstanceId(),
		c.GetInstanceType(), orDash(c.GetZone(), c.GetRegion()), c.GetImage())
	for _, a := range c.GetAttempts() {
		fmt.Fprintf(w, "  no capacity first: %s\n", a)
	}
}

func orDash(a, b string) string {
	if a != "" {
		return a
	}
	return cmdutil.Dash(b)
}

// followStart polls the node until it is online, printing each change of
// its state; it fails when the node ends (with why) or the time runs out.
// A node a provider created begins starting (the Manager records it so
// before CreateAwsNode / CreateOciNode answer), and that first step is
// printed at once: a worker that boots fast can be online by the first poll.
func followStart(g *cmdutil.Globals, ctx context.Context, m *norsk.Manager, nodeID string, timeout time.Duration, progress func(string)) (*norsk.Node, error) {
	start := g.Now()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	progress("  0s  starting: waiting for its worker")
	lastState, lastReason := norsk.NodeStateStarting, ""
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		cctx, ccancel := g.Call(ctx)
		nodes, err := m.ListNodes(cctx)
		ccancel()
		if err == nil {
			for _, n := range nodes {
				if n.GetNodeId() != nodeID {
					continue
				}
				state, reason := n.GetState(), n.GetStateReason()
				// The first look at a starting node only learns the
				// reason of the step already printed.
				if state != lastState || (reason != lastReason && lastReason != "") {
					line := cmdutil.EnumWord(state)
					if reason != "" {
						line += ": " + reason
					}
					progress(fmt.Sprintf("  %s  %s", g.Now().Sub(start).Round(time.Second), line))
				}
				lastState, lastReason = state, reason
				switch n.GetState() {
				case norsk.NodeStateOnline:
					return n, nil
				case norsk.NodeStateTerminated, norsk.NodeStateStopping:
					return nil, fmt.Errorf("node %s did not come online: %s", nodeID, n.GetStateReason())
				}
			}
		}
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return nil, fmt.Errorf("node %s is not online after %s (it is still starting; 'norsk-ctl node get %s' follows it)", nodeID, timeout, nodeID)
			}
			return nil, ctx.Err()
		case <-tick.C:
		}
	}
}

// NewInstanceTypesCommand is "instance-types": the providers' instance types,
// or one type's vCPUs, memory, architectures and where it is offered.
func NewInstanceTypesCommand(g *cmdutil.Globals) *cobra.Command {
	var opts norsk.InstanceTypeOptions
	c := &cobra.Command{
		Use:   "instance-types [TYPE] [--provider aws|oci|cloud-hypervisor] [--region REGION]",
		Short: "Describe an instance type from the Manager's instance-type cache, or list a provider's",
		Long: `With TYPE: its vCPUs (a node's capacity), memory and architectures, and — with
--region (an AWS region, an OCI availability domain, a Cloud Hypervisor host)
— whether it is offered there; "unknown" when the provider does not know it.
Without TYPE: every type the provider offers, which aws and oci cannot
enumerate (known: false); for cloud-hypervisor, the host agents' shapes with
the hosts offering each (one host's with --region).`,
		Example: `  norsk-ctl instance-types c6i.xlarge --region eu-west-1
  norsk-ctl instance-types --provider cloud-hypervisor
  norsk-ctl instance-types VM.Standard.E4.Flex --provider oci --region Uocm:EU-FRANKFURT-1-AD-1`,
		Args: cmdutil.OptionalArgs("TYPE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				type listed struct {
					types []*norsk.InstanceTypeInfo
					known bool
				}
				got, err := cmdutil.Ask(g, cmd, func(ctx context.Context, m *norsk.Manager) (listed, error) {
					t, k, err := m.ListInstanceTypes(ctx, opts)
					return listed{t, k}, err
				}, "list instance types")
				if err != nil {
					return err
				}
				return g.Printer().Print(cmdutil.Result{Data: &norsk.ListInstanceTypesResponse{Known: got.known, InstanceTypes: got.types}, Table: func(w io.Writer) {
					if !got.known {
						fmt.Fprintf(w, "The %s provider cannot enumerate its instance types; describe one by name.\n", providerName(opts.Provider))
						return
					}
					instanceTypesTable(w, got.types)
				}})
			}
			it, err := cmdutil.Ask(g, cmd, func(ctx context.Context, m *norsk.Manager) (*norsk.InstanceTypeFacts, error) {
				return m.DescribeInstanceType(ctx, args[0], opts)
			}, "describe instance type %s", args[0])
			if err != nil {
				return err
			}
			if it == nil {
				return g.Printer().Print(cmdutil.Result{Data: map[string]any{}, Table: func(w io.Writer) {
					fmt.Fprintf(w, "%s is unknown to the %s provider.\n", args[0], providerName(opts.Provider))
				}})
			}
			return g.Printer().Print(cmdutil.Result{Data: it.InstanceTypeInfo, Table: func(w io.Writer) {
				instanceTypesTable(w, []*norsk.InstanceTypeInfo{it.InstanceTypeInfo})
				if opts.Region != "" {
					fmt.Fprintf(w, "\nOffered in %s: %v\n", opts.Region, it.Offered)
				}
			}})
		},
	}
	c.Flags().StringVar(&opts.Provider, "provider", "", "aws (default), oci or cloud-hypervisor")
	c.Flags().StringVar(&opts.Region, "region", "", "an AWS region, OCI availability domain or Cloud Hypervisor host")
	return c
}

func providerName(p string) string {
	if p == "" {
		return "aws"
	}
	return p
}

func instanceTypesTable(w io.Writer, types []*norsk.InstanceTypeInfo) {
	fmt.Fprintln(w, "TYPE\tVCPUS\tMEMORY\tARCH\tGPUS\tOFFERED IN")
	for _, t := range types {
		fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%d\t%s\n", t.GetInstanceType(), t.GetVcpus(), cmdutil.BytesIEC(t.GetMemoryBytes()),
			cmdutil.Dash(strings.Join(t.GetArchitectures(), ",")), t.GetGpus(), cmdutil.Dash(strings.Join(t.GetRegions(), ", ")))
	}
}

// NewSecurityGroupsCommand is "security-groups": the security groups marked
// selectable for workers in an AWS region, with their ingress rules.
func NewSecurityGroupsCommand(g *cmdutil.Globals) *cobra.Command {
	var region string
	c := &cobra.Command{
		Use:   "security-groups --region REGION",
		Short: "List the region's worker security groups: the selectable ones (by label) and the base ones",
		Long: `The security groups dev-ops marked selectable for workers in an AWS region
(tagged id3as.Norsk.WorkerSecurityGroup = <label>; 'node create-aws
--security-group <label>' attaches them), each with its ingress rules, and the
region's base worker groups, which every worker gets.`,
		Args: cmdutil.ExactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if region == "" {
				return cmdutil.UsageErrorf("give --region")
			}
			groups, err := cmdutil.Ask(g, cmd, func(ctx context.Context, m *norsk.Manager) ([]*norsk.WorkerSecurityGroup, error) {
				return m.ListWorkerSecurityGroups(ctx, region)
			}, "list the worker security groups of %s", region)
			if err != nil {
				return err
			}
			return g.Printer().Print(cmdutil.Result{Data: cmdutil.Messages(groups), Table: func(w io.Writer) {
				fmt.Fprintln(w, "GROUP\tNAME\tLABEL\tINGRESS")
				for _, sg := range groups {
					label := sg.GetLabel()
					if sg.GetBase() {
						label = "(base)"
					}
					var rules []string
					for _, r := range sg.GetIngress() {
						ports := fmt.Sprintf("%d-%d", r.GetFromPort(), r.GetToPort())
						if r.GetFromPort() == r.GetToPort() {
							ports = fmt.Sprint(r.GetFromPort())
						}
						from := append(append([]string(nil), r.GetCidrs()...), r.GetSourceGroups()...)
						rules = append(rules, fmt.Sprintf("%s/%s from %s", r.GetProtocol(), ports, strings.Join(from, ",")))
					}
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", sg.GetGroupId(), sg.GetGroupName(), cmdutil.Dash(label), cmdutil.Dash(strings.Join(rules, "; ")))
				}
			}})
		},
	}
	c.Flags().StringVar(&region, "region", "", "the AWS region")
	return c
}

// NewReloadConfigCommand is "reload-config": every member re-reads the
// overrides file and applies it to its running providers.
func NewReloadConfigCommand(g *cmdutil.Globals) *cobra.Command {
	return &cobra.Command{
		Use:   "reload-config",
		Short: "Make the Manager re-read its overrides file (regions, worker images) without a restart",
		Long: `Re-read the overrides file on the member called and then on every other member,
each applying it to its running providers, and print what changed. A file
that does not parse or validate is refused with the error, and the file in
force stays. Every member should show the same digest: if they differ, their
copies of the file differ.`,
		Args: cmdutil.ExactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			res, err := cmdutil.Ask(g, cmd, func(ctx context.Context, m *norsk.Manager) (*norsk.ReloadExternalConfigResponse, error) {
				return m.ReloadExternalConfig(ctx)
			}, "reload the overrides file")
			if err != nil {
				return err
			}
			if err := g.Printer().Print(cmdutil.Result{Data: res, Table: func(w io.Writer) {
				for _, mr := range res.GetMembers() {
					if mr.GetError() != "" {
						fmt.Fprintf(w, "%s: not reloaded: %s\n", mr.GetMember(), mr.GetError())
						continue
					}
					fmt.Fprintf(w, "%s: %s (sha256 %s)\n", mr.GetMember(), mr.GetFile(), short(mr.GetDigest()))
					if len(mr.GetChanges()) == 0 {
						fmt.Fprintln(w, "  no change")
					}
					for _, ch := range mr.GetChanges() {
						fmt.Fprintf(w, "  %s\n", ch)
					}
				}
			}}); err != nil {
				return err
			}
			if !res.GetConsistent() {
				return errors.New("the members' overrides files differ (or a member did not reload): see above")
			}
			return nil
		},
	}
}

func short(digest string) string {
	if len(digest) > 12 {
		return digest[:12]
	}
	return digest
}
