// The console's pages: each returns the element the page shows, from fresh
// data of norsk-mgr's API.
import { h, api, act, can, state, refresh } from "./app.js";

const short = (s, p) => (s || "").replace(p, "").toLowerCase().replace(/_([a-z])/g, (_, c) => c.toUpperCase());
const phase = (p) => short(p || "INSTANCE_PHASE_UNSPECIFIED", "INSTANCE_PHASE_");
const nodeState = (s) => short(s, "NODE_STATE_");
const migPhase = (p) => short(p, "MIGRATION_PHASE_");
const strategy = (s) => short(s || "MIGRATION_STRATEGY_STOP_THEN_START", "MIGRATION_STRATEGY_");
const pill = (text, cls) => h("span", { class: "pill " + (cls || text) }, text);
const when = (ts) => (ts ? new Date(ts).toLocaleString() : "—");
const ago = (ts) => {
  if (!ts) return "—";
  const s = Math.round((Date.now() - new Date(ts).getTime()) / 1000);
  return s < 60 ? s + " s ago" : s < 3600 ? Math.round(s / 60) + " min ago" : Math.round(s / 3600) + " h ago";
};
const table = (head, rows, attrs) => h("div", { class: "tablewrap" }, h("table", attrs || {}, h("thead", {}, h("tr", {}, head.map((c) => h("th", { scope: "col" }, c)))), h("tbody", {}, rows)));
const tags = (t) => Object.entries(t || {}).map(([k, v]) => h("span", { class: "pill" }, k + "=" + v, " "));

function jobPhase(jh) {
  const j = jh.job || {};
  if (j.terminalState && j.terminalState.kind === "TERMINAL_KIND_FAILED") return "failed";
  const ins = jh.instances || [];
  if (!ins.length) return "idle";
  const rank = { running: 5, prepared: 4, provisioned: 3, stopping: 2, stopped: 1 };
  return ins.map((i) => phase(i.phase)).sort((a, b) => (rank[b] || 0) - (rank[a] || 0))[0];
}

function ports(inst) {
  const out = [];
  for (const [svc, pm] of Object.entries(inst.servicePortMappings || {})) {
    for (const m of pm.mappings || []) out.push(svc + " " + (m.target || "") + " → " + m.url);
  }
  return out.length ? out.join(", ") : "—";
}

// The phases of a migration, in order, by strategy.
const phasesOf = {
  stopThenStart: ["placing", "launching", "stoppingSource", "startingTarget", "done"],
  overlap: ["placing", "launching", "stoppingSource", "done"],
  handover: ["proposing", "placing", "launching", "settingStateOnTarget", "awaitingTargetReady", "awaitingSourceStop", "applying", "stoppingSource", "done"],
};

export function phaseBar(m) {
  const cur = migPhase(m.phase);
  const list = phasesOf[strategy(m.strategy)] || phasesOf.stopThenStart;
  const seen = new Set((m.phaseHistory || []).map((e) => migPhase(e.phase)));
  const idx = list.indexOf(cur);
  const bar = h("div", { class: "phasebar " + (cur === "done" ? "done" : cur === "aborted" ? "aborted" : ""), role: "progressbar",
    "aria-valuemin": 0, "aria-valuemax": list.length, "aria-valuenow": idx + 1, "aria-valuetext": cur, "data-phase": cur, "data-migration": m.migrationId });
  for (const p of list) {
    const i = list.indexOf(p);
    const cls = p === cur ? "current" : (idx >= 0 && i < idx) || (cur === "aborted" && seen.has(p)) ? "past" : "";
    bar.append(h("span", { class: cls }, p));
  }
  if (cur === "aborted") bar.append(h("span", { class: "current" }, "aborted"));
  return bar;
}

