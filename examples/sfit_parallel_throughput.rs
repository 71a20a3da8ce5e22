//! Executions per second of a parallel search (issue #22) at N = 1, 2, 4, 8 executions at once, on three
//! workloads of real tonic services on loopback, with the in-memory span source and its span router:
//! - `cinema-10`: the corpus program (6 executions), searched repeatedly (`--rounds`, default 20);
//! - `wide-K`: the generated wide example of BENCHMARKS.md row 11 (A calls B once per string, each with a
//!   fallback: 2^K executions; K = 10 by default, 1,024 executions);
//! - `wide-K-5ms`: the same shape, with handlers that wait 5 ms before answering (A and B each), like a real
//!   service would.
//!
//! Every search must give the same effective fault sets as a sequential (N = 1) search of its workload, run
//! first whatever `--parallel` lists, and the known number of executions (6 for cinema-10, 2^K for wide-K),
//! with no failing, redundant, unreached or unsettled execution, something injected, no execution limit hit
//! and no warning (such as spans outside the executions' traces); the example exits 1 otherwise. Run on an idle machine:
//! `cargo run --release --example sfit_parallel_throughput` (`--k K`, `--rounds R`, `--parallel 1,2,4,8`,
//! `--only cinema|wide|slow`).

use dei_corpus as common;

use common::cinema::{self, Variant};
use common::hello::{self, Figure};
use common::pb::helloworld::service_a_client::ServiceAClient;
use common::pb::helloworld::service_a_server::{ServiceA, ServiceAServer};
use common::pb::helloworld::service_b_client::ServiceBClient;
use common::pb::helloworld::service_b_server::{ServiceB, ServiceBServer};
use common::pb::helloworld::{Strings, Text};
use common::{Channel, CliStop, Stdout, outln};
use dei_propagator::Instantiation;
use dei_sfit::{FaultSet, FunctionalTest, Report, Search, SearchOptions, SpanSource, TestRun, test_fn};
use std::collections::BTreeSet;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tonic::{Request, Response, Status};

const USAGE: &str =
    "usage: sfit_parallel_throughput [--k K] [--rounds R] [--parallel N,N,...] [--only cinema|wide|slow]

Executions per second of the search at N executions at once (default 1,2,4,8) on cinema-10 (searched R times,
default 20), on the wide example of K strings (2^K executions, default K = 10) and on the same with handlers
that wait 5 ms. Exits 1 when a search does not give the sequential search's effective fault sets and the known
number of executions (6 for cinema-10, 2^K for the wide workloads), or is not clean (failing, redundant,
unreached or unsettled executions, nothing injected, truncated, warnings).";

struct Args {
    k: usize,
    rounds: usize,
    parallel: Vec<usize>,
    only: Option<String>,
}

fn parse(args: impl IntoIterator<Item = String>) -> Result<Args, CliStop> {
    let mut parsed = Args {
        k: 10,
        rounds: 20,
        parallel: vec![1, 2, 4, 8],
        only: None,
    };
    let mut it = args.into_iter();
    let number = |v: Option<String>, flag: &str| -> Result<usize, CliStop> {
        let v = v.ok_or_else(|| CliStop::Bad(format!("{flag} needs a number")))?;
        v.parse()
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| CliStop::Bad(format!("{flag}: a positive number expected, not {v:?}")))
    };
    while let Some(a) = it.next() {
        match a.as_str() {
            "--k" => parsed.k = number(it.next(), "--k")?.min(14),
            "--rounds" => parsed.rounds = number(it.next(), "--rounds")?,
            "--parallel" => {
                let v = it
                    .next()
                    .ok_or_else(|| CliStop::Bad("--parallel needs N,N,...".into()))?;
                parsed.parallel = v
                    .split(',')
                    .map(|n| number(Some(n.to_string()), "--parallel"))
                    .collect::<Result<_, _>>()?;
            }
            "--only" => {
                let v = it.next().unwrap_or_default();
                if !["cinema", "wide", "slow"].contains(&v.as_str()) {
                    return Err(CliStop::Bad(format!("--only: cinema, wide or slow, not {v:?}")));
                }
                parsed.only = Some(v);
            }
            "-h" | "--help" => return Err(CliStop::Help),
            other => return Err(CliStop::Bad(format!("unknown argument {other:?}"))),
        }
    }
    Ok(parsed)
}

