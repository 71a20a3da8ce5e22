//! What the parallel-search tests compare: a report's effective fault sets, and its canonical JSON without
//! what legitimately differs between two runs of the same search. Included by `tests/sfit_parallel.rs` and
//! `tests/sfit_parallel_fig5.rs` as `mod sfit_compare;`.

use dei_sfit::{FaultSet, Report};
use std::collections::BTreeSet;

pub fn effective_sets(report: &Report) -> BTreeSet<FaultSet> {
    report
        .executions
        .iter()
        .map(|e| e.effective.iter().map(|p| (p.index.clone(), p.fault)).collect())
        .collect()
}

/// `text` with the count in every "with N faults injected" replaced by `<n>`: a functional test's message
/// quotes how many injected faults its run had observed when it failed, which depends on whether the faulted
/// call's span had ended by then (a timing, not a result of the search).
pub fn without_injected_counts(text: &str) -> String {
    const TAIL: &str = " faults injected";
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find(TAIL) {
        let head = &rest[..at];
        let digits = head.len() - head.trim_end_matches(|c: char| c.is_ascii_digit()).len();
        out.push_str(&head[..head.len() - digits]);
        out.push_str(if digits > 0 { "<n>" } else { "" });
        out.push_str(TAIL);
        rest = &rest[at + TAIL.len()..];
    }
    out.push_str(rest);
    out
}

/// The whole canonical report as JSON, without what legitimately differs between two runs of the same
/// search: timings (`test_us`, `collect_us`, `overhead_us`, an RPC's `start` and `end`), the trace ids, `scheduled_by`
/// (which of the executions that observed an RPC finished first), and the order in which an execution's
/// spans ended (its RPCs are sorted by index, each parent named by its index instead of its position); with
/// the count of faults a failing test's message quotes; with `all_options` also the parallelism asked and
/// used, the notes and the warnings (to compare with a sequential search or another span source).
pub fn canonical_json(report: &Report, all_options: bool) -> serde_json::Value {
    let mut v = serde_json::to_value(report).expect("json");
    for e in v["executions"].as_array_mut().expect("executions") {
        let e = e.as_object_mut().expect("an execution");
        for k in ["test_us", "collect_us", "overhead_us", "scheduled_by", "traces"] {
            e.remove(k);
        }
        let rpcs = e["rpcs"].as_array().expect("rpcs").clone();
        let mut sorted: Vec<serde_json::Value> = rpcs
            .iter()
            .map(|r| {
                let mut r = r.clone();
                let o = r.as_object_mut().expect("an rpc");
                o.remove("start");
                o.remove("end");
                let parent = o
                    .get("parent")
                    .and_then(serde_json::Value::as_u64)
                    .map(|p| rpcs[p as usize]["index"].clone());
                o.insert("parent".into(), parent.unwrap_or(serde_json::Value::Null));
                r
            })
            .collect();
        sorted.sort_by_key(|r| r.to_string());
        e.insert("rpcs".into(), serde_json::Value::Array(sorted));
        if let Some(serde_json::Value::String(m)) = e.get_mut("outcome").and_then(|o| o.get_mut("message")) {
            *m = without_injected_counts(m);
        }
    }
    if all_options {
        let o = v.as_object_mut().expect("a report");
        for k in ["parallelism_used", "notes", "warnings"] {
            o.remove(k);
        }
        o["options"].as_object_mut().expect("options").remove("parallelism");
    }
    v
}
