//! A bounded interner: equal values share one `Arc`, so a trace store at its limit holds each distinct
//! status or stack digest once, not once per occurrence.
//!
//! Bounded by entry count. When full, entries no one else holds are dropped; if most are still held, new
//! values are not interned (each keeps its own `Arc`) until as many more values as its capacity have come.

use std::collections::HashSet;
use std::hash::Hash;
use std::sync::Arc;

/// Shares equal values through one `Arc`, for at most `capacity` distinct values at a time.
#[derive(Debug)]
pub struct Interner<T: Hash + Eq> {
    set: HashSet<Arc<T>>,
    capacity: usize,
    /// Values still to come before the next attempt to make room, once a prune freed too little.
    cooldown: usize,
}

impl<T: Hash + Eq> Interner<T> {
    /// An empty interner for at most `capacity` distinct values.
    pub fn new(capacity: usize) -> Self {
        Interner {
            set: HashSet::new(),
            capacity: capacity.max(1),
            cooldown: 0,
        }
    }

    /// Distinct values held now.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.set.len()
    }

    /// The shared `Arc` of a value equal to `value`, or a new one (interned while there is room).
    pub fn intern(&mut self, value: T) -> Arc<T> {
        if let Some(shared) = self.set.get(&value) {
            return shared.clone();
        }
        let value = Arc::new(value);
        if self.set.len() >= self.capacity {
            if self.cooldown > 0 {
                self.cooldown -= 1;
                return value;
            }
            self.set.retain(|v| Arc::strong_count(v) > 1);
            if self.set.len() >= self.capacity * 3 / 4 {
                self.cooldown = self.capacity;
            }
            if self.set.len() >= self.capacity {
                return value;
            }
        }
        self.set.insert(value.clone());
        value
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_values_share_one_arc() {
        let mut i = Interner::new(8);
        let a = i.intern(String::from("ok"));
        let b = i.intern(String::from("ok"));
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(i.len(), 1);
    }

    #[test]
    fn a_full_interner_drops_values_no_one_holds() {
        let mut i = Interner::new(2);
        let kept = i.intern(1);
        drop(i.intern(2));
        assert_eq!(i.len(), 2);
        let three = i.intern(3);
        assert_eq!(i.len(), 2, "2 was dropped to make room for 3");
        assert!(Arc::ptr_eq(&kept, &i.intern(1)));
        assert!(Arc::ptr_eq(&three, &i.intern(3)));
    }

    #[test]
    fn a_full_interner_of_held_values_stays_bounded() {
        let mut i = Interner::new(4);
        let held: Vec<Arc<u32>> = (0..100).map(|v| i.intern(v)).collect();
        assert_eq!(i.len(), 4);
        assert!(Arc::ptr_eq(&held[2], &i.intern(2)));
        assert!(
            !Arc::ptr_eq(&held[50], &i.intern(50)),
            "past capacity, values are not interned"
        );
    }
}
