//! The examples of the paper's §3, at the model level.
//!
//! Each execution is modelled the way a service runs it: the handler issues its RPCs into the request's
//! [`RequestScope`] from the call stacks of the paper's figures, a [`FaultPlan`] decides which RPCs fail, and
//! a callee opens its own scope under the index that crossed the wire through [`DeiPropagator`]. The
//! resulting sequences are compared with the paper's notation, parsed by [`notation`]: `A(W)^19|1` is the
//! first invocation, from line 19, of the RPC that service `A` sends with payload `W`; `¬` marks an RPC that
//! failed; `[x :: y]` is a path.

use dei_propagator::{
    CallStack, DeiContextExt, DeiPropagator, Element, Fault, FaultPlan, Frame, Index, Instantiation,
    InvocationSignature, PathMode, PayloadDigest, RequestScope, Signature,
};
use opentelemetry::Context;
use opentelemetry::propagation::TextMapPropagator;
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// One RPC of an execution: its index and whether it failed.
type Trace = Vec<(Index, bool)>;

/// The RPC that service `from` sends (the paper names an RPC by its invoking service): A calls `B/echo`,
/// B calls `C/echo`.
fn signature_sent_by(from: char) -> Signature {
    let callee = (from as u8 + 1) as char;
    Signature::new(&callee.to_string(), "echo", "s:String")
}

/// The invocation signature of the RPC sent by `from` with `payload` and the call stack `lines` (innermost
/// first) in `from`'s source file.
fn invocation(from: char, payload: &str, lines: &[u32]) -> InvocationSignature {
    let file = format!("service_{}.py", from.to_ascii_lowercase());
    let stack = CallStack::new(lines.iter().map(|&l| Frame::new(file.clone(), l, 0)).collect());
    InvocationSignature::new(
        signature_sent_by(from),
        PayloadDigest::of(payload.as_bytes()),
        stack.digest(),
    )
}

/// Parses the paper's notation into the indexes it denotes under `inst`.
///
/// `executions` is a comma-separated list of RPCs; each is `¬`-prefixed when it failed, and is either one
/// element or a bracketed path `[e1 :: e2]`. An element is `X(P)^L1,L2|C`: invoking service `X`, payload
/// abbreviation `P` (looked up in `payloads`; omitted means `default_payload`), stack lines (innermost last,
/// as the paper writes them) and count `C`.
fn notation(text: &str, inst: &Instantiation, payloads: &[(&str, &str)], default_payload: &str) -> Trace {
    let mut out = Vec::new();
    for rpc in split_top_level(text) {
        let rpc = rpc.trim();
        let (failed, rpc) = match rpc.strip_prefix('¬') {
            Some(rest) => (true, rest.trim()),
            None => (false, rpc),
        };
        let inner = rpc.strip_prefix('[').and_then(|r| r.strip_suffix(']')).unwrap_or(rpc);
        let mut elements = Vec::new();
        for element in inner.split("::") {
            let element = element.trim().trim_start_matches('¬');
            let (head, count) = element.split_once('|').expect("element has |count");
            let (head, lines) = head.split_once('^').expect("element has ^lines");
            let mut lines: Vec<u32> = lines.split(',').map(|l| l.trim().parse().expect("line")).collect();
            lines.reverse(); // the paper writes the outermost frame first
            let mut chars = head.chars();
            let from = chars.next().expect("service");
            let payload = match head[1..].strip_prefix('(').and_then(|p| p.strip_suffix(')')) {
                Some(abbrev) => payloads
                    .iter()
                    .find(|(a, _)| *a == abbrev)
                    .map(|(_, p)| *p)
                    .expect("known payload"),
                None => default_payload,
            };
            let digest = invocation(from, payload, &lines).element_digest(inst);
            elements.push(Element::new(digest, count.trim().parse().expect("count")));
        }
        let index = if inst.path == PathMode::Path {
            Index::from_elements(elements)
        } else {
            Index::from_elements(elements.split_off(elements.len() - 1))
        };
        out.push((index, failed));
    }
    out
}

