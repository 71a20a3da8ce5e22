//! The real test peers that `.ci/run` builds from their Go modules: Jaeger v2 (`$DEI_JAEGER_BIN`) and an
//! OpenTelemetry Collector distribution (`$DEI_OTELCOL_BIN`, from `deploy/otelcol/`). Each runs as a child
//! process on ephemeral loopback ports, with one of the configuration files in `docs/deploy/` as written
//! (its `${env:…}` variables carry the ports). Also: Jaeger's query API and Prometheus text, read over
//! plain HTTP/1.1.
//!
//! Included by `collector-plugin/tests/common/chain.rs` (so by every test binary of the crate that uses
//! `common`) and by `tests/real_peers.rs`, with `#[path = …] mod peers;`; depends on std and serde_json only.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// `docs/deploy/` of the workspace.
pub fn deploy_dir() -> PathBuf {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let root = if here.join("docs/deploy").is_dir() {
        here.to_path_buf()
    } else {
        here.join("..")
    };
    root.join("docs/deploy")
}

/// A file of `docs/deploy/`, as a `file:` config location.
pub fn deploy_file(name: &str) -> String {
    let path = deploy_dir().join(name);
    assert!(path.is_file(), "{} exists", path.display());
    format!("file:{}", path.display())
}

/// Whether a missing peer fails the test (`DEI_REQUIRE_INTEROP=1`, as in CI).
pub fn required() -> bool {
    std::env::var("DEI_REQUIRE_INTEROP").is_ok_and(|v| v == "1")
}

/// The peer binary named by `$var` if it runs (`bin <version>`: `--version` or `version`). Missing: a
/// failure under `DEI_REQUIRE_INTEROP=1`, otherwise a loud note that the test did not run, and `None`.
pub fn binary(var: &str, version: &str, what: &str) -> Option<PathBuf> {
    let found = std::env::var_os(var).map(PathBuf::from).filter(|p| {
        Command::new(p)
            .arg(version)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    });
    if found.is_none() {
        let why = format!("{what} is not available: ${var} must name a binary that runs (.ci/run builds it)");
        if required() {
            panic!("DEI_REQUIRE_INTEROP=1 but {why}");
        }
        eprintln!("\n!!!!!!!!!! NOT RUN: {why} (set DEI_REQUIRE_INTEROP=1 to make this a failure) !!!!!!!!!!\n");
    }
    found
}

/// Jaeger v2 (`$DEI_JAEGER_BIN`), or `None` after [`binary`]'s report.
pub fn jaeger_bin() -> Option<PathBuf> {
    binary("DEI_JAEGER_BIN", "version", "Jaeger v2")
}

/// The OpenTelemetry Collector build of `deploy/otelcol/` (`$DEI_OTELCOL_BIN`), or `None` after [`binary`]'s
/// report.
pub fn otelcol_bin() -> Option<PathBuf> {
    binary(
        "DEI_OTELCOL_BIN",
        "--version",
        "the OpenTelemetry Collector (deploy/otelcol)",
    )
}

/// A loopback port that was free a moment ago (for child processes that take a port, not a listener).
///
/// Chosen below the kernel's ephemeral range (`ip_local_port_range`), never twice by one process: a port
/// that `bind(0)` handed out could be handed out again, or become a connection's source port, in a test
/// running beside this one before the child binds it (Jaeger once exited with "address already in use").
/// Processes start at different points of the range.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    const LOW: u32 = 10_000;
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u32>().ok())
        .unwrap_or(32_768);
    if ephemeral_low > LOW + 1_000 {
        let span = ephemeral_low - LOW;
        let start = std::process::id().wrapping_mul(2_654_435_761) % span;
        for _ in 0..span {
            let port = LOW + (start + NEXT.fetch_add(1, Ordering::Relaxed)) % span;
            if std::net::TcpListener::bind(("127.0.0.1", port as u16)).is_ok() {
                return port as u16;
            }
        }
    }
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    listener.local_addr().expect("local address").port()
}

/// A loopback address on a free port.
pub fn free_addr() -> String {
    format!("127.0.0.1:{}", free_port())
}

