//! The cost of one view over many shards (`dei-collector query`): for a shard holding `n` prefix-tree nodes,
//! how long a query node takes to pull and merge `k` such shards, what it holds, and how fast it answers.
//!
//! One `dei-collector serve` process is loaded with `n` distinct RPCs (traces of one top-level call and 99
//! calls under it, each with a client and a server span). A query node (`dei-collector query`) is then
//! started over `k` copies of that shard's URL: it pulls and merges `k` snapshots of `n` nodes, which is the
//! work `k` shards of the same shape cost it (the traces, the same ids in every copy, are held once). Its
//! first pull happens before it listens; `/api/v1/peers` then gives the pull and merge times, and every
//! endpoint of the API is timed `queries` times against the merged view.

use crate::compare::Guard;
use dei_propagator::semconv;
use dei_propagator::{Element, Index, Instantiation, InvocationSignature, PayloadDigest, Signature, StackDigest};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value::Value};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use prost::Message;
use std::io::BufRead;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Instant;

/// RPCs per generated trace.
const RPCS_PER_TRACE: usize = 100;

/// What to measure.
#[derive(Debug, Clone)]
pub struct ShardsConfig {
    /// The dei-collector binary.
    pub collector: PathBuf,
    /// Tree sizes of the shard.
    pub nodes: Vec<usize>,
    /// Numbers of shards.
    pub shards: Vec<usize>,
    /// Timed requests per endpoint.
    pub queries: usize,
    /// Query nodes started per `(nodes, shards)` pair; figures are medians over them.
    pub rounds: usize,
    /// Traces sent again to the shard after the first pull (each touches 100 tree nodes and its trace
    /// record), to time a pull of what changed.
    pub changed_traces: usize,
}

/// One measurement.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ShardsRow {
    /// Prefix-tree nodes per shard (without the root).
    pub nodes: usize,
    /// Shards merged.
    pub shards: usize,
    /// One shard's snapshot, bytes.
    pub snapshot_bytes: usize,
    /// Pulling (fetching and parsing) every snapshot, seconds (median over the rounds).
    pub pull_seconds: f64,
    /// Merging them, seconds (median).
    pub merge_seconds: f64,
    /// Pull and merge, lowest and highest over the rounds, seconds.
    pub pull_and_merge_range: (f64, f64),
    /// Pull and merge per shard and per 1000 nodes, milliseconds.
    pub ms_per_shard_per_1k_nodes: f64,
    /// The query node's peak RSS, MiB.
    pub query_node_peak_rss_mib: f64,
    /// Median latency per endpoint, milliseconds.
    pub query_ms: Vec<(String, f64)>,
    /// A pull when nothing changed (every shard asked for its changes, the graph merged again), seconds
    /// (median).
    pub idle_refresh_seconds: f64,
    /// Tree nodes changed on each shard before the timed pull of changes.
    pub changed_nodes_per_shard: usize,
    /// That pull: fetching and parsing every shard's changes, and merging them, seconds (median).
    pub changes_pull_seconds: f64,
    /// Its merge, seconds (median).
    pub changes_merge_seconds: f64,
}

/// Starts `collector args…` and returns it with the first stdout line.
fn start(collector: &PathBuf, args: &[String]) -> Result<(Guard, String), String> {
    let mut child = Command::new(collector)
        .args(args)
        .env("RUST_LOG", "error")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("{}: {e}", collector.display()))?;
    let mut line = String::new();
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let process = Guard(child);
    std::io::BufReader::new(stdout)
        .read_line(&mut line)
        .map_err(|e| e.to_string())?;
    Ok((process, line))
}

fn field(line: &str, name: &str) -> Result<String, String> {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(&format!("{name}=")))
        .map(str::to_string)
        .ok_or_else(|| format!("no {name}= in {line:?}"))
}

fn kv(key: &str, value: Value) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue { value: Some(value) }),
        ..Default::default()
    }
}

