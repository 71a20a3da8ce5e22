//! Hostile input at a trust boundary (issue #24): headers from clients that are not part of the system, sent
//! by raw clients (no DEI layer) to a real tonic server and a real axum server on loopback, each of which
//! serves the request by calling B (Middle), which calls C ten times.
//!
//! With the default configuration no fault is injected, no request is delayed by a plan, nothing panics and
//! every rejection is counted; with faults enabled the latency cap holds. Then: the edge mode, a middle
//! service that relays without applying, the depth limit across three hops, the fault mapping of
//! docs/wire-format.md against real clients, and `DEI_ACCEPT_FAULTS`.
//!
//! The counters are process-wide: the tests of this file run one at a time (`SERIAL`).

mod common;

use axum::Router;
use axum::routing::get;
use common::*;
use dei_instrumentation::config::Incoming;
use dei_instrumentation::{DeiConfig, DeiHttpServerLayer, DeiServerLayer, Faults, root_context};
use dei_propagator::rejection::{self, Event};
use dei_propagator::{DeiContextExt, Element, ElementDigest, Fault, FaultPlan, Index};
use http::HeaderValue;
use opentelemetry::baggage::BaggageExt;
use opentelemetry::context::FutureExt as _;
use opentelemetry::trace::TraceId;
use opentelemetry_sdk::trace::SpanData;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Once};
use std::time::Duration;
use tonic::transport::{Endpoint, Server};
use tonic::{Request, Response, Status};
use tower::ServiceBuilder;

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
static PANICS: AtomicUsize = AtomicUsize::new(0);
/// Trace ids handed to raw requests (each request is its own trace).
static NEXT_TRACE: AtomicU64 = AtomicU64::new(0x2400);

/// Counts every panic in the process (then reports it as usual).
fn count_panics() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            PANICS.fetch_add(1, Ordering::SeqCst);
            default(info);
        }));
    });
}

/// A service at the edge: serves a request by calling B (Middle) once, and answers
/// `served index|baggage user|B's answer`.
#[derive(Clone)]
struct Hop {
    middle: pb::middle_client::MiddleClient<DeiChannel>,
}

impl Hop {
    async fn new(sys: &System, config: &DeiConfig) -> Hop {
        Hop {
            middle: pb::middle_client::MiddleClient::new(channel(sys.middle, config).await),
        }
    }

    async fn serve(&self) -> String {
        let cx = opentelemetry::Context::current();
        let served = cx
            .dei_scope()
            .map(|s| s.prefix().encode())
            .unwrap_or_else(|| "none".into());
        let user = cx.baggage().get("user").map(|v| v.to_string()).unwrap_or_default();
        let middle = match self.middle.clone().work(msg("hop")).await {
            Ok(reply) => reply.into_inner().text,
            Err(status) => format!("hop:{:?}", status.code()),
        };
        format!("{served}|{user}|{middle}")
    }
}

#[tonic::async_trait]
impl pb::front_server::Front for Hop {
    async fn run(&self, _request: Request<pb::Msg>) -> Result<Response<pb::Msg>, Status> {
        Ok(Response::new(msg(&self.serve().await)))
    }
}

/// The hop behind a tonic server with this layer.
async fn serve_hop_grpc(hop: Hop, layer: DeiServerLayer) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let router = Server::builder()
        .layer(layer)
        .add_service(pb::front_server::FrontServer::new(hop));
    tokio::spawn(async move {
        router
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener))
            .await
    });
    addr
}

/// The hop behind an axum server with this layer, at `GET /run`.
async fn serve_hop_http(hop: Hop, layer: DeiHttpServerLayer) -> SocketAddr {
    let app = Router::new()
        .route(
            "/run",
            get(move || {
                let hop = hop.clone();
                async move { hop.serve().await }
            }),
        )
        .layer(layer);
    serve_http(app).await
}

