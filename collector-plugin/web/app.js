// dei-collector web view: service graph, DEI prefix tree, traces, analyses, search executions, diff.
// Plain DOM; the tree loads children on demand and renders long child lists in pages, so trees with many
// thousands of nodes stay responsive. The graph is laid out by Cytoscape.js.
"use strict";

const API = "/api/v1";
// rows per page of a long list (a node's children, the edge table, a trace's calls)
const PAGE = 200;
// tree depth from which children are barely indented
const DEEP = 12;

// A failed API call is shown in the banner under the header (and thrown); `quiet` lists statuses that are an
// answer rather than an error (the search report's 404 when no report was given).
async function getJSON(path, { quiet = [] } = {}) {
  let r;
  try { r = await fetch(API + path); } catch (e) {
    showError(`${API + path}: the collector did not answer (${e.message})`);
    throw e;
  }
  if (!r.ok) {
    const body = quiet.includes(r.status) ? "" : await r.text().catch(() => "");
    const msg = `${API + path}: ${r.status} ${r.statusText}${body ? " · " + body.slice(0, 300) : ""}`;
    if (!quiet.includes(r.status)) showError(msg);
    const err = new Error(msg);
    err.status = r.status;
    throw err;
  }
  return r.json();
}

function showError(message) {
  const box = document.getElementById("error");
  box.replaceChildren(el("span", { class: "message" }, message),
    el("button", { type: "button", onclick: () => { box.hidden = true; } }, "dismiss"));
  box.hidden = false;
}
// what a loader threw, once: getJSON has shown its own failures already
function reportError(e) {
  console.error(e);
  if (e && e.status === undefined && !(e instanceof TypeError)) showError(String(e.message || e));
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

// A fault's wire form (`g14`, `h503`, `c`, `l250`) in words.
const GRPC_CODES = ["OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
  "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE",
  "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"];
function describeFault(f) {
  const s = String(f), kind = s[0], n = s.slice(1);
  if (kind === "g" && GRPC_CODES[Number(n)]) return `gRPC ${GRPC_CODES[Number(n)]} (${n})`;
  if (kind === "h" && /^[0-9]{3}$/.test(n)) return `HTTP ${n}`;
  if (kind === "c" && n === "") return "connection error";
  if (kind === "l" && /^[0-9]+$/.test(n)) return `latency ${n} ms`;
  return s;
}

// An index element `r|c` on the wire: an 11-character digest of the invocation signature (RPC, payload, call
// stack), the count, and `~` on a preliminary stream element.
function elementParts(element) {
  const m = /^([A-Za-z0-9_-]{11})([0-9]+)(~?)$/.exec(element || "");
  return m ? { digest: m[1], count: Number(m[2]), preliminary: m[3] === "~" } : null;
}
const INDEX_RE = /^1(\.[A-Za-z0-9_-]{11}[0-9]+~?)*$/;

// "how the collector saw an edge" (servicegraph's connection_type), in words
const EDGE_KIND = { "": "client and server spans", virtual_node: "client spans only: the callee is not instrumented or was never reached",
  messaging_system: "messaging", database: "database client spans", index: "the DEI prefix relation only" };

function sumValues(obj) { return Object.values(obj || {}).reduce((a, b) => a + b, 0); }

// ---- tabs -------------------------------------------------------------------------------------------
// Every view has a URL: #graph, #tree, #tree/<dei.index>, #traces[?filters], #traces/<trace id>[?filters],
// #analyses, #search[?report=ID&compare=ID], #diff. Opening a node or a trace, filtering the traces or picking
// reports puts it in the URL; loading a URL (or going back) opens what it names.
const loaded = {};
// the query part of the traces' and the search's URLs, as last set
let traceQuery = "", searchQuery = "";
function tabHash(name) {
  if (name === "traces" && traceQuery) return "#traces?" + traceQuery;
  if (name === "search" && searchQuery) return "#search?" + searchQuery;
  return "#" + name;
}
function showTab(name, hash = tabHash(name)) {
  document.querySelectorAll("#tabs button").forEach(b => b.classList.toggle("active", b.dataset.tab === name));
  document.querySelectorAll(".tab").forEach(s => s.classList.toggle("active", s.id === "tab-" + name));
  if (!loaded[name]) loaded[name] = loaders[name]().catch(reportError);
  if (location.hash !== hash) history.pushState(null, "", hash);
  routed = location.hash;
  return loaded[name];
}
document.querySelectorAll("#tabs button").forEach(b => b.addEventListener("click", () => showTab(b.dataset.tab)));

function route() {
  const [path, query = ""] = location.hash.slice(1).split("?");
  const [tab, ...rest] = path.split("/");
  const arg = decodeURIComponent(rest.join("/"));
  if (tab === "tree" && arg) return openIndex(arg);
  if (tab === "traces") {
    if (query !== traceQuery) { traceQuery = query; delete loaded.traces; }
    return arg ? openTrace(arg) : showTab("traces", location.hash);
  }
  if (tab === "search") {
    if (query !== searchQuery) { searchQuery = query; delete loaded.search; }
    return showTab("search", location.hash);
  }
  return showTab(tab in loaders ? tab : "graph");
}
// going back or forward, or a link to another view's URL (both events may fire for one navigation)
let routed = null;
function reroute() {
  if (location.hash === routed) return;
  routed = location.hash;
  route().catch(reportError);
}
window.addEventListener("popstate", reroute);
window.addEventListener("hashchange", reroute);

// ---- service graph ----------------------------------------------------------------------------------
// Above these sizes the graph gets a layout that costs O(nodes + edges) (concentric rings by degree) instead of
// breadthfirst's levels, and edge labels only under the pointer: hundreds of labels make every frame slow.
const BIG_GRAPH_NODES = 40;
const BIG_GRAPH_EDGES = 120;

function graphLayout(nodes, edges) {
  // small graphs: top-down levels (layeredPositions, computed in loadGraph)
  if (nodes <= BIG_GRAPH_NODES && edges <= BIG_GRAPH_EDGES) return { name: "preset", fit: true, padding: 30 };
  // rings by degree, hubs in the middle
  return { name: "concentric", padding: 20, minNodeSpacing: 10, animate: false,
           concentric: n => n.degree(), levelWidth: ns => Math.max(1, ns.maxDegree() / 6) };
}

// A layered layout: each service one level below its lowest caller (a longest-path layering; a cycle's back
// edge does not count), and the services of a level ordered by where their callers sit, as Sugiyama-style
// layouts do. No edge then runs along a level through other nodes, and callers sit above their callees.
function layeredPositions(cy) {
  const level = new Map(), visiting = new Set();
  const depth = n => {
    if (level.has(n.id())) return level.get(n.id());
    if (visiting.has(n.id())) return 0;
    visiting.add(n.id());
    let d = 0;
    n.incomers("node").forEach(m => { if (m.id() !== n.id()) d = Math.max(d, depth(m) + 1); });
    visiting.delete(n.id());
    level.set(n.id(), d);
    return d;
  };
  cy.nodes().forEach(depth);
  const rows = [];
  cy.nodes().forEach(n => { const d = level.get(n.id()); (rows[d] = rows[d] || []).push(n); });
  const positions = {};
  const callerX = n => {
    const xs = n.incomers("node").map(m => positions[m.id()]).filter(Boolean).map(p => p.x);
    return xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : 0;
  };
  rows.forEach((row, d) => {
    row.sort((a, b) => callerX(a) - callerX(b) || a.id().localeCompare(b.id()));
    row.forEach((n, i) => { positions[n.id()] = { x: (i - (row.length - 1) / 2) * 170, y: d * 110 }; });
  });
  return positions;
}

// what is selected in the graph, kept across reloads: {node: id} or {edge: "client\u0000server\u0000kind"}
let graphSelection = null;
const edgeKey = e => [e.client, e.server, e.connection_type].join("\u0000");

// rpc.service names each service serves (a client span that named one and met no server span counts on the
// edge to that service): the tree nodes on an edge are found through them too
let graphServes = new Map();

async function loadGraph() {
  const g = await getJSON("/graph");
  graphServes = new Map(g.nodes.map(n => [n.id, n.serves || []]));
  const elements = [];
  for (const n of g.nodes) elements.push({ data: { id: n.id, label: n.id, virtual: n.virtual ? 1 : 0 } });
  g.edges.forEach((e, i) => elements.push({
    data: { id: "e" + i, source: e.client, target: e.server, failed: e.failed,
            ratio: e.requests ? e.failed / e.requests : 0,
            label: `${e.requests} req` + (e.failed ? ` / ${e.failed} failed` : "") },
  }));
  const layout = graphLayout(g.nodes.length, g.edges.length);
  const big = layout.name !== "preset";
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
      // failure ratio as colour: grey (none failed) to red (all failed)
      { selector: "edge[failed > 0]", style: { "line-color": "mapData(ratio, 0, 1, #f0a35e, #c0271b)",
        "target-arrow-color": "mapData(ratio, 0, 1, #f0a35e, #c0271b)" } },
      { selector: ":selected", style: { "border-width": 3, "border-color": "#2a6fd6", "line-color": "#2a6fd6",
        "target-arrow-color": "#2a6fd6" } },
      { selector: "edge.focus", style: { label: "data(label)", "curve-style": "bezier", "target-arrow-shape": "triangle",
        width: 2, opacity: 1, "line-color": "#2a6fd6", "target-arrow-color": "#2a6fd6", "z-index": 10 } },
    ],
    layout: { name: "preset" },
    maxZoom: 1.2, // fitting a small graph would otherwise blow its labels up
    hideEdgesOnViewport: big,
    textureOnViewport: big,
  });
  cy.layout(layout.name === "preset" ? { ...layout, positions: layeredPositions(cy) } : layout).run();
  cy.on("tap", "node", ev => showGraphNode(ev.target.id(), g));
  cy.on("tap", "edge", ev => showGraphEdge(g.edges[Number(ev.target.id().slice(1))]));
  graphLegend();
  if (graphSelection && graphSelection.node !== undefined && cy.getElementById(graphSelection.node).nonempty()) {
    cy.getElementById(graphSelection.node).select();
    showGraphNode(graphSelection.node, g);
  } else if (graphSelection && graphSelection.edge !== undefined) {
    const i = g.edges.findIndex(e => edgeKey(e) === graphSelection.edge);
    if (i >= 0) { cy.getElementById("e" + i).select(); showGraphEdge(g.edges[i]); }
  }
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
    el("th", {}, "failed"), el("th", {}, "p50 / p99 (client)"), el("th", {}, "seen through")));
  const edges = [...g.edges].sort((a, b) => b.failed - a.failed || b.requests - a.requests);
  renderPaged(table, edges, e => el("tr", { class: e.failed ? "failed" : "", onclick: () => showGraphEdge(e) },
    el("td", {}, e.client), el("td", {}, e.server), el("td", {}, e.requests),
    el("td", {}, e.failed, e.merged_requests ? el("span", { class: "hint" }, ` (${e.merged_requests} before reaching it)`) : null),
    el("td", {}, e.client_latency ? `${ms(e.client_latency.p50_s)} / ${ms(e.client_latency.p99_s)}` : ""),
    el("td", {}, EDGE_KIND[e.connection_type] ?? e.connection_type)),
    { moreRow: () => el("tr", { class: "more" }, el("td", { colspan: 6 })) });
}

