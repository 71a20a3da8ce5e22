//! What one execution of a functional test showed: the RPCs it issued, their faults and outcomes.

use dei_propagator::projection::{RecordedRpc, project};
use dei_propagator::semconv::StreamRewriter;
use dei_propagator::{Fault, Index, Instantiation, InvocationSignature};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeSet, HashMap};
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
    /// On a stream message: its 1-based number on the stream (the callee served it as the k-th message),
    /// when the source knows it; tells a reader which message a fault on it hit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<u32>,
    /// The start of the request's payload as text (at most [`PAYLOAD_PREVIEW_CHARS`] characters), when the
    /// services record payloads (`dei.payload`, off by default: `DeiConfig::builder().record_payloads(true)`)
    /// and the source reads them (the in-memory source does); tells a reader which call a fault hit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload_preview: Option<String>,
}

/// How many characters of a recorded payload an [`ObservedRpc`] keeps as its preview, and the preview itself
/// (the span contract's, which `dei-collector` keeps as well).
pub use dei_propagator::semconv::{PAYLOAD_PREVIEW_CHARS, payload_preview};

fn default_true() -> bool {
    true
}

impl ObservedRpc {
    /// True when the search may plan a fault on this RPC by its index: the instrumentation can fail it
    /// ([`injectable`](ObservedRpc::injectable)), it ran under this very index (not
    /// [`rewritten`](ObservedRpc::rewritten), no unresolved preliminary prefix) and it is not the root.
    pub fn targetable(&self) -> bool {
        self.injectable && !self.rewritten && !has_unresolved_prefix(&self.index) && !self.index.is_root()
    }
}

