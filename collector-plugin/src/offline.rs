//! `dei-collector analyze FILE…`: the same reports, offline, from OTLP/JSON files.
//!
//! A file is either JSON lines — one `ExportTraceServiceRequest` per line, as the OpenTelemetry Collector's
//! file exporter writes — or a single (possibly pretty-printed) JSON document, or several concatenated.
//! `.gz` files are decompressed (every member of a concatenated one). Jaeger's JSON download (`{"data":[{"traceID":..,"spans":[..],
//! "processes":{..}}]}`) is read too (module `jaeger`). A document that is neither — malformed JSON, invalid ids,
//! another format, a Jaeger download with no trace — is counted as bad, with what was wrong in
//! [`Summary::problems`], and skipped; a file that cannot be read is counted in [`Summary::unreadable_files`],
//! one with no document at all (empty or blank) in [`Summary::empty_files`]. A Jaeger trace whose spans name a
//! `processID` it does not list is analyzed (those spans without a service, as `unknown_service`), counted in
//! [`Summary::spans_without_process`] and listed in the problems. The binary fails on any of them unless
//! `--keep-going`, and always when no document was read. Progress goes to a writer (stderr in the binary)
//! at most once a second.

pub(crate) mod jaeger;

use crate::analysis;
use crate::api::render;
use crate::api::tree as views;
use crate::counters::Counters;
use crate::otlp::{self, Rejection, lite};
use crate::span_record;
use crate::state::{CollectorState, StateConfig};
use dei_propagator::Instantiation;
use serde_json::json;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What an offline run read.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Summary {
    /// Files read.
    pub files: usize,
    /// Export requests (documents) ingested.
    pub documents: u64,
    /// Documents that could not be parsed or had invalid ids.
    pub bad_documents: u64,
    /// Spans ingested.
    pub spans: u64,
    /// `dei.*` attributes ignored.
    pub ignored_attributes: u64,
    /// Documents read as Jaeger JSON (one per trace of a download).
    pub jaeger_documents: u64,
    /// Files that could not be opened or read.
    pub unreadable_files: usize,
    /// Files read to the end that held no document at all (empty, or only blank lines).
    pub empty_files: usize,
    /// Spans of Jaeger traces whose `processID` is not among the trace's `processes`: analyzed without a
    /// service (`unknown_service`).
    pub spans_without_process: u64,
    /// Jaeger traces with such spans (each one problem).
    pub traces_without_process: u64,
    /// What was wrong with the bad documents, unreadable and empty files, and the Jaeger traces with spans of
    /// unknown processes (the first [`MAX_PROBLEMS`]).
    pub problems: Vec<String>,
}

/// Most problems kept in a [`Summary`].
pub const MAX_PROBLEMS: usize = 20;

/// The default of the largest document read (`analyze --max-document-bytes`): a JSON line, or the whole of a
/// file that is not JSON lines, decompressed. 64 MiB.
pub const DEFAULT_MAX_DOCUMENT_BYTES: usize = 64 * 1024 * 1024;

impl Summary {
    fn problem(&mut self, what: String) {
        if self.problems.len() < MAX_PROBLEMS {
            self.problems.push(what);
        }
    }
}

/// What a document turned out to be.
enum Doc {
    /// An OTLP/JSON export request (decoded into the lite view when it is ingested, borrowing from it).
    Otlp(serde_json::Value),
    /// A Jaeger JSON download: one request per trace, or why a trace could not be converted.
    Jaeger(Vec<Result<jaeger::Converted, Rejection>>),
    /// Neither: why.
    Bad(String),
}

/// Classifies a parsed JSON value: Jaeger's shape, an OTLP export request, or another format.
fn classify(value: serde_json::Value) -> Doc {
    if jaeger::looks_like(&value) {
        return match serde_json::from_value::<jaeger::Document>(value) {
            Ok(d) => Doc::Jaeger(d.data.iter().map(jaeger::to_otlp).collect()),
            Err(e) => Doc::Bad(format!("Jaeger JSON with a malformed trace: {e}")),
        };
    }
    let keys: Vec<String> = match value.as_object() {
        Some(o) => o.keys().cloned().collect(),
        None => return Doc::Bad(format!("not an OTLP/JSON export request: a JSON {}", kind(&value))),
    };
    if keys.iter().all(|k| k == "resourceSpans" || k == "resource_spans") {
        return Doc::Otlp(value);
    }
    Doc::Bad(format!(
        "not an OTLP/JSON export request (top-level keys {keys:?}); dei-collector reads OTLP/JSON (the \
         OpenTelemetry Collector's file exporter: JSON lines, or one document with \"resourceSpans\") and \
         Jaeger's JSON download ({{\"data\":[{{\"traceID\":..,\"spans\":[..]}}]}})"
    ))
}

