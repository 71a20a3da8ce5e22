//! Instantiations: which components of an invocation make up an index (paper §3.5 and §6).
//!
//! An instantiation is data, not a code path: one struct says whether the payload, the call stack, the
//! invocation count and the path count. The signature always does. The named presets cover the full DEI, the
//! schemes of Filibuster and 3MileBeach, signature-only identification and the ablations of the paper's
//! Table 1.

use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::fmt;

/// How an element is chained to what came before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PathMode {
    /// The index of the RPC being served is the prefix (paper definition 4).
    Path,
    /// No prefix: the index is the element alone.
    None,
    /// The causal history (3MileBeach): the incoming index followed by every element issued earlier in the
    /// same scope, in issue order.
    History,
}

/// Which components of an invocation count towards its index.
///
/// ```
/// use dei_propagator::Instantiation;
/// let full = Instantiation::dei();
/// assert!(full.payload && full.stack && full.count);
/// assert_eq!(Instantiation::by_name("filibuster"), Some(Instantiation::filibuster()));
/// assert!(!Instantiation::filibuster().payload);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Instantiation {
    /// The name recorded in `dei.instantiation`.
    pub name: Cow<'static, str>,
    /// The invocation payload is part of the invocation signature.
    pub payload: bool,
    /// The call stack is part of the invocation signature.
    pub stack: bool,
    /// The invocation count distinguishes repeated invocation signatures (otherwise every count is 1).
    pub count: bool,
    /// How elements are chained.
    pub path: PathMode,
}

const fn preset(name: &'static str, payload: bool, stack: bool, count: bool, path: PathMode) -> Instantiation {
    Instantiation {
        name: Cow::Borrowed(name),
        payload,
        stack,
        count,
        path,
    }
}

impl Instantiation {
    /// The full distributed execution index: signature, payload, stack, count and path.
    pub const fn dei() -> Self {
        preset("dei", true, true, true, PathMode::Path)
    }
    /// Filibuster's scheme: the full index without the payload.
    pub const fn filibuster() -> Self {
        preset("filibuster", false, true, true, PathMode::Path)
    }
    /// 3MileBeach's scheme: signature and count, with the causal history instead of the path.
    pub const fn three_mile_beach() -> Self {
        preset("3milebeach", false, false, true, PathMode::History)
    }
    /// The signature alone (the strawman of the paper's Fig. 1).
    pub const fn signature_only() -> Self {
        preset("signature", false, false, false, PathMode::None)
    }
    /// Table 1 ablation "No IC": without the invocation count.
    pub const fn no_count() -> Self {
        preset("no-count", true, true, false, PathMode::Path)
    }
    /// Table 1 ablation "No Stk": without the call stack.
    pub const fn no_stack() -> Self {
        preset("no-stack", true, false, true, PathMode::Path)
    }
    /// Table 1 ablation "No IC, Stk": without count and stack.
    pub const fn no_count_no_stack() -> Self {
        preset("no-count-no-stack", true, false, false, PathMode::Path)
    }
    /// Table 1 ablation "No Path, IC & Stk": signature and payload only, no chaining.
    pub const fn no_path_count_stack() -> Self {
        preset("no-path-count-stack", true, false, false, PathMode::None)
    }
    /// The full index without the path.
    pub const fn no_path() -> Self {
        preset("no-path", true, true, true, PathMode::None)
    }

    /// Every named preset.
    pub fn presets() -> Vec<Instantiation> {
        vec![
            Self::dei(),
            Self::filibuster(),
            Self::three_mile_beach(),
            Self::signature_only(),
            Self::no_count(),
            Self::no_stack(),
            Self::no_count_no_stack(),
            Self::no_path_count_stack(),
            Self::no_path(),
        ]
    }

    /// The preset with this name.
    pub fn by_name(name: &str) -> Option<Instantiation> {
        Self::presets().into_iter().find(|p| p.name == name)
    }

    /// The components byte hashed into element digests: bit 0 payload, bit 1 stack.
    pub fn components_byte(&self) -> u8 {
        (self.payload as u8) | ((self.stack as u8) << 1)
    }

    /// True when every component this instantiation uses is also used by `finer`, so that indexes recorded
    /// under `finer` can be projected to this one.
    pub fn is_coarser_or_equal(&self, finer: &Instantiation) -> bool {
        (!self.payload || finer.payload)
            && (!self.stack || finer.stack)
            && (!self.count || finer.count)
            && (self.path != PathMode::Path || finer.path == PathMode::Path)
    }
}

impl Default for Instantiation {
    fn default() -> Self {
        Self::dei()
    }
}

impl fmt::Display for Instantiation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}
