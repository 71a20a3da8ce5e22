//! JUnit XML reports ([`Report::to_junit`], [`Report::write_junit`]), the format GitHub, GitLab and Jenkins
//! render as test results.
//!
//! One `<testsuite>` per search (the functional test) and one `<testcase>` per execution, named by the faults
//! it injected (`no faults` for the fault-free run; by its plan when some planned fault was not injected):
//! - a failing execution carries a `<failure>` with the assertion's message, the injected faults and the
//!   command that replays it;
//! - an execution with unreached faults (planned, never injected) is `<skipped>` with the reason: its verdict
//!   does not test its plan, so it is neither a pass nor a failure (a failing verdict is quoted in the text);
//! - an execution whose spans did not settle is an `<error>` of type `unsettled`: what it observed may be
//!   incomplete, whatever its verdict (quoted in the text); one some of whose spans the collector dropped is
//!   an `<error>` of type `incomplete` (`incomplete: the collector dropped N span(s) or stream message
//!   event(s) …`): what it observed is
//!   incomplete (when both, the `unsettled` error's text says it is incomplete too);
//! - work the search did not do is an `<error>` of a test case named `search`, present only then: nothing
//!   injected, the execution limit reached with plans pending, spans that ended outside every execution's
//!   trace in a parallel search;
//! - redundant executions, spans an execution's observation lacks (malformed, or dropped by the collector),
//!   and the search's notes and warnings go to `<system-out>` / `<system-err>`.
//!
//! `errors=` counts the test cases with an `<error>`, so a file for a search that did not do its work is
//! never green.
//!
//! The output is valid against the Jenkins xUnit plugin's `junit-10.xsd` (tested in
//! `dei-sfit/tests/junit.rs`). Text is escaped, and characters XML 1.0 cannot carry are replaced by U+FFFD.

use crate::report::{
    ExecutionRecord, INCOMPLETE_WHY, Report, TestOutcome, UNATTRIBUTED_WHY, UNREACHED_WHY, UNSETTLED_WHY,
};
use crate::test::PlannedFault;
use std::fmt::Write as _;
use std::path::Path;

/// The prefix of the report's JUnit `<property>` names (`dei.strategy`, `dei.truncated`, …): the namespace
/// of the span contract's keys (`dei.index` without its name).
const PROPERTY_PREFIX: &str = dei_propagator::semconv::INDEX.split_at(4).0;

/// How a JUnit report tells a reader to replay one execution.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum ReplayCommand {
    /// A shell command in which `{n}` stands for the execution's number, e.g.
    /// `cargo run --example cinema10 -- --replay target/sfit/cinema10.json {n}`.
    Template(String),
    /// No command line: the text names the API call on the saved JSON report
    /// (`Search::replay(test, &Report::load(path)?, N, source)`).
    #[default]
    Api,
}

impl ReplayCommand {
    /// The command (or API call) that replays execution `n`.
    pub fn for_execution(&self, n: usize) -> String {
        match self {
            ReplayCommand::Template(t) => t.replace("{n}", &n.to_string()),
            ReplayCommand::Api => {
                format!("Search::replay(&test, &Report::load(\"<the saved JSON report>\")?, {n}, source) (dei_sfit)")
            }
        }
    }
}

/// `signature@index:fault`, the form the terminal report uses; `signature@index[message k, payload "…"]:fault`
/// when `e` observed the target as the k-th message of a stream, or with a payload preview.
pub(crate) fn fault_label(e: Option<&ExecutionRecord>, p: &PlannedFault) -> String {
    let sig = if p.signature.is_empty() {
        "?"
    } else {
        p.signature.as_str()
    };
    let rpc = e.and_then(|e| e.rpcs.iter().find(|r| r.index == p.index));
    let mut what = Vec::new();
    if let Some(k) = rpc.and_then(|r| r.message) {
        what.push(format!("message {k}"));
    }
    if let Some(preview) = rpc.and_then(|r| r.payload_preview.as_ref()) {
        what.push(format!("payload {preview:?}"));
    }
    let what = if what.is_empty() {
        String::new()
    } else {
        format!("[{}]", what.join(", "))
    };
    format!("{sig}@{}{what}:{}", p.index, p.fault)
}