function migrationRow(m) {
  const cur = migPhase(m.phase);
  const final = cur === "done" || cur === "aborted";
  return h("tr", { "data-migration": m.migrationId },
    h("td", {}, h("a", { href: "#/job/" + encodeURIComponent(m.sourceJobId) }, m.sourceJobId), h("div", { class: "muted" }, m.migrationId.slice(0, 8))),
    h("td", {}, strategy(m.strategy)),
    h("td", {}, (m.sourceNodeId || "?") + " → " + (m.targetNodeId || "…")),
    h("td", { style: "min-width:320px" }, phaseBar(m), m.abortReason ? h("div", { class: "error" }, m.abortReason) : null, m.pastPointOfNoReturn ? h("div", { class: "muted" }, "past the point of no return") : null),
    h("td", {}, when(m.startedAt)),
    h("td", {}, can("operator") && !final ? h("button", { class: "danger", "data-action": "abort", onclick: () => act("abort", "/api/migrations/" + m.migrationId + "/abort") }, "Abort") : null,
      can("operator") && final ? h("button", { "data-action": "forget", onclick: () => act("forget", "/api/migrations/" + m.migrationId + "/forget") }, "Forget") : null));
}

async function overview() {
  const o = await api("/api/overview");
  const c = o.cluster || {};
  const card = (title, big, extra) => h("div", { class: "card" }, h("div", { class: "muted" }, title), h("div", { class: "big" }, big), extra || null);
  const byPhase = Object.entries(o.jobs.byPhase || {}).map(([k, v]) => h("div", {}, pill(k), " ", v));
  const byState = Object.entries(o.nodesByState || {}).map(([k, v]) => h("div", {}, pill(k), " ", v));
  return h("section", {},
    h("h1", {}, "Overview"),
    h("div", { class: "cards" },
      card("Cluster health", c.quorumHealthy ? pill("healthy", "ok") : pill("unhealthy", "bad"), h("div", { class: "muted" }, "quorum " + (c.votersReachable || 0) + "/" + (c.voters || 0) + " (needs " + (c.quorum || 0) + ")")),
      card("Primary", c.primary || "none", h("div", { class: "muted" }, "generation " + (c.generation || 0) + ", term " + (c.term || 0))),
      card("Nodes", o.nodes, byState),
      card("Jobs", h("span", { id: "job-count" }, o.jobs.jobs), byPhase),
      card("Migrations in flight", o.migrationsInFlight)),
    h("h2", {}, "Active alerts"),
    o.alerts.length ? h("ul", { class: "alerts" }, o.alerts.map((a) => h("li", { class: a.level }, pill(a.level), " ", a.link ? h("a", { href: a.link }, a.text) : a.text))) : h("p", { class: "muted", id: "no-alerts" }, "Nothing needs attention."));
}

async function jobs(_, params) {
  const qs = new URLSearchParams();
  for (const k of ["q", "tag", "from", "to", "after"]) if (params[k]) qs.set(k, params[k]);
  const res = await api("/api/jobs?" + qs);
  const input = (name, label, type) => h("label", {}, label, h("input", { id: "search-" + name, name, type: type || "text", value: params[name] || "" }));
  const form = h("form", { class: "inline", role: "search", onsubmit: (e) => {
    e.preventDefault();
    const q = new URLSearchParams();
    for (const el of form.querySelectorAll("input")) if (el.value) q.set(el.name, el.value);
    location.hash = "#/jobs?" + q;
  } }, input("q", "Id (regex)"), input("tag", "Tag (k=v, k, !k, k~re)"), input("from", "Created from", "date"), input("to", "Created to", "date"), h("button", { type: "submit" }, "Search"));
  const rows = res.jobs.map((jh) => {
    const j = jh.job;
    const ph = jobPhase(jh);
    const nodes = (jh.instances || []).map((i) => i.role + "@" + i.nodeId).join(", ");
    return h("tr", { "data-job": j.jobId }, h("td", {}, h("a", { href: "#/job/" + encodeURIComponent(j.jobId) }, j.jobId)), h("td", {}, j.description || ""),
      h("td", {}, pill(ph)), h("td", {}, nodes || "—"), h("td", {}, tags(j.tags)));
  });
  const next = res.next ? h("a", { href: "#/jobs?" + new URLSearchParams({ ...params, after: res.next }), id: "next-page" }, "Next page →") : null;
  return h("section", {}, h("h1", {}, "Jobs"), form,
    table(["Job", "Description", "Phase", "Instances", "Tags"], rows, { id: "jobs-table" }),
    h("div", { class: "pager" }, params.after ? h("a", { href: "#/jobs" }, "← First page") : null, next, h("span", { class: "muted" }, res.jobs.length + " shown")));
}

