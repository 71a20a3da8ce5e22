//! The `dei-collector` command line: serve (receive, analyze, forward) and analyze files offline. (The
//! benchmark tools, `loadgen`, `sink`, `relay` and `bench`, are the `dei-collector-bench` binary of
//! `collector-plugin/bench/`.) The binary (`main.rs`) only chooses the allocator and calls [`main`].

use crate::counters::Counters;
use crate::forward::{Downstream, ForwardConfig, ForwardTls};
use crate::offline;
use crate::server::{self, ServerConfig};
use clap::{Parser, Subcommand, ValueEnum};
use dei_propagator::Instantiation;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

#[derive(Parser)]
#[command(
    name = "dei-collector",
    version,
    about = "OTLP collector that rebuilds the service graph and the DEI prefix tree"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Receive OTLP (gRPC and HTTP), analyze, forward, and serve the API.
    #[command(args_override_self = true)]
    Serve(Box<ServeArgs>),
    /// Analyze OTLP/JSON files offline (JSON lines as the Collector's file exporter writes, or one document),
    /// or Jaeger's JSON download.
    Analyze(AnalyzeArgs),
    /// Serve the API and web view over the union of several dei-collectors (shards of one deployment,
    /// sharded by trace id), pulling their state every interval.
    Query(QueryArgs),
}

#[derive(clap::Args)]
struct QueryArgs {
    /// The shards' API base URLs, comma-separated (`http://shard-1:4319,http://shard-2:4319`).
    #[arg(long, value_delimiter = ',', required = true)]
    peers: Vec<String>,
    /// API and web view listen address.
    #[arg(long, default_value = "127.0.0.1:4319")]
    api_listen: std::net::SocketAddr,
    /// Milliseconds between two pulls of every shard.
    #[arg(long, default_value_t = 1000)]
    interval_ms: u64,
    /// Milliseconds a shard may take to answer a pull; past it, the view is partial.
    #[arg(long, default_value_t = 5000)]
    timeout_ms: u64,
    /// Largest snapshot read from one shard (about 1.2 KB per prefix-tree node and per retained RPC); a
    /// larger one is that shard's error and the view is partial.
    #[arg(long, default_value_t = server::DEFAULT_MAX_SNAPSHOT_BYTES)]
    max_snapshot_bytes: usize,
    /// Most RPC occurrences the merged view keeps per trace (its trace list, node traces and analyses); give
    /// it the shards' `serve --max-trace-rpcs`. Routed by trace id, a trace is whole on one shard, which
    /// already cut it at its own cap; a trace whose spans reached several shards adds up their occurrences.
    /// Occurrences past it are left out of the merged trace and their spans counted on it, added to what the
    /// shards dropped (its `occurrences_dropped` in the trace list), as a shard with this cap counts them. A
    /// trace's own view (`/api/v1/traces/{id}`) is its shard's, whole.
    #[arg(long, default_value_t = crate::tree::traces::DEFAULT_MAX_OCCURRENCES, value_parser = at_least_one)]
    max_trace_rpcs: usize,
}

