//! Throughput of a sharded deployment on this machine: the load generator sends to an OpenTelemetry
//! Collector whose loadbalancing exporter (routing by trace id, as `docs/deploy/otelcol-loadbalancing.yaml`)
//! spreads the traces over 1, 2 or 3 `dei-collector serve` processes, which analyze and forward to the
//! counting sink. Reported: spans delivered per second, and the cores each part used, so that throughput per
//! core of dei-collector can be read whatever the machine's cores bound.

use crate::compare::{Guard, cpu_seconds, free_port, load_average, wait_listening};
use crate::{loadgen, sink};
use dei_collector::server::Downstream;
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// What to measure.
#[derive(Debug, Clone)]
pub struct ShardedConfig {
    /// The dei-collector binary.
    pub collector: PathBuf,
    /// The OpenTelemetry Collector binary (with the loadbalancing exporter).
    pub otelcol: PathBuf,
    /// Numbers of shards.
    pub shards: Vec<usize>,
    /// Seconds of load per run.
    pub duration: Duration,
    /// Concurrent senders.
    pub concurrency: usize,
    /// Traces per request.
    pub traces_per_request: usize,
    /// Rounds; each measures every number of shards once, in rotated order.
    pub rounds: usize,
}

/// One run.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ShardedRun {
    /// dei-collectors behind the Collector.
    pub shards: usize,
    /// Spans the Collector acknowledged per second.
    pub accepted_per_second: f64,
    /// Spans the shards delivered to the sink per second.
    pub delivered_per_second: f64,
    /// Cores the dei-collectors used, together.
    pub shard_cores: f64,
    /// Cores the Collector used.
    pub otelcol_cores: f64,
    /// Delivered spans per second per core used by dei-collectors.
    pub delivered_per_shard_core: f64,
    /// The 1-minute load average before the run.
    pub load_before: f64,
}

/// The Collector's configuration for `shards` endpoints: `docs/deploy/otelcol-loadbalancing.yaml`'s
/// pipeline, with one hostname per shard and no metrics reader.
fn otelcol_config(grpc: u16, shards: &[u16]) -> String {
    let hostnames: String = shards.iter().map(|p| format!("          - 127.0.0.1:{p}\n")).collect();
    format!(
        "receivers:\n  otlp:\n    protocols:\n      grpc:\n        endpoint: 127.0.0.1:{grpc}\n\
         exporters:\n  load_balancing:\n    routing_key: traceID\n    protocol:\n      otlp:\n        tls:\n          insecure: true\n\
         \x20   resolver:\n      static:\n        hostnames:\n{hostnames}\
         service:\n  pipelines:\n    traces:\n      receivers: [otlp]\n      exporters: [load_balancing]\n\
         \x20 telemetry:\n    metrics:\n      level: none\n"
    )
}

/// Measures every number of shards `rounds` times.
pub async fn run(config: &ShardedConfig, log: &mut dyn Write) -> Result<Vec<ShardedRun>, String> {
    let any = SocketAddr::from(([127, 0, 0, 1], 0));
    let sink = sink::start(any, any).await.map_err(|e| format!("sink: {e}"))?;
    let port = || free_port().map_err(|e| e.to_string());
    let dir = std::env::temp_dir().join(format!("dei-sharded-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let mut runs = Vec::new();
    for round in 0..config.rounds.max(1) {
        let mut order = config.shards.clone();
        let n = order.len().max(1);
        order.rotate_left(round % n);
        for shards in order {
            let load_before = load_average().map_or(f64::NAN, |[one, ..]| one);
            let mut guards = Vec::new();
            let mut grpc_ports = Vec::new();
            for _ in 0..shards {
                let (g, h, a) = (port()?, port()?, port()?);
                let child = Command::new(&config.collector)
                    .arg("serve")
                    .args(["--grpc-listen", &format!("127.0.0.1:{g}")])
                    .args(["--http-listen", &format!("127.0.0.1:{h}")])
                    .args(["--api-listen", &format!("127.0.0.1:{a}")])
                    .args(["--forward-grpc", &format!("http://{}", sink.grpc_addr)])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .map_err(|e| format!("{}: {e}", config.collector.display()))?;
                guards.push(Guard(child));
                grpc_ports.push(g);
            }
            for g in &grpc_ports {
                if !wait_listening(SocketAddr::from(([127, 0, 0, 1], *g))).await {
                    return Err(format!("a dei-collector did not listen on {g}"));
                }
            }
            let otel_grpc = port()?;
            let file = dir.join(format!("otelcol-{shards}.yaml"));
            std::fs::write(&file, otelcol_config(otel_grpc, &grpc_ports)).map_err(|e| e.to_string())?;
            let otelcol = Guard(
                Command::new(&config.otelcol)
                    .arg("--config")
                    .arg(format!("file:{}", file.display()))
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .map_err(|e| format!("{}: {e}", config.otelcol.display()))?,
            );
            let target = SocketAddr::from(([127, 0, 0, 1], otel_grpc));
            if !wait_listening(target).await {
                return Err(format!("the Collector did not listen on {target}"));
            }
            let cpu = |g: &Guard| cpu_seconds(g.0.id());
            let shard_cpu_before: f64 = guards.iter().map(cpu).sum();
            let otelcol_cpu_before = cpu(&otelcol);
            let before = sink.counts.spans.load(Ordering::Relaxed);
            let load = loadgen::run(loadgen::LoadConfig {
                target: Downstream::Grpc(format!("http://{target}")),
                duration: config.duration,
                concurrency: config.concurrency,
                traces_per_request: config.traces_per_request,
            })
            .await?;
            // every accepted span through the Collector and the shards to the sink, or 15 s
            let deadline = Instant::now() + Duration::from_secs(15);
            while sink.counts.spans.load(Ordering::Relaxed) - before < load.spans && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            let delivered = sink.counts.spans.load(Ordering::Relaxed) - before;
            let seconds = load.seconds.max(1e-9);
            let shard_cores = (guards.iter().map(cpu).sum::<f64>() - shard_cpu_before) / seconds;
            let otelcol_cores = (cpu(&otelcol) - otelcol_cpu_before) / seconds;
            let run = ShardedRun {
                shards,
                accepted_per_second: load.spans_per_second,
                delivered_per_second: delivered as f64 / seconds,
                shard_cores,
                otelcol_cores,
                delivered_per_shard_core: delivered as f64 / seconds / shard_cores.max(1e-9),
                load_before,
            };
            let _ = writeln!(
                log,
                "{shards} shard(s): accepted {:.0}/s, delivered {:.0}/s ({delivered} of {} spans), dei-collectors {:.2} \
                 cores, the Collector {:.2} cores, {:.0} spans/s per dei-collector core (load {load_before:.2})",
                run.accepted_per_second,
                run.delivered_per_second,
                load.spans,
                run.shard_cores,
                run.otelcol_cores,
                run.delivered_per_shard_core
            );
            runs.push(run);
            drop(otelcol);
            drop(guards);
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(runs)
}
