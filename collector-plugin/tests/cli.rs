//! Command-line honesty of the real `dei-collector` binary: every bad case exits non-zero with a message that
//! says what was wrong, and what it can read it reads.
//! - `analyze`: unreadable input, bad documents, another format (with `--keep-going` tolerating bad ones),
//!   and Jaeger's JSON download, which it reads as the same spans as their OTLP/JSON;
//! - `serve --forward-grpc notaurl` (and other unusable endpoints) refused at start-up;
//! - forwarding failures warned about (endpoint and error), rate-limited, and counted.

use dei_collector_bench::loadgen::{SPANS_PER_TRACE, template};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{KeyValue, any_value};
use prost::Message;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_dei-collector");

/// A fresh directory for one test's files.
fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("dei-cli-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

fn run(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().expect("run dei-collector")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The generated traces (12 spans each, DEI attributes, a database client span) of the load generator.
fn request(traces: usize) -> ExportTraceServiceRequest {
    tagged(traces, 0xD1E1_C011_EC70_1234)
}

/// [`request`] with the trace ids' first 8 bytes set to `tag`, as the load generator sends them.
fn tagged(traces: usize, tag: u64) -> ExportTraceServiceRequest {
    let (mut body, offsets) = template(traces);
    for o in offsets {
        body[o..o + 8].copy_from_slice(&tag.to_be_bytes());
    }
    ExportTraceServiceRequest::decode(body.as_slice()).expect("template decodes")
}

fn write(path: &Path, text: &str) -> String {
    std::fs::write(path, text).expect("write");
    path.to_str().expect("utf-8 path").to_string()
}

#[test]
fn analyze_fails_when_no_document_could_be_read() {
    let d = dir("none");
    let text = write(&d.join("notes.txt"), "these are not spans\n");
    let o = run(&["analyze", "-q", &text]);
    assert!(!o.status.success(), "{o:?}");
    let e = stderr(&o);
    assert!(
        e.contains("no document could be read") && e.contains("notes.txt"),
        "{e}"
    );
    assert!(o.stdout.is_empty(), "no report for nothing read");
    // --keep-going does not make nothing into something
    let o = run(&["analyze", "-q", "--keep-going", &text]);
    assert!(
        !o.status.success() && stderr(&o).contains("no document could be read"),
        "{o:?}"
    );
    // an empty file, and a file that does not exist
    let empty = write(&d.join("empty.json"), "");
    let o = run(&["analyze", "-q", &empty]);
    assert!(
        !o.status.success() && stderr(&o).contains("the files are empty"),
        "{o:?}"
    );
    let missing = d.join("missing.json");
    let o = run(&["analyze", "-q", "--keep-going", missing.to_str().expect("path")]);
    assert!(!o.status.success(), "{o:?}");
    assert!(stderr(&o).contains("missing.json"), "{}", stderr(&o));
    std::fs::remove_dir_all(&d).expect("cleanup");
}

#[test]
fn analyze_fails_on_bad_documents_unless_keep_going() {
    let d = dir("bad");
    let good = serde_json::to_string(&request(2)).expect("json");
    let lines = write(
        &d.join("traces.jsonl"),
        &format!("{good}\n{{ this is not json }}\n{{\"foo\": 1}}\n"),
    );
    let o = run(&["analyze", "-q", "--format", "json", &lines]);
    assert!(!o.status.success(), "{o:?}");
    let e = stderr(&o);
    assert!(e.contains("2 bad document(s)"), "{e}");
    assert!(e.contains("traces.jsonl: line 2: not JSON"), "{e}");
    assert!(
        e.contains("traces.jsonl: line 3: not an OTLP/JSON export request") && e.contains("[\"foo\"]"),
        "another format is named as such: {e}"
    );
    assert!(e.contains("--keep-going"), "{e}");
    let o = run(&["analyze", "-q", "--keep-going", "--format", "json", &lines]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("warning (--keep-going)"), "{}", stderr(&o));
    let report: Value = serde_json::from_slice(&o.stdout).expect("report");
    assert_eq!(report["summary"]["documents"], 1);
    assert_eq!(report["summary"]["bad_documents"], 2);
    assert_eq!(report["summary"]["spans"], (2 * SPANS_PER_TRACE) as u64);
    assert_eq!(report["summary"]["problems"].as_array().map(Vec::len), Some(2));
    // an unreadable file among good ones is a failure too, and skipped with --keep-going
    let one = write(&d.join("one.json"), &good);
    let missing = d.join("missing.json");
    let missing = missing.to_str().expect("path");
    let o = run(&["analyze", "-q", &one, missing]);
    assert!(
        !o.status.success() && stderr(&o).contains("1 unreadable file(s)"),
        "{o:?}"
    );
    let o = run(&["analyze", "-q", "--keep-going", &one, missing]);
    assert!(o.status.success(), "{}", stderr(&o));
    std::fs::remove_dir_all(&d).expect("cleanup");
}

#[test]
fn analyze_counts_empty_files_and_empty_jaeger_downloads_among_good_ones() {
    let d = dir("empties");
    let good = write(&d.join("good.json"), &serde_json::to_string(&request(1)).expect("json"));
    let empty = write(&d.join("empty.json"), "");
    let blank = write(&d.join("blank.json"), "\n\n \n");
    let jempty = write(&d.join("jempty.json"), "{\"data\":[]}\n");
    let o = run(&["analyze", "-q", "--format", "json", &good, &empty, &blank, &jempty]);
    assert!(!o.status.success(), "{o:?}");
    let e = stderr(&o);
    assert!(
        e.contains("1 bad document(s) and 0 unreadable file(s), and 2 empty file(s)"),
        "{e}"
    );
    assert!(
        e.contains("empty.json: empty") && e.contains("blank.json: empty"),
        "{e}"
    );
    assert!(
        e.contains("jempty.json: line 1: a Jaeger JSON download with no trace"),
        "{e}"
    );
    let o = run(&[
        "analyze",
        "-q",
        "--keep-going",
        "--format",
        "json",
        &good,
        &empty,
        &blank,
        &jempty,
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("warning (--keep-going)"), "{}", stderr(&o));
    let report: Value = serde_json::from_slice(&o.stdout).expect("report");
    let summary = &report["summary"];
    assert_eq!(summary["documents"], 1, "{summary}");
    assert_eq!(summary["bad_documents"], 1, "{summary}");
    assert_eq!(summary["empty_files"], 2, "{summary}");
    assert_eq!(summary["problems"].as_array().map(Vec::len), Some(3), "{summary}");
    std::fs::remove_dir_all(&d).expect("cleanup");
}

fn gzip(data: &[u8]) -> Vec<u8> {
    use std::io::Write as _;
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(data).expect("gzip");
    e.finish().expect("gzip")
}

#[test]
fn analyze_reads_every_member_of_a_concatenated_gz_and_refuses_trailing_garbage() {
    let d = dir("multigz");
    let first = serde_json::to_string(&tagged(1, 1)).expect("json");
    let second = serde_json::to_string(&tagged(2, 2)).expect("json");
    // what `gzip -c a > f.gz; gzip -c b >> f.gz` writes
    let mut multi = gzip(format!("{first}\n").as_bytes());
    multi.extend(gzip(format!("{second}\n").as_bytes()));
    let path = d.join("multi.jsonl.gz");
    std::fs::write(&path, &multi).expect("write");
    let o = run(&["analyze", "-q", "--format", "json", path.to_str().expect("path")]);
    assert!(o.status.success(), "{}", stderr(&o));
    let report: Value = serde_json::from_slice(&o.stdout).expect("report");
    assert_eq!(report["summary"]["documents"], 2, "{}", report["summary"]);
    assert_eq!(report["summary"]["spans"], (3 * SPANS_PER_TRACE) as u64);
    // a member followed by what is not one: an unreadable file, named
    let mut trailing = gzip(format!("{first}\n").as_bytes());
    trailing.extend(b"garbage\n");
    let path = d.join("trailing.jsonl.gz");
    std::fs::write(&path, &trailing).expect("write");
    let o = run(&["analyze", "-q", "--format", "json", path.to_str().expect("path")]);
    assert!(!o.status.success(), "{o:?}");
    let e = stderr(&o);
    assert!(
        e.contains("1 unreadable file(s)") && e.contains("trailing.jsonl.gz"),
        "{e}"
    );
    std::fs::remove_dir_all(&d).expect("cleanup");
}

#[test]
fn analyze_skips_a_document_over_the_size_limit_without_holding_it() {
    let d = dir("limit");
    let good = serde_json::to_string(&request(1)).expect("json");
    // a gzip bomb: a good line, then a line of 70 MiB of spaces (about 70 KB compressed)
    let mut bomb = format!("{good}\n").into_bytes();
    bomb.extend(std::iter::repeat_n(b' ', 70 << 20));
    bomb.push(b'\n');
    let path = d.join("bomb.jsonl.gz");
    std::fs::write(&path, gzip(&bomb)).expect("write");
    drop(bomb);
    let bomb = path.to_str().expect("path");
    let o = run(&["analyze", "-q", "--format", "json", bomb]);
    assert!(!o.status.success(), "{o:?}");
    let e = stderr(&o);
    assert!(
        e.contains("1 bad document(s)")
            && e.contains("bomb.jsonl.gz: line 2: longer than 67108864 bytes (--max-document-bytes)"),
        "{e}"
    );
    let o = run(&["analyze", "-q", "--keep-going", "--format", "json", bomb]);
    assert!(o.status.success(), "{}", stderr(&o));
    let report: Value = serde_json::from_slice(&o.stdout).expect("report");
    assert_eq!(report["summary"]["documents"], 1, "{}", report["summary"]);
    assert_eq!(report["summary"]["bad_documents"], 1, "{}", report["summary"]);
    // a pretty-printed document (not JSON lines) is read whole, up to the limit
    let pretty = serde_json::to_string_pretty(&request(1)).expect("json");
    let pretty = write(&d.join("pretty.json"), &pretty);
    let o = run(&["analyze", "-q", "--max-document-bytes", "1000", &pretty]);
    assert!(!o.status.success(), "{o:?}");
    let e = stderr(&o);
    assert!(
        e.contains("pretty.json: document 1: not JSON lines, and longer than 1000 bytes"),
        "{e}"
    );
    let o = run(&["analyze", "-q", "--max-document-bytes", "100000", &pretty]);
    assert!(o.status.success(), "{}", stderr(&o));
    std::fs::remove_dir_all(&d).expect("cleanup");
}

/// An OTLP value as Jaeger's JSON tag (`key`, `type`, `value`).
fn tag(kv: &KeyValue) -> Value {
    let (kind, value) = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => ("string", json!(s)),
        Some(any_value::Value::BoolValue(b)) => ("bool", json!(b)),
        Some(any_value::Value::IntValue(i)) => ("int64", json!(i)),
        Some(any_value::Value::DoubleValue(d)) => ("float64", json!(d)),
        other => ("string", json!(format!("{other:?}"))),
    };
    json!({"key": kv.key, "type": kind, "value": value})
}

fn string_tag(key: &str, value: &str) -> Value {
    json!({"key": key, "type": "string", "value": value})
}

/// What Jaeger's query API (and the UI's "Download JSON") returns for these spans, written the way Jaeger
/// translates OTLP: one process per resource, 128-bit hex ids, `CHILD_OF` references, microsecond times,
/// `span.kind`, `otel.status_code` and `otel.scope.*` tags, events as logs with an `event` field.
fn jaeger_download(req: &ExportTraceServiceRequest) -> Value {
    let mut traces: BTreeMap<String, (Vec<Value>, BTreeMap<String, Value>)> = BTreeMap::new();
    for (p, rs) in req.resource_spans.iter().enumerate() {
        let pid = format!("p{}", p + 1);
        let attrs = rs.resource.as_ref().map(|r| r.attributes.clone()).unwrap_or_default();
        let service = attrs
            .iter()
            .find(|kv| kv.key == "service.name")
            .and_then(|kv| match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                Some(any_value::Value::StringValue(s)) => Some(s.clone()),
                _ => None,
            })
            .unwrap_or_default();
        let process = json!({
            "serviceName": service,
            "tags": attrs.iter().filter(|kv| kv.key != "service.name").map(tag).collect::<Vec<_>>(),
        });
        for ss in &rs.scope_spans {
            for s in &ss.spans {
                let trace_id = hex::encode(&s.trace_id);
                let mut tags: Vec<Value> = s.attributes.iter().map(tag).collect();
                if let Some(scope) = &ss.scope {
                    if !scope.name.is_empty() {
                        tags.push(string_tag("otel.scope.name", &scope.name));
                    }
                    if !scope.version.is_empty() {
                        tags.push(string_tag("otel.scope.version", &scope.version));
                    }
                }
                let kind = ["", "internal", "server", "client", "producer", "consumer"]
                    .get(s.kind as usize)
                    .copied()
                    .unwrap_or("");
                if !kind.is_empty() && kind != "internal" {
                    tags.push(string_tag("span.kind", kind));
                }
                match s.status.as_ref().map(|st| (st.code, st.message.as_str())) {
                    Some((1, _)) => tags.push(string_tag("otel.status_code", "OK")),
                    Some((2, message)) => {
                        tags.push(string_tag("otel.status_code", "ERROR"));
                        tags.push(json!({"key": "error", "type": "bool", "value": true}));
                        if !message.is_empty() {
                            tags.push(string_tag("otel.status_description", message));
                        }
                    }
                    _ => {}
                }
                let references: Vec<Value> = if s.parent_span_id.is_empty() {
                    Vec::new()
                } else {
                    vec![json!({
                        "refType": "CHILD_OF",
                        "traceID": trace_id,
                        "spanID": hex::encode(&s.parent_span_id),
                    })]
                };
                let logs: Vec<Value> = s
                    .events
                    .iter()
                    .map(|e| {
                        let mut fields = vec![string_tag("event", &e.name)];
                        fields.extend(e.attributes.iter().map(tag));
                        json!({"timestamp": e.time_unix_nano / 1000, "fields": fields})
                    })
                    .collect();
                let span = json!({
                    "traceID": trace_id,
                    "spanID": hex::encode(&s.span_id),
                    "flags": 1,
                    "operationName": s.name,
                    "references": references,
                    "startTime": s.start_time_unix_nano / 1000,
                    "duration": (s.end_time_unix_nano - s.start_time_unix_nano) / 1000,
                    "tags": tags,
                    "logs": logs,
                    "processID": pid,
                    "warnings": null,
                });
                let entry = traces.entry(trace_id).or_default();
                entry.0.push(span);
                entry.1.insert(pid.clone(), process.clone());
            }
        }
    }
    let data: Vec<Value> = traces
        .into_iter()
        .map(
            |(id, (spans, processes))| json!({"traceID": id, "spans": spans, "processes": processes, "warnings": null}),
        )
        .collect();
    json!({"data": data, "total": 0, "limit": 0, "offset": 0, "errors": null})
}

/// The parts of an analysis report that depend on the spans only.
fn analysis(report: &Value) -> Value {
    json!({"graph": report["graph"], "tree": report["tree"], "analyses": report["analyses"]})
}

#[test]
fn reads_jaegers_json_download_as_the_same_spans() {
    let d = dir("jaeger");
    let req = request(3);
    let otlp = write(&d.join("otlp.json"), &serde_json::to_string_pretty(&req).expect("json"));
    let download = jaeger_download(&req);
    assert_eq!(
        download["data"].as_array().map(Vec::len),
        Some(3),
        "one entry per trace"
    );
    let pretty = write(
        &d.join("jaeger-pretty.json"),
        &serde_json::to_string_pretty(&download).expect("json"),
    );
    let one_line = write(&d.join("jaeger.json"), &serde_json::to_string(&download).expect("json"));
    let analyze = |path: &str| {
        let o = run(&[
            "analyze",
            "-q",
            "--format",
            "json",
            "--instantiation",
            "signature",
            path,
        ]);
        assert!(o.status.success(), "{path}: {}", stderr(&o));
        serde_json::from_slice::<Value>(&o.stdout).expect("report")
    };
    let from_otlp = analyze(&otlp);
    assert_eq!(from_otlp["summary"]["jaeger_documents"], 0);
    for path in [&pretty, &one_line] {
        let from_jaeger = analyze(path);
        assert_eq!(from_jaeger["summary"]["spans"], (3 * SPANS_PER_TRACE) as u64, "{path}");
        assert_eq!(from_jaeger["summary"]["jaeger_documents"], 3, "{path}");
        assert_eq!(from_jaeger["summary"]["bad_documents"], 0, "{path}");
        assert_eq!(
            analysis(&from_jaeger),
            analysis(&from_otlp),
            "{path}: the same graph, tree and analyses as from the OTLP/JSON of the same spans"
        );
    }
    // the graph is not empty: the comparison compared something
    let edges = from_otlp["graph"]["edges"].as_array().expect("edges");
    assert!(
        edges
            .iter()
            .any(|e| e["client"] == "catalog" && e["server"] == "pricing" && e["requests"] == 9),
        "{edges:?}"
    );
    // a Jaeger download whose spans have broken ids is bad, not silently empty
    let mut broken = download.clone();
    broken["data"][0]["spans"][0]["spanID"] = json!("not hex");
    let broken = write(&d.join("broken.json"), &serde_json::to_string(&broken).expect("json"));
    let o = run(&["analyze", "-q", &broken]);
    assert!(!o.status.success(), "{o:?}");
    assert!(stderr(&o).contains("Jaeger trace: invalid id"), "{}", stderr(&o));
    std::fs::remove_dir_all(&d).expect("cleanup");
}

#[test]
fn a_jaeger_span_whose_process_is_not_listed_is_a_problem_named_with_its_file() {
    let d = dir("jaeger-process");
    let req = request(1);
    let mut download = jaeger_download(&req);
    // the trace's first process is gone from `processes`: its spans name a process the trace does not list
    let processes = download["data"][0]["processes"].as_object_mut().expect("processes");
    assert!(processes.remove("p1").is_some(), "{processes:?}");
    let orphans = download["data"][0]["spans"]
        .as_array()
        .expect("spans")
        .iter()
        .filter(|s| s["processID"] == "p1")
        .count();
    assert!(orphans > 0 && orphans < SPANS_PER_TRACE, "{orphans}");
    let path = write(
        &d.join("orphans.json"),
        &serde_json::to_string(&download).expect("json"),
    );
    let o = run(&["analyze", "-q", "--format", "json", &path]);
    assert!(!o.status.success(), "{o:?}");
    let e = stderr(&o);
    assert!(
        e.contains(&format!(
            "and {orphans} span(s) of 1 Jaeger trace(s) whose processID the trace does not list"
        )),
        "{e}"
    );
    assert!(
        e.contains(&format!(
            "orphans.json: line 1: Jaeger trace: {orphans} span(s) name a processID that the trace's processes do \
             not list, \"p1\" ({orphans}): analyzed without a service (unknown_service)"
        )),
        "{e}"
    );
    assert!(e.contains("--keep-going"), "{e}");
    // with --keep-going the trace is analyzed, its spans of the unknown process as unknown_service, and the
    // report says how many
    let o = run(&["analyze", "-q", "--keep-going", "--format", "json", &path]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("warning (--keep-going)"), "{}", stderr(&o));
    let report: Value = serde_json::from_slice(&o.stdout).expect("report");
    let summary = &report["summary"];
    assert_eq!(summary["spans"], SPANS_PER_TRACE as u64, "{summary}");
    assert_eq!(summary["spans_without_process"], orphans as u64, "{summary}");
    assert_eq!(summary["traces_without_process"], 1, "{summary}");
    assert_eq!(summary["problems"].as_array().map(Vec::len), Some(1), "{summary}");
    let nodes = report["graph"]["nodes"].as_array().expect("nodes");
    assert!(nodes.iter().any(|n| n["id"] == "unknown_service"), "{nodes:?}");
    std::fs::remove_dir_all(&d).expect("cleanup");
}

/// `tests/data/jaeger-download.json` is what a real Jaeger answered: Jaeger v1.76.0 (the `deploy/jaeger/`
/// build, `docs/deploy/jaeger.yaml`) received `dei-collector loadgen --protocol http --traces-per-request 3`
/// (today `dei-collector-bench loadgen`) over OTLP/HTTP, and `GET /api/traces?service=frontend` returned, among others, the three traces of its
/// first request (trace ids `0000000000000001 000t feedfacebeef`), kept here verbatim under `data`. They are
/// the load generator's template with tag 1, so their OTLP/JSON is known exactly.
#[test]
fn reads_a_real_jaeger_download_as_the_otlp_it_was_sent() {
    let d = dir("real-jaeger");
    let fixture = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/jaeger-download.json");
    let otlp = write(
        &d.join("otlp.json"),
        &serde_json::to_string(&tagged(3, 1)).expect("json"),
    );
    let analyze = |path: &str| {
        let o = run(&[
            "analyze",
            "-q",
            "--format",
            "json",
            "--instantiation",
            "signature",
            path,
        ]);
        assert!(o.status.success(), "{path}: {}", stderr(&o));
        serde_json::from_slice::<Value>(&o.stdout).expect("report")
    };
    let (from_jaeger, from_otlp) = (analyze(fixture), analyze(&otlp));
    assert_eq!(from_jaeger["summary"]["jaeger_documents"], 3);
    assert_eq!(from_jaeger["summary"]["bad_documents"], 0);
    assert_eq!(from_jaeger["summary"]["spans"], (3 * SPANS_PER_TRACE) as u64);
    assert_eq!(from_jaeger["summary"]["spans"], from_otlp["summary"]["spans"]);
    assert_eq!(analysis(&from_jaeger), analysis(&from_otlp));
    let edges = from_jaeger["graph"]["edges"].as_array().expect("edges");
    let edge = |c: &str, s: &str| {
        edges
            .iter()
            .any(|e| e["client"] == c && e["server"] == s && e["requests"] == 9)
    };
    assert!(edge("catalog", "pricing"), "{edges:?}");
    let top = from_jaeger["tree"]["subtree"].as_array().expect("tree");
    assert_eq!(top.len(), 2, "GetUser and ListItems under the root: {top:?}");
    std::fs::remove_dir_all(&d).expect("cleanup");
}

#[test]
fn unusable_forwarding_endpoints_are_refused_at_start_up() {
    for (flag, endpoint, why) in [
        ("--forward-grpc", "notaurl", "no scheme"),
        ("--forward-grpc", "ftp://127.0.0.1:4317", "scheme \"ftp\""),
        ("--forward-grpc", "http://", ""),
        ("--forward-http", "https://127.0.0.1:4318", "no path"),
        ("--forward-http", "http://127.0.0.1:4318", "no path"),
    ] {
        let o = run(&[
            "serve",
            "--grpc-listen",
            "127.0.0.1:0",
            "--http-listen",
            "127.0.0.1:0",
            "--api-listen",
            "127.0.0.1:0",
            flag,
            endpoint,
        ]);
        let e = stderr(&o);
        assert!(!o.status.success(), "{flag} {endpoint}: {e}");
        assert!(
            e.contains(&format!("{flag} \"{endpoint}\" is not a usable")) && e.contains(why),
            "{flag} {endpoint}: {e}"
        );
        assert!(
            !String::from_utf8_lossy(&o.stdout).contains("listening"),
            "refused before listening"
        );
    }
}

/// Kills the child when dropped, so that a failing assertion does not leave a collector running.
struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarding_failures_are_warned_about_with_the_endpoint_and_counted() {
    // a port nothing listens on
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let endpoint = format!("http://{}", closed.local_addr().expect("addr"));
    drop(closed);
    let mut child = Child(
        Command::new(BIN)
            .args([
                "serve",
                "--grpc-listen",
                "127.0.0.1:0",
                "--http-listen",
                "127.0.0.1:0",
                "--api-listen",
                "127.0.0.1:0",
                "--forward-grpc",
                &endpoint,
            ])
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start dei-collector"),
    );
    let mut stdout = BufReader::new(child.0.stdout.take().expect("stdout"));
    let mut line = String::new();
    stdout.read_line(&mut line).expect("listening line");
    let addr = |name: &str| {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(&format!("{name}=")))
            .unwrap_or_else(|| panic!("{name} in {line:?}"))
            .to_string()
    };
    let (http, api) = (addr("http"), addr("api"));
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let stderr = BufReader::new(child.0.stderr.take().expect("stderr"));
    std::thread::spawn(move || {
        for l in stderr.lines().map_while(Result::ok) {
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    let client = reqwest::Client::new();
    let body = request(1).encode_to_vec();
    for _ in 0..3 {
        let r = client
            .post(format!("http://{http}/v1/traces"))
            .header("content-type", "application/x-protobuf")
            .body(body.clone())
            .send()
            .await
            .expect("export");
        assert!(
            r.status().is_success(),
            "the collector accepts while the downstream is down"
        );
    }
    // the first failure is warned about, naming the endpoint and the error (the wait is bounded only so
    // that a missing warning fails instead of hanging)
    let warning = loop {
        let l = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("a forwarding warning on stderr");
        if l.contains("forwarding to") {
            break l;
        }
    };
    assert!(warning.contains("WARN"), "{warning}");
    assert!(
        warning.contains(&format!("forwarding to {endpoint} failed")),
        "{warning}"
    );
    assert!(warning.contains("retrying"), "{warning}");
    // every failure is counted; the warnings are not one per failure
    let retries = loop {
        let stats = client
            .get(format!("http://{api}/api/v1/stats"))
            .send()
            .await
            .expect("stats")
            .bytes()
            .await
            .expect("stats body");
        let stats: Value = serde_json::from_slice(&stats).expect("stats json");
        let n = stats["counters"]["forward_retries"].as_u64().expect("forward_retries");
        if n >= 10 {
            break n;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let later_warnings = rx.try_iter().filter(|l| l.contains("forwarding to")).count();
    assert!(
        1 + later_warnings < retries as usize,
        "{} warnings for {retries} failures",
        1 + later_warnings
    );
}

/// `serve --config`: what the file cannot mean stops the start with the reason (exit 2), and a flag on the
/// command line wins over the file's key.
#[test]
fn serve_config_file_refuses_what_it_cannot_mean_and_flags_win() {
    let d = dir("config");
    let cases = [
        ("unknown key", "queue_spans: 10\nno_such_flag: 3\n", "--no-such-flag"),
        (
            "unset variable",
            "forward_grpc: ${env:DEI_TEST_SURELY_UNSET}\n",
            "DEI_TEST_SURELY_UNSET",
        ),
        ("bad value", "queue_spans: lots\n", "lots"),
        ("not a mapping", "- queue_spans\n", "mapping"),
        (
            "tls without https",
            "forward_grpc: http://127.0.0.1:1\nforward_tls_ca_file: /nonexistent.pem\n",
            "not https",
        ),
        (
            "missing CA file",
            "forward_grpc: https://127.0.0.1:1\nforward_tls_ca_file: /nonexistent.pem\n",
            "/nonexistent.pem",
        ),
    ];
    for (what, yaml, says) in cases {
        let path = write(&d.join("c.yaml"), yaml);
        let o = run(&[
            "serve",
            "--config",
            &path,
            "--grpc-listen",
            "127.0.0.1:0",
            "--http-listen",
            "127.0.0.1:0",
            "--api-listen",
            "127.0.0.1:0",
        ]);
        assert!(!o.status.success(), "{what}: refused");
        assert!(stderr(&o).contains(says), "{what}: says {says:?}: {}", stderr(&o));
    }
    let o = run(&["serve", "--config", "/nonexistent/dei-collector.yaml"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("cannot read the config file /nonexistent/dei-collector.yaml"),
        "{}",
        stderr(&o)
    );

    // the file's gRPC address is taken; the command line's wins, so the collector starts
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let path = write(
        &d.join("ok.yaml"),
        &format!(
            "grpc_listen: {}\nhttp_listen: 127.0.0.1:0\napi_listen: 127.0.0.1:${{env:DEI_TEST_API_PORT:-0}}\n",
            taken.local_addr().unwrap()
        ),
    );
    let o = run(&["serve", "--config", &path]);
    assert!(!o.status.success(), "the file's address is taken: {}", stderr(&o));
    let mut child = Command::new(BIN)
        .args(["serve", "--config", &path, "--grpc-listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let _ = child.kill();
    let out = child.wait_with_output().unwrap();
    assert!(
        line.starts_with("dei-collector listening grpc=127.0.0.1:"),
        "started with the file's addresses: {line:?} {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
