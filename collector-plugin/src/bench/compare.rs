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
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
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
        r.load.spans_per_second,
        r.load.spans,
        r.load.errors,
        r.delivered_spans,
        r.delivered_per_second,
        r.peak_rss_mib
    );
    Ok(r)
}

/// Runs the comparison.
pub async fn run(config: CompareConfig, log: &mut dyn Write) -> Result<Vec<TargetResult>, String> {
    let any = SocketAddr::from(([127, 0, 0, 1], 0));
    let sink = sink::start(any, any)
        .await
        .map_err(|e| format!("sink: {e}"))?;
    let _ = writeln!(
        log,
        "sink at grpc {} http {}",
        sink.grpc_addr, sink.http_addr
    );
    let mut results = Vec::new();
    let collector = |analyze: bool| -> Result<(Command, SocketAddr), String> {
        let p = |_: ()| free_port().map_err(|e| e.to_string());
        let (g, h, a) = (p(())?, p(())?, p(())?);
        let mut cmd = Command::new(&config.collector_bin);
        cmd.args([
            "serve",
            "--grpc-listen",
            &format!("127.0.0.1:{g}"),
            "--http-listen",
            &format!("127.0.0.1:{h}"),
            "--api-listen",
            &format!("127.0.0.1:{a}"),
            "--forward-grpc",
            &format!("http://{}", sink.grpc_addr),
        ]);
        if !analyze {
            cmd.arg("--no-analysis");
        }
        Ok((cmd, SocketAddr::from(([127, 0, 0, 1], g))))
    };
    let (cmd, grpc) = collector(true)?;
    results.push(
        measure(
            "dei-collector (analysis on)",
            cmd,
            grpc,
            &sink,
            &config,
            log,
        )
        .await?,
    );
    if config.include_forward_only {
        let (cmd, grpc) = collector(false)?;
        results.push(
            measure(
                "dei-collector (analysis off)",
                cmd,
                grpc,
                &sink,
                &config,
                log,
            )
            .await?,
        );
    }
    if let Some(rotel) = &config.rotel_bin {
        let (g, h) = (
            free_port().map_err(|e| e.to_string())?,
            free_port().map_err(|e| e.to_string())?,
        );
        let mut cmd = Command::new(rotel);
        cmd.args([
            "start",
            "--otlp-grpc-endpoint",
            &format!("127.0.0.1:{g}"),
            "--otlp-http-endpoint",
            &format!("127.0.0.1:{h}"),
            "--exporter",
            "otlp",
            "--otlp-exporter-endpoint",
            &format!("http://{}", sink.grpc_addr),
            "--otlp-exporter-protocol",
            "grpc",
            "--pid-file",
            &format!("/tmp/rotel-bench-{g}.pid"),
        ]);
        results.push(
            measure(
                "rotel",
                cmd,
                SocketAddr::from(([127, 0, 0, 1], g)),
                &sink,
                &config,
                log,
            )
            .await?,
        );
    }
    Ok(results)
}
