//! Golden data for the analyses, in the style of the OpenTelemetry Collector's servicegraph connector's
//! `testdata/`: each case is a folder `collector-plugin/testdata/<analysis>/<case>/` with
//! - `input.json`: a JSON array of OTLP/JSON export requests, one per trace, ingested one after another as the
//!   receivers ingest requests (decoded into the lite view, ids checked, spans extracted);
//! - `output.json`: the analysis's JSON view of the state they leave.
//!
//! A test compares its view with `output.json` exactly and fails with a line diff. `DEI_UPDATE_GOLDEN=1`
//! rewrites the outputs instead (review the change with `git diff`); the inputs are edited by hand.

use crate::counters::Counters;
use crate::state::{CollectorState, StateConfig};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

/// The environment variable that rewrites the golden outputs.
const UPDATE: &str = "DEI_UPDATE_GOLDEN";

fn case_dir(case: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("testdata").join(case)
}

/// The state after ingesting `case`'s input, trace by trace.
pub fn ingest(case: &str) -> CollectorState {
    let path = case_dir(case).join("input.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let requests: Vec<serde_json::Value> =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: not a JSON array: {e}", path.display()));
    let mut state = CollectorState::new(StateConfig::default(), Arc::new(Counters::default()));
    for (i, request) in requests.iter().enumerate() {
        let arena = bumpalo::Bump::new();
        let req = crate::otlp::json_value_lite(request, &arena)
            .unwrap_or_else(|e| panic!("{}: request {i}: {e}", path.display()));
        crate::otlp::validate_lite_ids(&req).unwrap_or_else(|e| panic!("{}: request {i}: {e}", path.display()));
        let mut issues = Vec::new();
        let records = crate::span_record::extract_lite(&req, &mut issues);
        assert_eq!(issues, vec![], "{}: request {i}", path.display());
        state.ingest(records, Instant::now());
    }
    state
}

/// Ingests `case`'s input, renders `view` of the state, and compares it with `output.json` (or rewrites that
/// with `DEI_UPDATE_GOLDEN=1`). Returns the state and the view for the test's own assertions.
pub fn check(
    case: &str,
    view: impl FnOnce(&CollectorState) -> serde_json::Value,
) -> (CollectorState, serde_json::Value) {
    let state = ingest(case);
    let got = view(&state);
    let text = serde_json::to_string_pretty(&got).expect("a JSON value writes") + "\n";
    let path = case_dir(case).join("output.json");
    if std::env::var_os(UPDATE).is_some_and(|v| v == "1") {
        std::fs::write(&path, &text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        return (state, got);
    }
    let want =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e} (write it with {UPDATE}=1)", path.display()));
    if want != text {
        panic!(
            "{} differs from the analysis's view (- expected, + got; {UPDATE}=1 rewrites it):\n{}",
            path.display(),
            diff(&want, &text)
        );
    }
    (state, got)
}

/// A line diff of `a` and `b` (longest common subsequence), with two lines of context around changes.
fn diff(a: &str, b: &str) -> String {
    let (a, b): (Vec<&str>, Vec<&str>) = (a.lines().collect(), b.lines().collect());
    // lcs[i][j]: the longest common subsequence of a[i..] and b[j..]
    let mut lcs = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            lcs[i][j] = if a[i] == b[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let mut lines: Vec<(char, &str)> = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            lines.push((' ', a[i]));
            i += 1;
            j += 1;
        } else if i < a.len() && (j == b.len() || lcs[i + 1][j] >= lcs[i][j + 1]) {
            lines.push(('-', a[i]));
            i += 1;
        } else {
            lines.push(('+', b[j]));
            j += 1;
        }
    }
    let near = |k: usize| {
        lines[k.saturating_sub(2)..(k + 3).min(lines.len())]
            .iter()
            .any(|(c, _)| *c != ' ')
    };
    let mut out = String::new();
    let mut skipped = false;
    for (k, (c, line)) in lines.iter().enumerate() {
        if near(k) {
            out.push_str(&format!("{c} {line}\n"));
            skipped = false;
        } else if !skipped {
            out.push_str("  …\n");
            skipped = true;
        }
    }
    out
}

#[test]
fn the_diff_shows_what_changed_in_context() {
    let d = diff("a\nb\nc\nd\ne\nf\ng\n", "a\nb\nc\nD\ne\nf\ng\nh\n");
    assert_eq!(d, "  …\n  b\n  c\n- d\n+ D\n  e\n  f\n  g\n+ h\n");
}
