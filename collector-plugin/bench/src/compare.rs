//! Runs the benchmark: the same saturating load through dei-collector (analysis on, forwarding to a sink)
//! and through rotel (forwarding to the same sink), one after the other in one run, and reports each
//! target's accepted and delivered spans/s and peak RSS (`VmHWM` of its process).

use crate::{loadgen, sink};
use dei_collector::server::Downstream;
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
    /// Also measure the load generator straight into the sink: the ceiling the bench itself reaches.
    pub include_ceiling: bool,
    /// Also measure the load generator into a byte-copying TCP relay in front of the sink: the most that any
    /// process in the collector's place reaches here, since it receives and sends every byte and does nothing
    /// else.
    pub include_relay: bool,
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
    /// CPU time the target's process used (user + system) over the load and the drain, divided by the
    /// load's duration: the cores it kept busy (0 for the ceiling, which has no process of its own).
    pub cpu_cores: f64,
}

pub(crate) fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// User plus system CPU seconds of a process (`/proc/PID/stat`), 0 when unreadable.
pub(crate) fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // the fields after the command name, which is in parentheses and may hold spaces
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or(Vec::new(), |(_, rest)| rest.split_whitespace().collect());
    let ticks = |i: usize| fields.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name; the kernel's tick is
    // USER_HZ, 100 on Linux
    (ticks(11) + ticks(12)) / 100.0
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

/// Waits (at most 20 s) until something accepts TCP connections on `addr`: whether it did.
pub async fn wait_listening(addr: SocketAddr) -> bool {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if tokio::net::TcpStream::connect(addr).await.is_ok() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

/// A child process, killed and reaped when dropped.
pub struct Guard(pub Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The system's load averages over 1, 5 and 15 minutes (`/proc/loadavg`), if readable.
pub fn load_average() -> Option<[f64; 3]> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    let mut it = text.split_whitespace().map(|v| v.parse::<f64>().ok());
    Some([it.next()??, it.next()??, it.next()??])
}

/// The highest 1-minute load average at which a run counts as taken on an idle machine.
pub const IDLE_LOAD: f64 = 0.5;

/// Measures one target: a process started from `cmd` (listening on `grpc`, forwarding to the sink), or,
/// with `cmd` `None`, the load generator straight into the sink (the ceiling of the bench itself).
async fn measure(
    name: &str,
    cmd: Option<Command>,
    grpc: SocketAddr,
    sink: &sink::Sink,
    config: &CompareConfig,
    log: &mut dyn Write,
) -> Result<TargetResult, String> {
    let guard = match cmd {
        Some(mut cmd) => {
            let _ = writeln!(log, "== {name}: {cmd:?}");
            let child = cmd
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .map_err(|e| format!("{name}: {e}"))?;
            Some(Guard(child))
        }
        None => {
            let _ = writeln!(log, "== {name}: the load generator straight into the sink at {grpc}");
            None
        }
    };
    let pid = guard.as_ref().map(|g| g.0.id());
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
    let rss = pid.map_or(0.0, peak_rss_mib);
    let cpu = pid.map_or(0.0, cpu_seconds);
    drop(guard);
    let r_seconds = load.seconds.max(1e-9);
    let r = TargetResult {
        target: name.to_string(),
        delivered_per_second: delivered as f64 / load.seconds,
        load,
        delivered_spans: delivered,
        peak_rss_mib: rss,
        cpu_cores: cpu / r_seconds,
    };
    let _ = writeln!(
        log,
        "   accepted {:.0} spans/s ({} spans, {} errors), delivered {} spans ({:.0}/s), peak RSS {:.1} MiB, \
         {:.2} cores",
        r.load.spans_per_second,
        r.load.spans,
        r.load.errors,
        r.delivered_spans,
        r.delivered_per_second,
        r.peak_rss_mib,
        r.cpu_cores
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
    /// Lowest and highest delivered spans/s over the rounds (the run-to-run spread).
    pub delivered_per_second_range: (f64, f64),
    /// Median peak RSS, MiB.
    pub peak_rss_mib: f64,
    /// Median cores used.
    pub cpu_cores: f64,
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
                delivered_per_second_range: runs.iter().fold((f64::INFINITY, 0.0f64), |(lo, hi), r| {
                    (lo.min(r.delivered_per_second), hi.max(r.delivered_per_second))
                }),
                peak_rss_mib: median(runs.iter().map(|r| r.peak_rss_mib).collect()),
                cpu_cores: median(runs.iter().map(|r| r.cpu_cores).collect()),
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
    Relay,
    Ceiling,
}

/// The name of the ceiling target: the load generator straight into the sink.
pub const CEILING: &str = "loadgen straight into the sink";

/// The name of the relay target: the load generator into `dei-collector-bench relay`, which copies every
/// connection's bytes to the sink.
pub const RELAY: &str = "a TCP relay into the sink";

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
    if config.include_relay {
        targets.push(Target::Relay);
    }
    if config.include_ceiling {
        targets.push(Target::Ceiling);
    }
    let port = || free_port().map_err(|e| e.to_string());
    let mut results = Vec::new();
    for round in 0..rounds.max(1) {
        let _ = writeln!(log, "-- round {}/{}", round + 1, rounds.max(1));
        let mut order = targets.clone();
        let n = order.len();
        order.rotate_left(round % n);
        if let Some([one, ..]) = load_average() {
            let _ = writeln!(log, "   load average (1 min) {one:.2}");
        }
        for t in order {
            let (name, cmd, grpc) = match t {
                Target::Ceiling => (CEILING, None, sink.grpc_addr.port()),
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
                    (name, Some(cmd), g)
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
                    ("rotel", Some(cmd), g)
                }
                Target::Relay => {
                    let g = port()?;
                    let bench = std::env::current_exe().map_err(|e| format!("this binary's path: {e}"))?;
                    let mut cmd = Command::new(bench);
                    cmd.arg("relay");
                    cmd.args(["--listen", &format!("127.0.0.1:{g}")]);
                    cmd.args(["--upstream", &sink.grpc_addr.to_string()]);
                    (RELAY, Some(cmd), g)
                }
            };
            let addr = SocketAddr::from(([127, 0, 0, 1], grpc));
            results.push(measure(name, cmd, addr, &sink, &config, log).await?);
        }
    }
    Ok(results)
}
