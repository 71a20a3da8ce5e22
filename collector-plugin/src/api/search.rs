//! The dei-sfit search reports: `--search-report` names one report file, or a directory of them (such as
//! `target/sfit`, where each run of a corpus program writes `<program>/<UTC time>.json` and points
//! `<program>/latest.json` at the newest). A directory is read again on every request, so that new runs
//! appear; each file's summary is kept while its size and modification time stay the same.
//!
//! A `*.json` file that cannot be read, is not JSON or is not a dei-sfit report (no `executions` list) is a
//! [`ReportProblem`] in the list, and logged once: never skipped quietly.

use crate::views::{ReportEntry, ReportList, ReportProblem};
use serde::Deserialize;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};

/// Most reports listed; the rest are counted in [`ReportList::omitted`].
pub const MAX_REPORTS: usize = 1000;
/// Largest report file read, bytes.
pub const MAX_REPORT_BYTES: u64 = 256 * 1024 * 1024;
/// The name of the link to a program's newest report.
pub const LATEST: &str = "latest.json";

/// Why a report cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum SearchError {
    /// No `--search-report` was given.
    #[error("no search report configured (serve --search-report FILE or DIRECTORY)")]
    NotConfigured,
    /// The file or directory cannot be read.
    #[error("{path}: {error}")]
    Unreadable {
        /// The path.
        path: String,
        /// The error.
        error: String,
    },
    /// No report has this id.
    #[error("no report {0:?} in the search reports (see /api/v1/search/reports)")]
    UnknownReport(String),
    /// The directory holds no report.
    #[error("{0}: no report yet")]
    Empty(String),
    /// The report file is not a dei-sfit report.
    #[error("{file}: {error}")]
    Malformed {
        /// The report's id.
        file: String,
        /// Why.
        error: String,
    },
}

/// What the list needs of a report.
#[derive(Debug, Clone, Deserialize)]
struct Head {
    test: Option<String>,
    executions: Vec<ExecutionHead>,
}

#[derive(Debug, Clone, Deserialize)]
struct ExecutionHead {
    #[serde(default)]
    outcome: serde_json::Value,
}

impl ExecutionHead {
    fn failed(&self) -> bool {
        let verdict = match &self.outcome {
            serde_json::Value::Object(o) => o.get("verdict").and_then(|v| v.as_str()),
            v => v.as_str(),
        };
        verdict == Some("fail")
    }
}

/// A report's test, executions and failures, or why it is not a report.
type Summary = Result<(Option<String>, usize, usize), String>;
/// Summaries by path, with the size and modification time they were read at.
type Cache = HashMap<PathBuf, (u64, Option<SystemTime>, Summary)>;

/// Summaries by path, valid while the size and modification time are the same.
fn cache() -> &'static Mutex<Cache> {
    static CACHE: OnceLock<Mutex<Cache>> = OnceLock::new();
    CACHE.get_or_init(Mutex::default)
}

fn summarize(path: &Path, id: &str, len: u64, modified: Option<SystemTime>) -> Summary {
    {
        let cache = cache().lock().unwrap_or_else(|p| p.into_inner());
        if let Some((l, m, s)) = cache.get(path)
            && *l == len
            && *m == modified
        {
            return s.clone();
        }
    }
    let summary = if len > MAX_REPORT_BYTES {
        Err(format!("{len} bytes: larger than the limit of {MAX_REPORT_BYTES}"))
    } else {
        match std::fs::read(path) {
            Err(e) => Err(format!("cannot read it: {e}")),
            Ok(bytes) => match serde_json::from_slice::<Head>(&bytes) {
                Ok(h) => Ok((
                    h.test,
                    h.executions.len(),
                    h.executions.iter().filter(|e| e.failed()).count(),
                )),
                Err(e) if e.is_data() => Err(format!("not a dei-sfit report: {e}")),
                Err(e) => Err(format!("not JSON: {e}")),
            },
        }
    };
    if let Err(e) = &summary {
        tracing::warn!(report = id, "search report {}: {e}", path.display());
    }
    let mut cache = cache().lock().unwrap_or_else(|p| p.into_inner());
    if cache.len() >= 10 * MAX_REPORTS {
        cache.clear();
    }
    cache.insert(path.to_path_buf(), (len, modified, summary.clone()));
    summary
}