fn listening(addr: &str) -> bool {
    TcpStream::connect(addr).is_ok()
}

/// Polls `f` until it returns true or the timeout passes.
pub fn eventually(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    f()
}

/// Every variable that the files in `docs/deploy/` read: cleared in the peers' environment, so that only
/// what a test sets applies.
pub const VARIABLES: [&str; 21] = [
    "OTELCOL_OTLP_GRPC",
    "OTELCOL_OTLP_HTTP",
    "DEI_COLLECTOR_OTLP",
    "BACKEND_OTLP",
    "OTELCOL_METRICS_HOST",
    "OTELCOL_METRICS_PORT",
    "SPANMETRICS_PROMETHEUS",
    "SPANMETRICS_FLUSH",
    "JAEGER_OTLP_GRPC",
    "JAEGER_OTLP_HTTP",
    "JAEGER_QUERY_HTTP",
    "JAEGER_QUERY_GRPC",
    "JAEGER_METRICS_HOST",
    "JAEGER_METRICS_PORT",
    "DEI_JAEGER_UI",
    "DEI_SHARD_1",
    "DEI_SHARD_2",
    "DEI_SHARD_3",
    "DEI_ROUTING_KEY",
    "DEI_SHARDS_HOSTNAME",
    "DEI_SHARDS_PORT",
];

/// A peer process, killed on drop.
pub struct Peer {
    child: Child,
    name: String,
}

impl Peer {
    /// Starts `bin --config C…` with `vars` (and no other deployment variable), waits until every address
    /// in `wait_for` accepts connections.
    pub fn start(name: &str, bin: &Path, configs: &[String], vars: &[(&str, String)], wait_for: &[&str]) -> Peer {
        Peer::start_command(name, Command::new(bin), configs, vars, wait_for)
    }

    /// Like [`Peer::start`], with `cmd` (the binary, or a wrapper that runs it) in place of the binary.
    pub fn start_command(
        name: &str,
        mut cmd: Command,
        configs: &[String],
        vars: &[(&str, String)],
        wait_for: &[&str],
    ) -> Peer {
        let bin = cmd.get_program().to_os_string();
        for v in VARIABLES {
            cmd.env_remove(v);
        }
        for c in configs {
            cmd.arg("--config").arg(c);
        }
        let child = cmd
            .envs(vars.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("start {name} ({}): {e}", bin.to_string_lossy()));
        let mut peer = Peer {
            child,
            name: name.to_string(),
        };
        // Its log goes to this test's stderr, prefixed, in a thread (the pipe must not fill up).
        if let Some(err) = peer.child.stderr.take() {
            let prefix = name.to_string();
            std::thread::spawn(move || {
                use std::io::BufRead;
                for line in std::io::BufReader::new(err).lines().map_while(Result::ok) {
                    if line.contains("error") || line.contains("warn") || line.contains("Error") {
                        eprintln!("[{prefix}] {line}");
                    }
                }
            });
        }
        let ready = eventually(Duration::from_secs(60), || {
            if let Ok(Some(status)) = peer.child.try_wait() {
                panic!("{name} exited before listening: {status}");
            }
            wait_for.iter().all(|a| listening(a))
        });
        assert!(ready, "{name} listens on {wait_for:?}");
        peer
    }

    /// Whether the process still runs.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = &self.name;
    }
}

/// Jaeger v2 running a configuration of `docs/deploy/`.
pub struct Jaeger {
    pub peer: Peer,
    /// OTLP/gRPC receiver, `host:port`.
    pub otlp_grpc: String,
    /// OTLP/HTTP receiver, `host:port`.
    pub otlp_http: String,
    /// The query service's HTTP API, `host:port`.
    pub query: String,
    /// Jaeger's own Prometheus metrics, `host:port`.
    pub metrics: String,
}

