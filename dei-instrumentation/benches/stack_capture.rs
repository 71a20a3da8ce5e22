//! Stack capture cost at about 30 frames: warm (every address cached) and cold (a fresh cache each time).
//!
//! `cargo bench -p dei-instrumentation --bench stack_capture`

use criterion::{Criterion, criterion_group, criterion_main};
use dei_instrumentation::stack::{CallSiteExt, StackCapturer, StackConfig, StackMode};
use std::hint::black_box;
use std::time::Instant;

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
    // The first capture in the process also loads the binary's debug info (backtrace's own cache).
    let start = Instant::now();
    let capturer = StackCapturer::new(StackConfig::default().max_depth(64));
    let first = nest(28, &mut || capturer.capture().len());
    println!(
        "first capture in the process (mode detection + debug info load + {first} frames): {:?}",
        start.elapsed()
    );
    assert_eq!(
        capturer.mode(),
        StackMode::LineTables,
        "bench profile keeps line tables"
    );
    // The layers capture inside a tokio task: the walk stops at the runtime's task machinery.
    let rt = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
    let frames = rt.block_on(async { nest(28, &mut || capturer.capture().len()) });
    println!("application frames per capture: {frames}");
    let mut group = c.benchmark_group("stack_capture");
    group.bench_function("warm_30_frames_in_tokio_task", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let start = Instant::now();
                for _ in 0..iters {
                    nest(28, &mut || black_box(capturer.capture().digest()));
                }
                start.elapsed()
            })
        })
    });
    group.bench_function("cold_30_frames_in_tokio_task", |b| {
        b.iter_custom(|iters| {
            let fresh: Vec<StackCapturer> = (0..iters)
                .map(|_| StackCapturer::new(StackConfig::default().max_depth(64)))
                .collect();
            rt.block_on(async {
                let start = Instant::now();
                for f in &fresh {
                    nest(28, &mut || black_box(f.capture().digest()));
                }
                start.elapsed()
            })
        })
    });
    // The floor: the unwind alone (no lookups, no digest), to the same depth as the capture.
    let raw_depth = rt.block_on(async {
        nest(28, &mut || {
            let mut n = 0;
            backtrace::trace(|_| {
                n += 1;
                true
            });
            n
        })
    });
    println!("raw frames to the bottom of the stack: {raw_depth}");
    group.bench_function("unwind_only_30_frames_in_tokio_task", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let start = Instant::now();
                for _ in 0..iters {
                    nest(28, &mut || {
                        let mut n = 0usize;
                        backtrace::trace(|_| {
                            n += 1;
                            n < 36
                        });
                        black_box(n)
                    });
                }
                start.elapsed()
            })
        })
    });
    // Outside a runtime the walk goes on to `main` (through the bench harness's frames).
    group.bench_function("warm_30_frames_plain_thread", |b| {
        b.iter(|| nest(28, &mut || black_box(capturer.capture().digest())))
    });
    let fast = StackCapturer::new(StackConfig::default().mode(StackMode::CallSiteOnly));
    group.bench_function("call_site_only", |b| {
        b.iter_custom(|iters| {
            rt.block_on(
                async {
                    let start = Instant::now();
                    for _ in 0..iters {
                        black_box(fast.capture().digest());
                    }
                    start.elapsed()
                }
                .at_call_site(),
            )
        })
    });
    group.finish();
}

criterion_group!(benches, capture);
criterion_main!(benches);