/// Unix milliseconds from a run's file name, `YYYY-MM-DDTHH-MM-SS.mmmZ.json` (what the corpus writes).
fn time_from_name(stem: &str) -> Option<u64> {
    let b = stem.as_bytes();
    if b.len() != 24 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' || b[13] != b'-' || b[16] != b'-' {
        return None;
    }
    if b[19] != b'.' || b[23] != b'Z' {
        return None;
    }
    let n = |from: usize, to: usize| -> Option<u64> { stem.get(from..to)?.parse().ok() };
    let (y, mo, d, h, mi, s, ms) = (
        n(0, 4)?,
        n(5, 7)?,
        n(8, 10)?,
        n(11, 13)?,
        n(14, 16)?,
        n(17, 19)?,
        n(20, 23)?,
    );
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || s > 60 {
        return None;
    }
    let days = days_from_civil(y as i64, mo as i64, d as i64);
    let secs = u64::try_from(days).ok()? * 86_400 + h * 3600 + mi * 60 + s;
    Some(secs * 1000 + ms)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date of a day count since 1970-01-01.
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + (m <= 2) as i64, m, d)
}

/// `YYYY-MM-DD HH:MM:SS.mmm`, UTC.
pub fn utc_text(unix_ms: u64) -> String {
    let secs = (unix_ms / 1000) as i64;
    let (y, m, d) = civil_from_days(secs.div_euclid(86_400));
    let s = secs.rem_euclid(86_400);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}.{:03}",
        s / 3600,
        s / 60 % 60,
        s % 60,
        unix_ms % 1000
    )
}

/// A report file found in the directory, before it is read.
struct Found {
    path: PathBuf,
    id: String,
    program: String,
}

fn is_json(name: &str) -> bool {
    name.ends_with(".json")
}

/// The `*.json` files directly in `dir` (`program` given: a program's folder) or, for the top directory,
/// its `*.json` files and those of its sub-folders; `latest.json` links are returned apart (their targets'
/// ids).
fn walk(root: &Path, problems: &mut Vec<ReportProblem>) -> Result<(Vec<Found>, Vec<String>), SearchError> {
    let unreadable = |p: &Path, e: std::io::Error| SearchError::Unreadable {
        path: p.display().to_string(),
        error: e.to_string(),
    };
    let mut found = Vec::new();
    let mut latest = Vec::new();
    let sorted = |dir: &Path| -> Result<Vec<std::fs::DirEntry>, std::io::Error> {
        let mut v = std::fs::read_dir(dir)?.collect::<Result<Vec<_>, _>>()?;
        v.sort_by_key(|e| e.file_name());
        Ok(v)
    };
    for entry in sorted(root).map_err(|e| unreadable(root, e))? {
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = entry.path();
        if path.is_dir() {
            let entries = match sorted(&path) {
                Ok(v) => v,
                Err(e) => {
                    problems.push(ReportProblem {
                        file: format!("{name}/"),
                        error: format!("cannot read the folder: {e}"),
                    });
                    continue;
                }
            };
            for sub in entries {
                let file = sub.file_name().to_string_lossy().into_owned();
                if !is_json(&file) || sub.path().is_dir() {
                    continue;
                }
                if file == LATEST {
                    if let Ok(target) = std::fs::read_link(sub.path())
                        && let Some(t) = target.file_name()
                    {
                        latest.push(format!("{name}/{}", t.to_string_lossy()));
                    }
                    continue;
                }
                found.push(Found {
                    path: sub.path(),
                    id: format!("{name}/{file}"),
                    program: name.clone(),
                });
            }
        } else if is_json(&name) && name != LATEST {
            found.push(Found {
                path,
                program: name.trim_end_matches(".json").to_string(),
                id: name,
            });
        }
    }
    Ok((found, latest))
}

/// Lists the reports of `--search-report` (a file or a directory).
pub fn list(source: &Path) -> Result<ReportList, SearchError> {
    let meta = std::fs::metadata(source).map_err(|e| SearchError::Unreadable {
        path: source.display().to_string(),
        error: e.to_string(),
    })?;
    let mut problems = Vec::new();
    let directory = meta.is_dir();
    let (found, latest) = if directory {
        walk(source, &mut problems)?
    } else {
        let name = source
            .file_name()
            .map_or_else(|| "report.json".to_string(), |n| n.to_string_lossy().into_owned());
        let program = match source.parent().and_then(|p| p.file_name()) {
            Some(dir) if time_from_name(name.trim_end_matches(".json")).is_some() => dir.to_string_lossy().into_owned(),
            _ => name.trim_end_matches(".json").to_string(),
        };
        (
            vec![Found {
                path: source.to_path_buf(),
                id: name,
                program,
            }],
            Vec::new(),
        )
    };
    let omitted = found.len().saturating_sub(MAX_REPORTS);
    let mut reports = Vec::new();
    // the newest by name first when there are too many (run files are named by their time)
    let mut found = found;
    found.sort_by(|a, b| b.id.cmp(&a.id));
    for f in found.into_iter().take(MAX_REPORTS) {
        let meta = match std::fs::metadata(&f.path) {
            Ok(m) => m,
            Err(e) => {
                problems.push(ReportProblem {
                    file: f.id,
                    error: format!("cannot read it: {e}"),
                });
                continue;
            }
        };
        let modified = meta.modified().ok();
        match summarize(&f.path, &f.id, meta.len(), modified) {
            Ok((test, executions, failures)) => {
                let stem = f.id.rsplit('/').next().unwrap_or(&f.id).trim_end_matches(".json");
                let time_unix_ms = time_from_name(stem).unwrap_or_else(|| {
                    modified
                        .and_then(|m| m.duration_since(UNIX_EPOCH).ok())
                        .map_or(0, |d| d.as_millis() as u64)
                });
                reports.push(ReportEntry {
                    latest: latest.contains(&f.id),
                    time: utc_text(time_unix_ms),
                    time_unix_ms,
                    id: f.id,
                    program: f.program,
                    test,
                    executions,
                    failures,
                    bytes: meta.len(),
                });
            }
            Err(error) => problems.push(ReportProblem { file: f.id, error }),
        }
    }
    reports.sort_by(|a, b| b.time_unix_ms.cmp(&a.time_unix_ms).then_with(|| a.id.cmp(&b.id)));
    problems.sort_by(|a, b| a.file.cmp(&b.file));
    Ok(ReportList {
        source: source.display().to_string(),
        directory,
        reports,
        problems,
        omitted,
    })
}