/// Splits at commas that are not inside brackets, parentheses or a superscript's line list.
fn split_top_level(text: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start, mut in_lines) = (0, 0, false);
    for (i, c) in text.char_indices() {
        match c {
            '[' | '(' => depth += 1,
            ']' | ')' => depth -= 1,
            '^' => in_lines = true,
            '|' => in_lines = false,
            ',' if depth == 0 && !in_lines => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
}

/// Issues one RPC into `scope`; it fails when the plan names its index.
fn rpc(scope: &RequestScope, plan: &FaultPlan, inv: &InvocationSignature, trace: &mut Trace) -> Result<Index, ()> {
    let issued = scope.issue(inv);
    let index = issued.index().clone();
    let failed = plan.fault_for(&index).is_some();
    trace.push((index.clone(), failed));
    if failed { Err(()) } else { Ok(index) }
}

/// The callee's scope for a request sent with `index`: the index crosses the wire through the propagator.
fn callee_scope(index: &Index, inst: &Instantiation) -> RequestScope {
    let mut headers: HashMap<String, String> = HashMap::new();
    DeiPropagator::new().inject_context(&Context::new().with_dei_index(index.clone()), &mut headers);
    let incoming = DeiPropagator::new().extract(&headers);
    let prefix = incoming.dei_index().cloned().expect("the index crossed the wire");
    assert_eq!(&prefix, index);
    RequestScope::enter(prefix, inst.clone())
}

fn plan_failing(trace: &Trace) -> FaultPlan {
    FaultPlan::new(trace.iter().map(|(i, _)| (i.clone(), Fault::UNAVAILABLE)).collect())
}

fn without_count(inst: Instantiation) -> Instantiation {
    Instantiation {
        name: format!("{}-no-count", inst.name).into(),
        count: false,
        ..inst
    }
}

fn without_stack(inst: Instantiation) -> Instantiation {
    Instantiation {
        name: format!("{}-no-stack", inst.name).into(),
        stack: false,
        ..inst
    }
}

// ---------------------------------------------------------------------------------------------------------
// Fig. 1: the signature alone is too coarse.

/// Service A's `helloworld` of Fig. 1: `echo("Hello")` from line 3 and `echo("World")` from line 4, each
/// doing the RPC at line 10.
fn fig1(inst: &Instantiation) -> Vec<Index> {
    let scope = RequestScope::root(inst.clone());
    let mut trace = Trace::new();
    for (line, s) in [(3, "Hello"), (4, "World")] {
        let _ = rpc(
            &scope,
            &FaultPlan::default(),
            &invocation('A', s, &[10, line]),
            &mut trace,
        );
    }
    trace.into_iter().map(|(i, _)| i).collect()
}

#[test]
fn fig1_signature_alone_is_too_coarse() {
    let by_signature = fig1(&Instantiation::signature_only());
    assert_eq!(
        by_signature[0], by_signature[1],
        "the signature alone gives both RPCs one name"
    );

    let count_only = Instantiation {
        name: "count".into(),
        count: true,
        ..Instantiation::signature_only()
    };
    let stack_only = Instantiation {
        name: "stack".into(),
        stack: true,
        ..Instantiation::signature_only()
    };
    for inst in [
        count_only,
        stack_only,
        Instantiation::filibuster(),
        Instantiation::dei(),
    ] {
        let indexes = fig1(&inst);
        assert_ne!(
            indexes[0], indexes[1],
            "{inst}: the count or the stack tells the two RPCs apart"
        );
    }
    // the paper's names under count and stack together: A^{3,10}|1 and A^{4,10}|1
    let inst = Instantiation::filibuster();
    let expected = notation("A^3,10|1, A^4,10|1", &inst, &[], "");
    assert_eq!(fig1(&inst), expected.into_iter().map(|(i, _)| i).collect::<Vec<_>>());
}

// ---------------------------------------------------------------------------------------------------------
// Fig. 2: loops. Count and stack are both needed.

/// Service A's `helloworld(ss)` of Fig. 2: an RPC per string from line 8; on the first failure, one fallback
/// RPC from line 16 with "Hello World".
fn fig2(inst: &Instantiation, ss: &[&str], plan: &FaultPlan) -> Trace {
    let scope = RequestScope::root(inst.clone());
    let mut trace = Trace::new();
    let mut failure = false;
    for s in ss {
        if rpc(&scope, plan, &invocation('A', s, &[8]), &mut trace).is_err() {
            failure = true;
            break;
        }
    }
    if failure {
        let _ = rpc(&scope, plan, &invocation('A', "Hello World", &[16]), &mut trace);
    }
    trace
}

/// The five executions of §3.2, as the paper writes them; the fault plan of each fails the RPCs marked `¬`.
const FIG2_EXECUTIONS: [&str; 5] = [
    "A^8|1, A^8|2",
    "A^8|1, ¬A^8|2, A^16|1",
    "A^8|1, ¬A^8|2, ¬A^16|1",
    "¬A^8|1, A^16|1",
    "¬A^8|1, ¬A^16|1",
];

fn fig2_failing(expected: &Trace) -> FaultPlan {
    plan_failing(&expected.iter().filter(|(_, failed)| *failed).cloned().collect())
}

#[test]
fn fig2_five_executions_get_exactly_the_papers_indexes() {
    // §3.2 leaves the payload out, as Filibuster's instantiation does (signature, stack, count, path).
    let inst = Instantiation::filibuster();
    let mut all = BTreeSet::new();
    for text in FIG2_EXECUTIONS {
        let expected = notation(text, &inst, &[], "");
        let observed = fig2(&inst, &["Hello", "World"], &fig2_failing(&expected));
        assert_eq!(observed, expected, "execution {text}");
        all.extend(observed.into_iter().map(|(i, _)| i));
    }
    // A^8|1, A^8|2 and A^16|1: three distinct RPCs across the five executions, each with one name.
    assert_eq!(all.len(), 3);
}

#[test]
fn fig2_under_the_full_dei_with_equal_payloads() {
    // With the payload in, the loop's RPCs differ by payload unless the strings are equal; with equal
    // strings the full DEI needs the count exactly as §3.2 says.
    let inst = Instantiation::dei();
    let payloads = [("H", "Hello"), ("HW", "Hello World")];
    let texts = [
        "A(H)^8|1, A(H)^8|2",
        "A(H)^8|1, ¬A(H)^8|2, A(HW)^16|1",
        "A(H)^8|1, ¬A(H)^8|2, ¬A(HW)^16|1",
        "¬A(H)^8|1, A(HW)^16|1",
        "¬A(H)^8|1, ¬A(HW)^16|1",
    ];
    for text in texts {
        let expected = notation(text, &inst, &payloads, "");
        assert_eq!(
            fig2(&inst, &["Hello", "Hello"], &fig2_failing(&expected)),
            expected,
            "{text}"
        );
    }
}

#[test]
fn fig2_without_the_count_two_loop_iterations_collide() {
    // "Call stack alone is insufficient": e1 = (A^8, A^8).
    for inst in [without_count(Instantiation::filibuster()), Instantiation::no_count()] {
        let e1 = fig2(&inst, &["Hello", "Hello"], &FaultPlan::default());
        assert_eq!(e1.len(), 2);
        assert_eq!(e1[0].0, e1[1].0, "{inst}: two iterations, one name");
    }
    let e1 = fig2(&Instantiation::dei(), &["Hello", "Hello"], &FaultPlan::default());
    assert_ne!(e1[0].0, e1[1].0);
}

#[test]
fn fig2_without_the_stack_the_loop_and_the_fallback_collide() {
    // "Invocation count alone is insufficient": A|2 is the loop's second RPC in e1 and the fallback in e4.
    let inst = without_stack(Instantiation::filibuster());
    let e1 = fig2(&inst, &["Hello", "World"], &FaultPlan::default());
    let e4 = fig2(&inst, &["Hello", "World"], &plan_failing(&e1[..1].to_vec()));
    assert!(e4[0].1 && !e4[1].1);
    assert_eq!(e1[1].0, e4[1].0, "line 8 in e1 and line 16 in e4 get the same name A|2");
    assert_eq!(e1[1].0.last().map(|e| e.count), Some(2));

    let full = Instantiation::filibuster();
    let e1 = fig2(&full, &["Hello", "World"], &FaultPlan::default());
    let e4 = fig2(&full, &["Hello", "World"], &plan_failing(&e1[..1].to_vec()));
    assert_ne!(e1[1].0, e4[1].0, "with the stack they differ: A^8|2 and A^16|1");
}

// ---------------------------------------------------------------------------------------------------------
// Fig. 3: async. The payload makes the names independent of the schedule.

const FIG3_STRINGS: [&str; 4] = ["Hello", "World", "Foo", "Bar"];

/// All orders of `0..n`.
fn permutations(n: usize) -> Vec<Vec<usize>> {
    if n == 0 {
        return vec![vec![]];
    }
    let mut out = Vec::new();
    for rest in permutations(n - 1) {
        for pos in 0..=rest.len() {
            let mut p = rest.clone();
            p.insert(pos, n - 1);
            out.push(p);
        }
    }
    out
}

/// Fig. 3's handler under one schedule: the async blocks reach line 7 in `order`, all sharing the request's
/// scope. Returns which index each RPC (named by its payload) got.
fn fig3(inst: &Instantiation, order: &[usize]) -> BTreeMap<&'static str, Index> {
    let scope = RequestScope::root(inst.clone());
    order
        .iter()
        .map(|&i| {
            (
                FIG3_STRINGS[i],
                scope.issue(&invocation('A', FIG3_STRINGS[i], &[7])).index().clone(),
            )
        })
        .collect()
}

