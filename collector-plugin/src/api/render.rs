//! The service graph as JSON, Graphviz DOT and Mermaid, including the edges derived from the DEI prefix
//! relation.

use crate::state::CollectorState;
use crate::views::{EdgeType, GraphEdge, GraphNode, GraphView};
use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Arc;

/// Edges from the prefix relation: for each tree node, its caller is the service on its client spans, or
/// else the server of its parent index (the caller's index is the prefix); its callee is the service on
/// its server spans, or else the peer its client spans name. Weighted by occurrences.
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
        let server = top(&n.stats.server_services).or_else(|| top(&n.stats.peers));
        if let (Some(c), Some(s)) = (client, server) {
            *out.entry((c, s)).or_insert(0) += n.stats.seen;
        }
    }
    out
}

/// Builds the graph view.
pub fn graph_view(a: &CollectorState) -> GraphView {
    let mut nodes: BTreeMap<Arc<str>, bool> = BTreeMap::new();
    for s in a.graph.services().keys() {
        nodes.insert(s.clone(), false);
    }
    for v in a.graph.virtual_nodes().keys() {
        nodes.entry(v.clone()).or_insert(true);
    }
    let mut index = index_edges(a);
    let mut edges = Vec::new();
    for (k, e) in a.graph.edges() {
        // the prefix relation's count goes on the span edge between the same two nodes, whatever its type
        let idx = index.remove(&(k.client.clone(), k.server.clone())).unwrap_or(0);
        edges.push(GraphEdge {
            client: k.client.clone(),
            server: k.server.clone(),
            connection_type: k.connection_type.into(),
            requests: e.requests,
            failed: e.failed,
            index_requests: idx,
            client_latency: (e.client_seconds.count > 0).then(|| (&e.client_seconds).into()),
            server_latency: (e.server_seconds.count > 0).then(|| (&e.server_seconds).into()),
        });
    }
    for ((c, s), n) in index {
        nodes.entry(c.clone()).or_insert(false);
        nodes.entry(s.clone()).or_insert(true);
        edges.push(GraphEdge {
            client: c,
            server: s,
            connection_type: EdgeType::Index,
            requests: 0,
            failed: 0,
            index_requests: n,
            client_latency: None,
            server_latency: None,
        });
    }
    GraphView {
        nodes: nodes
            .into_iter()
            .map(|(id, is_virtual)| GraphNode { id, is_virtual })
            .collect(),
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
            format!("{} req, {} failed", e.requests, e.failed)
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
            let _ = writeln!(out, "  {c} -->|\"{} req, {} failed\"| {s}", e.requests, e.failed);
        }
    }
    out
}
