// Package placement chooses a node for a job instance: the one placement
// path the AutoManager takes for first placement, recovery and migration
// targets (DESIGN §7).
//
// # Contract
//
// Placement is pure and deterministic: no I/O, no clock, no randomness, no
// goroutines. Place(cfg, nodes, allocations, request) — or State.Place on an
// indexed State — gives the same Result for the same input, whatever the
// order of the nodes and allocations slices, and whether or not the request
// asks for an explanation. The package holds its own small input types
// (Node, Request, Allocation, Config); NodeFromProto and
// RequirementsFromProto convert the API's. Binding the result (raft,
// provisioning a node when nothing fits) is the caller's.
//
// For throughput, NewState indexes nodes and allocations once; Place reads
// it, Commit and Remove update it incrementally, and PlaceBatch places many
// requests in order, committing each. Nodes alike in everything but their
// ID form a class, and per request shape the State keeps an index
// (decision 0054): the nodes that pass the static rules, grouped by what
// their rank shares (tier, spare preference, images, spread value, zone and
// cloud when FORBID sameAz / sameCloud applies), each group a segment tree
// over free CPU whose root is its best node, with every node's refusal by
// the dynamic rules kept exact on Commit and Remove. A placement without an
// explanation therefore costs time proportional to the number of such
// groups plus the placed jobs of the request's bundle — not to the number
// of nodes, nor of allocations (spread counts are kept per attribute value
// as bindings are committed). Its refusal counts and eligible count are
// read from the index, not recounted. A shape's first placement builds its
// index: one static check per class and a constant per node. A Commit or
// Remove costs the number of indexed shapes times the trees' depth. A
// request that asks for an explanation falls back to the full scan, one
// verdict per node, and gives the same Result otherwise.
//
// # Rules
//
// Hard rules refuse a node; they are evaluated in this order and each
// refusal carries a sentence (Explanation, Result.Refused):
//
//   - pin: Request.PinNode, when set, is the only candidate.
//   - exclusion: Request.Exclude (unhealthy, recently failed, the node the
//     job failed on, a migration's source), with the caller's reason; and
//     every node marked Node.Unavailable (not online, draining), with its
//     reason unless the request's Exclude gives one. Unavailable nodes are
//     refused once per State, not per request: the index leaves them out.
//   - pool: the node's Pool must be one of the request pool's tiers
//     (Config.Pools, cheapest first; an unlisted pool is its own single
//     tier; Request.Pool "" = every node as one tier).
//   - selector: Request.NodeSelector attributes must be equal.
//   - runtime: the node's runtime must run every one of Request.Services:
//     docker runs services with an image (a command overrides its
//     entrypoint), process runs services with a command (an image is
//     ignored); a node that does not say its runtime runs anything
//     (RuntimeRuns).
//   - spare: an exclusive hot spare takes only the templates it is reserved
//     for, unless Request.OverrideReservation.
//   - capability: each required capability with its count, free after the
//     node's allocations (Config.PresenceCapabilities are only required,
//     not consumed).
//   - gpu: one GPU of the required model (any when unset) with the
//     required capacity free.
//   - cores: exclusive cores held by allocations plus the job's ≤ vCPUs.
//   - capacity: CPU capacity is vCPUs × MilliUnitsPerVCPU/1000 reference
//     units (default 0.5 per vCPU: one 1080p30 H.264 medium encode on two
//     vCPUs). A job's CPU demand is max(requiredCapacity, requiredCores ×
//     units per vCPU), so exclusive cores also leave that much less for
//     shared jobs. The sum of demands never exceeds the capacity.
//   - priorityBand: Config.BandCeilings caps the utilisation a band may
//     bring a node to (e.g. bronze 80%), keeping headroom for higher bands
//     (unlisted bands: 100%). Bands do not rank and never preempt.
//   - coLocateWith: must share the node of every placed job of the same
//     replica it is co-located with (either side naming the other).
//   - separateFrom: must not share a node with a placed job of the same
//     replica it is separated from (either side naming the other).
//
// Eligible nodes are ranked, lexicographically:
//
//  1. anti-affinity: fewest FORBID rules broken against the other replicas
//     of the bundle, sameNode weighing more than sameAz more than
//     sameCloud. FORBID is thus honoured whenever an eligible compliant
//     node exists, in any tier; otherwise the job is placed and the result
//     carries a Degradation. An empty zone or cloud never matches.
//  2. recovery (Request.Recovery): hot spares first — those warm for or
//     reserved for the template before the others.
//  3. tier: the cheapest tier of the pool with an eligible node.
//  4. ordinary placement: non-spares first, then spares for the template,
//     then other spares.
//  5. spread (Request.Spread): the node whose attribute value holds the
//     fewest jobs of the spread group; nodes lacking the attribute last.
//  6. images: the node holding more of the job's images (Node.Images,
//     Service.ImageRef), so fewer to pull; process nodes pull none.
//  7. best fit (bin-packing): the least CPU left after placement.
//  8. the lowest node ID.
package placement