function ms(seconds) { return `${(seconds * 1000).toFixed(seconds < 0.01 ? 2 : 1)} ms`; }

function graphLegend() {
  document.getElementById("graph-legend").replaceChildren(
    el("span", { class: "key" }, el("i", { class: "swatch service" }),
      "service (its server spans were seen); calls that failed before reaching it count on its edges"),
    el("span", { class: "key" }, el("i", { class: "swatch virtual" }),
      "virtual: a callee never seen serving (not instrumented, or every call failed before reaching it), or one that several services serve"),
    el("span", { class: "key" }, el("i", { class: "swatch ok" }), "no failed request"),
    el("span", { class: "key" }, el("i", { class: "swatch ratio" }), "failed / requests, 0 % to 100 %"),
    el("span", { class: "hint" }, "click a node or an edge for its numbers"));
}

function latencyText(l) {
  return l && l.count ? `p50 ${ms(l.p50_s)} · p99 ${ms(l.p99_s)} · max ${ms(l.max_s)} (${l.count} spans)` : "no spans";
}

// The tree nodes on an edge: RPCs whose client spans came from the edge's caller (or, without client spans,
// whose parent was served by it) and whose server spans came from its callee, or whose client spans named it
// as their peer (a virtual node's calls). Read from the first TREE_SCAN nodes of the tree.
const TREE_SCAN = 5000, NODES_LISTED = 20;
async function treeNodesOn(client, server) {
  const root = await getJSON(`/tree?index=1&limit=${TREE_SCAN}`);
  const has = (m, k) => Object.prototype.hasOwnProperty.call(m || {}, k);
  const empty = m => Object.keys(m || {}).length === 0;
  const found = [];
  const walk = (node, parent) => {
    const from = client === null || has(node.client_services, client) ||
      (empty(node.client_services) && parent !== null && has(parent.server_services, client));
    const to = has(node.server_services, server) || has(node.peers, server) ||
      (graphServes.get(server) || []).some(name => has(node.peers, name));
    if (node.index !== "1" && from && to) found.push(node);
    for (const child of node.subtree) walk(child, node);
  };
  walk(root, null);
  return found;
}
function treeNodeList(title, nodes) {
  const shown = nodes.slice(0, NODES_LISTED);
  return [el("h3", {}, `${title} (${nodes.length})`),
    nodes.length ? el("ul", { class: "edge-nodes" }, ...shown.map(n => el("li", {}, nodeLink(n),
      ` · ${n.seen}× · ${n.errors} errors`))) : el("p", { class: "hint" }, "none in the tree"),
    nodes.length > shown.length ? el("p", { class: "hint" }, `and ${nodes.length - shown.length} more`) : null];
}

