//! The paper's Fig. 3 (async) as real tonic services on loopback, searched exhaustively (docs/corpus.md).
//! Run: `cargo run --example fig3_async` (options as for the cinema examples).

use dei_corpus as common;

use common::hello::{self, Figure};
use dei_sfit::SearchOptions;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let _spans = common::spans();
    let config = hello::config(dei_propagator::Instantiation::dei());
    let a = hello::start(Figure::Fig3, &config).await;
    let test = hello::fig_test(Figure::Fig3, a);
    let options = SearchOptions {
        catalog: hello::catalog(),
        ..SearchOptions::default()
    };
    common::search_main("fig3_async", &test, options).await;
}
