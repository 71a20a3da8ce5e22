//! The dei-sfit search reports the collector serves (`GET /api/v1/search/reports`), from the file or the
//! directory given with `serve --search-report`.

use serde::{Deserialize, Serialize};

/// One report file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReportEntry {
    /// Its id for `GET /api/v1/search?report=ID`: its path under the directory, `/`-separated
    /// (`demo/2026-11-27T09-01-34.123Z.json`), or its file name when one file was given.
    pub id: String,
    /// The program: the folder the report is in (`target/sfit/<program>/…`), or the file's name without
    /// `.json` for a report directly in the directory.
    pub program: String,
    /// When it was written, UTC (`2026-11-27 09:01:34.123`): from the file name the corpus gives a run's
    /// report (`<UTC time>.json`), or else the file's modification time.
    pub time: String,
    /// The same as Unix milliseconds, for sorting.
    pub time_unix_ms: u64,
    /// The functional test (the report's `test`).
    pub test: Option<String>,
    /// Executions in the report.
    pub executions: usize,
    /// Executions whose outcome is `fail`.
    pub failures: usize,
    /// The report's size, bytes.
    pub bytes: u64,
    /// `latest.json` in its folder points at it.
    pub latest: bool,
}

/// A report file that could not be read or is not a dei-sfit report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReportProblem {
    /// Its path under the directory.
    pub file: String,
    /// Why it was not listed.
    pub error: String,
}

/// The reports, newest first (`GET /api/v1/search/reports`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReportList {
    /// The path given with `--search-report`.
    pub source: String,
    /// True when it is a directory (re-read on every request, so that new runs appear).
    pub directory: bool,
    /// The reports, newest first (at most 1000).
    pub reports: Vec<ReportEntry>,
    /// Report files (`*.json`) that could not be read or parsed: listed here, never skipped quietly.
    pub problems: Vec<ReportProblem>,
    /// Report files past the first 1000, not listed.
    pub omitted: usize,
}
