//! The paper's programs as real services: the search reaches every effective fault set the brute-force
//! oracle finds, exactly once. One test: the span source is process-wide.

use dei_corpus as common;

use common::hello::{self, Figure};
use dei_propagator::Instantiation;
use dei_sfit::{FaultCatalog, FunctionalTest, Oracle, Report, Search, SearchOptions, SpanSource};
use std::sync::Arc;

async fn check(name: &str, test: &dyn FunctionalTest, catalog: FaultCatalog, source: Arc<dyn SpanSource>) -> Report {
    let options = SearchOptions {
        catalog,
        ..SearchOptions::default()
    };
    let truth = Oracle::new(options.clone(), source.clone(), 10)
        .run(test)
        .await
        .expect("oracle");
    let report = Search::with_shared_source(options, source)
        .run(test)
        .await
        .expect("search");
    assert!(report.redundant().is_empty(), "{name}: redundant\n{report}");
    assert_eq!(report.reference_sets(), truth.reference, "{name}: incomplete\n{report}");
    assert_eq!(report.executions.len(), truth.reference.len(), "{name}");
    assert!(
        report.executions.iter().all(|e| e.unreached.is_empty()),
        "{name}: unreachable plan\n{report}"
    );
    report
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn figures_complete_and_non_redundant_on_real_services() {
    let source: Arc<dyn SpanSource> = Arc::new(common::spans());
    let config = hello::config(Instantiation::dei());

    // Fig. 1 over HTTP with the protocol defaults: (1 + 4)^2
    let (url, client) = hello::start_fig1_http(&config).await;
    let catalog = FaultCatalog::protocol_defaults().with_rule("GET */helloworld", vec![]);
    let r = check("fig1", &hello::fig1_test(url, client), catalog, source.clone()).await;
    assert_eq!(r.executions.len(), 25);
    assert!(r.failing().is_empty(), "{r}");

    // Fig. 2: exactly the five executions of §3.2
    let a = hello::start(Figure::Fig2, &config).await;
    let r = check(
        "fig2",
        &hello::fig_test(Figure::Fig2, a),
        hello::catalog(),
        source.clone(),
    )
    .await;
    assert_eq!(r.executions.len(), 5);
    assert!(r.failing().is_empty(), "{r}");
    let patterns: std::collections::BTreeSet<String> = r
        .executions
        .iter()
        .map(|e| {
            e.rpcs
                .iter()
                .filter(|x| x.signature.ends_with("ServiceB/Echo"))
                .map(|x| if x.fault.is_some() { 'x' } else { '.' })
                .collect()
        })
        .collect();
    assert_eq!(patterns, ["..", ".x.", ".xx", "x.", "xx"].map(String::from).into());

    // Fig. 3: concurrent calls from one site, told apart by their payloads
    let a = hello::start(Figure::Fig3, &config).await;
    let r = check(
        "fig3",
        &hello::fig_test(Figure::Fig3, a),
        hello::catalog(),
        source.clone(),
    )
    .await;
    assert_eq!(r.executions.len(), 4);

    // Fig. 4: per string {ok, C, B9, B9+C', B9+B19}: 5 x 5
    let a = hello::start(Figure::Fig4, &config).await;
    let r = check(
        "fig4",
        &hello::fig_test(Figure::Fig4, a),
        hello::catalog(),
        source.clone(),
    )
    .await;
    assert_eq!(r.executions.len(), 25);
    assert!(r.failing().is_empty(), "{r}");

    // Fig. 5: the stream and each of its messages (by final index) can be failed; failing a message ends the
    // stream before it; A has no fallback: {}, {stream}, {Hello}, {World}, three of them failing
    let a = hello::start(Figure::Fig5, &config).await;
    let test = hello::fig_test(Figure::Fig5, a);
    let r = check("fig5", &test, hello::catalog(), source.clone()).await;
    assert_eq!(r.executions.len(), 4, "{r}");
    assert_eq!(r.failing().len(), 3, "{r}");
    // and a failing one replays from its report file alone
    let path = std::env::temp_dir().join(format!("fig5-{}.json", std::process::id()));
    r.save(&path).expect("save");
    let loaded = Report::load(&path).expect("load");
    let _ = std::fs::remove_file(&path);
    let again = Search::replay(&test, &loaded, loaded.failing()[0].number, source.clone())
        .await
        .expect("replay");
    assert!(!again.outcome.passed());
    assert_eq!(again.effective, loaded.failing()[0].effective);
    // the stream's messages were observed with their final indexes, and targeted
    let first = &r.executions[0];
    let messages: Vec<_> = first
        .rpcs
        .iter()
        .filter(|x| x.parent.is_some_and(|p| first.rpcs[p].index.is_preliminary()))
        .collect();
    assert_eq!(messages.len(), 2, "{:?}", first.rpcs);
    assert!(messages.iter().all(|m| m.targetable() && !m.index.is_preliminary()));
    let failed_messages = r
        .failing()
        .iter()
        .filter(|e| e.effective.iter().all(|p| !p.index.is_preliminary()))
        .count();
    assert_eq!(failed_messages, 2, "{r}");
}
