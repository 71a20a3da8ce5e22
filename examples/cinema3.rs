//! cinema-3 of the paper's Table 1 as real tonic services on loopback, searched exhaustively.
//! docs/corpus.md derives its count. Run: `cargo run --example cinema3` (`--bfs`, `--max N`, `--single`,
//! `--encapsulation`, `--parallel N`, `--json PATH`, `--junit PATH`, `--replay PATH N`).

use dei_corpus as common;

use common::cinema::{self, Variant};
use dei_sfit::SearchOptions;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let _spans = common::spans();
    let config = dei_instrumentation::DeiConfig::builder()
        .faults(dei_instrumentation::Faults::Accept)
        .build();
    let cinema = cinema::start(Variant::Cinema3, &config).await;
    let test = cinema::functional_test(cinema);
    let options = SearchOptions {
        catalog: cinema::catalog(),
        ..SearchOptions::default()
    };
    common::search_main("cinema3", &test, options).await;
}
