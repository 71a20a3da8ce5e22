//! `--parallel N` and `--junit FILE` on the search examples (issue #22), run as real processes: cinema-10
//! with 4 executions at once writes its report in canonical order and a JUnit file with one test case per
//! execution, and every execution of that report replays by its canonical number; a parallelism of 0 is
//! refused before anything runs; the throughput example prints its usage.

mod built_examples;
use built_examples::example;

use std::process::Command;

#[test]
fn cinema10_with_parallel_4_writes_its_junit_file() {
    // a directory with a space; the JUnit file's directory does not exist yet (--junit creates it)
    let dir = std::env::temp_dir().join(format!("dei-sfit parallel-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let (json, junit) = (dir.join("cinema10.json"), dir.join("junit files").join("cinema10.xml"));
    let out = Command::new(example("cinema10"))
        .args(["--parallel", "4", "--quiet", "--json"])
        .arg(&json)
        .arg("--junit")
        .arg(&junit)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run cinema10");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        stdout.contains("cinema-10 [dei]: 6 executions, 0 failing, 0 redundant"),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("JUnit report: {}", junit.display())),
        "{stdout}"
    );
    let report = dei_sfit::Report::load(&json).expect("the JSON report");
    assert_eq!(report.parallelism_used, 4, "{:?}", report.notes);
    assert_eq!(report.options.parallelism, 4);
    let numbers: Vec<usize> = report.executions.iter().map(|e| e.number).collect();
    assert_eq!(numbers, (1..=6).collect::<Vec<_>>());
    assert!(
        report.executions[0].plan.is_empty(),
        "canonical order: the fault-free run first"
    );
    let xml = std::fs::read_to_string(&junit).expect("the JUnit file");
    assert_eq!(xml.matches("<testcase ").count(), 6, "{xml}");
    assert!(
        xml.contains(r#"<testsuite name="sfit: cinema-10" tests="6" failures="0" errors="0" skipped="0""#),
        "{xml}"
    );
    assert!(xml.contains(r#"<property name="dei.parallelism" value="4"/>"#), "{xml}");
    for e in &report.executions {
        let name = if e.effective.is_empty() {
            "no faults".to_string()
        } else {
            e.effective
                .iter()
                .map(|p| format!("{}@{}:{}", p.signature, p.index, p.fault))
                .collect::<Vec<_>>()
                .join(" + ")
        };
        assert!(
            xml.contains(&format!(r##"<testcase name="#{} {name}""##, e.number)),
            "{name}\n{xml}"
        );
    }
    // the canonical numbers are the ones a replay takes: each execution replays with its whole plan
    for e in &report.executions {
        let out = Command::new(example("cinema10"))
            .arg("--replay")
            .arg(&json)
            .arg(e.number.to_string())
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .expect("replay");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "#{}: {stdout}{}",
            e.number,
            String::from_utf8_lossy(&out.stderr)
        );
        let n = e.plan.len();
        assert!(
            stdout.contains(&format!(
                "replayed #{} of {}: pass; {n} of {n} planned",
                e.number,
                json.display()
            )),
            "{stdout}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_parallelism_of_0_is_refused_and_the_throughput_example_has_a_usage() {
    let out = Command::new(example("cinema10"))
        .args(["--parallel", "0"])
        .output()
        .expect("run cinema10");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--parallel: at least 1") && stderr.contains("usage: cinema10"),
        "{stderr}"
    );
    assert!(out.stdout.is_empty());
    let out = Command::new(example("sfit_parallel_throughput"))
        .arg("--help")
        .output()
        .expect("run sfit_parallel_throughput");
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("usage: sfit_parallel_throughput"));
    let out = Command::new(example("sfit_parallel_throughput"))
        .args(["--parallel", "2,x"])
        .output()
        .expect("run sfit_parallel_throughput");
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
}
