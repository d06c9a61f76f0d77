package automanager

import (
	"fmt"
	"strings"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/pkg/placement"
)

// ElasticType is an instance type a cloud tier creates nodes of, with what
// a create of it needs.
type ElasticType struct {
	// Name is the instance type (OCI: shape).
	Name string
	// VCPUs is a new node's capacity (the instance-type cache's vCPUs).
	VCPUs uint32
	// Region is the AWS region / OCI region; Zone an availability zone or
	// OCI availability domain ("" = the cloud's choice).
	Region string
	Zone   string
	// Fallbacks are the types (or "type@zone") a create tries, in order,
	// when the cloud has no capacity for this one.
	Fallbacks []string
	// SecurityGroups are worker security-group labels (aws); Subnet the
	// subnet ("" = the region's default); OCPUs and MemoryGBs size an OCI
	// flexible shape.
	SecurityGroups   []string
	Subnet           string
	OCPUs, MemoryGBs float32
	// Unavailable says why no node of this type can be made now (a
	// cloud-hypervisor host out of capacity); "" = it can.
	Unavailable string
}

func (t ElasticType) describe() string {
	where := t.Region
	if t.Zone != "" {
		where = t.Zone
	}
	return fmt.Sprintf("%s (%d vCPUs, %s)", t.Name, t.VCPUs, where)
}

// Rejection is a cheaper type that would not take an instance, and why.
type Rejection struct {
	Type   ElasticType
	Reason string
}

// chooseType is the cheapest of the tier's types an empty node of which
// takes req, with why each cheaper one would not; ok=false when none
// would (rejections then cover every type).
func chooseType(cfg placement.Config, et ElasticTier, req placement.Request) (ElasticType, []Rejection, bool) {
	var rej []Rejection
	for i, t := range et.Types {
		if t.Unavailable != "" {
			rej = append(rej, Rejection{Type: t, Reason: t.Unavailable})
			continue
		}
		node := placement.Node{
			ID: fmt.Sprintf("new %s node (%s)", et.Tier, t.Name), Pool: et.Tier, VCPUs: t.VCPUs, Zone: t.Zone, Cloud: et.Provider,
			Attributes: map[string]string{placement.TagPool: et.Tier},
		}
		r := req
		r.Exclude, r.PinNode, r.Explain = nil, "", true
		st, err := placement.NewState(cfg, []placement.Node{node}, nil)
		if err != nil {
			rej = append(rej, Rejection{Type: t, Reason: err.Error()})
			continue
		}
		res, err := st.Place(r)
		if err == nil && res.NodeID != "" {
			return et.Types[i], rej, true
		}
		rej = append(rej, Rejection{Type: t, Reason: refusalOf(res, err)})
	}
	return ElasticType{}, rej, false
}

// refusalOf is why a one-node placement failed.
func refusalOf(res placement.Result, err error) string {
	if err != nil {
		return err.Error()
	}
	if res.Explanation != nil && len(res.Explanation.Nodes) == 1 {
		var why []string
		for _, r := range res.Explanation.Nodes[0].Refusals {
			why = append(why, fmt.Sprintf("%s: %s", r.Rule, r.Reason))
		}
		if len(why) > 0 {
			return strings.Join(why, "; ")
		}
	}
	return res.Summary()
}

// rejectionsText renders why cheaper types would not do.
func rejectionsText(rej []Rejection) string {
	var parts []string
	for _, r := range rej {
		parts = append(parts, fmt.Sprintf("%s would not take it (%s)", r.Type.describe(), r.Reason))
	}
	return strings.Join(parts, "; ")
}

// ExplainElastic is what placement would create for an instance no node
// takes (req): the node of the cheapest type of the pool's cheapest
// elastic tier that takes it, and why cheaper types would not; when no
// tier's node would take it, why not (no instance type); nil when no
// elastic tier serves the pool.
func ExplainElastic(p Policy, req placement.Request) *managerv1.ElasticChoice {
	p.defaults()
	var last *managerv1.ElasticChoice // a tier that would not take it
	for _, et := range elasticTiersFor(req.Pool, p) {
		out := &managerv1.ElasticChoice{Provider: et.Provider, Tier: et.Tier}
		if len(et.Types) == 0 {
			out.Vcpus = et.VCPUs
			if _, _, ok := chooseType(p.Placement, ElasticTier{Tier: et.Tier, Provider: et.Provider, Types: []ElasticType{{Name: et.Provider, VCPUs: et.VCPUs}}}, req); !ok {
				out.Summary = fmt.Sprintf("a new node of elastic tier %s (%d vCPUs) would not take it either", et.Tier, et.VCPUs)
				last = out
				continue
			}
			out.Summary = fmt.Sprintf("a node would be created in elastic tier %s (%s, %d vCPUs)", et.Tier, et.Provider, et.VCPUs)
			return out
		}
		t, rej, ok := chooseType(p.Placement, et, req)
		for _, r := range rej {
			out.Cheaper = append(out.Cheaper, &managerv1.ElasticRejection{InstanceType: r.Type.Name, Vcpus: r.Type.VCPUs, Reason: r.Reason})
		}
		if !ok {
			out.Summary = fmt.Sprintf("no instance type of elastic tier %s would take it: %s", et.Tier, rejectionsText(rej))
			last = out
			continue
		}
		out.Region, out.InstanceType, out.Vcpus = t.Region, t.Name, t.VCPUs
		out.Summary = fmt.Sprintf("a %s node would be created in elastic tier %s (%s)", t.describe(), et.Tier, et.Provider)
		if len(rej) > 0 {
			out.Summary += "; " + rejectionsText(rej)
		}
		return out
	}
	return last
}

// elasticTiersFor are the elastic tiers of pool, cheapest first (pool "":
// every elastic tier).
func elasticTiersFor(pool string, p Policy) []ElasticTier {
	if pool == "" {
		return p.Elastic
	}
	tiers := p.Placement.Pools[pool]
	if len(tiers) == 0 {
		tiers = []string{pool}
	}
	var out []ElasticTier
	for _, t := range tiers {
		for _, et := range p.Elastic {
			if et.Tier == t {
				out = append(out, et)
			}
		}
	}
	return out
}
