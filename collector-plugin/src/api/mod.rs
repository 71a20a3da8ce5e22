//! The HTTP JSON API (its own port, loopback by default): the graph, the tree, the traces, the analyses and
//! Prometheus metrics. Documented in `collector-plugin/API.md`.

use crate::analysis::{self, ambiguous, chained_call, circuit_breaker, projection, repeated_call};
use crate::collector::Collector;
use crate::state::CollectorState;
pub mod prometheus;
pub mod render;
pub mod search;
pub mod traces;
pub mod tree;
pub mod ui;

use crate::api::tree::{self as views, Selection};
use crate::views::{NodeTraces, Stats};
use axum::Json;
use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use dei_propagator::{Index, Instantiation};
use serde::Deserialize;
use serde_json::json;
use std::sync::Arc;

/// The API router.
pub fn router(collector: Arc<Collector>) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/api/v1/stats", get(get_stats))
        .route("/api/v1/snapshot", get(snapshot))
        .route("/api/v1/peers", get(peers))
        .route("/api/v1/graph", get(graph))
        .route("/api/v1/tree", get(tree))
        .route("/api/v1/tree/node", get(node))
        .route("/api/v1/tree/children", get(children))
        .route("/api/v1/tree/node/traces", get(node_traces))
        .route("/api/v1/search", get(search))
        .route("/api/v1/search/reports", get(search_reports))
        .route("/api/v1/traces", get(traces))
        .route("/api/v1/traces/{trace_id}", get(trace))
        .route("/api/v1/diff", get(diff))
        .route("/api/v1/analyses", get(analyses))
        .route("/api/v1/analyses/circuit-breakers", get(circuit_breakers))
        .route("/api/v1/analyses/repeated-calls", get(repeated_calls))
        .route("/api/v1/analyses/chained-calls", get(chained_calls))
        .route("/api/v1/analyses/ambiguous", get(ambiguous_indexes))
        .route("/api/v1/analyses/projection", get(projection))
        .merge(ui::router())
        .layer(axum::middleware::from_fn_with_state(collector.clone(), check_host))
        .with_state(collector)
}

/// Whether a `Host` header value may reach the API: an IP literal (a rebound DNS name cannot be one),
/// `localhost` or a `*.localhost` name (browsers resolve those to loopback themselves), or a name in
/// `allowed` (compared without case, with or without the port).
pub fn host_allowed(host: &str, allowed: &[String]) -> bool {
    let host = host.trim().to_ascii_lowercase();
    let name = match host.strip_prefix('[') {
        Some(rest) => {
            return rest
                .split(']')
                .next()
                .is_some_and(|ip| ip.parse::<std::net::Ipv6Addr>().is_ok());
        }
        None => host.rsplit_once(':').map_or(host.as_str(), |(n, port)| {
            if port.chars().all(|c| c.is_ascii_digit()) {
                n
            } else {
                host.as_str()
            }
        }),
    };
    name.parse::<std::net::Ipv4Addr>().is_ok()
        || name == "localhost"
        || name.ends_with(".localhost")
        || allowed.iter().any(|a| {
            let a = a.trim().to_ascii_lowercase();
            a == host || a == name
        })
}

async fn check_host(
    State(c): State<Arc<Collector>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let host = req
        .headers()
        .get(header::HOST)
        .map(|h| h.to_str().unwrap_or("\u{fffd}").to_string())
        .or_else(|| req.uri().authority().map(|a| a.to_string()));
    match host {
        Some(h) if !host_allowed(&h, &c.config().api_allowed_hosts) => {
            crate::counters::Counters::add(&c.counters().api_host_refused, 1);
            (
                StatusCode::FORBIDDEN,
                Json(json!({
                    "error": format!(
                        "Host {h:?} is not allowed: the API answers to IP addresses, localhost and the names \
                         given with --api-allowed-host (a guard against DNS rebinding)"
                    )
                })),
            )
                .into_response()
        }
        _ => next.run(req).await,
    }
}

/// A bad query: answered with 400 and a JSON `{"error": …}` body.
struct BadRequest(String);