/// Traces `first..first + count` of the load: per trace one `shop.Orders/Place` and 99 `shop.Stock/Reserve`
/// under it, each a client span (`orders`) and a server span (`stock`), with distinct payloads.
fn request(first: usize, count: usize) -> Vec<u8> {
    let stack = StackDigest([7; 32]);
    let element = |sig: &str, payload: &str, count: u32| {
        let inv = InvocationSignature::new(Signature::from_name(sig), PayloadDigest::of(payload.as_bytes()), stack);
        Element::new(inv.element_digest(&Instantiation::dei()), count)
    };
    let (mut client, mut server) = (Vec::new(), Vec::new());
    for t in first..first + count {
        let mut trace_id = [0u8; 16];
        trace_id[..8].copy_from_slice(&(t as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15).to_be_bytes());
        trace_id[8..].copy_from_slice(&(t as u64 + 1).to_be_bytes());
        let base = 1_700_000_000_000_000_000u64 + t as u64 * 1_000_000;
        let top = Index::root().child(element("shop.Orders/Place", &format!("order-{t}"), 1));
        for i in 0..RPCS_PER_TRACE {
            let (index, sig, parent_server) = if i == 0 {
                (top.clone(), "shop.Orders/Place", None)
            } else {
                (
                    top.child(element("shop.Stock/Reserve", &format!("{t}/{i}"), 1)),
                    "shop.Stock/Reserve",
                    Some(2u64),
                )
            };
            let attrs = vec![
                kv(semconv::INDEX, Value::StringValue(index.encode())),
                kv(semconv::SIGNATURE, Value::StringValue(sig.into())),
                kv(semconv::DEPTH, Value::IntValue(index.depth() as i64)),
                kv(semconv::INSTANTIATION, Value::StringValue("dei".into())),
            ];
            let (client_id, server_id) = (2 * i as u64 + 1, 2 * i as u64 + 2);
            let span = |id: u64, parent: Option<u64>, kind: i32, from: u64, to: u64| Span {
                trace_id: trace_id.to_vec(),
                span_id: id.to_be_bytes().to_vec(),
                parent_span_id: parent.map(|p| p.to_be_bytes().to_vec()).unwrap_or_default(),
                name: sig.into(),
                kind,
                start_time_unix_nano: base + from,
                end_time_unix_nano: base + to,
                attributes: attrs.clone(),
                ..Default::default()
            };
            client.push(span(client_id, parent_server, 3, i as u64 * 10, i as u64 * 10 + 900));
            server.push(span(
                server_id,
                Some(client_id),
                2,
                i as u64 * 10 + 5,
                i as u64 * 10 + 800,
            ));
        }
    }
    let resource = |service: &str, spans: Vec<Span>| ResourceSpans {
        resource: Some(Resource {
            attributes: vec![kv("service.name", Value::StringValue(service.into()))],
            ..Default::default()
        }),
        scope_spans: vec![ScopeSpans {
            spans,
            ..Default::default()
        }],
        ..Default::default()
    };
    ExportTraceServiceRequest {
        resource_spans: vec![resource("orders", client), resource("stock", server)],
    }
    .encode_to_vec()
}

/// Sends traces `first..first + count` of the load ([`request`]) to the shard's OTLP/HTTP address.
async fn send(http: &reqwest::Client, otlp: &str, first: usize, count: usize) -> Result<(), String> {
    let response = http
        .post(format!("http://{otlp}/v1/traces"))
        .header("content-type", "application/x-protobuf")
        .body(request(first, count))
        .send()
        .await
        .map_err(|e| e.to_string())?;
    if !response.status().is_success() {
        return Err(format!("HTTP {}", response.status()));
    }
    Ok(())
}

async fn get(client: &reqwest::Client, url: &str) -> Result<bytes::Bytes, String> {
    let response = client.get(url).send().await.map_err(|e| format!("GET {url}: {e}"))?;
    if !response.status().is_success() {
        return Err(format!("GET {url}: {}", response.status()));
    }
    response.bytes().await.map_err(|e| format!("GET {url}: {e}"))
}

fn peak_rss_mib(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        })
        .map_or(0.0, |kib| kib / 1024.0)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// Measures every `(nodes, shards)` pair, printing progress on `log`.
