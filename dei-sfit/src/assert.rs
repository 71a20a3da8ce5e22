//! A search as one assertion inside `cargo test`: `assert_exhaustive` (in-process services, feature
//! `testing`) and [`Search::assert_exhaustive`] (any span source) run the search, save its JSON report, and
//! fail the test with one readable block per failing execution (its faults, the assertion's message, the
//! command that replays it), as `proptest` prints its minimal case.
//!
//! The test fails when an execution failed, when an execution did not carry out its plan (unreached faults),
//! when an execution's spans did not settle, when an execution is incomplete (spans the collector dropped:
//! [`ExecutionRecord::incomplete`](crate::ExecutionRecord::incomplete)), when nothing was injected at all,
//! when the execution limit stopped the search before the fault space was exhausted, or when the report
//! could not be saved.
//!
//! The report is saved as `<dir>/<test name>.json`, where `<dir>` is `DEI_SFIT_REPORT_DIR` or
//! `<temp dir>/dei-sfit/<package>` (the package from cargo's `CARGO_PKG_NAME`). The path must outlive the
//! process (the replay reads it), so it is not unique per process: two runs of the same test at once on one
//! machine (parallel CI jobs sharing the temp dir) write the same file, the last one wins (each write is
//! whole: written aside, then renamed). Give such jobs their own `DEI_SFIT_REPORT_DIR`. Run the test again with `DEI_SFIT_REPLAY=N` and the helper replays execution `N` of
//! that report instead of searching: the replay command in each block does exactly that.

use crate::junit::{ReplayCommand, case_name, failure_block, faults_label};
use crate::report::{Report, TestOutcome};
use crate::search::{Search, SearchError};
use crate::test::FunctionalTest;
use std::fmt::Write as _;
use std::path::PathBuf;

/// The environment variable that makes [`Search::assert_exhaustive`] replay one execution of the saved report.
pub const REPLAY_ENV: &str = "DEI_SFIT_REPLAY";
/// The environment variable naming the directory the reports are saved in.
pub const REPORT_DIR_ENV: &str = "DEI_SFIT_REPORT_DIR";

/// Where the report of functional test `test` is saved.
/// Shared by every process that runs the same test (see the [module](self) docs).
pub fn report_path(test: &str) -> PathBuf {
    let dir = std::env::var_os(REPORT_DIR_ENV).map(PathBuf::from).unwrap_or_else(|| {
        let base = std::env::temp_dir().join("dei-sfit");
        match std::env::var("CARGO_PKG_NAME") {
            Ok(pkg) if !pkg.is_empty() => base.join(file_name(&pkg)),
            _ => base,
        }
    });
    dir.join(format!("{}.json", file_name(test)))
}

