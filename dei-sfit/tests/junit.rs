//! JUnit XML reports (issue #22, part 2): one test case per execution named by its faults, failures with the
//! assertion, the injected faults and the replay command, executions with unreached faults skipped with the
//! reason; validated against the Jenkins xUnit plugin's junit-10.xsd (vendored in tests/junit-schema/) with
//! Python's `xmlschema`, and read back with it.
//!
//! Without python3 and `xmlschema` the validating tests say loudly that they did not validate; with
//! `DEI_REQUIRE_INTEROP=1` or `CI=true` they fail instead.

use dei_propagator::Fault;
use dei_sfit::model::Caller;
use dei_sfit::{FaultCatalog, Recorder, ReplayCommand, Report, Search, SearchOptions, Strategy, test_fn};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

const SCHEMA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/junit-schema/junit-10.xsd");

/// Validates `xml_path` against the schema and returns its test cases as JSON (name, failure and skipped
/// elements), read with `xmlschema`; `None` when the tools are missing and not required.
const VALIDATE: &str = r#"
import json, sys
import xmlschema
schema = xmlschema.XMLSchema(sys.argv[1])
errors = [str(e.reason) for e in schema.iter_errors(sys.argv[2])]
if errors:
    print(json.dumps({"valid": False, "errors": errors}))
    sys.exit(0)
import xml.etree.ElementTree as ET
root = ET.parse(sys.argv[2]).getroot()
suites = []
for s in root.iter("testsuite"):
    cases = []
    for c in s.iter("testcase"):
        f = c.find("failure")
        k = c.find("skipped")
        r = c.find("error")
        cases.append({
            "error": None if r is None else {"message": r.get("message"), "type": r.get("type"), "text": r.text},
            "name": c.get("name"),
            "classname": c.get("classname"),
            "failure": None if f is None else {"message": f.get("message"), "type": f.get("type"), "text": f.text},
            "skipped": None if k is None else {"message": k.get("message"), "text": k.text},
            "out": c.findtext("system-out"),
        })
    suites.append({"name": s.get("name"), "tests": s.get("tests"), "failures": s.get("failures"),
                   "errors": s.get("errors"),
                   "out": s.findtext("system-out"),
                   "skipped": s.get("skipped"), "cases": cases,
                   "properties": {p.get("name"): p.get("value") for p in s.iter("property")}})
print(json.dumps({"valid": True, "suites": suites, "errors": root.get("errors"), "tests": root.get("tests")}))
"#;

fn required() -> bool {
    std::env::var("DEI_REQUIRE_INTEROP").is_ok_and(|v| v == "1") || std::env::var("CI").is_ok_and(|v| v == "true")
}

fn validate(xml: &Path) -> Option<Value> {
    let out = match Command::new("python3")
        .arg("-c")
        .arg(VALIDATE)
        .arg(SCHEMA)
        .arg(xml)
        .output()
    {
        Ok(o) => o,
        Err(e) => {
            let msg = format!("python3 cannot run ({e}): the JUnit report was NOT validated");
            assert!(
                !required(),
                "{msg}, and validation is required (DEI_REQUIRE_INTEROP=1 or CI=true)"
            );
            eprintln!("!!!!!!!!!! {msg} !!!!!!!!!!");
            return None;
        }
    };
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        if stderr.contains("No module named 'xmlschema'") {
            let msg =
                "python3 has no `xmlschema` (python3 -m pip install xmlschema): the JUnit report was NOT validated";
            assert!(
                !required(),
                "{msg}, and validation is required (DEI_REQUIRE_INTEROP=1 or CI=true)"
            );
            eprintln!("!!!!!!!!!! {msg} !!!!!!!!!!");
            return None;
        }
        panic!("the validator failed: {stderr}");
    }
    Some(serde_json::from_slice(&out.stdout).expect("the validator prints JSON"))
}

fn temp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("dei-sfit-junit-{}-{name}", std::process::id()))
}

