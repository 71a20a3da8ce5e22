//! Values kept for the life of the process, at most a fixed number of them.
//!
//! What every call records again and again (a method's names, a stack digest's hex form) is made once and
//! leaked, so that a call copies a `&'static` instead of touching a reference count that other threads (the
//! other side of the call, the exporter that drops a span's attributes) touch too. The bound keeps a peer or a
//! program with unboundedly many distinct values from growing the process's memory: past it, callers make
//! their value as they did before, and the first time that happens is logged (a peer that sends many
//! distinct method paths fills the table for the life of the process, and every later method costs more).

use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

/// At most `max` leaked values, by key.
#[derive(Debug)]
pub(crate) struct Interned<K, V: ?Sized + 'static> {
    values: Mutex<HashMap<K, &'static V>>,
    max: usize,
    /// What the values are, for the log.
    what: &'static str,
    /// The set has been full once (logged).
    full: AtomicBool,
}

impl<K: Hash + Eq, V: ?Sized> Interned<K, V> {
    /// An empty set that keeps at most `max` values of `what` (named in the log when it is full).
    pub(crate) fn new(max: usize, what: &'static str) -> Self {
        Interned {
            values: Mutex::default(),
            max,
            what,
            full: AtomicBool::new(false),
        }
    }

    /// The value under `key`: the one kept, or else the one `make` builds (with the key it is kept under),
    /// leaked on purpose and kept; `None` once `max` are kept.
    pub(crate) fn get_or_make<Q>(&self, key: &Q, make: impl FnOnce() -> (K, Box<V>)) -> Option<&'static V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let mut values = self.values.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(value) = values.get(key) {
            return Some(*value);
        }
        if values.len() >= self.max {
            drop(values);
            if !self.full.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    max = self.max,
                    "dei: the process keeps at most {} {}: the table is full, and {} first seen from now on are \
                     made on every call (slower; nothing else changes). Many distinct ones may come from a \
                     peer sending made-up values.",
                    self.max,
                    self.what,
                    self.what
                );
            }
            return None;
        }
        let (key, value) = make();
        let value: &'static V = Box::leak(value);
        values.insert(key, value);
        Some(value)
    }

    /// Whether the set has been full (and said so in the log).
    #[cfg(test)]
    pub(crate) fn was_full(&self) -> bool {
        self.full.load(Ordering::Relaxed)
    }

    /// How many values are kept.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.values.lock().map_or(0, |v| v.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_value_per_key_and_at_most_max() {
        let interned: Interned<u32, str> = Interned::new(2, "numbers");
        let a = interned.get_or_make(&1, || (1, "one".into())).expect("room");
        let again = interned.get_or_make(&1, || unreachable!("kept already")).expect("kept");
        assert!(std::ptr::eq(a, again));
        assert_eq!(interned.get_or_make(&2, || (2, "two".into())), Some("two"));
        assert!(!interned.was_full());
        assert_eq!(interned.get_or_make(&3, || (3, "three".into())), None, "full");
        assert!(interned.was_full(), "logged once");
        assert_eq!(interned.len(), 2);
        assert_eq!(interned.get_or_make(&2, || unreachable!()), Some("two"), "still there");
    }
}
