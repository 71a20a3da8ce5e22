//! The first search of docs/sfit.md (section 0), on real axum services with the DEI layers, with the two
//! choices a new user meets: services that do not accept fault plans (the default) make a search that
//! injects nothing, and says so; the default catalog faults the test's own entry call. A catalog holding a
//! fault no service carries out is refused before the search starts.
//!
//! One test function: the in-process span source is shared by the process, so the searches run one after
//! the other.

use axum::{Router, extract::Path, routing::get};
use dei_instrumentation::{DeiConfig, DeiHttpServerLayer, DeiReqwestMiddleware, Faults};
use dei_propagator::Fault;
use dei_sfit::catalog::Pattern;
use dei_sfit::{FaultCatalog, FunctionalTest, Search, SearchError, SearchOptions, SpanSource, TestRun, test_fn};
use opentelemetry::context::FutureExt as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

type Client = reqwest_middleware::ClientWithMiddleware;

async fn serve(router: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(async move { axum::serve(listener, router).await });
    url
}

async fn summary(client: Client, features: String) -> String {
    let mut names = Vec::new();
    for id in [1, 2] {
        let name = match client.get(format!("{features}/feature/{id}")).send().await {
            Ok(r) if r.status().is_success() => r.text().await.unwrap_or_else(|_| "?".to_string()),
            _ => "?".to_string(),
        };
        names.push(name);
    }
    names.join(", ")
}