function showGraphEdge(e) {
  graphSelection = { edge: edgeKey(e) };
  const ratio = e.requests ? ` (${(100 * e.failed / e.requests).toFixed(1)} %)` : "";
  document.getElementById("graph-detail").replaceChildren(
    el("h2", {}, `${e.client} → ${e.server}`),
    el("p", {}, `${e.requests} requests · ${e.failed} failed${ratio}` +
      (e.index_requests ? ` · ${e.index_requests} RPCs under DEI indexes` : "")),
    e.merged_requests ? el("p", { class: "merged" }, `${plural(e.merged_requests, "call")} (${e.merged_failed} failed) never reached ` +
      `${e.server}: their client spans named ${(graphServes.get(e.server) || []).join(", ") || "a name it serves"} and met no server span`) : null,
    el("p", {}, "client latency: ", latencyText(e.client_latency)),
    el("p", {}, "server latency: ", latencyText(e.server_latency)),
    el("p", { class: "hint" }, "seen through ", EDGE_KIND[e.connection_type] ?? e.connection_type));
  const box = document.getElementById("graph-detail"), key = edgeKey(e);
  treeNodesOn(e.client, e.server).then(nodes => {
    if (graphSelection && graphSelection.edge === key) box.append(...treeNodeList("Tree nodes on this edge", nodes).filter(Boolean));
  }).catch(reportError);
}

function showGraphNode(id, g) {
  graphSelection = { node: id };
  const node = g.nodes.find(n => n.id === id) || { id };
  const out = g.edges.filter(e => e.client === id), into = g.edges.filter(e => e.server === id);
  const sum = (es, k) => es.reduce((a, e) => a + e[k], 0);
  const list = es => el("ul", {}, ...es.map(e => el("li", {},
    el("a", { href: "#graph", onclick: ev => { ev.preventDefault(); showGraphEdge(e); } },
      `${e.client} → ${e.server}`), `: ${e.requests} requests, ${e.failed} failed`)));
  document.getElementById("graph-detail").replaceChildren(
    el("h2", {}, id), el("p", { class: "hint" }, node.virtual
      ? ((node.served_by || []).length ? `virtual node: served by ${node.served_by.join(" and ")}, so which one a failed call would have reached is unknown`
        : "virtual node: never seen serving")
      : (node.serves || []).length ? `service, serving ${node.serves.join(", ")}` : "service"),
    el("p", {}, `calls out: ${sum(out, "requests")} requests, ${sum(out, "failed")} failed`), list(out),
    el("p", {}, `called: ${sum(into, "requests")} requests, ${sum(into, "failed")} failed`), list(into));
  const box = document.getElementById("graph-detail");
  treeNodesOn(null, id).then(nodes => {
    if (graphSelection && graphSelection.node === id) box.append(...treeNodeList("Tree nodes it serves", nodes).filter(Boolean));
  }).catch(reportError);
}

// ---- prefix tree ------------------------------------------------------------------------------------
// An index element as its parts: ` · payload 3f2a… · stack examples/…/cinema.rs:201`, the full digests and
// frame on hover (and in the node's details, to copy).
function elementText(n) {
  const out = [];
  if (n.payload_digest) out.push(el("span", { class: "part" }, " · payload ",
    el("span", { class: "hash", title: `payload digest ${n.payload_digest}` }, n.payload_digest.slice(0, 4) + "…")));
  if (n.top_frame) out.push(el("span", { class: "part" }, " · stack ",
    el("span", { class: "frame", title: `${n.top_frame}${n.stack_digest ? "\nstack digest " + n.stack_digest : ""}` }, shortFrame(n.top_frame))));
  else if (n.stack_digest) out.push(el("span", { class: "part" }, " · stack ",
    el("span", { class: "hash", title: `stack digest ${n.stack_digest} (no readable frames recorded)` }, n.stack_digest.slice(0, 4) + "…")));
  return out;
}
// `{async_block#0} (examples/corpus/src/cinema.rs:201:102)` → `examples/…/cinema.rs:201`; a frame without a line
// number, its file; without a location, its start
function shortFrame(frame) {
  const m = /\(([^()]*?)(?::([0-9]+)(?::[0-9]+)?)?\)\s*$/.exec(frame);
  if (!m || !m[1]) return frame.length > 40 ? frame.slice(0, 39) + "…" : frame;
  const parts = m[1].split("/").filter(Boolean);
  const file = parts.length > 2 ? `${parts[0]}/…/${parts[parts.length - 1]}` : parts.join("/");
  return m[2] ? `${file}:${m[2]}` : file;
}