impl IntoResponse for BadRequest {
    fn into_response(self) -> Response {
        (StatusCode::BAD_REQUEST, Json(json!({ "error": self.0 }))).into_response()
    }
}

fn bad_request(msg: impl Into<String>) -> BadRequest {
    BadRequest(msg.into())
}

fn not_found(msg: impl Into<String>) -> Response {
    (StatusCode::NOT_FOUND, Json(json!({ "error": msg.into() }))).into_response()
}

fn parse_index(s: Option<&str>) -> Result<Index, BadRequest> {
    match s {
        None | Some("") | Some("1") => Ok(Index::root()),
        Some(s) => Index::decode(s).map_err(|e| bad_request(format!("invalid index {s:?}: {e}"))),
    }
}

fn parse_trace_id(s: &str) -> Result<[u8; 16], BadRequest> {
    let bytes = hex::decode(s.trim())
        .map_err(|_| bad_request(format!("invalid trace id {s:?}: expected 32 hex characters")))?;
    bytes
        .try_into()
        .map_err(|_| bad_request(format!("invalid trace id {s:?}: expected 32 hex characters")))
}

/// Liveness: the process serves HTTP.
async fn healthz() -> Response {
    Json(json!({ "status": "ok" })).into_response()
}

/// Readiness: the receivers serve and, when forwarding, a TCP connection to the downstream opens; 200 when
/// ready, 503 (with what is not) otherwise.
async fn readyz(State(c): State<Arc<Collector>>) -> Response {
    if let Some((_, view)) = c.peers() {
        // a query node receives nothing: it is ready when a shard answered its last pull
        let answered = view.peers.iter().filter(|p| p.answered).count();
        let ready = answered > 0;
        let body = json!({
            "ready": ready,
            "receivers": "none",
            "shards": { "answered": answered, "of": view.peers.len(), "partial": view.partial },
        });
        let code = if ready {
            StatusCode::OK
        } else {
            StatusCode::SERVICE_UNAVAILABLE
        };
        return (code, Json(body)).into_response();
    }
    let receivers = c.receivers_serving();
    let downstream = match c.forwarder() {
        None => None,
        Some(f) => Some((
            f.endpoint().to_string(),
            f.probe(std::time::Duration::from_secs(1)).await,
        )),
    };
    let reachable = downstream.as_ref().is_none_or(|(_, r)| r.is_ok());
    let ready = receivers && reachable;
    let body = json!({
        "ready": ready,
        "receivers": if receivers { "serving" } else { "stopped" },
        "downstream": downstream.map(|(endpoint, r)| json!({
            "endpoint": endpoint,
            "reachable": r.is_ok(),
            "error": r.err(),
        })),
    });
    let code = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (code, Json(body)).into_response()
}

async fn metrics(State(c): State<Arc<Collector>>) -> Response {
    let queued = c.queue_depth();
    let counters = c.counters().snapshot();
    let state = c.state();
    // a query node's spans waiting for their peer are its shards'
    let waiting = c.peers().map_or(state.graph.waiting(), |(waiting, _)| waiting);
    let body = prometheus::render(
        &state,
        &counters,
        queued,
        c.config().metrics_max_histogram_edges,
        waiting,
    );
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")],
        body,
    )
        .into_response()
}

/// A snapshot of the counters and the sizes of the state.
pub fn stats(
    a: &CollectorState,
    counters: &crate::counters::CountersSnapshot,
    queued: crate::forward::QueueDepth,
) -> Stats {
    Stats {
        counters: counters.clone(),
        tree_nodes: a.tree.len(),
        traces_retained: a.traces.len(),
        graph_edges: a.graph.merged_edge_count(),
        graph_waiting_spans: a.graph.waiting(),
        forward_queue_spans: queued.spans,
        forward_queue_bytes: queued.bytes,
        peers: None,
    }
}

async fn get_stats(State(c): State<Arc<Collector>>) -> Response {
    Json(c.stats()).into_response()
}

/// A shard's state for a query node to merge (`dei-collector query`).
/// `GET /api/v1/snapshot`'s parameters: a cursor of an earlier snapshot, all four or none.
#[derive(Deserialize)]
struct SnapshotQuery {
    epoch: Option<u64>,
    tree: Option<u64>,
    traces: Option<u64>,
    stacks: Option<usize>,
}

