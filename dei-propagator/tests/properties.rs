//! Property tests of the model, the wire format and fault plans.

use dei_propagator::projection::{RecordedRpc, project};
use dei_propagator::{
    CallStack, DeiContextExt, DeiPropagator, Element, ElementDigest, Fault, FaultPlan, Frame, Index, Instantiation,
    InvocationSignature, Limits, PayloadDigest, RequestScope, Signature,
};
use opentelemetry::Context;
use opentelemetry::propagation::TextMapPropagator;
use proptest::prelude::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

/// A random program: each node is an RPC (signature, payload and call site drawn from small sets, so that
/// repeats are common) and its children are the RPCs its callee issues while serving it.
#[derive(Clone, Debug)]
struct Node {
    signature: u8,
    payload: u8,
    site: u8,
    children: Vec<Node>,
}

fn program() -> impl Strategy<Value = Vec<Node>> {
    let leaf = (0u8..3, 0u8..3, 0u8..3).prop_map(|(signature, payload, site)| Node {
        signature,
        payload,
        site,
        children: vec![],
    });
    let node = leaf.prop_recursive(4, 64, 6, |inner| {
        (0u8..3, 0u8..3, 0u8..3, prop::collection::vec(inner, 0..6)).prop_map(|(signature, payload, site, children)| {
            Node {
                signature,
                payload,
                site,
                children,
            }
        })
    });
    prop::collection::vec(node, 1..8)
}

/// The invocation signature of `node`; `sibling` is mixed into the payload when `distinct_payloads` is set, so
/// that RPCs issued in the same scope never share a payload.
fn invocation(node: &Node, sibling: usize, distinct_payloads: bool) -> InvocationSignature {
    let payload = if distinct_payloads {
        format!("p{}-{sibling}", node.payload)
    } else {
        format!("p{}", node.payload)
    };
    let stack = CallStack::new(vec![Frame::new("src/service.rs", 10 + u32::from(node.site), 5)]);
    InvocationSignature::new(
        Signature::new(&format!("svc{}", node.signature), "call", ""),
        PayloadDigest::of(payload.as_bytes()),
        stack.digest(),
    )
}

/// One RPC of an execution: its position path in the program, its parent's position in the list, its
/// invocation signature and the index it got.
struct Issued {
    id: Vec<usize>,
    parent: Option<usize>,
    invocation: InvocationSignature,
    index: Index,
}

/// Runs the program depth-first, every callee opening a scope under its incoming index.
fn run_sequential(program: &[Node], inst: &Instantiation, distinct: bool) -> Vec<Issued> {
    fn serve(
        scope: &RequestScope,
        nodes: &[Node],
        id: &[usize],
        parent: Option<usize>,
        inst: &Instantiation,
        distinct: bool,
        out: &mut Vec<Issued>,
    ) {
        for (i, node) in nodes.iter().enumerate() {
            let invocation = invocation(node, i, distinct);
            let index = scope.issue(&invocation).index().clone();
            let mut child_id = id.to_vec();
            child_id.push(i);
            out.push(Issued {
                id: child_id.clone(),
                parent,
                invocation,
                index: index.clone(),
            });
            let me = out.len() - 1;
            let callee = RequestScope::enter(index, inst.clone());
            serve(&callee, &node.children, &child_id, Some(me), inst, distinct, out);
        }
    }
    let mut out = Vec::new();
    serve(
        &RequestScope::root(inst.clone()),
        program,
        &[],
        None,
        inst,
        distinct,
        &mut out,
    );
    out
}

