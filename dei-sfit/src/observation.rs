//! What one execution of a functional test showed: the RPCs it issued, their faults and outcomes.

use dei_propagator::projection::{RecordedRpc, project};
use dei_propagator::{Fault, Index, Instantiation, InvocationSignature};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::fmt;

/// How an RPC ended, as its caller saw it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Outcome {
    /// It succeeded; `response` is a digest of the response when the source records one.
    Ok {
        /// Digest of the response, if known.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        response: Option<String>,
    },
    /// It failed with this code (a fault's wire form such as `g14`, `h503`, `c`, or a status seen on the wire).
    Err {
        /// The failure code.
        code: String,
    },
    /// The source saw the RPC start but not end.
    Unknown,
}

impl Outcome {
    /// Success without a response digest.
    pub fn ok() -> Self {
        Outcome::Ok { response: None }
    }

    /// The failure a fault produces.
    pub fn of_fault(fault: Fault) -> Self {
        Outcome::Err {
            code: fault.to_string(),
        }
    }

    /// True for [`Outcome::Ok`].
    pub fn is_ok(&self) -> bool {
        matches!(self, Outcome::Ok { .. })
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Ok { .. } => f.write_str("ok"),
            Outcome::Err { code } => write!(f, "err {code}"),
            Outcome::Unknown => f.write_str("unknown"),
        }
    }
}

/// One RPC observed at its caller (a client span, or a message of a client stream).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObservedRpc {
    /// The index under the execution's instantiation, after stream rewriting (paper §4.2).
    pub index: Index,
    /// The readable RPC signature (`dei.signature`).
    pub signature: String,
    /// The invocation signature's components, when the source records them (needed for reference indexes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invocation: Option<InvocationSignature>,
    /// Position, in the same execution, of the RPC whose serving issued this one; `None` for the test itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<usize>,
    /// The fault injected on it, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fault: Option<Fault>,
    /// How it ended.
    pub outcome: Outcome,
    /// When it started (nanoseconds on any clock shared by the execution's RPCs).
    pub start: u64,
    /// When it ended (same clock).
    pub end: u64,
    /// The index was rewritten from a preliminary stream index: the RPC ran under a different index, so a
    /// plan cannot target it by the rewritten one.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub rewritten: bool,
    /// The instrumentation can fail this RPC by its index (false where the source cannot tell whether it was).
    #[serde(default = "default_true", skip_serializing_if = "Clone::clone")]
    pub injectable: bool,
    /// The same RPC's index under the reference instantiation (the full DEI), for judging coarser ones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference: Option<Index>,
}

fn default_true() -> bool {
    true
}

/// One stream message's preliminary index and its final index (paper §4.2).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamMapping {
    /// The prefix the callee served the message under: `…r|(x+k)~`.
    pub preliminary: Index,
    /// The message's final index.
    pub final_index: Index,
}

/// Everything a span source saw of one execution.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Observation {
    /// The RPCs, ordered by start.
    pub rpcs: Vec<ObservedRpc>,
    /// Stream messages whose preliminary indexes are to be rewritten.
    pub streams: Vec<StreamMapping>,
}

/// A set of (index, fault): a plan, or the faults an execution actually injected.
pub type FaultSet = BTreeSet<(Index, Fault)>;

impl Observation {
    /// Rewrites every index that starts with a preliminary stream index to its final form (paper §4.2), and
    /// sorts the RPCs by start (keeping parents consistent).
    pub fn finalize(&mut self) {
        // longest preliminary prefixes first, so that nested streams rewrite innermost-first
        let mut maps = self.streams.clone();
        maps.sort_by_key(|m| std::cmp::Reverse(m.preliminary.depth()));
        for rpc in &mut self.rpcs {
            for m in &maps {
                if rpc.index == m.final_index {
                    break;
                }
                if let Some(rewritten) = rpc.index.rewrite_prefix(&m.preliminary, &m.final_index) {
                    rpc.index = rewritten;
                    rpc.rewritten = true;
                    break;
                }
            }
        }
        self.sort_by_start();
    }

    fn sort_by_start(&mut self) {
        let n = self.rpcs.len();
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by_key(|&i| (self.rpcs[i].start, i));
        if order.iter().enumerate().all(|(a, &b)| a == b) {
            return;
        }
        let mut new_pos = vec![0usize; n];
        for (new, &old) in order.iter().enumerate() {
            new_pos[old] = new;
        }
        let mut sorted: Vec<ObservedRpc> = order.iter().map(|&i| self.rpcs[i].clone()).collect();
        for rpc in &mut sorted {
            rpc.parent = rpc.parent.and_then(|p| new_pos.get(p).copied());
        }
        self.rpcs = sorted;
    }

    /// Fills in each RPC's index under `reference` from the recorded invocation signatures and parents, in
    /// issue order ([`dei_propagator::projection`]). RPCs without recorded components keep `None`.
    pub fn compute_reference(&mut self, reference: &Instantiation) {
        let recorded: Option<Vec<RecordedRpc>> = self
            .rpcs
            .iter()
            .map(|r| {
                r.invocation.clone().map(|invocation| RecordedRpc {
                    parent: r.parent,
                    invocation,
                })
            })
            .collect();
        let Some(recorded) = recorded else { return };
        for (rpc, index) in self.rpcs.iter_mut().zip(project(&recorded, reference)) {
            rpc.reference = Some(index);
        }
    }

    /// The faults actually injected, by index under the execution's instantiation.
    pub fn effective(&self) -> FaultSet {
        self.rpcs
            .iter()
            .filter_map(|r| r.fault.map(|f| (r.index.clone(), f)))
            .collect()
    }

    /// The faults actually injected, by reference index (`None` when reference indexes are unknown).
    pub fn effective_reference(&self) -> Option<FaultSet> {
        let mut out = FaultSet::new();
        for r in &self.rpcs {
            if let Some(f) = r.fault {
                out.insert((r.reference.clone()?, f));
            }
        }
        Some(out)
    }

    /// True when the RPC at `descendant` was issued, directly or not, while serving the RPC at `ancestor`.
    pub fn is_descendant(&self, descendant: usize, ancestor: usize) -> bool {
        let mut cur = self.rpcs.get(descendant).and_then(|r| r.parent);
        let mut steps = 0;
        while let Some(p) = cur {
            if p == ancestor {
                return true;
            }
            steps += 1;
            if steps > self.rpcs.len() {
                return false;
            }
            cur = self.rpcs.get(p).and_then(|r| r.parent);
        }
        false
    }
}

/// Formats a fault set as `index:fault` entries.
pub fn describe_set(set: &FaultSet) -> String {
    if set.is_empty() {
        return "{}".to_string();
    }
    let parts: Vec<String> = set.iter().map(|(i, f)| format!("{i}:{f}")).collect();
    format!("{{{}}}", parts.join(", "))
}