async function job(id) {
  const [res, nodeList] = await Promise.all([api("/api/jobs/" + encodeURIComponent(id)), api("/api/nodes")]);
  const jh = res.job, j = jh.job;
  const nodes = nodeList.nodes.map((n) => n.node);
  const actions = [];
  const insts = jh.instances || [];
  if (can("operator")) {
    const strat = h("select", { id: "migrate-strategy", "aria-label": "Strategy" }, ["stopThenStart", "overlap", "handover"].map((s) => h("option", { value: s }, s)));
    const target = h("select", { id: "migrate-target", "aria-label": "Target node" }, h("option", { value: "" }, "placement chooses"), nodes.map((n) => h("option", { value: n.nodeId }, n.nodeId)));
    const running = insts.some((i) => phase(i.phase) === "running");
    if (running) {
      actions.push(h("form", { class: "inline", onsubmit: (e) => { e.preventDefault(); act("migrate " + id, "/api/jobs/" + encodeURIComponent(id) + "/migrate", { strategy: strat.value, target: target.value }); } },
        h("label", {}, "Strategy", strat), h("label", {}, "Target", target), h("button", { class: "primary", type: "submit", "data-action": "migrate" }, "Migrate")));
    }
    const startNode = h("select", { id: "start-node", "aria-label": "Node" }, nodes.map((n) => h("option", { value: n.nodeId }, n.nodeId)));
    const role = h("input", { id: "start-role", value: "primary", size: 10, "aria-label": "Role" });
    actions.push(h("form", { class: "inline", onsubmit: (e) => { e.preventDefault(); act("start " + id, "/api/jobs/" + encodeURIComponent(id) + "/start", { role: role.value, node: startNode.value }); } },
      h("label", {}, "Role", role), h("label", {}, "Node", startNode), h("button", { type: "submit", "data-action": "start" }, "Start")));
  }
  const instRows = insts.map((i) => h("tr", { "data-role": i.role }, h("td", {}, i.role), h("td", {}, i.nodeId), h("td", {}, pill(phase(i.phase))), h("td", {}, ports(i)), h("td", {}, i.fencingToken),
    h("td", {}, can("operator") && phase(i.phase) !== "stopped" ? h("button", { class: "danger", "data-action": "stop", onclick: () => act("stop " + id, "/api/jobs/" + encodeURIComponent(id) + "/stop", { role: i.role, node: i.nodeId }) }, "Stop") : null)));
  const timeline = h("ol", { class: "timeline", id: "timeline" }, (jh.history || []).map((e) => {
    const kinds = ["created", "updated", "provisioned", "prepared", "running", "stopping", "stopped", "completed", "rejected"];
    const [kind, body] = Object.entries(e).find(([k]) => kinds.includes(k)) || ["?", {}];
    const ts = e.timestamp || (body && body.timestamp);
    const what = [kind, body && body.role, body && body.nodeId && "on " + body.nodeId, body && body.reason && "(" + short(body.reason, "STOPPING_REASON_") + ")", body && body.additionalReason].filter(Boolean).join(" ");
    return h("li", { class: kind }, h("strong", {}, what), " ", h("span", { class: "muted" }, when(ts)));
  }));
  const explain = h("div", { id: "explain" }, h("button", { onclick: async () => {
    try {
      const x = await api("/api/jobs/" + encodeURIComponent(id) + "/explain" + (insts[0] ? "?role=" + encodeURIComponent(insts[0].role) : ""));
      explain.replaceChildren(h("p", {}, x.summary || ""), table(["Node", "Chosen", "Tier", "Rules"], (x.nodes || []).map((n) => h("tr", {}, h("td", {}, n.nodeId), h("td", {}, n.chosen ? pill("chosen", "ok") : ""), h("td", {}, n.tier || 0),
        h("td", {}, (n.refusals || []).map((r) => h("div", {}, pill(r.rule, "bad"), " ", r.reason)), (n.notes || []).map((t) => h("div", { class: "muted" }, t)))))));
    } catch (e) { explain.replaceChildren(h("p", { class: "error" }, e.message)); }
  } }, "Explain placement"));
  return h("section", {}, h("h1", {}, "Job ", h("span", { id: "job-id" }, j.jobId)), h("p", {}, j.description || "", " ", tags(j.tags)),
    actions, h("h2", {}, "Instances"), table(["Role", "Node", "Phase", "Ports", "Token", ""], instRows, { id: "instances" }),
    res.migrations.length ? [h("h2", {}, "Migrations"), table(["Job", "Strategy", "Move", "Phase", "Started", ""], res.migrations.map(migrationRow), { id: "job-migrations" })] : null,
    h("div", { class: "row" }, h("div", {}, h("h2", {}, "History"), timeline), h("div", {}, h("h2", {}, "Placement"), explain)));
}