fn kind(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "boolean",
        serde_json::Value::Number(_) => "number",
        serde_json::Value::String(_) => "string",
        serde_json::Value::Array(_) => "array",
        serde_json::Value::Object(_) => "object",
    }
}

/// Ingests one classified document; `at` names it in problems.
fn ingest_classified(a: &mut CollectorState, doc: Doc, s: &mut Summary, at: &dyn Fn() -> String) {
    match doc {
        Doc::Otlp(value) => {
            let arena = bumpalo::Bump::new();
            match otlp::json_value_lite(&value, &arena) {
                Ok(req) => {
                    if let Err(e) = ingest_doc(a, &req, s) {
                        s.problem(format!("{}: {e}", at()));
                    }
                }
                Err(e) => {
                    bad(a, s);
                    s.problem(format!("{}: malformed OTLP/JSON export request: {e}", at()));
                }
            }
        }
        Doc::Jaeger(requests) => {
            if requests.is_empty() {
                bad(a, s);
                s.problem(format!("{}: a Jaeger JSON download with no trace", at()));
            }
            for converted in requests {
                // Jaeger's spans converted to the generated types, read through their protobuf encoding
                let unknown = converted
                    .as_ref()
                    .map_or(BTreeMap::new(), |c| c.unknown_processes.clone());
                let ingested = converted.and_then(|c| otlp::with_lite(&c.request, |lite| ingest_doc(a, lite, s)));
                match ingested {
                    Ok(Ok(())) => {
                        s.jaeger_documents += 1;
                        if !unknown.is_empty() {
                            let spans: usize = unknown.values().sum();
                            s.spans_without_process += spans as u64;
                            s.traces_without_process += 1;
                            let ids: Vec<String> = unknown.iter().map(|(p, n)| format!("{p:?} ({n})")).collect();
                            s.problem(format!(
                                "{}: Jaeger trace: {spans} span(s) name a processID that the trace's processes do \
                                 not list, {}: analyzed without a service (unknown_service)",
                                at(),
                                ids.join(", ")
                            ));
                        }
                    }
                    // counted as bad by `ingest_doc`
                    Ok(Err(e)) => s.problem(format!("{}: Jaeger trace: {e}", at())),
                    Err(e) => {
                        bad(a, s);
                        s.problem(format!("{}: Jaeger trace: {e}", at()));
                    }
                }
            }
        }
        Doc::Bad(why) => {
            bad(a, s);
            s.problem(format!("{}: {why}", at()));
        }
    }
}

fn bad(a: &CollectorState, s: &mut Summary) {
    s.bad_documents += 1;
    Counters::add(&a.counters().offline_bad_documents, 1);
}

/// Errors that stop an offline run.
#[derive(Debug, thiserror::Error)]
pub enum OfflineError {
    /// A file could not be opened or read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// An analyzer configured for offline input: pairing and trace ages do not expire by wall-clock time.
pub fn offline_state(counters: Arc<Counters>) -> CollectorState {
    let mut config = StateConfig::default();
    config.graph.store_ttl = Duration::from_secs(365 * 24 * 3600);
    config.traces.max_age = Duration::from_secs(365 * 24 * 3600);
    config.traces.max_traces = 100_000;
    config.max_nodes = 1_000_000;
    CollectorState::new(config, counters)
}

/// Where an offline run is: file `file` of `files`, `read` of `total` bytes.
#[derive(Clone, Copy)]
struct Position<'a> {
    file: usize,
    files: usize,
    path: &'a Path,
    read: u64,
    total: u64,
}

struct Progress<'a> {
    out: &'a mut dyn Write,
    last: Instant,
}

impl Progress<'_> {
    fn tick(&mut self, force: bool, at: &Position<'_>, s: &Summary) {
        let Position {
            file,
            files,
            path,
            read,
            total,
        } = *at;
        if !force && self.last.elapsed() < Duration::from_secs(1) {
            return;
        }
        self.last = Instant::now();
        let pct = if total > 0 {
            read as f64 * 100.0 / total as f64
        } else {
            100.0
        };
        let _ = writeln!(
            self.out,
            "[{file}/{files}] {}: {:.1}/{:.1} MB ({pct:.0}%), {} documents, {} spans, {} bad",
            path.display(),
            read as f64 / 1e6,
            total as f64 / 1e6,
            s.documents,
            s.spans,
            s.bad_documents
        );
    }
}

