//! Replaying a saved report with the corpus examples' real binaries (`--replay FILE N`): a faithful replay
//! injects every planned fault and exits by the test's verdict; a plan whose indexes do not occur is never a
//! pass: exit 3, naming the faults and the likely causes, unless `--allow-unreached`, which still reports
//! them; a report of another test is refused: exit 2, naming both tests.
//!
//! The examples are built by `cargo test` (and `cargo build --examples`) next to the test executable's
//! folder: `target/<profile>/examples/NAME`.

mod built_examples;
use built_examples::example;

use dei_propagator::{Element, ElementDigest, FaultPlan, Index};
use dei_sfit::Report;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A fresh directory for one test's files.
fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("dei-replay-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

fn run(example_path: &Path, args: &[&str]) -> Output {
    Command::new(example_path)
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run the example")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Searches with `name` and returns its saved report.
fn search(name: &str, dir: &Path) -> (PathBuf, Report) {
    let path = dir.join(format!("{name}.json"));
    let out = run(
        &example(name),
        &["--quiet", "--json", path.to_str().expect("utf-8 path")],
    );
    assert!(out.status.success(), "{name}: {}", text(&out.stderr));
    let report = Report::load(&path).expect("the report");
    (path, report)
}

/// Replays execution `n` of `report` and checks that every planned fault was injected; returns the exit code.
fn faithful_replay(name: &str, report_path: &Path, report: &Report, n: usize) -> i32 {
    let planned = report
        .executions
        .iter()
        .find(|e| e.number == n)
        .expect("execution")
        .plan
        .len();
    let out = run(
        &example(name),
        &["--replay", report_path.to_str().expect("utf-8 path"), &n.to_string()],
    );
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains(&format!("{planned} of {planned} planned fault(s) injected")),
        "{name} #{n}: {stdout}{}",
        text(&out.stderr)
    );
    assert_eq!(stdout.matches("  injected ").count(), planned, "{stdout}");
    assert!(!stdout.contains("NOT injected"), "{stdout}");
    out.status.code().expect("exit code")
}

#[test]
fn replays_inject_every_planned_fault_and_exit_by_the_verdict() {
    let d = dir("faithful");
    // Fig. 2: every execution passes (fallbacks); #3 plans two faults (the reproduction)
    let (path, report) = search("fig2_loops", &d);
    assert!(report.failing().is_empty(), "{report}");
    assert_eq!(
        (report.unreached_executions, report.unsettled_executions),
        (0, 0),
        "{report}"
    );
    let two = report
        .executions
        .iter()
        .find(|e| e.plan.len() == 2)
        .expect("a two-fault plan")
        .number;
    for n in [1, two] {
        assert_eq!(faithful_replay("fig2_loops", &path, &report, n), 0, "fig2 #{n}");
    }
    // the same report given to another test's replay: refused before the test runs (exit 2), naming both tests
    let out = run(
        &example("cinema10"),
        &["--replay", path.to_str().expect("utf-8 path"), "1"],
    );
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(2), "{stdout}{stderr}");
    assert!(
        stderr.contains("written by test `fig2`") && stderr.contains("`cinema-10`"),
        "{stderr}"
    );
    assert!(stdout.is_empty(), "cinema10 ran fig2's plan: {stdout}");
    // Fig. 5: failing the stream or a message fails the test; its replay fails the same way (exit 1), with
    // the whole plan injected
    let (path, report) = search("fig5_streaming", &d);
    assert_eq!(
        (report.unreached_executions, report.unsettled_executions),
        (0, 0),
        "{report}"
    );
    let failing = report.failing();
    assert!(!failing.is_empty(), "{report}");
    let n = failing[0].number;
    assert_eq!(faithful_replay("fig5_streaming", &path, &report, n), 1, "fig5 #{n}");
    std::fs::remove_dir_all(&d).expect("cleanup");
}

