//! The paper's Fig. 5 (streaming) as real tonic services on loopback, searched exhaustively (docs/corpus.md).
//! The search fails the stream (by its preliminary index) and each message (by its final index): 4 executions,
//! `{}`, `{stream}`, `{Hello}`, `{World}`, the last three failing (A has no fallback).
//! Run: `cargo run --example fig5_streaming` (options as for the cinema examples).

use dei_corpus as common;

use common::hello::{self, Figure};
use dei_sfit::SearchOptions;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let _spans = common::spans();
    let config = hello::config(dei_propagator::Instantiation::dei());
    let a = hello::start(Figure::Fig5, &config).await;
    let test = hello::fig_test(Figure::Fig5, a);
    let options = SearchOptions {
        catalog: hello::catalog(),
        ..SearchOptions::default()
    };
    common::search_main("fig5_streaming", &test, options).await;
}
