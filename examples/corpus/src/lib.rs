//! The corpus of `dei`'s examples and tests: the paper's programs (Figs. 1-5, the §5.2 Hello/World service) and
//! the cinema services as real tonic and axum services on loopback, their functional tests, and the command
//! line the corpus examples share.
//!
//! Serving, channels and telemetry come from [`dei_sfit::testing`]; this crate adds the services and tests.
//! Not published: it is the examples' and tests' own code (`publish = false`).

pub mod cinema;
pub mod demo_setup;
pub mod hello;
pub mod table1;

use dei_sfit::InMemorySpans;
use dei_sfit::testing::GrpcChannel;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use tokio::net::TcpListener;

/// The generated protobuf code.
// (tonic-prost-build documents only what the .proto files comment: the workspace's missing_docs is off here)
#[allow(missing_docs)]
pub mod pb {
    /// examples/proto/cinema.proto
    pub mod cinema {
        tonic::include_proto!("cinema");
    }
    /// examples/proto/helloworld.proto
    pub mod helloworld {
        tonic::include_proto!("helloworld");
    }
}

/// The process's telemetry, installed once ([`dei_sfit::testing::in_process_spans`]): the DEI propagator, and
/// every INFO span exported as it ends to an in-memory exporter and to a span router (from which the
/// executions of a parallel search, `--parallel N`, read their own trace's spans).
pub fn spans() -> InMemorySpans {
    dei_sfit::testing::in_process_spans()
}

/// A gRPC channel through the DEI client layer.
pub type Channel = GrpcChannel;

/// A lazily connecting channel to `addr` with the DEI client layer ([`dei_sfit::testing::grpc_channel`]).
pub use dei_sfit::testing::grpc_channel as channel;

/// Serves one tonic service with the DEI server layer on a listener ([`dei_sfit::testing::serve_grpc`]).
pub use dei_sfit::testing::serve_grpc as serve;

/// Binds an ephemeral loopback port; the corpus cannot run without one.
pub async fn bind() -> (TcpListener, SocketAddr) {
    dei_sfit::testing::bind()
        .await
        .expect("bind an ephemeral loopback port")
}

/// Where a run writes its report when the command line does not say: its own file,
/// `target/sfit/<program>/<UTC time>.json`, so that no run overwrites another's (a web view showing one
/// keeps showing it); [`update_latest`] then points `latest.json` beside it at it.
pub fn run_report_path(program: &str) -> PathBuf {
    let now = time::OffsetDateTime::now_utc();
    PathBuf::from(format!(
        "target/sfit/{program}/{:04}-{:02}-{:02}T{:02}-{:02}-{:02}.{:03}Z.json",
        now.year(),
        u8::from(now.month()),
        now.day(),
        now.hour(),
        now.minute(),
        now.second(),
        now.millisecond()
    ))
}

/// Points `latest.json`, in the folder of `report`, at `report`: a symbolic link on Unix, a copy elsewhere,
/// replaced atomically ([`dei_sfit::report::point_latest_at`]: a reader never finds it missing). Returns the
/// link's path.
pub fn update_latest(report: &Path) -> std::io::Result<PathBuf> {
    dei_sfit::report::point_latest_at(report)
}

/// Standard output that a reader who went away (`| head`) does not turn into a panic: after a failed write
/// nothing more is written to it. A broken pipe stops the output quietly; any other error is reported once on
/// stderr and makes the run exit 2 at its end ([`Stdout::exit_code`]). The report files are written either way.
#[derive(Debug, Default)]
pub struct Stdout {
    stopped: bool,
    failed: bool,
}

impl Stdout {
    /// Writes `args` (and flushes), unless an earlier write failed.
    pub fn print(&mut self, args: std::fmt::Arguments<'_>) {
        use std::io::Write as _;
        if self.stopped {
            return;
        }
        let mut out = std::io::stdout().lock();
        if let Err(e) = out.write_fmt(args).and_then(|()| out.flush()) {
            self.stopped = true;
            if e.kind() != std::io::ErrorKind::BrokenPipe {
                self.failed = true;
                eprintln!("cannot write to standard output: {e}");
            }
        }
    }

    /// `code`, or 2 when a write failed other than by a broken pipe (a full disk, say) and `code` is 0.
    pub fn exit_code(&self, code: i32) -> i32 {
        if self.failed && code == 0 { 2 } else { code }
    }
}