/// Fig. 1 with an assertion that does not hold when `World`'s call fails (its fallback is wrong), and with a
/// third call whose payload drifts in every run after the fifth: plans on it cannot be carried out.
fn fig1_with_a_bug(recorder: &Recorder) -> impl dei_sfit::FunctionalTest + use<> {
    let r = recorder.clone();
    let runs = Arc::new(AtomicUsize::new(0));
    // serial-only: the drift counts runs, state shared between executions
    test_fn("fig1 <bug & drift>", move |run| {
        let a = Caller::root(&run, &r);
        let n = runs.fetch_add(1, Ordering::SeqCst);
        async move {
            let hello = a
                .call("B/echo", "Hello", &[3, 10], |_| async { Ok("Hello") })
                .await
                .unwrap_or("Hello");
            let world = a
                .call("B/echo", "World", &[4, 10], |_| async { Ok("World") })
                .await
                .unwrap_or("Wrld");
            let drift = if n < 1 {
                "stable".to_string()
            } else {
                format!("drift {n}")
            };
            let _ = a.call("C/log", &drift, &[5, 11], |_| async { Ok(()) }).await;
            if format!("{hello} {world}") == "Hello World" {
                Ok(())
            } else {
                Err(format!("expected \"Hello World\", got \"{hello} {world}\" <&>"))
            }
        }
    })
    .serial()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_junit_report_is_valid_and_carries_failures_skips_and_replay_commands() {
    let rec = Recorder::new();
    let test = fig1_with_a_bug(&rec);
    let options = SearchOptions {
        catalog: FaultCatalog::single(Fault::Connection),
        strategy: Strategy::BreadthFirst,
        max_executions: Some(12),
        parallelism: 4,
        ..SearchOptions::default()
    };
    let report = Search::new(options, rec.clone()).run(&test).await.expect("search");
    let failing: Vec<_> = report
        .failing()
        .into_iter()
        .filter(|e| e.unreached.is_empty())
        .collect();
    let unreached = report.unreached();
    assert!(!failing.is_empty() && !unreached.is_empty(), "{report}");

    let replay = ReplayCommand::Template("cargo run --example fig1 -- --replay target/sfit/fig1.json {n}".into());
    let path = temp("report.xml");
    report.write_junit(&path, &replay).expect("write");
    let Some(parsed) = validate(&path) else {
        let _ = std::fs::remove_file(&path);
        return;
    };
    let _ = std::fs::remove_file(&path);
    assert_eq!(parsed["valid"], true, "{parsed:#}");
    let suite = &parsed["suites"][0];
    assert_eq!(suite["name"], "sfit: fig1 <bug & drift>");
    // the limit of 12 stops the search with plans pending: one more test case, `search`, with that error
    assert!(report.truncated, "{report}");
    assert_eq!(suite["tests"], (report.executions.len() + 1).to_string());
    assert_eq!(suite["failures"], failing.len().to_string());
    assert_eq!(suite["skipped"], unreached.len().to_string());
    assert_eq!(suite["errors"], "1", "the search did not finish: {suite:#}");
    assert_eq!(
        suite["properties"]["dei.instantiation"],
        report.options.instantiation.name.to_string()
    );
    // the test is serial-only: asked for 4 at once, it ran one at a time, and the file says so
    assert_eq!(suite["properties"]["dei.parallelism"], "4");
    assert_eq!(suite["properties"]["dei.parallelism_used"], "1");
    assert!(
        suite["out"].as_str().is_some_and(|o| o.contains("serial-only")),
        "{suite:#}"
    );
    let cases = suite["cases"].as_array().expect("cases");
    assert_eq!(cases.len(), report.executions.len() + 1);
    assert_eq!(cases[report.executions.len()]["name"], "search");
    assert!(
        cases[report.executions.len()]["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("execution limit")),
        "{suite:#}"
    );
    for (case, e) in cases.iter().zip(&report.executions) {
        let name = case["name"].as_str().expect("name");
        assert!(name.starts_with(&format!("#{} ", e.number)), "{name}");
        if e.effective.is_empty() && e.unreached.is_empty() {
            assert!(name.ends_with("no faults"), "{name}");
        }
        for p in e.effective.iter().chain(&e.plan) {
            assert!(
                name.contains(&p.index.to_string()) && name.contains(&p.signature),
                "{name}"
            );
        }
        assert_eq!(case["classname"], "sfit.fig1 <bug & drift>");
        if !e.unreached.is_empty() {
            assert!(
                case["failure"].is_null(),
                "a skipped execution is not a failure: {case:#}"
            );
            let skipped = &case["skipped"];
            let message = skipped["message"].as_str().expect("a reason");
            assert!(message.contains("not injected"), "{message}");
            for p in &e.unreached {
                assert!(message.contains(&p.index.to_string()), "{message}");
            }
            let text = skipped["text"].as_str().expect("text");
            assert!(text.contains("did not test its plan"), "{text}");
            assert!(
                text.contains(&format!("--replay target/sfit/fig1.json {}", e.number)),
                "{text}"
            );
        } else if let dei_sfit::TestOutcome::Fail { message } = &e.outcome {
            let failure = &case["failure"];
            assert_eq!(
                failure["message"],
                message.as_str(),
                "the assertion's message, unescaped"
            );
            assert_eq!(failure["type"], "assertion");
            let text = failure["text"].as_str().expect("text");
            assert!(text.contains(&format!("assertion: {message}")), "{text}");
            assert!(text.contains("injected faults:"), "{text}");
            for p in &e.effective {
                assert!(
                    text.contains(&format!("{}@{}:{}", p.signature, p.index, p.fault)),
                    "{text}"
                );
            }
            assert!(
                text.contains(&format!(
                    "replay: cargo run --example fig1 -- --replay target/sfit/fig1.json {}",
                    e.number
                )),
                "{text}"
            );
            assert!(case["skipped"].is_null());
        } else {
            assert!(case["failure"].is_null() && case["skipped"].is_null(), "{case:#}");
        }
    }

    // a report read back from its JSON writes the same JUnit file
    let json = temp("report.json");
    report.save(&json).expect("save");
    let loaded = Report::load(&json).expect("load");
    let _ = std::fs::remove_file(&json);
    assert_eq!(loaded.to_junit(&replay), report.to_junit(&replay));
}

#[test]
fn the_validator_rejects_what_the_schema_forbids() {
    // without this, a validator that accepts everything would pass the test above
    let path = temp("invalid.xml");
    std::fs::write(
        &path,
        r#"<?xml version="1.0" encoding="UTF-8"?><testsuites><testsuite name="x" tests="1"><testcase/></testsuite></testsuites>"#,
    )
    .expect("write");
    let parsed = validate(&path);
    let _ = std::fs::remove_file(&path);
    let Some(parsed) = parsed else { return };
    assert_eq!(parsed["valid"], false, "{parsed:#}");
    let errors = parsed["errors"].to_string();
    assert!(errors.contains("failures") || errors.contains("name"), "{errors}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_that_xml_cannot_carry_is_replaced_and_the_file_stays_valid() {
    let rec = Recorder::new();
    let r = rec.clone();
    let test = test_fn("control \u{1} chars", move |run| {
        let a = Caller::root(&run, &r);
        async move {
            match a.call("B/echo", "x", &[1], |_| async { Ok(()) }).await {
                Ok(()) => Ok(()),
                Err(_) => Err("bell \u{7} and ]]> and \"quotes\"\nsecond line".to_string()),
            }
        }
    });
    let options = SearchOptions {
        catalog: FaultCatalog::single(Fault::Connection),
        ..SearchOptions::default()
    };
    let report = Search::new(options, rec).run(&test).await.expect("search");
    assert_eq!(report.failing().len(), 1, "{report}");
    let xml = report.to_junit(&ReplayCommand::Api);
    assert!(!xml.contains('\u{7}') && !xml.contains('\u{1}'));
    assert!(xml.contains("Search::replay(&amp;test"), "{xml}");
    let path = temp("control.xml");
    std::fs::write(&path, &xml).expect("write");
    let parsed = validate(&path);
    let _ = std::fs::remove_file(&path);
    let Some(parsed) = parsed else { return };
    assert_eq!(parsed["valid"], true, "{parsed:#}");
    let failure = &parsed["suites"][0]["cases"][1]["failure"];
    assert_eq!(failure["message"], "bell \u{FFFD} and ]]> and \"quotes\"\nsecond line");
}

/// A source whose settle step always gives up: every execution's spans are unsettled.
struct NeverSettles(Recorder);

impl dei_sfit::SpanSource for NeverSettles {
    fn begin(&self) -> futures::future::BoxFuture<'_, Result<(), dei_sfit::SourceError>> {
        self.0.begin()
    }
    fn collect(&self) -> futures::future::BoxFuture<'_, Result<dei_sfit::Observation, dei_sfit::SourceError>> {
        self.0.collect()
    }
    fn settle(&self) -> futures::future::BoxFuture<'_, Result<dei_sfit::Settled, dei_sfit::SourceError>> {
        Box::pin(async { Ok(dei_sfit::Settled::TimedOut("1 span never arrived".into())) })
    }
}