/// Headers as a raw client sends them: repeated names kept, any bytes a header value may hold.
type Headers = Vec<(&'static str, HeaderValue)>;

fn header(name: &'static str, value: impl AsRef<[u8]>) -> (&'static str, HeaderValue) {
    (name, HeaderValue::from_bytes(value.as_ref()).expect("a header value"))
}

/// A client without DEI layers, for either server.
#[derive(Clone)]
enum Raw {
    Grpc {
        headers: Arc<Mutex<Headers>>,
        channel: tonic::transport::Channel,
        addr: SocketAddr,
    },
    Http(reqwest::Client, String),
}

impl Raw {
    async fn grpc(addr: SocketAddr) -> Raw {
        let channel = Endpoint::from_shared(format!("http://{addr}"))
            .expect("endpoint")
            .connect()
            .await
            .expect("connect");
        Raw::Grpc {
            headers: Arc::default(),
            channel,
            addr,
        }
    }

    fn http(addr: SocketAddr) -> Raw {
        Raw::Http(reqwest::Client::new(), format!("http://{addr}/run"))
    }

    /// Sends one request in trace `trace` with these headers; the hop's answer, or why there was none.
    async fn send(&self, trace: TraceId, headers: &Headers) -> Result<String, String> {
        let mut all = headers.clone();
        all.push(header("traceparent", format!("00-{trace}-00f067aa0ba902b7-01")));
        match self {
            Raw::Grpc { headers, channel, .. } => {
                *headers.lock().expect("headers") = all;
                let shared = headers.clone();
                let service = ServiceBuilder::new()
                    .map_request(move |mut request: http::Request<tonic::body::Body>| {
                        for (name, value) in shared.lock().expect("headers").iter() {
                            request.headers_mut().append(*name, value.clone());
                        }
                        request
                    })
                    .service(channel.clone());
                let mut client = pb::front_client::FrontClient::new(service);
                client
                    .run(msg("raw"))
                    .await
                    .map(|r| r.into_inner().text)
                    .map_err(|s| format!("{s:?}"))
            }
            Raw::Http(client, url) => {
                let mut request = client.get(url);
                for (name, value) in all {
                    request = request.header(name, value);
                }
                let response = request.send().await.map_err(|e| e.to_string())?;
                if !response.status().is_success() {
                    return Err(format!("status {}", response.status()));
                }
                response.text().await.map_err(|e| e.to_string())
            }
        }
    }

    fn name(&self) -> String {
        match self {
            Raw::Grpc { addr, .. } => format!("tonic {addr}"),
            Raw::Http(_, url) => format!("axum {url}"),
        }
    }
}

fn next_trace() -> TraceId {
    TraceId::from(u128::from(NEXT_TRACE.fetch_add(1, Ordering::Relaxed)) << 64 | 0x24)
}

/// Spans of one request through a hop: the hop's server and client spans, B's server span and its eleven client
/// spans (ten gRPC calls, one HTTP call), and C's eleven server spans.
const SPANS_PER_REQUEST: usize = 25;
/// The calls of one request through a hop: the hop's and B's eleven.
const CALLS_PER_REQUEST: usize = 12;

/// The indexes of a request's calls (the client spans), and the hop's server span index.
fn calls(spans: &[SpanData]) -> (BTreeSet<String>, Option<String>) {
    let calls = spans
        .iter()
        .filter(|s| is_client(s))
        .filter_map(|s| attr(s, "dei.index"));
    let hop = spans
        .iter()
        .find(|s| !is_client(s) && s.parent_span_id.to_string() == "00f067aa0ba902b7")
        .and_then(|s| attr(s, "dei.index"));
    (calls.collect(), hop)
}

/// B's answer is all `ok`: no call failed.
fn all_ok(answer: &str) -> bool {
    let middle = answer.rsplit('|').next().unwrap_or_default();
    !middle.is_empty() && middle.split(' ').all(|outcome| outcome.ends_with(":ok"))
}

fn sixty_four_deep(depth: usize) -> String {
    Index::from_elements(
        (0..depth)
            .map(|i| Element::new(ElementDigest([i as u8; 8]), 1))
            .collect(),
    )
    .encode()
}

/// What a hostile request sent, for the oracle.
#[derive(Debug, Default)]
struct Sent {
    headers: Headers,
    /// Values sent as `dei` (header fields and baggage entries, as written).
    indexes: Vec<String>,
    /// A `dei-faults` header field or baggage entry was sent.
    plan: bool,
    /// `baggage` fields that are not visible ASCII: unreadable as a whole, each counted as one baggage
    /// rejection (their entries are not in `indexes` or `plan`).
    unreadable_baggage: u64,
}

/// A random hostile request: up to two `dei` fields, up to two `dei-faults` fields and up to two `baggage`
/// fields, from values valid, malformed, oversized, duplicated, percent-encoded, with properties, beyond the
/// baggage limits, not ASCII, and plans naming the calls this request will make (every fault kind, latency
/// far beyond any cap).
fn hostile(rng: &mut StdRng, prefix: &str, targets: &[String]) -> Sent {
    let mut sent = Sent::default();
    let target = |rng: &mut StdRng| targets[rng.random_range(0..targets.len())].clone();
    let index_value = |rng: &mut StdRng| -> Vec<u8> {
        match rng.random_range(0..12) {
            0 | 1 => prefix.as_bytes().to_vec(),
            2 => sixty_four_deep(64).into_bytes(),
            3 => sixty_four_deep(65).into_bytes(),
            4 => b"1".to_vec(),
            5 => format!("{prefix}=x").into_bytes(),
            6 => prefix.replace('.', "%2E").into_bytes(),
            7 => {
                let mut v = prefix.as_bytes().to_vec();
                let at = rng.random_range(0..v.len());
                v[at] = rng.random_range(0x21..0x7f);
                v
            }
            8 => (0..rng.random_range(0..40))
                .map(|_| rng.random_range(0x20..0x7f))
                .collect(),
            9 => vec![0xff, 0xfe, b'1'],
            10 => target(rng).into_bytes(),
            _ => "1.AAAAAAAAAAA1".repeat(rng.random_range(1..600)).into_bytes(),
        }
    };
    let plan_value = |rng: &mut StdRng| -> Vec<u8> {
        let fault = |rng: &mut StdRng| match rng.random_range(0..6) {
            0 => "l999999".to_string(),
            1 => format!("l{}", rng.random_range(1..999_999)),
            2 => format!("g{}", rng.random_range(1..=16)),
            3 => format!("h{}", rng.random_range(200..=599)),
            4 => "c".to_string(),
            _ => ["g0", "h100", "g17", "l1000000", "x"][rng.random_range(0..5)].to_string(),
        };
        match rng.random_range(0..6) {
            0..=2 => {
                let entries: Vec<String> = (0..rng.random_range(1..12))
                    .map(|_| format!("{}:{}", target(rng), fault(rng)))
                    .collect();
                format!("1*{}", entries.join("*")).into_bytes()
            }
            3 => format!("1*{}:l999999", target(rng)).replace('*', "%2A").into_bytes(),
            4 => (0..rng.random_range(1..60))
                .map(|_| rng.random_range(0x20..0x7f))
                .collect(),
            _ => vec![b'1', b'*', 0x80, b':', b'c'],
        }
    };
    for _ in 0..rng.random_range(0..3) {
        let v = index_value(rng);
        sent.indexes.push(String::from_utf8_lossy(&v).into_owned());
        sent.headers.push(header("dei", v));
    }
    for _ in 0..rng.random_range(0..3) {
        sent.plan = true;
        sent.headers.push(header("dei-faults", plan_value(rng)));
    }
    for _ in 0..rng.random_range(0..3) {
        let mut members: Vec<Vec<u8>> = Vec::new();
        let (indexes_before, plan_before) = (sent.indexes.len(), sent.plan);
        for _ in 0..rng.random_range(0..4) {
            let member: Vec<u8> = match rng.random_range(0..10) {
                0 | 1 => {
                    let v = index_value(rng);
                    sent.indexes.push(String::from_utf8_lossy(&v).trim().to_string());
                    [b"dei=".as_slice(), &v].concat()
                }
                2 => {
                    let v = index_value(rng);
                    sent.indexes.push(String::from_utf8_lossy(&v).trim().to_string());
                    [b" dei = ".as_slice(), &v, b";p=1"].concat()
                }
                3 | 4 => {
                    sent.plan = true;
                    [b"dei-faults=".as_slice(), &plan_value(rng)].concat()
                }
                5 => b"o=1,".repeat(rng.random_range(1..70)),
                6 => b"a=%FF%FE".to_vec(),
                7 => format!("pad={}", "x".repeat(rng.random_range(1..9000))).into_bytes(),
                8 => b"user=alice;ttl=60".to_vec(),
                _ => {
                    sent.indexes.push(String::new());
                    b"dei;p=1".to_vec()
                }
            };
            members.push(member);
        }
        let field = members.join(b",".as_slice());
        if !field.iter().all(|b| (0x20..0x7f).contains(b) || *b == b'\t') {
            sent.indexes.truncate(indexes_before);
            sent.plan = plan_before;
            sent.unreadable_baggage += 1;
        }
        sent.headers.push(header("baggage", field));
    }
    sent
}

/// Rejection and event counters, for before/after comparisons.
fn counters() -> Vec<u64> {
    rejection::snapshot().into_iter().map(|(_, n)| n).collect()
}

fn grew(before: &[u64], after: &[u64], name: &str) -> u64 {
    let at = rejection::snapshot()
        .iter()
        .position(|(n, _)| *n == name)
        .unwrap_or_else(|| panic!("counter {name}"));
    after[at] - before[at]
}

/// Learns the indexes of the calls a request makes through `raw` when served under `dei` (none: a root).
async fn learn(raw: &Raw, dei: Option<&str>) -> (BTreeSet<String>, String) {
    let trace = next_trace();
    let headers: Headers = dei.map(|d| header("dei", d)).into_iter().collect();
    let answer = raw.send(trace, &headers).await.expect("a clean request is served");
    assert!(all_ok(&answer), "{answer}");
    let spans = spans_of(trace, SPANS_PER_REQUEST).await;
    let (calls, hop) = calls(&spans);
    assert_eq!(
        calls.len(),
        CALLS_PER_REQUEST,
        "the hop's call and B's eleven: {calls:?}"
    );
    (calls, hop.unwrap_or_default())
}

/// Hostile requests to a hop whose services all run with the default configuration.
async fn fuzz_default(raw: &Raw, seed: u64, rounds: usize) {
    let prefix = "1.AQEBAQEBAQE1";
    let (mut targets, _) = learn(raw, Some(prefix)).await;
    targets.extend(learn(raw, None).await.0);
    let targets: Vec<String> = targets.into_iter().collect();
    let mut rng = StdRng::seed_from_u64(seed);
    for round in 0..rounds {
        let sent = hostile(&mut rng, prefix, &targets);
        let what = format!("{} round {round}: {:?}", raw.name(), sent.headers);
        let before = counters();
        let trace = next_trace();
        let answer = raw.send(trace, &sent.headers).await;
        let answer = answer.unwrap_or_else(|e| panic!("{what}: not served: {e}"));
        assert!(all_ok(&answer), "{what}: a call failed: {answer}");
        let spans = spans_of(trace, SPANS_PER_REQUEST).await;
        assert_eq!(spans.len(), SPANS_PER_REQUEST, "{what}");
        let after = counters();
        // No fault injected, no plan relayed, none applied, no latency asked for was waited.
        for span in &spans {
            assert_eq!(attr(span, "dei.fault"), None, "{what}");
            if !is_client(span) && span.parent_span_id.to_string() != "00f067aa0ba902b7" {
                assert_eq!(attr(span, "dei.fault.plan"), None, "{what}: a plan went on");
            }
        }
        assert_eq!(grew(&before, &after, "fault_not_applied"), 0, "{what}");
        assert_eq!(grew(&before, &after, "latency_clamped"), 0, "{what}");
        // Every value sent was either taken or counted.
        let (_, served) = calls(&spans);
        let served = served.unwrap_or_default();
        let index_rejections = grew(&before, &after, "header") + grew(&before, &after, "baggage");
        assert!(
            grew(&before, &after, "baggage") >= sent.unreadable_baggage,
            "{what}: unreadable baggage counted"
        );
        if sent.indexes.contains(&served) {
            // taken (a later value may still have been rejected)
        } else {
            assert_eq!(served, "1", "{what}: served under a value never sent");
            if !sent.indexes.is_empty() {
                assert!(index_rejections > 0, "{what}: an index was dropped without a count");
            }
        }
        if sent.plan {
            let plan_counted = grew(&before, &after, "fault_plan") + grew(&before, &after, "fault_plan_dropped");
            assert!(plan_counted > 0, "{what}: a fault plan was dropped without a count");
        } else {
            assert_eq!(grew(&before, &after, "fault_plan_dropped"), 0, "{what}");
        }
    }
}

fn default_config() -> DeiConfig {
    DeiConfig::builder()
        .methods_from_descriptor_set(DESCRIPTORS)
        .expect("descriptors")
        .build()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_headers_under_the_default_configuration_change_nothing() {
    let _serial = SERIAL.lock().await;
    count_panics();
    let panics = PANICS.load(Ordering::SeqCst);
    let config = default_config();
    assert_eq!(config.faults(), Faults::Refuse, "fault plans are off by default");
    assert_eq!(config.max_latency(), Duration::from_secs(30));
    let sys = System::start_with(config.clone()).await;
    let grpc = serve_hop_grpc(Hop::new(&sys, &config).await, DeiServerLayer::new(config.clone())).await;
    let http = serve_hop_http(Hop::new(&sys, &config).await, DeiHttpServerLayer::new(config.clone())).await;

    // A plan naming every call this request makes, most of them with a latency of 17 minutes: the request is
    // served at once, the plan dropped and counted, nothing relayed.
    for raw in [Raw::grpc(grpc).await, Raw::http(http)] {
        let (targets, _) = learn(&raw, None).await;
        let plan = targets
            .iter()
            .map(|t| format!("{t}:l999999"))
            .collect::<Vec<_>>()
            .join("*");
        let before = rejection::event_total(Event::FaultPlanDropped);
        let trace = next_trace();
        let answer = raw
            .send(trace, &vec![header("dei-faults", format!("1*{plan}"))])
            .await
            .expect("served");
        assert!(all_ok(&answer), "{answer}");
        let spans = spans_of(trace, SPANS_PER_REQUEST).await;
        assert!(spans.iter().all(|s| attr(s, "dei.fault").is_none()));
        let (calls, _) = calls(&spans);
        assert_eq!(calls, targets, "the plan named exactly these calls");
        assert_eq!(rejection::event_total(Event::FaultPlanDropped), before + 1);
        let hop_server = spans
            .iter()
            .find(|s| s.parent_span_id.to_string() == "00f067aa0ba902b7");
        assert_eq!(
            hop_server.and_then(|s| attr(s, "dei.fault.plan.dropped")).as_deref(),
            Some("true")
        );
    }
    fuzz_default(&Raw::grpc(grpc).await, 24, 60).await;
    fuzz_default(&Raw::http(http), 25, 60).await;
    assert_eq!(PANICS.load(Ordering::SeqCst), panics, "nothing panicked");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_faults_enabled_the_latency_cap_holds() {
    let _serial = SERIAL.lock().await;
    count_panics();
    let panics = PANICS.load(Ordering::SeqCst);
    let cap = Duration::from_millis(5);
    let config = DeiConfig::builder()
        .faults(Faults::Accept)
        .max_latency(cap)
        .methods_from_descriptor_set(DESCRIPTORS)
        .expect("descriptors")
        .build();
    let sys = System::start_with(config.clone()).await;
    let grpc = serve_hop_grpc(Hop::new(&sys, &config).await, DeiServerLayer::new(config.clone())).await;
    let http = serve_hop_http(Hop::new(&sys, &config).await, DeiHttpServerLayer::new(config.clone())).await;
    let mut rng = StdRng::seed_from_u64(26);
    for raw in [Raw::grpc(grpc).await, Raw::http(http)] {
        let (targets, _) = learn(&raw, None).await;
        // Every call asks for the longest latency the wire allows: each waits the cap, each clamp is counted.
        let plan = targets
            .iter()
            .map(|t| format!("{t}:l999999"))
            .collect::<Vec<_>>()
            .join("*");
        let before = rejection::event_total(Event::LatencyClamped);
        let trace = next_trace();
        let answer = raw
            .send(trace, &vec![header("dei-faults", format!("1*{plan}"))])
            .await
            .expect("served");
        assert!(all_ok(&answer), "{answer}");
        let spans = spans_of(trace, SPANS_PER_REQUEST).await;
        let faults: Vec<String> = spans.iter().filter_map(|s| attr(s, "dei.fault")).collect();
        assert_eq!(
            faults,
            vec!["l5".to_string(); CALLS_PER_REQUEST],
            "every call delayed by the cap, no more"
        );
        assert_eq!(
            rejection::event_total(Event::LatencyClamped),
            before + CALLS_PER_REQUEST as u64
        );
        // Random latencies, some within the cap: what is applied never exceeds it.
        let targets: Vec<String> = targets.into_iter().collect();
        for _ in 0..10 {
            let entries: Vec<String> = (0..rng.random_range(1..6))
                .map(|_| {
                    let ms = [1, 4, 5, 6, 250, 999_999][rng.random_range(0..6)];
                    format!("{}:l{ms}", targets[rng.random_range(0..targets.len())])
                })
                .collect();
            let trace = next_trace();
            let answer = raw
                .send(trace, &vec![header("dei-faults", format!("1*{}", entries.join("*")))])
                .await
                .expect("served");
            assert!(all_ok(&answer), "{answer}");
            for span in spans_of(trace, SPANS_PER_REQUEST).await {
                if let Some(fault) = attr(&span, "dei.fault") {
                    let ms: u64 = fault
                        .strip_prefix('l')
                        .and_then(|ms| ms.parse().ok())
                        .expect("a latency");
                    assert!(ms <= 5, "{fault} exceeds the cap");
                }
            }
        }
    }
    assert_eq!(PANICS.load(Ordering::SeqCst), panics, "nothing panicked");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edge_that_restarts_ignores_what_comes_in_and_still_indexes_its_calls() {
    let _serial = SERIAL.lock().await;
    // Everything behind the edge applies plans: only the edge stands between them and the client.
    let sys = System::start().await;
    let config = sys.config.clone();
    let grpc = serve_hop_grpc(
        Hop::new(&sys, &config).await,
        DeiServerLayer::new(config.clone()).incoming(Incoming::Restart),
    )
    .await;
    let http = serve_hop_http(
        Hop::new(&sys, &config).await,
        DeiHttpServerLayer::new(config.clone()).incoming(Incoming::Restart),
    )
    .await;
    for raw in [Raw::grpc(grpc).await, Raw::http(http)] {
        let (clean, served) = learn(&raw, None).await;
        assert_eq!(served, "1");
        assert!(
            clean.iter().all(|i| i.starts_with("1.")),
            "the edge's own calls get indexes"
        );
        let targets = clean.iter().map(|t| format!("{t}:g14")).collect::<Vec<_>>().join("*");
        let hostile: Headers = vec![
            header("dei", "1.AQEBAQEBAQE1"),
            header("dei-faults", format!("1*{targets}")),
            header(
                "baggage",
                format!(
                    "user=alice,dei=1.AgICAgICAgI1,dei-faults=1*{}",
                    targets.replace("g14", "l999999")
                ),
            ),
        ];
        let before = counters();
        let trace = next_trace();
        let answer = raw.send(trace, &hostile).await.expect("served");
        let after = counters();
        assert!(
            answer.starts_with("1|alice|"),
            "a root; the user's baggage kept: {answer}"
        );
        assert!(all_ok(&answer), "no planned fault reached B or C: {answer}");
        let spans = spans_of(trace, SPANS_PER_REQUEST).await;
        let (calls, _) = calls(&spans);
        assert_eq!(calls, clean, "downstream, nothing changed");
        assert!(
            spans
                .iter()
                .all(|s| attr(s, "dei.fault").is_none() && attr(s, "dei.fault.plan").is_none())
        );
        assert_eq!(grew(&before, &after, "dropped_at_edge"), 1, "one request, counted once");
        for name in ["header", "baggage", "fault_plan", "fault_plan_dropped"] {
            assert_eq!(grew(&before, &after, name), 0, "{name}: dropped at the edge, not read");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_middle_service_relays_plans_it_does_not_apply() {
    let _serial = SERIAL.lock().await;
    // B and C apply plans (the target); the hop in front only relays them, or refuses them.
    let sys = System::start().await;
    for (faults, relayed) in [(Faults::Relay, true), (Faults::Refuse, false)] {
        let config = DeiConfig::builder().faults(faults).build();
        let raw =
            Raw::grpc(serve_hop_grpc(Hop::new(&sys, &config).await, DeiServerLayer::new(config.clone())).await).await;
        let trace = next_trace();
        let clean = raw.send(trace, &vec![]).await.expect("served");
        assert!(all_ok(&clean), "{clean}");
        let spans = spans_of(trace, SPANS_PER_REQUEST).await;
        // The hop's own call to B, and B's first call to C.
        let hop_call = spans
            .iter()
            .filter(|s| is_client(s))
            .find(|s| attr(s, "dei.depth").as_deref() == Some("1"))
            .and_then(|s| attr(s, "dei.index"))
            .expect("the hop's call");
        let b_calls: BTreeSet<String> = spans
            .iter()
            .filter(|s| is_client(s) && attr(s, "dei.depth").as_deref() == Some("2"))
            .filter_map(|s| attr(s, "dei.index"))
            .collect();
        let site1 = spans
            .iter()
            .find(|s| {
                is_client(s)
                    && attr(s, "dei.payload.digest").is_some()
                    && attr(s, "dei.depth").as_deref() == Some("2")
                    && attr(s, "dei.count").as_deref() == Some("1")
                    && b_calls.contains(&attr(s, "dei.index").unwrap_or_default())
            })
            .and_then(|s| attr(s, "dei.index"))
            .expect("a call of B");
        let plan = format!("1*{hop_call}:g14*{site1}:g13");
        let before = counters();
        let trace = next_trace();
        let answer = raw
            .send(trace, &vec![header("dei-faults", plan)])
            .await
            .expect("served");
        let after = counters();
        let spans = spans_of(trace, SPANS_PER_REQUEST).await;
        let faulted: Vec<(String, String)> = spans
            .iter()
            .filter_map(|s| Some((attr(s, "dei.index")?, attr(s, "dei.fault")?)))
            .collect();
        if relayed {
            assert!(!answer.contains("hop:"), "the hop's own call was sent: {answer}");
            assert_eq!(
                faulted,
                vec![(site1.clone(), "g13".to_string())],
                "applied where accepted only"
            );
            assert!(answer.contains(":Internal"), "{answer}");
            assert_eq!(
                grew(&before, &after, "fault_not_applied"),
                1,
                "the hop's entry, counted"
            );
        } else {
            assert!(all_ok(&answer), "neither applied nor relayed: {answer}");
            assert!(faulted.is_empty(), "{faulted:?}");
            assert_eq!(grew(&before, &after, "fault_plan_dropped"), 1);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_depth_limit_holds_across_three_hops() {
    let _serial = SERIAL.lock().await;
    // A (Front) receives 63 elements; its calls to B carry 64, the limit; B's calls to C cannot be extended.
    let sys = System::start().await;
    let raw = Raw::grpc(sys.front).await;
    let incoming = sixty_four_deep(63);
    let before = counters();
    let trace = next_trace();
    let headers = vec![header("dei", &incoming), header("baggage", format!("dei={incoming}"))];
    let answer = raw.send(trace, &headers).await.expect("served");
    let after = counters();
    assert!(
        !answer.contains("Unavailable") && !answer.contains("Internal"),
        "{answer}"
    );
    // A: 1 server and 2 client spans; B: 2 server and 22 client spans; C: 22 server spans.
    let spans = spans_of(trace, 49).await;
    assert_eq!(spans.len(), 49);
    let depth = |s: &SpanData| attr(s, "dei.depth").and_then(|d| d.parse::<usize>().ok()).unwrap_or(0);
    let limited = |s: &SpanData| attr(s, "dei.depth_limited").as_deref() == Some("true");
    let a_server = spans
        .iter()
        .find(|s| s.parent_span_id.to_string() == "00f067aa0ba902b7")
        .expect("A");
    assert_eq!(attr(a_server, "dei.index"), Some(incoming.clone()));
    let a_calls: Vec<&SpanData> = spans
        .iter()
        .filter(|s| s.parent_span_id == a_server.span_context.span_id() && is_client(s))
        .collect();
    assert_eq!(a_calls.len(), 2);
    assert!(
        a_calls.iter().all(|s| depth(s) == 64 && !limited(s)),
        "63 + 1: extended to the limit"
    );
    let b_prefixes: BTreeSet<String> = a_calls.iter().filter_map(|s| attr(s, "dei.index")).collect();
    let b_servers: Vec<&SpanData> = spans
        .iter()
        .filter(|s| !is_client(s) && attr(s, "dei.signature").as_deref() == Some("deitest.Middle/Work"))
        .collect();
    assert_eq!(b_servers.len(), 2);
    assert!(
        b_servers
            .iter()
            .all(|s| b_prefixes.contains(&attr(s, "dei.index").unwrap_or_default())),
        "B is not a new root"
    );
    let b_calls: Vec<&SpanData> = spans
        .iter()
        .filter(|s| is_client(s) && depth(s) == 64 && limited(s))
        .collect();
    assert_eq!(b_calls.len(), 22, "every call of B is flagged");
    assert!(
        b_calls
            .iter()
            .all(|s| b_prefixes.contains(&attr(s, "dei.index").unwrap_or_default())),
        "and carries B's index"
    );
    let c_servers: Vec<&SpanData> = spans
        .iter()
        .filter(|s| {
            !is_client(s)
                && s.parent_span_id != a_server.parent_span_id
                && !b_servers
                    .iter()
                    .any(|b| b.span_context.span_id() == s.span_context.span_id())
        })
        .collect();
    assert_eq!(c_servers.len(), 22);
    assert!(
        c_servers
            .iter()
            .all(|s| depth(s) == 64 && b_prefixes.contains(&attr(s, "dei.index").unwrap_or_default())),
        "C is not a new root either"
    );
    assert_eq!(grew(&before, &after, "depth_limited"), 22);
    for name in ["header", "baggage"] {
        assert_eq!(
            grew(&before, &after, name),
            0,
            "{name}: no hop rejected what it received"
        );
    }
}

/// `docs/wire-format.md`, "Faults as a caller sees them", against a real tonic client and a real reqwest
/// client: the table's rows, each applied to a call the test makes itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faults_reach_callers_as_the_spec_says() {
    let _serial = SERIAL.lock().await;
    const SPEC: &str = include_str!("../../docs/wire-format.md");
    let heading = "### Faults as a caller sees them\n";
    let section = &SPEC[SPEC.find(heading).expect("the table") + heading.len()..];
    let section = &section[..section.find("\n#").unwrap_or(section.len())];
    let rows: Vec<Vec<String>> = section
        .lines()
        .filter(|l| l.starts_with("| "))
        .skip(2)
        .map(|l| {
            l.trim_matches('|')
                .split(" | ")
                .map(|c| c.trim().replace('`', ""))
                .collect()
        })
        .collect();
    assert!(rows.len() >= 20, "{rows:?}");
    let sys = System::start().await;
    let config = sys.config.clone();
    let leaf = sys.leaf_client().await;
    let http = http_client(&config);
    let url = format!("http://{}/items/7", sys.leaf_http);
    for row in &rows {
        let [fault, grpc, http_outcome] = &row[..] else {
            panic!("{row:?}")
        };
        let fault: Fault = fault.parse().unwrap_or_else(|()| panic!("{row:?}"));
        // The same call site twice: the first call shows the index, the second is failed by a plan naming it.
        let mut plan: Option<FaultPlan> = None;
        for step in 0..2 {
            let cx = match plan.take() {
                Some(p) => root_context(&config).with_fault_plan(p),
                None => root_context(&config),
            };
            let grpc_result = leaf.clone().get(msg("mapping")).with_context(cx.clone()).await;
            let http_result = http.get(&url).send().with_context(cx).await;
            if step == 0 {
                let served = grpc_result.expect("served").into_inner().text;
                let grpc_index: Index = served.rsplit_once('@').expect("index").1.parse().expect("an index");
                let body = http_result.expect("served").text().await.expect("body");
                let http_index: Index = body.rsplit_once('@').expect("index").1.parse().expect("an index");
                plan = Some(FaultPlan::new(vec![(grpc_index, fault), (http_index, fault)]));
            } else {
                let code = grpc_result.expect_err("failed by the plan").code();
                let name = Fault::Grpc(code as u8).grpc_code_name().unwrap_or("?");
                assert_eq!(name, grpc, "{row:?}: the gRPC caller");
                let seen = match http_result {
                    Ok(response) => response.status().as_u16().to_string(),
                    Err(e) if e.is_middleware() => "connection error".to_string(),
                    Err(e) => format!("{e}"),
                };
                assert_eq!(&seen, http_outcome, "{row:?}: the HTTP caller");
            }
        }
    }
}

/// `DEI_ACCEPT_FAULTS` decides when the code does not: checked in child processes of this test binary.
#[test]
fn faults_from_the_environment() {
    if let Ok(expected) = std::env::var("DEI_TEST_EXPECTED_FAULTS") {
        assert_eq!(DeiConfig::default().faults().as_str(), expected);
        let chosen = DeiConfig::builder().faults(Faults::Refuse).build();
        assert_eq!(chosen.faults(), Faults::Refuse, "the code's choice wins");
        return;
    }
    let exe = std::env::current_exe().expect("this test binary");
    for (value, expected) in [
        ("1", "accept"),
        ("relay", "relay"),
        ("0", "refuse"),
        ("yes please", "refuse"),
    ] {
        let out = std::process::Command::new(&exe)
            .args(["--exact", "faults_from_the_environment", "--test-threads=1"])
            .env("DEI_ACCEPT_FAULTS", value)
            .env("DEI_TEST_EXPECTED_FAULTS", expected)
            .output()
            .expect("the child runs");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "DEI_ACCEPT_FAULTS={value}: {stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(stdout.contains("1 passed"), "the child ran the check: {stdout}");
    }
}