struct CountingReader<R> {
    inner: R,
    read: Arc<std::sync::atomic::AtomicU64>,
}

impl<R: Read> Read for CountingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read.fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
        Ok(n)
    }
}

/// Ingests one export request; a request with invalid ids is counted as bad and refused.
fn ingest_doc(a: &mut CollectorState, req: &lite::Request<'_>, s: &mut Summary) -> Result<(), Rejection> {
    let mut issues = Vec::new();
    if let Err(e) = otlp::validate_lite_ids(req) {
        bad(a, s);
        return Err(e);
    }
    let records = span_record::extract_lite(req, &mut issues);
    s.documents += 1;
    s.spans += records.len() as u64;
    s.ignored_attributes += issues.len() as u64;
    Counters::add(&a.counters().attributes_rejected, issues.len() as u64);
    a.ingest(records, Instant::now());
    Ok(())
}

/// Reads every file into `a`, reporting progress to `progress`, then finishes the analyzer. A JSON line
/// longer than `max_document_bytes`, or a file that is not JSON lines and longer than that (decompressed), is
/// a bad document, and not held in memory. A file that
/// cannot be read is counted in [`Summary::unreadable_files`], one without any document in
/// [`Summary::empty_files`] (each with the reason in the problems), and the others are still read; the
/// caller decides whether that, or bad documents, fail the run.
pub fn ingest_files(
    a: &mut CollectorState,
    paths: &[PathBuf],
    max_document_bytes: usize,
    progress: &mut dyn Write,
) -> Result<Summary, OfflineError> {
    let mut s = Summary {
        files: paths.len(),
        ..Default::default()
    };
    let mut p = Progress {
        out: progress,
        last: Instant::now(),
    };
    for (i, path) in paths.iter().enumerate() {
        let read = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let mut total = 0;
        let before = s.documents + s.bad_documents;
        let file = FileRead {
            path,
            position: (i, paths.len()),
            read: &read,
            max_document_bytes,
        };
        match ingest_file(a, &file, &mut s, &mut p, &mut total) {
            Err(e) => {
                s.unreadable_files += 1;
                s.problem(e.to_string());
            }
            Ok(()) if s.documents + s.bad_documents == before => {
                s.empty_files += 1;
                s.problem(format!("{}: empty: the file holds no document", path.display()));
            }
            Ok(()) => {}
        }
        p.tick(
            true,
            &Position {
                file: i + 1,
                files: paths.len(),
                path,
                read: read.load(std::sync::atomic::Ordering::Relaxed),
                total,
            },
            &s,
        );
    }
    a.finish();
    Ok(s)
}

/// One file of a run: which, where it is in the run, the bytes read so far, the document size limit.
struct FileRead<'a> {
    path: &'a Path,
    position: (usize, usize),
    read: &'a Arc<std::sync::atomic::AtomicU64>,
    max_document_bytes: usize,
}

/// Reads one line (through its `\n`) into `line`, keeping at most `max` bytes: `None` at the end of the
/// input, `Some(true)` when the line was longer (then the rest of it is read and dropped, and `line` is
/// empty).
fn read_line_within(reader: &mut impl BufRead, line: &mut Vec<u8>, max: usize) -> std::io::Result<Option<bool>> {
    let (mut read_any, mut over) = (false, false);
    loop {
        let available = match reader.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if available.is_empty() {
            return Ok(read_any.then_some(over));
        }
        read_any = true;
        let (n, done) = match available.iter().position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => (available.len(), false),
        };
        if !over {
            if line.len() + n > max {
                over = true;
                *line = Vec::new();
            } else {
                line.extend_from_slice(&available[..n]);
            }
        }
        reader.consume(n);
        if done {
            return Ok(Some(over));
        }
    }
}

