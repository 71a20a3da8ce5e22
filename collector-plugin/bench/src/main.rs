//! `dei-collector-bench`: dei-collector's benchmark tools on the command line (BENCHMARKS.md, rows 9–10a):
//! `loadgen` (saturating OTLP load), `sink` (receive and count), `relay` (copy bytes to the sink: the cheapest
//! hop), `bench` (dei-collector against rotel, the relay and the ceiling under the same load).

use clap::{Parser, Subcommand, ValueEnum};
use dei_collector::server::Downstream;
use dei_collector_bench::{compare, loadgen, relay, sharded, shards, sink};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// jemalloc, as dei-collector's binary allocates: the load generator and the sink ran in that binary before
/// they moved here, and the ceiling they measure together (row 10a) is compared with earlier runs.
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[derive(Parser)]
#[command(
    name = "dei-collector-bench",
    version,
    about = "dei-collector's benchmark tools: OTLP load, a counting sink, and the comparison with rotel"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Send OTLP at saturation to a receiver.
    Loadgen(LoadgenArgs),
    /// Receive OTLP and only count spans.
    Sink(SinkArgs),
    /// Copy every connection, byte for byte, to an upstream address (the cheapest hop: `bench`'s relay target).
    Relay(RelayArgs),
    /// Benchmark dei-collector against rotel under the same load.
    Bench(BenchArgs),
    /// The cost of one view over many shards: a query node's pull and merge time and its query latency,
    /// against the number of shards and of tree nodes per shard.
    Shards(ShardsArgs),
    /// Throughput with 1, 2, 3 dei-collectors behind an OpenTelemetry Collector's loadbalancing exporter.
    Sharded(ShardedArgs),
}

/// How the load generator sends: the same flags for every command that runs it.
#[derive(clap::Args)]
struct LoadShape {
    /// Concurrent senders.
    #[arg(long, default_value_t = 8)]
    concurrency: usize,
    /// Traces per request (12 spans each).
    #[arg(long, default_value_t = 40)]
    traces_per_request: usize,
}

#[derive(clap::Args)]
struct ShardedArgs {
    /// The dei-collector binary (default: `dei-collector` in this binary's directory).
    #[arg(long)]
    collector: Option<PathBuf>,
    /// The OpenTelemetry Collector binary, with the loadbalancing exporter (deploy/otelcol's build).
    #[arg(long)]
    otelcol: PathBuf,
    /// Numbers of shards, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,2,3")]
    shards: Vec<usize>,
    /// Seconds of load per run.
    #[arg(long, default_value_t = 10)]
    duration_secs: u64,
    #[command(flatten)]
    shape: LoadShape,
    /// Rounds; each measures every number of shards once, in rotated order.
    #[arg(long, default_value_t = 5)]
    rounds: usize,
}

#[derive(clap::Args)]
struct ShardsArgs {
    /// The dei-collector binary (default: `dei-collector` in this binary's directory).
    #[arg(long)]
    collector: Option<PathBuf>,
    /// Tree nodes per shard, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1000,10000,100000")]
    nodes: Vec<usize>,
    /// Numbers of shards, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,10,100")]
    shards: Vec<usize>,
    /// Timed requests per endpoint.
    #[arg(long, default_value_t = 21)]
    queries: usize,
    /// Query nodes started per (nodes, shards) pair; figures are medians over them.
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Traces sent again after the first pull, 100 tree nodes each, to time a pull of what changed.
    #[arg(long, default_value_t = 10)]
    changed_traces: usize,
    /// Print the rows as JSON on stdout.
    #[arg(long)]
    json: bool,
}

#[derive(Clone, Copy, ValueEnum)]
enum Protocol {
    Grpc,
    Http,
}

#[derive(clap::Args)]
struct LoadgenArgs {
    /// Target: an OTLP/gRPC endpoint (http://host:port) or, with --protocol http, a URL (…/v1/traces).
    #[arg(long, default_value = "http://127.0.0.1:4317")]
    endpoint: String,
    /// Protocol.
    #[arg(long, value_enum, default_value = "grpc")]
    protocol: Protocol,
    /// Seconds of load.
    #[arg(long, default_value_t = 10)]
    duration_secs: u64,
    #[command(flatten)]
    shape: LoadShape,
}

#[derive(clap::Args)]
struct RelayArgs {
    /// Address to listen on.
    #[arg(long)]
    listen: SocketAddr,
    /// Address every accepted connection is copied to.
    #[arg(long)]
    upstream: SocketAddr,
}

