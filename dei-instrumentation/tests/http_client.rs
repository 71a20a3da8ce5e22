//! The reqwest middleware against real axum servers on loopback: latency faults against the request's timeout,
//! what a caller gets for an injected fault, what `url.full` keeps, and named targets.

mod common;

use axum::Router;
use axum::routing::get;
use common::*;
use dei_instrumentation::http::TargetService;
use dei_instrumentation::http::client::{InjectedTimeout, unnamed_targets_sharing_a_signature_total};
use dei_instrumentation::{DeiConfig, DeiHttpServerLayer, DeiReqwestMiddleware, IncomingCall, root_context};
use dei_propagator::{DeiContextExt as _, Fault, FaultPlan, Index};
use opentelemetry::context::FutureExt as _;
use reqwest_middleware::{ClientWithMiddleware, RequestBuilder};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// A service named `name`: `/{path}` answers `name@index` (the index it was called with) and counts the
/// requests it served in `hits`; `/slow` does the same after 450 ms.
async fn service(name: &'static str, config: &DeiConfig, hits: Arc<AtomicUsize>) -> SocketAddr {
    let reply = move || {
        hits.fetch_add(1, Ordering::SeqCst);
        let index = IncomingCall::current().map(|c| c.index.encode()).unwrap_or_default();
        format!("{name}@{index}")
    };
    let slow = reply.clone();
    let app = Router::new()
        .route("/{path}", get(move || std::future::ready(reply())))
        .route(
            "/slow",
            get(move || async move {
                tokio::time::sleep(Duration::from_millis(450)).await;
                slow()
            }),
        )
        .layer(DeiHttpServerLayer::new(config.clone()));
    serve_http(app).await
}

/// The index a reply `name@index` names.
fn index_of(reply: &str) -> Index {
    reply.rsplit_once('@').expect("name@index").1.parse().expect("an index")
}

/// One call site for every call of a test: the index depends on it.
async fn call(request: RequestBuilder) -> Result<String, reqwest_middleware::Error> {
    request
        .send()
        .await?
        .error_for_status()?
        .text()
        .await
        .map_err(Into::into)
}

