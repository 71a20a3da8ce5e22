//! The paper's Fig. 1 (fallbacks) over HTTP: axum services, reqwest with the DEI middleware, searched with the
//! HTTP protocol defaults (500, 502, 503, connection error) on each of B's two calls: (1 + 4)^2 = 25.
//! Run: `cargo run --example fig1_fallbacks`.

use dei_corpus as common;

use common::hello;
use dei_sfit::{FaultCatalog, SearchOptions};

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let _spans = common::spans();
    let config = dei_instrumentation::DeiConfig::builder()
        .faults(dei_instrumentation::Faults::Accept)
        .build();
    let (url, client) = hello::start_fig1_http(&config).await;
    let test = hello::fig1_test(url, client);
    let catalog = FaultCatalog::protocol_defaults().with_rule("GET */helloworld", vec![]);
    let options = SearchOptions {
        catalog,
        ..SearchOptions::default()
    };
    common::search_main("fig1_fallbacks", &test, options).await;
}
