//! Completeness and non-redundancy against the brute-force oracle on randomly generated programs: trees of
//! services whose calls fall back, propagate failures or retry, in loops, sequentially or concurrently; searched one
//! execution at a time and four at once (issue #22).

use dei_propagator::{Fault, Instantiation};
use dei_sfit::model::Caller;
use dei_sfit::*;
use futures::future::BoxFuture;
use std::sync::Arc;

#[derive(Clone, Copy, Debug)]
enum Policy {
    Fallback,
    Propagate,
    RetryOnce,
    BreakLoop,
}

#[derive(Debug)]
struct Call {
    service: String,
    payloads: Vec<String>,
    site: u32,
    policy: Policy,
    callee: Arc<Handler>,
}

#[derive(Debug, Default)]
struct Handler {
    calls: Vec<Call>,
    concurrent: bool,
}

struct Lcg(u64);
impl Lcg {
    fn next(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

fn gen_handler(rng: &mut Lcg, depth: u32, budget: &mut u32, site: &mut u32) -> Handler {
    let mut h = Handler {
        concurrent: rng.next(3) == 0,
        ..Handler::default()
    };
    let n = if depth >= 3 { 0 } else { rng.next(3) };
    for _ in 0..n {
        if *budget == 0 {
            break;
        }
        *budget -= 1;
        *site += 1;
        let policy = [
            Policy::Fallback,
            Policy::Propagate,
            Policy::RetryOnce,
            Policy::BreakLoop,
        ][rng.next(4) as usize];
        let loops = if rng.next(3) == 0 { 2 } else { 1 };
        let same_payload = rng.next(2) == 0;
        let payloads = (0..loops)
            .map(|i| if same_payload { "p".to_string() } else { format!("p{i}") })
            .collect();
        let callee = Arc::new(gen_handler(rng, depth + 1, budget, site));
        h.calls.push(Call {
            service: format!("S{}/m", rng.next(3)),
            payloads,
            site: *site,
            policy,
            callee,
        });
    }
    h
}

fn serve(h: Arc<Handler>, me: Caller) -> BoxFuture<'static, Result<String, Fault>> {
    Box::pin(async move {
        tokio::task::yield_now().await;
        let mut out = String::new();
        if h.concurrent {
            let futs = h.calls.iter().flat_map(|c| {
                let me = me.clone();
                c.payloads.iter().map(move |p| {
                    let me = me.clone();
                    let callee = c.callee.clone();
                    async move { me.call(&c.service, p, &[c.site], move |cx| serve(callee, cx)).await }
                })
            });
            for r in futures::future::join_all(futs).await {
                out.push_str(&r.unwrap_or_else(|_| "d".into()));
            }
            return Ok(out);
        }
        for c in &h.calls {
            for p in &c.payloads {
                let callee = c.callee.clone();
                let mut r = me.call(&c.service, p, &[c.site], |cx| serve(callee, cx)).await;
                if r.is_err() {
                    match c.policy {
                        Policy::Fallback => {}
                        Policy::Propagate => return Err(Fault::INTERNAL),
                        Policy::RetryOnce => {
                            let callee = c.callee.clone();
                            r = me.call(&c.service, p, &[c.site], |cx| serve(callee, cx)).await;
                        }
                        Policy::BreakLoop => {
                            let _ = me
                                .call(&c.service, "fallback", &[c.site + 1000], |_| async {
                                    Ok(String::new())
                                })
                                .await;
                            break;
                        }
                    }
                }
                out.push_str(&r.unwrap_or_else(|_| "d".into()));
            }
        }
        Ok(out)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn search_matches_oracle_on_generated_programs() {
    let mut checked = 0;
    let mut nontrivial = 0;
    for seed in 1..=60u64 {
        let mut rng = Lcg(seed);
        let mut budget = 6;
        let mut site = 0;
        let root = Arc::new(gen_handler(&mut rng, 0, &mut budget, &mut site));
        let rec = Recorder::new();
        let r = rec.clone();
        let root2 = root.clone();
        let test = test_fn(format!("gen-{seed}"), move |run| {
            let t = Caller::root(&run, &r);
            let root = root2.clone();
            async move {
                t.call("Entry/run", "", &[0], |cx| serve(root, cx))
                    .await
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            }
        });
        // the test's own request is never failed: that rule comes first
        let catalog = FaultCatalog {
            rules: Vec::new(),
            protocol_defaults: false,
        }
        .with_rule("Entry/*", vec![])
        .with_rule("*", vec![Fault::Connection]);
        let options = SearchOptions {
            catalog,
            instantiation: Instantiation::dei(),
            ..SearchOptions::default()
        };
        let truth = match Oracle::new(options.clone(), Arc::new(rec.clone()), 11).run(&test).await {
            Ok(t) => t,
            Err(OracleError::TooLarge(..)) => continue,
            Err(e) => panic!("{e}"),
        };
        for strategy in [Strategy::DepthFirst, Strategy::BreadthFirst] {
            let report = Search::new(
                SearchOptions {
                    strategy,
                    ..options.clone()
                },
                rec.clone(),
            )
            .run(&test)
            .await
            .expect("search");
            assert!(
                report.redundant().is_empty(),
                "seed {seed}: redundant\n{root:#?}\n{report}"
            );
            assert_eq!(
                report.reference_sets(),
                truth.reference,
                "seed {seed} {strategy:?}: incomplete\n{root:#?}\n{report}"
            );
            assert_eq!(report.executions.len(), truth.reference.len());
            // the same with 4 executions at once (issue #22): the same sets, no execution more
            let parallel = Search::new(
                SearchOptions {
                    strategy,
                    parallelism: 4,
                    ..options.clone()
                },
                rec.clone(),
            )
            .run(&test)
            .await
            .expect("parallel search");
            assert_eq!(parallel.parallelism_used, 4);
            assert_eq!(
                parallel.reference_sets(),
                truth.reference,
                "seed {seed} {strategy:?} N=4: incomplete\n{root:#?}\n{parallel}"
            );
            assert_eq!(
                parallel.executions.len(),
                truth.reference.len(),
                "seed {seed} {strategy:?} N=4"
            );
            assert!(parallel.redundant().is_empty() && parallel.unreached().is_empty());
        }
        checked += 1;
        if truth.reference.len() > 4 {
            nontrivial += 1;
        }
    }
    eprintln!("checked {checked} programs, {nontrivial} with more than 4 fault sets");
    assert!(
        checked >= 30 && nontrivial >= 10,
        "checked {checked}, nontrivial {nontrivial}"
    );
}