async fn snapshot(State(c): State<Arc<Collector>>, Query(q): Query<SnapshotQuery>) -> Response {
    let since = match (q.epoch, q.tree, q.traces, q.stacks) {
        (None, None, None, None) => None,
        (Some(epoch), Some(tree), Some(traces), Some(stacks)) => Some(crate::shards::snapshot::Cursor {
            epoch,
            tree,
            traces,
            stacks,
        }),
        _ => {
            return bad_request("a cursor is epoch, tree, traces and stacks together".to_string()).into_response();
        }
    };
    let counters = c.counters().snapshot();
    Json(c.state().snapshot_since(counters, since)).into_response()
}

/// A query node's shards; 404 on a shard or a single dei-collector.
async fn peers(State(c): State<Arc<Collector>>) -> Response {
    match c.peers() {
        Some((_, view)) => Json(view).into_response(),
        None => not_found("not a query node: no peers (GET /api/v1/peers answers on dei-collector query)"),
    }
}

#[derive(Deserialize)]
struct GraphQuery {
    format: Option<String>,
}

async fn graph(State(c): State<Arc<Collector>>, Query(q): Query<GraphQuery>) -> Response {
    let view = render::graph_view(&c.state());
    match q.format.as_deref() {
        None | Some("json") => Json(view).into_response(),
        Some("dot") => (
            [(header::CONTENT_TYPE, "text/vnd.graphviz; charset=utf-8")],
            render::to_dot(&view),
        )
            .into_response(),
        Some("mermaid") => (
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            render::to_mermaid(&view),
        )
            .into_response(),
        Some(other) => bad_request(format!("unknown format {other:?}: use json, dot or mermaid")).into_response(),
    }
}

#[derive(Deserialize)]
struct TreeQuery {
    index: Option<String>,
    depth: Option<usize>,
    limit: Option<usize>,
    offset: Option<usize>,
}

/// Most children in one `/api/v1/tree/children` response.
const MAX_CHILDREN_PAGE: usize = 10_000;

async fn tree(State(c): State<Arc<Collector>>, Query(q): Query<TreeQuery>) -> Response {
    let index = match parse_index(q.index.as_deref()) {
        Ok(i) => i,
        Err(r) => return r.into_response(),
    };
    let a = c.state();
    let Some((id, _)) = a.tree.get(&index) else {
        return not_found(format!("no node at {}", index.encode()));
    };
    let mut budget = q.limit.unwrap_or(1000).clamp(1, 100_000);
    let depth = q.depth.unwrap_or(64);
    Json(views::subtree(&a, id, depth, &mut budget)).into_response()
}

async fn node(State(c): State<Arc<Collector>>, Query(q): Query<TreeQuery>) -> Response {
    let index = match parse_index(q.index.as_deref()) {
        Ok(i) => i,
        Err(r) => return r.into_response(),
    };
    let a = c.state();
    match a.tree.get(&index) {
        Some((_, n)) => Json(views::node_view(n, &a.stacks)).into_response(),
        None => not_found(format!("no node at {}", index.encode())),
    }
}

async fn children(State(c): State<Arc<Collector>>, Query(q): Query<TreeQuery>) -> Response {
    let index = match parse_index(q.index.as_deref()) {
        Ok(i) => i,
        Err(r) => return r.into_response(),
    };
    let a = c.state();
    let Some((id, _)) = a.tree.get(&index) else {
        return not_found(format!("no node at {}", index.encode()));
    };
    let offset = q.offset.unwrap_or(0);
    let limit = q.limit.unwrap_or(MAX_CHILDREN_PAGE).min(MAX_CHILDREN_PAGE);
    let list: Vec<_> = a
        .tree
        .children(id)
        .into_iter()
        .skip(offset)
        .take(limit)
        .filter_map(|i| a.tree.node(i))
        .map(|n| views::node_view(n, &a.stacks))
        .collect();
    Json(list).into_response()
}