pub async fn run(config: &ShardsConfig, log: &mut dyn std::io::Write) -> Result<Vec<ShardsRow>, String> {
    let http = reqwest::Client::new();
    let mut rows = Vec::new();
    for &n in &config.nodes {
        let traces = n.div_ceil(RPCS_PER_TRACE);
        let any = "127.0.0.1:0".to_string();
        let (_shard, line) = start(
            &config.collector,
            &[
                "serve".into(),
                "--grpc-listen".into(),
                any.clone(),
                "--http-listen".into(),
                any.clone(),
                "--api-listen".into(),
                any,
                "--max-nodes".into(),
                (n + 1000).to_string(),
                "--max-traces".into(),
                (traces + 100).to_string(),
            ],
        )?;
        let (otlp, api) = (field(&line, "http")?, field(&line, "api")?);
        let started = Instant::now();
        for first in (0..traces).step_by(50) {
            send(&http, &otlp, first, 50.min(traces - first))
                .await
                .map_err(|e| format!("loading the shard: {e}"))?;
        }
        let stats: serde_json::Value =
            serde_json::from_slice(&get(&http, &format!("http://{api}/api/v1/stats")).await?)
                .map_err(|e| e.to_string())?;
        let held = stats["tree_nodes"].as_u64().unwrap_or(0) as usize;
        if held < n {
            return Err(format!("the shard holds {held} tree nodes, not {n}"));
        }
        let snapshot_bytes = get(&http, &format!("http://{api}/api/v1/snapshot")).await?.len();
        let _ = writeln!(
            log,
            "shard loaded: {held} tree nodes, {traces} traces in {:.1} s; snapshot {:.1} MiB",
            started.elapsed().as_secs_f64(),
            snapshot_bytes as f64 / 1048576.0
        );
        for &k in &config.shards {
            let mut rounds = Vec::new();
            for _ in 0..config.rounds.max(1) {
                rounds.push(measure(config, &http, &otlp, &api, k).await?);
            }
            let pull = median(rounds.iter().map(|r| r.0).collect());
            let merge = median(rounds.iter().map(|r| r.1).collect());
            let totals: Vec<f64> = rounds.iter().map(|r| r.0 + r.1).collect();
            let range = (
                totals.iter().copied().fold(f64::INFINITY, f64::min),
                totals.iter().copied().fold(0.0, f64::max),
            );
            let paths = rounds[0].3.iter().map(|(p, _)| p.clone()).collect::<Vec<_>>();
            let query_ms = paths
                .into_iter()
                .enumerate()
                .map(|(i, p)| (p, median(rounds.iter().map(|r| r.3[i].1).collect())))
                .collect();
            let row = ShardsRow {
                nodes: held - 1,
                shards: k,
                snapshot_bytes,
                pull_seconds: pull,
                merge_seconds: merge,
                pull_and_merge_range: range,
                ms_per_shard_per_1k_nodes: (pull + merge) * 1000.0 / k as f64 / ((held - 1) as f64 / 1000.0),
                query_node_peak_rss_mib: median(rounds.iter().map(|r| r.2).collect()),
                query_ms,
                idle_refresh_seconds: median(rounds.iter().map(|r| r.4).collect()),
                changed_nodes_per_shard: config.changed_traces * RPCS_PER_TRACE,
                changes_pull_seconds: median(rounds.iter().map(|r| r.5).collect()),
                changes_merge_seconds: median(rounds.iter().map(|r| r.6).collect()),
            };
            let _ = writeln!(
                log,
                "{n} nodes × {k} shards: pull {pull:.3} s, merge {merge:.3} s (pull and merge {:.3}–{:.3} s over {} rounds), peak RSS {:.0} MiB; \
                 then a pull with nothing changed {:.3} s, and with {} nodes changed per shard: pull {:.3} s, merge {:.3} s",
                range.0,
                range.1,
                rounds.len(),
                row.query_node_peak_rss_mib,
                row.idle_refresh_seconds,
                row.changed_nodes_per_shard,
                row.changes_pull_seconds,
                row.changes_merge_seconds,
            );
            rows.push(row);
        }
    }
    Ok(rows)
}