/// Runs `request()` twice from one call site: once to learn its index, then under a plan that puts `fault` on
/// that index. Returns the second outcome and how long it took.
async fn faulted(
    config: &DeiConfig,
    fault: Fault,
    request: impl Fn() -> RequestBuilder,
) -> (Result<String, reqwest_middleware::Error>, Duration) {
    let mut plan: Option<FaultPlan> = None;
    for step in 0..2 {
        let cx = match plan.take() {
            Some(p) => root_context(config).with_fault_plan(p),
            None => root_context(config),
        };
        let started = Instant::now();
        let outcome = call(request()).with_context(cx).await;
        if step == 1 {
            return (outcome, started.elapsed());
        }
        let index = index_of(&outcome.expect("the call without a fault"));
        plan = Some(FaultPlan::new(vec![(index, fault)]));
    }
    unreachable!("two steps")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_latency_fault_counts_against_the_requests_timeout() {
    dei_instrumentation::testing::telemetry();
    let config = config();
    let hits = Arc::new(AtomicUsize::new(0));
    let addr = service("svc", &config, hits.clone()).await;
    let client = http_client(&config);
    let url = format!("http://{addr}/timeouts");

    // The planned wait reaches the timeout: the call fails at the timeout, as a timeout, without being sent.
    let timeout = Duration::from_millis(200);
    let before = hits.load(Ordering::SeqCst);
    let (outcome, took) = faulted(&config, Fault::Latency(Duration::from_millis(1500)), || {
        client.get(&url).timeout(timeout)
    })
    .await;
    let err = outcome.expect_err("the planned latency passes the timeout");
    let injected = InjectedTimeout::of(&err).unwrap_or_else(|| panic!("an injected timeout: {err}"));
    assert_eq!(
        (injected.latency, injected.timeout),
        (Duration::from_millis(1500), timeout)
    );
    assert!(!err.is_timeout(), "reqwest's own check does not know it (documented)");
    assert!(took >= timeout && took < Duration::from_millis(1200), "{took:?}");
    assert_eq!(
        hits.load(Ordering::SeqCst),
        before + 1,
        "only the first step reached the service"
    );

    // A shorter wait leaves the call what is left of its timeout: 300 ms + a 450 ms answer pass 600 ms.
    let slow = format!("http://{addr}/slow");
    let (outcome, _) = faulted(&config, Fault::Latency(Duration::from_millis(300)), || {
        client.get(&slow).timeout(Duration::from_millis(600))
    })
    .await;
    let err = outcome.expect_err("the wait and the answer pass the timeout");
    assert!(err.is_timeout(), "reqwest's timeout, with what was left of it: {err}");

    // A timeout on every request of the client, set by an initialiser, is the request's: it is honoured.
    let with_init = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
        .with_init(|r: RequestBuilder| r.timeout(Duration::from_millis(100)))
        .with(DeiReqwestMiddleware::new(config.clone()))
        .build();
    let (outcome, _) = faulted(&config, Fault::Latency(Duration::from_millis(400)), || {
        with_init.get(&url)
    })
    .await;
    assert!(InjectedTimeout::of(&outcome.expect_err("timed out")).is_some());

    // A timeout set on the reqwest client is not visible to middleware: the wait is outside it (documented),
    // and the call succeeds, late.
    let client_timeout = reqwest_middleware::ClientBuilder::new(
        reqwest::Client::builder()
            .timeout(Duration::from_millis(100))
            .build()
            .expect("a client"),
    )
    .with(DeiReqwestMiddleware::new(config.clone()))
    .build();
    let (outcome, took) = faulted(&config, Fault::Latency(Duration::from_millis(400)), || {
        client_timeout.get(&url)
    })
    .await;
    assert!(outcome.is_ok(), "{outcome:?}");
    assert!(took >= Duration::from_millis(400), "{took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_injected_response_has_the_requests_url_and_an_injected_error_is_not_reqwests() {
    dei_instrumentation::testing::telemetry();
    let config = config();
    let addr = service("svc", &config, Arc::default()).await;
    let client = http_client(&config);
    let url = format!("http://{addr}/injected?q=1");
    let mut plan: Option<FaultPlan> = None;
    for step in 0..2 {
        let cx = match plan.take() {
            Some(p) => root_context(&config).with_fault_plan(p),
            None => root_context(&config),
        };
        let response = client.get(&url).send().with_context(cx).await.expect("a response");
        if step == 0 {
            let index = index_of(&response.text().await.expect("a body"));
            plan = Some(FaultPlan::new(vec![(index, Fault::Http(503))]));
        } else {
            assert_eq!(response.status(), 503);
            assert_eq!(response.url().as_str(), url);
        }
    }
    // An injected connection error answers as the documentation says.
    let (outcome, _) = faulted(&config, Fault::Connection, || client.get(&url)).await;
    let err = outcome.expect_err("a connection error");
    assert!(err.is_middleware() && !err.is_connect() && err.url().is_none(), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_fault_in_a_hand_built_plan_is_not_carried_out_and_is_counted() {
    dei_instrumentation::testing::telemetry();
    let config = config();
    let hits = Arc::new(AtomicUsize::new(0));
    let addr = service("svc", &config, hits.clone()).await;
    let client = http_client(&config);
    let url = format!("http://{addr}/invalid");
    // Two rounds of three calls from one call site (counts 1, 2, 3): the first gives the indexes, the second runs
    // under a plan that no receiver reads (h100 is never a final response, g17 is no gRPC code), whose valid
    // entry is still carried out here.
    let mut plan: Option<FaultPlan> = None;
    let mut indexes: Vec<Index> = Vec::new();
    for round in 0..2 {
        let cx = match plan.take() {
            Some(p) => root_context(&config).with_fault_plan(p),
            None => root_context(&config),
        };
        let (before, served) = (
            dei_instrumentation::invalid_faults_not_applied_total(),
            hits.load(Ordering::SeqCst),
        );
        let outcomes = async {
            let mut outcomes = Vec::new();
            for _ in 0..3 {
                outcomes.push(call(client.get(&url)).await);
            }
            outcomes
        }
        .with_context(cx)
        .await;
        if round == 0 {
            indexes = outcomes
                .iter()
                .map(|o| index_of(o.as_ref().expect("no fault planned")))
                .collect();
            plan = Some(FaultPlan::new(vec![
                (indexes[0].clone(), Fault::Http(100)),
                (indexes[1].clone(), Fault::Http(503)),
                (indexes[2].clone(), Fault::Grpc(17)),
            ]));
            continue;
        }
        // The invalid entries' calls reached the service, which answered under their indexes.
        for i in [0, 2] {
            let reply = outcomes[i].as_ref().expect("an invalid fault is not carried out");
            assert_eq!(reply, &format!("svc@{}", indexes[i].encode()));
        }
        // The valid entry of the same plan failed its call, unsent.
        let err = outcomes[1].as_ref().expect_err("the valid entry is carried out");
        assert_eq!(err.status().map(|s| s.as_u16()), Some(503), "{err}");
        assert_eq!(hits.load(Ordering::SeqCst), served + 2);
        assert_eq!(dei_instrumentation::invalid_faults_not_applied_total(), before + 2);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn url_full_has_no_credentials_and_no_query_values() {
    dei_instrumentation::testing::telemetry();
    let config = config();
    let addr = service("svc", &config, Arc::default()).await;
    let client = http_client(&config);
    // reqwest takes credentials out of the URL (into an Authorization header) before middleware sees it;
    // `url.full` would replace them too (a unit test in src/http/client.rs).
    let url = format!("http://me:pw@{addr}/redacted?secret_token=hunter2&AWSAccessKeyId=AKIA&page=&flag#frag");
    // Nothing listens on port 1: the call fails, and reqwest's error names the URL.
    let refused = "http://127.0.0.1:1/refused?secret_token=hunter2";
    let (replies, trace) = in_root(&config, |cx| cx, async {
        (
            client.get(&url).send().await.map(|r| r.status()),
            client.get(refused).send().await.map(|r| r.status()),
        )
    })
    .await;
    assert!(replies.0.expect("served").is_success());
    assert!(replies.1.is_err());
    let spans = spans_of(trace, 4).await;
    let clients: Vec<_> = spans.iter().filter(|s| is_client(s)).collect();
    assert_eq!(clients.len(), 2);
    let full = |s: &opentelemetry_sdk::trace::SpanData| attr(s, "url.full").unwrap_or_default();
    let served = clients
        .iter()
        .find(|s| full(s).contains("/redacted"))
        .expect("the served call");
    assert_eq!(
        full(served),
        format!("http://{addr}/redacted?secret_token=REDACTED&AWSAccessKeyId=REDACTED&page=&REDACTED")
    );
    let failed = clients
        .iter()
        .find(|s| full(s).contains("/refused"))
        .expect("the failed call");
    assert_eq!(full(failed), "http://127.0.0.1:1/refused?secret_token=REDACTED");
    let opentelemetry::trace::Status::Error { description } = &failed.status else {
        panic!("an error status: {:?}", failed.status)
    };
    assert!(
        description.contains("secret_token=REDACTED") && !description.contains("hunter2"),
        "{description}"
    );
    for span in &spans {
        for kv in &span.attributes {
            let value = kv.value.to_string();
            assert!(
                !value.contains("hunter2") && !value.contains("pw@"),
                "{}: {value}",
                kv.key
            );
        }
    }
}

/// Calls the `targets` (`users` and `billing`, both serving `GET /health` on 127.0.0.1) one after the other,
/// from one call site, in one root scope, named by a request extension when `named`; returns the index each was
/// called with.
async fn health_checks(
    client: &ClientWithMiddleware,
    config: &DeiConfig,
    targets: &[(&'static str, SocketAddr)],
    named: bool,
) -> BTreeMap<String, String> {
    async {
        let mut seen = BTreeMap::new();
        for (name, addr) in targets {
            let mut request = client.get(format!("http://{addr}/health"));
            if named {
                request = request.with_extension(TargetService::new(*name));
            }
            let reply = call(request).await.expect("served");
            let (service, index) = reply.rsplit_once('@').expect("name@index");
            seen.insert(service.to_string(), index.to_string());
        }
        seen
    }
    .with_context(root_context(config))
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn named_targets_keep_their_indexes_whatever_the_order_and_the_ports() {
    dei_instrumentation::testing::telemetry();
    let config = config();
    let client = http_client(&config);
    let start = || async {
        let users = service("users", &config, Arc::default()).await;
        let billing = service("billing", &config, Arc::default()).await;
        (users, billing)
    };
    let (users, billing) = start().await;
    let forward = [("users", users), ("billing", billing)];
    let backward = [("billing", billing), ("users", users)];

    // The index depends on the call stack: every run below is made from one line, in a loop.
    let (users2, billing2) = start().await;
    let mapped = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
        .with(
            DeiReqwestMiddleware::new(config.clone())
                .target(&users.ip().to_string(), users.port(), "users")
                .target_service("billing"),
        )
        .build();
    let runs = [
        // Named by a request extension: the order does not matter, and a second pair of servers on other ports
        // gets the same indexes.
        (&client, forward, true),
        (&client, backward, true),
        (&client, [("billing", billing2), ("users", users2)], true),
        // Named by the middleware: a map from host and port, and a name for every other call.
        (&mapped, backward, false),
        // The default signature (`GET 127.0.0.1/health`, no port) is the same for both.
        (&client, forward, false),
        (&client, backward, false),
    ];
    let sharing = unnamed_targets_sharing_a_signature_total();
    let mut seen = Vec::new();
    for (i, (client, targets, named)) in runs.iter().enumerate() {
        seen.push(health_checks(client, &config, targets, *named).await);
        if i == 3 {
            assert_eq!(
                unnamed_targets_sharing_a_signature_total(),
                sharing,
                "named targets are never counted"
            );
        }
    }
    let named = &seen[0];
    assert_ne!(named["users"], named["billing"]);
    for (i, other) in seen[1..4].iter().enumerate() {
        assert_eq!(other, named, "named run {}", i + 1);
    }
    // With the default signature the two calls are told apart by count only: the order decides which service
    // gets which index.
    let (first, second) = (&seen[4], &seen[5]);
    assert_ne!(first["users"], first["billing"]);
    assert_eq!(first["users"], second["billing"], "swapped with the order");
    assert!(
        unnamed_targets_sharing_a_signature_total() > sharing,
        "one signature seen on two ports is counted"
    );

    // What the spans say.
    let (_, trace) = in_root(&config, |cx| cx, async {
        let named = client
            .get(format!("http://{users}/health"))
            .with_extension(TargetService::new("users"));
        call(named).await.expect("served");
        call(client.get(format!("http://{billing}/health")))
            .await
            .expect("served")
    })
    .await;
    let spans = spans_of(trace, 5).await;
    let mut signatures: Vec<String> = spans
        .iter()
        .filter(|s| is_client(s))
        .filter_map(|s| attr(s, "dei.signature"))
        .collect();
    signatures.sort();
    assert_eq!(signatures, ["GET 127.0.0.1/health", "GET users/health"]);
}
