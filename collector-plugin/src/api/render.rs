//! The service graph as JSON, Graphviz DOT and Mermaid, including the edges derived from the DEI prefix
//! relation.

use crate::graph::Resolved;
use crate::state::CollectorState;
use crate::views::{EdgeType, GraphEdge, GraphNode, GraphView};
use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Arc;

/// Edges from the prefix relation: for each tree node, its caller is the service on its client spans, or
/// else the server of its parent index (the caller's index is the prefix); its callee is the service on
/// its server spans, or else the peer its client spans name (merged into the service that serves it, as
/// the service graph merges virtual nodes). Weighted by occurrences.
pub fn index_edges(a: &CollectorState) -> BTreeMap<(Arc<str>, Arc<str>), u64> {
    let mut out = BTreeMap::new();
    for id in a.tree.ids() {
        let Some(n) = a.tree.node(id) else { continue };
        if n.index.is_root() || n.stats.seen == 0 {
            continue;
        }
        let top = |m: &BTreeMap<Arc<str>, u64>| m.iter().max_by_key(|(_, c)| **c).map(|(k, _)| k.clone());
        let client = top(&n.stats.client_services).or_else(|| {
            n.parent
                .and_then(|p| a.tree.node(p))
                .and_then(|p| top(&p.stats.server_services))
        });
        let server = top(&n.stats.server_services).or_else(|| top(&n.stats.peers).map(|p| a.graph.merged_name(&p)));
        if let (Some(c), Some(s)) = (client, server) {
            *out.entry((c, s)).or_insert(0) += n.stats.seen;
        }
    }
    out
}

/// Builds the graph view, virtual nodes merged into the services that serve their `rpc.service`
/// ([`crate::graph::ServiceGraph::merged_edges`]).
pub fn graph_view(a: &CollectorState) -> GraphView {
    let mut nodes: BTreeMap<Arc<str>, GraphNode> = BTreeMap::new();
    let service = |id: &Arc<str>| GraphNode {
        id: id.clone(),
        is_virtual: false,
        serves: a.graph.serves(id),
        served_by: Vec::new(),
    };
    for s in a.graph.services().keys() {
        nodes.insert(s.clone(), service(s));
    }
    for v in a.graph.virtual_nodes().keys() {
        if let Resolved::Virtual(served_by) = a.graph.resolve(v) {
            nodes.entry(v.clone()).or_insert(GraphNode {
                id: v.clone(),
                is_virtual: true,
                serves: Vec::new(),
                served_by,
            });
        }
    }
    let mut index = index_edges(a);
    let mut edges = Vec::new();
    for m in a.graph.merged_edges() {
        let (k, e) = (&m.key, &m.stats);
        for end in [&k.client, &k.server] {
            nodes.entry(end.clone()).or_insert_with(|| service(end));
        }
        // the prefix relation's count goes on the span edge between the same two nodes, whatever its type
        let idx = index.remove(&(k.client.clone(), k.server.clone())).unwrap_or(0);
        edges.push(GraphEdge {
            client: k.client.clone(),
            server: k.server.clone(),
            connection_type: k.connection_type.into(),
            requests: e.requests,
            failed: e.failed,
            merged_requests: m.merged_requests,
            merged_failed: m.merged_failed,
            index_requests: idx,
            client_latency: (e.client_seconds.count > 0).then(|| (&e.client_seconds).into()),
            server_latency: (e.server_seconds.count > 0).then(|| (&e.server_seconds).into()),
        });
    }
    for ((c, s), n) in index {
        nodes.entry(c.clone()).or_insert_with(|| service(&c));
        nodes.entry(s.clone()).or_insert_with(|| GraphNode {
            id: s.clone(),
            is_virtual: true,
            serves: Vec::new(),
            served_by: a.graph.served_by(&s),
        });
        edges.push(GraphEdge {
            client: c,
            server: s,
            connection_type: EdgeType::Index,
            requests: 0,
            failed: 0,
            merged_requests: 0,
            merged_failed: 0,
            index_requests: n,
            client_latency: None,
            server_latency: None,
        });
    }
    GraphView {
        nodes: nodes.into_values().collect(),
        edges,
    }
}

fn quote(s: &str) -> String {
    let mut q = String::with_capacity(s.len() + 2);
    q.push('"');
    for c in s.chars() {
        match c {
            '"' | '\\' => {
                q.push('\\');
                q.push(c);
            }
            '\n' | '\r' => q.push(' '),
            c => q.push(c),
        }
    }
    q.push('"');
    q
}

/// `N req, M failed`, and how many of them never reached the server (merged from a virtual node).
fn edge_label(e: &crate::views::GraphEdge) -> String {
    let mut label = format!("{} req, {} failed", e.requests, e.failed);
    if e.merged_requests > 0 {
        let _ = write!(label, " ({} before reaching it)", e.merged_requests);
    }
    label
}

