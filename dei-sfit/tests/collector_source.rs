//! The search reading spans from dei-collector's API ([`CollectorSpans`]): real axum services with the DEI
//! layers export over OTLP/HTTP (opentelemetry-otlp, blocking reqwest client, batch processor) to an
//! in-process dei-collector on loopback; the search must reach the same effective fault sets as through the
//! in-memory exporter, which are the brute-force oracle's.
//!
//! The program is Fig. 1 of the paper over HTTP with one more level: A calls B twice from one helper, with a
//! fallback each time; each B calls C, with a fallback. Faults: HTTP 503 on B and C (A is exempt).

use dei_collector::server::{self, ServerConfig};
use dei_instrumentation::{DeiConfig, DeiHttpServerLayer, DeiReqwestMiddleware};
use dei_propagator::Fault;
use dei_sfit::source::collector::SettleConfig;
use dei_sfit::{
    CollectorSpans, FaultCatalog, FaultSet, FunctionalTest, InMemorySpans, Oracle, Report, Search, SearchOptions,
    SpanSource, Strategy, test_fn,
};
use opentelemetry::context::FutureExt as _;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

type Client = reqwest_middleware::ClientWithMiddleware;

/// Every span to the in-memory exporter as it ends, and in batches over OTLP/HTTP to `otlp_url`.
fn telemetry(otlp_url: &str) -> (InMemorySpanExporter, SdkTracerProvider) {
    let t = dei_instrumentation::testing::telemetry_over_otlp_http(otlp_url);
    (t.exporter().clone(), t.provider().clone())
}

async fn serve(router: axum::Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, router).await });
    format!("http://{addr}")
}

/// GET `url`; the body on success, `fallback` on any failure.
async fn get_or(client: &Client, url: String, fallback: &str) -> String {
    match client.get(url).send().await {
        Ok(r) if r.status().is_success() => r.text().await.unwrap_or_else(|_| fallback.to_string()),
        _ => fallback.to_string(),
    }
}

/// Starts C, B and A; returns A's URL.
async fn start_program(config: &DeiConfig, client: &Client) -> String {
    use axum::extract::Query;
    use axum::routing::get;
    let c = axum::Router::new()
        .route(
            "/upper",
            get(|Query(q): Query<HashMap<String, String>>| async move { q.get("s").cloned().unwrap_or_default() }),
        )
        .layer(DeiHttpServerLayer::new(config.clone()));
    let c_url = serve(c).await;
    let b_client = client.clone();
    let b = axum::Router::new()
        .route(
            "/echo",
            get(move |Query(q): Query<HashMap<String, String>>| {
                let client = b_client.clone();
                let c_url = c_url.clone();
                async move {
                    let s = q.get("s").cloned().unwrap_or_default();
                    get_or(&client, format!("{c_url}/upper?s={s}"), &s).await
                }
            }),
        )
        .layer(DeiHttpServerLayer::new(config.clone()));
    let b_url = serve(b).await;
    let a_client = client.clone();
    let a = axum::Router::new()
        .route(
            "/helloworld",
            get(move || {
                let client = a_client.clone();
                let b_url = b_url.clone();
                async move {
                    // one call site, reached twice (Fig. 1's helper)
                    let echo = |s: &'static str| {
                        let client = client.clone();
                        let url = format!("{b_url}/echo?s={s}");
                        async move { get_or(&client, url, s).await }
                    };
                    let hello = echo("Hello").await;
                    let world = echo("World").await;
                    format!("{hello} {world}")
                }
            }),
        )
        .layer(DeiHttpServerLayer::new(config.clone()));
    format!("{}/helloworld", serve(a).await)
}

fn functional_test(url: String, client: Client) -> impl FunctionalTest {
    test_fn("fig1-http-3-levels", move |run: dei_sfit::TestRun| {
        let client = client.clone();
        let url = url.clone();
        async move {
            let got = async { client.get(url).send().await }.with_context(run.context()).await;
            let text = match got {
                Ok(r) => r.text().await.map_err(|e| e.to_string())?,
                Err(e) => return Err(format!("A failed: {e}")),
            };
            if text == "Hello World" {
                Ok(())
            } else {
                Err(format!("A answered {text:?}"))
            }
        }
    })
}

