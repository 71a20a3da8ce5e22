//! A → B → C over real tonic and axum servers on loopback, multi-thread runtime, spans from the in-memory
//! exporter.

mod common;

use common::*;
use dei_propagator::{DeiContextExt, Fault, FaultPlan, Index, PayloadDigest};
use opentelemetry::trace::SpanId;
use opentelemetry_sdk::trace::SpanData;
use prost::Message;
use std::collections::{BTreeMap, HashMap};

/// RPC spans of one `A.Run` call: the test's call to A and A's server span, then twice (B's client and
/// server spans, and 11 client and 11 server spans of B's calls to C).
const SPANS_PER_RUN: usize = 50;

async fn run_once(sys: &System, text: &str, plan: Option<FaultPlan>) -> (String, Vec<SpanData>) {
    let mut front = sys.front_client().await;
    let (reply, trace) = in_root(
        &sys.config,
        |cx| match plan {
            Some(p) => cx.with_fault_plan(p),
            None => cx,
        },
        async move { front.run(msg(text)).await },
    )
    .await;
    let reply = reply.expect("A.Run").into_inner().text;
    (reply, spans_of(trace, SPANS_PER_RUN + 1).await)
}

fn index_of(span: &SpanData) -> Option<Index> {
    attr(span, "dei.index").and_then(|i| Index::decode(&i).ok())
}

/// Every child's index has its parent's as prefix: a client span extends its server span's index by one
/// element, and a server span carries its client span's index.
fn check_prefixes(spans: &[SpanData]) {
    let by_id: HashMap<SpanId, &SpanData> = spans.iter().map(|s| (s.span_context.span_id(), s)).collect();
    let mut checked = 0;
    for span in spans.iter().filter(|s| attr(s, "dei.index").is_some()) {
        let index = index_of(span).expect("a valid dei.index");
        let parent = by_id.get(&span.parent_span_id).copied();
        if is_client(span) {
            match parent.and_then(index_of) {
                Some(server_index) if is_server(parent.expect("parent")) => {
                    assert_eq!(index.parent(), Some(server_index.clone()), "{}", span.name);
                    assert!(index.starts_with(&server_index));
                }
                _ => assert_eq!(index.depth(), 1, "a call from the test's root scope"),
            }
        } else {
            let parent = parent.expect("every server span has its client span as parent");
            assert!(is_client(parent));
            assert_eq!(Some(index), index_of(parent), "{}", span.name);
        }
        checked += 1;
    }
    assert_eq!(checked, SPANS_PER_RUN, "every RPC span carries dei.index");
}

/// (signature, index) of every client span, sorted: what must not change across runs.
fn client_indexes(spans: &[SpanData]) -> Vec<(String, String)> {
    let mut v: Vec<_> = spans
        .iter()
        .filter(|s| is_client(s))
        .map(|s| {
            (
                attr(s, "dei.signature").unwrap_or_default(),
                attr(s, "dei.index").unwrap_or_default(),
            )
        })
        .collect();
    v.sort();
    v
}

fn digest_of(m: &pb::Msg) -> String {
    PayloadDigest::of(&m.encode_to_vec()).to_hex()
}

