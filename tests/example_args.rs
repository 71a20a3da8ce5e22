//! The corpus examples' command lines, run as real processes: `--help` prints the usage and exits 0; an
//! unknown argument, or a missing or malformed value, is refused with the usage and exit code 2, before
//! anything runs. A standard output whose reader went away (`| head`) stops the printing quietly and nothing
//! else; one that cannot be written otherwise is an error (exit 2) once the run's files are written.

mod built_examples;
use built_examples::example;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// The examples that search (or replay) one functional test, with the shared options.
const SEARCHING: [&str; 8] = [
    "cinema3",
    "cinema9",
    "cinema10",
    "fig1_fallbacks",
    "fig2_loops",
    "fig3_async",
    "fig4_path",
    "fig5_streaming",
];

/// The other examples, each with its own options.
const OTHERS: [&str; 6] = [
    "demo",
    "nondeterminism",
    "routeguide_sfit",
    "sfit_overhead",
    "sfit_parallel_throughput",
    "table1",
];

fn run(name: &str, args: &[&str]) -> Output {
    Command::new(example(name))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run the example")
}

fn refused(name: &str, args: &[&str], why: &str) {
    let out = run(name, args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{name} {args:?}: {stderr}");
    assert!(
        stderr.contains(why) && stderr.contains(&format!("usage: {name}")),
        "{name} {args:?}: {stderr}"
    );
    assert!(
        out.stdout.is_empty(),
        "{name} {args:?} ran: {}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn help_prints_the_usage_and_exits_0() {
    for name in SEARCHING.iter().chain(&OTHERS) {
        for flag in ["--help", "-h"] {
            let out = run(name, &[flag]);
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert_eq!(
                out.status.code(),
                Some(0),
                "{name} {flag}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(stdout.starts_with(&format!("usage: {name}")), "{name} {flag}: {stdout}");
        }
    }
    let out = run("fig2_loops", &["--help"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    for option in ["--replay FILE N", "--allow-unreached", "--max N", "--json PATH"] {
        assert!(stdout.contains(option), "{option} in {stdout}");
    }
}

#[test]
fn unknown_arguments_are_refused() {
    for name in SEARCHING.iter().chain(&OTHERS) {
        refused(name, &["--bogus"], "unknown argument \"--bogus\"");
    }
    refused("table1", &["extra"], "unknown argument \"extra\"");
    refused("nondeterminism", &["many"], "unknown argument \"many\"");
    refused("sfit_overhead", &["6", "wide"], "unknown argument \"wide\"");
    refused(
        "demo",
        &["--program", "cinema-4"],
        "--program: cinema-3, cinema-9 or cinema-10",
    );
}

#[test]
fn missing_or_malformed_values_are_refused() {
    refused("fig2_loops", &["--max"], "--max needs a number of executions");
    refused(
        "fig2_loops",
        &["--max", "ten"],
        "--max: a number of executions expected, not \"ten\"",
    );
    refused("fig2_loops", &["--json"], "--json needs a path");
    refused("fig2_loops", &["--replay"], "--replay needs a report file");
    refused(
        "fig2_loops",
        &["--replay", "report.json"],
        "--replay FILE needs an execution number",
    );
    refused("fig2_loops", &["--replay", "report.json", "third"], "not \"third\"");
    refused(
        "fig2_loops",
        &["--allow-unreached"],
        "--allow-unreached applies to --replay only",
    );
    // a replay writes no file and runs under the report's options: search options are refused, not dropped
    for (flag, value) in [
        ("--json", Some("x.json")),
        ("--junit", Some("x.xml")),
        ("--parallel", Some("4")),
        ("--max", Some("1")),
        ("--bfs", None),
        ("--single", None),
        ("--encapsulation", None),
        ("--quiet", None),
    ] {
        let mut args = vec!["--replay", "report.json", "2", flag];
        args.extend(value);
        refused(
            "fig2_loops",
            &args,
            &format!("{flag} cannot be used with --replay: a replay reruns one execution"),
        );
    }
    refused(
        "fig5_streaming",
        &["--junit", "rj.xml", "--replay", "report.json", "2", "--json", "rj.json"],
        "--json, --junit cannot be used with --replay",
    );
    refused("demo", &["--report"], "--report needs a value");
    refused(
        "demo",
        &["--forward", "notaurl"],
        "--forward \"notaurl\" is not a usable OTLP/gRPC endpoint",
    );
    refused(
        "demo",
        &["--forward", "http://127.0.0.1:4318", "--forward-protocol", "http"],
        "no path",
    );
}

/// Runs `name` with `args` in `dir`, its standard output `stdout`; with `close_early`, the reader goes away
/// before the example prints anything (`| head -0`).
fn run_in(name: &str, args: &[&str], dir: &Path, stdout: Stdio, close_early: bool) -> Output {
    let mut child = Command::new(example(name))
        .args(args)
        .current_dir(dir)
        .stdout(stdout)
        .stderr(Stdio::piped())
        .spawn()
        .expect("run the example");
    if close_early {
        drop(child.stdout.take());
    }
    child.wait_with_output().expect("wait for the example")
}

/// A fresh working directory for one test's runs (the examples write their files under it).
fn work_dir(name: &str) -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("example-args-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("a working directory");
    d
}

/// The other examples, each with arguments that make its run short.
const SHORT_RUNS: [(&str, &[&str]); 6] = [
    ("table1", &[]),
    ("nondeterminism", &["1"]),
    ("sfit_overhead", &["1"]),
    (
        "sfit_parallel_throughput",
        &["--only", "wide", "--k", "1", "--parallel", "1", "--rounds", "1"],
    ),
    ("routeguide_sfit", &[]),
    ("demo", &["--exit"]),
];

#[cfg(unix)]
#[test]
fn a_closed_stdout_stops_the_output_quietly_and_the_run_goes_on() {
    let d = work_dir("closed");
    for name in SEARCHING.iter().chain(&OTHERS) {
        let out = run_in(name, &["--help"], &d, Stdio::piped(), true);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{name} --help: {stderr}");
        assert!(!stderr.contains("panicked"), "{name} --help: {stderr}");
    }
    for (name, args) in SHORT_RUNS {
        let out = run_in(name, args, &d, Stdio::piped(), true);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{name} {args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{name} {args:?}: {stderr}");
    }
    // what they write after their first line of output is still written: nondeterminism's table and figure,
    // the demo's report and latest.json
    assert!(d.join("target/sfit/nondeterminism.csv").is_file());
    assert!(d.join("docs/figures/nondeterminism.svg").is_file());
    let report = dei_sfit::Report::load(d.join("target/sfit/demo/latest.json")).expect("the demo's latest report");
    assert!(!report.executions.is_empty());
    let _ = std::fs::remove_dir_all(&d);
}

#[cfg(target_os = "linux")]
#[test]
fn a_stdout_that_cannot_be_written_is_an_error_after_the_files_are_written() {
    let d = work_dir("full");
    for (name, args) in SHORT_RUNS {
        let full = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .expect("/dev/full");
        let out = run_in(name, args, &d, full.into(), false);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{name} {args:?}: {stderr}");
        assert!(
            stderr.contains("cannot write to standard output") && !stderr.contains("panicked"),
            "{name} {args:?}: {stderr}"
        );
    }
    assert!(d.join("docs/figures/nondeterminism.svg").is_file());
    dei_sfit::Report::load(d.join("target/sfit/demo/latest.json")).expect("the demo's latest report");
    let _ = std::fs::remove_dir_all(&d);
}