/// A list of faults as `a + b + c`, or `no faults`.
pub(crate) fn faults_label(e: Option<&ExecutionRecord>, faults: &[PlannedFault]) -> String {
    if faults.is_empty() {
        "no faults".to_string()
    } else {
        faults.iter().map(|p| fault_label(e, p)).collect::<Vec<_>>().join(" + ")
    }
}

/// The test case's name: the injected faults, or the plan when some of it was not injected.
pub(crate) fn case_name(e: &ExecutionRecord) -> String {
    if e.unreached.is_empty() {
        faults_label(Some(e), &e.effective)
    } else {
        format!("planned {}", faults_label(None, &e.plan))
    }
}

/// Text XML 1.0 can carry, escaped for an attribute value or element content.
fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            // attribute values normalise raw newlines and tabs; keep them as character references
            '\n' => out.push_str("&#10;"),
            '\r' => out.push_str("&#13;"),
            '\t' => out.push_str("&#9;"),
            c if (c as u32) < 0x20 || c == '\u{FFFE}' || c == '\u{FFFF}' => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    out
}

/// Seconds with millisecond precision (the schema's `SUREFIRE_TIME`: digits, a dot, digits).
fn seconds(us: u64) -> String {
    format!("{}.{:03}", us / 1_000_000, (us % 1_000_000) / 1000)
}

/// The failure text: the assertion, the injected faults, the replay command.
pub(crate) fn failure_block(e: &ExecutionRecord, message: &str, replay: &str) -> String {
    let mut text = String::new();
    let _ = writeln!(text, "assertion: {message}");
    if e.effective.is_empty() {
        let _ = writeln!(text, "injected faults: none (the fault-free run)");
    } else {
        let _ = writeln!(text, "injected faults:");
        for p in &e.effective {
            let _ = writeln!(text, "  {}", fault_label(Some(e), p));
        }
    }
    let _ = writeln!(text, "plan (dei-faults wire form): {}", e.plan_wire);
    let _ = write!(text, "replay: {replay}");
    text
}

impl Report {
    /// What the search as a whole did not do, one sentence each: nothing injected, the execution limit
    /// reached, spans outside the executions' traces. Empty for a search that did its work.
    pub fn search_errors(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.nothing_injected {
            out.push(
                self.tested_faults()
                    .err()
                    .unwrap_or_else(|| "nothing injected".to_string()),
            );
        }
        if self.truncated {
            out.push(format!(
                "the search stopped at the execution limit ({} execution(s)) with {} plan(s) pending: the fault \
                 space was not exhausted",
                self.executions.len(),
                self.pending
            ));
        }
        if self.unattributed_spans > 0 {
            out.push(format!(
                "{} span(s) outside the executions' traces: {UNATTRIBUTED_WHY}",
                self.unattributed_spans
            ));
        }
        out
    }

