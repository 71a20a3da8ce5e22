//! The OpenTelemetry Collector deployment configurations in `docs/deploy/`, run as written (the very same
//! files; their `${env:…}` variables get ephemeral loopback ports) with a real OpenTelemetry Collector: the
//! distribution of `deploy/otelcol/` (core and contrib v0.161.0), which `.ci/run` builds from its Go modules
//! and names in `$DEI_OTELCOL_BIN`:
//! - in front: Rust exporters (OTLP/gRPC and OTLP/HTTP) → otelcol (`otelcol-in-front.yaml`) →
//!   dei-collector → downstream;
//! - behind: Rust exporters → dei-collector → otelcol (`otelcol-behind.yaml`, reached over OTLP/gRPC or
//!   OTLP/HTTP) → downstream;
//! - the files resolve with otelcol's own configuration resolver, to their documented defaults and to
//!   overrides.
//!
//! The downstream end is an independent OTLP/gRPC receiver. Each chain test checks that exactly the spans the
//! services made arrive there (count and ids, none twice, DEI attributes intact), that both ends counted them
//! (dei-collector's `/metrics`, the Collector's own metrics), and that dei-collector built the expected graph
//! edge and prefix-tree node. Jaeger in the loop: `collector-plugin/tests/jaeger.rs` and
//! `tests/real_peers.rs`.
//!
//! Without `$DEI_OTELCOL_BIN` the tests say loudly that they did not run; with `DEI_REQUIRE_INTEROP=1` (CI) they
//! fail.

mod common;

use common::chain::peers;

use common::chain::{assert_frontend_users_edge, element, free_port, frontend_to_users_trace};
use common::{CollectorProcess, Downstream, eventually, get_text};
use dei_propagator::Index;
use opentelemetry_otlp::{SpanExporter, WithExportConfig};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
use peers::{Peer, Sample, deploy_file, otelcol_bin, parse_prometheus, sum};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

const IN_FRONT: &str = "otelcol-in-front.yaml";
const BEHIND: &str = "otelcol-behind.yaml";

/// An otelcol process running configuration files of `docs/deploy/`, killed on drop.
struct Otelcol {
    _peer: Peer,
    grpc: u16,
    http: u16,
    /// The Collector's own metrics (Prometheus text), `host:port`.
    metrics: String,
}

impl Otelcol {
    /// Starts `bin --config file:<config>` with its listen addresses on free loopback ports and the
    /// given extra variables, and waits until both OTLP receivers accept connections.
    fn start(bin: &Path, config: &str, vars: &[(&str, String)]) -> Otelcol {
        let (grpc, http, metrics) = (free_port(), free_port(), free_port());
        let mut all = vec![
            ("OTELCOL_OTLP_GRPC", format!("127.0.0.1:{grpc}")),
            ("OTELCOL_OTLP_HTTP", format!("127.0.0.1:{http}")),
            ("OTELCOL_METRICS_HOST", "127.0.0.1".to_string()),
            ("OTELCOL_METRICS_PORT", metrics.to_string()),
        ];
        all.extend(vars.iter().cloned());
        let peer = Peer::start(
            "otelcol",
            bin,
            &[deploy_file(config)],
            &all,
            &[&format!("127.0.0.1:{grpc}"), &format!("127.0.0.1:{http}")],
        );
        Otelcol {
            _peer: peer,
            grpc,
            http,
            metrics: format!("127.0.0.1:{metrics}"),
        }
    }

    fn own_metrics(&self) -> Vec<Sample> {
        peers::scrape(&self.metrics)
    }
}

/// A service's tracer provider exporting over OTLP and recording what it made.
fn provider(service: &str, exporter: SpanExporter, made: &InMemorySpanExporter) -> SdkTracerProvider {
    SdkTracerProvider::builder()
        .with_resource(Resource::builder().with_service_name(service.to_string()).build())
        .with_simple_exporter(exporter)
        .with_simple_exporter(made.clone())
        .build()
}

fn grpc_exporter(endpoint: String) -> SpanExporter {
    SpanExporter::builder()
        .with_tonic()
        .with_endpoint(endpoint)
        .build()
        .unwrap()
}