async fn traces(State(c): State<Arc<Collector>>, Query(q): Query<traces::TraceQuery>) -> Response {
    match traces::list(&c.state(), &q) {
        Ok(list) => Json(list).into_response(),
        Err(e) => bad_request(e).into_response(),
    }
}

async fn trace(State(c): State<Arc<Collector>>, Path(trace_id): Path<String>) -> Response {
    let id = match parse_trace_id(&trace_id) {
        Ok(i) => i,
        Err(r) => return r.into_response(),
    };
    if let Some(lookup) = c.trace_lookup() {
        // a query node: the shard that holds the trace answers, as fresh as it is
        return match lookup.trace(id).await {
            crate::shards::peers::Found::Trace(body) => {
                ([(header::CONTENT_TYPE, "application/json")], body).into_response()
            }
            crate::shards::peers::Found::Missing(errors) if errors.is_empty() => {
                not_found(format!("trace {trace_id} is not retained by any shard"))
            }
            crate::shards::peers::Found::Missing(errors) => not_found(format!(
                "trace {trace_id} is not retained by the shards that answered; these did not: {}",
                errors.join("; ")
            )),
            crate::shards::peers::Found::BadAnswer(errors) => (
                StatusCode::BAD_GATEWAY,
                Json(json!({ "error": format!(
                    "trace {trace_id}: no shard gave its view; these answered with what is not one, or did not \
                     answer: {}",
                    errors.join("; ")
                ) })),
            )
                .into_response(),
        };
    }
    // the view is built under the state's lock and serialized after it is released
    let view = c.state().trace(&id).map(views::trace_view);
    match view {
        Some(view) => Json(view).into_response(),
        None => not_found(format!("trace {trace_id} is not retained")),
    }
}

#[derive(Deserialize)]
struct DiffQuery {
    a_from: Option<u64>,
    a_to: Option<u64>,
    b_from: Option<u64>,
    b_to: Option<u64>,
    a_traces: Option<String>,
    b_traces: Option<String>,
    limit: Option<usize>,
}

/// Parses one side of a diff from window bounds (Unix ns) or a comma-separated list of trace ids: one or the
/// other (a window given with a list would not apply), and a list that names at least one trace.
fn selection(from: Option<u64>, to: Option<u64>, traces: Option<&str>, side: &str) -> Result<Selection, BadRequest> {
    match (from, to, traces) {
        (None, None, Some(list)) => {
            let ids = list
                .split(',')
                .filter(|s| !s.is_empty())
                .map(parse_trace_id)
                .collect::<Result<Vec<_>, _>>()?;
            if ids.is_empty() {
                return Err(bad_request(format!(
                    "side {side}: {side}_traces={list:?} names no trace: give comma-separated trace ids"
                )));
            }
            Ok(Selection::Traces(ids))
        }
        (_, _, Some(_)) => Err(bad_request(format!(
            "side {side}: give {side}_traces or {side}_from and {side}_to, not both: a side is a list of traces or \
             a window"
        ))),
        (Some(from), Some(to), None) if from <= to => Ok(Selection::Window { from, to }),
        _ => Err(bad_request(format!(
            "side {side}: give {side}_from and {side}_to (Unix ns, from <= to) or {side}_traces (comma-separated trace ids)"
        ))),
    }
}

async fn diff(State(c): State<Arc<Collector>>, Query(q): Query<DiffQuery>) -> Response {
    let sa = match selection(q.a_from, q.a_to, q.a_traces.as_deref(), "a") {
        Ok(s) => s,
        Err(r) => return r.into_response(),
    };
    let sb = match selection(q.b_from, q.b_to, q.b_traces.as_deref(), "b") {
        Ok(s) => s,
        Err(r) => return r.into_response(),
    };
    Json(views::diff(&c.state(), &sa, &sb, q.limit.unwrap_or(1000))).into_response()
}

#[derive(Deserialize)]
struct ProjectionQuery {
    instantiation: Option<String>,
    limit: Option<usize>,
}