/// Runs the program under a random schedule: any issued RPC's callee may run next, and RPCs issued in the
/// same scope interleave in any order.
fn run_scheduled(program: &[Node], inst: &Instantiation, seed: u64) -> BTreeMap<Vec<usize>, Index> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut ready: Vec<(RequestScope, Vec<usize>, usize, &Node)> = program
        .iter()
        .enumerate()
        .map(|(i, n)| (RequestScope::root(inst.clone()), vec![i], i, n))
        .collect();
    // every root task shares one scope: the functional test's
    let root = RequestScope::root(inst.clone());
    for task in &mut ready {
        task.0 = root.clone();
    }
    let mut out = BTreeMap::new();
    while !ready.is_empty() {
        let (scope, id, sibling, node) = ready.swap_remove(rng.random_range(0..ready.len()));
        let index = scope.issue(&invocation(node, sibling, true)).index().clone();
        let callee = RequestScope::enter(index.clone(), inst.clone());
        for (i, child) in node.children.iter().enumerate() {
            let mut child_id = id.clone();
            child_id.push(i);
            ready.push((callee.clone(), child_id, i, child));
        }
        out.insert(id, index);
    }
    out
}

fn arb_index(max_depth: usize) -> impl Strategy<Value = Index> {
    prop::collection::vec((any::<[u8; 8]>(), 1u32..=u32::MAX, any::<bool>()), 0..=max_depth).prop_map(|els| {
        Index::from_elements(
            els.into_iter()
                .map(|(d, c, p)| {
                    let e = Element::new(ElementDigest(d), c);
                    if p { e.preliminary() } else { e }
                })
                .collect(),
        )
    })
}

/// Plan entries naming distinct indexes (a plan names each index once).
fn distinct_entries(max_depth: usize, len: std::ops::Range<usize>) -> impl Strategy<Value = Vec<(Index, Fault)>> {
    prop::collection::vec((arb_index(max_depth), arb_fault()), len).prop_map(|mut entries| {
        let mut seen = std::collections::HashSet::new();
        entries.retain(|(index, _)| seen.insert(index.clone()));
        entries
    })
}

fn arb_fault() -> impl Strategy<Value = Fault> {
    prop_oneof![
        (1u8..=16).prop_map(Fault::Grpc),
        (200u16..=599).prop_map(Fault::Http),
        Just(Fault::Connection),
        (0u64..=999_999).prop_map(|ms| Fault::Latency(Duration::from_millis(ms))),
    ]
}

/// An index as one can be built by hand: often deeper than 64 elements, with a count of 0, or repeated (few
/// digests and counts).
fn hand_index() -> impl Strategy<Value = Index> {
    (0usize..70, 0u8..3, 0u32..3, any::<bool>()).prop_map(|(depth, digest, count, preliminary)| {
        let element = Element::new(ElementDigest([digest; 8]), count);
        let mut elements = vec![Element::new(ElementDigest([digest; 8]), 1); depth];
        if let Some(last) = elements.last_mut() {
            *last = if preliminary { element.preliminary() } else { element };
        }
        Index::from_elements(elements)
    })
}

/// A fault as one can be built by hand: codes and statuses out of range, latencies too long or finer than a
/// millisecond.
fn hand_fault() -> impl Strategy<Value = Fault> {
    prop_oneof![
        any::<u8>().prop_map(Fault::Grpc),
        prop_oneof![any::<u16>(), 190u16..210, 590u16..610].prop_map(Fault::Http),
        Just(Fault::Connection),
        prop_oneof![0u64..2_000_000_000, 999_990_000u64..1_000_010_000]
            .prop_map(|us| Fault::Latency(Duration::from_micros(us))),
    ]
}

