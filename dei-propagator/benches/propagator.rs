//! Benchmarks of the propagator, the scope and payload digests, each against a baseline in the same run.
//!
//! `cargo bench -p dei-propagator --bench propagator -- --quick` (figures in BENCHMARKS.md).
// `criterion_group!` defines an undocumented `pub fn` (the workspace warns on missing docs).
#![allow(missing_docs)]

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use dei_propagator::{
    Carriers, DeiContextExt, DeiPropagator, Element, ElementDigest, Index, Instantiation, InvocationSignature, Limits,
    PayloadDigest, PayloadHasher, RequestScope, Signature, StackDigest,
};
use opentelemetry::baggage::BaggageExt;
use opentelemetry::propagation::{TextMapCompositePropagator, TextMapPropagator};
use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::propagation::{BaggagePropagator, TraceContextPropagator};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::hint::black_box;
use std::sync::Barrier;
use std::time::{Duration, Instant};

fn depth8() -> Index {
    Index::from_elements(
        (1..=8u8)
            .map(|i| Element::new(ElementDigest([i.wrapping_mul(37); 8]), u32::from(i)))
            .collect(),
    )
}

/// The headers `p` writes for `cx`.
fn carrier(p: &dyn TextMapPropagator, cx: &Context) -> HashMap<String, String> {
    let mut headers: HashMap<String, String> = HashMap::with_capacity(4);
    p.inject_context(cx, &mut headers);
    headers
}

fn round_trip(p: &dyn TextMapPropagator, cx: &Context) -> Context {
    let mut headers: HashMap<String, String> = HashMap::with_capacity(4);
    p.inject_context(cx, &mut headers);
    p.extract(&headers)
}

fn inject_extract(c: &mut Criterion) {
    let span = SpanContext::new(
        TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").expect("id"),
        SpanId::from_hex("00f067aa0ba902b7").expect("id"),
        TraceFlags::SAMPLED,
        true,
        TraceState::default(),
    );
    let index = depth8();
    println!(
        "encoded depth-8 index: {} bytes, {:.2} bytes per hop",
        index.encode().len(),
        (index.encode().len() - 1) as f64 / 8.0
    );
    // Each round puts its value in a fresh context, as a call does: the span context for the baseline, the
    // index for DEI (whose wire form is encoded once per context value).
    let trace_cx = || Context::new().with_remote_span_context(span.clone());
    let dei_cx = || Context::new().with_dei_index(index.clone());
    let mut g = c.benchmark_group("inject_extract");
    let trace = TraceContextPropagator::new();
    g.bench_function("tracecontext (baseline)", |b| {
        b.iter(|| black_box(round_trip(&trace, black_box(&trace_cx()))))
    });
    let header_only = DeiPropagator::with_config(
        Carriers {
            header: true,
            baggage: false,
        },
        Limits::default(),
        Default::default(),
    );
    g.bench_function("dei depth 8, header", |b| {
        b.iter(|| black_box(round_trip(&header_only, black_box(&dei_cx()))))
    });
    let both = DeiPropagator::new();
    g.bench_function("dei depth 8, header+baggage", |b| {
        b.iter(|| black_box(round_trip(&both, black_box(&dei_cx()))))
    });
    g.finish();

    let mut g = c.benchmark_group("codec");
    let text = index.encode();
    g.bench_function("encode depth 8", |b| b.iter(|| black_box(black_box(&index).encode())));
    g.bench_function("decode depth 8", |b| {
        b.iter(|| black_box(Index::decode(black_box(&text))))
    });
    g.finish();
}

fn invocation() -> InvocationSignature {
    InvocationSignature::new(
        Signature::grpc_path("/B/echo"),
        PayloadDigest::of(b"Hello"),
        StackDigest([7; 32]),
    )
}

/// Wall time for `iters` issues split over `threads` threads, all taking indexes from one scope.
fn issue_on_threads(threads: u64, iters: u64) -> Duration {
    let scope = RequestScope::root(Instantiation::dei());
    let inv = invocation();
    let barrier = Barrier::new(threads as usize + 1);
    let per_thread = iters.div_ceil(threads);
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                barrier.wait();
                for _ in 0..per_thread {
                    black_box(scope.issue(black_box(&inv)));
                }
                barrier.wait();
            });
        }
        barrier.wait();
        let start = Instant::now();
        barrier.wait();
        start.elapsed()
    })
}

fn next_index(c: &mut Criterion) {
    let mut g = c.benchmark_group("next_index");
    g.bench_function("1 thread (baseline)", |b| {
        b.iter_custom(|iters| issue_on_threads(1, iters))
    });
    g.bench_function("2 threads contending", |b| {
        b.iter_custom(|iters| issue_on_threads(2, iters))
    });
    g.finish();
}