/// `s` with every character but ASCII letters, digits, `-` and `_` replaced by `_`.
fn file_name(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// True when a thread name looks like a libtest test path (`module::test_name`): cargo test names each
/// test's thread so; runtime worker threads (`tokio-runtime-worker`) and `main` do not look like one.
fn looks_like_test_path(name: &str) -> bool {
    name != "main"
        && !name.is_empty()
        && name.split("::").all(|part| {
            part.chars().next().is_some_and(|c| c.is_alphabetic() || c == '_')
                && part.chars().all(|c| c.is_alphanumeric() || c == '_')
        })
}

/// The command that reruns the current `cargo test` test with [`REPLAY_ENV`] set to `{n}`: the package, the
/// test target and the test's name come from cargo's environment, the test binary's name and the test
/// thread's name.
fn replay_command() -> ReplayCommand {
    let thread = std::thread::current();
    // a test path only from cargo test's own thread; a search asserted from a runtime worker (or any other
    // thread) gets the generic template
    let name = thread.name().filter(|n| looks_like_test_path(n)).map(str::to_string);
    let Some(name) = name else {
        return ReplayCommand::Template(format!("rerun this test with {REPLAY_ENV}={{n}}"));
    };
    let mut cmd = format!("{REPLAY_ENV}={{n}} cargo test");
    if let Ok(pkg) = std::env::var("CARGO_PKG_NAME") {
        let _ = write!(cmd, " -p {pkg}");
        // integration tests run from `<target>-<hash>`; unit tests from `<crate>-<hash>`
        let target = std::env::current_exe().ok().and_then(|p| {
            let stem = p.file_stem()?.to_string_lossy().into_owned();
            Some(stem.rsplit_once('-').map_or(stem.clone(), |(t, _)| t.to_string()))
        });
        match target {
            Some(t) if t != pkg.replace('-', "_") => {
                let _ = write!(cmd, " --test {t}");
            }
            _ => cmd.push_str(" --lib"),
        }
    }
    let _ = write!(cmd, " -- --exact {name}");
    ReplayCommand::Template(cmd)
}

/// Everything that makes `report` not a clean exhaustive pass, one block each; `Ok` when there is none.
pub fn check_exhaustive(report: &Report, replay: &ReplayCommand) -> Result<(), String> {
    let mut blocks = Vec::new();
    for e in &report.executions {
        let replay_cmd = replay.for_execution(e.number);
        if !e.unreached.is_empty() {
            let mut b = format!(
                "execution #{} DID NOT CARRY OUT ITS PLAN: {} of {} planned fault(s) not injected\n",
                e.number,
                e.unreached.len(),
                e.plan.len()
            );
            let _ = writeln!(b, "  planned:      {}", faults_label(None, &e.plan));
            let _ = writeln!(b, "  not injected: {}", faults_label(None, &e.unreached));
            if let TestOutcome::Fail { message } = &e.outcome {
                let _ = writeln!(b, "  assertion:    {message} (which does not test the plan)");
            }
            let _ = write!(b, "  replay:       {replay_cmd}");
            blocks.push(b);
        } else if let TestOutcome::Fail { message } = &e.outcome {
            let mut b = format!("execution #{} FAILED: {}\n", e.number, case_name(e));
            for line in failure_block(e, message, &replay_cmd).lines() {
                let _ = writeln!(b, "  {line}");
            }
            blocks.push(b.trim_end().to_string());
        }
        if let Some(what) = &e.unsettled {
            blocks.push(format!(
                "execution #{}: its spans did not settle, so its observation may be incomplete: {what}",
                e.number
            ));
        }
        if let Some(incomplete) = e.incomplete() {
            blocks.push(format!("execution #{}: its observation is {incomplete}", e.number));
        }
    }
    if let Err(why) = report.tested_faults() {
        blocks.push(why);
    }
    if report.unattributed_spans > 0 {
        blocks.push(format!(
            "{} span(s) ended outside the executions' traces, seen by no execution: {}",
            report.unattributed_spans,
            crate::report::UNATTRIBUTED_WHY
        ));
    }
    if report.truncated {
        blocks.push(format!(
            "the search stopped at its limit of {} execution(s) with {} plan(s) pending: the fault space was \
             not exhausted",
            report.executions.len(),
            report.pending
        ));
    }
    if blocks.is_empty() {
        return Ok(());
    }
    let failing = report.failing().len();
    Err(format!(
        "sfit: {}: {} of {} execution(s) failed, {} problem(s) in all:\n\n{}\n",
        report.test,
        failing,
        report.executions.len(),
        blocks.len(),
        blocks.join("\n\n")
    ))
}

impl Search {
    /// Searches `test` exhaustively, saves the report ([`report_path`]) and returns it; panics with one block
    /// per failing execution (faults, assertion, replay command) when [`check_exhaustive`] finds a problem,
    /// when the search cannot run, or when the report cannot be saved (a clean search too: without the file,
    /// `DEI_SFIT_REPLAY` would read a stale report or none). With `DEI_SFIT_REPLAY=N` set, it replays execution `N` of the saved
    /// report instead (and panics when that execution fails or does not carry out its plan).
    ///
    /// ```should_panic
    /// # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
    /// # async fn main() {
    /// use dei_sfit::model::Caller;
    /// use dei_sfit::{FaultCatalog, Recorder, Search, SearchOptions, test_fn};
    /// let rec = Recorder::new();
    /// let r = rec.clone();
    /// // no fallback: failing B's echo fails the test
    /// let test = test_fn("no fallback", move |run| {
    ///     let a = Caller::root(&run, &r);
    ///     async move { a.call("B/echo", "x", &[1], |_| async { Ok(()) }).await.map_err(|f| format!("{f}")) }
    /// });
    /// let options = SearchOptions { catalog: FaultCatalog::single(dei_propagator::Fault::Connection), ..SearchOptions::default() };
    /// Search::new(options, rec).assert_exhaustive(&test).await; // panics: execution #2 FAILED ...
    /// # }
    /// ```
    pub async fn assert_exhaustive(&self, test: &dyn FunctionalTest) -> Report {
        let path = report_path(test.name());
        let replay = replay_command();
        if let Some(n) = std::env::var(REPLAY_ENV).ok().filter(|v| !v.is_empty()) {
            let n: usize = n
                .parse()
                .unwrap_or_else(|_| panic!("{REPLAY_ENV}={n:?}: an execution number expected"));
            let report = Report::load(&path)
                .unwrap_or_else(|e| panic!("{REPLAY_ENV}={n}: cannot read the saved report {}: {e}", path.display()));
            let record = match Search::replay(test, &report, n, self.source()).await {
                Ok(r) => r,
                Err(SearchError::Unreached(u)) => panic!("sfit: {}: {u}", test.name()),
                Err(e) => panic!("sfit: {}: replay of #{n} failed: {e}", test.name()),
            };
            if let TestOutcome::Fail { message } = &record.outcome {
                let text = failure_block(&record, message, &replay.for_execution(n));
                panic!(
                    "sfit: {}: replayed execution #{n} FAILED: {}\n{text}",
                    test.name(),
                    case_name(&record)
                );
            }
            eprintln!("sfit: {}: replayed execution #{n}: pass", test.name());
            return report;
        }
        let report = match self.run(test).await {
            Ok(r) => r,
            Err(e) => panic!("sfit: {}: the search could not run: {e}", test.name()),
        };
        // written aside and renamed: another process saving the same test's report never leaves a torn file
        let saved = path
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| report.to_json().map_err(std::io::Error::other))
            .and_then(|json| crate::report::write_atomically(&path, json.as_bytes()));
        let saved = saved.map_err(|e| {
            format!(
                "the report could not be saved to {} ({e}): replays need it",
                path.display()
            )
        });
        if let Err(text) = check_exhaustive(&report, &replay) {
            match saved {
                Ok(()) => panic!("{text}report: {}", path.display()),
                Err(why) => panic!("{text}{why}"),
            }
        }
        if let Err(why) = saved {
            panic!("sfit: {}: the search was exhaustive and clean, but {why}", test.name());
        }
        report
    }
}

/// [`Search::assert_exhaustive`] over the in-process span source ([`crate::testing::in_process_spans`]): the
/// one-line form for services running in the test's process.
#[cfg(feature = "testing")]
pub async fn assert_exhaustive(test: &dyn FunctionalTest, options: crate::SearchOptions) -> Report {
    Search::new(options, crate::testing::in_process_spans())
        .assert_exhaustive(test)
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_test_paths_name_the_test_to_rerun() {
        assert!(looks_like_test_path("a_search_fails"));
        assert!(looks_like_test_path("tests::a_search_fails"));
        assert!(!looks_like_test_path("tokio-runtime-worker"));
        assert!(!looks_like_test_path("main"));
        assert!(!looks_like_test_path(""));
        assert!(!looks_like_test_path("a b"));
    }
}