#[test]
fn a_plan_whose_indexes_do_not_occur_is_never_a_pass() {
    let d = dir("tampered");
    let (_, mut report) = search("fig2_loops", &d);
    // a two-fault plan (the loop's first call fails, then its fallback), with the fallback's fault moved to an
    // index no run has, a sibling that never occurs: the first call's fault, the one the plan it extends
    // already had, is still injected. (Which fault is first in the plan follows the indexes' digests, which
    // change with the corpus's source lines: the plan's order says nothing.)
    let earlier: std::collections::HashMap<usize, Vec<Index>> = report
        .executions
        .iter()
        .map(|e| (e.number, e.plan.iter().map(|p| p.index.clone()).collect()))
        .collect();
    let exec = report
        .executions
        .iter_mut()
        .find(|e| e.plan.len() == 2 && e.scheduled_by.is_some_and(|s| earlier[&s].len() == 1))
        .expect("a two-fault plan extending a one-fault plan");
    let n = exec.number;
    let first_call = &earlier[&exec.scheduled_by.expect("scheduled by an execution")][0];
    let fallback = exec
        .plan
        .iter()
        .position(|p| &p.index != first_call)
        .expect("the fault the plan adds");
    let original = exec.plan[fallback].clone();
    let moved = original
        .index
        .parent()
        .expect("not a root")
        .child(Element::new(ElementDigest([0xAB; 8]), 99));
    exec.plan[fallback].index = moved.clone();
    exec.plan_wire = FaultPlan::new(exec.plan.iter().map(|p| (p.index.clone(), p.fault)).collect()).encode();
    let kept = exec.plan[1 - fallback].clone();
    let tampered = d.join("tampered.json");
    report.save(&tampered).expect("save");
    let tampered = tampered.to_str().expect("utf-8 path");
    let fig2 = example("fig2_loops");

    let out = run(&fig2, &["--replay", tampered, &n.to_string()]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(3), "{stdout}{stderr}");
    assert!(stdout.contains("1 of 2 planned fault(s) injected"), "{stdout}");
    assert!(
        stdout.contains(&format!("NOT injected {} on {moved}", original.fault)),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("injected {} on {}", kept.fault, kept.index)),
        "{stdout}"
    );
    for expected in [
        format!("replay of execution #{n} did not carry out its plan").as_str(),
        "1 of 2 planned fault(s) were not injected",
        moved.to_string().as_str(),
        "helloworld.ServiceB/Echo",
        "The indexes did not match",
        "a different build",
        "working directory",
        "instantiation",
        "a request scope lost by a spawn",
        "--allow-unreached",
    ] {
        assert!(stderr.contains(expected), "{expected:?} in {stderr}");
    }

    // the explicit opt-out: exits by the verdict (the program has fallbacks: pass), and still says so
    let out = run(&fig2, &["--replay", tampered, &n.to_string(), "--allow-unreached"]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    assert!(stdout.contains("NOT injected"), "{stdout}");
    assert!(
        stderr.contains("warning (--allow-unreached)") && stderr.contains(&moved.to_string()),
        "{stderr}"
    );

    // an execution the report does not have
    let out = run(&fig2, &["--replay", tampered, "999"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("no execution #999"), "{}", text(&out.stderr));
    std::fs::remove_dir_all(&d).expect("cleanup");
}

#[test]
fn a_report_whose_records_contradict_each_other_is_refused() {
    let d = dir("inconsistent");
    let (_, report) = search("fig2_loops", &d);
    let one = report
        .executions
        .iter()
        .position(|e| e.plan.len() == 1)
        .expect("a one-fault plan");
    let n = report.executions[one].number;
    // the readable plan names an index plan_wire does not
    let mut plan_changed = report.clone();
    plan_changed.executions[one].plan[0].index = Index::decode("1.AAAAAAAAAAA1").expect("an index");
    // a second execution numbered n, before the real one
    let mut duplicate = report.clone();
    let mut copy = duplicate.executions[0].clone();
    copy.number = n;
    duplicate.executions.insert(one, copy);
    for (name, tampered, field) in [("plan", plan_changed, "plan_wire"), ("dup", duplicate, "number")] {
        let path = d.join(format!("{name}.json"));
        tampered.save(&path).expect("save");
        let out = run(
            &example("fig2_loops"),
            &["--replay", path.to_str().expect("utf-8 path"), &n.to_string()],
        );
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert_eq!(out.status.code(), Some(2), "{name}: {stdout}{stderr}");
        assert!(
            stderr.contains(&format!("the report is inconsistent: execution #{n}, field `{field}`")),
            "{name}: {stderr}"
        );
        assert!(stdout.is_empty(), "{name}: the replay ran: {stdout}");
    }
    std::fs::remove_dir_all(&d).expect("cleanup");
}

#[test]
fn a_replay_whose_faults_hit_other_rpcs_than_recorded_is_never_a_pass() {
    let d = dir("other-rpc");
    let (_, mut report) = search("fig2_loops", &d);
    let exec = report
        .executions
        .iter_mut()
        .find(|e| e.plan.len() == 1)
        .expect("a one-fault plan");
    let n = exec.number;
    let real = exec.plan[0].signature.clone();
    // the report says the fault hit another RPC than the one the replay's index names
    exec.plan[0].signature = "other.Service/Method".into();
    for p in &mut exec.effective {
        p.signature = "other.Service/Method".into();
    }
    let path = d.join("other.json");
    report.save(&path).expect("save");
    let path = path.to_str().expect("utf-8 path");
    let fig2 = example("fig2_loops");
    let out = run(&fig2, &["--replay", path, &n.to_string()]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(3), "{stdout}{stderr}");
    assert!(
        stdout.contains("DIFFERS from the recorded execution")
            && stdout.contains(&format!("hit {real}, where the report recorded other.Service/Method")),
        "{stdout}"
    );
    assert!(
        stderr.contains(&format!("replay of execution #{n} did not run the recorded execution")),
        "{stderr}"
    );
    // the explicit opt-out: exits by the verdict, and still says so
    let out = run(&fig2, &["--replay", path, &n.to_string(), "--allow-unreached"]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    assert!(
        stderr.contains("warning (--allow-unreached)") && stdout.contains("DIFFERS"),
        "{stderr}"
    );
    std::fs::remove_dir_all(&d).expect("cleanup");
}
