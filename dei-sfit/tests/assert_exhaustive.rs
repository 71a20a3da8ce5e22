//! `Search::assert_exhaustive` (issue #22, part 2): a failing search inside `cargo test` fails the test with
//! one readable block per failing execution (faults, assertion, replay command), and the replay command
//! works: this test binary is run again with `DEI_SFIT_REPLAY=N` for the one test, as the command says.

use dei_propagator::Fault;
use dei_sfit::model::{Caller, programs};
use dei_sfit::{FaultCatalog, Recorder, Report, Search, SearchOptions, check_exhaustive, test_fn};
use futures::FutureExt as _;
use std::panic::AssertUnwindSafe;
use std::process::Command;

/// Fig. 1 named `name`, whose fallback for World's call answers `world_fallback`: with `""` (a wrong fallback)
/// the executions that fail World's call fail the test; with `"World"` every execution passes.
fn fig1(name: &'static str, world_fallback: &'static str, rec: &Recorder) -> impl dei_sfit::FunctionalTest + use<> {
    let r = rec.clone();
    test_fn(name, move |run| {
        let a = Caller::root(&run, &r);
        async move {
            let hello = a
                .call("B/echo", "Hello", &[3, 10], |_| async { Ok("Hello") })
                .await
                .unwrap_or("Hello");
            let world = a
                .call("B/echo", "World", &[4, 10], |_| async { Ok("World") })
                .await
                .unwrap_or(world_fallback);
            if format!("{hello} {world}") == "Hello World" {
                Ok(())
            } else {
                Err(format!(
                    "expected \"Hello World\", got {:?}",
                    format!("{hello} {world}")
                ))
            }
        }
    })
}

/// Fig. 1 where World's fallback is wrong: the executions that fail World's call fail the test.
fn buggy_fig1(rec: &Recorder) -> impl dei_sfit::FunctionalTest + use<> {
    fig1("buggy-fig1", "", rec)
}

fn options() -> SearchOptions {
    SearchOptions {
        catalog: FaultCatalog::single(Fault::Connection),
        ..SearchOptions::default()
    }
}