impl Jaeger {
    /// Starts Jaeger with `docs/deploy/<config>` on free loopback ports, plus `vars`.
    pub fn start(bin: &Path, config: &str, vars: &[(&str, String)]) -> Jaeger {
        let (otlp_grpc, otlp_http, query, grpc_query) = (free_addr(), free_addr(), free_addr(), free_addr());
        let metrics_port = free_port();
        let mut all: Vec<(&str, String)> = vec![
            ("JAEGER_OTLP_GRPC", otlp_grpc.clone()),
            ("JAEGER_OTLP_HTTP", otlp_http.clone()),
            ("JAEGER_QUERY_HTTP", query.clone()),
            ("JAEGER_QUERY_GRPC", grpc_query),
            ("JAEGER_METRICS_HOST", "127.0.0.1".into()),
            ("JAEGER_METRICS_PORT", metrics_port.to_string()),
        ];
        all.extend(vars.iter().cloned());
        let peer = Peer::start(
            "jaeger",
            bin,
            &[deploy_file(config)],
            &all,
            &[&otlp_grpc, &otlp_http, &query],
        );
        Jaeger {
            peer,
            otlp_grpc,
            otlp_http,
            query,
            metrics: format!("127.0.0.1:{metrics_port}"),
        }
    }

    /// GET a JSON document from the query API.
    pub fn get(&self, path: &str) -> serde_json::Value {
        let (status, body) = http_get(&self.query, path);
        assert_eq!(status, 200, "GET {path} from Jaeger: {body}");
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {path} from Jaeger: {e}: {body}"))
    }

    /// The services Jaeger has spans of (`/api/services`).
    pub fn services(&self) -> BTreeSet<String> {
        self.get("/api/services")["data"]
            .as_array()
            .map(|a| a.iter().filter_map(|s| s.as_str().map(String::from)).collect())
            .unwrap_or_default()
    }

    /// The spans of one trace (`/api/traces/{id}`, id in lowercase hex); empty if Jaeger has none.
    pub fn trace(&self, trace_id: &str) -> Vec<JaegerSpan> {
        let (status, body) = http_get(&self.query, &format!("/api/traces/{trace_id}"));
        if status == 404 {
            return Vec::new();
        }
        assert_eq!(status, 200, "GET /api/traces/{trace_id}: {body}");
        let doc: serde_json::Value = serde_json::from_str(&body).expect("Jaeger's trace is JSON");
        doc["data"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(JaegerSpan::all_of)
            .collect()
    }

    /// Every span of the traces of `service` (`/api/traces?service=…&limit=…`), deduplicated by trace.
    pub fn spans_of_service(&self, service: &str, limit: usize) -> Vec<JaegerSpan> {
        let doc = self.get(&format!(
            "/api/traces?service={service}&limit={limit}&lookback=custom&start=0&end={}",
            now_micros() + 3_600_000_000
        ));
        doc["data"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(JaegerSpan::all_of)
            .collect()
    }

    /// Jaeger's own metrics (Prometheus text).
    pub fn own_metrics(&self) -> Vec<Sample> {
        scrape(&self.metrics)
    }
}

/// Microseconds since the epoch.
pub fn now_micros() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros())
        .unwrap_or(0)
}

/// One span as Jaeger's query API shows it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct JaegerSpan {
    /// Trace id, 32 lowercase hex digits.
    pub trace_id: String,
    /// Span id, 16 lowercase hex digits.
    pub span_id: String,
    /// The parent (`CHILD_OF` reference), 16 lowercase hex digits.
    pub parent: Option<String>,
    /// The operation (span) name.
    pub operation: String,
    /// The process's `serviceName`.
    pub service: String,
    /// Every tag as text (numbers and booleans as they print).
    pub tags: BTreeMap<String, String>,
}

/// Jaeger prints ids without leading zeros in some places: normalize to fixed width.
fn hex_id(v: &serde_json::Value, width: usize) -> String {
    let s = v.as_str().unwrap_or_default().to_ascii_lowercase();
    format!("{s:0>width$}")
}

