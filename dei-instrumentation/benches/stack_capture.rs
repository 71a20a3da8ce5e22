//! Stack capture cost at about 30 frames: warm (every address cached) and cold (a fresh cache each time).
//!
//! `cargo bench -p dei-instrumentation --bench stack_capture`

use criterion::{Criterion, criterion_group, criterion_main};
use dei_instrumentation::stack::{CallSiteExt, StackCapturer, StackConfig, StackMode};
use std::hint::black_box;

/// Recurses `depth` times through application frames, then runs `f`.
#[inline(never)]
fn nest<R>(depth: usize, f: &mut dyn FnMut() -> R) -> R {
    if depth == 0 {
        f()
    } else {
        let r = nest(depth - 1, f);
        black_box(depth);
        r
    }
}

fn capture(c: &mut Criterion) {
    let capturer = StackCapturer::new(StackConfig::default().max_depth(64));
    assert_eq!(
        capturer.mode(),
        StackMode::LineTables,
        "bench profile keeps line tables"
    );
    let frames = nest(28, &mut || capturer.capture().len());
    println!("application frames per capture: {frames}");
    let mut group = c.benchmark_group("stack_capture");
    group.bench_function("warm_30_frames", |b| {
        b.iter(|| nest(28, &mut || black_box(capturer.capture().digest())))
    });
    group.bench_function("cold_30_frames", |b| {
        b.iter_batched(
            || StackCapturer::new(StackConfig::default().max_depth(64)),
            |fresh| nest(28, &mut || black_box(fresh.capture().digest())),
            criterion::BatchSize::PerIteration,
        )
    });
    let fast = StackCapturer::new(StackConfig::default().mode(StackMode::CallSiteOnly));
    group.bench_function("call_site_only", |b| {
        b.iter(|| {
            futures::executor::block_on(async { black_box(fast.capture().digest()) }.at_call_site())
        })
    });
    group.finish();
}

criterion_group!(benches, capture);
criterion_main!(benches);
