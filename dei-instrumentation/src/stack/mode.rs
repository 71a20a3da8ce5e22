//! What the binary offers for stack capture, detected once at start-up.
//!
//! | mode | when | frames are keyed by | fallback it implies |
//! |---|---|---|---|
//! | [`LineTables`](StackMode::LineTables) | line tables present (`debug = "line-tables-only"` or more) | workspace-relative `file:line:column` | none: the full DEI |
//! | [`SymbolsOnly`](StackMode::SymbolsOnly) | symbol names but no line tables (default release profile) | the function name, line and column 0 | call sites in one function are not told apart; inlining may merge functions |
//! | [`Stripped`](StackMode::Stripped) | no symbols (`strip = true`) | nothing: only a `#[track_caller]` call site, if any | the stack component is empty: indexes rest on signature, payload and count |
//! | [`CallSiteOnly`](StackMode::CallSiteOnly) | chosen in the configuration | the `#[track_caller]` call site only | no unwinding at all: the fastest mode (tens of ns) |
//!
//! The mode used is recorded on every span as `dei.stack.mode`. In `LineTables` mode, a frame of code built
//! without line tables (a dependency with its own profile override, a doctest) is keyed by its function name.
//!
//! How the unwinding modes walk the stack (saved frame pointers or DWARF unwind tables) is a separate choice,
//! [`StackWalker`](super::StackWalker), recorded as `dei.stack.walker`.

use std::fmt;

/// How call stacks are captured.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StackMode {
    /// Unwind and key application frames by workspace-relative file, line and column.
    LineTables,
    /// Unwind and key application frames by function name (no line tables in the binary).
    SymbolsOnly,
    /// No symbols: the stack holds only a `#[track_caller]` call site, when there is one.
    Stripped,
    /// Do not unwind: the stack holds only a `#[track_caller]` call site, when there is one.
    CallSiteOnly,
}

impl StackMode {
    /// The value recorded in `dei.stack.mode`.
    pub fn as_str(self) -> &'static str {
        match self {
            StackMode::LineTables => "line-tables",
            StackMode::SymbolsOnly => "symbols-only",
            StackMode::Stripped => "stripped",
            StackMode::CallSiteOnly => "call-site-only",
        }
    }

    /// True when the mode unwinds the stack.
    pub fn unwinds(self) -> bool {
        matches!(self, StackMode::LineTables | StackMode::SymbolsOnly)
    }
}

impl fmt::Display for StackMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Symbolizes this function's own frame and reports what the binary offers.
#[inline(never)]
pub fn detect() -> StackMode {
    let mut best = StackMode::Stripped;
    let mut seen = 0;
    backtrace::trace(|frame| {
        seen += 1;
        backtrace::resolve_frame(frame, |symbol| {
            let named = symbol
                .name()
                .map(|n| format!("{n:#}"))
                .is_some_and(|n| n.contains("stack::mode::detect"));
            if named {
                best = if symbol.filename().is_some() && symbol.lineno().is_some() {
                    StackMode::LineTables
                } else {
                    StackMode::SymbolsOnly
                };
            }
        });
        best == StackMode::Stripped && seen < 8
    });
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_build_has_line_tables() {
        // The workspace profiles set `debug = "line-tables-only"`.
        assert_eq!(detect(), StackMode::LineTables);
    }
}
