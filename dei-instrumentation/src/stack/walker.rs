//! How a capture walks the stack: saved frame pointers where the build has them, the DWARF unwinder otherwise.
//!
//! | walker | needs | warm cost (BENCHMARKS.md) |
//! |---|---|---|
//! | [`FramePointers`](StackWalker::FramePointers) | `-C force-frame-pointers=yes`, x86_64 or aarch64 Linux | a few ns per frame: two loads from the thread's own stack (see `frame_pointer`, the crate's one audited `unsafe` module) |
//! | [`Dwarf`](StackWalker::Dwarf) | unwind tables (every build has them) | 3.14–3.22 µs for a warm capture of 30 application frames (row 8b), against 0.21–0.23 µs with frame pointers: libgcc interprets each frame's unwind rules |
//!
//! [`Auto`](StackWalker::Auto), the default, walks frame pointers when the binary has them and DWARF when it
//! does not. Which it is, is found once per process at start-up: a walk through frame pointers from a few
//! nested calls of this crate must give exactly the return addresses the DWARF unwinder gives. A build
//! without frame pointers fails that check, logs why once, and walks with DWARF.
//!
//! Both walkers find the same application frames, so stacks, digests and indexes do not depend on the walker.
//! Each distinct stack a frame-pointer walk finds is checked against the DWARF unwinder once (the capture
//! that first sees it pays for both): code built without frame pointers on the way (a doctest, a C library
//! calling back into Rust) breaks the chain, and the first disagreement turns frame pointers off for the
//! process. The walker used is recorded on every span as `dei.stack.walker`.

use super::frame_pointer::{self, Unavailable};
use std::fmt;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

/// How call stacks are walked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum StackWalker {
    /// Frame pointers where the binary has them (detected once per process), DWARF otherwise.
    #[default]
    Auto,
    /// The DWARF unwinder (libgcc, through `backtrace`).
    Dwarf,
    /// Saved frame pointers; falls back to DWARF (with a warning) when the binary has none.
    FramePointers,
}

impl StackWalker {
    /// The value recorded in `dei.stack.walker`.
    pub fn as_str(self) -> &'static str {
        match self {
            StackWalker::Auto => "auto",
            StackWalker::Dwarf => "dwarf",
            StackWalker::FramePointers => "frame-pointers",
        }
    }
}

impl fmt::Display for StackWalker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The walker a capturer uses, resolved from a [`StackWalker`] request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Walk {
    Dwarf,
    /// Frame pointers, until a walk disagrees with the DWARF unwinder ([`distrust_frame_pointers`]).
    FramePointers,
}

/// Cleared for the process when a frame-pointer walk disagreed with the DWARF unwinder.
static FRAME_POINTERS_TRUSTED: AtomicBool = AtomicBool::new(true);

/// The nesting of the deeper start-up check.
const CHECK_DEPTH: usize = 4;

/// Whether this binary has frame pointers: checked once per process, logged once when it has not.
pub(crate) fn detect() -> Result<(), Unavailable> {
    static DETECTED: OnceLock<Result<(), Unavailable>> = OnceLock::new();
    *DETECTED.get_or_init(|| {
        let detected = check_at_depth(1).and_then(|()| check_at_depth(CHECK_DEPTH));
        if let Err(why) = detected {
            tracing::info!(
                reason = why.reason(),
                "dei: call stacks are walked with DWARF, not frame pointers"
            );
        }
        detected
    })
}

/// Walks both ways from `depth` nested calls and compares.
#[inline(never)]
fn check_at_depth(depth: usize) -> Result<(), Unavailable> {
    let (walked, unwound) = nested_walks(depth)?;
    agree(&walked, &unwound, depth)
}

/// `depth` calls deep, then both walks: (frame pointers, DWARF).
#[inline(never)]
fn nested_walks(depth: usize) -> Result<(Vec<usize>, Vec<usize>), Unavailable> {
    if depth > 1 {
        let inner = nested_walks(depth - 1);
        return std::hint::black_box(inner);
    }
    let mut walked = Vec::new();
    frame_pointer::walk(&mut |ip| {
        walked.push(ip);
        walked.len() < frame_pointer::MAX_FRAMES
    })?;
    let mut unwound = Vec::new();
    backtrace::trace(|f| {
        unwound.push(f.ip() as usize);
        unwound.len() < frame_pointer::MAX_FRAMES
    });
    Ok((walked, unwound))
}

