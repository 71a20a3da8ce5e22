// dei-collector web view: service graph, DEI prefix tree, traces, analyses, search executions, diff.
// Plain DOM; the tree loads children on demand and renders long child lists in pages, so trees with many
// thousands of nodes stay responsive. The graph is laid out by Cytoscape.js.
"use strict";

const API = "/api/v1";
// rows per page of a long list (a node's children, the edge table, a trace's calls)
const PAGE = 200;
// tree depth from which children are barely indented
const DEEP = 12;

async function getJSON(path) {
  const r = await fetch(API + path);
  if (!r.ok) throw new Error(`${path}: ${r.status}`);
  return r.json();
}

function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") e.className = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  for (const c of children) if (c !== null && c !== undefined) e.append(c instanceof Node ? c : String(c));
  return e;
}

// ---- links into Jaeger's UI (`dei-collector serve --jaeger-ui URL`) ---------------------------------------
// /ui/config.json gives URL templates: a trace id links to Jaeger's trace page, a tree node to a Jaeger search
// for its dei.index tag (the convention Grafana and Tempo users know). Without --jaeger-ui: no links.
const uiConfig = fetch("/ui/config.json").then(r => (r.ok ? r.json() : {})).catch(() => ({}));

// " Jaeger ↗" after what it links from (nothing at all without --jaeger-ui)
function jaegerLink(href) {
  return el("span", { class: "jaeger" }, " ", el("a", { href, target: "_blank", rel: "noopener" }, "Jaeger ↗"));
}

async function jaegerTraceLink(traceId) {
  const c = await uiConfig;
  return c.trace ? jaegerLink(c.trace.replace("{trace_id}", encodeURIComponent(traceId))) : null;
}

async function jaegerIndexLink(service, index) {
  const c = await uiConfig;
  if (!c.search || !service) return null;
  const tags = encodeURIComponent(JSON.stringify({ "dei.index": index }));
  return jaegerLink(c.search.replace("{service}", encodeURIComponent(service)).replace("{tags}", tags));
}

function badge(text, cls = "") { return el("span", { class: "badge " + cls }, text); }

function sumValues(obj) { return Object.values(obj || {}).reduce((a, b) => a + b, 0); }

// ---- tabs -------------------------------------------------------------------------------------------
const loaded = {};
function showTab(name) {
  document.querySelectorAll("#tabs button").forEach(b => b.classList.toggle("active", b.dataset.tab === name));
  document.querySelectorAll(".tab").forEach(s => s.classList.toggle("active", s.id === "tab-" + name));
  if (!loaded[name]) { loaded[name] = true; loaders[name]().catch(e => console.error(e)); }
  history.replaceState(null, "", "#" + name);
}
document.querySelectorAll("#tabs button").forEach(b => b.addEventListener("click", () => showTab(b.dataset.tab)));

// ---- service graph ----------------------------------------------------------------------------------
// Above these sizes the graph gets a layout that costs O(nodes + edges) (concentric rings by degree) instead of
// breadthfirst's levels, and edge labels only under the pointer: hundreds of labels make every frame slow.
const BIG_GRAPH_NODES = 40;
const BIG_GRAPH_EDGES = 120;

function graphLayout(nodes, edges) {
  if (nodes <= BIG_GRAPH_NODES && edges <= BIG_GRAPH_EDGES)
    return { name: "breadthfirst", directed: true, padding: 20, spacingFactor: 1.2 };
  // rings by degree, hubs in the middle
  return { name: "concentric", padding: 20, minNodeSpacing: 10, animate: false,
           concentric: n => n.degree(), levelWidth: ns => Math.max(1, ns.maxDegree() / 6) };
}

