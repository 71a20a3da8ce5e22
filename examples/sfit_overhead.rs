//! Load generator for the search's own cost: scheduling and span collection per execution, as a fraction of
//! the execution's time, on a generated wide example (A calls B once per string, each with a fallback:
//! 2^K executions for K strings), with real tonic services on loopback and the in-memory span source.
//! Run: `cargo run --release --example sfit_overhead [K...]` (default: 6 8 10; K = 10 is 1,024 executions).

use dei_corpus as common;

use common::hello::{self, Figure};
use common::outln;
use dei_propagator::Instantiation;
use dei_sfit::{Search, SearchOptions, TestRun, test_fn};
use std::time::Instant;

/// The q-quantile (0..=1) of the values.
fn quantile(xs: &[u64], q: f64) -> f64 {
    if xs.is_empty() {
        return 0.0;
    }
    let mut v = xs.to_vec();
    v.sort_unstable();
    v[((v.len() - 1) as f64 * q).round() as usize] as f64
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let widths: Vec<usize> = {
        let usage = "usage: sfit_overhead [K...]\n\nMeasures the search's own cost per execution on a wide example \
                     of K strings (2^K executions; default 6 8 10).";
        let given = common::or_exit(common::numbers(std::env::args().skip(1)), usage);
        if given.is_empty() { vec![6, 8, 10] } else { given }
    };
    let source = std::sync::Arc::new(common::spans());
    let config = hello::config(Instantiation::dei());
    let a = hello::start(Figure::Wide, &config).await;
    // a reader that goes away (`| head`) stops the output, not the measurement (`common::Stdout`)
    let mut out = common::Stdout::default();
    outln!(
        out,
        "medians per execution (p90 in brackets); overhead = the search's own time (collect + schedule)"
    );
    outln!(
        out,
        "{:>3} {:>6} {:>16} {:>18} {:>11} {:>11} {:>9} {:>13} {:>13} {:>7}",
        "K",
        "execs",
        "test us",
        "overhead us",
        "collect us",
        "sched us",
        "overhead",
        "first 10% us",
        "last 10% us",
        "wall s"
    );
    for k in widths {
        let items: Vec<String> = (0..k).map(|i| format!("w{i}")).collect();
        let a = a.clone();
        let test = test_fn(format!("wide-{k}"), move |run: TestRun| {
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
        });
        let options = SearchOptions {
            catalog: hello::catalog(),
            ..SearchOptions::default()
        };
        let started = Instant::now();
        let report = Search::with_shared_source(options, source.clone())
            .run(&test)
            .await
            .expect("search");
        let wall = started.elapsed().as_secs_f64();
        assert!(report.failing().is_empty() && report.redundant().is_empty());
        let test_us: Vec<u64> = report.executions.iter().map(|e| e.test_us).collect();
        let over_us: Vec<u64> = report.executions.iter().map(|e| e.overhead_us).collect();
        let collect_us: Vec<u64> = report.executions.iter().map(|e| e.collect_us).collect();
        let sched_us: Vec<u64> = report.executions.iter().map(|e| e.overhead_us - e.collect_us).collect();
        let tenth = (over_us.len() / 10).max(1);
        outln!(
            out,
            "{k:>3} {:>6} {:>7.0} [{:>6.0}] {:>8.0} [{:>7.0}] {:>11.0} {:>11.0} {:>8.1}% {:>13.0} {:>13.0} {:>7.1}",
            report.executions.len(),
            quantile(&test_us, 0.5),
            quantile(&test_us, 0.9),
            quantile(&over_us, 0.5),
            quantile(&over_us, 0.9),
            quantile(&collect_us, 0.5),
            quantile(&sched_us, 0.5),
            100.0 * quantile(&over_us, 0.5) / quantile(&test_us, 0.5),
            quantile(&over_us[..tenth], 0.5),
            quantile(&over_us[over_us.len() - tenth..], 0.5),
            wall
        );
    }
    let code = out.exit_code(0);
    if code != 0 {
        std::process::exit(code);
    }
}