fn payload_digest(c: &mut Criterion) {
    let mut g = c.benchmark_group("payload_digest");
    for size in [64usize, 1024, 64 * 1024] {
        let payload: Vec<u8> = (0..size).map(|i| (i * 31 % 251) as u8).collect();
        g.throughput(Throughput::Bytes(size as u64));
        g.bench_with_input(BenchmarkId::new("raw sha2 (baseline)", size), &payload, |b, p| {
            b.iter(|| black_box(<[u8; 32]>::from(Sha256::digest(black_box(p)))))
        });
        g.bench_with_input(BenchmarkId::new("PayloadDigest::of", size), &payload, |b, p| {
            b.iter(|| black_box(PayloadDigest::of(black_box(p))))
        });
        g.bench_with_input(
            BenchmarkId::new("PayloadHasher 4 KiB pieces", size),
            &payload,
            |b, p| {
                b.iter(|| {
                    let mut h = PayloadHasher::new();
                    for piece in black_box(p).chunks(4096) {
                        h.update(piece);
                    }
                    black_box(h.finish())
                })
            },
        );
    }
    g.finish();
}

/// Ratios measured pairwise: rounds that alternate the candidate and its baseline, so that the load of a
/// shared machine drifting during the run hits both alike. Prints the median and the 10th-90th percentiles.
fn paired(name: &str, rounds: usize, mut baseline: impl FnMut() -> Duration, mut candidate: impl FnMut() -> Duration) {
    let mut ratios: Vec<f64> = (0..rounds)
        .map(|_| {
            let b = baseline();
            let c = candidate();
            c.as_secs_f64() / b.as_secs_f64()
        })
        .collect();
    ratios.sort_by(f64::total_cmp);
    let at = |q: f64| ratios[((ratios.len() - 1) as f64 * q) as usize];
    println!(
        "paired ratio {name}: {:.2}x (p10 {:.2}, p90 {:.2}, {rounds} rounds)",
        at(0.5),
        at(0.1),
        at(0.9)
    );
}

fn timed(n: u64, mut f: impl FnMut()) -> Duration {
    let start = Instant::now();
    for _ in 0..n {
        f();
    }
    start.elapsed()
}

fn paired_ratios(_: &mut Criterion) {
    let trace = TraceContextPropagator::new();
    let span = SpanContext::new(
        TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").expect("id"),
        SpanId::from_hex("00f067aa0ba902b7").expect("id"),
        TraceFlags::SAMPLED,
        true,
        TraceState::default(),
    );
    // A fresh context per round, as in `inject_extract`.
    let trace_cx = || Context::new().with_remote_span_context(span.clone());
    let index = depth8();
    let dei_cx = || Context::new().with_dei_index(index.clone());
    let header_only = DeiPropagator::with_config(
        Carriers {
            header: true,
            baggage: false,
        },
        Limits::default(),
        Default::default(),
    );
    let both = DeiPropagator::new();
    let n = 2000;
    let base = || timed(n, || drop(black_box(round_trip(&trace, black_box(&trace_cx())))));
    paired("inject+extract, dei header / tracecontext", 200, base, || {
        timed(n, || drop(black_box(round_trip(&header_only, black_box(&dei_cx())))))
    });
    paired("inject+extract, dei header+baggage / tracecontext", 200, base, || {
        timed(n, || drop(black_box(round_trip(&both, black_box(&dei_cx())))))
    });
    // A middle service's hop: extract what the caller sent (trace context, user baggage, the index), then
    // inject the next index onwards. Baseline: the same hop with the W3C propagators alone.
    let plain = TextMapCompositePropagator::new(vec![
        Box::new(TraceContextPropagator::new()),
        Box::new(BaggagePropagator::new()),
    ]);
    let dei = dei_propagator::composite_propagator();
    let incoming_cx = trace_cx()
        .with_baggage([KeyValue::new("user", "alice")])
        .with_dei_index(depth8());
    let (plain_in, dei_in) = (carrier(&plain, &incoming_cx), carrier(&dei, &incoming_cx));
    let next = depth8().child(Element::new(ElementDigest([9; 8]), 1));
    paired(
        "middle hop (extract, inject onwards), composite with dei / W3C trace context + baggage",
        200,
        || {
            timed(n, || {
                let cx = plain.extract(black_box(&plain_in));
                drop(black_box(carrier(&plain, &cx)));
            })
        },
        || {
            timed(n, || {
                let cx = dei.extract(black_box(&dei_in)).with_dei_index(next.clone());
                drop(black_box(carrier(&dei, &cx)));
            })
        },
    );
    paired(
        "next index, 2 threads contending / 1 thread (per issue)",
        100,
        || issue_on_threads(1, 20_000),
        || issue_on_threads(2, 20_000),
    );
    for size in [64usize, 1024, 64 * 1024] {
        let payload: Vec<u8> = (0..size).map(|i| (i * 31 % 251) as u8).collect();
        let n = (1 << 22) / size as u64;
        let raw = || {
            timed(n, || {
                black_box(<[u8; 32]>::from(Sha256::digest(black_box(&payload))));
            })
        };
        paired(
            &format!("payload digest {size} B, sha2 time / PayloadDigest::of time (throughput ratio)"),
            100,
            || {
                timed(n, || {
                    black_box(PayloadDigest::of(black_box(&payload)));
                })
            },
            raw,
        );
    }
}

criterion_group!(benches, paired_ratios, inject_extract, next_index, payload_digest);
criterion_main!(benches);