#[derive(clap::Args)]
struct ServeArgs {
    /// A YAML file that sets any of these flags (`queue_spans: 50000`), with `${env:VAR}` and
    /// `${env:VAR:-default}` expanded in its values; flags on the command line win over it.
    #[arg(long)]
    config: Option<PathBuf>,
    /// An extra header on every forwarded request, `NAME=VALUE` (repeatable), e.g. for a backend behind
    /// authentication: `--forward-header "authorization=Bearer $TOKEN"`.
    #[arg(long = "forward-header", value_parser = parse_header)]
    forward_headers: Vec<(String, String)>,
    /// For an https:// downstream: extra root certificates (PEM), e.g. a private CA's; the system's roots
    /// are trusted too.
    #[arg(long)]
    forward_tls_ca_file: Option<PathBuf>,
    /// For an https:// downstream: a client certificate chain (PEM), for mutual TLS (with the key file).
    #[arg(long, requires = "forward_tls_key_file")]
    forward_tls_cert_file: Option<PathBuf>,
    /// The client certificate's private key (PEM).
    #[arg(long, requires = "forward_tls_cert_file")]
    forward_tls_key_file: Option<PathBuf>,
    /// The name the downstream's certificate must carry, when it differs from the endpoint's host.
    #[arg(long)]
    forward_tls_server_name: Option<String>,
    /// OTLP/gRPC listen address.
    #[arg(long, default_value = "127.0.0.1:4317")]
    grpc_listen: SocketAddr,
    /// OTLP/HTTP listen address.
    #[arg(long, default_value = "127.0.0.1:4318")]
    http_listen: SocketAddr,
    /// HTTP JSON API and /metrics listen address.
    #[arg(long, default_value = "127.0.0.1:4319")]
    api_listen: SocketAddr,
    /// Forward every batch to this OTLP/gRPC endpoint (e.g. http://127.0.0.1:14317).
    #[arg(long, conflicts_with = "forward_http")]
    forward_grpc: Option<String>,
    /// Forward every batch to this OTLP/HTTP URL (e.g. http://127.0.0.1:4318/v1/traces).
    #[arg(long)]
    forward_http: Option<String>,
    /// Forwarding queue capacity, in spans, counting the batches the workers are sending.
    #[arg(long, default_value_t = 100_000)]
    queue_spans: usize,
    /// Forwarding queue capacity, in bytes of request bodies, counting the batches the workers are sending:
    /// what the queue costs in memory. A batch is refused (retryably) when either capacity is reached.
    #[arg(long, default_value_t = crate::forward::DEFAULT_QUEUE_BYTES)]
    queue_bytes: usize,
    /// Concurrent forwarding workers.
    #[arg(long, default_value_t = 4)]
    forward_workers: usize,
    /// Milliseconds a request waits for room in a full forwarding queue before it is refused (HTTP 503 with
    /// Retry-After, gRPC UNAVAILABLE: the client retries).
    #[arg(long, default_value_t = 200)]
    enqueue_wait_ms: u64,
    /// Seconds to keep draining the queue on shutdown.
    #[arg(long, default_value_t = 30)]
    drain_timeout_secs: u64,
    /// Most request-body bytes (OTLP/HTTP and gRPC, decompressed bodies included) buffered across all
    /// connections; beyond it requests get 503 with Retry-After (gRPC: UNAVAILABLE).
    #[arg(long, default_value_t = 128 * 1024 * 1024)]
    max_buffered_bytes: usize,
    /// Most connections open at once on each listener; connections over it are closed at once (counted).
    #[arg(long, default_value_t = 1024)]
    max_connections: usize,
    /// Seconds an OTLP/HTTP or API connection may send nothing while the server waits for bytes (headers,
    /// body, or the next request) before it is closed; 0 disables.
    #[arg(long, default_value_t = 30)]
    read_timeout_secs: u64,
    /// Most concurrent gRPC streams (requests) per connection.
    #[arg(long, default_value_t = 100)]
    max_grpc_streams: u32,
    /// Seconds an OTLP/HTTP request body may take to arrive in full (408 after).
    #[arg(long, default_value_t = 30)]
    body_timeout_secs: u64,
    /// Largest request body in bytes (compressed or decompressed).
    #[arg(long, default_value_t = 8 * 1024 * 1024)]
    max_body_bytes: usize,
    /// Reject a whole request (400 / INVALID_ARGUMENT) when a dei.* attribute has a wrong type or a malformed
    /// value (default: skip that span's DEI data, forward everything unchanged, count it and report it as a
    /// partial success warning).
    #[arg(long)]
    strict_attributes: bool,
    /// A host name the API and web view answer to (repeatable; `name` or `name:port`), besides IP addresses
    /// and localhost. Other `Host` values get 403 (DNS-rebinding guard).
    #[arg(long = "api-allowed-host")]
    api_allowed_hosts: Vec<String>,
    /// Most service-graph edges whose latency histograms /metrics shows (the busiest); the others get only
    /// their request counters, and dei_metrics_histogram_edges_omitted says how many.
    #[arg(long, default_value_t = crate::api::prometheus::DEFAULT_MAX_HISTOGRAM_EDGES)]
    metrics_max_histogram_edges: usize,
    /// Forward only: no graph, no tree.
    #[arg(long)]
    no_analysis: bool,
    /// A JSON report of a dei-sfit search, or a directory of them (such as target/sfit, where each run writes
    /// PROGRAM/UTC-TIME.json), served at /api/v1/search and /api/v1/search/reports for the web view (/ui/);
    /// a directory is read again on every request, so that new runs appear.
    #[arg(long)]
    search_report: Option<PathBuf>,
    /// Jaeger's UI (e.g. http://jaeger:16686): the web view links trace ids and tree nodes to it.
    #[arg(long, value_parser = crate::api::ui::parse_jaeger_ui)]
    jaeger_ui: Option<String>,
    /// Most prefix-tree nodes.
    #[arg(long, default_value_t = 100_000)]
    max_nodes: usize,
    /// Most service-graph edges.
    #[arg(long, default_value_t = 10_000)]
    max_edges: usize,
    /// Most traces retained for per-trace analyses.
    #[arg(long, default_value_t = 20_000)]
    max_traces: usize,
    /// Seconds a retained trace is kept.
    #[arg(long, default_value_t = 600)]
    trace_max_age_secs: u64,
    /// Most RPC occurrences kept per retained trace; spans past it are counted on the trace (its view's
    /// `occurrences_dropped`) and in dei_collector_trace_occurrences_dropped_total. A query node over this
    /// shard takes the same `--max-trace-rpcs`.
    #[arg(long, default_value_t = crate::tree::traces::DEFAULT_MAX_OCCURRENCES, value_parser = at_least_one)]
    max_trace_rpcs: usize,
    /// Milliseconds an unpaired client/server span waits for its peer.
    #[arg(long, default_value_t = 2000)]
    pairing_ttl_ms: u64,
    /// Most spans waiting for their peer.
    #[arg(long, default_value_t = 100_000)]
    max_pairing_spans: usize,
}

