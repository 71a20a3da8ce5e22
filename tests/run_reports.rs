//! Each run of a corpus example writes its own report, `target/sfit/<program>/<UTC time>.json` under the
//! working directory, and points `latest.json` beside it at the newest: a second run never overwrites the
//! first's report (which a running web view may be showing).

mod built_examples;
use built_examples::example;

use std::path::{Path, PathBuf};

fn run(dir: &Path) -> String {
    let out = std::process::Command::new(example("fig2_loops"))
        .arg("--quiet")
        .current_dir(dir)
        .output()
        .expect("run the example");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

fn reports(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir.join("target/sfit/fig2_loops"))
        .expect("the program's report folder")
        .map(|e| e.expect("a folder entry").path())
        .filter(|p| p.file_name().is_some_and(|n| n != "latest.json"))
        .collect();
    files.sort();
    files
}

#[test]
fn every_run_writes_its_own_report_and_latest_points_at_the_newest() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("run-reports-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a working directory");
    let first = run(&dir);
    let second = run(&dir);
    let files = reports(&dir);
    assert_eq!(files.len(), 2, "two runs, two reports: {files:?}");
    for (file, stdout) in files.iter().zip([&first, &second]) {
        let relative = file.strip_prefix(&dir).expect("under the working directory");
        assert!(stdout.contains(&format!("report: {}", relative.display())), "{stdout}");
        let report: serde_json::Value =
            serde_json::from_slice(&std::fs::read(file).expect("read a report")).expect("a JSON report");
        assert!(
            report["executions"].as_array().is_some_and(|e| e.len() == 5),
            "fig. 2's five executions"
        );
    }
    let latest = dir.join("target/sfit/fig2_loops/latest.json");
    assert_eq!(
        std::fs::read(&latest).expect("latest.json"),
        std::fs::read(&files[1]).expect("the newest report"),
        "latest.json is the second run's report"
    );
    std::fs::remove_dir_all(&dir).expect("clean up");
}