fn ingest_file(
    a: &mut CollectorState,
    file: &FileRead<'_>,
    s: &mut Summary,
    p: &mut Progress<'_>,
    total: &mut u64,
) -> Result<(), OfflineError> {
    let FileRead {
        path,
        position: (i, files),
        read,
        max_document_bytes: max,
    } = *file;
    let io = |source| OfflineError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::File::open(path).map_err(io)?;
    *total = file.metadata().map(|m| m.len()).unwrap_or(0);
    let counting = CountingReader {
        inner: file,
        read: read.clone(),
    };
    // every member of a concatenated .gz (`gzip -c a >> f.gz`, pigz, bgzip); data after the last member
    // that is not another member is an error naming the file
    let reader: Box<dyn Read> = if path.extension().is_some_and(|e| e == "gz") {
        Box::new(flate2::read::MultiGzDecoder::new(counting))
    } else {
        Box::new(counting)
    };
    let mut reader = BufReader::new(reader);
    let mut raw = Vec::new();
    let mut first = true;
    let mut number = 0usize;
    let mut whole: Option<String> = None;
    // what the lines' lite views could not borrow from them (escaped strings, ids), emptied for each line
    let mut arena = bumpalo::Bump::new();
    loop {
        raw.clear();
        arena.reset();
        let Some(over) = read_line_within(&mut reader, &mut raw, max).map_err(io)? else {
            break;
        };
        number += 1;
        if over {
            let at = || format!("{}: line {number}", path.display());
            let why = format!("longer than {max} bytes (--max-document-bytes); skipped");
            ingest_classified(a, Doc::Bad(why), s, &at);
            first = false;
            continue;
        }
        let line = std::str::from_utf8(&raw).map_err(|e| {
            io(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("line {number}: {e}"),
            ))
        })?;
        let trimmed = line.trim();
        if trimmed.is_empty() {
            continue;
        }
        let at = || format!("{}: line {number}", path.display());
        let ingested = match otlp::decode_json_lite(trimmed.as_bytes(), &arena) {
            Ok(req) if !req.resource_spans.is_empty() => {
                if let Err(e) = ingest_doc(a, &req, s) {
                    s.problem(format!("{}: {e}", at()));
                }
                true
            }
            _ => false,
        };
        if !ingested {
            // empty (a JSON object without resourceSpans decodes to an empty request) or not OTLP: look
            // at what it is
            match serde_json::from_str::<serde_json::Value>(trimmed) {
                Ok(value) => ingest_classified(a, classify(value), s, &at),
                Err(_) if first => {
                    // Not JSON lines: a pretty-printed document (or several); read the rest as a stream,
                    // up to the limit
                    let mut rest = line.to_string();
                    let room = (max - rest.len()) as u64 + 1;
                    reader.by_ref().take(room).read_to_string(&mut rest).map_err(io)?;
                    if rest.len() > max {
                        let at = || format!("{}: document 1", path.display());
                        let why = format!(
                            "not JSON lines, and longer than {max} bytes (--max-document-bytes); the rest of the \
                             file is skipped"
                        );
                        ingest_classified(a, Doc::Bad(why), s, &at);
                        return Ok(());
                    }
                    whole = Some(rest);
                    break;
                }
                Err(e) => ingest_classified(a, Doc::Bad(format!("not JSON: {e}")), s, &at),
            }
        }
        first = false;
        p.tick(
            false,
            &Position {
                file: i + 1,
                files,
                path,
                read: read.load(std::sync::atomic::Ordering::Relaxed),
                total: *total,
            },
            s,
        );
    }
    if let Some(text) = whole {
        let stream = serde_json::Deserializer::from_str(&text).into_iter::<serde_json::Value>();
        for (k, doc) in stream.enumerate() {
            let at = || format!("{}: document {}", path.display(), k + 1);
            match doc {
                Ok(value) => ingest_classified(a, classify(value), s, &at),
                Err(e) => {
                    ingest_classified(a, Doc::Bad(format!("not JSON: {e}")), s, &at);
                    break;
                }
            }
        }
    }
    Ok(())
}

/// The full JSON report: summary, graph, tree (to `tree_depth`) and every analysis.
pub fn json_report(a: &CollectorState, s: &Summary, tree_depth: usize, extra: &[Instantiation]) -> serde_json::Value {
    let mut budget = 100_000;
    json!({
        "summary": s,
        "stats": crate::api::stats(a, &a.counters().snapshot(), Default::default()),
        "graph": render::graph_view(a),
        "tree": views::subtree(a, crate::tree::ROOT, tree_depth, &mut budget),
        "analyses": analysis::report(a, extra),
    })
}

