//! The analyses on the demo's own data, read from the running demo's API as a user's browser reads them.
//!
//! An exhaustive fault search runs each execution under a different fault plan, so calls vanish between
//! executions by design. None of that may read as a circuit breaker (issue #20 §5): the collector learns each
//! trace's plan from `dei.fault.plan` and does not count a planned trace's absences.

mod built_examples;
use built_examples::example;

use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

/// The demo, serving its web view until dropped.
struct Demo {
    child: Child,
    api: String,
    executions: usize,
}

impl Drop for Demo {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(program: &str) -> Demo {
    let dir =
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("demo-analyses-{}-{program}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a working directory");
    let mut child = Command::new(example("demo"))
        .args(["--program", program])
        .current_dir(&dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the demo");
    let stdout = child.stdout.take().expect("the demo's stdout");
    let mut demo = Demo {
        child,
        api: String::new(),
        executions: 0,
    };
    let mut printed = String::new();
    for line in BufReader::new(stdout).lines() {
        let line = line.expect("the demo's output");
        printed.push_str(&line);
        printed.push('\n');
        if let Some(n) = line.strip_prefix("executions:") {
            demo.executions = n.trim().parse().expect("a count of executions");
        }
        if let Some(url) = line.strip_prefix("web view:") {
            let url = url.split_whitespace().next().expect("the web view's URL");
            demo.api = url.trim_end_matches("/ui/").to_string();
            return demo;
        }
    }
    panic!("{program}: the demo ended without serving its web view:\n{printed}");
}

async fn get(demo: &Demo, path: &str) -> Value {
    let url = format!("{}{path}", demo.api);
    let response = reqwest::get(&url).await.unwrap_or_else(|e| panic!("GET {url}: {e}"));
    assert!(response.status().is_success(), "GET {url}: {}", response.status());
    let body = response.bytes().await.unwrap_or_else(|e| panic!("GET {url}: {e}"));
    serde_json::from_slice(&body).unwrap_or_else(|e| panic!("GET {url}: not JSON: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_search_shows_no_false_circuit_breaker() {
    for program in ["cinema-3", "cinema-9", "cinema-10"] {
        let demo = start(program);
        // the premise: executions after the first ran under fault plans and lost calls (an analysis blind
        // to plans reads those absences as breakers: this test fails at such a collector)
        assert!(demo.executions > 1, "{program}: the search ran faulted executions");
        let traces = get(&demo, "/api/v1/traces").await;
        let retained = traces["retained"].as_u64().expect("the trace list's retained count");
        assert!(
            retained >= demo.executions as u64,
            "{program}: one trace per execution at least ({retained} traces, {} executions)",
            demo.executions
        );
        let faulted = traces["traces"]
            .as_array()
            .expect("the trace list")
            .iter()
            .filter(|t| t["faults"].as_u64().unwrap_or(0) > 0)
            .count();
        assert!(faulted > 0, "{program}: traces with injected faults: {traces}");

        let breakers = get(&demo, "/api/v1/analyses/circuit-breakers").await;
        assert_eq!(
            breakers,
            Value::Array(vec![]),
            "{program}: no breaker in a program that has none"
        );
    }
}