/// True when an element before the last is preliminary: the RPC was served under a stream message whose
/// mapping to its final index is still unknown (a stream's own index ends in its only preliminary element).
pub fn has_unresolved_prefix(index: &Index) -> bool {
    let elements = index.elements();
    elements
        .split_last()
        .is_some_and(|(_, prefix)| prefix.iter().any(|e| e.preliminary))
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
    /// Spans (or stream message events, or collector occurrences) whose DEI data was malformed (a `dei.*`
    /// attribute the span contract rejects, [`dei_propagator::semconv`]): the source left the malformed values
    /// out, and skipped the span when its index was one, so RPCs or faults may be missing from this
    /// observation.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub malformed: usize,
    /// Spans and stream message events of the execution that were not recorded where the source reads them,
    /// so that their RPCs and faults are missing from this observation however long the source waits: what
    /// `dei-collector` dropped past its cap of RPCs per trace (`occurrences_dropped` in its trace view; `serve
    /// --max-trace-rpcs`), read by [`CollectorSpans`](crate::CollectorSpans). The collector counts each span
    /// of an RPC it had no room for (its client and its server span both count) and each `dei.stream.message`
    /// event of a message it had no room for, so this is not a number of RPCs. 0 from the in-memory sources,
    /// which read every span that ended.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub spans_dropped: u64,
    /// The traces the RPCs were read from (hex trace ids): where to find the execution in a trace backend
    /// or in dei-collector's web view.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub traces: BTreeSet<String>,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

fn is_zero_u64(n: &u64) -> bool {
    *n == 0
}

/// A set of (index, fault): a plan, or the faults an execution actually injected.
pub type FaultSet = BTreeSet<(Index, Fault)>;

impl Observation {
    /// Rewrites every index that starts with a preliminary stream index to its final form (paper §4.2), and
    /// sorts the RPCs by start (keeping parents consistent).
    ///
    /// Only proper prefixes are rewritten: an index that ends in a preliminary element is a stream's own. An
    /// RPC rewritten under a message whose parent is the message's stream (what span ancestry shows: the
    /// callee's server span hangs under the stream's client span) is re-parented to the message that caused it.
    /// The rewriting is the span contract's ([`StreamRewriter`]), which `dei-collector` uses too.
    pub fn finalize(&mut self) {
        let mut rewriter = StreamRewriter::new();
        // the first mapping of a preliminary index counts (a later one replaces an earlier one when inserted)
        for m in self.streams.iter().rev() {
            rewriter.insert(m.preliminary.clone(), m.final_index.clone());
        }
        if rewriter.is_empty() {
            self.sort_by_start();
            return;
        }
        // each message's position (the first RPC at its final index) and the stream it was sent on, found
        // before anything is rewritten or re-parented
        let mut message_at: HashMap<Index, usize> = HashMap::new();
        for (p, r) in self.rpcs.iter().enumerate() {
            message_at.entry(r.index.clone()).or_insert(p);
        }
        let parents: Vec<Option<usize>> = self.rpcs.iter().map(|r| r.parent).collect();
        for i in 0..self.rpcs.len() {
            let rewrite = rewriter.rewrite(&self.rpcs[i].index, true);
            if !rewrite.rewritten {
                continue;
            }
            let message = rewrite.message.and_then(|f| message_at.get(f).copied());
            let stream = message.and_then(|p| parents[p]);
            let rpc = &mut self.rpcs[i];
            if rpc.parent.is_some() && rpc.parent == stream && message != Some(i) {
                rpc.parent = message;
            }
            rpc.index = rewrite.index;
            rpc.rewritten = true;
        }
        self.sort_by_start();
    }

    /// How many RPCs still carry a preliminary prefix (their stream's mapping has not arrived yet).
    pub fn unresolved(&self) -> usize {
        self.rpcs.iter().filter(|r| has_unresolved_prefix(&r.index)).count()
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

#[cfg(test)]
mod tests {
    use super::*;
    use dei_propagator::{Element, ElementDigest};

    fn el(d: u8) -> Element {
        Element::new(ElementDigest([d; 8]), 1)
    }

    fn rpc(index: Index, parent: Option<usize>, start: u64) -> ObservedRpc {
        ObservedRpc {
            index,
            signature: String::new(),
            invocation: None,
            parent,
            fault: None,
            outcome: Outcome::ok(),
            start,
            end: start + 10,
            rewritten: false,
            injectable: true,
            reference: None,
            message: None,
            payload_preview: None,
        }
    }

    #[test]
    fn finalize_rewrites_under_messages_and_reparents_to_them() {
        let a = Index::root().child(el(1));
        let stream = a.child(el(2).preliminary());
        let message = a.child(el(3));
        // served under message 1 (mapped) and under message 2 (whose mapping never came)
        let nested = stream.stream_message(1).child(el(4));
        let orphan = stream.stream_message(2).child(el(5));
        let mut obs = Observation {
            rpcs: vec![
                rpc(a.clone(), None, 1),
                rpc(stream.clone(), Some(0), 2),
                rpc(message.clone(), Some(1), 3),
                rpc(nested, Some(1), 4),
                rpc(orphan, Some(1), 5),
            ],
            streams: vec![StreamMapping {
                preliminary: stream.stream_message(1),
                final_index: message.clone(),
            }],
            malformed: 0,
            spans_dropped: 0,
            traces: BTreeSet::new(),
        };
        obs.finalize();
        let r = &obs.rpcs;
        assert_eq!(r[1].index, stream, "a stream's own index is never rewritten");
        assert!(r[1].targetable() && r[2].targetable());
        assert_eq!(r[3].index, message.child(el(4)));
        assert_eq!(r[3].parent, Some(2), "re-parented to the message that caused it");
        assert!(r[3].rewritten && !r[3].targetable());
        assert_eq!(obs.unresolved(), 1);
        assert!(
            !r[4].rewritten && !r[4].targetable(),
            "an unresolved index is never targeted"
        );
        assert!(!r[0].index.is_root() && r[0].targetable());
        assert!(!rpc(Index::root(), None, 0).targetable());
    }
}