#[derive(clap::Args)]
struct SinkArgs {
    /// gRPC listen address.
    #[arg(long, default_value = "127.0.0.1:14317")]
    grpc_listen: SocketAddr,
    /// HTTP listen address (/v1/traces, /count).
    #[arg(long, default_value = "127.0.0.1:14318")]
    http_listen: SocketAddr,
}

#[derive(clap::Args)]
struct BenchArgs {
    /// The dei-collector binary to measure (default: `dei-collector` in this binary's directory, where
    /// `cargo build -p dei-collector -p dei-collector-bench` puts both).
    #[arg(long)]
    collector: Option<PathBuf>,
    /// rotel-agent binary (omit to measure dei-collector only).
    #[arg(long)]
    rotel: Option<PathBuf>,
    /// Seconds of load per target.
    #[arg(long, default_value_t = 15)]
    duration_secs: u64,
    #[command(flatten)]
    shape: LoadShape,
    /// Also measure dei-collector with analysis off.
    #[arg(long)]
    forward_only_too: bool,
    /// rotel's exporter compression: `none` (same work as dei-collector, which forwards uncompressed) or
    /// `gzip` (rotel's default).
    #[arg(long, default_value = "none")]
    rotel_compression: String,
    /// Rounds; each measures every target once, in rotated order. Figures are medians over rounds.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Print every run and the medians as JSON on stdout.
    #[arg(long)]
    json: bool,
    /// Skip the ceiling target (the load generator straight into the sink).
    #[arg(long)]
    no_ceiling: bool,
    /// Skip the relay target (the load generator into a byte-copying TCP relay in front of the sink: the
    /// most that any process in the collector's place reaches on this machine).
    #[arg(long)]
    no_relay: bool,
    /// Refuse to start (exit 2) when the 1-minute load average is above 0.5: figures from a busy machine
    /// starve every target. Without it, such a run warns and records the load average in its output.
    #[arg(long)]
    require_idle: bool,
}

fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread().enable_all().build()
}

