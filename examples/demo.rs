//! Walks the five executions of the paper's Fig. 2 (a loop with a fallback) and prints the index of every RPC.
//!
//! Service A calls B's `echo` once per string in a loop (line 8); on the first failure it breaks and calls
//! `echo("Hello World")` from line 16. Each execution fails a different set of RPCs, named by their indexes
//! from earlier executions, exactly as an exhaustive search would. Run with `cargo run --example demo`.

use dei_propagator::{
    CallStack, Fault, FaultPlan, Frame, Index, Instantiation, InvocationSignature, PayloadDigest, RequestScope, Signature,
};

/// One RPC as the paper writes it: its source line, its count, whether it failed, and its index.
struct Rpc {
    line: u32,
    count: u32,
    failed: bool,
    index: Index,
}

/// Service A's `helloworld` from Fig. 2, issuing its RPCs into a scope and failing the planned ones.
fn helloworld(ss: &[&str], plan: &FaultPlan, instantiation: &Instantiation) -> Vec<Rpc> {
    let scope = RequestScope::root(instantiation.clone());
    let mut rpcs = Vec::new();
    let mut rpc = |line: u32, payload: &str| -> bool {
        let stack = CallStack::new(vec![Frame::new("fig2.py", line, 0).with_function("service_a_helloworld")]);
        let invocation =
            InvocationSignature::new(Signature::grpc_path("/B/echo"), PayloadDigest::of(payload.as_bytes()), stack.digest());
        let issued = scope.issue(&invocation);
        let failed = plan.fault_for(issued.index()).is_some();
        rpcs.push(Rpc { line, count: issued.element().count, failed, index: issued.index().clone() });
        !failed
    };
    let mut failure = false;
    for s in ss {
        if !rpc(8, s) {
            failure = true;
            break;
        }
    }
    if failure {
        rpc(16, "Hello World");
    }
    rpcs
}

fn walk(instantiation: &Instantiation) {
    let input = ["Hello", "World"];
    let show = |name: &str, rpcs: &[Rpc]| {
        let paper: Vec<String> = rpcs
            .iter()
            .map(|r| format!("{}A^{}|{}", if r.failed { "¬" } else { "" }, r.line, r.count))
            .collect();
        let wire: Vec<String> = rpcs.iter().map(|r| r.index.to_string()).collect();
        println!("  {name}: {:<36} dei: {}", format!("({})", paper.join(", ")), wire.join("  "));
    };
    let fail = |targets: Vec<Index>| FaultPlan::new(targets.into_iter().map(|i| (i, Fault::UNAVAILABLE)).collect());

    let e1 = helloworld(&input, &FaultPlan::default(), instantiation);
    show("e1", &e1);
    let (loop_1, loop_2) = (e1[0].index.clone(), e1[1].index.clone());
    let e2 = helloworld(&input, &fail(vec![loop_2.clone()]), instantiation);
    show("e2", &e2);
    let e3 = helloworld(&input, &fail(vec![loop_2, e2[2].index.clone()]), instantiation);
    show("e3", &e3);
    let e4 = helloworld(&input, &fail(vec![loop_1.clone()]), instantiation);
    show("e4", &e4);
    let e5 = helloworld(&input, &fail(vec![loop_1, e4[1].index.clone()]), instantiation);
    show("e5", &e5);
}

fn main() {
    println!("Fig. 2, the executions of paper section 3.2 (signature + call stack + count: `filibuster`):");
    walk(&Instantiation::filibuster());
    println!();
    println!("The same under the full DEI (the payload counts too, so the iterations differ by payload):");
    walk(&Instantiation::dei());
    println!();
    println!("Each index is `1` (the wire version) then one `.`-separated element per hop: an 11-character digest");
    println!("of the invocation signature and its count. See docs/wire-format.md.");
}