async function loadGraph() {
  const g = await getJSON("/graph");
  const elements = [];
  for (const n of g.nodes) elements.push({ data: { id: n.id, label: n.id, virtual: n.virtual ? 1 : 0 } });
  g.edges.forEach((e, i) => elements.push({
    data: { id: "e" + i, source: e.client, target: e.server, failed: e.failed,
            label: `${e.requests} req` + (e.failed ? ` / ${e.failed} failed` : "") },
  }));
  const layout = graphLayout(g.nodes.length, g.edges.length);
  const big = layout.name !== "breadthfirst";
  const canvas = document.getElementById("graph-canvas");
  canvas.dataset.layout = layout.name;
  const cy = cytoscape({
    container: canvas,
    elements,
    style: [
      { selector: "node", style: { label: "data(label)", "background-color": "#5aa9ff", color: "#1d2330",
        "text-valign": "bottom", "text-margin-y": 4, "font-size": 12, "min-zoomed-font-size": 6 } },
      { selector: "node[virtual = 1]", style: { "background-color": "#c2c8d3", shape: "round-rectangle" } },
      { selector: "edge", style: { label: big ? "" : "data(label)", "curve-style": big ? "haystack" : "bezier",
        "target-arrow-shape": big ? "none" : "triangle", width: big ? 1 : 2, opacity: big ? 0.5 : 1,
        "line-color": "#9aa5b8", "target-arrow-color": "#9aa5b8", "font-size": 10, "min-zoomed-font-size": 6,
        "text-background-color": "#fff", "text-background-opacity": 0.8 } },
      { selector: "edge[failed > 0]", style: { "line-color": "#e0574a", "target-arrow-color": "#e0574a" } },
      { selector: "edge.focus", style: { label: "data(label)", "curve-style": "bezier", "target-arrow-shape": "triangle",
        width: 2, opacity: 1, "line-color": "#2a6fd6", "target-arrow-color": "#2a6fd6", "z-index": 10 } },
    ],
    layout,
    hideEdgesOnViewport: big,
    textureOnViewport: big,
  });
  if (big) {
    // a node's edges with their labels while the pointer is on it
    cy.on("mouseover", "node", ev => ev.target.connectedEdges().addClass("focus"));
    cy.on("mouseout", "node", ev => ev.target.connectedEdges().removeClass("focus"));
    cy.on("mouseover", "edge", ev => ev.target.addClass("focus"));
    cy.on("mouseout", "edge", ev => ev.target.removeClass("focus"));
  }
  window.deiGraph = cy;
  const table = document.getElementById("graph-edges");
  table.replaceChildren(el("tr", {}, el("th", {}, "client"), el("th", {}, "server"), el("th", {}, "requests"),
    el("th", {}, "failed"), el("th", {}, "via")));
  const edges = [...g.edges].sort((a, b) => b.failed - a.failed || b.requests - a.requests);
  renderPaged(table, edges, e => el("tr", { class: e.failed ? "failed" : "" }, el("td", {}, e.client),
    el("td", {}, e.server), el("td", {}, e.requests), el("td", {}, e.failed), el("td", {}, e.connection_type || "")),
    { moreRow: () => el("tr", { class: "more" }, el("td", { colspan: 5 })) });
}

// ---- prefix tree ------------------------------------------------------------------------------------
function nodeRow(n, onSelect) {
  const li = el("li", { role: "treeitem", "data-index": n.index });
  const toggle = el("span", { class: "toggle" }, n.children > 0 ? "▸" : " ");
  const faults = sumValues(n.faults);
  const row = el("div", { class: "row" }, toggle,
    n.depth >= DEEP ? el("span", { class: "depth" }, `${n.depth}`) : null,
    el("span", { class: "sig" }, n.signature || "(unknown)"), " ",
    el("span", { class: "el" }, n.element || ""),
    badge(`${n.seen}× in ${n.traces} traces`),
    n.errors ? badge(`${n.errors} errors`, "err") : null,
    faults ? badge(`${faults} faults`, "fault") : null,
    n.ambiguous_flagged ? badge("ambiguous", "amb") : null,
    n.children ? badge(`${n.children} ${n.children === 1 ? "child" : "children"}`) : null);
  let childList = null;
  row.addEventListener("click", async ev => {
    ev.stopPropagation();
    onSelect(n, row);
    if (n.children === 0) return;
    if (childList) { childList.hidden = !childList.hidden; toggle.textContent = childList.hidden ? "▸" : "▾"; return; }
    toggle.textContent = "▾";
    // past DEEP levels the indentation shrinks (a chain may be 64 deep) and rows carry their depth instead
    childList = el("ul", { role: "group", class: n.depth + 1 >= DEEP ? "deep" : "" });
    li.append(childList);
    await renderPaged(childList, childPages(n.index), k => nodeRow(k, onSelect), { total: n.children });
  });
  li.append(row);
  return li;
}

