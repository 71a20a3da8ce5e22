//! Simulated programs: services as async functions that issue their RPCs into a
//! [`RequestScope`] directly, with the fault plan applied by the simulation
//! exactly as the client instrumentation applies it (a planned index fails without calling the callee).
//!
//! They test the search without real services, and settle the corpus's details quickly
//! ([`programs`]). Call stacks are given as line numbers, innermost first, as the paper writes them
//! (`A^{3,10}` is `&[10, 3]`).

pub mod programs;

use crate::observation::Outcome;
use crate::source::Recorder;
use crate::test::TestRun;
use dei_propagator::{
    CallStack, Fault, FaultPlan, Frame, Index, Instantiation, InvocationSignature, PayloadDigest, RequestScope,
    Signature,
};
use std::collections::hash_map::DefaultHasher;
use std::fmt::Debug;
use std::future::Future;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

/// The caller side of a simulated service: its request scope, the execution's plan, and where to record.
#[derive(Clone)]
pub struct Caller {
    scope: RequestScope,
    plan: Arc<FaultPlan>,
    recorder: Recorder,
    parent: Option<usize>,
}

impl Caller {
    /// The functional test's own caller for one execution: a root scope under the run's instantiation.
    /// In a parallel search it records into the execution's own recorder ([`Recorder::for_run`]).
    pub fn root(run: &TestRun, recorder: &Recorder) -> Caller {
        Caller::with_plan(run.plan().clone(), run.instantiation().clone(), &recorder.for_run(run))
    }

    /// A root caller with an explicit plan and instantiation.
    pub fn with_plan(plan: FaultPlan, instantiation: Instantiation, recorder: &Recorder) -> Caller {
        Caller {
            scope: RequestScope::root(instantiation),
            plan: Arc::new(plan),
            recorder: recorder.clone(),
            parent: None,
        }
    }

    /// The scope RPCs issued here take their indexes from.
    pub fn scope(&self) -> &RequestScope {
        &self.scope
    }

    fn invocation(signature: &str, payload: &str, stack: &[u32]) -> InvocationSignature {
        let frames = stack.iter().map(|&line| Frame::new("model", line, 0)).collect();
        InvocationSignature::new(
            Signature::from_name(signature),
            PayloadDigest::of(payload.as_bytes()),
            CallStack::new(frames).digest(),
        )
    }

    fn callee(&self, index: Index, parent: usize) -> Caller {
        Caller {
            scope: RequestScope::enter(index, self.scope.instantiation().clone()),
            plan: self.plan.clone(),
            recorder: self.recorder.clone(),
            parent: Some(parent),
        }
    }

    /// Issues an RPC: takes its index, fails it if the plan says so, otherwise serves it with `serve`, which
    /// gets the callee's caller (a scope whose prefix is this RPC's index). The callee's error is the RPC's
    /// error.
    pub async fn call<T, F, Fut>(&self, signature: &str, payload: &str, stack: &[u32], serve: F) -> Result<T, Fault>
    where
        T: Debug,
        F: FnOnce(Caller) -> Fut,
        Fut: Future<Output = Result<T, Fault>>,
    {
        let invocation = Self::invocation(signature, payload, stack);
        let issued = self.scope.issue(&invocation);
        let index = issued.index().clone();
        let position = self.recorder.start(index.clone(), invocation, self.parent);
        if let Some(fault) = self.plan.fault_for(&index) {
            self.recorder.finish(position, Some(fault), Outcome::of_fault(fault));
            return Err(fault);
        }
        let result = serve(self.callee(index, position)).await;
        let outcome = match &result {
            Ok(v) => Outcome::Ok {
                response: Some(digest_of(v)),
            },
            Err(f) => Outcome::of_fault(*f),
        };
        self.recorder.finish(position, None, outcome);
        drop(issued);
        result
    }

    /// Opens a stream from the creation site `stack` and sends `messages` concurrently, each from the send
    /// site `send_stack` (paper §4.2, Fig. 5). The stream gets a preliminary index (empty payload, creation
    /// site); each message gets its final index from its payload and send site; the callee serves the k-th
    /// message to arrive under the preliminary index counted up by k, and the mapping is recorded for
    /// rewriting. Returns each message's result in `messages` order.
    pub async fn stream<T, F, Fut>(
        &self,
        signature: &str,
        stack: &[u32],
        send_stack: &[u32],
        messages: &[&str],
        serve: F,
    ) -> Result<Vec<Result<T, Fault>>, Fault>
    where
        T: Debug,
        F: Fn(Caller, String) -> Fut + Clone,
        Fut: Future<Output = Result<T, Fault>>,
    {
        let opening = Self::invocation(signature, "", stack);
        let pre = self.scope.issue_preliminary(&opening);
        let pre_index = pre.index().clone();
        let stream_pos = self.recorder.start(pre_index.clone(), opening, self.parent);
        if let Some(fault) = self.plan.fault_for(&pre_index) {
            self.recorder.finish(stream_pos, Some(fault), Outcome::of_fault(fault));
            return Err(fault);
        }
        let arrivals = std::sync::atomic::AtomicU32::new(0);
        let sends = messages.iter().map(|m| {
            let serve = serve.clone();
            let arrivals = &arrivals;
            let pre_index = &pre_index;
            async move {
                // messages are sent concurrently: the scheduler decides which is counted first
                tokio::task::yield_now().await;
                let invocation = Self::invocation(signature, m, send_stack);
                let issued = self.scope.issue(&invocation);
                let final_index = issued.index().clone();
                // a message needs its stream: it counts as issued under the stream's RPC
                let position = self.recorder.start(final_index.clone(), invocation, Some(stream_pos));
                if let Some(fault) = self.plan.fault_for(&final_index) {
                    self.recorder.finish(position, Some(fault), Outcome::of_fault(fault));
                    return Err(fault);
                }
                let k = arrivals.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
                self.recorder.set_message(position, k);
                let served_under = pre_index.stream_message(k);
                self.recorder.map_stream(served_under.clone(), final_index);
                let result = serve(self.callee(served_under, position), m.to_string()).await;
                let outcome = match &result {
                    Ok(v) => Outcome::Ok {
                        response: Some(digest_of(v)),
                    },
                    Err(f) => Outcome::of_fault(*f),
                };
                self.recorder.finish(position, None, outcome);
                drop(issued);
                result
            }
        });
        let results = futures::future::join_all(sends).await;
        self.recorder.finish(stream_pos, None, Outcome::ok());
        drop(pre);
        Ok(results)
    }
}

fn digest_of<T: Debug>(value: &T) -> String {
    let mut h = DefaultHasher::new();
    format!("{value:?}").hash(&mut h);
    format!("{:016x}", h.finish())
}
