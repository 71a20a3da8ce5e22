//! Per-request state: the scope that hands out indexes to every RPC issued while serving one request.
//!
//! A scope is opened when a request enters a service; its prefix is the incoming index (or the root). It holds
//! the invocation counters and is shared *by reference* by every task and thread that works for the request:
//! cloning the counters per block or per thread gives wrong indexes (paper §3.3). It rides in the
//! OpenTelemetry [`Context`](opentelemetry::Context) (see [`crate::DeiContextExt`]).

use crate::index::{Element, ElementDigest, Index};
use crate::instantiation::{Instantiation, PathMode};
use crate::invocation::InvocationSignature;
use crate::rejection::{self, Event};
use crate::wire::MAX_DEPTH;
use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

static AMBIGUOUS_TOTAL: AtomicU64 = AtomicU64::new(0);

/// How many issued indexes were found ambiguous in this process so far.
///
/// An index is ambiguous when its invocation signature was issued while another RPC with the same invocation
/// signature was still in flight in the same scope: scheduling may swap the two between runs.
pub fn ambiguous_total() -> u64 {
    AMBIGUOUS_TOTAL.load(Ordering::Relaxed)
}

/// The state shared by everything that serves one request. Cloning shares it.
///
/// ```
/// use dei_propagator::{Instantiation, InvocationSignature, PayloadDigest, RequestScope, Signature, StackDigest};
/// let scope = RequestScope::root(Instantiation::dei());
/// let echo = InvocationSignature::new(Signature::grpc_path("/B/echo"), PayloadDigest::of(b"s"), StackDigest([7; 32]));
/// let first = scope.issue(&echo);
/// let second = scope.issue(&echo);
/// assert_eq!((first.element().count, second.element().count), (1, 2));
/// assert_eq!(first.index().parent(), second.index().parent());
/// ```
#[derive(Clone)]
pub struct RequestScope {
    inner: Arc<ScopeInner>,
}

struct ScopeInner {
    prefix: Index,
    instantiation: Instantiation,
    state: Mutex<ScopeState>,
}

#[derive(Default)]
struct ScopeState {
    signatures: HashMap<ElementDigest, SignatureState>,
    history: Vec<Element>,
    issued: u64,
    ambiguous: u64,
}

/// What a scope knows about one invocation signature (element digest). Kept for the scope's lifetime when the
/// instantiation counts; otherwise only while an RPC with it is in flight.
#[derive(Default)]
struct SignatureState {
    /// How many indexes were issued for it: each issue's sequence number, and the invocation counter (`c`,
    /// saturating at `u32::MAX`, where each issue is ambiguous and counted) when the instantiation counts.
    issued: u64,
    /// Issued and not yet dropped: in flight.
    live: u32,
    /// The RPC in flight is alone and not (yet) ambiguous. At most one can be: an issue while another is in
    /// flight makes every RPC in flight ambiguous. Read only while `live > 0`: the issue that finds `live == 0`
    /// sets it, so nothing needs to clear it when that RPC completes.
    lone_unflagged: bool,
    /// For a stream's preliminary signature: the highest count under which a callee serves a message of a
    /// stream opened with it, from message 2 on (`x + k`, k ≥ 2). A later stream opened with a count below it
    /// has its message 1 served where an earlier stream's message was (paper §4.2 counts messages implicitly).
    served_to: u32,
}

impl RequestScope {
    /// A scope for a request that arrived with `prefix` as its index.
    pub fn enter(prefix: Index, instantiation: Instantiation) -> Self {
        RequestScope {
            inner: Arc::new(ScopeInner {
                prefix,
                instantiation,
                state: Mutex::new(ScopeState::default()),
            }),
        }
    }

    /// A scope at the root: the entry point of the system, such as a functional test.
    pub fn root(instantiation: Instantiation) -> Self {
        RequestScope::enter(Index::root(), instantiation)
    }

    /// The scope in the current OpenTelemetry context, if any.
    pub fn current() -> Option<RequestScope> {
        use crate::context::DeiContextExt;
        opentelemetry::Context::current().dei_scope().cloned()
    }

    /// The incoming index that every index issued here extends.
    pub fn prefix(&self) -> &Index {
        &self.inner.prefix
    }