// Appends rows to `container` PAGE at a time, with a "show N more" row (made by `moreRow`) for the rest: a
// node with thousands of children costs one page of DOM until the user asks for more. `source` is an array or
// a function `(offset, limit) => items` (or a promise of them) with `total` items in all.
function renderPaged(container, source, make, { total = source.length, moreRow = () => el("li", { class: "more" }) } = {}) {
  const page = Array.isArray(source) ? (offset, limit) => source.slice(offset, offset + limit) : source;
  let shown = 0, busy = false;
  const more = moreRow();
  const label = more.firstElementChild || more;
  const step = async () => {
    if (busy) return;
    busy = true;
    try {
      const items = await page(shown, PAGE);
      const frag = document.createDocumentFragment();
      for (const it of items) frag.append(make(it));
      shown += items.length;
      more.before(frag);
      const left = Math.max(0, total - shown);
      label.textContent = `show ${Math.min(PAGE, left)} more of ${left}`;
      if (left === 0 || items.length < PAGE) more.remove();
    } finally { busy = false; }
  };
  container.append(more);
  more.addEventListener("click", ev => { ev.stopPropagation(); step().catch(e => console.error(e)); });
  return step();
}

// A node's children a page at a time: `/tree/children?index=I&offset=O&limit=N`. A collector that ignored
// offset and limit would send every child at once; they would be kept and paged here.
function childPages(index) {
  let all = null;
  return async (offset, limit) => {
    if (all) return all.slice(offset, offset + limit);
    const got = await getJSON(`/tree/children?index=${encodeURIComponent(index)}&offset=${offset}&limit=${limit}`);
    if (got.length <= limit) return got;
    all = got;
    return all.slice(offset, offset + limit);
  };
}

let selectedRow = null;
async function selectNode(n, row) {
  if (selectedRow) selectedRow.classList.remove("selected");
  selectedRow = row; row.classList.add("selected");
  const box = document.getElementById("node-detail");
  const d = await getJSON("/tree/node?index=" + encodeURIComponent(n.index));
  const parts = [
    el("h2", {}, d.signature || "(unknown)"),
    el("p", {}, "index ", el("code", { id: "detail-index" }, d.index),
       await jaegerIndexLink(Object.keys(d.server_services || {})[0] || Object.keys(d.client_services || {})[0], d.index)),
    el("p", {}, `depth ${d.depth} · seen ${d.seen}× in ${d.traces} traces · ${d.errors} errors`),
    el("p", {}, "services: ", Object.keys(d.client_services || {}).join(", ") || "?", " → ",
       Object.keys(d.server_services || {}).join(", ") || Object.keys(d.peers || {}).join(", ") || "?"),
  ];
  if (d.client_latency && d.client_latency.count) parts.push(el("p", {}, `client latency mean ${(d.client_latency.mean_s * 1000).toFixed(2)} ms, max ${(d.client_latency.max_s * 1000).toFixed(2)} ms`));
  if (Object.keys(d.faults || {}).length) parts.push(el("p", {}, "injected faults: " + Object.entries(d.faults).map(([f, c]) => `${f}×${c}`).join(", ")));
  parts.push(el("h2", {}, "Stack"));
  const frames = el("ol", { id: "detail-stack", class: "mono" });
  for (const f of d.stack || []) frames.append(el("li", {}, f));
  parts.push((d.stack || []).length ? frames : el("p", { class: "hint" }, "no stack recorded"));
  parts.push(el("h2", {}, "Traces"));
  const traces = el("ul", { id: "detail-traces", class: "mono" });
  try {
    const t = await getJSON("/tree/node/traces?index=" + encodeURIComponent(n.index));
    for (const id of t.traces) traces.append(el("li", {}, el("a", { href: "#traces", onclick: () => openTrace(id) }, id), await jaegerTraceLink(id)));
    if (!t.traces.length) traces.append(el("li", { class: "hint" }, "no retained trace"));
  } catch (e) { traces.append(el("li", { class: "hint" }, "traces unavailable")); }
  parts.push(traces);
  box.replaceChildren(...parts);
}