fn instantiations(names: Option<&str>) -> Result<Vec<Instantiation>, BadRequest> {
    let Some(names) = names else {
        return Ok(Vec::new());
    };
    names
        .split(',')
        .filter(|s| !s.is_empty())
        .map(|n| {
            Instantiation::by_name(n).ok_or_else(|| {
                let known: Vec<String> = Instantiation::presets()
                    .into_iter()
                    .map(|p| p.name.to_string())
                    .collect();
                bad_request(format!("unknown instantiation {n:?}; known: {}", known.join(", ")))
            })
        })
        .collect()
}

async fn analyses(State(c): State<Arc<Collector>>, Query(q): Query<ProjectionQuery>) -> Response {
    let extra = match instantiations(q.instantiation.as_deref()) {
        Ok(v) => v,
        Err(r) => return r.into_response(),
    };
    Json(analysis::report(&c.state(), &extra)).into_response()
}

async fn circuit_breakers(State(c): State<Arc<Collector>>) -> Response {
    Json(circuit_breaker::detect(&c.state(), &circuit_breaker::Params::default())).into_response()
}

async fn repeated_calls(State(c): State<Arc<Collector>>) -> Response {
    Json(repeated_call::detect(&c.state())).into_response()
}

async fn chained_calls(State(c): State<Arc<Collector>>) -> Response {
    Json(chained_call::detect(&c.state(), &chained_call::Params::default())).into_response()
}

async fn ambiguous_indexes(State(c): State<Arc<Collector>>) -> Response {
    Json(ambiguous::detect(&c.state())).into_response()
}

async fn projection(State(c): State<Arc<Collector>>, Query(q): Query<ProjectionQuery>) -> Response {
    let targets = match instantiations(q.instantiation.as_deref().or(Some("filibuster,3milebeach"))) {
        Ok(v) => v,
        Err(r) => return r.into_response(),
    };
    let a = c.state();
    let limit = q.limit.unwrap_or(50);
    Json(
        targets
            .iter()
            .map(|t| projection::project_tree(&a, t, limit))
            .collect::<Vec<_>>(),
    )
    .into_response()
}

async fn node_traces(State(c): State<Arc<Collector>>, Query(q): Query<TreeQuery>) -> Response {
    let index = match parse_index(q.index.as_deref()) {
        Ok(i) => i,
        Err(r) => return r.into_response(),
    };
    let a = c.state();
    let limit = q.limit.unwrap_or(100).min(10_000);
    let traces: Vec<String> = a
        .traces
        .ordered()
        .iter()
        .rev()
        .filter(|t| t.contains_index(&index))
        .take(limit)
        .map(|t| hex::encode(t.trace_id))
        .collect();
    Json(NodeTraces {
        index: index.encode(),
        traces,
    })
    .into_response()
}

#[derive(Deserialize)]
struct SearchQuery {
    report: Option<String>,
}

fn search_error(e: search::SearchError) -> Response {
    match e {
        search::SearchError::Malformed { .. } => (
            StatusCode::UNPROCESSABLE_ENTITY,
            Json(json!({ "error": e.to_string() })),
        )
            .into_response(),
        e => not_found(e.to_string()),
    }
}

/// One search report: `?report=ID` from the list, or the newest (the file itself when one was given).
async fn search(State(c): State<Arc<Collector>>, Query(q): Query<SearchQuery>) -> Response {
    let Some(path) = c.config().search_report.clone() else {
        return search_error(search::SearchError::NotConfigured);
    };
    match tokio::task::spawn_blocking(move || search::read(&path, q.report.as_deref())).await {
        Ok(Ok(v)) => Json(v).into_response(),
        Ok(Err(e)) => search_error(e),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            Json(json!({ "error": e.to_string() })),
        )
            .into_response(),
    }
}

/// The search reports, newest first, with the files that could not be read.
async fn search_reports(State(c): State<Arc<Collector>>) -> Response {
    let Some(path) = c.config().search_report.clone() else {
        return search_error(search::SearchError::NotConfigured);
    };
    match tokio::task::spawn_blocking(move || search::list(&path)).await {
        Ok(Ok(list)) => Json(list).into_response(),
        Ok(Err(e)) => search_error(e),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            Json(json!({ "error": e.to_string() })),
        )
            .into_response(),
    }
}
