//! Runs the benchmark: the same saturating load through dei-collector (analysis on, forwarding to a sink)
//! and through rotel (forwarding to the same sink), one after the other in one run, and reports each
//! target's accepted and delivered spans/s and peak RSS (`VmHWM` of its process).

use crate::bench::{loadgen, sink};
use crate::forward::Downstream;
use serde::Serialize;
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Benchmark settings.
#[derive(Debug, Clone)]
pub struct CompareConfig {
    /// The dei-collector binary.
    pub collector_bin: PathBuf,
    /// The rotel-agent binary, if rotel is to be measured.
    pub rotel_bin: Option<PathBuf>,
    /// Load duration per target.
    pub duration: Duration,
    /// Concurrent senders.
    pub concurrency: usize,
    /// Traces per request (12 spans each).
    pub traces_per_request: usize,
    /// Also measure dei-collector with analysis off.
    pub include_forward_only: bool,
    /// rotel's `--otlp-exporter-compression` (`none` matches dei-collector, which forwards uncompressed;
    /// rotel's own default is `gzip`).
    pub rotel_compression: String,
}

/// One target's figures.
#[derive(Debug, Clone, Serialize)]
pub struct TargetResult {
    /// The target's name.
    pub target: String,
    /// What the load generator saw.
    pub load: loadgen::LoadResult,
    /// Spans that reached the sink.
    pub delivered_spans: u64,
    /// Delivered spans per second of load.
    pub delivered_per_second: f64,
    /// Peak resident set size, MiB.
    pub peak_rss_mib: f64,
}

fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn peak_rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

async fn wait_listening(addr: SocketAddr) -> bool {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if tokio::net::TcpStream::connect(addr).await.is_ok() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn measure(
    name: &str,
    mut cmd: Command,
    grpc: SocketAddr,
    sink: &sink::Sink,
    config: &CompareConfig,
    log: &mut dyn Write,
) -> Result<TargetResult, String> {
    let _ = writeln!(log, "== {name}: {cmd:?}");
    let child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("{name}: {e}"))?;
    let guard = Guard(child);
    let pid = guard.0.id();
    if !wait_listening(grpc).await {
        return Err(format!("{name} did not listen on {grpc}"));
    }
    let before = sink.counts.spans.load(Ordering::Relaxed);
    let load = loadgen::run(loadgen::LoadConfig {
        target: Downstream::Grpc(format!("http://{grpc}")),
        duration: config.duration,
        concurrency: config.concurrency,
        traces_per_request: config.traces_per_request,
    })
    .await?;
    // let the target drain to the sink
    let mut last = sink.counts.spans.load(Ordering::Relaxed);
    let drain_deadline = Instant::now() + Duration::from_secs(15);
    while Instant::now() < drain_deadline {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = sink.counts.spans.load(Ordering::Relaxed);
        if now == last && now - before >= load.spans {
            break;
        }
        if now == last && Instant::now() + Duration::from_secs(13) > drain_deadline {
            break;
        }
        last = now;
    }
    let delivered = sink.counts.spans.load(Ordering::Relaxed) - before;
    let rss = peak_rss_mib(pid);
    drop(guard);
    let r = TargetResult {
        target: name.to_string(),
        delivered_per_second: delivered as f64 / load.seconds,
        load,
        delivered_spans: delivered,
        peak_rss_mib: rss,
    };
    let _ = writeln!(
        log,
        "   accepted {:.0} spans/s ({} spans, {} errors), delivered {} spans ({:.0}/s), peak RSS {:.1} MiB",
        r.load.spans_per_second, r.load.spans, r.load.errors, r.delivered_spans, r.delivered_per_second, r.peak_rss_mib
    );
    Ok(r)
}

/// The median over rounds of one target's figures.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// The target's name.
    pub target: String,
    /// Rounds measured.
    pub rounds: usize,
    /// Median accepted spans/s.
    pub accepted_per_second: f64,
    /// Median delivered spans/s.
    pub delivered_per_second: f64,
    /// Median peak RSS, MiB.
    pub peak_rss_mib: f64,
    /// Spans accepted but not delivered, over all rounds.
    pub undelivered_spans: u64,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// Medians per target, in the order targets were first measured.