async function loadTree() {
  const root = await getJSON("/tree/node?index=1");
  const ul = el("ul", { role: "group" });
  document.getElementById("tree").replaceChildren(ul);
  await renderPaged(ul, childPages(root.index), n => nodeRow(n, selectNode), { total: root.children });
}

// ---- traces -----------------------------------------------------------------------------------------
async function loadTraces() {
  const t = await getJSON("/traces?limit=500");
  const table = el("table", { class: "grid" }, el("tr", {}, el("th", {}, "trace"), el("th", {}, "RPCs"), el("th", {}, "faults")));
  for (const tr of t.traces) {
    table.append(el("tr", { class: tr.faults ? "failed" : "" },
      el("td", { class: "mono" }, el("a", { href: "#traces", onclick: () => openTrace(tr.trace_id) }, tr.trace_id.slice(0, 16) + "…"), await jaegerTraceLink(tr.trace_id)),
      el("td", {}, tr.rpcs), el("td", {}, tr.faults)));
  }
  document.getElementById("trace-list").replaceChildren(el("p", {}, `${t.retained} traces retained`), table);
}

// The outcome a span recorded: its gRPC status code or HTTP status, when it has one.
function statusBadge(s) {
  if (!s) return null;
  if (s.grpc_status_code != null) return badge("gRPC " + s.grpc_status_code, s.grpc_status_code ? "err" : "");
  if (s.http_status_code != null) return badge("HTTP " + s.http_status_code, s.http_status_code >= 500 ? "err" : "");
  return null;
}

function traceNode(n) {
  const li = el("li", {}, el("div", { class: "row" },
    el("span", { class: "sig" }, n.signature || "?"), " ", el("span", { class: "el" }, n.index),
    " ", el("span", {}, `${n.client_service || "?"} → ${n.server_service || "?"}`),
    statusBadge(n.client_status || n.server_status),
    n.fault ? badge("fault " + n.fault, "fault") : null, n.error ? badge("error", "err") : null,
    n.ambiguous ? badge("ambiguous", "amb") : null,
    n.messages && n.messages.length ? badge(`stream · ${n.messages.length} messages`) : null,
    n.stream ? badge(`message ${n.stream.k}`) : null));
  if (n.children && n.children.length) {
    const ul = el("ul", {});
    li.append(ul);
    renderPaged(ul, n.children, traceNode);
  }
  return li;
}

async function openTrace(id) {
  showTab("traces");
  const t = await getJSON("/traces/" + id);
  const root = el("ul", { id: "trace-tree-root" });
  document.getElementById("trace-tree").replaceChildren(el("p", { class: "mono" }, `trace ${t.trace_id} · ${t.rpcs} RPCs`, await jaegerTraceLink(t.trace_id)),
    root);
  renderPaged(root, t.tree, traceNode);
}

// ---- analyses ---------------------------------------------------------------------------------------
function table(rows) {
  if (!Array.isArray(rows) || rows.length === 0) return el("p", { class: "hint" }, "none found");
  const cols = [...new Set(rows.flatMap(r => Object.keys(r)))];
  const t = el("table", { class: "grid" }, el("tr", {}, ...cols.map(c => el("th", {}, c))));
  for (const r of rows) t.append(el("tr", {}, ...cols.map(c => el("td", { class: "mono" }, fmt(r[c])))));
  return t;
}
function fmt(v) {
  if (v === null || v === undefined) return "";
  if (typeof v === "object") return JSON.stringify(v);
  return String(v);
}