async function bundles() {
  const res = await api("/api/bundles");
  const rows = res.bundles.flatMap((b) => (b.jobs || []).map((j, i) => h("tr", {},
    i === 0 ? h("td", { rowspan: b.jobs.length }, b.bundle.bundleId, h("div", { class: "muted" }, "pool " + (b.bundle.pool || "—"))) : null,
    h("td", {}, j.jobName), h("td", {}, j.replicaIndex || 0), h("td", {}, j.role || "—"), h("td", {}, j.dormant ? pill("dormant", "paused") : pill(phase(j.phase))),
    h("td", {}, j.nodeId || "—"), h("td", {}, (j.degradations || []).map((d) => h("div", {}, pill("degraded", "warning"), " ", d))))));
  return h("section", {}, h("h1", {}, "Bundles"), res.bundles.length ? table(["Bundle", "Job", "Replica", "Role", "State", "Node", "Degradations"], rows) : h("p", { class: "muted" }, "No bundles."));
}

async function migrations() {
  const res = await api("/api/migrations");
  return h("section", {}, h("h1", {}, "Migrations"),
    res.migrations.length ? table(["Job", "Strategy", "Move", "Phase", "Started", ""], res.migrations.map(migrationRow), { id: "migrations-table" }) : h("p", { class: "muted" }, "No migrations."));
}

// drainStart is the most instances seen on each draining node: a drain's
// progress is how many of them have left.
const drainStart = {};