#[derive(Clone, Copy, ValueEnum)]
enum Format {
    Text,
    Json,
    Dot,
    Mermaid,
}

#[derive(clap::Args)]
struct AnalyzeArgs {
    /// OTLP/JSON files (`.gz` accepted).
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// Output format: a text report, the JSON report, or the service graph as DOT or Mermaid.
    #[arg(long, value_enum, default_value = "text")]
    format: Format,
    /// Deepest tree level printed.
    #[arg(long, default_value_t = 8)]
    tree_depth: usize,
    /// Extra instantiations to project to (besides filibuster and 3milebeach).
    #[arg(long)]
    instantiation: Vec<String>,
    /// No progress on stderr.
    #[arg(long, short)]
    quiet: bool,
    /// Analyze what could be read even when some documents are bad or some files unreadable or empty (they
    /// are listed on stderr and counted in the report); without it, any of them fails the run. A run that
    /// read no document fails either way.
    #[arg(long)]
    keep_going: bool,
    /// Largest document read, decompressed: a JSON line, or the whole of a file that is not JSON lines. A
    /// longer one is a bad document, and is not held in memory.
    #[arg(long, default_value_t = offline::DEFAULT_MAX_DOCUMENT_BYTES)]
    max_document_bytes: usize,
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread().enable_all().build()
}

