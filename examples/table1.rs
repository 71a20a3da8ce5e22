//! Prints the paper's Table 1 next to ours, measured on the real cinema services (tonic on loopback with the
//! DEI layers) under each instantiation, and the loss of each ablation against the brute-force oracle.
//! Run: `cargo run --release --example table1`.

use dei_corpus as common;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    common::or_exit(
        common::no_arguments(std::env::args().skip(1)),
        "usage: table1\n\nPrints Table 1 (ours next to the paper's) measured on the real cinema services.",
    );
    let source = std::sync::Arc::new(common::spans());
    let rows = common::table1::run(source).await;
    let mut out = common::Stdout::default();
    out.print(format_args!("{}", common::table1::render(&rows)));
    let code = out.exit_code(0);
    if code != 0 {
        std::process::exit(code);
    }
}