async function nodes() {
  const res = await api("/api/nodes");
  const drains = res.nodes.filter((n) => n.node.draining);
  const row = (n) => {
    const x = n.node, hw = x.hardware || {}, load = x.load || {};
    const cpu = load.cpuPercent || 0;
    const tagForm = can("operator") ? h("form", { class: "inline", onsubmit: (e) => { e.preventDefault(); const [k, v] = e.target.elements.tag.value.split("="); act("tag " + x.nodeId, "/api/nodes/" + x.nodeId + "/tags", { tags: { [k]: v || "" } }); } },
      h("input", { name: "tag", placeholder: "key=value", size: 12, "aria-label": "Tag " + x.nodeId }), h("button", { type: "submit", "data-action": "tag" }, "Tag")) : null;
    const held = x.heldImages || [];
    const shortRef = (r) => r.replace(/^docker\.io\/(library\/)?/, "");
    const images = h("td", { "data-images": held.length }, held.length ? h("details", {}, h("summary", {}, held.length + " image(s)"),
      h("ul", {}, held.map((i) => h("li", { title: (i.digest || "") + (i.lastUsed ? " — last used " + ago(i.lastUsed) : "") }, shortRef(i.ref))))) : "—");
    const prefetchForm = can("operator") && x.runtime !== "process" ? h("form", { class: "inline", onsubmit: (e) => { e.preventDefault(); const refs = e.target.elements.images.value.split(/[\s,]+/).filter(Boolean); if (refs.length) act("prefetch on " + x.nodeId, "/api/nodes/" + x.nodeId + "/prefetch", { images: refs }); } },
      h("input", { name: "images", placeholder: "registry/repo:tag …", size: 18, "aria-label": "Images to prefetch on " + x.nodeId }), h("button", { type: "submit", "data-action": "prefetch" }, "Prefetch")) : null;
    return h("tr", { "data-node": x.nodeId },
      h("td", {}, x.nodeId, h("div", { class: "muted" }, x.provider || "", x.elastic ? " (elastic)" : "")),
      h("td", {}, pill(x.draining ? "draining" : nodeState(x.state)), x.connected ? "" : h("div", { class: "muted" }, "not connected")),
      h("td", {}, (hw.vcpus || 0) + " vCPU, " + Math.round((hw.memoryBytes || 0) / 2 ** 30) + " GiB", h("div", { class: "bar", title: "CPU " + Math.round(cpu) + "%" }, h("span", { style: "width:" + Math.min(100, cpu) + "%" }))),
      h("td", {}, n.running + " running / " + (x.instances || []).length + " bound"),
      h("td", {}, tags(x.tags), x.tags && x.tags.spare === "true" ? pill("spare", "ok") : null),
      images,
      h("td", {}, n.idleExpiry ? "idle expiry " + Math.round((n.idleExpiry.effectiveIdleExpiryMs || 0) / 1000) + " s" : "—"),
      h("td", {}, can("operator") ? [h("button", { "data-action": x.draining ? "undrain" : "drain", onclick: () => act((x.draining ? "undrain " : "drain ") + x.nodeId, "/api/nodes/" + x.nodeId + "/drain", { draining: !x.draining }) }, x.draining ? "Undrain" : "Drain"), tagForm, prefetchForm] : null));
  };
  return h("section", {}, h("h1", {}, "Nodes"),
    drains.length ? [h("h2", {}, "Drains"), h("ul", { id: "drains" }, drains.map((n) => {
      const left = (n.node.instances || []).length;
      const first = (drainStart[n.node.nodeId] = Math.max(drainStart[n.node.nodeId] || 0, left));
      const done = first ? Math.round((100 * (first - left)) / first) : 100;
      return h("li", { "data-node": n.node.nodeId }, n.node.nodeId + ": " + left + " of " + first + " instance(s) left" + (left ? "" : " — drained"),
        h("div", { class: "bar", role: "progressbar", "aria-valuenow": done, "aria-valuemin": 0, "aria-valuemax": 100 }, h("span", { style: "width:" + done + "%" })));
    }))] : null,
    table(["Node", "State", "Capacity / load", "Jobs", "Tags", "Images", "Idle expiry", ""], res.nodes.map(row), { id: "nodes-table" }));
}

async function cluster() {
  const res = await api("/api/cluster");
  const st = res.status || {};
  const rows = (st.members || []).map((m) => h("tr", { "data-member": m.name }, h("td", {}, m.name), h("td", {}, pill(short(m.role, "MEMBER_ROLE_"))), h("td", {}, m.reachable ? pill("reachable", "ok") : pill("unreachable", "bad"), m.detail ? h("div", { class: "muted" }, m.detail) : null),
    h("td", {}, m.generation || 0), h("td", {}, m.appliedIndex || 0), h("td", {}, m.controlPlaneUrl ? [h("a", { href: m.controlPlaneUrl }, m.controlPlaneUrl), " ", m.controlPlaneStale ? pill("stale") : pill("fresh", "ok"), h("div", { class: "muted" }, "announced " + ago(m.controlPlaneAnnouncedAt))] : "—"),
    h("td", {}, res.lease && res.lease.member === m.name ? pill("active", "ok") : m.controlPlaneUrl ? pill("standby", "") : "")));
  const evs = ((res.events || {}).events || []).map((e) => h("tr", {}, h("td", {}, when(e.at)), h("td", {}, e.kind), h("td", {}, e.detail || e.message || "")));
  const self = res.self;
  return h("section", {}, h("h1", {}, "Cluster members"),
    h("p", {}, "Primary ", h("strong", {}, st.primary || "none"), ", generation " + (st.generation || 0) + ", quorum " + (st.votersReachable || 0) + "/" + (st.voters || 0) + " ", st.quorumHealthy ? pill("healthy", "ok") : pill("unhealthy", "bad")),
    table(["Member", "Role", "Reachable", "Generation", "Applied index", "norsk-mgr", ""], rows, { id: "members" }),
    h("p", { id: "self", "data-holder": res.lease ? res.lease.member : "" }, "This console is served by the norsk-mgr of ", h("strong", {}, self.member), ", ", self.active ? pill("active", "ok active") : pill("standby"), res.lease ? " — the lease is held by " + res.lease.member + " since " + when(res.lease.since) + (res.lease.takeover ? " (" + res.lease.takeover + ")" : "") : "",
      h("div", { class: "muted" }, "role-store replica: " + (self.published.replica || "—") + "; discovery fleet: " + (self.published.fleet || "—"))),
    h("h2", {}, "Cluster events of " + ((res.events || {}).member || "this member")), table(["At", "Kind", "Detail"], evs));
}