/// The alphabet of wire values: safe in headers and inside baggage values.
fn wire_safe(text: &str) -> bool {
    text.bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"-_.~*:".contains(&b))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Ambiguity and counts against a reference model that keeps a flag per RPC in flight: issuing a signature
    /// while another RPC with it is in flight flags both (and every one in flight), and the scope counts each
    /// RPC once, when it is first flagged; the count is the signature's number of issues (1 without counting).
    /// Operations: issue signature `s` (op 0) or a preliminary index for it (op 1), or complete the i-th RPC in
    /// flight (op 2: dropped, or through `complete` for odd i). Every path mode, with and without counting;
    /// the indexes extend the root scope's empty prefix (path modes) or the whole history (causal history).
    #[test]
    fn ambiguity_and_counts_match_a_model_of_rpcs_in_flight(ops in proptest::collection::vec((0u8..3, 0u8..3, 0usize..8), 1..40)) {
        let instantiations = [
            Instantiation::dei(),
            Instantiation::no_count(),
            Instantiation::three_mile_beach(),
            Instantiation::signature_only(),
            Instantiation::no_path(),
        ];
        for inst in instantiations {
            let scope = RequestScope::root(inst.clone());
            let mut live: Vec<(u8, bool, dei_propagator::IssuedIndex)> = Vec::new();
            let mut issues = [0u32; 3];
            let mut history: Vec<Element> = Vec::new();
            let mut counted = 0u64;
            for &(op, signature, pick) in &ops {
                if op == 2 && !live.is_empty() {
                    let (_, flag, issued) = live.remove(pick % live.len());
                    if pick % 2 == 1 {
                        prop_assert_eq!(issued.complete(), flag, "{}", inst);
                    }
                } else {
                    let invocation = InvocationSignature::new(
                        Signature::grpc_path(&format!("/S/m{signature}")),
                        PayloadDigest::of(b"p"),
                        dei_propagator::StackDigest([0; 32]),
                    );
                    let issued = if op == 1 {
                        scope.issue_preliminary(&invocation)
                    } else {
                        scope.issue(&invocation)
                    };
                    issues[usize::from(signature)] += 1;
                    let expected = if inst.count { issues[usize::from(signature)] } else { 1 };
                    prop_assert_eq!(issued.element().count, expected, "{}", inst);
                    prop_assert_eq!(issued.element().preliminary, op == 1);
                    let element = issued.element();
                    if inst.path == dei_propagator::PathMode::History {
                        history.push(element);
                        prop_assert_eq!(issued.index().elements(), &history[..]);
                    } else {
                        prop_assert_eq!(issued.index().elements(), &[element][..]);
                    }
                    let mut flagged = false;
                    for (_, flag, _) in live.iter_mut().filter(|(s, _, _)| *s == signature) {
                        if !*flag {
                            counted += 1;
                        }
                        *flag = true;
                        flagged = true;
                    }
                    if flagged {
                        counted += 1;
                    }
                    live.push((signature, flagged, issued));
                }
                for (_, flag, issued) in &live {
                    prop_assert_eq!(issued.is_ambiguous(), *flag, "{}", inst);
                }
                prop_assert_eq!(scope.ambiguous(), counted, "{}", inst);
            }
        }
    }

    #[test]
    fn indexes_are_unique_within_one_execution(program in program()) {
        for inst in [Instantiation::dei(), Instantiation::filibuster()] {
            let run = run_sequential(&program, &inst, false);
            let distinct: HashSet<&Index> = run.iter().map(|r| &r.index).collect();
            prop_assert_eq!(distinct.len(), run.len(), "{}", inst);
        }
    }

    #[test]
    fn a_childs_index_has_its_parents_as_prefix(program in program()) {
        let run = run_sequential(&program, &Instantiation::dei(), false);
        for rpc in &run {
            let parent_index = rpc.parent.map_or_else(Index::root, |p| run[p].index.clone());
            prop_assert!(rpc.index.starts_with(&parent_index));
            prop_assert_eq!(rpc.index.parent(), Some(parent_index));
            prop_assert_eq!(rpc.index.depth(), rpc.id.len());
        }
    }

    #[test]
    fn names_do_not_depend_on_the_schedule_when_payloads_differ(program in program(), seed in any::<u64>()) {
        let inst = Instantiation::dei();
        let sequential: BTreeMap<Vec<usize>, Index> =
            run_sequential(&program, &inst, true).into_iter().map(|r| (r.id, r.index)).collect();
        prop_assert_eq!(run_scheduled(&program, &inst, seed), sequential);
    }

    #[test]
    fn projection_to_the_full_instantiation_is_the_identity_and_to_a_preset_is_running_under_it(program in program()) {
        let recorded = run_sequential(&program, &Instantiation::dei(), false);
        let rpcs: Vec<RecordedRpc> = recorded
            .iter()
            .map(|r| RecordedRpc { parent: r.parent, invocation: r.invocation.clone() })
            .collect();
        let indexes: Vec<Index> = recorded.iter().map(|r| r.index.clone()).collect();
        prop_assert_eq!(project(&rpcs, &Instantiation::dei()), indexes);
        for preset in Instantiation::presets() {
            let direct: Vec<Index> = run_sequential(&program, &preset, false).into_iter().map(|r| r.index).collect();
            prop_assert_eq!(project(&rpcs, &preset), direct, "{}", preset);
        }
    }

    #[test]
    fn encode_decode_round_trip(index in arb_index(64)) {
        let text = index.encode();
        prop_assert!(wire_safe(&text) && !text.contains('*') && !text.contains(':'), "{}", text);
        prop_assert_eq!(Index::decode(&text), Ok(index.clone()));
        let per_hop = (text.len() - 1) as f64 / index.depth().max(1) as f64;
        prop_assert!(index.depth() == 0 || per_hop <= 23.0);
    }

    #[test]
    fn decode_never_panics_and_accepts_only_canonical_text(text in ".{0,80}") {
        if let Ok(index) = Index::decode(&text) {
            prop_assert_eq!(index.encode(), text);
        }
    }

    #[test]
    fn decode_near_valid_text_accepts_only_canonical_text(text in "1(\\.[A-Za-z0-9_~=.-]{10,16}){0,4}") {
        if let Ok(index) = Index::decode(&text) {
            prop_assert_eq!(index.encode(), text);
        }
    }

    #[test]
    fn decode_never_panics_on_bytes(bytes in prop::collection::vec(any::<u8>(), 0..200), max_len in 0usize..300, max_depth in 0usize..8) {
        let text = String::from_utf8_lossy(&bytes);
        let limits = Limits { max_len, max_depth };
        if let Ok(index) = Index::decode_with(&text, &limits) {
            prop_assert_eq!(index.encode(), text.as_ref());
            prop_assert!(index.depth() <= max_depth && text.len() <= max_len);
        }
    }

    #[test]
    fn fault_plan_round_trip(entries in distinct_entries(6, 0..8)) {
        let plan = FaultPlan::try_new(entries).expect("valid faults");
        let text = plan.encode();
        prop_assert!(wire_safe(&text), "{}", text);
        prop_assert_eq!(FaultPlan::decode(&text), Ok(plan));
    }

    /// What a plan built by hand is checked against before it is sent is what a receiver does with its wire
    /// form: every defect (too long, too many entries, an index too deep or with a count of 0, a fault out of
    /// range, an index named twice) with the same error, and nothing else. `try_new` adds latencies the wire
    /// writes shortened.
    #[test]
    fn a_plan_is_checked_as_a_receiver_reads_it(
        entries in prop::collection::vec((hand_index(), hand_fault()), 0..8),
        max_len in prop_oneof![0usize..400, Just(4096)],
        max_entries in 0usize..8,
    ) {
        let plan = FaultPlan::new(entries.clone());
        let limits = dei_propagator::PlanLimits { max_len, max_entries };
        prop_assert_eq!(plan.check_with(&limits), FaultPlan::decode_with(&plan.encode(), &limits).map(drop));
        let strict = FaultPlan::decode(&plan.encode())
            .map_err(Some)
            .and_then(|read| if read == plan { Ok(()) } else { Err(None) });
        match FaultPlan::try_new(entries) {
            Ok(built) => prop_assert_eq!(strict, Ok(()), "{}", built),
            Err(e) => prop_assert!(strict.is_err(), "{}", e),
        }
    }

    #[test]
    fn fault_plan_decode_never_panics_and_is_canonical(text in "(1|.{0,3})(\\*[0-9A-Za-z._~:-]{0,30}){0,4}|.{0,60}") {
        if let Ok(plan) = FaultPlan::decode(&text) {
            prop_assert_eq!(plan.encode(), text);
        }
    }

    /// An index built by hand (any depth, counts of 0 anywhere) is written as its longest prefix that a receiver
    /// with the default limits reads: its elements before the first with a count of 0, at most 64 of them.
    #[test]
    fn a_hand_built_index_is_written_as_its_longest_prefix_a_receiver_reads(
        elements in prop::collection::vec((0u8..3, prop_oneof![Just(0u32), 1u32..20, Just(u32::MAX)], any::<bool>()), 0..70),
    ) {
        let index: Index = (elements.iter())
            .map(|&(digest, count, preliminary)| {
                let element = Element::new(ElementDigest([digest; 8]), count);
                if preliminary { element.preliminary() } else { element }
            })
            .collect();
        let readable: Index = index.elements().iter().copied().take_while(|e| e.count > 0).take(64).collect();
        let mut headers: HashMap<String, String> = HashMap::new();
        dei_propagator::inject_with_index(&DeiPropagator::new(), &Context::new(), &index, &mut headers);
        let written = readable.encode();
        prop_assert_eq!(headers.get("dei"), Some(&written));
        let read = DeiPropagator::new().extract(&headers);
        prop_assert_eq!(read.dei_index(), Some(&readable));
    }

    #[test]
    fn propagator_round_trip_through_either_carrier(index in arb_index(20), plan in distinct_entries(3, 1..4)) {
        let plan = FaultPlan::try_new(plan).expect("valid");
        let cx = Context::new().with_dei_index(index.clone()).with_fault_plan(plan.clone());
        for carriers in [
            dei_propagator::Carriers { header: true, baggage: false },
            dei_propagator::Carriers { header: false, baggage: true },
            dei_propagator::Carriers::default(),
        ] {
            let propagator = DeiPropagator::with_config(carriers, Limits::default(), Default::default());
            let mut headers: HashMap<String, String> = HashMap::new();
            propagator.inject_context(&cx, &mut headers);
            prop_assert!(headers.values().all(|v| !v.contains('%')), "nothing of ours needs percent-encoding");
            let out = DeiPropagator::new().extract(&headers);
            prop_assert_eq!(out.dei_index(), Some(&index));
            prop_assert_eq!(out.fault_plan(), Some(&plan));
        }
    }
}