    /// The instantiation indexes are computed under.
    pub fn instantiation(&self) -> &Instantiation {
        &self.inner.instantiation
    }

    /// How many indexes this scope has issued.
    pub fn issued(&self) -> u64 {
        self.lock().issued
    }

    /// How many of them were ambiguous when issued.
    pub fn ambiguous(&self) -> u64 {
        self.lock().ambiguous
    }

    /// True when both handles share one state.
    pub fn same_scope(&self, other: &RequestScope) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    fn lock(&self) -> MutexGuard<'_, ScopeState> {
        // A panic while holding the lock cannot leave the counters inconsistent (each update is one
        // statement), so a poisoned lock is used as it is.
        self.inner.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes the next index for an RPC with this invocation signature: one call, correct under contention.
    ///
    /// Keep the returned [`IssuedIndex`] alive until the RPC completes: while it lives, another issue of the
    /// same invocation signature in this scope is flagged ambiguous, and so is this one.
    ///
    /// An index never has more than [`MAX_DEPTH`] (64) elements, the default limit of every
    /// decoder: a receiver would reject a deeper one and serve the request as a new root, silently splitting
    /// the trace's indexes. At the limit the index is not extended: the RPC carries its first 64 elements
    /// (with a path, the scope's own 64-element prefix), [`IssuedIndex::depth_limited`] says so, and the event
    /// is counted ([`Event::DepthLimited`]). Such an index names the
    /// caller, not this RPC, so no fault plan entry applies to it.
    ///
    /// A count has no value past 4294967295 (`u32::MAX`, the wire's largest): the 4294967296th issue of one
    /// invocation signature in one scope, and every later one, takes count 4294967295, the index of the
    /// 4294967295th. Each of them is ambiguous ([`IssuedIndex::is_ambiguous`]; the 4294967295th too, when it is
    /// still in flight) and counted ([`Event::CountSaturated`]).
    ///
    /// ```
    /// use dei_propagator::*;
    /// let deep: Index = (0..64).map(|i| Element::new(ElementDigest([i; 8]), 1)).collect();
    /// let scope = RequestScope::enter(deep.clone(), Instantiation::dei());
    /// let echo = InvocationSignature::new(Signature::grpc_path("/B/echo"), PayloadDigest::of(b"s"), StackDigest([7; 32]));
    /// let issued = scope.issue(&echo);
    /// assert!(issued.depth_limited());
    /// assert_eq!(issued.index(), &deep);
    /// ```
    pub fn issue(&self, invocation: &InvocationSignature) -> IssuedIndex {
        self.issue_element(invocation.element_digest(&self.inner.instantiation), false)
    }

    /// Takes a preliminary index for a stream (paper §4.2): `invocation` should carry the empty payload and
    /// the stream's creation site.
    ///
    /// A callee serves message k of a stream opened with count x under count x + k, so a stream opened from
    /// the same site after one that sent two or more messages would have its messages served where that
    /// stream's were: such a stream's index is ambiguous ([`IssuedIndex::is_ambiguous`]), as are streams from
    /// one site that are open at the same time. The scope learns what a stream sent from
    /// [`RequestScope::stream_message_sent`].
    ///
    /// ```
    /// use dei_propagator::{InvocationSignature, Instantiation, PayloadDigest, RequestScope, Signature, StackDigest};
    /// let scope = RequestScope::root(Instantiation::dei());
    /// let open = InvocationSignature::new(Signature::grpc_path("/s.S/Chat"), PayloadDigest::empty(), StackDigest([7; 32]));
    /// let first = scope.issue_preliminary(&open);
    /// scope.stream_message_sent(&first.element(), 1);
    /// scope.stream_message_sent(&first.element(), 2);
    /// assert!(!first.complete());
    /// // Its message 2 was served under count 3, where the next stream's message 1 would be.
    /// let second = scope.issue_preliminary(&open);
    /// assert!(second.complete());
    /// ```
    pub fn issue_preliminary(&self, invocation: &InvocationSignature) -> IssuedIndex {
        self.issue_element(invocation.element_digest(&self.inner.instantiation), true)
    }