async function leases() {
  const ls = await api("/api/leases");
  const reason = h("input", { id: "pause-reason", placeholder: "reason", "aria-label": "Reason" });
  const ctl = can("operator") ? (ls.paused ? h("button", { "data-action": "resume", onclick: () => act("resume leases", "/api/leases/resume") }, "Resume leases")
    : h("form", { class: "inline", onsubmit: (e) => { e.preventDefault(); act("pause leases", "/api/leases/pause", { reason: reason.value }); } }, reason, h("button", { type: "submit", "data-action": "pause" }, "Pause leases"))) : null;
  const rows = (ls.leases || []).map((l) => h("tr", {}, h("td", {}, l.jobId), h("td", {}, l.role), h("td", {}, l.nodeId), h("td", {}, ago(l.refreshedAt)), h("td", {}, l.expired ? pill("expired", "bad") : when(l.expiresAt))));
  return h("section", {}, h("h1", {}, "Leases"),
    h("p", {}, ls.paused ? [pill("paused"), " by " + (ls.by || "?") + " since " + when(ls.since) + ": " + (ls.reason || "")] : pill("running", "ok")), ctl,
    table(["Job", "Role", "Node", "Refreshed", "Expires"], rows));
}

// lastVerify is the last client-side verification of the chain (kept across
// the page's live refreshes).
let lastVerify = null;

async function audit(_, params) {
  const qs = new URLSearchParams();
  if (params.before) qs.set("before", params.before);
  const page = await api("/api/audit?" + qs);
  const shown = (v) => [v.ok ? pill("chain verified", "ok") : pill("chain broken", "bad"), " " + v.checked + " entries (" + v.firstSeq + "–" + v.lastSeq + ") at " + v.at.toLocaleTimeString() + (v.broken ? ": " + v.broken : "")];
  const verify = h("div", { id: "verify" }, h("button", { "data-action": "verify", onclick: async () => {
    verify.replaceChildren("verifying…");
    try {
      lastVerify = { ...(await api("/api/audit/verify")), at: new Date() };
      document.getElementById("verify").replaceChildren(...shown(lastVerify));
    } catch (e) { document.getElementById("verify").replaceChildren(h("span", { class: "error" }, e.message)); }
  } }, "Verify the chain now"), lastVerify ? [" ", shown(lastVerify)] : null);
  const rows = (page.entries || []).map((e) => h("tr", {}, h("td", {}, e.seq), h("td", {}, when(e.timestampMs)), h("td", {}, e.source), h("td", {}, e.kind), h("td", {}, e.caller || e.by || ""), h("td", { class: "kv" }, e.payload || "")));
  return h("section", {}, h("h1", {}, "Audit log"),
    h("p", {}, "At its last boot the Manager ", page.chainVerifiedAtBoot ? pill("verified the chain", "ok") : pill("could not verify the chain", "bad"), " ", page.verificationDetail || ""), verify,
    table(["Seq", "At", "Source", "Kind", "Caller", "Payload"], rows, { id: "audit-table" }),
    page.nextBeforeSeq && page.nextBeforeSeq !== "0" ? h("div", { class: "pager" }, h("a", { href: "#/audit?before=" + page.nextBeforeSeq }, "Older →")) : null);
}