fn main() -> ExitCode {
    let result = match Cli::parse().command {
        Command::Loadgen(a) => run_loadgen(a),
        Command::Sink(a) => run_sink(a),
        Command::Relay(a) => run_relay(a),
        Command::Bench(a) => run_bench(a),
        Command::Shards(a) => run_shards(a),
        Command::Sharded(a) => run_sharded(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("dei-collector-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run_loadgen(a: LoadgenArgs) -> Result<(), String> {
    let target = match a.protocol {
        Protocol::Grpc => Downstream::Grpc(a.endpoint),
        Protocol::Http => Downstream::Http(a.endpoint),
    };
    target.validate().map_err(|e| format!("--endpoint {e}"))?;
    if target.is_tls() {
        return Err(format!(
            "--endpoint {:?}: the load generator sends plain-text OTLP only (http://)",
            target.endpoint()
        ));
    }
    let endpoint = target.endpoint().to_string();
    let rt = runtime().map_err(|e| e.to_string())?;
    let r = rt.block_on(loadgen::run(loadgen::LoadConfig {
        target,
        duration: Duration::from_secs(a.duration_secs),
        concurrency: a.shape.concurrency,
        traces_per_request: a.shape.traces_per_request,
    }))?;
    println!("{}", serde_json::to_string(&r).map_err(|e| e.to_string())?);
    if r.spans == 0 {
        return Err(format!(
            "{endpoint} accepted no span ({} request(s) failed, {} span(s) rejected)",
            r.errors, r.rejected_spans
        ));
    }
    if r.errors > 0 || r.rejected_spans > 0 {
        eprintln!(
            "dei-collector-bench: warning: {} request(s) to {endpoint} failed and {} span(s) were rejected",
            r.errors, r.rejected_spans
        );
    }
    Ok(())
}

fn run_sink(a: SinkArgs) -> Result<(), String> {
    let rt = runtime().map_err(|e| e.to_string())?;
    rt.block_on(async move {
        let s = sink::start(a.grpc_listen, a.http_listen)
            .await
            .map_err(|e| e.to_string())?;
        println!(
            "dei-collector-bench sink listening grpc={} http={}",
            s.grpc_addr, s.http_addr
        );
        dei_collector::cli::shutdown_signal().await;
        println!(
            "{{\"spans\":{},\"requests\":{}}}",
            s.counts.spans.load(std::sync::atomic::Ordering::Relaxed),
            s.counts.requests.load(std::sync::atomic::Ordering::Relaxed)
        );
        Ok(())
    })
}

fn run_relay(a: RelayArgs) -> Result<(), String> {
    let rt = runtime().map_err(|e| e.to_string())?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(a.listen)
            .await
            .map_err(|e| format!("--listen {}: {e}", a.listen))?;
        tokio::select! {
            r = relay::serve(listener, a.upstream) => r.map_err(|e| e.to_string()),
            () = dei_collector::cli::shutdown_signal() => Ok(()),
        }
    })
}

fn run_bench(a: BenchArgs) -> Result<(), String> {
    let load_before = compare::load_average();
    match load_before {
        Some([one, ..]) if one > compare::IDLE_LOAD => {
            let msg = format!(
                "the 1-minute load average is {one:.2}, above {}: the machine is not idle, so every target is \
                 starved and the figures mean little",
                compare::IDLE_LOAD
            );
            if a.require_idle {
                eprintln!("dei-collector-bench bench: refusing to start: {msg} (drop --require-idle to run anyway)");
                std::process::exit(2);
            }
            eprintln!("dei-collector-bench bench: warning: {msg}");
        }
        Some([one, five, fifteen]) => eprintln!("load average at the start: {one:.2} {five:.2} {fifteen:.2}"),
        None => eprintln!("dei-collector-bench bench: warning: the load average is unreadable (/proc/loadavg)"),
    }
    let collector_bin = collector_binary(a.collector)?;
    let rt = runtime().map_err(|e| e.to_string())?;
    let config = compare::CompareConfig {
        collector_bin,
        rotel_bin: a.rotel,
        duration: Duration::from_secs(a.duration_secs),
        concurrency: a.shape.concurrency,
        traces_per_request: a.shape.traces_per_request,
        include_forward_only: a.forward_only_too,
        include_ceiling: !a.no_ceiling,
        include_relay: !a.no_relay,
        rotel_compression: a.rotel_compression,
    };
    let results = rt.block_on(compare::run(config, a.rounds, &mut std::io::stderr()))?;
    let load_after = compare::load_average();
    let summary = compare::summarize(&results);
    eprintln!(
        "medians over {} round(s) (min–max of delivered spans/s in brackets):",
        a.rounds
    );
    for s in &summary {
        eprintln!(
            "  {:<32} accepted {:>9.0} spans/s  delivered {:>9.0} spans/s [{:.0}–{:.0}]  peak RSS {:>6.1} MiB  \
             {:.2} cores  undelivered {}",
            s.target,
            s.accepted_per_second,
            s.delivered_per_second,
            s.delivered_per_second_range.0,
            s.delivered_per_second_range.1,
            s.peak_rss_mib,
            s.cpu_cores,
            s.undelivered_spans
        );
    }
    let find = |name: &str| summary.iter().find(|s| s.target == name);
    if let Some(d) = summary.first() {
        if let Some(r) = find("rotel") {
            eprintln!(
                "dei-collector (analysis on) / rotel: delivered throughput {:.2}x, peak RSS {:.2}x",
                d.delivered_per_second / r.delivered_per_second.max(1e-9),
                d.peak_rss_mib / r.peak_rss_mib.max(1e-9)
            );
        }
        for bound in [compare::CEILING, compare::RELAY] {
            if let Some(c) = find(bound) {
                eprintln!(
                    "dei-collector (analysis on) / {bound}: delivered throughput {:.2}x",
                    d.delivered_per_second / c.delivered_per_second.max(1e-9)
                );
            }
        }
        if let (Some(r), Some(c)) = (find(compare::RELAY), find(compare::CEILING)) {
            eprintln!(
                "{} / {}: delivered throughput {:.2}x",
                compare::RELAY,
                compare::CEILING,
                r.delivered_per_second / c.delivered_per_second.max(1e-9)
            );
        }
    }
    if let Some([one, ..]) = load_after {
        eprintln!("load average at the end: {one:.2}");
    }
    if a.json {
        let doc = serde_json::json!({
            "runs": results,
            "medians": summary,
            "load_average_at_start": load_before,
            "load_average_at_end": load_after,
        });
        println!("{}", serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())?);
    }
    Ok(())
}

/// `--collector`, or `dei-collector` next to this binary; an error when it does not exist.
fn collector_binary(given: Option<PathBuf>) -> Result<PathBuf, String> {
    let path = match given {
        Some(path) => path,
        None => {
            let me = std::env::current_exe().map_err(|e| format!("cannot find this binary's path: {e}"))?;
            me.with_file_name(format!("dei-collector{}", std::env::consts::EXE_SUFFIX))
        }
    };
    if !path.is_file() {
        return Err(format!(
            "the dei-collector binary {} does not exist: build it (`cargo build --release -p dei-collector`) or \
             give its path with --collector",
            path.display()
        ));
    }
    Ok(path)
}