/// Writes a line to a [`Stdout`]: `outln!(out, "{x} and {y}")`. Exported for the root package's examples,
/// which print through a [`Stdout`] too.
#[macro_export]
macro_rules! outln {
    ($out:expr, $($arg:tt)*) => {
        $out.print(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// Why a command line gives no arguments to run with.
#[derive(Debug, PartialEq, Eq)]
pub enum CliStop {
    /// `--help` or `-h`: print the usage and exit 0.
    Help,
    /// A bad command line: print why and the usage, and exit 2.
    Bad(String),
}

/// The parsed arguments, or exits: 0 after printing `usage` on stdout for `--help`, 2 after printing the
/// error and `usage` on stderr for a bad command line.
pub fn or_exit<T>(parsed: Result<T, CliStop>, usage: &str) -> T {
    match parsed {
        Ok(a) => a,
        Err(CliStop::Help) => {
            let mut out = Stdout::default();
            outln!(out, "{usage}");
            std::process::exit(out.exit_code(0))
        }
        Err(CliStop::Bad(message)) => {
            eprintln!("{message}\n{usage}");
            std::process::exit(2)
        }
    }
}

/// The next argument as the value of `flag`, parsed.
fn value<T: std::str::FromStr>(it: &mut impl Iterator<Item = String>, flag: &str, what: &str) -> Result<T, CliStop> {
    let v = it.next().ok_or_else(|| CliStop::Bad(format!("{flag} needs {what}")))?;
    v.parse()
        .map_err(|_| CliStop::Bad(format!("{flag}: {what} expected, not {v:?}")))
}

/// Refuses any argument but `--help`.
pub fn no_arguments(args: impl IntoIterator<Item = String>) -> Result<(), CliStop> {
    match args.into_iter().next() {
        None => Ok(()),
        Some(a) if a == "-h" || a == "--help" => Err(CliStop::Help),
        Some(a) => Err(CliStop::Bad(format!("unknown argument {a:?}"))),
    }
}

/// Positional numbers (or `--help`); anything else is refused.
pub fn numbers(args: impl IntoIterator<Item = String>) -> Result<Vec<usize>, CliStop> {
    args.into_iter()
        .map(|a| match a.as_str() {
            "-h" | "--help" => Err(CliStop::Help),
            _ => a
                .parse()
                .map_err(|_| CliStop::Bad(format!("unknown argument {a:?} (a number expected)"))),
        })
        .collect()
}

/// The usage of a corpus example that searches (or replays) one functional test.
pub fn search_usage(name: &str) -> String {
    format!(
        "usage: {name} [--bfs] [--max N] [--single] [--encapsulation] [--parallel N] [--json PATH] [--junit PATH] [--quiet]
       {name} --replay FILE N [--allow-unreached]   (no other option: a replay writes no file)

Searches the example's functional test exhaustively, prints the report and writes it as JSON
(default target/sfit/{name}/<UTC time>.json, one file per run, and target/sfit/{name}/latest.json
pointing at the newest); with --replay, reruns execution N of a saved report instead.

  --bfs              breadth-first order (default: depth-first)
  --max N            stop after N executions
  --single           single-fault plans only
  --encapsulation    service-encapsulation dynamic reduction
  --parallel N       run up to N executions at once (default 1)
  --json PATH        where to write the report
  --junit PATH       also write the report as JUnit XML (one test case per execution)
  --quiet            no per-execution progress on stderr
  --replay FILE N    rerun execution N of report FILE; exits 1 when the test fails, and 3 when a planned
                     fault was not injected or the run differed from the recorded one (an extra fault, an
                     index hit twice, a fault on another RPC): the plan was not carried out, whatever the verdict
  --allow-unreached  with --replay: report such faults and differences but do not fail for them
  -h, --help         this text"
    )
}

/// Command-line options shared by the corpus examples.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Args {
    /// `--replay FILE N`: rerun execution N of a saved report instead of searching.
    pub replay: Option<(String, usize)>,
    /// `--allow-unreached`: a replay that does not inject every planned fault, or differs otherwise from the
    /// recorded execution, still exits by the verdict (and says so).
    pub allow_unreached: bool,
    /// `--bfs`: breadth-first.
    pub bfs: bool,
    /// `--max N`: stop after N executions.
    pub max: Option<usize>,
    /// `--single`: single-fault mode.
    pub single: bool,
    /// `--encapsulation`: service-encapsulation reduction.
    pub encapsulation: bool,
    /// `--json PATH`: where to write the report (default [`run_report_path`], one file per run).
    pub json: Option<String>,
    /// `--junit PATH`: also write the report as JUnit XML.
    pub junit: Option<String>,
    /// `--parallel N`: run up to N executions at once.
    pub parallel: Option<usize>,
    /// `--quiet`: no per-execution progress.
    pub quiet: bool,
}

impl Args {
    /// Parses `args` (without the program name); unknown arguments and missing or malformed values are
    /// refused.
    pub fn parse_from(args: impl IntoIterator<Item = String>) -> Result<Args, CliStop> {
        let mut parsed = Args::default();
        let mut it = args.into_iter();
        while let Some(a) = it.next() {
            match a.as_str() {
                "--replay" => {
                    let file: String = value(&mut it, "--replay", "a report file and an execution number")?;
                    let n = value(&mut it, "--replay FILE", "an execution number")?;
                    parsed.replay = Some((file, n));
                }
                "--allow-unreached" => parsed.allow_unreached = true,
                "--bfs" => parsed.bfs = true,
                "--max" => parsed.max = Some(value(&mut it, "--max", "a number of executions")?),
                "--single" => parsed.single = true,
                "--encapsulation" => parsed.encapsulation = true,
                "--json" => parsed.json = Some(value(&mut it, "--json", "a path")?),
                "--junit" => parsed.junit = Some(value(&mut it, "--junit", "a path")?),
                "--parallel" => {
                    let n: usize = value(&mut it, "--parallel", "a number of executions at once")?;
                    if n == 0 {
                        return Err(CliStop::Bad("--parallel: at least 1".into()));
                    }
                    parsed.parallel = Some(n);
                }
                "--quiet" => parsed.quiet = true,
                "-h" | "--help" => return Err(CliStop::Help),
                other => return Err(CliStop::Bad(format!("unknown argument {other:?}"))),
            }
        }
        if parsed.allow_unreached && parsed.replay.is_none() {
            return Err(CliStop::Bad("--allow-unreached applies to --replay only".into()));
        }
        if parsed.replay.is_some() {
            // a replay reruns one execution under the report's options and writes no file: these would be
            // dropped without effect
            let ignored: Vec<&str> = [
                ("--bfs", parsed.bfs),
                ("--max", parsed.max.is_some()),
                ("--single", parsed.single),
                ("--encapsulation", parsed.encapsulation),
                ("--parallel", parsed.parallel.is_some()),
                ("--json", parsed.json.is_some()),
                ("--junit", parsed.junit.is_some()),
                ("--quiet", parsed.quiet),
            ]
            .into_iter()
            .filter_map(|(flag, given)| given.then_some(flag))
            .collect();
            if !ignored.is_empty() {
                return Err(CliStop::Bad(format!(
                    "{} cannot be used with --replay: a replay reruns one execution under the report's options \
                     and writes no report file",
                    ignored.join(", ")
                )));
            }
        }
        Ok(parsed)
    }

    /// Parses `std::env::args`, or exits as [`or_exit`] does.
    pub fn parse(name: &str) -> Args {
        or_exit(Args::parse_from(std::env::args().skip(1)), &search_usage(name))
    }
    /// Search options from these arguments.
    pub fn options(&self, base: dei_sfit::SearchOptions) -> dei_sfit::SearchOptions {
        use dei_sfit::{Progress, Reduction, Strategy};
        dei_sfit::SearchOptions {
            strategy: if self.bfs {
                Strategy::BreadthFirst
            } else {
                base.strategy
            },
            max_executions: self.max.or(base.max_executions),
            single_fault: self.single || base.single_fault,
            reduction: if self.encapsulation {
                Reduction::ServiceEncapsulation {
                    compare_responses: false,
                }
            } else {
                base.reduction
            },
            progress: if self.quiet { Progress::Silent } else { Progress::Stderr },
            parallelism: self.parallel.unwrap_or(base.parallelism),
            ..base
        }
    }
}

/// Exit code of a replay whose plan was not carried out (a planned fault was not injected, or the run
/// differed from the recorded execution).
pub const EXIT_UNREACHED: i32 = 3;

/// Searches `test` (or replays one execution of a saved report), prints the report and writes it as JSON.
///
/// Exit codes: 0 done (a search, or a replay that injected every planned fault and passed), 1 the replayed
/// execution failed, 2 a bad command line or a search or replay that could not run, [`EXIT_UNREACHED`] a
/// replay that did not inject every planned fault or differed otherwise from the recorded execution
/// ([`dei_sfit::Report::deviations`]; unless `--allow-unreached`).
pub async fn search_main(name: &str, test: &dyn dei_sfit::FunctionalTest, base: dei_sfit::SearchOptions) {
    let args = Args::parse(name);
    let mut out = Stdout::default();
    let source: std::sync::Arc<dyn dei_sfit::SpanSource> = std::sync::Arc::new(spans());
    if let Some((file, n)) = &args.replay {
        let report = match dei_sfit::Report::load(file) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("cannot read {file}: {e}");
                std::process::exit(2);
            }
        };
        let replayed = dei_sfit::Search::replay_allowing_unreached(test, &report, *n, source).await;
        let e = match replayed {
            Ok(e) => e,
            Err(e) => {
                eprintln!("replay failed: {e}");
                std::process::exit(2);
            }
        };
        let verdict = match &e.outcome {
            dei_sfit::TestOutcome::Pass => "pass".to_string(),
            dei_sfit::TestOutcome::Fail { message } => format!("FAIL: {message}"),
        };
        outln!(
            out,
            "replayed #{n} of {file}: {verdict}; {} of {} planned fault(s) injected",
            e.plan.len() - e.unreached.len(),
            e.plan.len()
        );
        for p in &e.effective {
            outln!(out, "  injected {} on {} ({})", p.fault, p.index, p.signature);
        }
        for p in &e.unreached {
            outln!(out, "  NOT injected {} on {} ({})", p.fault, p.index, p.signature);
        }
        let deviations = report.deviations(&e);
        for d in &deviations {
            outln!(out, "  DIFFERS from the recorded execution: {d}");
        }
        if let Some(what) = &e.unsettled {
            eprintln!("warning: the execution's spans did not settle: {what}");
        }
        if let Some(what) = e.incomplete() {
            eprintln!("warning: {what}");
        }
        if !e.unreached.is_empty() || !deviations.is_empty() {
            let unreached = dei_sfit::Unreached {
                record: e.clone(),
                instantiation: report.options.instantiation.name.to_string(),
                deviations,
            };
            if args.allow_unreached {
                eprintln!("warning (--allow-unreached): {unreached}");
            } else {
                eprintln!("error: {unreached}");
                eprintln!(
                    "(--allow-unreached accepts such a replay; its verdict still does not test the recorded plan)"
                );
                std::process::exit(EXIT_UNREACHED);
            }
        }
        let code = out.exit_code(if e.outcome.passed() { 0 } else { 1 });
        if code != 0 {
            std::process::exit(code);
        }
        return;
    }
    let options = args.options(base);
    let report = match dei_sfit::Search::with_shared_source(options, source).run(test).await {
        Ok(r) => r,
        Err(e) => {
            eprintln!("search failed: {e}");
            std::process::exit(2);
        }
    };
    out.print(format_args!("{report}"));
    let path = args
        .json
        .clone()
        .unwrap_or_else(|| run_report_path(name).display().to_string());
    if let Some(dir) = std::path::Path::new(&path).parent()
        && let Err(e) = std::fs::create_dir_all(dir)
    {
        eprintln!("cannot create {}: {e}", dir.display());
        std::process::exit(2);
    }
    match report.save(&path) {
        Ok(()) => outln!(out, "report: {path} (replay a failing execution: --replay {path} N)"),
        Err(e) => {
            eprintln!("cannot write {path}: {e}");
            std::process::exit(2);
        }
    }
    if args.json.is_none() {
        match update_latest(Path::new(&path)) {
            Ok(latest) => outln!(out, "latest report: {}", latest.display()),
            Err(e) => {
                eprintln!("cannot point latest.json at {path}: {e}");
                std::process::exit(2);
            }
        }
    }
    if let Some(junit) = &args.junit {
        let replay = dei_sfit::ReplayCommand::Template(format!(
            "cargo run --example {name} -- --replay {} {{n}}",
            shell_quote(&path)
        ));
        if let Some(dir) = std::path::Path::new(junit)
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            && let Err(e) = std::fs::create_dir_all(dir)
        {
            eprintln!("cannot create {}: {e}", dir.display());
            std::process::exit(2);
        }
        match report.write_junit(junit, &replay) {
            Ok(()) => outln!(out, "JUnit report: {junit}"),
            Err(e) => {
                eprintln!("cannot write {junit}: {e}");
                std::process::exit(2);
            }
        }
    }
    let code = out.exit_code(0);
    if code != 0 {
        std::process::exit(code);
    }
}

/// `s` as one POSIX shell word: unchanged when it holds only characters the shell leaves alone, otherwise in
/// single quotes (a quote inside written `'\''`).
pub fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '/' | '.' | '_' | '-' | '+' | ',' | ':' | '='))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}