function nodeRow(n, onSelect) {
  const li = el("li", { role: "treeitem", "data-index": n.index, tabindex: "-1", "aria-level": n.depth });
  if (n.children > 0) li.setAttribute("aria-expanded", "false");
  const toggle = el("span", { class: "toggle" }, n.children > 0 ? "▸" : " ");
  const faults = sumValues(n.faults);
  const parts = elementParts(n.element);
  const row = el("div", { class: "row" }, toggle,
    n.depth >= DEEP ? el("span", { class: "depth" }, `${n.depth}`) : null,
    el("span", { class: "sig" }, n.signature || "(unknown)"),
    parts ? el("span", { class: "count", title: `the ${parts.count}${ordinal(parts.count)} call with this invocation signature under the same prefix` }, ` #${parts.count}`) : null,
    ...elementText(n), " ",
    el("span", { class: "el", title: `element ${n.element}: the digest of the RPC's signature, payload and call ` +
      `stack, and its count · index ${n.index}` }, parts ? parts.digest.slice(0, 6) + "…" : (n.element || "")),
    parts && parts.preliminary ? badge("preliminary (stream)") : null,
    badge(`${n.seen}× in ${n.traces} traces`),
    n.errors ? badge(`${n.errors} errors`, "err") : null,
    faults ? badge(`${faults} faults`, "fault") : null,
    n.ambiguous_flagged ? badge("ambiguous", "amb") : null,
    n.children ? badge(`${n.children} ${n.children === 1 ? "child" : "children"}`) : null);
  let childList = null, rendering = null;
  li.expand = async () => {
    if (n.children === 0) return;
    toggle.textContent = "▾";
    li.setAttribute("aria-expanded", "true");
    if (childList) { childList.hidden = false; return rendering; }
    // past DEEP levels the indentation shrinks (a chain may be 64 deep) and rows carry their depth instead
    childList = el("ul", { role: "group", class: n.depth + 1 >= DEEP ? "deep" : "" });
    li.append(childList);
    rendering = renderPaged(childList, childPages(n.index), k => nodeRow(k, onSelect), { total: n.children });
    return rendering;
  };
  li.collapse = () => {
    if (!childList) return;
    childList.hidden = true; toggle.textContent = "▸"; li.setAttribute("aria-expanded", "false");
  };
  li.select = () => onSelect(n, row);
  row.addEventListener("click", async ev => {
    ev.stopPropagation();
    focusItem(li);
    li.select();
    if (li.getAttribute("aria-expanded") === "true") li.collapse(); else await li.expand();
  });
  li.append(row);
  return li;
}

// Keyboard navigation in a tree (the WAI-ARIA tree pattern): arrows move, right opens, left closes or goes
// to the parent, Home and End, Enter selects. One item at a time is in the tab order.
function focusItem(li) {
  if (!li) return;
  const tree = li.closest("[role=tree]");
  if (tree) tree.querySelectorAll("[role=treeitem][tabindex='0']").forEach(x => x.setAttribute("tabindex", "-1"));
  li.setAttribute("tabindex", "0");
  li.focus();
}
function treeKeys(tree) {
  tree.addEventListener("keydown", async ev => {
    const li = ev.target.closest ? ev.target.closest("[role=treeitem]") : null;
    if (!li) return;
    const items = [...tree.querySelectorAll("[role=treeitem]")].filter(x => x.offsetParent !== null);
    const i = items.indexOf(li);
    const open = li.getAttribute("aria-expanded");
    switch (ev.key) {
      case "ArrowDown": focusItem(items[i + 1]); break;
      case "ArrowUp": focusItem(items[i - 1]); break;
      case "Home": focusItem(items[0]); break;
      case "End": focusItem(items[items.length - 1]); break;
      case "ArrowRight":
        if (open === "false") await li.expand();
        else if (open === "true") focusItem(li.querySelector("[role=treeitem]"));
        break;
      case "ArrowLeft":
        if (open === "true") li.collapse(); else focusItem(li.parentElement.closest("[role=treeitem]"));
        break;
      case "Enter": case " ": if (li.select) li.select(); break;
      default: return;
    }
    ev.preventDefault();
  });
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
  selectedRow = row;
  if (row) row.classList.add("selected");
  const hash = "#tree/" + n.index;
  if (location.hash !== hash) history.pushState(null, "", hash);
  routed = location.hash;
  const box = document.getElementById("node-detail");
  const d = await getJSON("/tree/node?index=" + encodeURIComponent(n.index));
  const ep = elementParts(d.element);
  const parts = [
    el("h2", {}, d.signature || "(unknown)", ep ? ` #${ep.count}` : ""),
    el("p", {}, "index ", el("code", { id: "detail-index" }, d.index),
       await jaegerIndexLink(Object.keys(d.server_services || {})[0] || Object.keys(d.client_services || {})[0], d.index)),
    el("p", {}, `depth ${d.depth} · seen ${d.seen}× in ${d.traces} traces · ${d.errors} errors`),
    el("p", {}, "services: ", Object.keys(d.client_services || {}).join(", ") || "?", " → ",
       Object.keys(d.server_services || {}).join(", ") || Object.keys(d.peers || {}).join(", ") || "?"),
  ];
  if (d.client_latency && d.client_latency.count) parts.push(el("p", {}, `client latency mean ${(d.client_latency.mean_s * 1000).toFixed(2)} ms, max ${(d.client_latency.max_s * 1000).toFixed(2)} ms`));
  if (ep) parts.push(el("p", { class: "hint" }, `element ${d.element}: the ${ep.count}${ordinal(ep.count)} call with ` +
    `invocation signature ${ep.digest} (the digest of the RPC, its payload and its call stack) under the same prefix`));
  if (d.payload_digest || d.stack_digest) parts.push(el("p", { id: "detail-digests", class: "mono" },
    ...(d.payload_digest ? ["payload digest ", el("code", {}, d.payload_digest)] : []), d.payload_digest && d.stack_digest ? el("br") : null,
    ...(d.stack_digest ? ["stack digest ", el("code", {}, d.stack_digest)] : [])));
  if (Object.keys(d.faults || {}).length) parts.push(el("p", { id: "detail-faults" }, "injected faults: " +
    Object.entries(d.faults).map(([f, c]) => `${describeFault(f)} ×${c}`).join(", ")));
  parts.push(el("h2", {}, "Stack"));
  const frames = el("ol", { id: "detail-stack", class: "mono" });
  for (const f of d.stack || []) frames.append(el("li", {}, f));
  parts.push((d.stack || []).length ? frames : el("p", { class: "hint" }, "no stack recorded"));
  parts.push(el("h2", {}, "Traces"));
  const traces = el("ul", { id: "detail-traces", class: "mono" });
  try {
    const t = await getJSON("/tree/node/traces?index=" + encodeURIComponent(n.index));
    for (const id of t.traces) traces.append(el("li", {}, el("a", { href: "#traces/" + id }, id), await jaegerTraceLink(id)));
    if (!t.traces.length) traces.append(el("li", { class: "hint" }, "no retained trace"));
  } catch (e) { traces.append(el("li", { class: "hint" }, "traces unavailable")); }
  parts.push(traces);
  box.replaceChildren(...parts);
}

function ordinal(n) { return n % 100 >= 11 && n % 100 <= 13 ? "th" : ["th", "st", "nd", "rd"][n % 10] || "th"; }

