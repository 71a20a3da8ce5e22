//! `serve --search-report DIRECTORY`: the collector lists every run's report (program, time, executions,
//! failures), serves any one by id, reads the directory again so that a new run appears, and names the files
//! it could not read instead of skipping them. Also the trace list's filters, refused with a reason when bad.

use dei_collector::server::{self, ServerConfig};
use dei_collector::views::{ReportList, TraceList};
use std::net::SocketAddr;
use std::path::Path;

async fn get(addr: SocketAddr, path: &str) -> (u16, serde_json::Value) {
    let resp = reqwest::get(format!("http://{addr}{path}")).await.expect("a response");
    let status = resp.status().as_u16();
    let text = resp.text().await.expect("a body");
    (
        status,
        serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text)),
    )
}

fn report(dir: &Path, id: &str, verdicts: &[&str]) {
    let executions: Vec<serde_json::Value> = verdicts
        .iter()
        .enumerate()
        .map(|(i, v)| serde_json::json!({"number": i + 1, "outcome": {"verdict": v}, "plan": []}))
        .collect();
    let path = dir.join(id);
    std::fs::create_dir_all(path.parent().expect("a folder")).expect("mkdir");
    std::fs::write(
        path,
        serde_json::json!({"test": id, "executions": executions}).to_string(),
    )
    .expect("write");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_report_directory_lists_every_run_and_serves_each() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    report(dir.path(), "demo/2030-01-01T00-00-00.000Z.json", &["pass", "fail"]);
    report(dir.path(), "fig2_loops/2030-01-02T00-00-00.000Z.json", &["pass"]);
    std::fs::write(
        dir.path().join("demo/2030-01-03T00-00-00.000Z.json"),
        "{\"executions\": [",
    )
    .expect("write");
    let mut config = ServerConfig::ephemeral();
    config.ingest.search_report = Some(dir.path().to_path_buf());
    let r = server::start(config).await.expect("start the collector");

    let (code, body) = get(r.api_addr, "/api/v1/search/reports").await;
    assert_eq!(code, 200, "{body}");
    let list: ReportList = serde_json::from_value(body).expect("the API's own type");
    assert!(list.directory);
    let got: Vec<(&str, &str, &str, usize, usize)> = list
        .reports
        .iter()
        .map(|e| {
            (
                e.id.as_str(),
                e.program.as_str(),
                e.time.as_str(),
                e.executions,
                e.failures,
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            (
                "fig2_loops/2030-01-02T00-00-00.000Z.json",
                "fig2_loops",
                "2030-01-02 00:00:00.000",
                1,
                0
            ),
            (
                "demo/2030-01-01T00-00-00.000Z.json",
                "demo",
                "2030-01-01 00:00:00.000",
                2,
                1
            ),
        ]
    );
    assert_eq!(list.problems.len(), 1, "{:?}", list.problems);
    assert_eq!(list.problems[0].file, "demo/2030-01-03T00-00-00.000Z.json");
    assert!(list.problems[0].error.starts_with("not JSON"), "{:?}", list.problems);

    // any one by id; without an id the newest
    let (code, one) = get(r.api_addr, "/api/v1/search?report=demo/2030-01-01T00-00-00.000Z.json").await;
    assert_eq!(
        (code, &one["test"]),
        (200, &serde_json::json!("demo/2030-01-01T00-00-00.000Z.json"))
    );
    let (code, newest) = get(r.api_addr, "/api/v1/search").await;
    assert_eq!(
        (code, &newest["test"]),
        (200, &serde_json::json!("fig2_loops/2030-01-02T00-00-00.000Z.json"))
    );
    // the malformed file is an error with its reason, an id not listed is unknown
    let (code, body) = get(r.api_addr, "/api/v1/search?report=demo/2030-01-03T00-00-00.000Z.json").await;
    assert_eq!(code, 422, "{body}");
    assert!(body["error"].as_str().is_some_and(|e| e.contains("not JSON")), "{body}");
    for id in ["../../etc/passwd", "demo", "demo/latest.json"] {
        let (code, body) = get(r.api_addr, &format!("/api/v1/search?report={id}")).await;
        assert_eq!(code, 404, "{id}: {body}");
    }

    // a new run appears without a restart
    report(
        dir.path(),
        "demo/2030-01-04T00-00-00.000Z.json",
        &["fail", "fail", "pass"],
    );
    let (_, body) = get(r.api_addr, "/api/v1/search/reports").await;
    let list: ReportList = serde_json::from_value(body).expect("the list");
    assert_eq!(list.reports[0].id, "demo/2030-01-04T00-00-00.000Z.json");
    assert_eq!((list.reports[0].executions, list.reports[0].failures), (3, 2));

    // the trace list's filters: a bad one is a 400 with its reason; a good one a bounded list
    let (code, body) = get(r.api_addr, "/api/v1/traces?status=slow").await;
    assert_eq!(code, 400, "{body}");
    assert!(
        body["error"].as_str().is_some_and(|e| e.contains("unknown status")),
        "{body}"
    );
    let (code, body) = get(r.api_addr, "/api/v1/traces?status=fault&min_duration_ms=1&limit=5").await;
    assert_eq!(code, 200, "{body}");
    let traces: TraceList = serde_json::from_value(body).expect("the API's own type");
    assert_eq!((traces.matched, traces.limit), (0, 5));
    r.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_report_the_search_endpoints_say_so() {
    let r = server::start(ServerConfig::ephemeral())
        .await
        .expect("start the collector");
    for path in ["/api/v1/search", "/api/v1/search/reports"] {
        let (code, body) = get(r.api_addr, path).await;
        assert_eq!(code, 404, "{body}");
        assert!(
            body["error"].as_str().is_some_and(|e| e.contains("--search-report")),
            "{body}"
        );
    }
    r.shutdown().await;
}