    /// Notes that message `k` (1-based) of the stream opened with `preliminary` (an element this scope issued
    /// with [`RequestScope::issue_preliminary`]) was sent: see there.
    pub fn stream_message_sent(&self, preliminary: &Element, k: u32) {
        if k < 2 || !preliminary.preliminary || !self.inner.instantiation.count {
            return;
        }
        let mut state = self.lock();
        if let Some(signature) = state.signatures.get_mut(&preliminary.digest) {
            signature.served_to = signature.served_to.max(preliminary.count.saturating_add(k));
        }
    }

    fn issue_element(&self, digest: ElementDigest, preliminary: bool) -> IssuedIndex {
        let inst = &self.inner.instantiation;
        let mut state = self.lock();
        state.issued += 1;
        let signature = state.signatures.entry(digest).or_default();
        signature.issued += 1;
        let seq = signature.issued;
        // Past the largest count, every issue takes it: calls share that index.
        let saturated = inst.count && seq > u64::from(u32::MAX);
        let count = if inst.count {
            u32::try_from(seq).unwrap_or(u32::MAX)
        } else {
            1
        };
        // Another RPC with this signature in flight: it and this one are ambiguous (the one in flight that was
        // not yet is counted now).
        let concurrent = signature.live > 0;
        // A stream whose messages the callee would serve where an earlier stream's were: ambiguous too.
        let overlapping = preliminary && inst.count && count < signature.served_to;
        // An index an earlier call (of a stream, or past the largest count) has had.
        let shared = overlapping || saturated;
        let flagged = concurrent || shared;
        let newly_ambiguous = if concurrent {
            1 + u64::from(std::mem::take(&mut signature.lone_unflagged))
        } else {
            signature.lone_unflagged = !shared;
            u64::from(shared)
        };
        signature.live += 1;
        if newly_ambiguous > 0 {
            state.ambiguous += newly_ambiguous;
            AMBIGUOUS_TOTAL.fetch_add(newly_ambiguous, Ordering::Relaxed);
        }
        let element = Element {
            digest,
            count,
            preliminary,
        };
        let prefix = &self.inner.prefix;
        let depth = match inst.path {
            PathMode::Path => prefix.depth() + 1,
            PathMode::None => 1,
            PathMode::History => prefix.depth() + state.history.len() + 1,
        };
        let depth_limited = depth > MAX_DEPTH;
        let index = match inst.path {
            PathMode::None => std::iter::once(element).collect(),
            PathMode::Path if !depth_limited => prefix.child(element),
            PathMode::Path if prefix.depth() == MAX_DEPTH => prefix.clone(),
            // The first elements of what the index would have been (the path or the causal history).
            PathMode::Path | PathMode::History => (prefix.elements().iter())
                .chain(&state.history)
                .copied()
                .chain(std::iter::once(element))
                .take(MAX_DEPTH)
                .collect(),
        };
        if inst.path == PathMode::History && !depth_limited {
            // Only the causal-history instantiation reads it: other scopes must not grow per RPC; and past the
            // depth limit no index shows more of it.
            state.history.push(element);
        }
        drop(state);
        if saturated {
            rejection::record_event(
                Event::CountSaturated,
                &format_args!(
                    "call {seq} of one invocation signature in one request scope has no count of its own (the largest \
                     is {}): it carries that count, as every later one does, and is flagged ambiguous",
                    u32::MAX
                ),
            );
        }
        if depth_limited {
            rejection::record_event(
                Event::DepthLimited,
                &format_args!(
                    "an index of {depth} elements would exceed the limit of {MAX_DEPTH}: the call carries its first {MAX_DEPTH} elements, and no fault applies to it"
                ),
            );
        }
        IssuedIndex {
            index,
            scope: self.clone(),
            digest,
            seq,
            flagged,
            depth_limited,
            released: false,
        }
    }
}

impl fmt::Debug for RequestScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RequestScope")
            .field("prefix", &self.inner.prefix)
            .field("instantiation", &self.inner.instantiation.name)
            .finish_non_exhaustive()
    }
}

/// An index handed out for one RPC. It marks the RPC in flight until dropped.
pub struct IssuedIndex {
    index: Index,
    scope: RequestScope,
    digest: ElementDigest,
    /// Its sequence number among the issues of its signature in the scope.
    seq: u64,
    /// Another RPC with the same signature was in flight when it was issued.
    flagged: bool,
    /// The index is not this RPC's own: it was at the depth limit and could not be extended.
    depth_limited: bool,
    /// Already released by [`IssuedIndex::complete`].
    released: bool,
}

