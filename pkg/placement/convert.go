package placement

import (
	"strings"

	"github.com/distribution/reference"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
)

// The node tags placement reads (the spare tags are the daemon's own; see
// SetNodeTags).
const (
	TagPool        = "pool"
	TagZone        = "zone"
	TagCloud       = "cloud"
	TagSpare       = "spare"
	TagWarmFor     = "warmFor"
	TagReservedFor = "reservedFor"
	TagExclusive   = "exclusive"
)

// NodeFromProto is the placement view of an API node: Pool from the "pool"
// tag, Zone from "zone", Cloud from "cloud" (else the node's provider),
// Attributes = all tags, VCPUs, GPUs and capabilities from the worker's
// report, the worker's runtime, the images it holds (Images: each held
// ref, and its repository@digest form), and the hot-spare spec from spare=true with warmFor / reservedFor
// (comma-separated template names) and exclusive=true. It does not judge the
// node's state: the caller marks the nodes that are not online
// unavailable (Node.Unavailable, UnavailableReason) or leaves them out.
func NodeFromProto(n *managerv1.Node) Node {
	tags := n.GetTags()
	out := Node{
		ID:         n.GetNodeId(),
		Pool:       tags[TagPool],
		Zone:       tags[TagZone],
		Cloud:      tags[TagCloud],
		Attributes: make(map[string]string, len(tags)),
		VCPUs:      n.GetHardware().GetVcpus(),
		Runtime:    n.GetRuntime(),
	}
	if out.Cloud == "" {
		out.Cloud = n.GetProvider()
	}
	for k, v := range tags {
		out.Attributes[k] = v
	}
	for _, g := range n.GetHardware().GetGpus() {
		out.GPUs = append(out.GPUs, GPU{Model: g.GetModel(), Capacity: float64(g.GetCapacity())})
	}
	for _, c := range n.GetCapabilities() {
		out.Capabilities = append(out.Capabilities, Capability{Name: c.GetName(), Count: c.GetCount()})
	}
	for _, h := range n.GetHeldImages() {
		if r := NormalizeImageRef(h.GetRef()); r != "" {
			out.Images = append(out.Images, r)
			if d := h.GetDigest(); strings.HasPrefix(d, "sha256:") && !strings.Contains(r, "@") {
				out.Images = append(out.Images, imageRepo(r)+"@"+d)
			}
		}
	}
	if tags[TagSpare] == "true" {
		out.Spare = Spare{
			Enabled:     true,
			WarmFor:     splitList(tags[TagWarmFor]),
			ReservedFor: splitList(tags[TagReservedFor]),
			Exclusive:   tags[TagExclusive] == "true",
		}
	}
	return out
}

// RequirementsFromProto converts an API job's requirements
// (autoPlacement.requirements); nil gives the zero Requirements.
func RequirementsFromProto(r *managerv1.JobRequirements) Requirements {
	out := Requirements{
		Capacity:     r.GetRequiredCapacity(),
		Cores:        r.GetRequiredCores(),
		GPUCapacity:  float64(r.GetRequiredGpuCapacity()),
		GPUModel:     r.GetRequiredGpuModel(),
		PriorityBand: r.GetPriorityBand(),
	}
	for _, c := range r.GetRequiredCapabilities() {
		out.Capabilities = append(out.Capabilities, Capability{Name: c.GetName(), Count: c.GetCount()})
	}
	return out
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// NormalizeImageRef is an image reference as the Docker engine names it,
// with its registry and, when it has neither tag nor digest, the tag
// "latest" ("nginx" → "docker.io/library/nginx:latest"); "" for "". A ref
// that does not parse is returned as it is, so it matches only itself.
// Safe for concurrent use; answers are remembered (imageRefs).
func NormalizeImageRef(ref string) string {
	if ref == "" {
		return ""
	}
	if n, ok := imageRefs.get(ref); ok {
		return n
	}
	n := normalizeImageRef(ref)
	imageRefs.put(ref, n)
	return n
}

// normalizeImageRef is NormalizeImageRef, parsed every time.
func normalizeImageRef(ref string) string {
	named, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return ref
	}
	return reference.TagNameOnly(named).String()
}

// imageRepo is a normalised reference without its tag or digest.
func imageRepo(ref string) string {
	if i := strings.IndexByte(ref, '@'); i >= 0 {
		ref = ref[:i]
	}
	if i := strings.LastIndexByte(ref, ':'); i > strings.LastIndexByte(ref, '/') {
		ref = ref[:i]
	}
	return ref
}
