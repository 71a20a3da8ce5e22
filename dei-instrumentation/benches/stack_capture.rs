//! Stack capture cost at about 30 frames: warm (every address cached) and cold (a fresh cache each time), with
//! each walker (`Auto`, the default: saved frame pointers, which the workspace builds with; frame pointers
//! asked for explicitly; DWARF unwinding). A warm capture is the walk plus one cache lookup per address and one
//! for the stack.
//!
//! `cargo bench -p dei-instrumentation --bench stack_capture`
//! (the row in BENCHMARKS.md: `-- warm_30_frames_in_tokio_task --warm-up-time 1 --measurement-time 4`)
// `criterion_group!` defines an undocumented `pub fn` (the workspace warns on missing docs).
#![allow(missing_docs)]

use criterion::{Criterion, criterion_group, criterion_main};
use dei_instrumentation::stack::{CallSiteExt, StackCapturer, StackConfig, StackMode, StackWalker};
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
    for walker in [StackWalker::Auto, StackWalker::FramePointers, StackWalker::Dwarf] {
        let config = StackConfig::default().max_depth(64).walker(walker);
        let capturer = StackCapturer::new(config.clone());
        let expected = match walker {
            StackWalker::Dwarf => StackWalker::Dwarf,
            _ => StackWalker::FramePointers,
        };
        assert_eq!(capturer.walker(), expected, "the workspace builds with frame pointers");
        let digest = rt.block_on(async { nest(28, &mut || capturer.capture().digest()) });
        println!("{walker}: digest {}", digest.to_hex());
        group.bench_function(format!("warm_30_frames_in_tokio_task/{walker}"), |b| {
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
        group.bench_function(format!("cold_30_frames_in_tokio_task/{walker}"), |b| {
            b.iter_custom(|iters| {
                let fresh: Vec<StackCapturer> = (0..iters).map(|_| StackCapturer::new(config.clone())).collect();
                rt.block_on(async {
                    let start = Instant::now();
                    for f in &fresh {
                        nest(28, &mut || black_box(f.capture().digest()));
                    }
                    start.elapsed()
                })
            })
        });
        // Outside a runtime the walk goes on to `main` (through the bench harness's frames).
        group.bench_function(format!("warm_30_frames_plain_thread/{walker}"), |b| {
            b.iter(|| nest(28, &mut || black_box(capturer.capture().digest())))
        });
    }
    same_run_ratio(&rt);
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

/// Warm captures with each walker, interleaved in rounds of 2,000 (medians of 50 rounds), and their ratios to
/// DWARF.
fn same_run_ratio(rt: &tokio::runtime::Runtime) {
    let walkers = [StackWalker::Auto, StackWalker::FramePointers, StackWalker::Dwarf];
    let capturers: Vec<StackCapturer> = walkers
        .iter()
        .map(|&w| StackCapturer::new(StackConfig::default().max_depth(64).walker(w)))
        .collect();
    let mut rounds = vec![Vec::new(); walkers.len()];
    rt.block_on(async {
        for _ in 0..50 {
            for (i, c) in capturers.iter().enumerate() {
                let start = Instant::now();
                for _ in 0..2000 {
                    nest(28, &mut || black_box(c.capture().digest()));
                }
                rounds[i].push(start.elapsed() / 2000);
            }
        }
    });
    let medians: Vec<_> = rounds
        .into_iter()
        .map(|mut r| {
            r.sort();
            r[r.len() / 2]
        })
        .collect();
    println!(
        "same-run warm capture, 30 frames in a tokio task: auto {:?} (walks {}), frame-pointers {:?}, dwarf {:?}; \
         auto / dwarf {:.3}, frame-pointers / dwarf {:.3}",
        medians[0],
        capturers[0].walker(),
        medians[1],
        medians[2],
        medians[0].as_secs_f64() / medians[2].as_secs_f64(),
        medians[1].as_secs_f64() / medians[2].as_secs_f64()
    );
}

criterion_group!(benches, capture);
criterion_main!(benches);
