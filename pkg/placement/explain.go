package placement

import (
	"fmt"
	"strings"
)

// Rule names one placement rule. Hard rules refuse a node; the
// anti-affinity rules only rank it lower and, when the chosen node breaks
// them, become a Degradation. Rules are evaluated in the order listed, so a
// node's first refusal is always the same.
type Rule string

// The rules, in evaluation order.
const (
	RulePin          Rule = "pin"
	RuleExclusion    Rule = "exclusion"
	RulePool         Rule = "pool"
	RuleSelector     Rule = "selector"
	RuleRuntime      Rule = "runtime"
	RuleSpare        Rule = "spare"
	RuleCapability   Rule = "capability"
	RuleGPU          Rule = "gpu"
	RuleCores        Rule = "cores"
	RuleCapacity     Rule = "capacity"
	RulePriorityBand Rule = "priorityBand"
	RuleCoLocateWith Rule = "coLocateWith"
	RuleSeparateFrom Rule = "separateFrom"
	RuleSameNode     Rule = "antiAffinity.sameNode"
	RuleSameAz       Rule = "antiAffinity.sameAz"
	RuleSameCloud    Rule = "antiAffinity.sameCloud"
)

// ruleOrder gives each hard rule its position, for summaries.
var ruleOrder = []Rule{RulePin, RuleExclusion, RulePool, RuleSelector, RuleRuntime, RuleSpare, RuleCapability, RuleGPU,
	RuleCores, RuleCapacity, RulePriorityBand, RuleCoLocateWith, RuleSeparateFrom}

// ReasonNoCapacity is Result.Reason when no node passes every hard rule.
const ReasonNoCapacity = "noCapacityInAnyPool"

// Refusal is one rule refusing one node, with a sentence saying why.
type Refusal struct {
	Rule   Rule
	Reason string
}

// NodeVerdict is what placement made of one node.
type NodeVerdict struct {
	NodeID string
	// Tier is the node's position among the request pool's tiers (-1 when
	// the node is in none of them).
	Tier int
	// Chosen marks the node the job was placed on.
	Chosen bool
	// Refusals lists every hard rule the node fails, in rule order; empty
	// means the node was eligible.
	Refusals []Refusal
	// Notes say how an eligible node ranked: anti-affinity it would break,
	// spare status, spread count, capacity left.
	Notes []string
}

// Explanation is the per-node account of one placement, in node-ID order.
type Explanation struct {
	Nodes []NodeVerdict
}

// String renders the explanation one line per node, stable across runs.
func (e *Explanation) String() string {
	if e == nil {
		return ""
	}
	var b strings.Builder
	for _, v := range e.Nodes {
		switch {
		case v.Chosen:
			fmt.Fprintf(&b, "%s: chosen", v.NodeID)
		case len(v.Refusals) == 0:
			fmt.Fprintf(&b, "%s: eligible, not chosen", v.NodeID)
		default:
			fmt.Fprintf(&b, "%s: refused", v.NodeID)
		}
		for _, r := range v.Refusals {
			fmt.Fprintf(&b, "; %s: %s", r.Rule, r.Reason)
		}
		for _, n := range v.Notes {
			fmt.Fprintf(&b, "; %s", n)
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// Degradation is a soft rule the chosen node breaks because no eligible
// node complied.
type Degradation struct {
	Rule   Rule
	Reason string
}

// RuleCount is how many nodes a rule refused first.
type RuleCount struct {
	Rule  Rule
	Nodes int
}

// Result is the outcome of one placement.
type Result struct {
	// NodeID is the chosen node; "" = none (see Reason).
	NodeID string
	// Tier is the chosen node's tier (-1 when none).
	Tier int
	// GPU is the index of the chosen node's GPU the job's GPU capacity is
	// taken from: the lowest-numbered GPU of the model with room. -1 when
	// the job needs no GPU or was not placed.
	GPU int
	// Reason is ReasonNoCapacity when nothing fits, else "".
	Reason string
	// Degradations lists the FORBID rules the chosen node breaks.
	Degradations []Degradation
	// Refused counts, per rule in rule order, the nodes it refused first.
	Refused []RuleCount
	// Eligible is the number of nodes that passed every hard rule.
	Eligible int
	// Explanation is the per-node account, when Request.Explain is set.
	Explanation *Explanation
}

// Summary is a one-line account of the result for logs and `job why`.
func (r Result) Summary() string {
	var b strings.Builder
	if r.NodeID == "" {
		b.WriteString(r.Reason)
	} else {
		fmt.Fprintf(&b, "placed on %s (tier %d)", r.NodeID, r.Tier)
	}
	fmt.Fprintf(&b, "; %d eligible", r.Eligible)
	for _, c := range r.Refused {
		fmt.Fprintf(&b, "; %d refused by %s", c.Nodes, c.Rule)
	}
	for _, d := range r.Degradations {
		fmt.Fprintf(&b, "; degraded %s: %s", d.Rule, d.Reason)
	}
	return b.String()
}