/// Whether a frame-pointer walk from `depth` levels of [`nested_walks`] agrees with the unwinder: the first
/// return address is into the innermost level (where the two walks are called from different places); from
/// the next on, the returns through the other levels, into [`check_at_depth`] and into its caller are read
/// from this crate's frames and must be the unwinder's, in order.
fn agree(walked: &[usize], unwound: &[usize], depth: usize) -> Result<(), Unavailable> {
    let n = depth + 1;
    let Some(from) = walked.get(1..1 + n) else {
        return Err(Unavailable::NoFramePointers);
    };
    let Some(j) = unwound.iter().position(|&u| u == from[0]) else {
        return Err(Unavailable::NoFramePointers);
    };
    if unwound.get(j..j + n) == Some(from) {
        Ok(())
    } else {
        Err(Unavailable::NoFramePointers)
    }
}

/// Inlined, as the walks above it are: every frame between the unwinder and the caller costs the DWARF
/// unwinder a step (about a microsecond with cold caches).
#[inline(always)]
fn walk_dwarf(visit: &mut dyn FnMut(usize) -> bool) {
    backtrace::trace(|frame| visit(frame.ip() as usize));
}

impl Walk {
    /// Resolves a request with what this binary offers.
    pub(crate) fn choose(requested: StackWalker) -> Walk {
        Walk::choose_given(requested, detect())
    }

    /// Resolves a request given the start-up check's outcome; asking for frame pointers explicitly where
    /// there are none logs why.
    pub(crate) fn choose_given(requested: StackWalker, detected: Result<(), Unavailable>) -> Walk {
        match (requested, detected) {
            (StackWalker::Dwarf, _) => Walk::Dwarf,
            (StackWalker::Auto | StackWalker::FramePointers, Ok(())) => Walk::FramePointers,
            (StackWalker::Auto, Err(_)) => Walk::Dwarf,
            (StackWalker::FramePointers, Err(why)) => {
                tracing::warn!(
                    reason = why.reason(),
                    "dei: frame-pointer walking unavailable; using DWARF"
                );
                Walk::Dwarf
            }
        }
    }

    /// The walker in use.
    pub(crate) fn kind(self) -> StackWalker {
        match self {
            Walk::FramePointers if FRAME_POINTERS_TRUSTED.load(Ordering::Relaxed) => StackWalker::FramePointers,
            _ => StackWalker::Dwarf,
        }
    }

    /// Calls `visit` with each return address on the calling thread's stack, innermost first, until it
    /// returns false; returns the walker that did. Inlined into the capture (see [`walk_dwarf`]).
    #[inline(always)]
    pub(crate) fn walk(self, visit: &mut dyn FnMut(usize) -> bool) -> StackWalker {
        if self.kind() == StackWalker::FramePointers && frame_pointer::walk(visit).is_ok() {
            return StackWalker::FramePointers;
        }
        // (A refused frame-pointer walk refuses before visiting anything.)
        walk_dwarf(visit);
        StackWalker::Dwarf
    }
}

