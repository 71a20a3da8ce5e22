//! The analyses as the API sends them (`/api/v1/analyses…`).

use super::NamedIndex;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// Every analysis in one document (`GET /api/v1/analyses`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// Retained traces the per-trace analyses looked at.
    pub traces_analyzed: usize,
    /// Circuit-breaker episodes.
    pub circuit_breakers: Vec<Episode>,
    /// Repeated calls.
    pub repeated_calls: Vec<RepeatedCall>,
    /// Chained calls.
    pub chained_calls: Vec<ChainedCall>,
    /// Ambiguous indexes.
    pub ambiguous: Vec<AmbiguousIndex>,
    /// Projections to coarser instantiations.
    pub projections: Vec<Projection>,
}

/// Whether a circuit breaker closed again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EpisodeState {
    /// The index came back in a later trace.
    Reclosed,
    /// Not seen again in the retained traces.
    Open,
}

/// Where a repeated call repeats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RepeatScope {
    /// Under one parent index.
    SameParent,
    /// On several layers of one request.
    AcrossLayers,
}

/// How sure a chained-call finding is (see `analysis::chained_call`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Confidence {
    /// The second call's input varies with the first's output.
    DataDependent,
    /// Only the order is known.
    SequentialOnly,
}

/// One opened (and maybe re-closed) breaker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Episode {
    /// The index faults were injected on.
    #[serde(flatten)]
    pub node: NamedIndex,
    /// Traces with a fault on it before it vanished.
    pub fault_traces: usize,
    /// The faults injected.
    pub faults: BTreeSet<String>,
    /// The last trace with a fault before it vanished.
    pub last_fault_trace: String,
    /// Consecutive comparable traces without the index (or anything under it).
    pub absent_traces: usize,
    /// First trace without it.
    pub first_absent_trace: String,
    /// The trace where it came back, if it did.
    pub reclosed_trace: Option<String>,
    /// `reclosed` or `open` (not seen again in the retained traces).
    pub state: EpisodeState,
    /// Nodes of its subtree in the prefix tree (what vanished with it).
    pub subtree_size: usize,
}

/// One repeated call pattern, aggregated over traces.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RepeatedCall {
    /// `same_parent` or `across_layers`.
    pub scope: RepeatScope,
    /// The repeated call's signature.
    pub signature: Arc<str>,
    /// Its payload digest (hex).
    pub payload_digest: String,
    /// For `same_parent`: the parent index; for `across_layers`: `None`.
    pub parent: Option<NamedIndex>,
    /// Services that issued the calls.
    pub callers: BTreeSet<Arc<str>>,
    /// Traces where the pattern occurred.
    pub traces: u64,
    /// Most calls in one trace.
    pub max_calls_in_one_trace: u64,
    /// Calls in total over those traces.
    pub total_calls: u64,
    /// One trace that shows it.
    pub example_trace: String,
}

/// One chained-call pair, aggregated over traces.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChainedCall {
    /// The caller scope (parent index).
    pub parent: NamedIndex,
    /// The calling service.
    pub caller: Option<Arc<str>>,
    /// The service called twice.
    pub service: Arc<str>,
    /// The first call's signature.
    pub first: Arc<str>,
    /// The second call's signature.
    pub second: Arc<str>,
    /// Traces with the sequence.
    pub traces: u64,
    /// Distinct payloads of the first call.
    pub distinct_first_inputs: usize,
    /// Distinct payloads of the second call.
    pub distinct_second_inputs: usize,
    /// `data_dependent` or `sequential_only` (see the module docs).
    pub confidence: Confidence,
    /// Median gap between the first's end and the second's start, milliseconds.
    pub median_gap_ms: f64,
    /// One trace that shows it.
    pub example_trace: String,
}

/// One ambiguous index.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AmbiguousIndex {
    /// The index.
    #[serde(flatten)]
    pub node: NamedIndex,
    /// Spans that carried `dei.ambiguous = true`.
    pub flagged_by_instrumentation: u64,
    /// Occurrences that shared the index with another occurrence of the same trace.
    pub collisions_in_trace: u64,
    /// Occurrences in total.
    pub seen: u64,
    /// Calling services.
    pub client_services: BTreeMap<Arc<str>, u64>,
}

/// One projected name that several distinct RPCs of one execution share.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Collapse {
    /// The index under the coarser instantiation.
    pub projected: String,
    /// The distinct full indexes that collapsed into it (up to 16).
    pub full: Vec<NamedIndex>,
    /// Most distinct RPCs sharing it in one trace.
    pub max_in_one_trace: usize,
    /// Traces where it happened.
    pub traces: u64,
    /// One such trace.
    pub example_trace: String,
}

/// A projection of the retained traces.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Projection {
    /// The target instantiation.
    pub instantiation: String,
    /// RPC occurrences replayed.
    pub rpcs: u64,
    /// Distinct full indexes.
    pub distinct_full: usize,
    /// Distinct projected indexes.
    pub distinct_projected: usize,
    /// Occurrences that lacked a payload or stack digest.
    pub missing_components: u64,
    /// Replaying under the full `dei` instantiation reproduced the recorded index (instrumentation check).
    pub reproduced_recorded: u64,
    /// Names shared by distinct RPCs within one trace, largest first (up to `limit`).
    pub collapses: Vec<Collapse>,
    /// How many names were shared in total.
    pub collapsed_names: usize,
    /// Names that denote different RPCs in different traces (e.g. concurrent calls told apart only by
    /// payload get their counts in scheduling order): a fault injected by that name hits a different RPC
    /// from one run to the next. Largest first (up to `limit`).
    pub unstable: Vec<UnstableName>,
    /// How many names were unstable in total.
    pub unstable_names: usize,
}

/// A projected name that stood for different full indexes in different traces.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UnstableName {
    /// The index under the coarser instantiation.
    pub projected: String,
    /// The distinct full indexes it stood for (up to 16).
    pub full: Vec<NamedIndex>,
    /// How many distinct full indexes (counted up to 64).
    pub distinct_full: usize,
}

macro_rules! labels {
    ($($ty:ident { $($variant:ident => $label:literal),* })*) => {$(
        impl $ty {
            /// The name the JSON gives it.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($ty::$variant => $label,)*
                }
            }
        }

        impl std::fmt::Display for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    )*};
}

labels! {
    EpisodeState { Reclosed => "reclosed", Open => "open" }
    RepeatScope { SameParent => "same_parent", AcrossLayers => "across_layers" }
    Confidence { DataDependent => "data_dependent", SequentialOnly => "sequential_only" }
}