fn http_exporter(endpoint: String) -> SpanExporter {
    SpanExporter::builder()
        .with_http()
        .with_endpoint(endpoint)
        .build()
        .unwrap()
}

type SpanId = (Vec<u8>, Vec<u8>);

/// Runs `traces` traces through a frontend and a users provider exporting with `exporter`, and returns
/// the (trace id, span id) of every span they made.
fn services(traces: usize, index: &Index, exporter: impl Fn() -> SpanExporter) -> BTreeSet<SpanId> {
    // The simple processors export each span as it ends; the in-memory copy is read before shutdown,
    // which clears it.
    let made = InMemorySpanExporter::default();
    let (f, u) = (
        provider("frontend", exporter(), &made),
        provider("users", exporter(), &made),
    );
    for _ in 0..traces {
        frontend_to_users_trace(&f, &u, index);
    }
    let ids = made
        .get_finished_spans()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s.span_context.trace_id().to_bytes().to_vec(),
                s.span_context.span_id().to_bytes().to_vec(),
            )
        })
        .collect();
    f.shutdown().unwrap();
    u.shutdown().unwrap();
    ids
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Exactly the spans made arrived downstream, with their DEI index; dei-collector saw the graph edge and
/// the tree node of `traces` calls.
fn assert_arrived(
    rt: &tokio::runtime::Runtime,
    downstream: &Downstream,
    want: &BTreeSet<SpanId>,
    c: &CollectorProcess,
    index: &Index,
    traces: usize,
) {
    assert_eq!(want.len(), 3 * traces, "the services made 3 spans a trace");
    let got = rt.block_on(downstream.wait_for_spans(want.len(), Duration::from_secs(30)));
    assert_eq!(
        got,
        want.len(),
        "every span arrives downstream; dei-collector: {}",
        c.get_json("/api/v1/stats")
    );
    let received = downstream.received.lock().unwrap();
    assert_eq!(
        &received.distinct(),
        want,
        "the same spans (trace and span ids) arrive downstream"
    );
    assert_eq!(received.span_ids().len(), want.len(), "no span arrives twice");
    let indexed: BTreeMap<String, usize> = received
        .requests
        .iter()
        .flat_map(|r| &r.resource_spans)
        .flat_map(|r| &r.scope_spans)
        .flat_map(|s| &s.spans)
        .flat_map(|s| &s.attributes)
        .filter(|a| a.key == "dei.index")
        .filter_map(|a| match a.value.as_ref()?.value.as_ref()? {
            Value::StringValue(v) => Some(v.clone()),
            _ => None,
        })
        .fold(BTreeMap::new(), |mut m, v| {
            *m.entry(v).or_default() += 1;
            m
        });
    assert_eq!(
        indexed,
        BTreeMap::from([(index.encode(), 2 * traces)]),
        "client and server spans keep their dei.index"
    );
    drop(received);
    let node_path = format!("/api/v1/tree/node?index={}", index.encode());
    assert!(
        eventually(Duration::from_secs(10), || {
            let n = c.get_json(&node_path);
            n["seen"] == traces && n["traces"] == traces && n["server_services"]["users"] == traces
        }),
        "tree node: {}",
        c.get_json(&node_path)
    );
    assert_eq!(c.get_json(&node_path)["signature"], "users.Users/GetUser");
    assert_frontend_users_edge(c, traces as u64);
}

/// The value of one of dei-collector's counters on its `/metrics`.
fn dei_counter(c: &CollectorProcess, name: &str) -> f64 {
    sum(&parse_prometheus(&get_text(c.api, "/metrics")), name, &[])
}