/// The backend and the frontend, every layer with `config`; the functional test calling the frontend.
async fn program(config: DeiConfig) -> impl FunctionalTest {
    let client: Client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
        .with(DeiReqwestMiddleware::new(config.clone()))
        .build();
    let backend = Router::new()
        .route(
            "/feature/{id}",
            get(|Path(id): Path<u32>| async move { format!("feature {id}") }),
        )
        .layer(DeiHttpServerLayer::new(config.clone()));
    let features = serve(backend).await;
    let frontend_client = client.clone();
    let frontend = Router::new()
        .route(
            "/summary",
            get(move || summary(frontend_client.clone(), features.clone())),
        )
        .layer(DeiHttpServerLayer::new(config.clone()));
    let url = format!("{}/summary", serve(frontend).await);
    test_fn("summary degrades, never fails", move |run: TestRun| {
        let (client, url) = (client.clone(), url.clone());
        async move {
            let reply = async { client.get(url).send().await }.with_context(run.context()).await;
            let reply = reply.map_err(|e| format!("the frontend failed: {e}"))?;
            let text = reply.text().await.map_err(|e| e.to_string())?;
            match text.as_str() {
                "feature 1, feature 2" => Ok(()),
                _ if run.planned_on("GET */feature/*") && text.contains('?') => Ok(()),
                _ => Err(format!("unexpected summary {text:?}")),
            }
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_search_says_when_it_injects_nothing_and_faults_the_entry_call_by_default() {
    let spans: Arc<dyn SpanSource> = Arc::new(dei_sfit::testing::in_process_spans());

    // 1. The services' default configuration drops fault plans: planned, never injected, and said loudly.
    let test = program(DeiConfig::builder().build()).await;
    let options = SearchOptions {
        catalog: FaultCatalog::protocol_defaults().without("GET */summary"),
        ..SearchOptions::default()
    };
    let report = Search::with_shared_source(options, spans.clone())
        .run(&test)
        .await
        .expect("search");
    assert!(report.nothing_injected, "{report}");
    assert!(
        report.executions.len() > 1,
        "faults were planned on the lookups\n{report}"
    );
    assert_eq!(report.unreached_executions, report.executions.len() - 1, "{report}");
    let why = report.tested_faults().expect_err("nothing was injected");
    assert!(
        why.contains("Faults::Accept") && why.contains("DEI_ACCEPT_FAULTS=1"),
        "{why}"
    );
    assert!(format!("{report}").contains("WARNING: nothing injected"), "{report}");

    // 2. Accepting plans, with the default catalog: the entry call is faulted too, alone (its callees are
    // its descendants), and a test that does not accept its own call's failure fails exactly there.
    let test = program(DeiConfig::builder().faults(Faults::Accept).build()).await;
    let report = Search::with_shared_source(SearchOptions::default(), spans.clone())
        .run(&test)
        .await
        .expect("search");
    report.tested_faults().expect("faults were injected");
    assert!(!report.nothing_injected && report.unreached().is_empty(), "{report}");
    let entry = Pattern::new("GET */summary");
    let on_entry = |e: &&dei_sfit::ExecutionRecord| e.effective.iter().any(|p| entry.matches(&p.signature));
    let entry_faulted: Vec<usize> = report.executions.iter().filter(on_entry).map(|e| e.number).collect();
    let failing: Vec<usize> = report.failing().iter().map(|e| e.number).collect();
    // HTTP 500, 502, 503 and a connection error on the entry call; each lookup's 4 faults and none, squared
    assert_eq!(entry_faulted.len(), 4, "{report}");
    assert_eq!(failing, entry_faulted, "{report}");
    assert_eq!(report.executions.len(), 4 + 25, "{report}");
    assert!(report.redundant().is_empty(), "{report}");

    // 3. The same services with the entry call exempt, four executions at once, as one assertion
    // (issue #22): each execution reads its own trace from the span router in_process_spans() installed,
    // and the search reaches the sequential search's sets, in canonical order.
    assert!(
        dei_sfit::testing::in_process_spans().router().is_some(),
        "in_process_spans() installs a span router"
    );
    let options = SearchOptions {
        catalog: FaultCatalog::protocol_defaults().without("GET */summary"),
        ..SearchOptions::default()
    };
    let mut sequential = Search::with_shared_source(options.clone(), spans.clone())
        .run(&test)
        .await
        .expect("search");
    sequential.canonical_order();
    let parallel = dei_sfit::assert_exhaustive(
        &test,
        SearchOptions {
            parallelism: 4,
            ..options
        },
    )
    .await;
    assert_eq!(parallel.parallelism_used, 4, "{:?}", parallel.notes);
    assert_eq!(parallel.executions.len(), 25, "{parallel}");
    let listing = |r: &dei_sfit::Report| -> Vec<(Vec<dei_sfit::PlannedFault>, Vec<dei_sfit::PlannedFault>, usize)> {
        r.executions
            .iter()
            .map(|e| (e.plan.clone(), e.effective.clone(), e.rpcs.len()))
            .collect()
    };
    assert_eq!(listing(&parallel), listing(&sequential), "{parallel}\n{sequential}");

    // 4. A catalog with a fault no service carries out (gRPC code 17, 0, HTTP 100, a latency finer than a
    // millisecond) is refused at once, naming the fault, on services that accept plans: such a search would
    // plan it, inject nothing and blame Faults::Accept.
    for (catalog, fault, rule, named) in [
        (FaultCatalog::single(Fault::Grpc(17)), Fault::Grpc(17), 0, "`g17`"),
        (FaultCatalog::single(Fault::Grpc(0)), Fault::Grpc(0), 0, "`g0`"),
        (
            FaultCatalog::protocol_defaults()
                .without("GET */summary")
                .with_rule("GET */feature/*", vec![Fault::Http(503), Fault::Http(100)]),
            Fault::Http(100),
            1,
            "`h100`",
        ),
        (
            FaultCatalog::single(Fault::Latency(Duration::from_micros(1500))),
            Fault::Latency(Duration::from_micros(1500)),
            0,
            "`latency 1.5ms`",
        ),
    ] {
        let started = Instant::now();
        let options = SearchOptions {
            catalog,
            ..SearchOptions::default()
        };
        let result = Search::with_shared_source(options, spans.clone()).run(&test).await;
        let error = match result {
            Err(e) => e,
            Ok(report) => panic!("a catalog with {fault:?} was searched:\n{report}"),
        };
        match &error {
            SearchError::InvalidFault { fault: f, rule: r, .. } => {
                assert_eq!((*f, *r), (fault, rule), "{error}")
            }
            other => panic!("not InvalidFault: {other}"),
        }
        let text = error.to_string();
        assert!(text.contains(named) && text.contains("not started"), "{text}");
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "not refused at once: {text}"
        );
    }
}
