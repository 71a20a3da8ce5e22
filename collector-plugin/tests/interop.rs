//! Interoperability with real third-party parts:
//! - Rust exporters (gRPC and HTTP) → rotel → dei-collector → downstream: the same spans arrive and the
//!   graph and tree are built;
//! - the Python OpenTelemetry SDK exports spans with DEI attributes (including a stream's preliminary →
//!   final mapping) straight to dei-collector.
//!
//! These need `rotel-agent` (PyPI `rotel`, needs libpython3.11) and the Python SDK
//! (`opentelemetry-sdk`, `opentelemetry-exporter-otlp-proto-http`). With `DEI_REQUIRE_INTEROP=1` (CI) a
//! missing tool fails the test; otherwise the test says loudly that it did not run.

mod common;

use common::chain::{assert_frontend_users_edge, element, free_port, frontend_to_users_trace, python, unavailable};
use common::{CollectorProcess, Downstream, eventually};
use dei_propagator::Index;
use opentelemetry_otlp::{SpanExporter, WithExportConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

fn rotel_agent() -> Option<PathBuf> {
    if let Ok(p) = std::env::var("ROTEL_AGENT") {
        return Some(PathBuf::from(p));
    }
    let out = Command::new(python())
        .args([
            "-c",
            "import rotel, os; print(os.path.join(os.path.dirname(rotel.__file__), 'rotel-agent'))",
        ])
        .output()
        .ok()?;
    let p = PathBuf::from(String::from_utf8(out.stdout).ok()?.trim());
    let ok = Command::new(&p)
        .arg("version")
        .output()
        .is_ok_and(|o| o.status.success());
    ok.then_some(p)
}

struct Killed(Child);
impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn provider(service: &str, exporter: SpanExporter) -> SdkTracerProvider {
    SdkTracerProvider::builder()
        .with_resource(Resource::builder().with_service_name(service.to_string()).build())
        .with_simple_exporter(exporter)
        .build()
}

#[test]
fn rust_exporters_through_rotel_and_dei_collector() {
    let Some(rotel) = rotel_agent() else {
        return unavailable("rotel-agent");
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let downstream = rt.block_on(Downstream::start());
    let c = CollectorProcess::start(&["--forward-grpc", &downstream.endpoint()]);
    let (rg, rh) = (free_port(), free_port());
    let _rotel = Killed(
        Command::new(&rotel)
            .args([
                "start",
                "--otlp-grpc-endpoint",
                &format!("127.0.0.1:{rg}"),
                "--otlp-http-endpoint",
                &format!("127.0.0.1:{rh}"),
            ])
            .args([
                "--exporter",
                "otlp",
                "--otlp-exporter-endpoint",
                &format!("http://{}", c.grpc),
                "--otlp-exporter-protocol",
                "grpc",
            ])
            .args(["--pid-file", &format!("/tmp/rotel-test-{rg}.pid")])
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start rotel-agent"),
    );
    assert!(
        eventually(Duration::from_secs(20), || std::net::TcpStream::connect((
            "127.0.0.1",
            rg
        ))
        .is_ok()
            && std::net::TcpStream::connect(("127.0.0.1", rh)).is_ok()),
        "rotel listens"
    );
    let index = Index::root().child(element("users.Users/GetUser", "u1"));
    {
        let _g = rt.enter();
        let grpc = |()| {
            SpanExporter::builder()
                .with_tonic()
                .with_endpoint(format!("http://127.0.0.1:{rg}"))
                .build()
                .unwrap()
        };
        let (f, u) = (provider("frontend", grpc(())), provider("users", grpc(())));
        for _ in 0..3 {
            frontend_to_users_trace(&f, &u, &index);
        }
        f.shutdown().unwrap();
        u.shutdown().unwrap();
    }
    let http = |()| {
        SpanExporter::builder()
            .with_http()
            .with_endpoint(format!("http://127.0.0.1:{rh}/v1/traces"))
            .build()
            .unwrap()
    };
    let (f, u) = (provider("frontend", http(())), provider("users", http(())));
    for _ in 0..2 {
        frontend_to_users_trace(&f, &u, &index);
    }
    f.shutdown().unwrap();
    u.shutdown().unwrap();
    let got = rt.block_on(downstream.wait_for_spans(15, Duration::from_secs(30)));
    assert_eq!(got, 15, "all spans pass rotel and dei-collector");
    assert!(eventually(Duration::from_secs(5), || {
        let n = c.get_json(&format!("/api/v1/tree/node?index={}", index.encode()));
        n["seen"] == 5 && n["traces"] == 5 && n["server_services"]["users"] == 5
    }));
    assert_frontend_users_edge(&c, 5);
}

const PY: &str = r#"
import sys, time
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

endpoint, stream_prelim, msg1_prelim, msg1_final, nested_under_prelim = sys.argv[1:6]

def provider(name):
    p = TracerProvider(resource=Resource.create({"service.name": name}))
    p.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
    return p

front, back, store = provider("py-front"), provider("py-back"), provider("py-store")
ft, bt, st = front.get_tracer("t"), back.get_tracer("t"), store.get_tracer("t")
with ft.start_as_current_span("GET /", kind=trace.SpanKind.SERVER):
    with ft.start_as_current_span("b.B/Echo", kind=trace.SpanKind.CLIENT, attributes={
        "dei.index": stream_prelim, "dei.signature": "b.B/Echo", "dei.preliminary": True,
        "dei.stack": ["src/front.py:10:5", "src/main.py:3:1"], "dei.instantiation": "dei",
    }) as stream:
        with bt.start_as_current_span("b.B/Echo", kind=trace.SpanKind.SERVER, attributes={
            "dei.index": stream_prelim, "dei.signature": "b.B/Echo", "dei.preliminary": True,
        }):
            with bt.start_as_current_span("c.C/Store", kind=trace.SpanKind.CLIENT, attributes={
                "dei.index": nested_under_prelim, "dei.signature": "c.C/Store",
                "dei.stack": "src/back.py:20:9\nsrc/back.py:5:1", "dei.count": 1,
            }):
                with st.start_as_current_span("c.C/Store", kind=trace.SpanKind.SERVER, attributes={
                    "dei.index": nested_under_prelim, "dei.signature": "c.C/Store", "dei.fault": "l250",
                }):
                    time.sleep(0.01)
        stream.add_event("dei.stream.message", {"dei.preliminary_index": msg1_prelim, "dei.index": msg1_final})
for p in (front, back, store):
    p.shutdown()
print("ok")
"#;

#[test]
fn python_sdk_exports_dei_spans() {
    let has_sdk = Command::new(python())
        .args(["-c", "import opentelemetry.sdk, opentelemetry.exporter.otlp.proto.http"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_sdk {
        return unavailable("the Python OpenTelemetry SDK with the OTLP/HTTP exporter");
    }
    let c = CollectorProcess::start(&[]);
    let prelim = Index::root().child(element("b.B/Echo", "").preliminary());
    let msg1 = prelim.stream_message(1);
    let final1 = Index::root().child(element("b.B/Echo", "Hello"));
    let nested = msg1.child(element("c.C/Store", "Hello"));
    let out = Command::new(python())
        .args(["-c", PY, &format!("http://{}/v1/traces", c.http)])
        .args([prelim.encode(), msg1.encode(), final1.encode(), nested.encode()])
        .output()
        .unwrap();
    assert!(out.status.success(), "python: {}", String::from_utf8_lossy(&out.stderr));
    let rewritten = nested.rewrite_prefix(&msg1, &final1).unwrap();
    assert!(
        eventually(Duration::from_secs(10), || c
            .get_json(&format!("/api/v1/tree/node?index={}", rewritten.encode()))["seen"]
            == 1),
        "the nested call is recorded under the stream message's final index: {}",
        c.get_json("/api/v1/tree?depth=5")
    );
    let n = c.get_json(&format!("/api/v1/tree/node?index={}", rewritten.encode()));
    assert_eq!(n["signature"], "c.C/Store");
    assert_eq!(n["client_services"]["py-back"], 1);
    assert_eq!(n["server_services"]["py-store"], 1);
    assert_eq!(n["faults"]["l250"], 1);
    assert_eq!(n["stack"], serde_json::json!(["src/back.py:20:9", "src/back.py:5:1"]));
    let s = c.get_json(&format!("/api/v1/tree/node?index={}", prelim.encode()));
    assert_eq!(s["preliminary"], true);
    assert_eq!(s["stack"], serde_json::json!(["src/front.py:10:5", "src/main.py:3:1"]));
    assert_eq!(
        c.get_json(&format!("/api/v1/tree/node?index={}", final1.encode()))["seen"],
        1
    );
    let stats = c.get_json("/api/v1/stats");
    assert_eq!(stats["counters"]["preliminary_rewritten"], 2);
    assert_eq!(stats["counters"]["attributes_rejected"], 0);
}