/// What [`measure`] gives: the first pull's and merge's seconds, peak RSS in MiB, the median latency of each
/// endpoint in milliseconds; a pull with nothing changed, in seconds; a pull of changes and its merge, in
/// seconds.
type Measured = (f64, f64, f64, Vec<(String, f64)>, f64, f64, f64);

/// One query node over `k` copies of the shard at `api` (OTLP/HTTP at `otlp`), pulling every second.
async fn measure(
    config: &ShardsConfig,
    http: &reqwest::Client,
    otlp: &str,
    api: &str,
    k: usize,
) -> Result<Measured, String> {
    let peers = vec![format!("http://{api}"); k].join(",");
    let (query, line) = start(
        &config.collector,
        &[
            "query".into(),
            "--peers".into(),
            peers,
            "--api-listen".into(),
            "127.0.0.1:0".into(),
            "--interval-ms".into(),
            "1000".into(),
            "--timeout-ms".into(),
            "600000".into(),
            "--max-snapshot-bytes".into(),
            (8usize << 30).to_string(),
        ],
    )?;
    let query_api = field(&line, "api")?;
    let view: serde_json::Value =
        serde_json::from_slice(&get(http, &format!("http://{query_api}/api/v1/peers")).await?)
            .map_err(|e| e.to_string())?;
    if view["partial"] != false {
        return Err(format!("the query node's view is partial: {view}"));
    }
    let (pull, merge) = (
        view["pull_seconds"].as_f64().unwrap_or(0.0),
        view["merge_seconds"].as_f64().unwrap_or(0.0),
    );
    let top = Index::root()
        .child({
            let inv = InvocationSignature::new(
                Signature::from_name("shop.Orders/Place"),
                PayloadDigest::of(b"order-0"),
                StackDigest([7; 32]),
            );
            Element::new(inv.element_digest(&Instantiation::dei()), 1)
        })
        .encode();
    let mut query_ms = Vec::new();
    for path in [
        "/api/v1/stats".to_string(),
        "/api/v1/graph".to_string(),
        "/api/v1/tree?depth=1&limit=100".to_string(),
        format!("/api/v1/tree/node?index={top}"),
        "/api/v1/traces?limit=100".to_string(),
    ] {
        let mut times = Vec::with_capacity(config.queries);
        for _ in 0..config.queries {
            let at = Instant::now();
            get(http, &format!("http://{query_api}{path}")).await?;
            times.push(at.elapsed().as_secs_f64() * 1000.0);
        }
        query_ms.push((path, median(times)));
    }
    let rss = peak_rss_mib(query.0.id());
    let peers_view = || async {
        let v: serde_json::Value =
            serde_json::from_slice(&get(http, &format!("http://{query_api}/api/v1/peers")).await?)
                .map_err(|e| e.to_string())?;
        Ok::<_, String>(v)
    };
    // the refreshes after the first one, with nothing changed
    let mut idle = Vec::new();
    let mut last = peers_view().await?["merged_unix_nano"].as_u64().unwrap_or(0);
    while idle.len() < 3 {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        let v = peers_view().await?;
        let at = v["merged_unix_nano"].as_u64().unwrap_or(0);
        if at != last {
            last = at;
            idle.push(v["pull_seconds"].as_f64().unwrap_or(0.0) + v["merge_seconds"].as_f64().unwrap_or(0.0));
        }
    }
    // the same traces sent again: their nodes and records change; time the first refresh that started after
    let mut changed = (0.0, 0.0);
    if config.changed_traces > 0 {
        send(http, otlp, 0, config.changed_traces)
            .await
            .map_err(|e| format!("changing the shard: {e}"))?;
        let sent = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        loop {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            let v = peers_view().await?;
            let (at, p, m) = (
                v["merged_unix_nano"].as_u64().unwrap_or(0),
                v["pull_seconds"].as_f64().unwrap_or(0.0),
                v["merge_seconds"].as_f64().unwrap_or(0.0),
            );
            if at.saturating_sub(((p + m) * 1e9) as u64) > sent {
                changed = (p, m);
                break;
            }
        }
    }
    Ok((pull, merge, rss, query_ms, median(idle), changed.0, changed.1))
}