/// Writes `report`'s JUnit file, validates it and returns its (only) suite; `None` when not validated.
fn junit_suite(report: &Report, name: &str) -> Option<Value> {
    let path = temp(name);
    report.write_junit(&path, &ReplayCommand::Api).expect("write");
    let parsed = validate(&path);
    let _ = std::fs::remove_file(&path);
    let parsed = parsed?;
    assert_eq!(parsed["valid"], true, "{parsed:#}");
    assert_eq!(parsed["errors"], parsed["suites"][0]["errors"], "{parsed:#}");
    assert_eq!(parsed["tests"], parsed["suites"][0]["tests"], "{parsed:#}");
    Some(parsed["suites"][0].clone())
}

/// The synthetic `search` test case and its error.
fn search_case(suite: &Value) -> &Value {
    let cases = suite["cases"].as_array().expect("cases");
    let search: Vec<&Value> = cases.iter().filter(|c| c["name"] == "search").collect();
    assert_eq!(search.len(), 1, "one `search` test case: {suite:#}");
    search[0]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_the_search_did_not_do_is_an_error_never_green() {
    // nothing injected: a catalog without faults plans none
    let rec = Recorder::new();
    let options = SearchOptions {
        catalog: FaultCatalog::none(),
        ..SearchOptions::default()
    };
    let report = Search::new(options, rec.clone())
        .run(&dei_sfit::model::programs::FIG2.test(&rec))
        .await
        .expect("search");
    assert!(report.nothing_injected && report.failing().is_empty(), "{report}");
    if let Some(suite) = junit_suite(&report, "nothing.xml") {
        assert_eq!(suite["errors"], "1", "{suite:#}");
        assert_eq!(suite["failures"], "0", "{suite:#}");
        assert_eq!(suite["tests"], (report.executions.len() + 1).to_string());
        let error = &search_case(&suite)["error"];
        assert_eq!(error["type"], "search");
        assert!(
            error["message"]
                .as_str()
                .is_some_and(|m| m.contains("nothing injected")),
            "{error:#}"
        );
        assert!(
            error["text"].as_str().is_some_and(|t| t.contains("planned no fault")),
            "{error:#}"
        );
    }

    // truncated: the execution limit stopped the search with plans pending
    let rec = Recorder::new();
    let options = SearchOptions {
        catalog: FaultCatalog::single(Fault::Connection),
        max_executions: Some(2),
        ..SearchOptions::default()
    };
    let report = Search::new(options, rec.clone())
        .run(&dei_sfit::model::programs::FIG2.test(&rec))
        .await
        .expect("search");
    assert!(
        report.truncated && report.pending > 0 && !report.nothing_injected,
        "{report}"
    );
    assert!(report.failing().is_empty(), "{report}");
    if let Some(suite) = junit_suite(&report, "truncated.xml") {
        assert_eq!(suite["errors"], "1", "{suite:#}");
        assert_eq!(suite["tests"], "3", "{suite:#}");
        let error = &search_case(&suite)["error"];
        assert!(
            error["message"].as_str().is_some_and(|m| m.contains("execution limit")),
            "{error:#}"
        );
        let text = error["text"].as_str().expect("text");
        assert!(
            text.contains(&format!("with {} plan(s) pending", report.pending)),
            "{text}"
        );
    }

    // unsettled: every execution's spans did not settle, so each is an error, whatever its verdict
    let rec = Recorder::new();
    let options = SearchOptions {
        catalog: FaultCatalog::single(Fault::Connection),
        ..SearchOptions::default()
    };
    let report = Search::new(options, NeverSettles(rec.clone()))
        .run(&dei_sfit::model::programs::FIG2.test(&rec))
        .await
        .expect("search");
    assert!(report.executions.len() > 1, "{report}");
    assert_eq!(report.unsettled().len(), report.executions.len(), "{report}");
    if let Some(suite) = junit_suite(&report, "unsettled.xml") {
        assert_eq!(suite["errors"], report.executions.len().to_string(), "{suite:#}");
        assert_eq!(suite["tests"], report.executions.len().to_string(), "{suite:#}");
        assert_eq!(suite["skipped"], "0", "{suite:#}");
        for (case, e) in suite["cases"].as_array().expect("cases").iter().zip(&report.executions) {
            let error = &case["error"];
            assert_eq!(error["type"], "unsettled", "{case:#}");
            assert_eq!(
                error["message"], "spans did not settle: 1 span never arrived",
                "{case:#}"
            );
            assert!(
                error["text"]
                    .as_str()
                    .is_some_and(|t| t.contains(&format!(", {}, source)", e.number))),
                "{case:#}"
            );
            assert!(case["failure"].is_null() && case["skipped"].is_null(), "{case:#}");
        }
    }
}

/// A source whose observations lack spans the collector dropped: every execution is incomplete.
struct DropsSpans(Recorder);

impl dei_sfit::SpanSource for DropsSpans {
    fn begin(&self) -> futures::future::BoxFuture<'_, Result<(), dei_sfit::SourceError>> {
        self.0.begin()
    }
    fn collect(&self) -> futures::future::BoxFuture<'_, Result<dei_sfit::Observation, dei_sfit::SourceError>> {
        Box::pin(async {
            let mut obs = self.0.collect().await?;
            obs.spans_dropped = 3;
            Ok(obs)
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_execution_whose_spans_the_collector_dropped_is_an_incomplete_error_never_green() {
    let rec = Recorder::new();
    let options = SearchOptions {
        catalog: FaultCatalog::single(Fault::Connection),
        ..SearchOptions::default()
    };
    let report = Search::new(options, DropsSpans(rec.clone()))
        .run(&dei_sfit::model::programs::FIG2.test(&rec))
        .await
        .expect("search");
    assert!(report.executions.len() > 1, "{report}");
    assert_eq!(report.incomplete().len(), report.executions.len(), "{report}");
    assert!(report.unsettled().is_empty(), "{report}");
    let Some(suite) = junit_suite(&report, "incomplete.xml") else {
        return;
    };
    assert_eq!(suite["errors"], report.executions.len().to_string(), "{suite:#}");
    assert_eq!(
        suite["properties"]["dei.incomplete"],
        report.executions.len().to_string()
    );
    assert_eq!(
        suite["properties"]["dei.spans_dropped"],
        (3 * report.executions.len()).to_string()
    );
    for case in suite["cases"].as_array().expect("cases") {
        let error = &case["error"];
        assert_eq!(error["type"], "incomplete", "{case:#}");
        assert!(
            error["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("incomplete: the collector dropped 3 span(s)")),
            "{case:#}"
        );
        assert!(case["failure"].is_null() && case["skipped"].is_null(), "{case:#}");
    }
}
