//! The scheduling-nondeterminism experiment of the paper's §5.2.
//!
//! Hello fans out N = 2, 4, …, 64 concurrent RPCs to World from one call site (one task per RPC, created in a
//! loop, on this 2-worker runtime), 100 iterations each; World answers with the index it was served under.
//! An iteration's index assignment matches creation order when the RPC created i-th (its payload is `i`)
//! got the index that issuing the RPCs one by one in creation order would give it:
//! - without the payload (Filibuster's instantiation) all N share one invocation signature, so the i-th
//!   created must have count i;
//! - with the payload (the full DEI) every RPC has its own invocation signature, so each must have count 1 —
//!   whatever the schedule (§5.3: payload inclusion distinguishes).
//!
//! Writes `target/sfit/nondeterminism.csv` and `docs/figures/nondeterminism.svg` (a hand-written SVG: two
//! polylines need no plotting crate). Run: `cargo run --release --example nondeterminism [ITERATIONS]`.

use dei_corpus as common;

use common::outln;
use common::pb::helloworld::FanOut;
use dei_instrumentation::DeiConfig;
use dei_propagator::{DeiContextExt, Index, Instantiation, RequestScope};
use opentelemetry::context::FutureExt as _;
use std::collections::HashSet;
use std::fmt::Write as _;

const SIZES: [u32; 6] = [2, 4, 8, 16, 32, 64];

/// Share (0..=1) of iterations matching creation order, and the number of distinct assignments seen.
async fn measure(instantiation: Instantiation, n: u32, iterations: usize) -> (f64, usize) {
    let config = DeiConfig::builder().instantiation(instantiation.clone()).build();
    let hello = common::hello::start_hello_world(&config).await;
    let mut matching = 0;
    let mut distinct: HashSet<Vec<String>> = HashSet::new();
    for _ in 0..iterations {
        let mut client = hello.clone();
        let cx = opentelemetry::Context::current().with_dei_scope(RequestScope::root(instantiation.clone()));
        let served = async move { client.run(FanOut { n }).await }.with_context(cx).await;
        let Ok(served) = served else { continue };
        let indexes = served.into_inner().indexes;
        let counts: Vec<u32> = indexes
            .iter()
            .map(|i| {
                Index::decode(i)
                    .ok()
                    .and_then(|x| x.last().map(|e| e.count))
                    .unwrap_or(0)
            })
            .collect();
        let in_order = if instantiation.payload {
            counts.iter().all(|&c| c == 1) && indexes.iter().collect::<HashSet<_>>().len() == indexes.len()
        } else {
            counts.iter().enumerate().all(|(i, &c)| c as usize == i + 1)
        };
        if in_order && indexes.len() == n as usize {
            matching += 1;
        }
        distinct.insert(indexes);
    }
    (matching as f64 / iterations as f64, distinct.len())
}

fn svg(rows: &[(u32, f64, f64)]) -> String {
    let (w, h, left, right, top, bottom) = (640.0, 400.0, 70.0, 30.0, 40.0, 60.0);
    let pw = w - left - right;
    let ph = h - top - bottom;
    let x = |i: usize| left + pw * i as f64 / (rows.len().max(2) - 1) as f64;
    let y = |share: f64| top + ph * (1.0 - share);
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="13">
<rect width="100%" height="100%" fill="white"/>
<text x="{}" y="22" text-anchor="middle" font-size="15">Executions with deterministic index assignment (2 worker threads)</text>
"#,
        w / 2.0
    );
    for pct in [0, 25, 50, 75, 100] {
        let yy = y(pct as f64 / 100.0);
        let _ = writeln!(
            s,
            r##"<line x1="{left}" y1="{yy}" x2="{}" y2="{yy}" stroke="#ddd"/><text x="{}" y="{}" text-anchor="end">{pct}%</text>"##,
            w - right,
            left - 8.0,
            yy + 4.0
        );
    }
    for (i, (n, _, _)) in rows.iter().enumerate() {
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}" text-anchor="middle">{n}</text>"#,
            x(i),
            h - bottom + 20.0
        );
    }
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">concurrent RPCs from one call site (N)</text>"#,
        left + pw / 2.0,
        h - 15.0
    );
    for (series, color, label, dy) in [
        (1usize, "#c0392b", "without payload (Filibuster)", 0.0),
        (2, "#2471a3", "with payload (DEI)", 18.0),
    ] {
        let pts: Vec<String> = rows
            .iter()
            .enumerate()
            .map(|(i, r)| format!("{:.1},{:.1}", x(i), y(if series == 1 { r.1 } else { r.2 })))
            .collect();
        let _ = writeln!(
            s,
            r#"<polyline fill="none" stroke="{color}" stroke-width="2.5" points="{}"/>"#,
            pts.join(" ")
        );
        for p in &pts {
            let (px, py) = p.split_once(',').unwrap_or(("0", "0"));
            let _ = writeln!(s, r#"<circle cx="{px}" cy="{py}" r="4" fill="{color}"/>"#);
        }
        let _ = writeln!(
            s,
            r#"<rect x="{}" y="{}" width="14" height="4" fill="{color}"/><text x="{}" y="{}">{label}</text>"#,
            w - right - 230.0,
            top + 10.0 + dy,
            w - right - 210.0,
            top + 15.0 + dy
        );
    }
    s.push_str("</svg>\n");
    s
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let usage = "usage: nondeterminism [ITERATIONS]\n\nMeasures how often concurrent RPCs get indexes in creation order, \
                 with and without the payload, for N = 2..64 (ITERATIONS per N, default 100).";
    let given = common::or_exit(common::numbers(std::env::args().skip(1)), usage);
    let iterations = match given[..] {
        [] => 100,
        [n] => n,
        _ => common::or_exit(Err(common::CliStop::Bad("at most one ITERATIONS".into())), usage),
    };
    let _spans = common::spans();
    let mut rows = Vec::new();
    let mut csv = String::from("n,iterations,without_payload_pct,with_payload_pct,distinct_without,distinct_with\n");
    // a reader that goes away (`| head`) stops the output, not the experiment or its files (`common::Stdout`)
    let mut out = common::Stdout::default();
    outln!(out, "{:>4} {:>22} {:>22}", "N", "without payload", "with payload");
    for n in SIZES {
        let (without, d_without) = measure(Instantiation::filibuster(), n, iterations).await;
        let (with, d_with) = measure(Instantiation::dei(), n, iterations).await;
        outln!(
            out,
            "{n:>4} {:>12.0}% ({d_without:>3} seen) {:>12.0}% ({d_with:>3} seen)",
            without * 100.0,
            with * 100.0
        );
        let _ = writeln!(
            csv,
            "{n},{iterations},{:.1},{:.1},{d_without},{d_with}",
            without * 100.0,
            with * 100.0
        );
        rows.push((n, without, with));
    }
    std::fs::create_dir_all("target/sfit")?;
    std::fs::write("target/sfit/nondeterminism.csv", &csv)?;
    std::fs::create_dir_all("docs/figures")?;
    std::fs::write("docs/figures/nondeterminism.svg", svg(&rows))?;
    outln!(
        out,
        "wrote target/sfit/nondeterminism.csv and docs/figures/nondeterminism.svg"
    );
    let mismatch = rows.iter().any(|r| r.2 < 1.0);
    if mismatch {
        eprintln!("with payload, some assignment did not match creation order");
    }
    let code = out.exit_code(i32::from(mismatch));
    if code != 0 {
        std::process::exit(code);
    }
    Ok(())
}
