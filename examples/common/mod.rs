//! Shared code of the corpus examples and tests: generated protos, test telemetry, loopback servers.
//!
//! Included with `#[path = "common/mod.rs"] mod common;` (examples) or
//! `#[path = "../examples/common/mod.rs"] mod common;` (tests).
#![allow(dead_code)]

pub mod cinema;
pub mod hello;
pub mod table1;

use dei_instrumentation::{DeiClientLayer, DeiClientService, DeiConfig, DeiServerLayer};
use dei_sfit::InMemorySpans;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
use std::net::SocketAddr;
use std::sync::OnceLock;
use tokio::net::TcpListener;
use tracing_subscriber::Layer as _;
use tracing_subscriber::layer::SubscriberExt;

/// The generated protobuf code.
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

/// The process's telemetry: the DEI propagator installed globally, and a tracing subscriber whose
/// OpenTelemetry layer exports every span, as it ends, to an in-memory exporter and to a span router (from
/// which the executions of a parallel search, `--parallel N`, read their own trace's spans).
pub fn spans() -> InMemorySpans {
    static EXPORTER: OnceLock<(InMemorySpanExporter, dei_sfit::source::SpanRouter)> = OnceLock::new();
    let (exporter, router) = EXPORTER.get_or_init(|| {
        dei_propagator::install_global_propagator();
        let exporter = InMemorySpanExporter::default();
        let router = dei_sfit::source::SpanRouter::new();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(exporter.clone())
            .with_span_processor(router.clone())
            .build();
        let tracer = provider.tracer("dei-corpus");
        // INFO and above: the DEI client and server spans, not the transport crates' debug and trace spans
        let layer = tracing_opentelemetry::layer()
            .with_tracer(tracer)
            .with_filter(tracing_subscriber::filter::LevelFilter::INFO);
        let subscriber = tracing_subscriber::registry().with(layer);
        let _ = tracing::subscriber::set_global_default(subscriber);
        opentelemetry::global::set_tracer_provider(provider);
        (exporter, router)
    });
    InMemorySpans::new(exporter.clone()).with_router(router.clone())
}

/// A gRPC channel to `addr` through the DEI client layer.
pub type Channel = DeiClientService<tonic::transport::Channel>;

/// A lazily connecting channel to `addr` with the DEI client layer.
pub fn channel(addr: SocketAddr, config: &DeiConfig) -> Channel {
    let endpoint = tonic::transport::Endpoint::from_shared(format!("http://{addr}")).expect("loopback URI");
    tower::ServiceBuilder::new()
        .layer(DeiClientLayer::new(config.clone()))
        .service(endpoint.tcp_nodelay(true).connect_lazy())
}

/// Binds an ephemeral loopback port.
pub async fn bind() -> (TcpListener, SocketAddr) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind loopback");
    let addr = listener.local_addr().expect("local addr");
    (listener, addr)
}

/// Serves one tonic service with the DEI server layer on `listener` until the process ends.
pub fn serve<S>(listener: TcpListener, config: &DeiConfig, service: S)
where
    S: tower::Service<
            http::Request<tonic::body::Body>,
            Response = http::Response<tonic::body::Body>,
            Error = std::convert::Infallible,
        > + tonic::server::NamedService
        + Clone
        + Send
        + Sync
        + 'static,
    S::Future: Send + 'static,
{
    let router = tonic::transport::Server::builder()
        .layer(DeiServerLayer::new(config.clone()))
        .add_service(service);
    tokio::spawn(async move {
        let incoming = tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
        let _ = router.serve_with_incoming(incoming).await;
    });
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
            println!("{usage}");
            std::process::exit(0)
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
       {name} --replay FILE N [--allow-unreached]

Searches the example's functional test exhaustively, prints the report and writes it as JSON
(default target/sfit/{name}.json); with --replay, reruns execution N of a saved report instead.

  --bfs              breadth-first order (default: depth-first)
  --max N            stop after N executions
  --single           single-fault plans only
  --encapsulation    service-encapsulation dynamic reduction
  --parallel N       run up to N executions at once (default 1)
  --json PATH        where to write the report
  --junit PATH       also write the report as JUnit XML (one test case per execution)
  --quiet            no per-execution progress on stderr
  --replay FILE N    rerun execution N of report FILE; exits 1 when the test fails, and 3 when a planned
                     fault was not injected (the plan was not carried out, whatever the verdict)
  --allow-unreached  with --replay: report unreached faults but do not fail for them
  -h, --help         this text"
    )
}

/// Command-line options shared by the corpus examples.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Args {
    /// `--replay FILE N`: rerun execution N of a saved report instead of searching.
    pub replay: Option<(String, usize)>,
    /// `--allow-unreached`: a replay that does not inject every planned fault still exits by the verdict.
    pub allow_unreached: bool,
    /// `--bfs`: breadth-first.
    pub bfs: bool,
    /// `--max N`: stop after N executions.
    pub max: Option<usize>,
    /// `--single`: single-fault mode.
    pub single: bool,
    /// `--encapsulation`: service-encapsulation reduction.
    pub encapsulation: bool,
    /// `--json PATH`: where to write the report (default target/sfit/NAME.json).
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

/// Exit code of a replay whose plan was not carried out (a planned fault was not injected).
pub const EXIT_UNREACHED: i32 = 3;

/// Searches `test` (or replays one execution of a saved report), prints the report and writes it as JSON.
///
/// Exit codes: 0 done (a search, or a replay that injected every planned fault and passed), 1 the replayed
/// execution failed, 2 a bad command line or a search or replay that could not run, [`EXIT_UNREACHED`] a
/// replay that did not inject every planned fault (unless `--allow-unreached`).
pub async fn search_main(name: &str, test: &dyn dei_sfit::FunctionalTest, base: dei_sfit::SearchOptions) {
    let args = Args::parse(name);
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
        println!(
            "replayed #{n} of {file}: {verdict}; {} of {} planned fault(s) injected",
            e.plan.len() - e.unreached.len(),
            e.plan.len()
        );
        for p in &e.effective {
            println!("  injected {} on {} ({})", p.fault, p.index, p.signature);
        }
        for p in &e.unreached {
            println!("  NOT injected {} on {} ({})", p.fault, p.index, p.signature);
        }
        if let Some(what) = &e.unsettled {
            eprintln!("warning: the execution's spans did not settle: {what}");
        }
        if !e.unreached.is_empty() {
            let unreached = dei_sfit::Unreached {
                record: e.clone(),
                instantiation: report.options.instantiation.name.to_string(),
            };
            if args.allow_unreached {
                eprintln!("warning (--allow-unreached): {unreached}");
            } else {
                eprintln!("error: {unreached}");
                eprintln!("(--allow-unreached accepts such a replay; its verdict still does not test the plan)");
                std::process::exit(EXIT_UNREACHED);
            }
        }
        if !e.outcome.passed() {
            std::process::exit(1);
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
    print!("{report}");
    let path = args.json.clone().unwrap_or_else(|| format!("target/sfit/{name}.json"));
    if let Some(dir) = std::path::Path::new(&path).parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    match report.save(&path) {
        Ok(()) => println!("report: {path} (replay a failing execution: --replay {path} N)"),
        Err(e) => {
            eprintln!("cannot write {path}: {e}");
            std::process::exit(2);
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
            Ok(()) => println!("JUnit report: {junit}"),
            Err(e) => {
                eprintln!("cannot write {junit}: {e}");
                std::process::exit(2);
            }
        }
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
