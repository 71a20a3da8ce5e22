//! The report files a corpus example writes are written whole or not at all: a write that fails (here a file
//! size limit, as a full disk would) leaves the previous report in place, readable and replayable, and the
//! example exits 2 naming the file.

mod built_examples;
use built_examples::example;

use dei_sfit::Report;
use std::path::PathBuf;
use std::process::Command;

/// A fresh directory for one test's files.
fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("dei-report-files-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

#[cfg(unix)]
#[test]
fn a_failed_report_write_keeps_the_previous_report() {
    let d = dir("size-limit");
    let path = d.join("fig1.json");
    let p = path.to_str().expect("utf-8 path");
    let fig1 = example("fig1_fallbacks");
    let out = Command::new(&fig1)
        .args(["--quiet", "--json", p])
        .output()
        .expect("run fig1_fallbacks");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let before = std::fs::read(&path).expect("the first report");
    assert!(
        before.len() > 16 * 1024,
        "the report must exceed the limit: {} bytes",
        before.len()
    );
    // 16 blocks of 512 bytes: the report no longer fits; SIGXFSZ ignored, so the write fails with EFBIG
    let script = format!(
        "trap '' XFSZ; ulimit -f 16; exec '{}' --quiet --json '{p}'",
        fig1.display()
    );
    let out = Command::new("sh").args(["-c", &script]).output().expect("run sh");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("cannot write"), "{stderr}");
    assert_eq!(
        std::fs::read(&path).expect("the report"),
        before,
        "the previous report was replaced"
    );
    Report::load(&path).expect("the previous report still loads");
    let left: Vec<_> = std::fs::read_dir(&d)
        .expect("the directory")
        .map(|e| e.expect("an entry").file_name())
        .collect();
    assert_eq!(
        left,
        vec![std::ffi::OsString::from("fig1.json")],
        "temporary files left behind"
    );
    let _ = std::fs::remove_dir_all(&d);
}
