//! An insertion order kept beside a map for expiry or eviction, whose entries outlive the map's: an item that
//! leaves the map early (a half that paired, a trace removed and absorbed again) leaves its entry behind until
//! the front of the order reaches it. Both stores that keep such an order (the service graph's pairing store and
//! the retained traces) compact it with [`compact`], so that it stays proportional to the map.

use std::collections::VecDeque;

/// Stale entries tolerated beyond the map's size before a compaction.
pub(crate) const SLACK: usize = 1024;

/// Keeps only the entries that `live` says still name an item of the map, once `order` holds more than twice
/// the map's `len` plus [`SLACK`]: each compaction at least halves `order`, so its cost per insertion stays
/// constant. The entries kept keep their order; spare capacity beyond four times what is left is released.
pub(crate) fn compact<T>(order: &mut VecDeque<T>, len: usize, live: impl FnMut(&T) -> bool) {
    if order.len() <= 2 * len + SLACK {
        return;
    }
    order.retain(live);
    if order.capacity() > 4 * (order.len() + SLACK) {
        order.shrink_to(2 * (order.len() + SLACK));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_entries_go_once_they_outnumber_the_live_ones_and_the_rest_keep_their_order() {
        let mut order: VecDeque<u32> = (0..2 * SLACK as u32).collect();
        let live = |v: &u32| v.is_multiple_of(100);
        // 2,048 entries for 21 live ones: more than 2 × 21 + SLACK, so compacted
        compact(&mut order, 21, live);
        assert_eq!(
            order.iter().copied().collect::<Vec<_>>(),
            (0..21).map(|i| i * 100).collect::<Vec<_>>()
        );
        // within the slack: left as it is
        let mut small: VecDeque<u32> = (0..SLACK as u32).collect();
        compact(&mut small, 0, |_| false);
        assert_eq!(small.len(), SLACK);
    }
}