fn text(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

impl JaegerSpan {
    /// The spans of one trace document of the query API.
    pub fn all_of(trace: &serde_json::Value) -> Vec<JaegerSpan> {
        let processes = &trace["processes"];
        trace["spans"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|s| {
                let trace_id = hex_id(&s["traceID"], 32);
                let parent = s["references"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|r| r["refType"] == "CHILD_OF")
                    .map(|r| hex_id(&r["spanID"], 16));
                let tags = s["tags"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|t| (text(&t["key"]), text(&t["value"])))
                    .collect();
                let pid = s["processID"].as_str().unwrap_or_default();
                JaegerSpan {
                    trace_id,
                    span_id: hex_id(&s["spanID"], 16),
                    parent,
                    operation: text(&s["operationName"]),
                    service: text(&processes[pid]["serviceName"]),
                    tags,
                }
            })
            .collect()
    }
}

/// One sample of a Prometheus text exposition.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// Parses Prometheus text (comments skipped; label values unescaped).
pub fn parse_prometheus(text: &str) -> Vec<Sample> {
    let mut out = Vec::new();
    for line in text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        // `name{labels} value [timestamp]`; label values may hold spaces, so split after the `}`
        let (name, labels, rest) = match (line.find('{'), line.rfind('}')) {
            (Some(open), Some(close)) if open < close => {
                (&line[..open], parse_labels(&line[open + 1..close]), &line[close + 1..])
            }
            _ => match line.split_once(' ') {
                Some((n, rest)) => (n, BTreeMap::new(), rest),
                None => continue,
            },
        };
        let Some(Ok(value)) = rest.split_whitespace().next().map(str::parse::<f64>) else {
            continue;
        };
        out.push(Sample {
            name: name.trim().to_string(),
            labels,
            value,
        });
    }
    out
}

fn parse_labels(s: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut chars = s.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| *c == ',' || c.is_whitespace()) {
            chars.next();
        }
        let key: String = chars.by_ref().take_while(|c| *c != '=').collect();
        if key.is_empty() {
            break;
        }
        if chars.next() != Some('"') {
            break;
        }
        let mut value = String::new();
        while let Some(c) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some('n') => value.push('\n'),
                    Some(o) => value.push(o),
                    None => break,
                },
                '"' => break,
                o => value.push(o),
            }
        }
        out.insert(key.trim().to_string(), value);
    }
    out
}

/// GET `/metrics` from `addr` and parse it.
pub fn scrape(addr: &str) -> Vec<Sample> {
    let (status, body) = http_get(addr, "/metrics");
    assert_eq!(status, 200, "GET {addr}/metrics: {body}");
    parse_prometheus(&body)
}

/// The sum of the samples named `name` (or `name_total`: the Collector's own counters carry the suffix in
/// some releases, Jaeger's v0.140 base, and not in others) whose labels include every pair of `with`.
pub fn sum(samples: &[Sample], name: &str, with: &[(&str, &str)]) -> f64 {
    let total = format!("{name}_total");
    samples
        .iter()
        .filter(|s| {
            (s.name == name || s.name == total)
                && with
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|s| s.value)
        .sum()
}

/// `s` percent-encoded for a query string (everything but ASCII letters, digits and `-._~`), as the web
/// view's `encodeURIComponent` does for the characters of JSON and DEI indexes.
pub fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A blocking HTTP/1.1 GET: (status, body), chunked bodies decoded.
pub fn http_get(addr: &str, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    let _ = s.set_read_timeout(Some(Duration::from_secs(60)));
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").expect("send a request");
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).expect("read a response");
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap_or(raw.len());
    let head = String::from_utf8_lossy(&raw[..split]).to_string();
    let mut body = raw.get(split + 4..).unwrap_or_default().to_vec();
    let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    if head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
        let mut out = Vec::new();
        let mut rest = &body[..];
        while let Some(eol) = rest.windows(2).position(|w| w == b"\r\n") {
            let len = String::from_utf8_lossy(&rest[..eol]);
            let n = usize::from_str_radix(len.split(';').next().unwrap_or("0").trim(), 16).unwrap_or(0);
            if n == 0 || rest.len() < eol + 2 + n {
                break;
            }
            out.extend_from_slice(&rest[eol + 2..eol + 2 + n]);
            rest = rest.get(eol + 4 + n..).unwrap_or_default();
        }
        body = out;
    }
    (status, String::from_utf8_lossy(&body).to_string())
}