/// One report's JSON: the one with this id, or without one the newest (the file itself when one was given).
pub fn read(source: &Path, id: Option<&str>) -> Result<serde_json::Value, SearchError> {
    let list = list(source)?;
    let entry = match id {
        Some(id) => list.reports.iter().find(|r| r.id == id).ok_or_else(|| {
            match list.problems.iter().find(|p| p.file == id) {
                Some(p) => SearchError::Malformed {
                    file: p.file.clone(),
                    error: p.error.clone(),
                },
                None => SearchError::UnknownReport(id.to_string()),
            }
        })?,
        None => match list.reports.first() {
            Some(r) => r,
            None => {
                return Err(match list.problems.first() {
                    Some(p) if !list.directory => SearchError::Malformed {
                        file: p.file.clone(),
                        error: p.error.clone(),
                    },
                    _ => SearchError::Empty(list.source),
                });
            }
        },
    };
    // the path of a listed id: the file itself, or the directory joined with the id's (checked) parts
    let path = if list.directory {
        entry.id.split('/').fold(source.to_path_buf(), |p, part| p.join(part))
    } else {
        source.to_path_buf()
    };
    let bytes = std::fs::read(&path).map_err(|e| SearchError::Unreadable {
        path: path.display().to_string(),
        error: e.to_string(),
    })?;
    serde_json::from_slice(&bytes).map_err(|e| SearchError::Malformed {
        file: entry.id.clone(),
        error: format!("not JSON: {e}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(executions: &[&str]) -> String {
        let e: Vec<String> = executions
            .iter()
            .enumerate()
            .map(|(i, v)| format!(r#"{{"number":{i},"outcome":{{"verdict":"{v}"}}}}"#))
            .collect();
        format!(r#"{{"test":"t","executions":[{}]}}"#, e.join(","))
    }

    #[test]
    fn times_convert_both_ways() {
        let ms = time_from_name("2026-11-27T09-01-34.123Z").expect("a run's name");
        assert_eq!(utc_text(ms), "2026-11-27 09:01:34.123");
        assert_eq!(utc_text(0), "1970-01-01 00:00:00.000");
        assert_eq!(
            time_from_name("2024-02-29T23-59-59.999Z").map(utc_text).as_deref(),
            Some("2024-02-29 23:59:59.999")
        );
        for bad in [
            "latest",
            "2026-13-01T00-00-00.000Z",
            "2026-11-27T09:01:34.123Z",
            "2026-11-27T09-01-34Z",
        ] {
            assert_eq!(time_from_name(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_directory_lists_each_run_newest_first_with_its_problems() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let root = dir.path();
        std::fs::create_dir_all(root.join("demo")).expect("mkdir");
        std::fs::create_dir_all(root.join("fig2")).expect("mkdir");
        std::fs::write(
            root.join("demo/2026-01-01T10-00-00.000Z.json"),
            report(&["pass", "fail"]),
        )
        .expect("write");
        std::fs::write(
            root.join("demo/2026-01-02T10-00-00.000Z.json"),
            report(&["pass", "fail", "fail"]),
        )
        .expect("write");
        #[cfg(unix)]
        std::os::unix::fs::symlink("2026-01-02T10-00-00.000Z.json", root.join("demo/latest.json")).expect("link");
        std::fs::write(root.join("fig2/2026-01-01T12-00-00.000Z.json"), report(&["pass"])).expect("write");
        std::fs::write(root.join("fig2/2026-01-01T13-00-00.000Z.json"), "{not json").expect("write");
        std::fs::write(root.join("fig2/2026-01-01T14-00-00.000Z.json"), r#"{"test":"x"}"#).expect("write");
        std::fs::write(root.join("old.json"), report(&[])).expect("write");
        // a report named otherwise has the time it was last written
        std::fs::File::options()
            .write(true)
            .open(root.join("old.json"))
            .and_then(|f| f.set_modified(UNIX_EPOCH + std::time::Duration::from_secs(86_400)))
            .expect("set its time");
        std::fs::write(root.join("notes.txt"), "not a report").expect("write");

        let list = list(root).expect("the list");
        assert!(list.directory);
        let got: Vec<(&str, &str, usize, usize)> = list
            .reports
            .iter()
            .filter(|r| r.id != "old.json")
            .map(|r| (r.id.as_str(), r.program.as_str(), r.executions, r.failures))
            .collect();
        assert_eq!(
            got,
            [
                ("demo/2026-01-02T10-00-00.000Z.json", "demo", 3, 2),
                ("fig2/2026-01-01T12-00-00.000Z.json", "fig2", 1, 0),
                ("demo/2026-01-01T10-00-00.000Z.json", "demo", 2, 1),
            ]
        );
        assert_eq!(list.reports[0].time, "2026-01-02 10:00:00.000");
        #[cfg(unix)]
        assert!(
            list.reports[0].latest && !list.reports[2].latest,
            "latest.json marks its target, not a report of its own"
        );
        let old = list.reports.last().expect("the oldest");
        assert_eq!(
            (old.id.as_str(), old.program.as_str(), old.time.as_str()),
            ("old.json", "old", "1970-01-02 00:00:00.000")
        );
        let problems: Vec<(&str, &str)> = list
            .problems
            .iter()
            .map(|p| (p.file.as_str(), p.error.as_str()))
            .collect();
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(
            problems[0].0 == "fig2/2026-01-01T13-00-00.000Z.json" && problems[0].1.starts_with("not JSON"),
            "{problems:?}"
        );
        assert!(
            problems[1].0 == "fig2/2026-01-01T14-00-00.000Z.json"
                && problems[1].1.starts_with("not a dei-sfit report")
                && problems[1].1.contains("executions"),
            "{problems:?}"
        );

        // one report by id; without an id the newest; an id not listed (a path outside) is refused
        let one = read(root, Some("fig2/2026-01-01T12-00-00.000Z.json")).expect("a listed report");
        assert_eq!(one["executions"].as_array().map(Vec::len), Some(1));
        let newest = read(root, None).expect("the newest");
        assert_eq!(newest["executions"].as_array().map(Vec::len), Some(3));
        for id in ["../etc/passwd", "notes.txt", "demo/latest.json", "demo/../old.json"] {
            assert!(
                matches!(read(root, Some(id)), Err(SearchError::UnknownReport(_))),
                "{id}"
            );
        }
        assert!(matches!(
            read(root, Some("fig2/2026-01-01T13-00-00.000Z.json")),
            Err(SearchError::Malformed { .. })
        ));

        // a new run appears at the next request; a changed file is read again
        std::fs::write(root.join("demo/2026-01-03T10-00-00.000Z.json"), report(&["fail"])).expect("write");
        std::fs::write(
            root.join("fig2/2026-01-01T13-00-00.000Z.json"),
            report(&["pass", "pass"]),
        )
        .expect("rewrite");
        let again = super::list(root).expect("the list again");
        assert_eq!(again.reports[0].id, "demo/2026-01-03T10-00-00.000Z.json");
        assert_eq!(again.problems.len(), 1, "{:?}", again.problems);
        assert_eq!(again.reports.len(), 6);
    }

    #[test]
    fn a_single_file_is_a_list_of_one() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let file = dir.path().join("search.json");
        std::fs::write(&file, report(&["pass", "fail"])).expect("write");
        let list = list(&file).expect("the list");
        assert!(!list.directory);
        assert_eq!(list.reports.len(), 1);
        assert_eq!(
            (list.reports[0].id.as_str(), list.reports[0].program.as_str()),
            ("search.json", "search")
        );
        assert_eq!(read(&file, None).expect("the file")["test"], "t");
        assert_eq!(read(&file, Some("search.json")).expect("by id")["test"], "t");
        std::fs::write(&file, "[]").expect("rewrite");
        assert!(matches!(read(&file, None), Err(SearchError::Malformed { .. })));
        assert!(matches!(list_missing(), Err(SearchError::Unreadable { .. })));
    }

    fn list_missing() -> Result<ReportList, SearchError> {
        list(Path::new("/nonexistent/dei-sfit-reports"))
    }
}