/// Graphviz DOT.
pub fn to_dot(g: &GraphView) -> String {
    let mut out = String::from("digraph service_graph {\n  rankdir=LR;\n  node [shape=box];\n");
    for n in &g.nodes {
        let style = if n.is_virtual { " [style=dashed]" } else { "" };
        let _ = writeln!(out, "  {}{};", quote(&n.id), style);
    }
    for e in &g.edges {
        let label = if e.connection_type == EdgeType::Index {
            format!("index: {}", e.index_requests)
        } else {
            edge_label(e)
        };
        let style = if e.connection_type == EdgeType::Index {
            ", style=dotted"
        } else {
            ""
        };
        let _ = writeln!(
            out,
            "  {} -> {} [label={}{}];",
            quote(&e.client),
            quote(&e.server),
            quote(&label),
            style
        );
    }
    out.push_str("}\n");
    out
}

fn mermaid_id(names: &BTreeMap<&str, usize>, s: &str) -> String {
    format!("n{}", names.get(s).copied().unwrap_or(0))
}

/// Mermaid flowchart.
pub fn to_mermaid(g: &GraphView) -> String {
    let names: BTreeMap<&str, usize> = g.nodes.iter().enumerate().map(|(i, n)| (&*n.id, i)).collect();
    let clean = |s: &str| s.replace(['"', '[', ']', '(', ')', '{', '}', '|', '<', '>'], "_");
    let mut out = String::from("flowchart LR\n");
    for n in &g.nodes {
        let id = mermaid_id(&names, &n.id);
        if n.is_virtual {
            let _ = writeln!(out, "  {id}([\"{}\"])", clean(&n.id));
        } else {
            let _ = writeln!(out, "  {id}[\"{}\"]", clean(&n.id));
        }
    }
    for e in &g.edges {
        let (c, s) = (mermaid_id(&names, &e.client), mermaid_id(&names, &e.server));
        if e.connection_type == EdgeType::Index {
            let _ = writeln!(out, "  {c} -.->|\"index: {}\"| {s}", e.index_requests);
        } else {
            let _ = writeln!(out, "  {c} -->|\"{}\"| {s}", edge_label(e));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::counters::Counters;
    use crate::span_record::{Kind, PeerSource, SpanRecord};
    use crate::state::StateConfig;
    use std::time::Instant;

    /// A span of `service` naming the `rpc.service` `cinema.Bookings` (a client span's callee, a server
    /// span's own service).
    fn span(trace: u8, id: u8, parent: Option<u8>, service: &str, kind: Kind, error: bool) -> SpanRecord {
        SpanRecord {
            trace_id: [trace; 16],
            span_id: [id; 8],
            parent_span_id: parent.map(|p| [p; 8]),
            service: Arc::from(service),
            name: String::new(),
            kind,
            start_ns: 1_000_000_000,
            end_ns: 1_002_000_000,
            error,
            status: Default::default(),
            peer: Some(("cinema.Bookings".into(), PeerSource::RpcService)),
            database: false,
            dei: Default::default(),
        }
    }

    #[test]
    fn json_dot_mermaid_and_metrics_show_the_same_merged_edge() {
        let mut a = CollectorState::new(StateConfig::default(), Arc::new(Counters::default()));
        let spans = vec![
            // a call that failed before reaching bookings: a client span alone
            span(1, 2, Some(1), "users", Kind::Client, true),
            // a call bookings served
            span(2, 2, Some(1), "users", Kind::Client, false),
            span(2, 3, Some(2), "bookings", Kind::Server, false),
        ];
        a.ingest(spans, Instant::now());
        a.finish();
        let view = graph_view(&a);
        let ids: Vec<(&str, bool)> = view.nodes.iter().map(|n| (&*n.id, n.is_virtual)).collect();
        assert_eq!(
            ids,
            [("bookings", false), ("users", false)],
            "no virtual cinema.Bookings"
        );
        let bookings = &view.nodes[0];
        assert_eq!(bookings.serves, [Arc::from("cinema.Bookings")]);
        let e = &view.edges[0];
        assert_eq!(view.edges.len(), 1, "{:?}", view.edges);
        assert_eq!(
            (
                &*e.client,
                &*e.server,
                e.connection_type,
                e.requests,
                e.failed,
                e.merged_requests,
                e.merged_failed
            ),
            ("users", "bookings", EdgeType::Direct, 2, 1, 1, 1)
        );
        let dot = to_dot(&view);
        assert!(
            dot.contains(r#""users" -> "bookings" [label="2 req, 1 failed (1 before reaching it)"];"#),
            "{dot}"
        );
        let mermaid = to_mermaid(&view);
        assert!(
            mermaid.contains(r#"-->|"2 req, 1 failed (1 before reaching it)"|"#),
            "{mermaid}"
        );
        let metrics = crate::api::prometheus::render(
            &a,
            &a.counters().snapshot(),
            crate::forward::QueueDepth::default(),
            10,
            a.graph.waiting(),
        );
        for line in [
            r#"traces_service_graph_request_total{client="users",server="bookings",connection_type=""} 2"#,
            r#"traces_service_graph_request_failed_total{client="users",server="bookings",connection_type=""} 1"#,
            r#"traces_service_graph_request_client_seconds_count{client="users",server="bookings",connection_type=""} 2"#,
            "dei_graph_edges 1",
        ] {
            assert!(metrics.lines().any(|l| l == line), "{line} missing from\n{metrics}");
        }
        for text in [&dot, &mermaid, &metrics] {
            assert!(!text.contains("cinema.Bookings"), "{text}");
        }
    }
}
