//! The search reading spans from dei-collector's API ([`CollectorSpans`]) when the collector could not record
//! all of an execution's trace: spans past its cap of RPCs per trace (`max_occurrences`) and spans whose DEI
//! data it skipped for a malformed `dei.*` attribute. A dei-collector on loopback receives each execution's
//! spans over OTLP/HTTP; the search must count both on the execution, not observe an incomplete execution as
//! a complete one.

use dei_collector::server::{self, ServerConfig};
use dei_propagator::Index;
use dei_sfit::source::collector::SettleConfig;
use dei_sfit::{CollectorSpans, FaultCatalog, Report, Search, SearchOptions, test_fn};
use opentelemetry::trace::TraceContextExt as _;
use serde_json::{Value, json};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A client span of `trace_id` at `index` (wire form), with `dei.count` as given (a string is malformed).
fn client_span(trace_id: &str, n: u64, index: &str, count: Value) -> Value {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    json!({
        "traceId": trace_id,
        "spanId": format!("{n:016x}"),
        "name": "s",
        "kind": 3,
        "startTimeUnixNano": (now + n).to_string(),
        "endTimeUnixNano": (now + 1_000 + n).to_string(),
        "attributes": [
            {"key": "dei.index", "value": {"stringValue": index}},
            {"key": "dei.signature", "value": {"stringValue": "a.B/C"}},
            {"key": "dei.count", "value": count},
        ],
    })
}

/// A server span of `trace_id` at `index` (wire form), served for a client span (`parent`) that never arrives.
fn orphan_server_span(trace_id: &str, n: u64, index: &str) -> Value {
    let mut span = client_span(trace_id, n, index, json!({"intValue": "1"}));
    span["kind"] = json!(2);
    span["parentSpanId"] = json!(format!("{:016x}", 1000 + n));
    span
}

/// `orphans` server spans whose client spans never arrive (first, so that they are recorded under a cap),
/// `rpcs` well-formed client spans (distinct indexes) and `malformed` ones, of the execution's trace.
fn spans(trace_id: &str, orphans: usize, rpcs: usize, malformed: usize) -> Vec<Value> {
    let trace_id = trace_id.to_string();
    let orphans = (0..orphans as u64).map(|n| orphan_server_span(&trace_id, 200 + n, &format!("1.CAAAAAAAAA{n}1")));
    let good = "AEIMQUYcgkosw048"
        .chars()
        .take(rpcs)
        .zip(1u64..)
        .map(|(last, n)| client_span(&trace_id, n, &format!("1.AAAAAAAAAA{last}1"), json!({"intValue": "1"})));
    let bad =
        (0..malformed as u64).map(|n| client_span(&trace_id, 100 + n, "1.BAAAAAAAAAA1", json!({"stringValue": "x"})));
    orphans.chain(good).chain(bad).collect()
}

/// A stream's client span of `trace_id` (a preliminary index) with a `dei.stream.message` event for each of
/// its `messages` messages (each message's final index distinct), and no other span.
fn stream_spans(trace_id: &str, messages: u32) -> Vec<Value> {
    let prelim: Index = "1.AAAAAAAAAAE1~".parse().expect("a preliminary index");
    let mut stream = client_span(trace_id, 1, &prelim.encode(), json!({"intValue": "1"}));
    stream["attributes"]
        .as_array_mut()
        .expect("attributes")
        .push(json!({"key": "dei.preliminary", "value": {"boolValue": true}}));
    let start = stream["startTimeUnixNano"].clone();
    stream["events"] = (1..=messages)
        .map(|k| {
            json!({
                "name": "dei.stream.message",
                "timeUnixNano": start,
                "attributes": [
                    {"key": "dei.preliminary_index", "value": {"stringValue": prelim.stream_message(k).encode()}},
                    {"key": "dei.index", "value": {"stringValue": format!("1.BBBBBBBBBB{}1", ["A", "E", "I", "M"][k as usize % 4])}},
                    {"key": "dei.message", "value": {"intValue": k.to_string()}},
                ],
            })
        })
        .collect();
    vec![stream]
}

/// Exports `spans` to the collector's OTLP/HTTP receiver at `http`.
async fn export(http: std::net::SocketAddr, spans: Vec<Value>) -> Result<(), String> {
    let body = json!({"resourceSpans": [{
        "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "test"}}]},
        "scopeSpans": [{"spans": spans}],
    }]});
    let r = reqwest::Client::new()
        .post(format!("http://{http}/v1/traces"))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .map_err(|e| e.to_string())?;
    if r.status().is_success() {
        Ok(())
    } else {
        Err(format!(
            "export: {}: {}",
            r.status(),
            r.text().await.unwrap_or_default()
        ))
    }
}

