//! [`StreamRewriter`]: preliminary stream indexes rewritten to final ones (paper §4.2).

use crate::{Element, Index, MAX_DEPTH};
use std::collections::HashMap;

/// The preliminary → final index mappings of one trace (or one execution), from its streams'
/// [`StreamMessage`](super::StreamMessage)s, and the rewriting of indexes with them.
///
/// A callee serves the k-th message of a stream opened with `…r|x~` under the preliminary index `…r|(x+k)~`,
/// and every call it makes meanwhile has that prefix. The stream's client records the message's final index;
/// the mapping turns each such prefix into it. Streams opened while serving another stream's message nest:
/// indexes are rewritten innermost prefix first, and a mapping's final index may itself be rewritten by an
/// outer one.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StreamRewriter {
    mappings: HashMap<Index, Index>,
}

/// How [`StreamRewriter::rewrite`] rewrote an index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rewrite<'r> {
    /// The index with every preliminary prefix that has a mapping rewritten (the input's when none had).
    pub index: Index,
    /// True when a prefix was rewritten.
    pub rewritten: bool,
    /// True when every preliminary prefix had a mapping: the index is final (but for a stream's own
    /// preliminary element when the rewrite kept it). False when a mapping has not arrived yet (the prefixes
    /// outside it were still rewritten), or the mappings loop.
    pub complete: bool,
    /// The final index of the first (innermost) mapping applied: the stream message under which the call was
    /// served.
    pub message: Option<&'r Index>,
}

impl StreamRewriter {
    /// No mappings.
    pub fn new() -> Self {
        StreamRewriter::default()
    }

    /// Adds the mapping of one message: the preliminary index its callee served it under (`…r|(x+k)~`,
    /// [`StreamMessage::served_under`](super::StreamMessage::served_under)) and its final index. A later mapping
    /// of the same preliminary index replaces the earlier one, which is returned.
    pub fn insert(&mut self, preliminary: Index, final_index: Index) -> Option<Index> {
        self.mappings.insert(preliminary, final_index)
    }

    /// The final index of the message served under `preliminary`.
    pub fn get(&self, preliminary: &Index) -> Option<&Index> {
        self.mappings.get(preliminary.elements())
    }

    /// The number of mappings.
    pub fn len(&self) -> usize {
        self.mappings.len()
    }

    /// True when there are no mappings.
    pub fn is_empty(&self) -> bool {
        self.mappings.is_empty()
    }

    /// Removes every mapping.
    pub fn clear(&mut self) {
        self.mappings.clear();
    }

    /// Rewrites every preliminary prefix of `index` that has a mapping, innermost first. With `keep_own`, a
    /// last element that is preliminary is the stream's own index (a stream's span, not a call served under
    /// one of its messages) and is kept; without it, it is rewritten too (the index a callee served a message
    /// under, `…r|(x+k)~`, rewrites to the message's final index).
    ///
    /// Looking a prefix up allocates nothing; each rewrite makes the new index.
    pub fn rewrite(&self, index: &Index, keep_own: bool) -> Rewrite<'_> {
        let mut out = Rewrite {
            index: index.clone(),
            rewritten: false,
            complete: true,
            message: None,
        };
        if self.mappings.is_empty() && !index.is_preliminary() {
            return out;
        }
        // positions below `upto` are still to be looked at, innermost first
        let mut upto = index.depth() - usize::from(keep_own && index.opens_stream());
        // each rewrite replaces a prefix with a final index that may hold preliminary elements of its own: a
        // bounded number of rounds stops mappings that loop
        for _ in 0..=MAX_DEPTH {
            let elements = out.index.elements();
            let Some(i) = elements[..upto].iter().rposition(|e: &Element| e.preliminary) else {
                return out;
            };
            match self.mappings.get(&elements[..=i]) {
                Some(to) => {
                    out.index = to.elements().iter().chain(&elements[i + 1..]).copied().collect();
                    out.rewritten = true;
                    out.message.get_or_insert(to);
                    upto = to.depth();
                }
                None => {
                    // not arrived yet: the prefixes outside it are rewritten still
                    out.complete = false;
                    upto = i;
                }
            }
        }
        out.complete = false;
        out
    }
}
