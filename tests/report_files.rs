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

/// Runs fig1_fallbacks with `--json` and `--junit` in `d`, its standard output `stdout`; returns the exit
/// code, stderr and the two paths.
fn fig1_with_stdout(
    d: &std::path::Path,
    stdout: std::process::Stdio,
    close_early: bool,
) -> (Option<i32>, String, PathBuf, PathBuf) {
    let (json, xml) = (d.join("r.json"), d.join("r.xml"));
    let mut child = Command::new(example("fig1_fallbacks"))
        .args([
            "--quiet",
            "--json",
            json.to_str().expect("utf-8"),
            "--junit",
            xml.to_str().expect("utf-8"),
        ])
        .stdout(stdout)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run fig1_fallbacks");
    if close_early {
        // the reader goes away before the example prints anything (it searches first): `| head -0`
        drop(child.stdout.take());
    }
    let out = child.wait_with_output().expect("wait");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        json,
        xml,
    )
}

#[cfg(unix)]
#[test]
fn a_closed_stdout_stops_the_output_quietly_and_the_files_are_still_written() {
    let d = dir("closed-stdout");
    let (code, stderr, json, xml) = fig1_with_stdout(&d, std::process::Stdio::piped(), true);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    Report::load(&json).expect("the JSON report");
    let junit = std::fs::read_to_string(&xml).expect("the JUnit file");
    assert!(junit.trim_end().ends_with("</testsuites>"), "{junit}");
    let _ = std::fs::remove_dir_all(&d);
}

#[cfg(target_os = "linux")]
#[test]
fn a_stdout_that_cannot_be_written_is_an_error_after_the_files_are_written() {
    let d = dir("full-stdout");
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .expect("/dev/full");
    let (code, stderr, json, xml) = fig1_with_stdout(&d, full.into(), false);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("cannot write to standard output") && !stderr.contains("panicked"),
        "{stderr}"
    );
    Report::load(&json).expect("the JSON report");
    assert!(xml.exists());
    let _ = std::fs::remove_dir_all(&d);
}
