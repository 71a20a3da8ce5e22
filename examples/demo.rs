//! The whole of DEI in one command: `cargo run --release --example demo`.
//!
//! Starts an embedded dei-collector on loopback, the cinema-10 services (real tonic servers with the DEI
//! layers) exporting their spans to it over OTLP/HTTP, and searches the functional test exhaustively with
//! dei-sfit, injecting every combination of faults the earlier executions revealed. Prints a summary, writes
//! the search report, and serves the web view (service graph, prefix tree, traces, analyses, search
//! executions, diff) at `http://127.0.0.1:PORT/ui/` until Ctrl-C. The collector serves the whole report
//! directory, `target/sfit` (`--search-report target/sfit`): the web view's search tab lists this run's report
//! with every earlier run's, of the demo and of the corpus's other programs, and shows two side by side.
//!
//! Options: `--exit` (or `--no-serve`) stops after the summary; `--forward ENDPOINT` also forwards every span
//! to a Jaeger or OpenTelemetry Collector (`--forward-protocol grpc` with `http://host:4317`, the default, or
//! `http` with `http://host:4318/v1/traces`); `--program cinema-3|cinema-9|cinema-10`; `--report PATH`
//! (default: the run's own file, `target/sfit/demo/<UTC time>.json`, with `target/sfit/demo/latest.json`
//! pointing at the newest, so that a second run does not change what a running web view shows; with
//! `--report`, the collector serves that file alone);
//! `--progress` prints every execution.

use dei_corpus as common;
use dei_corpus::demo_setup;

use common::cinema::Variant;
use common::{CliStop, outln};
use dei_collector::server::Downstream;
use demo_setup::DemoOptions;
use std::path::PathBuf;
use std::process::ExitCode;

/// The command line.
struct Args {
    serve: bool,
    forward: Option<String>,
    forward_http: bool,
    variant: Variant,
    /// `--report PATH`; by default the run's own file (`dei_corpus::run_report_path("demo")`).
    report: Option<PathBuf>,
    progress: bool,
}

/// The directory of every run's report (`dei_corpus::run_report_path` writes under it).
const REPORT_DIR: &str = "target/sfit";

const USAGE: &str = "usage: demo [--exit | --no-serve] [--forward ENDPOINT [--forward-protocol grpc|http]] \
                     [--program cinema-3|cinema-9|cinema-10] [--report PATH] [--progress]";

fn parse() -> Result<Args, CliStop> {
    let mut args = Args {
        serve: true,
        forward: None,
        forward_http: false,
        variant: Variant::Cinema10,
        report: None,
        progress: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = |name: &str| it.next().ok_or_else(|| CliStop::Bad(format!("{name} needs a value")));
        match a.as_str() {
            "--exit" | "--no-serve" => args.serve = false,
            "--forward" => args.forward = Some(value("--forward")?),
            "--forward-protocol" => {
                args.forward_http = match value("--forward-protocol")?.as_str() {
                    "grpc" => false,
                    "http" => true,
                    other => return Err(CliStop::Bad(format!("--forward-protocol: grpc or http, not {other}"))),
                }
            }
            "--program" => {
                let name = value("--program")?;
                args.variant = Variant::ALL
                    .into_iter()
                    .find(|v| v.name() == name || v.name().replace('-', "") == name)
                    .ok_or_else(|| CliStop::Bad(format!("--program: cinema-3, cinema-9 or cinema-10, not {name}")))?;
            }
            "--report" => args.report = Some(PathBuf::from(value("--report")?)),
            "--progress" => args.progress = true,
            "-h" | "--help" => return Err(CliStop::Help),
            other => return Err(CliStop::Bad(format!("unknown argument {other:?}"))),
        }
    }
    if let Some(endpoint) = &args.forward {
        let downstream = if args.forward_http {
            Downstream::Http(endpoint.clone())
        } else {
            Downstream::Grpc(endpoint.clone())
        };
        downstream
            .validate()
            .map_err(|e| CliStop::Bad(format!("--forward {e}")))?;
    }
    Ok(args)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> ExitCode {
    let args = common::or_exit(parse(), USAGE);
    let forward = args.forward.clone().map(|endpoint| {
        if args.forward_http {
            Downstream::Http(endpoint)
        } else {
            Downstream::Grpc(endpoint)
        }
    });
    // a reader that goes away (`demo | head`) stops the output, not the demo: the report, latest.json and the
    // web view are still made (`common::Stdout`)
    let mut out = common::Stdout::default();
    outln!(
        out,
        "{}: searching its functional test exhaustively ...",
        args.variant.name()
    );
    let demo = match demo_setup::run(DemoOptions {
        variant: args.variant,
        forward: forward.clone(),
        report_path: args.report.clone().unwrap_or_else(|| common::run_report_path("demo")),
        // every run's report, side by side in the web view (the default report path is under it)
        report_dir: args.report.is_none().then(|| PathBuf::from(REPORT_DIR)),
        progress: args.progress,
    })
    .await
    {
        Ok(d) => d,
        Err(e) => {
            eprintln!("demo failed: {e}");
            return ExitCode::FAILURE;
        }
    };
    let running = &demo.collector;
    outln!(
        out,
        "embedded dei-collector: OTLP/gRPC {} · OTLP/HTTP {} · API {}",
        running.grpc_addr,
        running.http_addr,
        running.api_addr
    );
    if let Some(f) = &forward {
        outln!(out, "forwarding every span to {f:?}");
    }
    let s = demo.summary();
    outln!(out, "services:       {} ({})", s.services.len(), s.services.join(", "));
    if !s.virtual_nodes.is_empty() {
        outln!(
            out,
            "virtual nodes:  {} (callees never seen serving)",
            s.virtual_nodes.join(", ")
        );
    }
    outln!(out, "graph edges:    {}", s.edges);
    outln!(out, "distinct RPCs:  {} (prefix-tree nodes)", s.distinct_rpcs);
    outln!(out, "executions:     {}", s.executions);
    outln!(out, "failures found: {}", s.failures);
    for e in demo.report.failing() {
        let faults: Vec<String> = e
            .effective
            .iter()
            .map(|p| format!("{} on {}", p.fault, p.signature))
            .collect();
        outln!(out, "  #{}: {:?} with {}", e.number, e.outcome, faults.join(", "));
    }
    outln!(out, "spans received: {}", s.spans_received);
    // among them: how many executions were unreached, unsettled or incomplete
    for warning in &demo.report.warnings {
        outln!(out, "WARNING: {warning}");
    }
    if s.graph_waiting > 0 {
        outln!(
            out,
            "WARNING: {} client span(s) still wait for their server peer: the graph may miss their edges",
            s.graph_waiting
        );
    }
    outln!(out, "search report:  {}", demo.report_path.display());
    if args.report.is_none() {
        outln!(
            out,
            "served reports: {REPORT_DIR}/ (every run's, in the web view's search tab)"
        );
    }
    if args.report.is_none() {
        match common::update_latest(&demo.report_path) {
            Ok(latest) => outln!(out, "latest report:  {}", latest.display()),
            Err(e) => {
                eprintln!("cannot point latest.json at {}: {e}", demo.report_path.display());
                return ExitCode::FAILURE;
            }
        }
    }
    if args.serve {
        outln!(out, "web view:       http://{}/ui/  (Ctrl-C to stop)", running.api_addr);
        let _ = tokio::signal::ctrl_c().await;
    } else {
        outln!(
            out,
            "web view:       http://{}/ui/  (not kept: --exit)",
            running.api_addr
        );
    }
    demo.collector.shutdown().await;
    if out.exit_code(0) == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(2)
    }
}