/// Turns frame pointers off for the process: a walk through them disagreed with the DWARF unwinder. Logs once.
pub(crate) fn distrust_frame_pointers() {
    if FRAME_POINTERS_TRUSTED.swap(false, Ordering::Relaxed) {
        tracing::warn!(
            "dei: a frame-pointer walk disagreed with the DWARF unwinder (code without frame pointers on the \
             stack, or a stack deeper than the walk's limits); walking with DWARF from now on"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stack::{CapturedStack, StackCapturer, StackConfig};

    #[test]
    #[cfg(all(target_os = "linux", any(target_arch = "x86_64", target_arch = "aarch64")))]
    fn this_workspace_builds_with_frame_pointers() {
        // `.cargo/config.toml` sets `-C force-frame-pointers=yes`; a RUSTFLAGS variable would replace it.
        assert_eq!(detect(), Ok(()));
        assert_eq!(Walk::choose(StackWalker::Auto), Walk::FramePointers);
        assert_eq!(
            Walk::choose(StackWalker::FramePointers).kind(),
            StackWalker::FramePointers
        );
        assert_eq!(Walk::choose(StackWalker::Dwarf).kind(), StackWalker::Dwarf);
    }

    #[test]
    fn the_start_up_check_needs_the_unwinders_addresses_in_order() {
        let unwound = [9, 8, 1, 2, 3, 4, 5];
        assert_eq!(agree(&[7, 2, 3, 4], &unwound, 2), Ok(()));
        // A frame skipped, a frame too many, a walk that ended early, one sharing nothing.
        for walked in [&[7, 2, 4, 5][..], &[7, 2, 2, 3], &[7, 2], &[7], &[], &[7, 20, 30, 40]] {
            assert_eq!(
                agree(walked, &unwound, 2),
                Err(Unavailable::NoFramePointers),
                "{walked:?}"
            );
        }
    }

    #[test]
    fn without_frame_pointers_auto_walks_with_dwarf() {
        for why in [
            Unavailable::NoFramePointers,
            Unavailable::Architecture,
            Unavailable::NoStackBounds,
        ] {
            assert_eq!(Walk::choose_given(StackWalker::Auto, Err(why)), Walk::Dwarf);
            assert_eq!(Walk::choose_given(StackWalker::FramePointers, Err(why)), Walk::Dwarf);
        }
        assert_eq!(Walk::choose_given(StackWalker::Dwarf, Ok(())), Walk::Dwarf);
    }

    #[test]
    fn a_build_without_frame_pointers_says_dwarf_on_the_span() {
        use crate::testing::{attribute, telemetry};
        let telemetry = telemetry();
        // The start-up check's outcome in a build without frame pointers.
        let c = StackCapturer::with_walk_choice(StackConfig::default(), |w| {
            Walk::choose_given(w, Err(Unavailable::NoFramePointers))
        });
        assert_eq!(c.walker(), StackWalker::Dwarf);
        let stack = nested(&c, 2);
        assert_eq!(stack.walker(), StackWalker::Dwarf);
        let span = tracing::info_span!("walker_test_without_frame_pointers");
        let mut attributes = crate::span::Attributes::new();
        attributes.stack(&stack, crate::config::StackFrames::Never);
        attributes.set_on_otel(&crate::span::OtelSpan::of(&span));
        drop(span);
        let spans: Vec<_> = telemetry
            .spans()
            .into_iter()
            .filter(|s| s.name == "walker_test_without_frame_pointers")
            .collect();
        assert_eq!(spans.len(), 1);
        assert_eq!(
            attribute(&spans[0], crate::span::STACK_WALKER).as_deref(),
            Some("dwarf")
        );
    }

    /// Return addresses from a frame-pointer walk and a DWARF unwind made at the same place.
    type Walks = (Vec<usize>, Vec<usize>);

    #[inline(never)]
    fn both_walks() -> Walks {
        let mut walked = Vec::new();
        frame_pointer::walk(&mut |ip| {
            walked.push(ip);
            walked.len() < frame_pointer::MAX_FRAMES
        })
        .expect("walk");
        let mut unwound = Vec::new();
        backtrace::trace(|f| {
            unwound.push(f.ip() as usize);
            unwound.len() < frame_pointer::MAX_FRAMES
        });
        (walked, unwound)
    }

    /// One level of a recursion `depth` deep, each level a small or a large frame as `shape`'s bits say.
    #[inline(never)]
    fn small_frame(level: u32, depth: u32, shape: u64) -> Walks {
        let walks = descend(level, depth, shape);
        std::hint::black_box(walks)
    }

    #[inline(never)]
    fn large_frame(level: u32, depth: u32, shape: u64) -> Walks {
        let pad = std::hint::black_box([level as u8; 384]);
        let walks = descend(level, depth, shape);
        std::hint::black_box(pad);
        std::hint::black_box(walks)
    }

    fn descend(level: u32, depth: u32, shape: u64) -> Walks {
        if level == depth {
            both_walks()
        } else if (shape >> (level % 64)) & 1 == 0 {
            small_frame(level + 1, depth, shape)
        } else {
            large_frame(level + 1, depth, shape)
        }
    }

    /// The application frames' return addresses among `ips`, up to the runtime's task boundary.
    fn application_addresses(c: &StackCapturer, ips: &[usize]) -> Vec<usize> {
        let inner = &*c.inner;
        let mut kept = Vec::new();
        for &ip in ips {
            match inner.cache.resolve(ip, &inner.filter, inner.mode) {
                crate::stack::Resolved::Boundary => break,
                crate::stack::Resolved::Skip => {}
                crate::stack::Resolved::App(_) => kept.push(ip),
            }
        }
        kept
    }

    #[test]
    #[cfg(all(target_os = "linux", any(target_arch = "x86_64", target_arch = "aarch64")))]
    fn frame_pointers_match_dwarf_on_100_000_random_deep_recursions() {
        const TASKS: u64 = 8;
        const PER_TASK: u64 = 12_500;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(4)
            .build()
            .expect("runtime");
        // Its cache symbolizes each address once; the allow list keeps this module's frames.
        let c = StackCapturer::new(StackConfig::default().allow("walker::tests"));
        let tasks: Vec<_> = (0..TASKS)
            .map(|t| {
                let c = c.clone();
                rt.spawn(async move {
                    // xorshift64, seeded per task: reproducible.
                    let mut state = 0x9E37_79B9_7F4A_7C15 ^ (t + 1);
                    let mut next = move || {
                        state ^= state << 13;
                        state ^= state >> 7;
                        state ^= state << 17;
                        state
                    };
                    let mut deepest = 0;
                    for i in 0..PER_TASK {
                        if i % 64 == 0 {
                            // Moves the task between the runtime's worker threads.
                            tokio::task::yield_now().await;
                        }
                        let depth = (next() % 100) as u32;
                        let shape = next();
                        let (walked, unwound) = descend(0, depth, shape);
                        // The first return address is into `both_walks`, at a call of its own; from the next
                        // one on, the walks must give the same application frames.
                        let j = unwound
                            .iter()
                            .position(|&u| u == walked[1])
                            .unwrap_or_else(|| panic!("task {t}, walk {i}: nothing shared"));
                        let a = application_addresses(&c, &walked[1..]);
                        let b = application_addresses(&c, &unwound[j..]);
                        assert_eq!(a, b, "task {t}, walk {i}: depth {depth}, shape {shape:#x}");
                        // Every level of the recursion, the `descend` at its bottom and this task's frame.
                        assert!(a.len() > depth as usize, "task {t}, walk {i}: {} frames", a.len());
                        deepest = deepest.max(a.len());
                    }
                    deepest
                })
            })
            .collect();
        for task in tasks {
            let deepest = rt.block_on(task).expect("task");
            assert!(deepest > 90, "{deepest}");
        }
    }

    #[inline(never)]
    fn nested(c: &StackCapturer, depth: usize) -> CapturedStack {
        if depth == 0 {
            c.capture()
        } else {
            std::hint::black_box(nested(c, depth - 1))
        }
    }

    #[test]
    fn both_walkers_find_the_same_application_frames() {
        let config = StackConfig::default().allow("walker::tests");
        let dwarf = StackCapturer::new(config.clone().walker(StackWalker::Dwarf));
        let fast = StackCapturer::new(config.walker(StackWalker::FramePointers));
        assert_eq!(dwarf.walker(), StackWalker::Dwarf);
        for depth in [0, 5, 28] {
            let stacks: Vec<CapturedStack> = [&dwarf, &fast].into_iter().map(|c| nested(c, depth)).collect();
            let (a, b) = (&stacks[0], &stacks[1]);
            assert_eq!(a.readable(), b.readable());
            assert_eq!(a.digest(), b.digest());
            assert!(a.len() > depth.min(30), "{}", a.readable());
            assert_eq!(b.walker(), fast.walker());
        }
    }

    #[test]
    fn both_walkers_agree_inside_tasks_on_a_multi_thread_runtime() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .build()
            .expect("runtime");
        let config = StackConfig::default().allow("walker::tests");
        let dwarf = StackCapturer::new(config.clone().walker(StackWalker::Dwarf));
        let auto = StackCapturer::new(config.walker(StackWalker::Auto));
        let tasks: Vec<_> = (0..16)
            .map(|i| {
                let (dwarf, auto) = (dwarf.clone(), auto.clone());
                rt.spawn(async move {
                    tokio::task::yield_now().await;
                    let depth = 3 + i % 4;
                    let stacks: Vec<(String, StackWalker)> = [&dwarf, &auto, &auto]
                        .into_iter()
                        .map(|c| nested(c, depth))
                        .map(|s| (s.readable(), s.walker()))
                        .collect();
                    for (s, _) in &stacks {
                        assert_eq!(*s, stacks[0].0);
                    }
                    let walkers: Vec<StackWalker> = stacks.iter().map(|(_, w)| *w).collect();
                    (stacks[0].0.clone(), walkers, depth)
                })
            })
            .collect();
        for task in tasks {
            let (a, used, depth) = rt.block_on(task).expect("task");
            #[cfg(all(target_os = "linux", any(target_arch = "x86_64", target_arch = "aarch64")))]
            assert_eq!(
                used,
                [
                    StackWalker::Dwarf,
                    StackWalker::FramePointers,
                    StackWalker::FramePointers
                ]
            );
            let _ = used;
            // Every nested frame, and nothing past the runtime's task boundary.
            assert_eq!(
                a.lines()
                    .filter(|l| l.starts_with("dei_instrumentation::stack::walker::tests::nested"))
                    .count(),
                depth + 1,
                "{a}"
            );
            assert!(!a.contains("tokio"), "{a}");
        }
    }
}