#[test]
fn fig3_every_schedule_gives_the_same_names_with_payload_and_not_without() {
    let schedules = permutations(FIG3_STRINGS.len());
    assert_eq!(schedules.len(), 24);

    let with_payload: BTreeSet<_> = schedules
        .iter()
        .map(|order| fig3(&Instantiation::dei(), order))
        .collect();
    assert_eq!(with_payload.len(), 1, "one assignment of names under every schedule");
    let names = with_payload.iter().next().expect("one");
    assert!(
        names.values().all(|i| i.last().map(|e| e.count) == Some(1)),
        "A(s)^7|1 for every s"
    );
    let expected = notation(
        "A(H)^7|1, A(W)^7|1, A(F)^7|1, A(B)^7|1",
        &Instantiation::dei(),
        &[("H", "Hello"), ("W", "World"), ("F", "Foo"), ("B", "Bar")],
        "",
    );
    let expected: BTreeSet<Index> = expected.into_iter().map(|(i, _)| i).collect();
    assert_eq!(names.values().cloned().collect::<BTreeSet<_>>(), expected);

    // Filibuster's instantiation: the same set of names A^7|1..4, but which RPC gets which depends on the
    // schedule: every one of the 24 schedules names the RPCs differently.
    let without: BTreeSet<_> = schedules
        .iter()
        .map(|order| fig3(&Instantiation::filibuster(), order))
        .collect();
    assert_eq!(without.len(), 24);
    let name_sets: BTreeSet<BTreeSet<Index>> = without.iter().map(|m| m.values().cloned().collect()).collect();
    assert_eq!(
        name_sets.len(),
        1,
        "the names are the same, their assignment to RPCs is not"
    );
}