/// A readable text report.
pub fn text_report(a: &CollectorState, s: &Summary, tree_depth: usize, extra: &[Instantiation]) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "read {} file(s): {} documents ({} bad, {} from Jaeger JSON), {} spans, {} ignored dei attributes{}{}{}",
        s.files,
        s.documents,
        s.bad_documents,
        s.jaeger_documents,
        s.spans,
        s.ignored_attributes,
        if s.unreadable_files > 0 {
            format!(", {} unreadable file(s)", s.unreadable_files)
        } else {
            String::new()
        },
        if s.empty_files > 0 {
            format!(", {} empty file(s)", s.empty_files)
        } else {
            String::new()
        },
        if s.spans_without_process > 0 {
            format!(
                ", {} span(s) of {} Jaeger trace(s) without their process",
                s.spans_without_process, s.traces_without_process
            )
        } else {
            String::new()
        }
    );
    for problem in &s.problems {
        let _ = writeln!(o, "  skipped: {problem}");
    }
    let _ = writeln!(
        o,
        "prefix tree: {} nodes; {} traces retained",
        a.tree.len(),
        a.traces.len()
    );
    let g = render::graph_view(a);
    let _ = writeln!(
        o,
        "\n== service graph ({} nodes, {} edges)",
        g.nodes.len(),
        g.edges.len()
    );
    for e in &g.edges {
        let kind = match e.connection_type {
            crate::views::EdgeType::Direct => "direct",
            other => other.label(),
        };
        let _ = writeln!(
            o,
            "  {} -> {} [{kind}] requests={} failed={} index_requests={}",
            e.client, e.server, e.requests, e.failed, e.index_requests
        );
    }
    let _ = writeln!(o, "\n== DEI prefix tree (depth <= {tree_depth})");
    for id in a.tree.subtree(crate::tree::ROOT, 10_000) {
        let Some(n) = a.tree.node(id) else { continue };
        if n.index.depth() > tree_depth || n.index.is_root() {
            continue;
        }
        let st = &n.stats;
        let pad = "  ".repeat(n.index.depth());
        let services = |m: &std::collections::BTreeMap<Arc<str>, u64>| {
            m.keys().map(|k| k.to_string()).collect::<Vec<_>>().join(",")
        };
        let _ = writeln!(
            o,
            "{pad}{} {} [{} -> {}] seen={} traces={} errors={}{}{}",
            n.index.last().map(|e| e.to_string()).unwrap_or_default(),
            st.signature.as_deref().unwrap_or("?"),
            services(&st.client_services),
            if st.server_services.is_empty() {
                services(&st.peers)
            } else {
                services(&st.server_services)
            },
            st.seen,
            st.traces,
            st.errors,
            if st.faults.is_empty() {
                String::new()
            } else {
                format!(" faults={:?}", st.faults)
            },
            if st.preliminary { " (preliminary)" } else { "" },
        );
    }
    let r = analysis::report(a, extra);
    let _ = writeln!(o, "\n== circuit breakers ({})", r.circuit_breakers.len());
    for e in &r.circuit_breakers {
        let _ = writeln!(
            o,
            "  {} {}: {} fault trace(s) {:?}, then absent from {} trace(s); {}",
            e.node.index,
            e.node.signature.as_deref().unwrap_or("?"),
            e.fault_traces,
            e.faults,
            e.absent_traces,
            e.state
        );
    }
    let _ = writeln!(o, "\n== repeated calls ({})", r.repeated_calls.len());
    for f in &r.repeated_calls {
        let _ = writeln!(
            o,
            "  [{}] {} x{} max in one trace, {} trace(s), callers {:?}",
            f.scope, f.signature, f.max_calls_in_one_trace, f.traces, f.callers
        );
    }
    let _ = writeln!(o, "\n== chained calls ({})", r.chained_calls.len());
    for f in &r.chained_calls {
        let _ = writeln!(
            o,
            "  {} then {} on {} ({}), {} trace(s), median gap {:.2} ms",
            f.first, f.second, f.service, f.confidence, f.traces, f.median_gap_ms
        );
    }
    let _ = writeln!(o, "\n== ambiguous indexes ({})", r.ambiguous.len());
    for f in &r.ambiguous {
        let _ = writeln!(
            o,
            "  {} {}: flagged {}, collisions {}",
            f.node.index,
            f.node.signature.as_deref().unwrap_or("?"),
            f.flagged_by_instrumentation,
            f.collisions_in_trace
        );
    }
    let _ = writeln!(o, "\n== projections");
    for p in &r.projections {
        let _ = writeln!(
            o,
            "  {}: {} distinct RPCs -> {} names; {} name(s) shared by distinct RPCs of one trace; \
             {} name(s) meaning different RPCs in different traces",
            p.instantiation, p.distinct_full, p.distinct_projected, p.collapsed_names, p.unstable_names
        );
        for c in p.collapses.iter().take(5) {
            let sigs: Vec<String> = c
                .full
                .iter()
                .map(|f| f.signature.as_deref().unwrap_or("?").to_string())
                .collect();
            let _ = writeln!(
                o,
                "    {} <- {} RPCs in one trace ({})",
                c.projected,
                c.max_in_one_trace,
                sigs.join(", ")
            );
        }
    }
    o
}