async function loadAnalyses() {
  const a = await getJSON("/analyses");
  const box = document.getElementById("analyses");
  const sections = [["Circuit breakers", a.circuit_breakers], ["Repeated calls", a.repeated_calls],
    ["Chained calls", a.chained_calls], ["Ambiguous indexes", a.ambiguous]];
  const out = [el("p", {}, `${a.traces_analyzed} traces analyzed`)];
  for (const [title, v] of sections) {
    out.push(el("h2", {}, title));
    out.push(table(Array.isArray(v) ? v : (v && (v.findings || v.items)) || (v ? [v] : [])));
  }
  out.push(el("h2", {}, "Projection to other instantiations"));
  for (const p of a.projections || []) {
    const { collapses, unstable, ...summary } = p;
    out.push(table([summary]));
    if (Array.isArray(collapses) && collapses.length) out.push(table(collapses));
    if (Array.isArray(unstable) && unstable.length) out.push(table(unstable));
  }
  box.replaceChildren(...out);
}

// ---- search executions ------------------------------------------------------------------------------
// dei-sfit writes `outcome` as `{verdict: "pass"}` or `{verdict: "fail", message}`
function verdict(e) { return e.outcome && typeof e.outcome === "object" ? e.outcome.verdict : e.outcome; }
function failed(e) { return verdict(e) === "fail"; }
function outcomeText(e) {
  const v = verdict(e);
  return e.outcome && e.outcome.message ? `${v}: ${e.outcome.message}` : v;
}
async function loadSearch() {
  const box = document.getElementById("search");
  let r;
  try { r = await getJSON("/search"); } catch (e) { box.replaceChildren(el("p", { class: "hint" }, "no search report")); return; }
  const reports = Array.isArray(r) ? r : [r];
  const out = [];
  for (const rep of reports) {
    const execs = [...(rep.executions || [])].sort((a, b) => failed(b) - failed(a));
    out.push(el("h2", {}, `${rep.test || rep.name || "functional test"}: ${execs.length} executions, ${execs.filter(failed).length} failing`));
    const t = el("table", { class: "grid", id: "executions" }, el("tr", {}, el("th", {}, "#"), el("th", {}, "outcome"), el("th", {}, "plan"), el("th", {}, "injected")));
    for (const e of execs) {
      t.append(el("tr", { class: failed(e) ? "failed" : "" }, el("td", {}, e.id ?? e.number ?? ""),
        el("td", {}, outcomeText(e)), el("td", { class: "mono" }, fmt(e.plan)),
        el("td", { class: "mono" }, fmt(e.effective ?? e.injected))));
    }
    out.push(t);
  }
  box.replaceChildren(...out);
}

// ---- diff -------------------------------------------------------------------------------------------
async function runDiff(ev) {
  if (ev) ev.preventDefault();
  const f = new FormData(document.getElementById("diff-form"));
  const now = Date.now() * 1e6;
  const ago = k => Math.max(0, Math.round(now - Number(f.get(k)) * 1e9));
  const q = `a_from=${ago("a_from")}&a_to=${ago("a_to")}&b_from=${ago("b_from")}&b_to=${ago("b_to")}`;
  const d = await getJSON("/diff?" + q);
  document.getElementById("diff-result").replaceChildren(
    el("p", {}, `A: ${d.a.traces} traces, ${d.a.indexes} indexes · B: ${d.b.traces} traces, ${d.b.indexes} indexes · common ${d.common}`),
    el("h2", {}, `Appeared in B (${d.appeared_total})`), table(d.appeared),
    el("h2", {}, `Disappeared from A (${d.disappeared_total})`), table(d.disappeared));
}
document.getElementById("diff-form").addEventListener("submit", runDiff);

const loaders = { graph: loadGraph, tree: loadTree, traces: loadTraces, analyses: loadAnalyses, search: loadSearch, diff: runDiff };

async function loadStats() {
  try {
    const s = await getJSON("/stats");
    document.getElementById("stats").textContent = `${s.tree_nodes} tree nodes · ${s.traces_retained} traces · ${s.graph_edges} edges`;
  } catch (e) { /* collector still starting */ }
}
loadStats();
showTab((location.hash || "#graph").slice(1) in loaders ? location.hash.slice(1) || "graph" : "graph");
