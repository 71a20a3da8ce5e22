//! Load generator for the search's own cost: scheduling and span collection per execution, as a fraction of
//! the execution's time, on a generated wide example (A calls B once per string, each with a fallback:
//! 2^K executions for K strings), with real tonic services on loopback and the in-memory span source.
//! Run: `cargo run --release --example sfit_overhead [K...]` (default: 6 8 10; K = 10 is 1,024 executions).

#[path = "common/mod.rs"]
mod common;

use common::hello::{self, Figure};
use dei_propagator::Instantiation;
use dei_sfit::{Search, SearchOptions, TestRun, test_fn};
use std::time::Instant;

fn mean(xs: &[u64]) -> f64 {
    if xs.is_empty() { 0.0 } else { xs.iter().sum::<u64>() as f64 / xs.len() as f64 }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let widths: Vec<usize> = {
        let given: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
        if given.is_empty() { vec![6, 8, 10] } else { given }
    };
    let source = std::sync::Arc::new(common::spans());
    let config = hello::config(Instantiation::dei());
    let a = hello::start(Figure::Wide, &config).await;
    println!(
        "{:>3} {:>6} {:>11} {:>13} {:>9} {:>14} {:>14} {:>8}",
        "K", "execs", "test ms/ex", "overhead us/ex", "overhead", "first 10% us", "last 10% us", "wall s"
    );
    for k in widths {
        let items: Vec<String> = (0..k).map(|i| format!("w{i}")).collect();
        let a = a.clone();
        let test = test_fn(format!("wide-{k}"), move |run: TestRun| {
            let a = a.clone();
            let items = items.clone();
            async move {
                let got = hello::call_a_with(&a, run.context(), items.clone()).await.map_err(|e| e.to_string())?;
                let injected = run.injected().await.map_err(|e| e.to_string())?.len();
                let answered = got.split(' ').filter(|w| !w.is_empty()).count();
                if answered + injected == items.len() { Ok(()) } else { Err(format!("{answered} answers, {injected} faults")) }
            }
        });
        let options = SearchOptions { catalog: hello::catalog(), ..SearchOptions::default() };
        let started = Instant::now();
        let report = Search::with_shared_source(options, source.clone()).run(&test).await.expect("search");
        let wall = started.elapsed().as_secs_f64();
        assert!(report.failing().is_empty() && report.redundant().is_empty());
        let test_us: Vec<u64> = report.executions.iter().map(|e| e.test_us).collect();
        let over_us: Vec<u64> = report.executions.iter().map(|e| e.overhead_us).collect();
        let tenth = (over_us.len() / 10).max(1);
        println!(
            "{k:>3} {:>6} {:>11.2} {:>13.0} {:>8.1}% {:>14.0} {:>14.0} {:>8.1}",
            report.executions.len(),
            mean(&test_us) / 1000.0,
            mean(&over_us),
            100.0 * mean(&over_us) / mean(&test_us),
            mean(&over_us[..tenth]),
            mean(&over_us[over_us.len() - tenth..]),
            wall
        );
    }
}