/// Both ends counted `n` spans: dei-collector received and forwarded them all (none dropped), and the
/// Collector's otlp receiver accepted them all (over `transport`, if given: `grpc` or `http`) and its
/// `exporter` sent them all (its own metrics; none refused or failed).
fn assert_counted(o: &Otelcol, transport: Option<&str>, exporter: &str, c: &CollectorProcess, n: usize) {
    let n = n as f64;
    let mut last: Vec<Sample> = Vec::new();
    let both = eventually(Duration::from_secs(30), || {
        last = o.own_metrics();
        sum(&last, "otelcol_exporter_sent_spans", &[("exporter", exporter)]) == n
            && dei_counter(c, "dei_collector_forward_spans_sent_total") == n
    });
    let accepted: Vec<(&str, &str)> = match transport {
        Some(t) => vec![("receiver", "otlp"), ("transport", t)],
        None => vec![("receiver", "otlp")],
    };
    let shown = || {
        last.iter()
            .filter(|s| s.name.starts_with("otelcol_receiver") || s.name.starts_with("otelcol_exporter"))
            .map(|s| format!("{} {:?} {}", s.name, s.labels, s.value))
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert!(both, "both ends sent {n} spans; the Collector's metrics:\n{}", shown());
    assert_eq!(
        sum(&last, "otelcol_receiver_accepted_spans", &accepted),
        n,
        "{}",
        shown()
    );
    assert_eq!(sum(&last, "otelcol_receiver_accepted_spans", &[]), n, "{}", shown());
    assert_eq!(sum(&last, "otelcol_receiver_refused_spans", &[]), 0.0, "{}", shown());
    assert_eq!(
        sum(&last, "otelcol_exporter_send_failed_spans", &[]),
        0.0,
        "{}",
        shown()
    );
    assert_eq!(dei_counter(c, "dei_collector_spans_received_total"), n);
    for dropped in ["overflow", "rejected", "shutdown"] {
        assert_eq!(
            dei_counter(c, &format!("dei_collector_forward_spans_dropped_{dropped}_total")),
            0.0
        );
    }
}

#[test]
fn in_front_services_to_otelcol_to_dei_collector() {
    let Some(bin) = otelcol_bin() else {
        return;
    };
    let rt = runtime();
    let downstream = rt.block_on(Downstream::start());
    let c = CollectorProcess::start(&["--forward-grpc", &downstream.endpoint()]);
    let o = Otelcol::start(&bin, IN_FRONT, &[("DEI_COLLECTOR_OTLP", c.grpc.to_string())]);
    let index = Index::root().child(element("users.Users/GetUser", "u1"));
    let mut made = {
        let _g = rt.enter();
        services(3, &index, || grpc_exporter(format!("http://127.0.0.1:{}", o.grpc)))
    };
    made.extend(services(2, &index, || {
        http_exporter(format!("http://127.0.0.1:{}/v1/traces", o.http))
    }));
    assert_arrived(&rt, &downstream, &made, &c, &index, 5);
    assert_counted(&o, None, "otlp/dei-collector", &c, made.len());
}

/// Services → dei-collector (over both protocols) → otelcol with `otelcol-behind.yaml`, reached through
/// dei-collector's `forward` flag → downstream.
fn behind(transport: &str, forward: impl FnOnce(&Otelcol) -> [String; 2]) {
    let Some(bin) = otelcol_bin() else {
        return;
    };
    let rt = runtime();
    let downstream = rt.block_on(Downstream::start());
    // The backend: a second dei-collector, which takes gzip-compressed OTLP as Jaeger does (the otlp
    // exporter compresses by default), passing every span on to the plain receiver.
    let backend = CollectorProcess::start(&["--forward-grpc", &downstream.endpoint()]);
    let o = Otelcol::start(&bin, BEHIND, &[("BACKEND_OTLP", backend.grpc.to_string())]);
    let [flag, endpoint] = forward(&o);
    let c = CollectorProcess::start(&[flag.as_str(), endpoint.as_str()]);
    let index = Index::root().child(element("users.Users/GetUser", "u2"));
    let mut made = {
        let _g = rt.enter();
        services(2, &index, || grpc_exporter(format!("http://{}", c.grpc)))
    };
    made.extend(services(2, &index, || {
        http_exporter(format!("http://{}/v1/traces", c.http))
    }));
    assert_arrived(&rt, &downstream, &made, &c, &index, 4);
    assert_counted(&o, Some(transport), "otlp/backend", &c, made.len());
    assert_eq!(
        dei_counter(&backend, "dei_collector_spans_received_total"),
        made.len() as f64
    );
}

#[test]
fn behind_dei_collector_forwarding_over_grpc() {
    behind("grpc", |o| {
        ["--forward-grpc".into(), format!("http://127.0.0.1:{}", o.grpc)]
    });
}

#[test]
fn behind_dei_collector_forwarding_over_http() {
    behind("http", |o| {
        [
            "--forward-http".into(),
            format!("http://127.0.0.1:{}/v1/traces", o.http),
        ]
    });
}

/// `otelcol print-initial-config` on `config` with `vars`, flattened to `a.b.c` → value lines.
fn resolved(bin: &Path, config: &str, vars: &[(&str, &str)]) -> BTreeMap<String, String> {
    resolved_all(bin, &[config], vars)
}

/// `otelcol print-config` (the configuration as resolved and validated, defaults filled in) on the merge
/// of `configs`, flattened.
fn resolved_all(bin: &Path, configs: &[&str], vars: &[(&str, &str)]) -> BTreeMap<String, String> {
    let mut cmd = Command::new(bin);
    for v in peers::VARIABLES {
        cmd.env_remove(v);
    }
    cmd.arg("print-config");
    for config in configs {
        cmd.arg("--config").arg(deploy_file(config));
    }
    let config = configs.join(" + ");
    let out = cmd.envs(vars.iter().copied()).output().expect("otelcol print-config");
    assert!(
        out.status.success(),
        "otelcol resolves {config}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    flatten(&String::from_utf8_lossy(&out.stdout))
}

/// Flattens the block YAML that `print-config` prints (maps; list items as `key[i]`).
fn flatten(yaml: &str) -> BTreeMap<String, String> {
    let mut path: Vec<(usize, String)> = Vec::new();
    let mut items: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeMap::new();
    for line in yaml.lines().filter(|l| !l.trim().is_empty()) {
        let mut indent = line.len() - line.trim_start().len();
        let mut rest = line.trim();
        while path.last().is_some_and(|(i, _)| *i >= indent) {
            path.pop();
        }
        if let Some(item) = rest.strip_prefix("- ") {
            let parent = path.iter().map(|(_, k)| k.as_str()).collect::<Vec<_>>().join(".");
            let n = items.entry(parent.clone()).or_default();
            path.push((indent, format!("[{n}]")));
            *n += 1;
            indent += 2;
            rest = item;
        }
        let key_path = |k: &str| {
            let mut p: Vec<&str> = path.iter().map(|(_, k)| k.as_str()).collect();
            p.push(k);
            p.join(".").replace(".[", "[")
        };
        match rest.split_once(':') {
            Some((k, v)) if !v.trim().is_empty() => {
                out.insert(key_path(k), v.trim().to_string());
            }
            Some((k, _)) => path.push((indent, k.to_string())),
            None => {
                let k = path.iter().map(|(_, k)| k.as_str()).collect::<Vec<_>>().join(".");
                path.pop();
                out.insert(k.replace(".[", "["), rest.to_string());
            }
        }
    }
    out
}

#[test]
fn configurations_resolve_to_documented_defaults_and_overrides() {
    let Some(bin) = otelcol_bin() else {
        return;
    };
    let common = |m: &BTreeMap<String, String>, grpc: &str, http: &str, metrics: &str| {
        assert_eq!(m["receivers.otlp.protocols.grpc.endpoint"], grpc, "{m:#?}");
        assert_eq!(m["receivers.otlp.protocols.http.endpoint"], http, "{m:#?}");
        assert_eq!(m["processors.batch.timeout"], "200ms", "{m:#?}");
        assert_eq!(m["service.pipelines.traces.receivers[0]"], "otlp", "{m:#?}");
        assert_eq!(m["service.pipelines.traces.processors[0]"], "batch", "{m:#?}");
        assert_eq!(
            m["service.telemetry.metrics.readers[0].pull.exporter.prometheus.port"], metrics,
            "{m:#?}"
        );
    };
    let front = resolved(&bin, IN_FRONT, &[]);
    common(&front, "0.0.0.0:4317", "0.0.0.0:4318", "8888");
    assert_eq!(front["exporters.otlp/dei-collector.endpoint"], "dei-collector:14317");
    assert_eq!(front["exporters.otlp/dei-collector.tls.insecure"], "true");
    assert_eq!(front["service.pipelines.traces.exporters[0]"], "otlp/dei-collector");
    let back = resolved(&bin, BEHIND, &[]);
    common(&back, "0.0.0.0:4317", "0.0.0.0:4318", "8888");
    assert_eq!(back["exporters.otlp/backend.endpoint"], "jaeger:4317");
    assert_eq!(back["exporters.otlp/backend.tls.insecure"], "true");
    assert_eq!(back["service.pipelines.traces.exporters[0]"], "otlp/backend");

    let set = [
        ("OTELCOL_OTLP_GRPC", "127.0.0.1:24317"),
        ("OTELCOL_OTLP_HTTP", "127.0.0.1:24318"),
        ("OTELCOL_METRICS_PORT", "28888"),
        ("DEI_COLLECTOR_OTLP", "dei-collector.internal:14317"),
        ("BACKEND_OTLP", "tempo:4317"),
    ];
    let front = resolved(&bin, IN_FRONT, &set);
    common(&front, "127.0.0.1:24317", "127.0.0.1:24318", "28888");
    assert_eq!(
        front["exporters.otlp/dei-collector.endpoint"],
        "dei-collector.internal:14317"
    );
    let back = resolved(&bin, BEHIND, &set);
    common(&back, "127.0.0.1:24317", "127.0.0.1:24318", "28888");
    assert_eq!(back["exporters.otlp/backend.endpoint"], "tempo:4317");

    // otelcol-spanmetrics.yaml merged into otelcol-in-front.yaml: a second traces pipeline on the same
    // receiver, the first unchanged.
    let both = resolved_all(
        &bin,
        &[IN_FRONT, "otelcol-spanmetrics.yaml"],
        &[("SPANMETRICS_PROMETHEUS", "127.0.0.1:28889")],
    );
    common(&both, "0.0.0.0:4317", "0.0.0.0:4318", "8888");
    assert_eq!(
        both["service.pipelines.traces.exporters[0]"], "otlp/dei-collector",
        "{both:#?}"
    );
    assert_eq!(
        both["service.pipelines.traces/spanmetrics.receivers[0]"], "otlp",
        "{both:#?}"
    );
    assert_eq!(
        both["service.pipelines.traces/spanmetrics.exporters[0]"], "spanmetrics",
        "{both:#?}"
    );
    assert_eq!(
        both["service.pipelines.metrics/spanmetrics.receivers[0]"], "spanmetrics",
        "{both:#?}"
    );
    assert_eq!(
        both["exporters.prometheus/spanmetrics.endpoint"], "127.0.0.1:28889",
        "{both:#?}"
    );
    assert_eq!(
        both["connectors.spanmetrics.metrics_flush_interval"], "15s",
        "{both:#?}"
    );
}

#[test]
fn the_guide_shows_the_files_as_they_are() {
    let guide = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/deploying-collector.md"))
        .expect("docs/deploying-collector.md");
    let mut names: Vec<String> = std::fs::read_dir(peers::deploy_dir())
        .expect("docs/deploy/")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".yaml"))
        .collect();
    names.sort();
    assert!(names.len() >= 5, "the deployment files: {names:?}");
    for name in names {
        let yaml = std::fs::read_to_string(peers::deploy_dir().join(&name)).expect("a deployment configuration");
        assert!(guide.contains(&format!("(deploy/{name})")), "the guide links {name}");
        assert!(
            guide.contains(&format!("```yaml\n{yaml}```")),
            "the guide shows {name} exactly as it is"
        );
    }
}