// The tree's first level, rendered into a list that is not yet on the page.
async function buildTree() {
  const root = await getJSON("/tree/node?index=1");
  const ul = el("ul", { role: "group" });
  await renderPaged(ul, childPages(root.index), n => nodeRow(n, selectNode), { total: root.children });
  return ul;
}

async function loadTree() {
  const ul = await buildTree();
  document.getElementById("tree").replaceChildren(ul);
  const first = ul.querySelector("[role=treeitem]");
  if (first) first.setAttribute("tabindex", "0");
}
treeKeys(document.getElementById("tree"));

// The tree again, with the nodes that were open opened again and the selected one selected: built off the
// page and swapped in at once, so that it never shows closed for a moment.
async function reloadTree() {
  const tree = document.getElementById("tree");
  const open = [...tree.querySelectorAll("[role=treeitem][aria-expanded=true]")].map(li => li.dataset.index);
  const selected = selectedRow ? selectedRow.closest("[role=treeitem]").dataset.index : null;
  const focused = document.activeElement && tree.contains(document.activeElement) ? document.activeElement.dataset.index : null;
  const ul = await buildTree();
  for (const index of open) {
    const li = ul.querySelector(`li[data-index="${CSS.escape(index)}"]`);
    if (li && li.getAttribute("aria-expanded") === "false") await li.expand();
  }
  tree.replaceChildren(ul);
  const find = index => index && ul.querySelector(`li[data-index="${CSS.escape(index)}"]`);
  if (find(focused)) focusItem(find(focused));
  else if (ul.querySelector("[role=treeitem]")) ul.querySelector("[role=treeitem]").setAttribute("tabindex", "0");
  const li = find(selected);
  if (li) await selectNode({ index: selected }, li.querySelector(".row"));
}

// Opens the node of a `dei.index` (pasted from Jaeger, or from a URL): the tree is expanded down to it as far
// as its rows are loaded, and its details are shown.
async function openIndex(index) {
  index = index.trim();
  if (!INDEX_RE.test(index)) { showError(`not a dei.index: ${JSON.stringify(index)} (e.g. 1.gNqSXUN9FCU1.xOcZqW81Uq02)`); return; }
  await showTab("tree", "#tree/" + index);
  const parts = index.split(".");
  let li = null;
  for (let d = 2; d <= parts.length; d++) {
    const found = document.querySelector(`#tree li[data-index="${CSS.escape(parts.slice(0, d).join("."))}"]`);
    if (!found) break;
    li = found;
    if (d < parts.length && li.getAttribute("aria-expanded") === "false") await li.expand();
  }
  const exact = li && li.dataset.index === index ? li : null;
  if (exact) { focusItem(exact); exact.scrollIntoView({ block: "nearest" }); }
  await selectNode({ index }, exact ? exact.querySelector(".row") : null);
}
document.getElementById("index-search").addEventListener("submit", ev => {
  ev.preventDefault();
  openIndex(new FormData(ev.target).get("index") || "").catch(reportError);
});

// ---- traces -----------------------------------------------------------------------------------------
// The trace list, filtered by the collector (`/traces?service=&operation=&status=&index=&min_duration_ms=&
// max_duration_ms=&limit=`): the filter bar's values are the URL's query, so that a filtered list can be shared.
const TRACE_FILTERS = ["service", "operation", "status", "index", "min_duration_ms", "max_duration_ms", "limit"];
function fillTraceFilters() {
  const form = document.getElementById("trace-filters"), q = new URLSearchParams(traceQuery);
  for (const k of TRACE_FILTERS) if (form.elements[k]) form.elements[k].value = q.get(k) || "";
}
document.getElementById("trace-filters").addEventListener("submit", ev => {
  ev.preventDefault();
  const q = new URLSearchParams();
  for (const [k, v] of new FormData(ev.target)) if (String(v).trim()) q.set(k, String(v).trim());
  traceQuery = q.toString();
  delete loaded.traces;
  showTab("traces", tabHash("traces"));
});
document.getElementById("trace-filters").addEventListener("reset", ev => {
  ev.preventDefault();
  traceQuery = "";
  delete loaded.traces;
  showTab("traces", "#traces");
});