/// The wide example with a wait in each handler: A calls B once per string, sequentially, with a fallback.
struct SlowA {
    b: ServiceBClient<Channel>,
    wait: Duration,
}

#[tonic::async_trait]
impl ServiceA for SlowA {
    async fn hello_world(&self, request: Request<Strings>) -> Result<Response<Text>, Status> {
        tokio::time::sleep(self.wait).await;
        let mut rs = Vec::new();
        for s in request.into_inner().items {
            let r = self.b.clone().echo(Text { text: s }).await;
            rs.push(r.map(|r| r.into_inner().text).unwrap_or_default());
        }
        Ok(Response::new(Text { text: rs.join(" ") }))
    }
}

struct SlowB {
    wait: Duration,
}

type TextStream = Pin<Box<dyn futures::Stream<Item = Result<Text, Status>> + Send>>;

#[tonic::async_trait]
impl ServiceB for SlowB {
    async fn echo(&self, request: Request<Text>) -> Result<Response<Text>, Status> {
        tokio::time::sleep(self.wait).await;
        Ok(Response::new(request.into_inner()))
    }

    type EchoStreamStream = TextStream;

    async fn echo_stream(&self, _: Request<tonic::Streaming<Text>>) -> Result<Response<TextStream>, Status> {
        Err(Status::unimplemented("not part of this workload"))
    }
}

async fn start_slow(config: &dei_instrumentation::DeiConfig, wait: Duration) -> ServiceAClient<Channel> {
    let (l_b, a_b) = common::bind().await;
    let (l_a, a_a) = common::bind().await;
    common::serve(l_b, config, ServiceBServer::new(SlowB { wait }));
    common::serve(
        l_a,
        config,
        ServiceAServer::new(SlowA {
            b: ServiceBClient::new(common::channel(a_b, config)),
            wait,
        }),
    );
    ServiceAClient::new(common::channel(a_a, config))
}

/// The wide example's functional test: every string is answered or its call failed.
fn wide_test(name: String, a: ServiceAClient<Channel>, k: usize) -> impl FunctionalTest {
    let items: Vec<String> = (0..k).map(|i| format!("w{i}")).collect();
    test_fn(name, move |run: TestRun| {
        let a = a.clone();
        let items = items.clone();
        async move {
            let got = hello::call_a_with(&a, run.context(), items.clone())
                .await
                .map_err(|e| e.to_string())?;
            let injected = run.injected().await.map_err(|e| e.to_string())?.len();
            let answered = got.split(' ').filter(|w| !w.is_empty()).count();
            if answered + injected == items.len() {
                Ok(())
            } else {
                Err(format!("{answered} answers, {injected} faults"))
            }
        }
    })
}

fn sets(report: &Report) -> BTreeSet<FaultSet> {
    report
        .executions
        .iter()
        .map(|e| e.effective.iter().map(|p| (p.index.clone(), p.fault)).collect())
        .collect()
}

/// Why `report` is not a clean search of `expected` executions at parallelism `n`, if it is not.
fn unclean(report: &Report, n: usize, expected: usize) -> Option<String> {
    let mut why = Vec::new();
    if report.executions.len() != expected {
        why.push(format!("{} executions, not {expected}", report.executions.len()));
    }
    if report.nothing_injected {
        why.push("nothing injected".to_string());
    }
    if report.truncated {
        why.push("stopped at the execution limit".to_string());
    }
    if !report.failing().is_empty() || !report.redundant().is_empty() {
        why.push("failing or redundant executions".to_string());
    }
    if !report.unreached().is_empty() || !report.unsettled().is_empty() || !report.incomplete().is_empty() {
        why.push("unreached, unsettled or incomplete executions".to_string());
    }
    if !report.warnings.is_empty() {
        why.push(format!("warnings: {:?}", report.warnings));
    }
    if report.parallelism_used != n {
        why.push(format!(
            "ran at {} not {n}: {:?}",
            report.parallelism_used, report.notes
        ));
    }
    (!why.is_empty()).then(|| why.join("; "))
}