fn panic_text(p: Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

/// Runs this test binary's test `name` alone with `DEI_SFIT_REPLAY=n`: what the printed replay command does,
/// minus cargo's build.
fn rerun(name: &str, n: usize) -> (bool, String) {
    let out = Command::new(std::env::current_exe().expect("test binary"))
        .args(["--exact", name, "--nocapture", "--test-threads", "1"])
        .env("DEI_SFIT_REPLAY", n.to_string())
        .output()
        .expect("rerun the test binary");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_search_fails_the_test_with_one_block_per_failing_execution() {
    let rec = Recorder::new();
    let test = buggy_fig1(&rec);
    let search = Search::new(options(), rec);
    if std::env::var("DEI_SFIT_REPLAY").is_ok() {
        // the rerun the replay command makes: replay that one execution (panics when it fails)
        search.assert_exhaustive(&test).await;
        return;
    }
    let caught = AssertUnwindSafe(search.assert_exhaustive(&test)).catch_unwind().await;
    let text = panic_text(caught.expect_err("a failing search fails the test"));
    eprintln!("what the test's failure prints:\n{text}");
    // {World} and {Hello, World} fail: two blocks, each with its faults, assertion and replay command
    assert!(text.contains("sfit: buggy-fig1: 2 of 4 execution(s) failed"), "{text}");
    let report = Report::load(dei_sfit::assert::report_path("buggy-fig1")).expect("the report was saved");
    let failing = report.failing();
    assert_eq!(failing.len(), 2);
    for e in &failing {
        let header = format!("execution #{} FAILED: ", e.number);
        let block = text
            .split("\n\n")
            .find(|b| b.contains(&header))
            .unwrap_or_else(|| panic!("no block for #{}: {text}", e.number));
        for p in &e.effective {
            assert!(block.contains(&format!("B/echo@{}:{}", p.index, p.fault)), "{block}");
        }
        assert!(
            block.contains("assertion: expected \"Hello World\", got \"Hello \""),
            "{block}"
        );
        let replay = format!(
            "replay: DEI_SFIT_REPLAY={} cargo test -p dei-sfit --test assert_exhaustive -- --exact \
             a_failing_search_fails_the_test_with_one_block_per_failing_execution",
            e.number
        );
        assert!(block.contains(&replay), "{block}");
    }
    assert!(text.contains("report: "), "{text}");

    // the replay command reruns exactly that execution: a failing one fails again, with its block ...
    let name = "a_failing_search_fails_the_test_with_one_block_per_failing_execution";
    let (ok, out) = rerun(name, failing[0].number);
    assert!(!ok, "{out}");
    assert!(
        out.contains(&format!("replayed execution #{} FAILED", failing[0].number)),
        "{out}"
    );
    // ... and a passing one passes
    let passing = report
        .executions
        .iter()
        .find(|e| e.outcome.passed())
        .expect("a passing execution");
    let (ok, out) = rerun(name, passing.number);
    assert!(ok, "{out}");
    assert!(
        out.contains(&format!("replayed execution #{}: pass", passing.number)),
        "{out}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_search_returns_its_report() {
    let rec = Recorder::new();
    let p = programs::FIG2;
    let options = SearchOptions {
        catalog: p.catalog(),
        ..SearchOptions::default()
    };
    let report = Search::new(options, rec.clone()).assert_exhaustive(&p.test(&rec)).await;
    assert_eq!(report.executions.len(), 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_search_that_injected_nothing_or_stopped_early_is_not_exhaustive() {
    let rec = Recorder::new();
    let p = programs::FIG2;
    let test = p.test(&rec);
    let nothing = SearchOptions {
        catalog: FaultCatalog::none(),
        ..SearchOptions::default()
    };
    let report = Search::new(nothing, rec.clone()).run(&test).await.expect("search");
    let err = check_exhaustive(&report, &dei_sfit::ReplayCommand::Api).expect_err("nothing injected");
    assert!(err.contains("planned no fault"), "{err}");
    let limited = SearchOptions {
        catalog: p.catalog(),
        max_executions: Some(2),
        ..SearchOptions::default()
    };
    let report = Search::new(limited, rec).run(&test).await.expect("search");
    let err = check_exhaustive(&report, &dei_sfit::ReplayCommand::Api).expect_err("truncated");
    assert!(err.contains("the fault space was not exhausted"), "{err}");
    // a reader of the JSON's warnings alone sees it too, and so does the terminal
    let json: serde_json::Value = serde_json::from_str(&report.to_json().expect("json")).expect("parse");
    let warnings = json["warnings"].as_array().expect("warnings");
    assert!(
        warnings.iter().any(|w| w.as_str().is_some_and(|w| w
            .starts_with("stopped at the execution limit (2 execution(s)) with ")
            && w.contains("the fault space was not exhausted"))),
        "{json}"
    );
    let text = report.to_string();
    assert!(text.contains("WARNING: stopped at the execution limit"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_search_whose_report_cannot_be_saved_fails_the_test() {
    let rec = Recorder::new();
    // Fig. 1 with correct fallbacks: every execution passes
    let test = fig1("clean-fig1-unsavable-report", "World", &rec);
    // a directory where the report should go: the report cannot be renamed over it
    let path = dei_sfit::assert::report_path("clean-fig1-unsavable-report");
    let _ = std::fs::remove_file(&path);
    std::fs::create_dir_all(&path).expect("a directory in the report's place");
    let search = Search::new(options(), rec);
    let result = AssertUnwindSafe(search.assert_exhaustive(&test)).catch_unwind().await;
    let _ = std::fs::remove_dir(&path);
    let text = panic_text(result.expect_err("a report that could not be saved fails the test"));
    assert!(
        text.contains("exhaustive and clean")
            && text.contains("could not be saved to")
            && text.contains("replays need it"),
        "{text}"
    );
}
