//! The readable call stacks seen so far, by stack digest.
//!
//! Instrumentation records a stack's readable frames (`dei.stack`) once per distinct digest per process and
//! only the digest (`dei.stack.digest`) on every other span, so a node whose own spans carry only the digest
//! finds its frames here. Bounded: past [`StackFrames::capacity`] distinct digests, new ones are counted
//! (`dei_collector_stacks_over_limit_total`) and not kept.

use crate::counters::Counters;
use dei_propagator::StackDigest;
use std::collections::HashMap;
use std::sync::Arc;

/// The default number of distinct stacks kept.
pub const DEFAULT_MAX_STACKS: usize = 20_000;

/// Readable frames by stack digest.
#[derive(Debug)]
pub struct StackFrames {
    frames: HashMap<StackDigest, Arc<[String]>>,
    /// The digests in the order they came (stacks are never removed), for [`StackFrames::added_since`].
    order: Vec<StackDigest>,
    capacity: usize,
}

impl StackFrames {
    /// An empty dictionary that keeps at most `capacity` stacks.
    pub fn new(capacity: usize) -> Self {
        StackFrames {
            frames: HashMap::new(),
            order: Vec::new(),
            capacity,
        }
    }

    /// The most stacks kept.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Stacks kept now.
    pub fn len(&self) -> usize {
        self.frames.len()
    }

    /// True when no stack is kept.
    pub fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }

    /// Keeps `frames` under `digest` unless the digest is known (the first frames win) or the dictionary is
    /// full (counted).
    pub fn insert(&mut self, digest: StackDigest, frames: &[String], counters: &Counters) {
        if self.frames.contains_key(&digest) {
            return;
        }
        if self.frames.len() >= self.capacity {
            Counters::add(&counters.stacks_over_limit, 1);
            return;
        }
        self.frames.insert(digest, frames.into());
        self.order.push(digest);
    }

    /// The stacks added after the first `count` (the dictionary's [`StackFrames::len`] at an earlier time).
    pub fn added_since(&self, count: usize) -> impl Iterator<Item = (&StackDigest, &[String])> + '_ {
        self.order
            .get(count..)
            .unwrap_or_default()
            .iter()
            .filter_map(|d| Some((d, &**self.frames.get(d)?)))
    }

    /// Every digest with its frames.
    pub fn entries(&self) -> impl Iterator<Item = (&StackDigest, &[String])> + '_ {
        self.frames.iter().map(|(d, f)| (d, &**f))
    }

    /// The frames of `digest`, if a span carried them.
    pub fn get(&self, digest: &StackDigest) -> Option<&[String]> {
        self.frames.get(digest).map(|f| &f[..])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_frames_win_and_the_limit_is_counted() {
        let counters = Counters::default();
        let mut s = StackFrames::new(1);
        let (a, b) = (StackDigest([1; 32]), StackDigest([2; 32]));
        s.insert(a, &["src/a.rs:1:1".into()], &counters);
        s.insert(a, &["other".into()], &counters);
        s.insert(b, &["src/b.rs:1:1".into()], &counters);
        assert_eq!(s.get(&a), Some(&["src/a.rs:1:1".to_string()][..]));
        assert_eq!(s.get(&b), None);
        assert_eq!(counters.snapshot().stacks_over_limit, 1);
    }
}