/// The C client spans issued while B served the request whose payload was `b_payload`.
fn leaf_calls_under<'a>(spans: &'a [SpanData], b_payload: &str) -> Vec<&'a SpanData> {
    let b_server = spans
        .iter()
        .find(|s| is_server(s) && attr(s, "dei.payload.digest") == Some(digest_of(&msg(b_payload))))
        .expect("B's server span, found by its payload digest");
    spans
        .iter()
        .filter(|s| is_client(s) && s.parent_span_id == b_server.span_context.span_id())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn indexes_extend_prefixes_and_are_identical_across_50_runs() {
    let sys = System::start().await;
    let mut first: Option<Vec<(String, String)>> = None;
    for run in 0..50 {
        let (reply, spans) = run_once(&sys, "x", None).await;
        assert!(!reply.contains("Unavailable"), "{reply}");
        assert_eq!(spans.len(), SPANS_PER_RUN + 1, "run {run}: {} spans", spans.len());
        check_prefixes(&spans);
        for s in spans.iter().filter(|s| is_client(s)) {
            assert_eq!(attr(s, "dei.ambiguous").as_deref(), Some("false"), "{}", s.name);
            assert_eq!(attr(s, "dei.stack.mode").as_deref(), Some("line-tables"));
        }
        let indexes = client_indexes(&spans);
        let distinct: std::collections::BTreeSet<_> = indexes.iter().map(|(_, i)| i).collect();
        assert_eq!(distinct.len(), indexes.len(), "indexes are unique within a run");
        match &first {
            None => first = Some(indexes),
            Some(f) => assert_eq!(f, &indexes, "run {run} differs from run 0"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fig1_call_sites_and_fig2_loop_iterations() {
    let sys = System::start().await;
    let (_, spans) = run_once(&sys, "x", None).await;
    let calls = leaf_calls_under(&spans, "x-p");
    assert_eq!(calls.len(), 11, "B issues 10 gRPC calls and 1 HTTP call");
    let with_payload = |text: &str| -> Vec<&&SpanData> {
        calls
            .iter()
            .filter(|s| attr(s, "dei.payload.digest") == Some(digest_of(&msg(text))))
            .collect()
    };
    // Fig. 1: same signature and payload, two call sites: different stacks, different indexes, count 1 each.
    let same = with_payload("same");
    assert_eq!(same.len(), 2);
    assert_ne!(attr(same[0], "dei.stack.digest"), attr(same[1], "dei.stack.digest"));
    assert_ne!(attr(same[0], "dei.index"), attr(same[1], "dei.index"));
    assert_eq!(attr(same[0], "dei.count").as_deref(), Some("1"));
    assert_eq!(attr(same[1], "dei.count").as_deref(), Some("1"));
    // The readable frames go on the first sampled span of each distinct stack in the process (which may be
    // another test's, run in parallel): any exported span with the same digest.
    let digest = attr(same[0], "dei.stack.digest").expect("dei.stack.digest on every client span");
    let frames_of = |digest: &str| -> Vec<String> {
        (dei_instrumentation::testing::telemetry().spans().iter())
            .filter(|s| attr(s, "dei.stack.digest").as_deref() == Some(digest))
            .filter_map(|s| attr(s, "dei.stack"))
            .collect()
    };
    // (That span may still be in flight: it ends with its call.)
    let mut with_frames = frames_of(&digest);
    for _ in 0..200 {
        if !with_frames.is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        with_frames = frames_of(&digest);
    }
    assert_eq!(with_frames.len(), 1, "dei.stack once per distinct stack");
    let stack = with_frames[0].clone();
    assert!(stack.contains("tests/common/mod.rs:"), "{stack}");
    assert!(
        !stack.contains(".cargo/registry") && !stack.contains("dei-instrumentation/src"),
        "{stack}"
    );
    // Fig. 2: one call site in a loop: the same stack, counts 1, 2, 3.
    let looped = with_payload("loop");
    assert_eq!(looped.len(), 3);
    let mut counts: Vec<String> = looped
        .iter()
        .map(|s| attr(s, "dei.count").unwrap_or_default())
        .collect();
    counts.sort();
    assert_eq!(counts, ["1", "2", "3"]);
    assert_eq!(attr(looped[0], "dei.stack.digest"), attr(looped[1], "dei.stack.digest"));
    // Fan-out from one site: one stack, three payloads, count 1 each.
    for p in ["a", "b", "c", "s1", "s2"] {
        let c = with_payload(p);
        assert_eq!(c.len(), 1, "{p}");
        assert_eq!(attr(c[0], "dei.count").as_deref(), Some("1"), "{p}");
    }
    // Standard attributes for the service graph.
    let grpc = same[0];
    assert_eq!(attr(grpc, "rpc.system").as_deref(), Some("grpc"));
    assert_eq!(attr(grpc, "rpc.service").as_deref(), Some("deitest.Leaf"));
    assert_eq!(attr(grpc, "rpc.method").as_deref(), Some("Get"));
    assert_eq!(attr(grpc, "dei.signature").as_deref(), Some("deitest.Leaf/Get"));
    assert_eq!(attr(grpc, "dei.instantiation").as_deref(), Some("dei"));
    assert_eq!(attr(grpc, "dei.depth").as_deref(), Some("3"));
    assert_eq!(attr(grpc, "dei.stack.digest").map(|d| d.len()), Some(64));
    let http = calls
        .iter()
        .find(|s| attr(s, "http.request.method").is_some())
        .expect("the HTTP call");
    // The host names the service; the server's port, chosen at run time, is not part of the signature.
    assert_eq!(attr(http, "dei.signature").as_deref(), Some("GET 127.0.0.1/items/x-p"));
    let http_server = spans
        .iter()
        .find(|s| is_server(s) && s.parent_span_id == http.span_context.span_id())
        .expect("C's HTTP server span");
    assert_eq!(attr(http_server, "dei.signature").as_deref(), Some("GET /items/{id}"));
    assert_eq!(attr(http_server, "http.route").as_deref(), Some("/items/{id}"));
    // HTTP payload: query + "?" + body; a GET without query or body digests "?".
    assert_eq!(
        attr(http_server, "dei.payload.digest"),
        Some(PayloadDigest::of(b"?").to_hex())
    );
    assert_eq!(attr(http, "dei.payload.digest"), Some(PayloadDigest::of(b"?").to_hex()));
    // Raw payloads stay off spans by default.
    assert!(spans.iter().all(|s| attr(s, "dei.payload").is_none()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_planned_fault_fails_exactly_that_rpc() {
    let sys = System::start().await;
    // Every run starts from the same call site (the test's stack is part of the entry call's index), so the
    // runs form a loop: a fault-free run, then runs with plans built from its indexes.
    let mut plan: Option<FaultPlan> = None;
    let (mut site2, mut http_index) = (Index::root(), Index::root());
    for step in 0..3 {
        let (reply, spans) = run_once(&sys, "x", plan.take()).await;
        let (p, q) = reply.split_once(" | ").expect("two branches");
        match step {
            0 => {
                let calls = leaf_calls_under(&spans, "x-p");
                let same = digest_of(&msg("same"));
                let mut sites: Vec<&&SpanData> = calls
                    .iter()
                    .filter(|s| attr(s, "dei.payload.digest") == Some(same.clone()))
                    .collect();
                // The two call sites run one after the other: the first ends first.
                sites.sort_by_key(|s| s.end_time);
                site2 = Index::decode(&attr(sites[1], "dei.index").expect("index")).expect("valid");
                let http = calls
                    .iter()
                    .find(|s| attr(s, "http.request.method").is_some())
                    .expect("HTTP call");
                http_index = Index::decode(&attr(http, "dei.index").expect("index")).expect("valid");
                plan = Some(FaultPlan::new(vec![
                    (site2.clone(), Fault::UNAVAILABLE),
                    (http_index.clone(), Fault::Http(503)),
                ]));
            }
            1 => {
                assert!(p.contains("site2:Unavailable") && p.contains("http:503"), "{p}");
                assert_eq!(
                    p.matches(":ok").count(),
                    9,
                    "every other call of the p branch succeeded: {p}"
                );
                assert_eq!(q.matches(":ok").count(), 11, "the q branch is untouched: {q}");
                let injected: BTreeMap<String, String> = spans
                    .iter()
                    .filter_map(|s| Some((attr(s, "dei.index")?, attr(s, "dei.fault")?)))
                    .collect();
                assert_eq!(
                    injected,
                    BTreeMap::from([
                        (site2.encode(), "g14".to_string()),
                        (http_index.encode(), "h503".to_string())
                    ])
                );
                assert!(
                    !spans.iter().any(|s| is_server(s) && index_of(s) == Some(site2.clone())),
                    "the faulted call was never sent"
                );
                // Outcomes reach the spans: UNAVAILABLE (14) and an error status on the faulted call, OK (0) on
                // every other gRPC span that has a status code.
                let faulted = spans
                    .iter()
                    .find(|s| is_client(s) && index_of(s) == Some(site2.clone()))
                    .expect("the faulted call's client span");
                assert_eq!(attr(faulted, "rpc.grpc.status_code").as_deref(), Some("14"));
                assert!(matches!(faulted.status, opentelemetry::trace::Status::Error { .. }));
                let ok = spans
                    .iter()
                    .filter(|s| index_of(s) != Some(site2.clone()))
                    .filter_map(|s| attr(s, "rpc.grpc.status_code"))
                    .collect::<Vec<_>>();
                assert!(ok.len() >= 10 && ok.iter().all(|c| c == "0"), "{ok:?}");
                // The plan travelled with the requests: servers saw it.
                assert!(
                    spans
                        .iter()
                        .any(|s| is_server(s) && attr(s, "dei.fault.plan").is_some())
                );
                // A connection error on the HTTP call, and added latency on a gRPC call.
                plan = Some(FaultPlan::new(vec![
                    (http_index.clone(), Fault::Connection),
                    (site2.clone(), Fault::Latency(std::time::Duration::from_millis(30))),
                ]));
            }
            _ => {
                assert!(p.contains("http:error:true") && p.contains("site2:ok"), "{p}");
                assert_eq!(q.matches(":ok").count(), 11, "{q}");
                let delayed = spans
                    .iter()
                    .find(|s| is_client(s) && index_of(s) == Some(site2.clone()))
                    .expect("the delayed call");
                let took = delayed.end_time.duration_since(delayed.start_time).unwrap_or_default();
                assert!(took >= std::time::Duration::from_millis(30), "{took:?}");
                assert_eq!(attr(delayed, "dei.fault").as_deref(), Some("l30"));
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_outside_a_scope_are_roots() {
    let sys = System::start().await;
    let mut leaf = sys.leaf_client().await;
    // No root scope: each call is its own root, count 1.
    let a = leaf.get(msg("k")).await.expect("get").into_inner().text;
    let b = leaf.get(msg("k")).await.expect("get").into_inner().text;
    let served = |t: &str| t.rsplit_once('@').map(|(_, i)| i.to_string()).unwrap_or_default();
    assert_eq!(served(&a).matches('.').count(), 1, "{a}");
    assert!(served(&a).ends_with('1'));
    assert_ne!(served(&a), served(&b), "different call sites (lines)");
}

/// How a caller bounds a call's wait: the call's own `grpc-timeout`, the channel's `Endpoint::timeout`, or a
/// timer of its own around the call.
#[derive(Clone, Copy, Debug)]
enum Deadline {
    Call,
    Channel,
    Caller,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_planned_delay_counts_against_the_callers_deadline_and_still_names_its_rpc() {
    let sys = System::start().await;
    let wait = std::time::Duration::from_millis(300);
    for deadline in [Deadline::Call, Deadline::Channel, Deadline::Caller] {
        // Two rounds from one call site: a plain call gives the index, then that index is delayed for far
        // longer than the caller's deadline.
        let mut plan: Option<FaultPlan> = None;
        let mut planned = Index::root();
        for round in 0..2 {
            let endpoint = tonic::transport::Endpoint::from_shared(format!("http://{}", sys.leaf)).expect("endpoint");
            let endpoint = match deadline {
                Deadline::Channel => endpoint.timeout(wait),
                _ => endpoint,
            };
            let channel = endpoint.connect().await.expect("connect");
            let mut leaf = pb::leaf_client::LeafClient::new(
                tower::ServiceBuilder::new()
                    .layer(dei_instrumentation::DeiClientLayer::new(sys.config.clone()))
                    .service(channel),
            );
            let this_plan = plan.take();
            let (outcome, trace) = in_root(
                &sys.config,
                |cx| match this_plan {
                    Some(p) => cx.with_fault_plan(p),
                    None => cx,
                },
                async move {
                    let mut request = tonic::Request::new(msg("slow"));
                    if let Deadline::Call = deadline {
                        request.set_timeout(wait);
                    }
                    match deadline {
                        Deadline::Caller => tokio::time::timeout(wait, leaf.get(request))
                            .await
                            .unwrap_or_else(|_| Err(tonic::Status::deadline_exceeded("the caller's timer"))),
                        _ => leaf.get(request).await,
                    }
                },
            )
            .await;
            let spans = spans_of(trace, 2).await;
            let client = spans.iter().find(|s| is_client(s)).expect("the client span");
            let index = index_of(client).expect("the client span names its RPC");
            if round == 0 {
                outcome.expect("no delay planned");
                planned = index;
                plan = Some(FaultPlan::new(vec![(
                    planned.clone(),
                    Fault::Latency(std::time::Duration::from_secs(30)),
                )]));
            } else {
                // The wait falls inside the deadline, as a slow network's would: tonic ends the call with the
                // status it gives any call past its deadline, the caller's timer fires, and the callee never
                // answers.
                let status = outcome.expect_err("the deadline ended the delayed call");
                match deadline {
                    Deadline::Caller => assert_eq!(status.code(), tonic::Code::DeadlineExceeded, "{status:?}"),
                    _ => assert_eq!(
                        (status.code(), status.message()),
                        (tonic::Code::Cancelled, "Timeout expired"),
                        "{deadline:?}: {status:?}"
                    ),
                }
                assert_eq!(index, planned);
                assert_eq!(attr(client, "dei.fault").as_deref(), Some("l30000"));
                assert!(attr(client, "dei.stack.digest").is_some());
                assert!(
                    !spans
                        .iter()
                        .any(|s| is_server(s) && attr(s, "rpc.grpc.status_code").as_deref() == Some("0")),
                    "{deadline:?}: the callee answered a call whose request was still held back"
                );
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_fault_in_a_hand_built_plan_is_not_carried_out_and_is_counted() {
    let sys = System::start().await;
    let leaf = sys.leaf_client().await;
    // Two rounds of three calls from one call site (counts 1, 2, 3): the first gives the indexes, the second runs
    // under a plan that no receiver reads (g17 and g0 are not faults), whose valid entry is still carried out here.
    let mut plan: Option<FaultPlan> = None;
    let mut indexes: Vec<Index> = Vec::new();
    for round in 0..2 {
        let this_plan = plan.take();
        let before = dei_instrumentation::invalid_faults_not_applied_total();
        let mut client = leaf.clone();
        let (outcomes, trace) = in_root(
            &sys.config,
            |cx| match this_plan {
                Some(p) => cx.with_fault_plan(p),
                None => cx,
            },
            async move {
                let mut outcomes = Vec::new();
                for _ in 0..3 {
                    outcomes.push(client.get(msg("invalid")).await.map(|r| r.into_inner().text));
                }
                outcomes
            },
        )
        .await;
        let spans = spans_of(trace, 6).await;
        let client_span = |index: &Index| {
            spans
                .iter()
                .find(|s| is_client(s) && index_of(s).as_ref() == Some(index))
                .expect("the call's client span")
        };
        if round == 0 {
            let served = |reply: &str| -> Index {
                reply
                    .rsplit_once('@')
                    .expect("leaf:text@index")
                    .1
                    .parse()
                    .expect("an index")
            };
            indexes = outcomes
                .iter()
                .map(|o| served(o.as_ref().expect("no fault planned")))
                .collect();
            plan = Some(FaultPlan::new(vec![
                (indexes[0].clone(), Fault::Grpc(17)),
                (indexes[1].clone(), Fault::UNAVAILABLE),
                (indexes[2].clone(), Fault::Grpc(0)),
            ]));
            continue;
        }
        // The invalid entries' calls reached the server, which answered OK under their indexes.
        for i in [0, 2] {
            let reply = outcomes[i].as_ref().expect("an invalid fault is not carried out");
            assert_eq!(reply, &format!("leaf:invalid@{}", indexes[i].encode()));
            let span = client_span(&indexes[i]);
            assert_eq!(attr(span, "dei.fault"), None, "no fault was injected");
            assert_eq!(attr(span, "rpc.grpc.status_code").as_deref(), Some("0"));
        }
        // The valid entry of the same plan failed its call, unsent.
        let status = outcomes[1].as_ref().expect_err("the valid entry is carried out");
        assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
        assert_eq!(attr(client_span(&indexes[1]), "dei.fault").as_deref(), Some("g14"));
        assert!(
            !spans
                .iter()
                .any(|s| is_server(s) && index_of(s).as_ref() == Some(&indexes[1]))
        );
        assert_eq!(dei_instrumentation::invalid_faults_not_applied_total(), before + 2);
    }
}