const BEHIND_AUTH: &str = "otelcol-behind-auth.yaml";

/// A throw-away CA and a server certificate it signed for `localhost` and 127.0.0.1, made with the
/// `openssl` command: (directory, CA file, server certificate, server key).
fn throwaway_ca() -> (tempfile::TempDir, String, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str| dir.path().join(name).to_string_lossy().into_owned();
    let run = |args: &[&str]| {
        let out = Command::new("openssl").args(args).output().expect("run openssl");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"];
    let (ca, ca_key, key, csr, cert, ext) = (
        path("ca.pem"),
        path("ca.key"),
        path("server.key"),
        path("server.csr"),
        path("server.pem"),
        path("san.ext"),
    );
    run(&[
        &["req", "-x509"][..],
        &ec,
        &[
            "-keyout",
            &ca_key,
            "-out",
            &ca,
            "-days",
            "2",
            "-subj",
            "/CN=dei test CA",
        ],
    ]
    .concat());
    run(&[
        &["req"][..],
        &ec,
        &["-keyout", &key, "-out", &csr, "-subj", "/CN=localhost"],
    ]
    .concat());
    std::fs::write(&ext, "subjectAltName=DNS:localhost,IP:127.0.0.1\n").unwrap();
    run(&[
        "x509",
        "-req",
        "-in",
        &csr,
        "-CA",
        &ca,
        "-CAkey",
        &ca_key,
        "-CAcreateserial",
        "-out",
        &cert,
        "-days",
        "2",
        "-extfile",
        &ext,
    ]);
    (dir, ca, cert, key)
}

/// Services → dei-collector, configured by a YAML file (`serve --config`, the token from `${env:…}`) →
/// TLS and a bearer token → otelcol with `otelcol-behind-auth.yaml` → downstream: everything arrives, and
/// both ends count it.
fn behind_auth(transport: &str) {
    let Some(bin) = otelcol_bin() else {
        return;
    };
    let rt = runtime();
    let downstream = rt.block_on(Downstream::start());
    let backend = CollectorProcess::start(&["--forward-grpc", &downstream.endpoint()]);
    let (dir, ca, cert, key) = throwaway_ca();
    let token = "t0ken-of-this-test";
    let o = Otelcol::start(
        &bin,
        BEHIND_AUTH,
        &[
            ("BACKEND_OTLP", backend.grpc.to_string()),
            ("OTELCOL_TLS_CERT", cert),
            ("OTELCOL_TLS_KEY", key),
            ("OTELCOL_TOKEN", token.to_string()),
        ],
    );
    let forward = match transport {
        "grpc" => format!("forward_grpc: https://localhost:{}\n", o.grpc),
        _ => format!("forward_http: https://localhost:{}/v1/traces\n", o.http),
    };
    let config = dir.path().join("dei-collector.yaml");
    std::fs::write(
        &config,
        format!(
            "{forward}forward_tls_ca_file: {ca}\nforward_header:\n  authorization: Bearer ${{env:DEI_TEST_TOKEN}}\n"
        ),
    )
    .unwrap();
    let c = CollectorProcess::start_with_env(&["--config", &config.to_string_lossy()], &[("DEI_TEST_TOKEN", token)]);
    let index = Index::root().child(element("users.Users/GetUser", "u3"));
    let made = {
        let _g = rt.enter();
        services(2, &index, || grpc_exporter(format!("http://{}", c.grpc)))
    };
    assert_arrived(&rt, &downstream, &made, &c, &index, 2);
    assert_counted(&o, Some(transport), "otlp/backend", &c, made.len());
}

#[test]
fn behind_tls_and_a_bearer_token_over_grpc() {
    behind_auth("grpc");
}

#[test]
fn behind_tls_and_a_bearer_token_over_http() {
    behind_auth("http");
}

/// Without the token, the authenticated Collector refuses every batch, and dei-collector counts the spans
/// as dropped (a permanent rejection), not as sent; with a certificate the CA did not sign, nothing is
/// sent either (retried, counted as retries).
#[test]
fn without_the_token_or_the_ca_nothing_counts_as_sent() {
    let Some(bin) = otelcol_bin() else {
        return;
    };
    let rt = runtime();
    let downstream = rt.block_on(Downstream::start());
    let (_dir, ca, cert, key) = throwaway_ca();
    let o = Otelcol::start(
        &bin,
        BEHIND_AUTH,
        &[
            (
                "BACKEND_OTLP",
                downstream.endpoint().trim_start_matches("http://").to_string(),
            ),
            ("OTELCOL_TLS_CERT", cert),
            ("OTELCOL_TLS_KEY", key),
            ("OTELCOL_TOKEN", "the-right-token".to_string()),
        ],
    );
    let endpoint = format!("https://localhost:{}", o.grpc);
    let no_token = CollectorProcess::start(&["--forward-grpc", &endpoint, "--forward-tls-ca-file", &ca]);
    let no_ca = CollectorProcess::start(&[
        "--forward-grpc",
        &endpoint,
        "--forward-header",
        "authorization=Bearer the-right-token",
    ]);
    let index = Index::root().child(element("users.Users/GetUser", "u4"));
    let made = {
        let _g = rt.enter();
        let mut made = services(1, &index, || grpc_exporter(format!("http://{}", no_token.grpc)));
        made.extend(services(1, &index, || grpc_exporter(format!("http://{}", no_ca.grpc))));
        made
    };
    assert_eq!(made.len(), 6);
    assert!(
        eventually(Duration::from_secs(30), || {
            dei_counter(&no_token, "dei_collector_forward_spans_dropped_rejected_total") == 3.0
        }),
        "refused for the missing token: {}",
        get_text(no_token.api, "/metrics")
    );
    assert!(
        eventually(Duration::from_secs(30), || dei_counter(
            &no_ca,
            "dei_collector_forward_retries_total"
        ) >= 1.0),
        "the unknown CA fails the handshake, which is retried: {}",
        get_text(no_ca.api, "/metrics")
    );
    for c in [&no_token, &no_ca] {
        assert_eq!(dei_counter(c, "dei_collector_forward_spans_sent_total"), 0.0);
    }
    assert_eq!(
        rt.block_on(downstream.wait_for_spans(1, Duration::from_secs(2))),
        0,
        "nothing got through"
    );
}

/// The Collector's otlp exporter (`otelcol-in-front.yaml`: its default retry and queue) in front of a
/// dei-collector whose forwarding queue is full: dei-collector refuses with `UNAVAILABLE`, the Collector
/// retries, and once the downstream is back the span arrives exactly once, with nothing counted as failed on
/// either side.
#[test]
fn the_collectors_exporter_retries_refused_batches_until_the_queue_drains() {
    use opentelemetry::trace::{Tracer, TracerProvider as _};

    let Some(bin) = otelcol_bin() else {
        return;
    };
    let rt = runtime();
    // dei-collector with room for 10 spans, all held by its one worker while the downstream is down
    let (mut downstream, running) = rt.block_on(common::full_collector());
    assert_eq!(running.collector.queued_spans(), 10);
    let o = Otelcol::start(&bin, IN_FRONT, &[("DEI_COLLECTOR_OTLP", running.grpc_addr.to_string())]);
    let provider = {
        let _g = rt.enter();
        SdkTracerProvider::builder()
            .with_resource(Resource::builder().with_service_name("collector-retry").build())
            .with_simple_exporter(grpc_exporter(format!("http://127.0.0.1:{}", o.grpc)))
            .build()
    };
    provider
        .tracer("t")
        .in_span("refused-then-retried-by-the-collector", |_| {});
    provider.shutdown().unwrap();
    assert!(
        eventually(Duration::from_secs(30), || running
            .collector
            .counters()
            .snapshot()
            .rejected_queue_full
            >= 1),
        "the Collector's exporter was refused while the queue was full"
    );
    let c = running.collector.counters().snapshot();
    assert_eq!(
        (c.requests_accepted, c.spans_received),
        (1, 10),
        "the refused batch was not taken: {c:?}"
    );
    rt.block_on(downstream.restart());
    assert_eq!(rt.block_on(downstream.wait_for_spans(11, Duration::from_secs(60))), 11);
    let names: Vec<String> = downstream
        .received
        .lock()
        .unwrap()
        .requests
        .iter()
        .flat_map(|r| &r.resource_spans)
        .flat_map(|r| &r.scope_spans)
        .flat_map(|s| &s.spans)
        .map(|s| s.name.clone())
        .collect();
    assert_eq!(
        names
            .iter()
            .filter(|n| *n == "refused-then-retried-by-the-collector")
            .count(),
        1,
        "delivered once: {names:?}"
    );
    let mut last = Vec::new();
    assert!(
        eventually(Duration::from_secs(10), || {
            last = o.own_metrics();
            sum(
                &last,
                "otelcol_exporter_sent_spans",
                &[("exporter", "otlp/dei-collector")],
            ) == 1.0
        }),
        "the Collector counts the span as sent once dei-collector took it"
    );
    assert_eq!(
        sum(&last, "otelcol_exporter_send_failed_spans", &[]),
        0.0,
        "nothing failed for good"
    );
    let c = running.collector.counters().snapshot();
    assert_eq!(
        (c.requests_accepted, c.spans_received, c.forward_spans_sent),
        (2, 11, 11),
        "{c:?}"
    );
    assert!(c.spans_refused >= 1, "{c:?}");
    rt.block_on(running.shutdown());
}