/// Runs a search with no faults (one execution) whose test exports `rpcs` good and `malformed` bad spans.
async fn search(max_occurrences: usize, rpcs: usize, malformed: usize) -> Report {
    search_with_orphans(max_occurrences, 0, rpcs, malformed).await
}

/// [`search`], the test also exporting `orphans` server spans whose client spans never arrive.
async fn search_with_orphans(max_occurrences: usize, orphans: usize, rpcs: usize, malformed: usize) -> Report {
    search_exporting(max_occurrences, move |trace_id| {
        spans(trace_id, orphans, rpcs, malformed)
    })
    .await
}

/// Runs a search with no faults (one execution) whose test exports the spans `make` gives for its trace.
async fn search_exporting(
    max_occurrences: usize,
    make: impl Fn(&str) -> Vec<Value> + Clone + Send + Sync + 'static,
) -> Report {
    let mut config = ServerConfig::ephemeral();
    config.state.traces.max_occurrences = max_occurrences;
    let collector = server::start(config).await.expect("collector");
    let http = collector.http_addr;
    let test = test_fn("incomplete", move |run: dei_sfit::TestRun| {
        let spans = make(&run.context().span().span_context().trace_id().to_string());
        async move { export(http, spans).await }
    });
    let source = CollectorSpans::new(format!("http://{}", collector.api_addr)).with_settle(SettleConfig {
        quiet: Duration::from_millis(150),
        poll: Duration::from_millis(20),
        timeout: Duration::from_secs(3),
    });
    let options = SearchOptions {
        catalog: FaultCatalog::none(),
        ..SearchOptions::default()
    };
    let report = Search::new(options, source).run(&test).await.expect("search");
    collector.shutdown().await;
    report
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_the_collector_dropped_past_its_cap_or_skipped_are_counted_on_the_execution() {
    // 5 RPCs past a cap of 3, and one span whose DEI data is skipped
    let report = search(3, 5, 1).await;
    assert_eq!(report.executions.len(), 1, "{report}");
    let e = &report.executions[0];
    assert!(e.outcome.passed(), "{:?}\n{report}", e.outcome);
    assert_eq!(e.rpcs.len(), 3, "the cap's worth of RPCs: {:#?}", e.rpcs);
    assert_eq!(e.malformed_spans, 1, "the span whose DEI data was skipped\n{report}");
    assert_eq!(e.spans_dropped, 2, "the spans dropped past the cap\n{report}");
    // in the JSON report and the JUnit file too
    let json = serde_json::to_value(&report).expect("json");
    assert_eq!(json["executions"][0]["spans_dropped"], 2, "{json:#}");
    let junit = report.to_junit(&dei_sfit::ReplayCommand::Api);
    assert!(
        junit.contains(r#"<property name="dei.spans_dropped" value="2"/>"#)
            && junit.contains(r#"<property name="dei.malformed_spans" value="1"/>"#)
            && junit.contains("2 span(s) or stream message event(s) not recorded where the span source reads them")
            && junit.contains("1 span(s) with malformed dei.* attributes"),
        "{junit}"
    );
    // incomplete, not unsettled: its spans all arrived, the collector did not record some of them
    assert_eq!(e.unsettled, None, "{report}");
    assert_eq!(report.unsettled_executions, 0);
    assert_eq!(report.incomplete_executions, 1);
    assert_eq!(report.incomplete().len(), 1);
    let incomplete = e.incomplete().unwrap_or_default();
    assert!(
        incomplete.starts_with("incomplete: the collector dropped 2 span(s)")
            && incomplete.contains("past its cap of RPCs per trace"),
        "{incomplete:?}"
    );
    assert!(
        report.warnings.iter().any(|w| w.contains("malformed dei.* attributes")),
        "{:?}",
        report.warnings
    );
    assert!(
        report.warnings.iter().any(|w| w
            .starts_with("1 execution(s) incomplete, 2 span(s) or stream message event(s) dropped by the collector")),
        "{:?}",
        report.warnings
    );
    assert!(
        !report.warnings.iter().any(|w| w.contains("did not settle")),
        "{:?}",
        report.warnings
    );
    assert_eq!(json["incomplete_executions"], 1, "{json:#}");
    // the text summary, the JUnit file and the exhaustive check say so, and it does not pass quietly
    let text = report.to_string();
    assert!(
        text.contains("0 unsettled, 1 incomplete")
            && text.contains("INCOMPLETE (2 span(s) or stream message event(s) dropped by the collector)")
            && text.contains("WARNING: 1 execution(s) incomplete")
            && !text.contains("UNSETTLED"),
        "{text}"
    );
    assert!(
        junit.contains(r#"<error type="incomplete" message="incomplete: the collector dropped 2 span(s)"#)
            && junit.matches("<error type=\"incomplete\"").count() == 1
            // the execution's error and the search's (no fault catalog: nothing injected)
            && junit.contains(r#"errors="2""#)
            && junit.contains(r#"<property name="dei.incomplete" value="1"/>"#)
            && junit.contains(r#"<property name="dei.unsettled" value="0"/>"#),
        "{junit}"
    );
    let check = dei_sfit::check_exhaustive(&report, &dei_sfit::ReplayCommand::Api)
        .expect_err("an incomplete execution is not a clean exhaustive pass");
    assert!(
        check.contains("execution #1: its observation is incomplete: the collector dropped 2 span(s)"),
        "{check}"
    );
    assert_eq!(e.traces.len(), 1, "the execution names its trace");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trace_whose_only_span_was_skipped_settles_with_the_span_counted_as_malformed() {
    // the collector knows the trace by the skipped span alone: the execution settles (no timeout) and counts it
    let report = search(3, 0, 1).await;
    let e = &report.executions[0];
    assert_eq!(e.unsettled, None, "{report}");
    assert_eq!(e.malformed_spans, 1, "{report}");
    assert!(e.rpcs.is_empty(), "{:#?}", e.rpcs);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trace_with_dropped_spans_still_waits_for_what_else_is_missing_and_is_unsettled_as_well() {
    // one RPC whose client span never arrives, then 4 RPCs past a cap of 3: 2 spans dropped, and the
    // recorded RPC without a client span is missing however quiet the trace is
    let started = std::time::Instant::now();
    let report = search_with_orphans(3, 1, 4, 0).await;
    let e = &report.executions[0];
    assert_eq!(e.spans_dropped, 2, "{report}");
    assert!(e.incomplete().is_some(), "{report}");
    // the source waited for the missing client span until its timeout (3 s), not only until the trace was quiet
    assert!(
        started.elapsed() >= Duration::from_secs(3),
        "{:?}\n{report}",
        started.elapsed()
    );
    let unsettled = e.unsettled.as_deref().unwrap_or_default();
    assert!(
        unsettled.contains("1 of 3 RPC(s) have no client span"),
        "{unsettled:?}\n{report}"
    );
    assert_eq!(
        (report.unsettled_executions, report.incomplete_executions),
        (1, 1),
        "{report}"
    );
    let text = report.to_string();
    assert!(
        text.contains("1 unsettled, 1 incomplete") && text.contains("UNSETTLED") && text.contains("INCOMPLETE"),
        "{text}"
    );
    // JUnit: one error, unsettled, whose text says it is incomplete too
    let junit = report.to_junit(&dei_sfit::ReplayCommand::Api);
    assert!(
        junit.contains(r#"<error type="unsettled""#)
            && !junit.contains(r#"<error type="incomplete""#)
            && junit.contains("incomplete: the collector dropped 2"),
        "{junit}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_message_events_the_collector_dropped_are_counted_and_named_as_such() {
    // the collector records a stream's message events before the stream's own span: with a cap of 2, the
    // first two messages fill it, and it drops the third message's event and the stream's span, counting both
    // in occurrences_dropped (the messages recorded are no RPCs of the execution without their stream)
    let report = search_exporting(2, |trace_id| stream_spans(trace_id, 3)).await;
    let e = &report.executions[0];
    assert_eq!((e.spans_dropped, e.rpcs.len()), (2, 0), "{report}");
    assert_eq!(e.unsettled, None, "{report}");
    let what = "2 span(s) or stream message event(s)";
    let incomplete = e.incomplete().unwrap_or_default();
    assert!(
        incomplete.starts_with(&format!("incomplete: the collector dropped {what} ")),
        "{incomplete:?}"
    );
    assert!(
        report
            .warnings
            .iter()
            .any(|w| w.starts_with(&format!("1 execution(s) incomplete, {what} dropped by the collector"))),
        "{:?}",
        report.warnings
    );
    let text = report.to_string();
    assert!(
        text.contains(&format!("INCOMPLETE ({what} dropped by the collector)"))
            && text.contains(&format!("WARNING: 1 execution(s) incomplete, {what} dropped")),
        "{text}"
    );
    let junit = report.to_junit(&dei_sfit::ReplayCommand::Api);
    assert!(
        junit.contains(&format!(
            r#"<error type="incomplete" message="incomplete: the collector dropped {what} "#
        )) && junit.contains(&format!("{what} not recorded where the span source reads them")),
        "{junit}"
    );
}