/// Runs a sequential search for reference (untimed), then `rounds` searches at each N, and prints a row each;
/// false when a search is not clean or not the sequential one's.
#[allow(clippy::too_many_arguments)]
async fn measure(
    out: &mut Stdout,
    name: &str,
    test: &dyn FunctionalTest,
    base: SearchOptions,
    source: &Arc<dyn SpanSource>,
    rounds: usize,
    parallel: &[usize],
    expected: usize,
) -> bool {
    let mut ok = true;
    let sequential = match Search::with_shared_source(
        SearchOptions {
            parallelism: 1,
            ..base.clone()
        },
        source.clone(),
    )
    .run(test)
    .await
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("{name} N=1 (reference): the search failed: {e}");
            return false;
        }
    };
    if let Some(why) = unclean(&sequential, 1, expected) {
        eprintln!("{name} N=1 (reference): {why}\n{sequential}");
        return false;
    }
    let reference = sets(&sequential);
    let mut sequential_rate = None;
    for &n in parallel {
        let options = SearchOptions {
            parallelism: n,
            ..base.clone()
        };
        let search = Search::with_shared_source(options, source.clone());
        let mut executions = 0;
        let started = Instant::now();
        for _ in 0..rounds {
            let report = match search.run(test).await {
                Ok(r) => r,
                Err(e) => {
                    eprintln!("{name} N={n}: the search failed: {e}");
                    return false;
                }
            };
            executions += report.executions.len();
            if let Some(why) = unclean(&report, n, expected) {
                eprintln!("{name} N={n}: not a clean search: {why}\n{report}");
                ok = false;
            }
            if sets(&report) != reference {
                eprintln!("{name} N={n}: NOT the sequential search's effective fault sets:\n{report}");
                ok = false;
            }
        }
        let wall = started.elapsed().as_secs_f64();
        let rate = executions as f64 / wall;
        let base_rate = *sequential_rate.get_or_insert(rate);
        outln!(
            out,
            "{name:<14} {n:>3} {executions:>8} {wall:>9.2} {rate:>12.1} {:>9.2}x",
            rate / base_rate
        );
    }
    ok
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args = common::or_exit(parse(std::env::args().skip(1)), USAGE);
    let source: Arc<dyn SpanSource> = Arc::new(common::spans());
    let runs = |w: &str| args.only.as_deref().is_none_or(|o| o == w);
    // a reader that goes away (`| head`) stops the output, not the measurement (`common::Stdout`)
    let mut out = Stdout::default();
    outln!(
        out,
        "workers: 2 tokio threads on {} CPU(s); executions/s over whole searches (speedup against the first N)",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    outln!(
        out,
        "{:<14} {:>3} {:>8} {:>9} {:>12} {:>10}",
        "workload",
        "N",
        "execs",
        "wall s",
        "execs/s",
        "speedup"
    );
    let mut ok = true;
    if runs("cinema") {
        let config = dei_instrumentation::DeiConfig::builder()
            .faults(dei_instrumentation::Faults::Accept)
            .build();
        let cinema = cinema::start(Variant::Cinema10, &config).await;
        let test = cinema::functional_test(cinema);
        let options = SearchOptions {
            catalog: cinema::catalog(),
            ..SearchOptions::default()
        };
        ok &= measure(
            &mut out,
            "cinema-10",
            &test,
            options,
            &source,
            args.rounds,
            &args.parallel,
            6,
        )
        .await;
    }
    let config = hello::config(Instantiation::dei());
    let options = SearchOptions {
        catalog: hello::catalog(),
        ..SearchOptions::default()
    };
    if runs("wide") {
        let a = hello::start(Figure::Wide, &config).await;
        let test = wide_test(format!("wide-{}", args.k), a, args.k);
        ok &= measure(
            &mut out,
            &format!("wide-{}", args.k),
            &test,
            options.clone(),
            &source,
            1,
            &args.parallel,
            1 << args.k,
        )
        .await;
    }
    if runs("slow") {
        let a = start_slow(&config, Duration::from_millis(5)).await;
        let name = format!("wide-{}-5ms", args.k);
        let test = wide_test(name.clone(), a, args.k);
        ok &= measure(&mut out, &name, &test, options, &source, 1, &args.parallel, 1 << args.k).await;
    }
    let code = out.exit_code(i32::from(!ok));
    if code != 0 {
        std::process::exit(code);
    }
}