    /// The report as JUnit XML: one test suite (this search), one test case per execution named by its
    /// faults; failures carry the assertion, the injected faults and `replay`'s command; executions with
    /// unreached faults are skipped with the reason; executions whose spans did not settle (`unsettled`) or
    /// whose spans the collector dropped (`incomplete`) are errors, and so is what the search did not do
    /// ([`search_errors`](Report::search_errors), a test case named `search`).
    pub fn to_junit(&self, replay: &ReplayCommand) -> String {
        let search_errors = self.search_errors();
        let tests = self.executions.len() + usize::from(!search_errors.is_empty());
        let unsettled = self.executions.iter().filter(|e| e.unsettled.is_some()).count();
        let incomplete = self.incomplete().len();
        // an execution whose observation is not whole (unsettled, incomplete, or both) is an error
        let errored = |e: &ExecutionRecord| e.unsettled.is_some() || e.spans_dropped > 0;
        let errors = self.executions.iter().filter(|e| errored(e)).count() + usize::from(!search_errors.is_empty());
        let skipped = self
            .executions
            .iter()
            .filter(|e| !errored(e) && !e.unreached.is_empty())
            .count();
        let failures = self
            .executions
            .iter()
            .filter(|e| !errored(e) && e.unreached.is_empty() && !e.outcome.passed())
            .count();
        let total_us: u64 = self.executions.iter().map(|e| e.test_us + e.overhead_us).sum();
        let suite = escape(&format!("sfit: {}", self.test));
        let classname = escape(&format!("sfit.{}", self.test));
        let mut x = String::new();
        let _ = writeln!(x, r#"<?xml version="1.0" encoding="UTF-8"?>"#);
        let _ = writeln!(
            x,
            r#"<testsuites name="{suite}" tests="{tests}" failures="{failures}" errors="{errors}" time="{}">"#,
            seconds(total_us)
        );
        let _ = writeln!(
            x,
            r#"  <testsuite name="{suite}" tests="{tests}" failures="{failures}" errors="{errors}" skipped="{skipped}" time="{}">"#,
            seconds(total_us)
        );
        let _ = writeln!(x, "    <properties>");
        // the names without the prefix: `PROPERTY_PREFIX` is put before each when it is written
        let props = [
            ("instantiation", self.options.instantiation.name.to_string()),
            ("strategy", format!("{:?}", self.options.strategy)),
            ("parallelism", self.options.parallelism.max(1).to_string()),
            ("parallelism_used", self.parallelism_used.to_string()),
            ("redundant", self.redundant().len().to_string()),
            ("skipped_by_reduction", self.skipped.len().to_string()),
            ("truncated", self.truncated.to_string()),
            ("pending", self.pending.to_string()),
            ("nothing_injected", self.nothing_injected.to_string()),
            ("unsettled", unsettled.to_string()),
            ("incomplete", incomplete.to_string()),
            ("unattributed_spans", self.unattributed_spans.to_string()),
            (
                "malformed_spans",
                self.executions
                    .iter()
                    .map(|e| e.malformed_spans)
                    .sum::<usize>()
                    .to_string(),
            ),
            (
                "spans_dropped",
                self.executions.iter().map(|e| e.spans_dropped).sum::<u64>().to_string(),
            ),
        ];
        for (name, value) in props {
            let _ = writeln!(
                x,
                r#"      <property name="{}{}" value="{}"/>"#,
                escape(PROPERTY_PREFIX),
                escape(name),
                escape(&value)
            );
        }
        let _ = writeln!(x, "    </properties>");
        for e in &self.executions {
            let name = escape(&format!("#{} {}", e.number, case_name(e)));
            let _ = write!(
                x,
                r#"    <testcase name="{name}" classname="{classname}" time="{}">"#,
                seconds(e.test_us)
            );
            let replay_cmd = replay.for_execution(e.number);
            let not_whole = match (&e.unsettled, e.incomplete()) {
                (Some(what), incomplete) => {
                    let message = format!("spans did not settle: {what}");
                    let mut text = format!("{message}\n{UNSETTLED_WHY}");
                    if let Some(incomplete) = incomplete {
                        let _ = write!(text, "\n{incomplete}\n{INCOMPLETE_WHY}");
                    }
                    Some(("unsettled", message, text))
                }
                (None, Some(incomplete)) => {
                    let text = format!("{incomplete}\n{INCOMPLETE_WHY}");
                    Some(("incomplete", incomplete, text))
                }
                (None, None) => None,
            };
            if let Some((kind, message, mut text)) = not_whole {
                match &e.outcome {
                    TestOutcome::Fail { message } => {
                        let _ = write!(text, "\nthe test failed: {message}");
                    }
                    TestOutcome::Pass => text.push_str("\nthe test passed"),
                }
                if !e.unreached.is_empty() {
                    let _ = write!(text, "\nnot injected: {}", faults_label(None, &e.unreached));
                }
                let _ = write!(text, "\nreplay: {replay_cmd}");
                let _ = write!(
                    x,
                    "\n      <error type=\"{kind}\" message=\"{}\">{}</error>",
                    escape(&message),
                    escape(&text)
                );
            } else if !e.unreached.is_empty() {
                let mut reason = format!(
                    "{} of {} planned fault(s) not injected: {}",
                    e.unreached.len(),
                    e.plan.len(),
                    faults_label(None, &e.unreached)
                );
                if let TestOutcome::Fail { message } = &e.outcome {
                    let _ = write!(reason, "; the test failed ({message}), which does not test the plan");
                }
                let text = format!("{reason}\n{UNREACHED_WHY}\nreplay: {replay_cmd}");
                let _ = write!(
                    x,
                    "\n      <skipped message=\"{}\">{}</skipped>",
                    escape(&reason),
                    escape(&text)
                );
            } else if let TestOutcome::Fail { message } = &e.outcome {
                let text = failure_block(e, message, &replay_cmd);
                let _ = write!(
                    x,
                    "\n      <failure type=\"assertion\" message=\"{}\">{}</failure>",
                    escape(message),
                    escape(&text)
                );
            }
            let mut out = format!(
                "execution #{}: {} RPC(s) observed; plan {}",
                e.number,
                e.rpcs.len(),
                faults_label(None, &e.plan)
            );
            if let Some(r) = e.redundant_with {
                let _ = write!(out, "; REDUNDANT: the same effective fault set as #{r}");
            }
            if let Some(r) = e.redundant_by_reference_with {
                let _ = write!(
                    out,
                    "; REDUNDANT: the same effective fault set by reference index as #{r}"
                );
            }
            if let Some(why) = &e.in_flight_redundant {
                let _ = write!(out, "; ran while already redundant (in flight): {why}");
            }
            if e.malformed_spans > 0 {
                let _ = write!(
                    out,
                    "; {} span(s) with malformed dei.* attributes, left out: RPCs or faults may be missing",
                    e.malformed_spans
                );
            }
            if e.spans_dropped > 0 {
                let _ = write!(
                    out,
                    "; {} span(s) or stream message event(s) not recorded where the span source reads them \
                     (dei-collector dropped them past its cap of RPCs per trace): their RPCs and faults are missing",
                    e.spans_dropped
                );
            }
            let _ = write!(x, "\n      <system-out>{}</system-out>", escape(&out));
            let _ = writeln!(x, "\n    </testcase>");
        }
        if !search_errors.is_empty() {
            let message = search_errors
                .iter()
                .map(|e| e.split(':').next().unwrap_or(e))
                .collect::<Vec<_>>()
                .join("; ");
            let _ = writeln!(
                x,
                "    <testcase name=\"search\" classname=\"{classname}\" time=\"0.000\">\n      <error \
                 type=\"search\" message=\"{}\">{}</error>\n    </testcase>",
                escape(&message),
                escape(&search_errors.join("\n"))
            );
        }
        if !self.notes.is_empty() {
            let _ = writeln!(x, "    <system-out>{}</system-out>", escape(&self.notes.join("\n")));
        }
        if !self.warnings.is_empty() {
            let _ = writeln!(x, "    <system-err>{}</system-err>", escape(&self.warnings.join("\n")));
        }
        let _ = writeln!(x, "  </testsuite>");
        let _ = writeln!(x, "</testsuites>");
        x
    }

    /// Writes [`to_junit`](Report::to_junit) to `path`, whole or not at all
    /// ([`write_atomically`](crate::report::write_atomically)).
    pub fn write_junit(&self, path: impl AsRef<Path>, replay: &ReplayCommand) -> std::io::Result<()> {
        crate::report::write_atomically(path.as_ref(), self.to_junit(replay).as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_keeps_text_and_drops_what_xml_cannot_carry() {
        assert_eq!(escape("a<b>&\"'"), "a&lt;b&gt;&amp;&quot;&apos;");
        assert_eq!(escape("x\u{1}y\nz"), "x\u{FFFD}y&#10;z");
        assert_eq!(seconds(1_234_567), "1.234");
        assert_eq!(seconds(999), "0.000");
    }

    #[test]
    fn replay_commands_name_the_execution() {
        let t = ReplayCommand::Template("run --replay r.json {n}".into());
        assert_eq!(t.for_execution(7), "run --replay r.json 7");
        assert!(ReplayCommand::Api.for_execution(3).contains(", 3, source)"));
    }
}