impl IssuedIndex {
    /// The RPC's index.
    pub fn index(&self) -> &Index {
        &self.index
    }

    /// The RPC's own element (the innermost one).
    pub fn element(&self) -> Element {
        self.index.last().copied().unwrap_or(Element {
            digest: self.digest,
            count: 1,
            preliminary: false,
        })
    }

    /// True when the index could not be extended because of the depth limit (see [`RequestScope::issue`]): it
    /// is not unique to this RPC, and no fault applies to it.
    pub fn depth_limited(&self) -> bool {
        self.depth_limited
    }

    /// True once another RPC with the same invocation signature was in flight in the same scope together with
    /// this one, or when its index is one another RPC had (a stream's, [`RequestScope::issue_preliminary`], or
    /// past the largest count, [`RequestScope::issue`]). Read it when the RPC completes: a later concurrent issue can still set it. It takes the scope's
    /// lock (as does this type's `Debug`); [`complete`](Self::complete) answers and releases in one.
    pub fn is_ambiguous(&self) -> bool {
        self.flagged || self.later_issue(&self.scope.lock())
    }

    /// Ends the RPC: releases its index (as dropping it does) and returns [`is_ambiguous`](Self::is_ambiguous)
    /// as of its completion, under one lock of the scope.
    pub fn complete(mut self) -> bool {
        let mut state = self.scope.lock();
        let ambiguous = self.flagged || self.later_issue(&state);
        self.release(&mut state);
        drop(state);
        self.released = true;
        ambiguous
    }

    /// Another issue of the signature after this one: it happened while this one was in flight (it still is).
    fn later_issue(&self, state: &ScopeState) -> bool {
        state.signatures.get(&self.digest).is_some_and(|s| s.issued > self.seq)
    }

    fn release(&self, state: &mut ScopeState) {
        let Some(signature) = state.signatures.get_mut(&self.digest) else {
            return;
        };
        signature.live = signature.live.saturating_sub(1);
        if signature.live == 0 && !self.scope.inner.instantiation.count {
            // Nothing to remember: a scope that does not count must not grow per distinct signature.
            state.signatures.remove(&self.digest);
        }
    }
}

impl fmt::Debug for IssuedIndex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IssuedIndex")
            .field("index", &self.index)
            .field("ambiguous", &self.is_ambiguous())
            .field("depth_limited", &self.depth_limited)
            .finish()
    }
}

