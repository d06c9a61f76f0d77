// The Norsk Manager console: a hash-routed application over norsk-mgr's
// JSON API, kept live by its server-sent events. No build step.
import { pages } from "./pages.js";

export const state = { session: null, route: "", params: {} };

// h builds an element: h("a", {href: "#"}, "text", child, …). Text is
// always set as text, never parsed as HTML.
export function h(tag, attrs, ...kids) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "class") el.className = v;
    // Through the CSSOM: the Content-Security-Policy refuses style attributes.
    else if (k === "style") el.style.cssText = v;
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const k of kids.flat(Infinity)) {
    if (k === undefined || k === null || k === false) continue;
    el.append(k instanceof Node ? k : document.createTextNode(String(k)));
  }
  return el;
}

export async function api(path, opts = {}) {
  const init = { method: opts.method || "GET", headers: {}, credentials: "same-origin" };
  if (opts.body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(opts.body);
  }
  if (init.method !== "GET" && state.session) init.headers["X-CSRF-Token"] = state.session.csrf;
  const res = await fetch(path, init);
  let data = null;
  try { data = await res.json(); } catch { data = null; }
  if (res.status === 401 && path !== "/api/login") {
    state.session = null;
    render();
  }
  if (!res.ok) throw new Error((data && data.error) || res.statusText);
  return data;
}

export function toast(msg, err) {
  const t = h("div", { class: err ? "err" : "" }, msg);
  document.getElementById("toast").append(t);
  setTimeout(() => t.remove(), err ? 8000 : 4000);
}

// can says whether the signed-in user's role allows an action of role r.
export function can(r) {
  const rank = { viewer: 1, operator: 2, admin: 3 };
  return state.session && rank[state.session.role] >= rank[r];
}

// act runs an action, reports it, and re-renders the page.
export async function act(what, path, body) {
  try {
    const res = await api(path, { method: "POST", body: body || {} });
    toast(what + ": done");
    refresh();
    return res;
  } catch (e) {
    toast(what + ": " + e.message, true);
    return null;
  }
}

function parseRoute() {
  const hash = location.hash.replace(/^#/, "") || "/";
  const [path, query] = hash.split("?");
  const parts = path.split("/").filter(Boolean);
  const params = Object.fromEntries(new URLSearchParams(query || ""));
  return { name: parts[0] || "overview", arg: parts.slice(1).map(decodeURIComponent).join("/"), params };
}

let renderSeq = 0;
// renderRetry counts the failed loads in a row (their retries back off).
let renderRetry = 0;
// render draws the current page from fresh data.
export async function render() {
  const main = document.getElementById("main");
  const nav = document.getElementById("nav");
  if (!state.session) {
    nav.hidden = true;
    document.getElementById("who").replaceChildren();
    main.replaceChildren(loginForm());
    return;
  }
  nav.hidden = false;
  const r = parseRoute();
  state.route = r.name; state.params = r.params;
  for (const a of nav.querySelectorAll("a")) {
    const target = a.getAttribute("href").replace(/^#\/?/, "") || "overview";
    if (target === r.name) a.setAttribute("aria-current", "page"); else a.removeAttribute("aria-current");
  }
  const page = pages[r.name] || pages.overview;
  const seq = ++renderSeq;
  try {
    const view = await page(r.arg, r.params);
    if (seq !== renderSeq) return;
    const focused = document.activeElement && document.activeElement.id;
    main.replaceChildren(view);
    main.dataset.page = r.name;
    // When the page first showed, for measurements (performance entries).
    if (!performance.getEntriesByName("norsk-page-shown").length) performance.mark("norsk-page-shown", { detail: r.name });
    if (focused) { const el = document.getElementById(focused); if (el) el.focus(); }
    renderRetry = 0;
  } catch (e) {
    if (seq !== renderSeq) return;
    // A failed load (a fetch cut by a takeover, a busy member) is tried
    // again on its own, 1 s, 2 s, 4 s … up to 15 s apart, unless another
    // render comes first.
    const wait = Math.min(1000 * 2 ** renderRetry++, 15000);
    main.replaceChildren(h("p", { class: "error" }, "Could not load this page: " + e.message + " (trying again in " + Math.round(wait / 1000) + " s)"));
    setTimeout(() => { if (seq === renderSeq) render(); }, wait);
  }
}

// refresh re-renders at most every 250 ms (live updates come in bursts);
// not while the user is typing in a form of the page.
let refreshTimer = null;
export function refresh() {
  if (refreshTimer) return;
  refreshTimer = setTimeout(() => {
    refreshTimer = null;
    const a = document.activeElement;
    if (a && (a.tagName === "INPUT" || a.tagName === "SELECT") && a.value) { refresh(); return; }
    render();
  }, 250);
}

// Which changes concern which page.
const interest = {
  overview: () => true, jobs: (c) => c.kind === "job", job: (c) => ["job", "migration", "placement"].includes(c.kind),
  bundles: (c) => ["bundle", "job"].includes(c.kind), migrations: (c) => c.kind === "migration",
  nodes: (c) => ["node", "job"].includes(c.kind), cluster: (c) => c.kind === "control" || c.kind === "discovery",
  leases: (c) => c.kind === "leases", discovery: (c) => c.kind === "discovery", audit: () => true,
};

let events = null;
function live() {
  if (events) events.close();
  events = new EventSource("/api/events");
  const dot = document.getElementById("live");
  events.onopen = () => dot.classList.add("on");
  events.onerror = () => dot.classList.remove("on");
  events.addEventListener("change", (e) => {
    const c = JSON.parse(e.data);
    const f = interest[state.route];
    if (c.kind === "resync" || (f && f(c))) refresh();
  });
}

function whoami() {
  const s = state.session;
  document.getElementById("who").replaceChildren(
    h("span", { id: "who-user" }, s.user), " (", h("span", { id: "who-role" }, s.role), ")",
    h("button", { id: "logout", onclick: async () => { await api("/api/logout", { method: "POST" }); state.session = null; if (events) events.close(); render(); } }, "Sign out"));
}

function loginForm() {
  const err = h("p", { class: "error", id: "login-error", role: "alert" });
  const user = h("input", { id: "login-user", name: "user", autocomplete: "username", required: true, autofocus: true });
  const pass = h("input", { id: "login-pass", name: "password", type: "password", autocomplete: "current-password", required: true });
  const form = h("form", {
    onsubmit: async (e) => {
      e.preventDefault();
      try {
        state.session = await api("/api/login", { method: "POST", body: { user: user.value, password: pass.value } });
        await start();
      } catch (x) { err.textContent = x.message; }
    },
  }, h("label", {}, "User", user), h("label", {}, "Password", pass), h("button", { class: "primary", id: "login-submit", type: "submit" }, "Sign in"), err);
  return h("div", { class: "login" }, h("h1", {}, "Sign in"), form);
}

async function start() {
  // The page carries the session when it was served to a signed-in user.
  const meta = document.querySelector('meta[name="norsk-session"]');
  if (meta && !state.session && !start.done) {
    state.session = JSON.parse(meta.content);
  } else {
    try { state.session = await api("/api/session"); } catch { state.session = null; }
  }
  start.done = true;
  if (state.session) { whoami(); live(); }
  render();
}

window.addEventListener("hashchange", render);
start();