fn run_shards(a: ShardsArgs) -> Result<(), String> {
    print_load("shards");
    let config = shards::ShardsConfig {
        collector: collector_binary(a.collector)?,
        nodes: a.nodes,
        shards: a.shards,
        queries: a.queries.max(1),
        rounds: a.rounds.max(1),
        changed_traces: a.changed_traces,
    };
    let rt = runtime().map_err(|e| e.to_string())?;
    let rows = rt.block_on(shards::run(&config, &mut std::io::stderr()))?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&rows).map_err(|e| e.to_string())?);
    }
    eprintln!(
        "| nodes per shard | shards | snapshot MiB | pull s | merge s | pull+merge range s | ms per shard per 1k nodes \
         | query node peak RSS MiB | median query ms (stats, graph, tree, node, traces) | pull, nothing changed s \
         | nodes changed per shard | pull of changes s | its merge s |"
    );
    eprintln!("|---:|---:|---:|---:|---:|---|---:|---:|---|---:|---:|---:|---:|");
    for r in &rows {
        let q: Vec<String> = r.query_ms.iter().map(|(_, ms)| format!("{ms:.2}")).collect();
        eprintln!(
            "| {} | {} | {:.1} | {:.3} | {:.3} | {:.3}–{:.3} | {:.2} | {:.0} | {} | {:.3} | {} | {:.3} | {:.3} |",
            r.nodes,
            r.shards,
            r.snapshot_bytes as f64 / 1048576.0,
            r.pull_seconds,
            r.merge_seconds,
            r.pull_and_merge_range.0,
            r.pull_and_merge_range.1,
            r.ms_per_shard_per_1k_nodes,
            r.query_node_peak_rss_mib,
            q.join(", "),
            r.idle_refresh_seconds,
            r.changed_nodes_per_shard,
            r.changes_pull_seconds,
            r.changes_merge_seconds
        );
    }
    if let Some(note) = shards_load_note() {
        eprintln!("at the end: {note}");
    }
    Ok(())
}

/// Prints the load average at the start of `command`, or that it is unreadable.
fn print_load(command: &str) {
    match shards_load_note() {
        Some(note) => eprintln!("{note}"),
        None => eprintln!("dei-collector-bench {command}: warning: the load average is unreadable (/proc/loadavg)"),
    }
}

fn shards_load_note() -> Option<String> {
    compare::load_average().map(|[one, five, fifteen]| {
        let warn = if one > compare::IDLE_LOAD {
            " (busy: figures from a busy machine starve every process)"
        } else {
            ""
        };
        format!("load average: {one:.2} {five:.2} {fifteen:.2}{warn}")
    })
}

fn run_sharded(a: ShardedArgs) -> Result<(), String> {
    print_load("sharded");
    let config = sharded::ShardedConfig {
        collector: collector_binary(a.collector)?,
        otelcol: a.otelcol,
        shards: a.shards,
        duration: Duration::from_secs(a.duration_secs),
        concurrency: a.shape.concurrency,
        traces_per_request: a.shape.traces_per_request,
        rounds: a.rounds,
    };
    let rt = runtime().map_err(|e| e.to_string())?;
    let runs = rt.block_on(sharded::run(&config, &mut std::io::stderr()))?;
    eprintln!(
        "| shards | delivered spans/s (median, min–max) | dei-collector cores | Collector cores | spans/s per dei-collector core |"
    );
    eprintln!("|---:|---|---:|---:|---:|");
    let mut counts: Vec<usize> = runs.iter().map(|r| r.shards).collect();
    counts.sort_unstable();
    counts.dedup();
    for n in counts {
        let of: Vec<&sharded::ShardedRun> = runs.iter().filter(|r| r.shards == n).collect();
        let med = |f: &dyn Fn(&sharded::ShardedRun) -> f64| {
            let mut v: Vec<f64> = of.iter().map(|r| f(r)).collect();
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let delivered: Vec<f64> = of.iter().map(|r| r.delivered_per_second).collect();
        eprintln!(
            "| {n} | {:.0} ({:.0}–{:.0}) | {:.2} | {:.2} | {:.0} |",
            med(&|r| r.delivered_per_second),
            delivered.iter().copied().fold(f64::INFINITY, f64::min),
            delivered.iter().copied().fold(0.0, f64::max),
            med(&|r| r.shard_cores),
            med(&|r| r.otelcol_cores),
            med(&|r| r.delivered_per_shard_core),
        );
    }
    if let Some(note) = shards_load_note() {
        eprintln!("at the end: {note}");
    }
    Ok(())
}