/// Parses a count that must be 1 or more.
fn at_least_one(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("must be 1 or more".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

/// Parses a `NAME=VALUE` header.
fn parse_header(s: &str) -> Result<(String, String), String> {
    let (name, value) = s.split_once('=').ok_or_else(|| format!("{s:?} is not NAME=VALUE"))?;
    let name = name.trim();
    http::HeaderName::from_bytes(name.as_bytes()).map_err(|e| format!("header name {name:?}: {e}"))?;
    http::HeaderValue::from_str(value).map_err(|e| format!("header {name}: value: {e}"))?;
    Ok((name.to_ascii_lowercase(), value.to_string()))
}

/// With `serve --config FILE`: the command line again, with the file's flags first (so that the flags
/// given on the command line win).
fn with_config_file(cli: Cli) -> Result<Cli, String> {
    let path = match &cli.command {
        Command::Serve(a) => match &a.config {
            Some(p) => p.clone(),
            None => return Ok(cli),
        },
        _ => return Ok(cli),
    };
    let text =
        std::fs::read_to_string(&path).map_err(|e| format!("cannot read the config file {}: {e}", path.display()))?;
    let from_file = crate::config_file::to_args(&text, |name| std::env::var(name).ok())
        .map_err(|e| format!("config file {}: {e}", path.display()))?;
    let mut argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let serve_at = argv
        .iter()
        .position(|a| a == "serve")
        .ok_or("the serve command is missing from the command line")?;
    let tail = argv.split_off(serve_at + 1);
    argv.extend(from_file.into_iter().map(Into::into));
    argv.extend(tail);
    Cli::try_parse_from(argv).map_err(|e| format!("config file {}: {}", path.display(), e.render()))
}

/// Parses the command line (and `--config`) and runs the command.
pub fn main() -> ExitCode {
    let cli = match with_config_file(Cli::parse()) {
        Ok(cli) => cli,
        Err(e) => {
            eprintln!("dei-collector: {e}");
            return ExitCode::from(2);
        }
    };
    init_logging();
    let result = match cli.command {
        Command::Serve(a) => serve(*a),
        Command::Analyze(a) => analyze(a),
        Command::Query(a) => query(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("dei-collector: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Waits for SIGINT (Ctrl-C) or SIGTERM; the commands stop on either (also `dei-collector-bench`'s `sink`).
pub async fn shutdown_signal() {
    #[cfg(unix)]
    {
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(s) => s,
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
                return;
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {},
            _ = term.recv() => {},
        }
    }
    #[cfg(not(unix))]
    let _ = tokio::signal::ctrl_c().await;
}

fn serve(a: ServeArgs) -> Result<(), String> {
    let mut config = ServerConfig {
        grpc_listen: a.grpc_listen,
        http_listen: a.http_listen,
        api_listen: a.api_listen,
        ..Default::default()
    };
    config.ingest.max_body_bytes = a.max_body_bytes;
    config.ingest.max_buffered_bytes = a.max_buffered_bytes;
    config.limits.max_connections = a.max_connections;
    config.limits.read_timeout = (a.read_timeout_secs > 0).then(|| Duration::from_secs(a.read_timeout_secs));
    config.max_grpc_streams = a.max_grpc_streams;
    config.ingest.body_timeout = Duration::from_secs(a.body_timeout_secs);
    config.ingest.strict_attributes = a.strict_attributes;
    config.ingest.analyze = !a.no_analysis;
    config.ingest.search_report = a.search_report;
    config.ingest.jaeger_ui = a.jaeger_ui;
    config.ingest.api_allowed_hosts = a.api_allowed_hosts;
    config.ingest.metrics_max_histogram_edges = a.metrics_max_histogram_edges;
    config.state.max_nodes = a.max_nodes;
    config.state.graph.max_edges = a.max_edges;
    config.state.graph.store_ttl = Duration::from_millis(a.pairing_ttl_ms);
    config.state.graph.max_store_items = a.max_pairing_spans;
    config.state.traces.max_traces = a.max_traces;
    config.state.traces.max_age = Duration::from_secs(a.trace_max_age_secs);
    config.state.traces.max_occurrences = a.max_trace_rpcs;
    let downstream = match (a.forward_grpc, a.forward_http) {
        (Some(g), _) => Some(Downstream::Grpc(g)),
        (None, Some(h)) => Some(Downstream::Http(h)),
        (None, None) => None,
    };
    if downstream.is_none()
        && (!a.forward_headers.is_empty()
            || a.forward_tls_ca_file.is_some()
            || a.forward_tls_cert_file.is_some()
            || a.forward_tls_server_name.is_some())
    {
        return Err(
            "--forward-header and --forward-tls-* apply to forwarding: give --forward-grpc or \
                    --forward-http too"
                .into(),
        );
    }
    if let Some(d) = &downstream {
        let flag = match d {
            Downstream::Grpc(_) => "--forward-grpc",
            Downstream::Http(_) => "--forward-http",
        };
        d.validate().map_err(|e| format!("{flag} {e}"))?;
    }
    config.forward = downstream.map(|d| {
        let mut f = ForwardConfig::new(d);
        f.capacity_spans = a.queue_spans;
        f.capacity_bytes = a.queue_bytes;
        f.workers = a.forward_workers;
        f.drain_timeout = Duration::from_secs(a.drain_timeout_secs);
        f.enqueue_wait = Duration::from_millis(a.enqueue_wait_ms);
        f.headers = a.forward_headers.clone();
        f.tls = ForwardTls {
            ca_file: a.forward_tls_ca_file.clone(),
            cert_file: a.forward_tls_cert_file.clone(),
            key_file: a.forward_tls_key_file.clone(),
            server_name: a.forward_tls_server_name.clone(),
        };
        f
    });
    let rt = runtime().map_err(|e| e.to_string())?;
    rt.block_on(async move {
        let running = server::start(config).await.map_err(|e| e.to_string())?;
        // One machine-readable line so that scripts and tests can find ephemeral ports.
        println!(
            "dei-collector listening grpc={} http={} api={}",
            running.grpc_addr, running.http_addr, running.api_addr
        );
        tracing::info!(grpc = %running.grpc_addr, http = %running.http_addr, api = %running.api_addr, "dei-collector started");
        shutdown_signal().await;
        tracing::info!("shutting down: draining the forwarding queue");
        let counters = running.collector.counters().clone();
        running.shutdown().await;
        let s = counters.snapshot();
        tracing::info!(
            sent = s.forward_spans_sent,
            refused_queue_full = s.rejected_queue_full,
            dropped_shutdown = s.forward_spans_dropped_shutdown,
            "stopped"
        );
        Ok(())
    })
}

fn query(a: QueryArgs) -> Result<(), String> {
    for url in &a.peers {
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(format!("--peers: {url:?} is not an http:// or https:// URL"));
        }
    }
    let mut config = server::QueryConfig::new(a.peers, a.api_listen);
    config.interval = Duration::from_millis(a.interval_ms.max(1));
    config.timeout = Duration::from_millis(a.timeout_ms.max(1));
    config.max_snapshot_bytes = a.max_snapshot_bytes;
    config.state.traces.max_occurrences = a.max_trace_rpcs;
    let rt = runtime().map_err(|e| e.to_string())?;
    rt.block_on(async move {
        let node = server::start_query(config).await.map_err(|e| e.to_string())?;
        // One machine-readable line so that scripts and tests can find an ephemeral port.
        println!("dei-collector query api={}", node.api_addr);
        tracing::info!(api = %node.api_addr, "dei-collector query node started");
        shutdown_signal().await;
        node.shutdown().await;
        Ok(())
    })
}

fn analyze(a: AnalyzeArgs) -> Result<(), String> {
    let extra = a
        .instantiation
        .iter()
        .map(|n| Instantiation::by_name(n).ok_or_else(|| format!("unknown instantiation {n:?}")))
        .collect::<Result<Vec<_>, _>>()?;
    let counters = Arc::new(Counters::default());
    let mut analyzer = offline::offline_state(counters);
    let mut sink = std::io::sink();
    let mut stderr = std::io::stderr();
    let progress: &mut dyn std::io::Write = if a.quiet { &mut sink } else { &mut stderr };
    let summary =
        offline::ingest_files(&mut analyzer, &a.files, a.max_document_bytes, progress).map_err(|e| e.to_string())?;
    let problems = || {
        let mut listed: String = summary.problems.iter().map(|p| format!("\n  {p}")).collect();
        let shown = summary.problems.len() as u64;
        let total = summary.bad_documents
            + (summary.unreadable_files + summary.empty_files) as u64
            + summary.traces_without_process;
        if total > shown {
            listed.push_str(&format!("\n  ... and {} more", total - shown));
        }
        listed
    };
    if summary.documents == 0 {
        let listed = problems();
        return Err(format!(
            "no document could be read from {} file(s); nothing to analyze{}",
            summary.files,
            if listed.is_empty() || summary.empty_files == summary.files {
                format!(": the files are empty{listed}")
            } else {
                format!(":{listed}")
            }
        ));
    }
    if summary.bad_documents > 0
        || summary.unreadable_files > 0
        || summary.empty_files > 0
        || summary.spans_without_process > 0
    {
        let empty = match summary.empty_files {
            0 => String::new(),
            n => format!(", and {n} empty file(s)"),
        };
        let unknown = match summary.spans_without_process {
            0 => String::new(),
            n => format!(
                ", and {n} span(s) of {} Jaeger trace(s) whose processID the trace does not list",
                summary.traces_without_process
            ),
        };
        let what = format!(
            "{} bad document(s) and {} unreadable file(s){empty}{unknown} (read {} good document(s)):{}",
            summary.bad_documents,
            summary.unreadable_files,
            summary.documents,
            problems()
        );
        if !a.keep_going {
            return Err(format!("{what}\n--keep-going analyzes the rest"));
        }
        eprintln!("dei-collector: warning (--keep-going): skipped {what}");
    }
    let view = || crate::api::render::graph_view(&analyzer);
    let out = match a.format {
        Format::Text => offline::text_report(&analyzer, &summary, a.tree_depth, &extra),
        Format::Json => serde_json::to_string_pretty(&offline::json_report(&analyzer, &summary, a.tree_depth, &extra))
            .map_err(|e| e.to_string())?,
        Format::Dot => crate::api::render::to_dot(&view()),
        Format::Mermaid => crate::api::render::to_mermaid(&view()),
    };
    println!("{out}");
    Ok(())
}