async function loadTraces() {
  fillTraceFilters();
  const q = new URLSearchParams(traceQuery);
  if (!q.has("limit")) q.set("limit", "500");
  const t = await getJSON("/traces?" + q.toString());
  const services = document.getElementById("trace-services");
  getJSON("/graph").then(g => services.replaceChildren(...g.nodes.filter(n => !n.virtual).map(n => el("option", { value: n.id }))))
    .catch(reportError);
  const table = el("table", { class: "grid", id: "traces-table" }, el("tr", {}, el("th", {}, "trace"), el("th", {}, "started"),
    el("th", {}, "duration"), el("th", {}, "root operation"), el("th", {}, "service"), el("th", {}, "status"),
    el("th", {}, "faults"), el("th", {}, "RPCs")));
  for (const tr of t.traces) {
    table.append(el("tr", { class: tr.status === "error" ? "failed" : "", "data-trace": tr.trace_id },
      el("td", { class: "mono" }, el("a", { href: "#traces/" + tr.trace_id + (traceQuery ? "?" + traceQuery : "") }, tr.trace_id.slice(0, 12) + "…"),
        await jaegerTraceLink(tr.trace_id)),
      el("td", {}, startedText(tr.start_unix_nano)),
      el("td", { class: "num", "data-ns": tr.duration_nano }, ms(tr.duration_nano / 1e9)),
      el("td", {}, tr.root_operation || "?"),
      el("td", { title: (tr.services || []).join(", ") }, tr.root_service || "?"),
      el("td", {}, badge(tr.status, tr.status === "error" ? "err" : ""), tr.errors ? ` ${tr.errors} failed` : ""),
      el("td", {}, tr.faults ? badge(String(tr.faults), "fault") : "0"),
      el("td", {}, tr.rpcs, ...(tr.occurrences_dropped || tr.spans_dei_skipped
        ? [" ", badge("incomplete", "err")] : []))));
  }
  const shown = t.traces.length;
  document.getElementById("trace-list").replaceChildren(
    el("p", { id: "traces-count" }, `${t.matched} of ${t.retained} retained traces match` +
      (shown < t.matched ? `; the newest ${shown} are listed` : "")),
    shown ? table : el("p", { class: "hint" }, "no trace matches these filters"));
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
    n.fault ? badge("fault: " + describeFault(n.fault), "fault") : null, n.error ? badge("error", "err") : null,
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

// What the collector did not record of a trace (its RPC cap, malformed dei.* data): the tree lacks those RPCs.
function incompleteNote(t) {
  const parts = [];
  if (t.occurrences_dropped) parts.push(`${plural(t.occurrences_dropped, "span")} past the collector's cap of RPCs per trace (--max-trace-rpcs) not recorded`);
  if (t.spans_dei_skipped) parts.push(`${plural(t.spans_dei_skipped, "span")} with malformed dei.* data skipped`);
  return parts.length ? el("p", { class: "hint", id: "trace-incomplete" }, badge("incomplete", "err"), " " + parts.join("; ")) : "";
}

async function openTrace(id) {
  showTab("traces", "#traces/" + id + (traceQuery ? "?" + traceQuery : ""));
  const t = await getJSON("/traces/" + encodeURIComponent(id));
  const root = el("ul", { id: "trace-tree-root" });
  document.getElementById("trace-tree").replaceChildren(el("p", { class: "mono" }, `trace ${t.trace_id} · ${t.rpcs} RPCs`, await jaegerTraceLink(t.trace_id)),
    incompleteNote(t), waterfall(t), root);
  renderPaged(root, t.tree, traceNode);
}

function startedText(unixNano) {
  return unixNano ? new Date(unixNano / 1e6).toLocaleString(undefined, { hour12: false }) : "?";
}

// A trace's timeline: one row per RPC in call order (at most WATERFALL_ROWS), the client span's time as a
// light bar and the server span's inside it, stream messages as ticks, faults and errors coloured.
const WATERFALL_ROWS = 300;
function waterfall(t) {
  const rows = [];
  const walk = (nodes, depth) => {
    for (const n of nodes) {
      if (rows.length >= WATERFALL_ROWS) return;
      rows.push([n, depth]);
      walk(n.children || [], depth + 1);
    }
  };
  walk(t.tree, 0);
  let t0 = Infinity, t1 = -Infinity;
  for (const [n] of rows) for (const w of [n.client_time, n.server_time]) if (w) { t0 = Math.min(t0, w[0]); t1 = Math.max(t1, w[1]); }
  if (!Number.isFinite(t0)) return el("p", { class: "hint", id: "waterfall" }, "no span times recorded");
  const total = Math.max(1, t1 - t0);
  const left = x => `${(100 * (x - t0) / total).toFixed(3)}%`;
  const width = w => `${Math.max(0.3, 100 * (w[1] - w[0]) / total).toFixed(3)}%`;
  const box = el("div", { id: "waterfall" },
    el("div", { class: "wf-row wf-axis" }, el("span", { class: "wf-label" }, "RPC"),
      el("span", { class: "wf-lane" }, el("span", { class: "start" }, "0 ms"), el("span", { class: "end" }, ms(total / 1e9)))));
  for (const [n, depth] of rows) {
    const lane = el("span", { class: "wf-lane" });
    if (n.client_time) lane.append(el("span", { class: "bar client", style: `left:${left(n.client_time[0])};width:${width(n.client_time)}`,
      title: `${n.client_service || "?"} (client): ${ms((n.client_time[1] - n.client_time[0]) / 1e9)}` }));
    if (n.server_time) lane.append(el("span", { class: "bar server", style: `left:${left(n.server_time[0])};width:${width(n.server_time)}`,
      title: `${n.server_service || "?"} (server): ${ms((n.server_time[1] - n.server_time[0]) / 1e9)}` }));
    for (const m of n.messages || []) lane.append(el("span", { class: "tick" + (m.fault ? " fault" : ""), style: `left:${left(m.time_unix_nano)}`,
      title: `message ${m.k ?? "?"}${m.fault ? " · fault: " + describeFault(m.fault) : ""} · ${m.index}` }));
    box.append(el("div", { class: "wf-row" + (n.fault ? " fault" : n.error ? " err" : "") },
      el("span", { class: "wf-label", style: `padding-left:${depth}em`, title: n.index },
        n.signature || "?", n.fault ? ` · ${describeFault(n.fault)}` : ""),
      lane));
  }
  if (rows.length < t.rpcs) box.append(el("p", { class: "hint" }, `the first ${rows.length} of ${t.rpcs} RPCs`));
  return box;
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
  if (Array.isArray(v)) return v.map(fmt).join(", ");
  if (typeof v === "object") {
    if ("index" in v) return `${v.signature || "?"} (${v.index})`;
    return Object.entries(v).map(([k, x]) => `${k} ${fmt(x)}`).join(", ");
  }
  return String(v);
}

// A tree node (`{index, signature}`, or a finding that carries them) named by its signature, linked to its
// node; a trace, linked to it.
function nodeLink(n) {
  if (!n) return "the root";
  return el("a", { href: "#tree/" + n.index, title: n.index, class: "node-link" }, n.signature || n.index);
}
function traceLink(id) { return id ? el("a", { href: "#traces/" + id, class: "mono" }, id.slice(0, 12) + "…") : "?"; }
function plural(n, one, many = one + "s") { return `${n} ${n === 1 ? one : many}`; }
function listOf(items) { return [...items].join(", ") || "none"; }

// One sentence per finding, in the words of paper §6, with its nodes and an example trace linked.
const ANALYSES = [
  ["Circuit breakers", "circuit_breakers", "An RPC that stopped being made after it failed, as a circuit breaker does.",
    e => [nodeLink(e), ` failed (${[...e.faults].map(describeFault).join(", ") || "errors"}) in ${plural(e.fault_traces, "trace")}, the last `,
      traceLink(e.last_fault_trace), `; it was then absent from ${plural(e.absent_traces, "trace")}, from `, traceLink(e.first_absent_trace),
      e.state === "open" ? " on: the breaker looks open" : [", and came back in ", traceLink(e.reclosed_trace), ": reclosed"],
      ` (its subtree: ${plural(e.subtree_size, "node")}).`]],
  ["Repeated calls", "repeated_calls", "The same RPC with the same payload, more than once in one trace: a missing cache or a retry.",
    r => [el("b", {}, r.signature), ` with payload ${r.payload_digest.slice(0, 8)}… was called up to ${r.max_calls_in_one_trace} times in one trace `,
      `(${plural(r.total_calls, "call")} in ${plural(r.traces, "trace")}), `,
      r.scope === "same_parent" ? ["by the same parent, ", nodeLink(r.parent)] : "across layers of the call tree",
      `, by ${listOf(r.callers)}; example `, traceLink(r.example_trace), "."]],
  ["Chained calls", "chained_calls", "Two RPCs to one service made one after the other by the same caller: candidates for one batched call.",
    c => [`${c.caller || "?"} calls `, el("b", {}, c.first), " then ", el("b", {}, c.second), ` on ${c.service} under `, nodeLink(c.parent),
      ` in ${plural(c.traces, "trace")}, ${c.median_gap_ms.toFixed(2)} ms apart (median); `,
      c.confidence === "data_dependent" ? `the second depends on the first's answer (${c.distinct_first_inputs} distinct first inputs, ${c.distinct_second_inputs} second)`
        : "only their order is known", "; example ", traceLink(c.example_trace), "."]],
  ["Ambiguous indexes", "ambiguous", "Indexes that named more than one RPC: the instantiation lacks a component that tells them apart.",
    a => [nodeLink(a), ` was flagged ${plural(a.flagged_by_instrumentation, "time")} by the instrumentation and collided `,
      `${plural(a.collisions_in_trace, "time")} within a trace, of ${a.seen} RPCs, from ${listOf(Object.keys(a.client_services))}.`]],
];

async function loadAnalyses() {
  const a = await getJSON("/analyses");
  const box = document.getElementById("analyses");
  const out = [el("p", {}, `${plural(a.traces_analyzed, "trace")} analyzed.`)];
  for (const [title, key, what, sentence] of ANALYSES) {
    const findings = a[key];
    out.push(el("h2", {}, `${title} (${findings.length})`), el("p", { class: "hint" }, what));
    out.push(findings.length ? el("ul", { class: "findings", "data-analysis": key }, ...findings.map(f => el("li", {}, ...[sentence(f)].flat(2))))
      : el("p", { class: "hint" }, "none found"));
  }
  out.push(el("h2", {}, "Projection to other instantiations"),
    el("p", { class: "hint" }, "What each coarser instantiation would name differently: RPCs that would share a name, and names that would change between traces."));
  const rows = el("table", { class: "grid", id: "projections" }, el("tr", {}, el("th", {}, "instantiation"), el("th", {}, "RPCs"),
    el("th", {}, "distinct indexes, full → projected"), el("th", {}, "names shared by several RPCs"), el("th", {}, "unstable names")));
  for (const p of a.projections) {
    rows.append(el("tr", {}, el("td", {}, p.instantiation), el("td", {}, p.rpcs), el("td", {}, `${p.distinct_full} → ${p.distinct_projected}`),
      el("td", {}, p.collapsed_names), el("td", {}, p.unstable_names)));
  }
  out.push(rows);
  for (const p of a.projections) {
    if (!p.collapses.length && !p.unstable.length) continue;
    out.push(el("h3", {}, `Under ${p.instantiation}`));
    const items = [
      ...p.collapses.map(c => el("li", {}, `one name for ${plural(c.full.length, "RPC")} (up to ${c.max_in_one_trace} in one trace, in `,
        plural(c.traces, "trace"), "): ", ...c.full.flatMap((n, i) => i ? [", ", nodeLink(n)] : [nodeLink(n)]), "; example ", traceLink(c.example_trace))),
      ...p.unstable.map(u => el("li", {}, `a name that changes between traces, for ${plural(u.distinct_full, "full index", "full indexes")}: `,
        ...u.full.flatMap((n, i) => i ? [", ", nodeLink(n)] : [nodeLink(n)]))),
    ];
    out.push(el("ul", { class: "findings" }, ...items));
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
// The reports the collector serves (`--search-report FILE or DIRECTORY`), newest first: the picker chooses
// one, and optionally a second shown beside it. The choice is the URL's query (`#search?report=ID&compare=ID`).
let reportList = null, shownReports = null;
const reportName = r => `${r.program} · ${r.time} UTC · ${plural(r.executions, "execution")}, ${r.failures} failing` + (r.latest ? " (latest)" : "");
async function loadSearch() {
  const box = document.getElementById("search");
  let list;
  try { list = await getJSON("/search/reports", { quiet: [404] }); } catch (e) {
    reportList = null;
    box.replaceChildren(el("p", { class: "hint" }, e.status === 404 ? "no search report" : "the search reports are unavailable"));
    return;
  }
  reportList = list;
  const problems = document.getElementById("report-problems");
  problems.hidden = list.problems.length === 0;
  problems.replaceChildren(`${plural(list.problems.length, "report file")} could not be read: `,
    ...list.problems.flatMap((p, i) => [i ? "; " : "", el("code", {}, p.file), `: ${p.error}`]));
  if (list.omitted) problems.append(` · ${list.omitted} more reports not listed`), problems.hidden = false;
  const q = new URLSearchParams(searchQuery);
  const ids = new Set(list.reports.map(r => r.id));
  const a = ids.has(q.get("report")) ? q.get("report") : (list.reports[0] || {}).id;
  const b = ids.has(q.get("compare")) && q.get("compare") !== a ? q.get("compare") : "";
  const option = (r, selected) => { const o = el("option", { value: r.id }, reportName(r)); o.selected = selected; return o; };
  document.getElementById("report-a").replaceChildren(...list.reports.map(r => option(r, r.id === a)));
  const none = el("option", { value: "" }, "none"); none.selected = !b;
  document.getElementById("report-b").replaceChildren(none, ...list.reports.filter(r => r.id !== a).map(r => option(r, r.id === b)));
  if (!a) { box.replaceChildren(el("p", { class: "hint" }, `no report in ${list.source} yet`)); shownReports = null; return; }
  const key = JSON.stringify([a, b, list.reports.filter(r => r.id === a || r.id === b)]);
  if (key === shownReports) return; // the same reports, unchanged: keep the page (and the open execution) as it is
  shownReports = key;
  const entry = id => list.reports.find(r => r.id === id);
  const panes = [[entry(a), ""], ...(b ? [[entry(b), "-b"]] : [])];
  const reports = await Promise.all(panes.map(([r]) => getJSON("/search?report=" + encodeURIComponent(r.id))));
  box.replaceChildren(el("div", { class: b ? "reports side-by-side" : "reports" },
    ...panes.map(([r, suffix], i) => reportPane(r, reports[i], suffix, list, !b))));
}
function pickReports() {
  const f = new FormData(document.getElementById("report-bar"));
  const q = new URLSearchParams();
  if (f.get("report")) q.set("report", f.get("report"));
  if (f.get("compare")) q.set("compare", f.get("compare"));
  searchQuery = q.toString();
  delete loaded.search;
  showTab("search", tabHash("search"));
}
document.getElementById("report-a").addEventListener("change", pickReports);
document.getElementById("report-b").addEventListener("change", pickReports);

// One report: its heading (program, time, test), its executions, failing first, and an execution's call tree.
function reportPane(entry, rep, suffix, list, wide) {
  const execs = [...(rep.executions || [])].sort((a, b) => failed(b) - failed(a));
  const file = list.directory ? `${list.source}/${entry.id}` : list.source;
  const t = el("table", { class: "grid executions", id: "executions" + suffix }, el("tr", {}, el("th", {}, "#"), el("th", {}, "outcome"),
    el("th", {}, "planned faults"), el("th", {}, "carried out")));
  const detail = el("div", { id: "execution-detail" + suffix, class: "detail execution-detail" },
    el("p", { class: "hint" }, "click an execution for its call tree"));
  for (const e of execs) {
    const unreached = e.unreached || [];
    t.append(el("tr", { class: failed(e) ? "failed" : "", onclick: () => showExecution(e, detail, file) },
      el("td", {}, e.number), el("td", {}, outcomeText(e)),
      el("td", {}, e.plan.length ? e.plan.map(plannedText).join("; ") : "none (the fault-free run)"),
      el("td", {}, unreached.length ? `${unreached.length} of ${e.plan.length} never reached: ` + unreached.map(plannedText).join("; ")
        : e.plan.length ? "every planned fault injected" : "")));
  }
  return el("section", { class: "report-pane", "data-report": entry.id },
    el("h2", {}, `${entry.program} · ${entry.time} UTC`),
    el("p", { class: "report-summary" }, `${rep.test || "functional test"}: ${plural(execs.length, "execution")}, ${execs.filter(failed).length} failing`,
      el("span", { class: "hint", title: file }, ` · ${entry.id}`)),
    wide ? el("div", { class: "split" }, t, detail) : el("div", {}, t, detail));
}

function plannedText(p) { return `${p.signature || p.index} → ${describeFault(p.fault)}`; }

// An execution as its call tree: each RPC under the RPC whose serving issued it, the injected faults marked,
// the planned faults that no RPC reached listed apart.
function showExecution(e, box, file = "REPORT.json") {
  const rpcs = e.rpcs || [];
  const kids = new Map();
  rpcs.forEach((r, i) => { const p = r.parent ?? -1; if (!kids.has(p)) kids.set(p, []); kids.get(p).push(i); });
  const planned = new Set(e.plan.map(p => p.index));
  const item = i => {
    const r = rpcs[i];
    const li = el("li", {}, el("div", { class: "row" }, el("span", { class: "sig" }, r.signature), " ",
      // its node in the collector's tree (which holds full indexes: the reference index, when the search ran
      // under a coarser instantiation)
      el("a", { class: "el", title: r.reference || r.index, href: "#tree/" + (r.reference || r.index) },
        (r.index.split(".").pop() || "").slice(0, 6) + "…"),
      r.fault ? badge("injected: " + describeFault(r.fault), "fault") : null,
      !r.fault && planned.has(r.index) ? badge("planned, not injected", "err") : null,
      r.message ? badge(`message ${r.message}`) : null));
    const children = kids.get(i) || [];
    if (children.length) li.append(el("ul", {}, ...children.map(item)));
    return li;
  };
  const parts = [el("h2", {}, `execution ${e.number}: ${outcomeText(e)}`)];
  if ((e.traces || []).length) parts.push(el("p", { class: "exec-traces" }, "its traces: ",
    ...e.traces.flatMap((id, i) => i ? [", ", traceLink(id)] : [traceLink(id)])));
  if (e.plan_wire) parts.push(el("p", {}, "replay its plan: ", el("code", {}, `--replay ${file} ${e.number}`),
    el("span", { class: "hint" }, ` (plan ${e.plan_wire})`)));
  if ((e.unreached || []).length) parts.push(el("p", { class: "unreached" }, "planned but never reached (the outcome does not test them): " +
    e.unreached.map(plannedText).join("; ")));
  parts.push(el("ul", { class: "tree exec-tree" }, ...(kids.get(-1) || []).map(item)));
  box.replaceChildren(...parts);
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

// ---- liveness: the open view follows the data --------------------------------------------------------
// The stats are polled; when they change, the open tab reloads in place (keeping its selection) and the
// others reload when next opened. A failed poll says so in the header, not in the error banner.
const POLL_MS = 2000;
// On a query node (`dei-collector query`) the stats name its shards: the header says how many answered, and a
// shard that did not makes the whole view partial, said above every tab until it answers again.
function showShards(shards) {
  const note = document.getElementById("partial");
  if (!shards) { note.hidden = true; return; }
  const missing = shards.peers.filter(p => !p.answered);
  document.getElementById("stats").textContent +=
    ` · ${shards.peers.length - missing.length} of ${shards.peers.length} shards`;
  note.hidden = !shards.partial;
  note.textContent = shards.partial
    ? `Partial view: ${missing.map(p => `${p.url} did not answer (${p.error})`).join("; ")}. ` +
      "Its share of the traces, the tree and the graph is missing until it answers again."
    : "";
}
const reloaders = { graph: loadGraph, tree: reloadTree, traces: loadTraces, analyses: loadAnalyses, search: loadSearch };
let lastStats = null, polling = false;
async function pollStats() {
  if (polling) return;
  polling = true;
  const box = document.getElementById("stats");
  try {
    const r = await fetch(API + "/stats");
    if (!r.ok) throw new Error(`${r.status}`);
    const s = await r.json();
    box.textContent = `${s.tree_nodes} tree nodes · ${s.traces_retained} traces · ${s.graph_edges} edges`;
    box.classList.remove("stale");
    showShards(s.peers);
    const now = JSON.stringify([s.tree_nodes, s.traces_retained, s.graph_edges, s.graph_waiting_spans, s.peers ? s.peers.partial : null]);
    const active = document.querySelector("#tabs button.active")?.dataset.tab;
    if (lastStats !== null && now !== lastStats) {
      for (const name of Object.keys(loaded)) if (name !== active && name !== "diff") delete loaded[name];
      if (active && reloaders[active]) loaded[active] = reloaders[active]().catch(reportError);
    } else if (active === "search" && loaded.search) {
      // a new run's report appears in the picker without spans arriving (the list is read again; an unchanged
      // selection is not drawn again)
      loaded.search = loaded.search.then(loadSearch).catch(reportError);
    }
    lastStats = now;
  } catch (e) {
    box.textContent = `collector unreachable (${e.message}); retrying`;
    box.classList.add("stale");
  } finally { polling = false; }
}
pollStats();
setInterval(pollStats, POLL_MS);
reroute();