#[test]
fn fig3_cloning_the_state_per_block_is_wrong() {
    // §3.3 "cloning per block": each block counts alone, and the RPCs collide as (A^7|1, A^7|1).
    let inst = Instantiation::filibuster();
    let indexes: Vec<Index> = FIG3_STRINGS
        .iter()
        .map(|s| {
            RequestScope::root(inst.clone())
                .issue(&invocation('A', s, &[7]))
                .index()
                .clone()
        })
        .collect();
    assert!(indexes.windows(2).all(|w| w[0] == w[1]));
    // sharing one scope by reference keeps them apart
    let scope = RequestScope::root(inst);
    let shared: BTreeSet<Index> = FIG3_STRINGS
        .iter()
        .map(|s| scope.issue(&invocation('A', s, &[7])).index().clone())
        .collect();
    assert_eq!(shared.len(), FIG3_STRINGS.len());
}

#[test]
fn fig3_concurrent_calls_in_flight_are_flagged_only_when_names_can_swap() {
    for (inst, ambiguous) in [(Instantiation::dei(), false), (Instantiation::filibuster(), true)] {
        let scope = RequestScope::root(inst.clone());
        let in_flight: Vec<_> = FIG3_STRINGS
            .iter()
            .map(|s| scope.issue(&invocation('A', s, &[7])))
            .collect();
        assert!(in_flight.iter().all(|i| i.is_ambiguous() == ambiguous), "{inst}");
        assert_eq!(scope.ambiguous(), if ambiguous { 4 } else { 0 });
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fig3_real_concurrent_schedules_agree_with_payload() {
    let mut seen = BTreeSet::new();
    for run in 0..16u64 {
        let scope = RequestScope::root(Instantiation::dei());
        let _guard = Context::current().with_dei_scope(scope).attach();
        let tasks: Vec<_> = FIG3_STRINGS
            .iter()
            .enumerate()
            .map(|(i, s)| {
                dei_propagator::spawn(async move {
                    // a different interleaving per run
                    for _ in 0..((run as usize * 7 + i * 3) % 5) {
                        tokio::task::yield_now().await;
                    }
                    let scope = RequestScope::current().expect("scope carried into the task");
                    (*s, scope.issue(&invocation('A', s, &[7])).index().clone())
                })
            })
            .collect();
        let mut names = BTreeMap::new();
        for t in tasks {
            let (s, i) = t.await.expect("task");
            names.insert(s, i);
        }
        seen.insert(names);
    }
    assert_eq!(seen.len(), 1);
}

// ---------------------------------------------------------------------------------------------------------
// Fig. 4: the path.

/// Fig. 4's system: A sends each string to B from line 9, retries the failed ones from line 19; B sends the
/// string on to C from line 29. Services talk through the propagator.
fn fig4(inst: &Instantiation, plan: &FaultPlan) -> Trace {
    let a = RequestScope::root(inst.clone());
    let mut trace = Trace::new();
    let b_serves = |index: &Index, s: &str, trace: &mut Trace| {
        let b = callee_scope(index, inst);
        let _ = rpc(&b, plan, &invocation('B', s, &[29]), trace);
    };
    let mut failures = Vec::new();
    for s in ["Hello", "World"] {
        match rpc(&a, plan, &invocation('A', s, &[9]), &mut trace) {
            Ok(index) => b_serves(&index, s, &mut trace),
            Err(()) => failures.push(s),
        }
    }
    for s in failures {
        if let Ok(index) = rpc(&a, plan, &invocation('A', s, &[19]), &mut trace) {
            b_serves(&index, s, &mut trace);
        }
    }
    trace
}

const FIG4_PAYLOADS: [(&str, &str); 2] = [("H", "Hello"), ("W", "World")];
const FIG4_E1: &str = "[A(H)^9|1], [A(H)^9|1 :: B(H)^29|1], [A(W)^9|1], [A(W)^9|1 :: B(W)^29|1]";
const FIG4_E2: &str = "[A(H)^9|1], [A(H)^9|1 :: B(H)^29|1], ¬[A(W)^9|1], [A(W)^19|1], [A(W)^19|1 :: B(W)^29|1]";

#[test]
fn fig4_e1_and_e2_get_exactly_the_papers_indexes() {
    let inst = Instantiation::dei();
    let e1 = notation(FIG4_E1, &inst, &FIG4_PAYLOADS, "");
    assert_eq!(fig4(&inst, &FaultPlan::default()), e1);
    let e2 = notation(FIG4_E2, &inst, &FIG4_PAYLOADS, "");
    let observed = fig4(&inst, &plan_failing(&vec![e1[2].clone()]));
    assert_eq!(observed, e2);
    // B's call to C under A(W)^9|1 (e1) and under A(W)^19|1 (e2) are different RPCs with different names
    assert_ne!(e1[3].0, observed[4].0);
    assert!(
        observed[4].0.starts_with(&observed[3].0),
        "a child's index has its parent's as prefix"
    );
}

#[test]
fn fig4_without_the_path_b_to_c_collides() {
    let inst = Instantiation::no_path();
    let e1 = fig4(&inst, &FaultPlan::default());
    let failing_second = plan_failing(&vec![e1[2].clone()]);
    let e2 = fig4(&inst, &failing_second);
    assert_eq!(e2.len(), 5);
    assert!(e2[2].1);
    // B(W)^29|1 in both executions: one name for two different RPCs
    assert_eq!(e1[3].0, e2[4].0);
    assert_eq!(notation("B(W)^29|1", &inst, &FIG4_PAYLOADS, "")[0].0, e1[3].0);
}