pub fn summarize(results: &[TargetResult]) -> Vec<Summary> {
    let mut names: Vec<&str> = Vec::new();
    for r in results {
        if !names.contains(&r.target.as_str()) {
            names.push(&r.target);
        }
    }
    names
        .into_iter()
        .map(|n| {
            let runs: Vec<&TargetResult> = results.iter().filter(|r| r.target == n).collect();
            Summary {
                target: n.to_string(),
                rounds: runs.len(),
                accepted_per_second: median(runs.iter().map(|r| r.load.spans_per_second).collect()),
                delivered_per_second: median(runs.iter().map(|r| r.delivered_per_second).collect()),
                peak_rss_mib: median(runs.iter().map(|r| r.peak_rss_mib).collect()),
                undelivered_spans: runs
                    .iter()
                    .map(|r| r.load.spans.saturating_sub(r.delivered_spans))
                    .sum(),
            }
        })
        .collect()
}

#[derive(Clone, Copy)]
enum Target {
    Collector { analyze: bool },
    Rotel,
}

/// Runs the comparison: `rounds` rounds, each measuring every target once, in an order rotated by one
/// per round so that no target always runs first or last.
pub async fn run(config: CompareConfig, rounds: usize, log: &mut dyn Write) -> Result<Vec<TargetResult>, String> {
    let any = SocketAddr::from(([127, 0, 0, 1], 0));
    let sink = sink::start(any, any).await.map_err(|e| format!("sink: {e}"))?;
    let _ = writeln!(log, "sink at grpc {} http {}", sink.grpc_addr, sink.http_addr);
    let mut targets = vec![Target::Collector { analyze: true }];
    if config.include_forward_only {
        targets.push(Target::Collector { analyze: false });
    }
    if config.rotel_bin.is_some() {
        targets.push(Target::Rotel);
    }
    let port = || free_port().map_err(|e| e.to_string());
    let mut results = Vec::new();
    for round in 0..rounds.max(1) {
        let _ = writeln!(log, "-- round {}/{}", round + 1, rounds.max(1));
        let mut order = targets.clone();
        let n = order.len();
        order.rotate_left(round % n);
        for t in order {
            let (name, cmd, grpc) = match t {
                Target::Collector { analyze } => {
                    let (g, h, a) = (port()?, port()?, port()?);
                    let mut cmd = Command::new(&config.collector_bin);
                    cmd.arg("serve");
                    cmd.args(["--grpc-listen", &format!("127.0.0.1:{g}")]);
                    cmd.args(["--http-listen", &format!("127.0.0.1:{h}")]);
                    cmd.args(["--api-listen", &format!("127.0.0.1:{a}")]);
                    cmd.args(["--forward-grpc", &format!("http://{}", sink.grpc_addr)]);
                    if !analyze {
                        cmd.arg("--no-analysis");
                    }
                    let name = if analyze {
                        "dei-collector (analysis on)"
                    } else {
                        "dei-collector (analysis off)"
                    };
                    (name, cmd, g)
                }
                Target::Rotel => {
                    let (g, h) = (port()?, port()?);
                    let mut cmd = Command::new(config.rotel_bin.as_ref().ok_or("no rotel")?);
                    cmd.arg("start");
                    cmd.args(["--otlp-grpc-endpoint", &format!("127.0.0.1:{g}")]);
                    cmd.args(["--otlp-http-endpoint", &format!("127.0.0.1:{h}")]);
                    cmd.args(["--exporter", "otlp"]);
                    cmd.args(["--otlp-exporter-endpoint", &format!("http://{}", sink.grpc_addr)]);
                    cmd.args(["--otlp-exporter-protocol", "grpc"]);
                    cmd.args(["--otlp-exporter-compression", &config.rotel_compression]);
                    cmd.args(["--pid-file", &format!("/tmp/rotel-bench-{g}.pid")]);
                    ("rotel", cmd, g)
                }
            };
            let addr = SocketAddr::from(([127, 0, 0, 1], grpc));
            results.push(measure(name, cmd, addr, &sink, &config, log).await?);
        }
    }
    Ok(results)
}
