//! Projecting indexes recorded under one instantiation to a coarser one (paper §6).
//!
//! Spans carry each RPC's components (signature, payload digest, stack digest) and its parent, so analysis can
//! ask what another tool would have seen — Filibuster's scheme, 3MileBeach's, signature-only — without
//! running the system again: replay the recorded RPCs, in issue order, through scopes of the coarser
//! instantiation.

use crate::index::Index;
use crate::instantiation::Instantiation;
use crate::invocation::InvocationSignature;
use crate::scope::RequestScope;
use std::collections::HashMap;

/// One recorded RPC.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordedRpc {
    /// Position (in the same slice) of the RPC whose serving issued this one; `None` for the entry point.
    /// A parent that is not earlier in the slice is treated as `None`.
    pub parent: Option<usize>,
    /// The RPC's invocation signature.
    pub invocation: InvocationSignature,
}

/// The index each RPC gets under `instantiation`. `rpcs` must be in issue order.
///
/// ```
/// use dei_propagator::projection::{project, RecordedRpc};
/// use dei_propagator::{Instantiation, InvocationSignature, PayloadDigest, Signature, StackDigest};
/// let call = |payload: &[u8]| InvocationSignature::new(
///     Signature::grpc_path("/B/echo"), PayloadDigest::of(payload), StackDigest([1; 32]));
/// let rpcs = vec![
///     RecordedRpc { parent: None, invocation: call(b"Hello") },
///     RecordedRpc { parent: None, invocation: call(b"World") },
/// ];
/// let full = project(&rpcs, &Instantiation::dei());
/// let filibuster = project(&rpcs, &Instantiation::filibuster());
/// assert_eq!(full.iter().map(|i| i.last().unwrap().count).collect::<Vec<_>>(), [1, 1]);
/// assert_eq!(filibuster.iter().map(|i| i.last().unwrap().count).collect::<Vec<_>>(), [1, 2]);
/// ```
pub fn project(rpcs: &[RecordedRpc], instantiation: &Instantiation) -> Vec<Index> {
    let mut scopes: HashMap<Option<usize>, RequestScope> = HashMap::new();
    let mut out: Vec<Index> = Vec::with_capacity(rpcs.len());
    for (i, rpc) in rpcs.iter().enumerate() {
        let parent = rpc.parent.filter(|&p| p < i);
        let scope = scopes.entry(parent).or_insert_with(|| {
            let prefix = parent.map_or_else(Index::root, |p| out[p].clone());
            RequestScope::enter(prefix, instantiation.clone())
        });
        out.push(scope.issue(&rpc.invocation).index().clone());
    }
    out
}