async function kv(_, params) {
  const ns = params.ns || "norsk-mgr";
  const res = await api("/api/kv?" + new URLSearchParams({ ns, prefix: params.prefix || "" }));
  const form = h("form", { class: "inline", onsubmit: (e) => { e.preventDefault(); location.hash = "#/kv?" + new URLSearchParams({ ns: form.elements.ns.value, prefix: form.elements.prefix.value }); } },
    h("label", {}, "Namespace", h("input", { name: "ns", value: ns })), h("label", {}, "Key prefix", h("input", { name: "prefix", value: params.prefix || "" })), h("button", { type: "submit" }, "Browse"));
  const rows = res.entries.map((e) => h("tr", {}, h("td", {}, e.key), h("td", {}, e.revision), h("td", { class: "kv" }, e.redacted ? h("em", { class: "muted" }, "(secret, not shown)") : e.value)));
  return h("section", {}, h("h1", {}, "KV store"), form, h("p", { class: "muted" }, "schema version " + res.schemaVersion), table(["Key", "Revision", "Value"], rows, { id: "kv-table" }));
}

async function discovery() {
  const d = await api("/api/discovery");
  const rows = d.replicas.map((r) => h("tr", {}, h("td", {}, r.member), h("td", {}, r.discovery), h("td", {}, r.rotation || "—"), h("td", {}, r.secrets), h("td", {}, ago(r.updated))));
  const waiting = d.waitingFor.length;
  const step = d.next && can("admin") ? h("button", { class: "primary", "data-action": "rotate-" + d.next, disabled: waiting > 0,
    onclick: () => act("rotation " + d.next, "/api/discovery/rotate", { step: d.next }) }, "Rotation: " + d.next) : null;
  return h("section", {}, h("h1", {}, "Discovery fleet"),
    d.published ? h("p", {}, "Addresses: " + (d.addresses || []).join(", ") + ". Rotation phase: ", pill(d.rotationPhase || "none")) : h("p", { class: "muted" }, "No fleet published yet."),
    step, waiting ? h("p", { class: "muted", id: "rotation-wait" }, "Waiting for " + d.waitingFor.join(", ") + " to take the last step (each replica reads the fleet every " + d.interval + ").") : null,
    table(["Replica (member)", "Address", "Rotation step taken", "Secrets accepted", "Recorded"], rows));
}

async function users() {
  const res = await api("/api/users");
  const admin = can("admin");
  const rows = res.users.map((u) => h("tr", { "data-user": u.name }, h("td", {}, u.name), h("td", {}, admin ? h("select", { "aria-label": "Role of " + u.name, onchange: (e) => act("role of " + u.name, "/api/users/" + u.name + "/role", { role: e.target.value }) },
    res.roles.map((r) => h("option", { value: r, selected: r === u.role }, r))) : u.role), h("td", {}, when(u.updated)),
    h("td", {}, admin && u.name !== state.session.user ? h("button", { class: "danger", onclick: () => act("remove " + u.name, "/api/users/" + u.name + "/remove") }, "Remove") : null)));
  const add = admin ? h("form", { class: "inline", id: "add-user", onsubmit: (e) => { e.preventDefault(); const f = e.target.elements; act("add " + f.name.value, "/api/users", { name: f.name.value, role: f.role.value, password: f.password.value }); } },
    h("label", {}, "Name", h("input", { name: "name", required: true })), h("label", {}, "Role", h("select", { name: "role" }, res.roles.map((r) => h("option", { value: r }, r)))),
    h("label", {}, "Password", h("input", { name: "password", type: "password", required: true, minlength: 8, autocomplete: "new-password" })), h("button", { type: "submit" }, "Add user")) : null;
  return h("section", {}, h("h1", {}, "Users"), h("p", { class: "muted" }, "Role store version " + res.version + " (published to every worker as the role-store replica)."), add, table(["User", "Role", "Updated", ""], rows, { id: "users-table" }));
}

export const pages = { overview, jobs, job, bundles, migrations, nodes, cluster, leases, audit, kv, discovery, users };
