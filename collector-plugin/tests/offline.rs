//! `dei-collector analyze` on OTLP/JSON files: JSON lines as the Collector's file exporter writes them
//! (with a bad line in between), and a single pretty-printed document.

use dei_collector_bench::loadgen::{SPANS_PER_TRACE, template};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use prost::Message;
use std::process::Command;

/// A request of `traces` generated traces whose trace ids start with `tag`.
fn request(traces: usize, tag: u64) -> ExportTraceServiceRequest {
    let (mut body, offsets) = template(traces);
    for o in offsets {
        body[o..o + 8].copy_from_slice(&tag.to_be_bytes());
    }
    ExportTraceServiceRequest::decode(body.as_slice()).unwrap()
}

fn analyze(args: &[&str]) -> (serde_json::Value, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_dei-collector"))
        .arg("analyze")
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8(out.stdout).unwrap();
    let v = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    (v, String::from_utf8_lossy(&out.stderr).to_string())
}

fn check(report: &serde_json::Value, traces: u64) {
    let edges = report["graph"]["edges"].as_array().unwrap();
    let edge = |c: &str, s: &str| {
        edges
            .iter()
            .find(|e| e["client"] == c && e["server"] == s && e["connection_type"] != "index")
    };
    assert_eq!(edge("frontend", "users").unwrap()["requests"], traces);
    assert_eq!(edge("catalog", "pricing").unwrap()["requests"], 3 * traces);
    assert_eq!(edge("catalog", "pricing").unwrap()["index_requests"], 3 * traces);
    assert_eq!(edge("user", "frontend").unwrap()["requests"], traces);
    let db = edge("users", "postgresql").expect("virtual database node");
    assert_eq!(db["connection_type"], "database");
    assert_eq!(
        db["index_requests"], traces,
        "the prefix relation confirms the database edge"
    );
    assert!(
        !edges.iter().any(|e| e["connection_type"] == "index"),
        "every index edge has a span edge here: {edges:?}"
    );
    assert!(
        report["graph"]["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n["id"] == "postgresql" && n["virtual"] == true)
    );
    // tree: root → {GetUser → SELECT, ListItems → Price ×3}
    let top = report["tree"]["subtree"].as_array().unwrap();
    assert_eq!(top.len(), 2);
    let list = top
        .iter()
        .find(|n| n["signature"] == "catalog.Catalog/ListItems")
        .unwrap();
    assert_eq!(list["subtree"].as_array().unwrap().len(), 3);
    assert_eq!(list["seen"], traces);
    assert_eq!(list["traces"], traces);
    // analyses ran; pricing calls differ only by payload, so signature-only projection collapses them
    let projections = report["analyses"]["projections"].as_array().unwrap();
    let sig = projections.iter().find(|p| p["instantiation"] == "signature").unwrap();
    assert_eq!(sig["collapsed_names"], 1);
    assert_eq!(sig["collapses"][0]["max_in_one_trace"], 3);
    let fil = projections.iter().find(|p| p["instantiation"] == "filibuster").unwrap();
    assert_eq!(fil["distinct_full"], 6);
}

#[test]
fn json_lines_with_a_bad_line() {
    let dir = std::env::temp_dir().join(format!("dei-offline-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("traces.jsonl");
    let mut text = String::new();
    text.push_str(&serde_json::to_string(&request(2, 1)).unwrap());
    text.push('\n');
    text.push_str("{ this is not json }\n");
    text.push_str(&serde_json::to_string(&request(3, 2)).unwrap());
    text.push('\n');
    std::fs::write(&path, text).unwrap();
    // the bad line fails the run unless --keep-going (collector-plugin/tests/cli.rs checks that)
    let (report, stderr) = analyze(&[
        "--keep-going",
        path.to_str().unwrap(),
        "--format",
        "json",
        "--instantiation",
        "signature",
    ]);
    assert_eq!(report["summary"]["documents"], 2);
    assert_eq!(report["summary"]["bad_documents"], 1);
    assert_eq!(report["summary"]["spans"], (5 * SPANS_PER_TRACE) as u64);
    assert!(
        stderr.contains("[1/1]") && stderr.contains("2 documents"),
        "progress on stderr: {stderr}"
    );
    check(&report, 5);
    // text and graph formats
    let out = Command::new(env!("CARGO_BIN_EXE_dei-collector"))
        .args(["analyze", "-q", "--keep-going", path.to_str().unwrap()])
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("catalog -> pricing [direct] requests=15"), "{text}");
    assert!(text.contains("pricing.Pricing/Price"), "{text}");
    let out = Command::new(env!("CARGO_BIN_EXE_dei-collector"))
        .args([
            "analyze",
            "-q",
            "--keep-going",
            "--format",
            "dot",
            path.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    let dot = String::from_utf8(out.stdout).unwrap();
    assert!(
        dot.starts_with("digraph") && dot.contains("\"catalog\" -> \"pricing\""),
        "{dot}"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_dei-collector"))
        .args([
            "analyze",
            "-q",
            "--keep-going",
            "--format",
            "mermaid",
            path.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    let mmd = String::from_utf8(out.stdout).unwrap();
    assert!(
        mmd.starts_with("flowchart LR") && mmd.contains("15 req, 0 failed"),
        "{mmd}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn single_pretty_document() {
    let dir = std::env::temp_dir().join(format!("dei-offline-pretty-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("trace.json");
    std::fs::write(&path, serde_json::to_string_pretty(&request(4, 9)).unwrap()).unwrap();
    let (report, _) = analyze(&[
        path.to_str().unwrap(),
        "--format",
        "json",
        "--instantiation",
        "signature",
        "-q",
    ]);
    assert_eq!(report["summary"]["documents"], 1);
    assert_eq!(report["summary"]["bad_documents"], 0);
    check(&report, 4);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn missing_file_is_an_error_not_a_panic() {
    let out = Command::new(env!("CARGO_BIN_EXE_dei-collector"))
        .args(["analyze", "/nonexistent/file.json"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/file.json"));
}