#[test]
fn a_plan_names_each_index_once() {
    let first = Index::root().child(Element::new(ElementDigest([1; 8]), 1));
    let second = first.child(Element::new(ElementDigest([2; 8]), 3));
    let entries = vec![
        (first.clone(), Fault::UNAVAILABLE),
        (second.clone(), Fault::Connection),
        (first.clone(), Fault::Connection),
    ];
    let refused = Err(dei_propagator::FaultPlanError::RepeatedIndex { entry: 2, first: 0 });
    assert_eq!(FaultPlan::try_new(entries.clone()), refused);
    assert_eq!(FaultPlan::decode(&FaultPlan::new(entries).encode()), refused);
    let distinct =
        FaultPlan::try_new(vec![(first, Fault::UNAVAILABLE), (second, Fault::Connection)]).expect("distinct");
    assert_eq!(FaultPlan::decode(&distinct.encode()), Ok(distinct));
}

#[test]
fn invalid_faults_are_refused_by_try_new_and_latency_is_clamped() {
    let root = Index::root();
    assert!(FaultPlan::try_new(vec![(root.clone(), Fault::Grpc(17))]).is_err());
    assert!(FaultPlan::try_new(vec![(root.clone(), Fault::Http(99))]).is_err());
    assert!(FaultPlan::try_new(vec![(root.clone(), Fault::Latency(Duration::from_micros(1500)))]).is_err());
    let long = FaultPlan::new(vec![(root.clone(), Fault::Latency(Duration::from_secs(5000)))]);
    assert_eq!(
        long.encode(),
        "1*1:l999999",
        "an over-long latency is written as the longest one"
    );
    assert!(FaultPlan::decode(&long.encode()).is_ok());
    assert!(
        FaultPlan::decode("1*1:g04").is_err() && FaultPlan::decode("1*1:l007").is_err(),
        "no leading zeros"
    );
}