fn options(strategy: Strategy) -> SearchOptions {
    SearchOptions {
        catalog: FaultCatalog {
            rules: Vec::new(),
            protocol_defaults: false,
        }
        .with_rule("GET */helloworld", vec![])
        .with_rule("*", vec![Fault::Http(503)]),
        strategy,
        ..SearchOptions::default()
    }
}

fn effective_sets(report: &Report) -> BTreeSet<FaultSet> {
    report
        .executions
        .iter()
        .map(|e| e.effective.iter().map(|p| (p.index.clone(), p.fault)).collect())
        .collect()
}

fn assert_sound(report: &Report, what: &str) {
    assert!(report.redundant().is_empty(), "{what}: redundant executions\n{report}");
    assert!(
        report.executions.iter().all(|e| e.unreached.is_empty()),
        "{what}: a planned fault was not reached\n{report}"
    );
    assert!(
        report.executions.iter().all(|e| e.multiply_injected.is_empty()),
        "{what}: a fault landed on several RPCs\n{report}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn search_through_the_collector_matches_in_memory_and_the_oracle() {
    let collector = server::start(ServerConfig::ephemeral()).await.expect("collector");
    let (memory, _provider) = telemetry(&format!("http://{}/v1/traces", collector.http_addr));
    let config = DeiConfig::builder().faults(dei_instrumentation::Faults::Accept).build();
    let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
        .with(DeiReqwestMiddleware::new(config.clone()))
        .build();
    let url = start_program(&config, &client).await;
    let test = functional_test(url, client);

    let in_memory: Arc<dyn SpanSource> = Arc::new(InMemorySpans::new(memory));
    let truth = Oracle::new(options(Strategy::DepthFirst), in_memory.clone(), 8)
        .run(&test)
        .await
        .expect("oracle");
    // per B call: no fault, B fails, or C under it fails
    assert_eq!(truth.effective.len(), 9, "{:#?}", truth.effective);
    assert_eq!(
        truth.indexes.len(),
        5,
        "A (exempt by the catalog), two B calls, two C calls"
    );

    let reference = Search::with_shared_source(options(Strategy::DepthFirst), in_memory)
        .run(&test)
        .await
        .expect("in-memory search");
    assert_sound(&reference, "in-memory");
    assert_eq!(effective_sets(&reference), truth.effective);

    let api = format!("http://{}", collector.api_addr);
    let settle = SettleConfig {
        quiet: Duration::from_millis(150),
        ..SettleConfig::default()
    };
    for strategy in [Strategy::DepthFirst, Strategy::BreadthFirst] {
        let source = CollectorSpans::new(api.clone()).with_settle(settle.clone());
        let report = Search::new(options(strategy), source.clone())
            .run(&test)
            .await
            .expect("collector search");
        assert_sound(&report, "collector");
        assert_eq!(
            effective_sets(&report),
            truth.effective,
            "{strategy:?}: the collector source reaches the oracle's sets\n{report}"
        );
        assert_eq!(report.executions.len(), truth.effective.len());
        // every execution saw the whole program: A, and per B call B (and C unless B failed)
        for e in &report.executions {
            let failed_b = e.effective.iter().filter(|p| p.signature.contains("/echo")).count();
            assert_eq!(e.rpcs.len(), 5 - failed_b, "execution #{}: {:#?}", e.number, e.rpcs);
            assert!(
                e.rpcs.iter().all(|r| r.outcome.is_ok() == r.fault.is_none()),
                "{:#?}",
                e.rpcs
            );
        }
        // each execution had its own trace in the collector
        assert!(source.trace_id().is_some());
    }
    let traces = reqwest::get(format!("{api}/api/v1/traces?limit=10000"))
        .await
        .expect("GET traces")
        .text()
        .await
        .expect("body");
    let traces: serde_json::Value = serde_json::from_str(&traces).expect("JSON");
    assert!(
        traces["retained"].as_u64().expect("retained") >= 2 * truth.effective.len() as u64,
        "{traces}"
    );
    collector.shutdown().await;
}