impl Drop for IssuedIndex {
    fn drop(&mut self) {
        if !self.released {
            let mut state = self.scope.lock();
            self.release(&mut state);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{PayloadDigest, Signature, StackDigest};

    fn inv(payload: &[u8], stack: u8) -> InvocationSignature {
        InvocationSignature::new(
            Signature::grpc_path("/B/echo"),
            PayloadDigest::of(payload),
            StackDigest([stack; 32]),
        )
    }

    #[test]
    fn concurrent_identical_calls_are_flagged_both() {
        let scope = RequestScope::root(Instantiation::dei());
        let before = ambiguous_total();
        let a = scope.issue(&inv(b"x", 1));
        let b = scope.issue(&inv(b"x", 1));
        assert!(a.is_ambiguous() && b.is_ambiguous());
        assert_eq!(scope.ambiguous(), 2);
        assert!(ambiguous_total() >= before + 2);
        drop((a, b));
        let c = scope.issue(&inv(b"x", 1));
        assert!(!c.is_ambiguous(), "sequential identical calls are not ambiguous");
        let d = scope.issue(&inv(b"y", 1));
        assert!(!d.is_ambiguous(), "a different payload is not ambiguous");
    }

    #[test]
    fn complete_answers_and_releases_under_one_lock() {
        let scope = RequestScope::root(Instantiation::dei());
        let a = scope.issue(&inv(b"x", 1));
        let b = scope.issue(&inv(b"x", 1));
        assert!(b.complete(), "b overlapped a");
        assert!(a.is_ambiguous());
        assert!(a.complete());
        let c = scope.issue(&inv(b"x", 1));
        assert!(!c.is_ambiguous(), "a and b were released");
        assert_eq!(c.element().count, 3);
        assert!(!c.complete());
    }

    #[test]
    fn a_scope_that_does_not_count_forgets_signatures_with_nothing_in_flight() {
        let signatures = |scope: &RequestScope| scope.lock().signatures.len();
        let no_count = RequestScope::root(Instantiation::no_count());
        let counting = RequestScope::root(Instantiation::dei());
        for i in 0..10u8 {
            let issued = no_count.issue(&inv(&[i], 1));
            assert_eq!(signatures(&no_count), 1);
            if i % 2 == 0 {
                drop(issued);
            } else {
                assert!(!issued.complete());
            }
            counting.issue(&inv(&[i], 1));
        }
        assert_eq!(signatures(&no_count), 0);
        assert_eq!(signatures(&counting), 10, "counts are kept for the scope's lifetime");
    }

    /// Threads issue into one scope and their RPCs stay in flight until all have issued: every RPC whose
    /// signature another RPC shares is ambiguous, each counted once, whatever the interleaving; one alone is not.
    /// (The threads assert nothing themselves: a failure is reported here, after they are joined.)
    #[test]
    fn ambiguity_is_exact_across_threads() {
        let scope = RequestScope::root(Instantiation::dei());
        let (threads, shared_per_thread) = (4u8, 25);
        let issued: Vec<(IssuedIndex, Vec<IssuedIndex>)> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads)
                .map(|t| {
                    let scope = &scope;
                    s.spawn(move || {
                        let alone = scope.issue(&inv(&[b'a', t], 1));
                        let shared = (0..shared_per_thread)
                            .map(|_| scope.issue(&inv(b"shared", 1)))
                            .collect();
                        (alone, shared)
                    })
                })
                .collect();
            handles.into_iter().filter_map(|h| h.join().ok()).collect()
        });
        assert_eq!(issued.len(), usize::from(threads));
        for (alone, shared) in &issued {
            assert!(!alone.is_ambiguous(), "a thread's own call overlapped nothing");
            assert!(shared.iter().all(IssuedIndex::is_ambiguous));
        }
        // Completed from the threads again: half through `complete`, the rest dropped.
        let answers: Vec<bool> = std::thread::scope(|s| {
            let handles: Vec<_> = (issued.into_iter())
                .map(|(alone, shared)| {
                    s.spawn(move || {
                        let mut answers = vec![alone.complete()];
                        for (i, issued) in shared.into_iter().enumerate() {
                            if i % 2 == 0 {
                                answers.push(!issued.complete());
                            }
                        }
                        answers
                    })
                })
                .collect();
            handles.into_iter().filter_map(|h| h.join().ok()).flatten().collect()
        });
        assert_eq!(answers.len(), usize::from(threads) * 14);
        assert!(
            answers.iter().all(|unexpected| !unexpected),
            "alone: not ambiguous; shared: ambiguous"
        );
        let shared_total = u64::from(threads) * shared_per_thread;
        assert_eq!(scope.ambiguous(), shared_total);
        assert_eq!(scope.issued(), shared_total + u64::from(threads));
        let after = scope.issue(&inv(b"shared", 1));
        assert!(!after.is_ambiguous(), "everything before it completed");
        assert_eq!(u64::from(after.element().count), shared_total + 1);
    }

    #[test]
    fn path_modes() {
        let prefix = Index::decode("1.AAAAAAAAAAA1").unwrap_or_default();
        let path = RequestScope::enter(prefix.clone(), Instantiation::dei());
        assert_eq!(path.issue(&inv(b"a", 1)).index().depth(), 2);
        let none = RequestScope::enter(prefix.clone(), Instantiation::no_path());
        assert_eq!(none.issue(&inv(b"a", 1)).index().depth(), 1);
        let hist = RequestScope::enter(prefix, Instantiation::three_mile_beach());
        let first = hist.issue(&inv(b"a", 1)).index().clone();
        let second = hist.issue(&inv(b"b", 2)).index().clone();
        assert_eq!(first.depth(), 2);
        assert_eq!(second.depth(), 3);
        assert!(second.starts_with(&first), "history carries every earlier element");
    }

    #[test]
    fn the_depth_limit_is_never_crossed() {
        let el = |i: usize| Element::new(ElementDigest([i as u8; 8]), 1);
        let prefix = |depth: usize| -> Index { (0..depth).map(el).collect() };
        let before = rejection::event_total(Event::DepthLimited);
        // one below the limit: extended to exactly 64
        let scope = RequestScope::enter(prefix(63), Instantiation::dei());
        let issued = scope.issue(&inv(b"a", 1));
        assert_eq!(issued.index().depth(), 64);
        assert!(!issued.depth_limited());
        // at the limit: the prefix, unchanged
        let scope = RequestScope::enter(prefix(64), Instantiation::dei());
        let issued = scope.issue(&inv(b"a", 1));
        assert_eq!(issued.index(), &prefix(64));
        assert!(issued.depth_limited());
        // deeper than the limit (raised decoding limits): its first 64 elements
        let scope = RequestScope::enter(prefix(70), Instantiation::dei());
        assert_eq!(scope.issue(&inv(b"a", 1)).index(), &prefix(64));
        // the causal history stops growing at the limit
        let hist = RequestScope::enter(prefix(60), Instantiation::three_mile_beach());
        let depths: Vec<(usize, bool)> = (0..8u8)
            .map(|i| {
                let issued = hist.issue(&inv(&[i], 1));
                (issued.index().depth(), issued.depth_limited())
            })
            .collect();
        assert_eq!(
            depths,
            [61, 62, 63, 64, 64, 64, 64, 64]
                .iter()
                .zip([false, false, false, false, true, true, true, true])
                .map(|(d, l)| (*d, l))
                .collect::<Vec<_>>()
        );
        assert_eq!(hist.lock().history.len(), 4);
        assert!(rejection::event_total(Event::DepthLimited) >= before + 6);
    }

    /// Past the largest count (4294967295) every issue of the signature takes it, so calls share that index: each
    /// is counted and flagged ambiguous, once. (The scope's counter starts near the largest count here.)
    #[test]
    fn a_count_past_the_largest_is_counted_and_ambiguous() {
        let scope = RequestScope::root(Instantiation::dei());
        let call = inv(b"x", 1);
        let start_near_the_largest = |scope: &RequestScope, issued: u64| {
            let digest = call.element_digest(scope.instantiation());
            scope.lock().signatures.entry(digest).or_default().issued = issued;
        };
        start_near_the_largest(&scope, u64::from(u32::MAX) - 2);
        let saturated = || rejection::event_total(Event::CountSaturated);
        let before = saturated();
        let below = scope.issue(&call);
        assert_eq!(below.element().count, u32::MAX - 1);
        assert!(!below.complete());
        let largest = scope.issue(&call);
        assert_eq!(largest.element().count, u32::MAX);
        let largest_index = largest.index().clone();
        assert!(!largest.complete(), "its own count, alone in flight");
        assert_eq!((saturated(), scope.ambiguous()), (before, 0));
        for _ in 0..2 {
            let past = scope.issue(&call);
            assert_eq!(past.index(), &largest_index, "the largest count again");
            assert!(past.complete(), "ambiguous: its index is an earlier call's");
        }
        assert_eq!(saturated() - before, 2, "counted, each");
        assert_eq!(scope.ambiguous(), 2);
        // in flight together as well: each counted ambiguous once
        let (a, b) = (scope.issue(&call), scope.issue(&call));
        assert!(a.is_ambiguous() && b.is_ambiguous());
        assert_eq!((saturated() - before, scope.ambiguous()), (4, 4));
        drop((a, b));
        // a scope that does not count sends 1 every time: nothing saturates
        let no_count = RequestScope::root(Instantiation::no_count());
        let held = no_count.issue(&call);
        start_near_the_largest(&no_count, u64::from(u32::MAX) + 5);
        let other = no_count.issue(&call);
        assert_eq!(other.element().count, 1);
        drop(held);
        assert!(other.complete(), "concurrent, not saturated");
        assert_eq!(saturated() - before, 4);
    }

    #[test]
    fn no_count_always_one() {
        let scope = RequestScope::root(Instantiation::no_count());
        let a = scope.issue(&inv(b"a", 1)).index().clone();
        let b = scope.issue(&inv(b"a", 1)).index().clone();
        assert_eq!(a, b);
    }
}
