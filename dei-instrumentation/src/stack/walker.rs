//! How a capture walks the stack: the DWARF unwinder, or saved frame pointers where the build has them.
//!
//! | walker | needs | warm cost (BENCHMARKS.md) |
//! |---|---|---|
//! | [`Dwarf`](StackWalker::Dwarf) | unwind tables (every build has them) | 0.2–0.3 µs per frame: libgcc interprets each frame's unwind rules |
//! | [`FramePointers`](StackWalker::FramePointers) | `-C force-frame-pointers=yes`, x86_64 Linux, `process_vm_readv(2)` allowed | one copy of the stack's top (1.6 µs for a page on our VM, ~0.45 µs per further page), then a few ns per frame |
//!
//! [`Auto`](StackWalker::Auto), the default, uses DWARF unless a calibration at start-up shows that the binary
//! has frame pointers and that their walk finds exactly the frames the DWARF unwinder finds. Then it makes two
//! captures in 32 with each walker, timing the second (two in 512 once 1,024 captures settled the averages),
//! and switches to frame pointers where they take at most half of DWARF's time: a frame-pointer walk costs a
//! system call (about 1.6 µs on our VM in a tight loop, far less on bare metal, but 5–9 µs per capture inside
//! a tonic echo service, against 2–6 µs for DWARF there) plus a little per page of stack, DWARF about
//! 0.2–0.3 µs per frame warm (about 1 µs cold),
//! so deep stacks of small frames in a tight loop favour frame pointers and shallow ones in a busy service do
//! not.
//!
//! Both walkers find the same application frames, so stacks, digests and indexes do not depend on the walker.
//! Each distinct stack a frame-pointer walk finds is checked against the DWARF unwinder once (the capture
//! that first sees it pays for both): code built without frame pointers on the way (a doctest, a C library
//! calling back into Rust) breaks the chain, and the first disagreement turns frame pointers off for the
//! process. The walker used is recorded on every span as `dei.stack.walker`.

use std::fmt;
#[cfg(target_os = "linux")]
use std::sync::{Arc, OnceLock};

#[cfg(target_os = "linux")]
use super::frame_pointer::{FramePointerWalker, Unavailable};

/// How call stacks are walked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum StackWalker {
    /// DWARF, switching to frame pointers where the binary has them and they are measured to take at most half
    /// of DWARF's time in this process.
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
#[derive(Clone, Debug)]
pub(crate) enum Walk {
    Dwarf,
    #[cfg(target_os = "linux")]
    FramePointers(Arc<FramePointerWalker>),
    /// `Auto` where the binary has frame pointers: whichever walker costs less here, measured.
    #[cfg(target_os = "linux")]
    Measured(Arc<Measured>),
}

/// Picks the cheaper walker from what captures in this process actually cost.
///
/// A frame-pointer walk costs one system call plus a little per page of stack, a DWARF walk a little per
/// frame, so which is cheaper depends on the machine (what a system call costs there) and on the service's
/// stacks (few large frames or many small ones). Two captures in [`SAMPLE_EVERY`] are made with each walker,
/// the second of them timed (see [`sample`]; [`SETTLED_SAMPLE_EVERY`] after the first [`SETTLING_CAPTURES`],
/// since the slower walker's captures cost: a frame-pointer walk inside a loaded service can take twice or
/// three times a DWARF one); the others use the one
/// [`prefer`] picks from the moving averages. Both walkers find the same frames, so the choice never changes
/// a stack.
#[cfg(target_os = "linux")]
#[derive(Debug)]
pub(crate) struct Measured {
    frame_pointers: Arc<FramePointerWalker>,
    captures: std::sync::atomic::AtomicU64,
    /// Moving averages in nanoseconds, frame pointers then DWARF; 0 until first measured.
    cost: [std::sync::atomic::AtomicU64; 2],
}

/// One capture in this many is timed with each walker while the averages settle.
#[cfg(target_os = "linux")]
const SAMPLE_EVERY: u64 = 32;

/// Captures after which sampling slows down to [`SETTLED_SAMPLE_EVERY`].
#[cfg(target_os = "linux")]
const SETTLING_CAPTURES: u64 = 32 * SAMPLE_EVERY;

/// One capture in this many is timed with each walker once the averages settled.
#[cfg(target_os = "linux")]
const SETTLED_SAMPLE_EVERY: u64 = 16 * SAMPLE_EVERY;

/// A capture that [`Measured`] makes with a given walker instead of the preferred one.
#[cfg(target_os = "linux")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sample {
    /// Untimed: warms the caches that this walker's next capture uses (its code, and for frame pointers the
    /// kernel's copy path), so that the timed capture after it is not charged for the other walker having run
    /// meanwhile.
    Warm(StackWalker),
    /// Timed, into this walker's moving average.
    Timed(StackWalker),
}

/// What capture `n` (0-based, counted per capturer) is, when not an ordinary capture with the preferred
/// walker: the first four of each period warm and then time frame pointers, then warm and time DWARF.
///
/// Timing each walker right after its warm-up keeps the comparison fair in a tight loop, where the preferred
/// walker runs warm and a lone sample of the other ran cold (which kept `Auto` on DWARF at three times the cost
/// of frame pointers). In a service the warm-up may run on another thread, and other work runs between
/// captures, so both walkers are timed about equally cold there.
#[cfg(target_os = "linux")]
fn sample(n: u64) -> Option<Sample> {
    let period = if n < SETTLING_CAPTURES {
        SAMPLE_EVERY
    } else {
        SETTLED_SAMPLE_EVERY
    };
    match n % period {
        0 => Some(Sample::Warm(StackWalker::FramePointers)),
        1 => Some(Sample::Timed(StackWalker::FramePointers)),
        2 => Some(Sample::Warm(StackWalker::Dwarf)),
        3 => Some(Sample::Timed(StackWalker::Dwarf)),
        _ => None,
    }
}

#[cfg(target_os = "linux")]
impl Measured {
    fn new(frame_pointers: Arc<FramePointerWalker>) -> Self {
        Measured {
            frame_pointers,
            captures: Default::default(),
            cost: Default::default(),
        }
    }

    /// The walker the averages favour (DWARF until frame pointers are measured clearly cheaper, and for good
    /// once frame pointers are distrusted).
    fn preferred(&self) -> StackWalker {
        use std::sync::atomic::Ordering::Relaxed;
        if !self.frame_pointers.trusted() {
            return StackWalker::Dwarf;
        }
        prefer(self.cost[0].load(Relaxed), self.cost[1].load(Relaxed))
    }

    #[inline(always)]
    fn walk(&self, visit: &mut dyn FnMut(usize) -> bool) -> StackWalker {
        use std::sync::atomic::Ordering::Relaxed;
        let n = self.captures.fetch_add(1, Relaxed);
        let (walker, timed) = match sample(n) {
            Some(Sample::Warm(walker)) => (walker, false),
            Some(Sample::Timed(walker)) => (walker, true),
            None => (self.preferred(), false),
        };
        let started = timed.then(std::time::Instant::now);
        let used = match walker {
            StackWalker::FramePointers => walk_frame_pointers(&self.frame_pointers, visit),
            _ => {
                walk_dwarf(visit);
                StackWalker::Dwarf
            }
        };
        if let Some(started) = started {
            let slot = &self.cost[usize::from(used == StackWalker::Dwarf)];
            let ns = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
            // An exponential moving average over about eight samples (the first sample sets it).
            let _ = slot.fetch_update(Relaxed, Relaxed, |old| {
                Some(if old == 0 { ns.max(1) } else { old - old / 8 + ns / 8 })
            });
        }
        used
    }
}

/// The walker to prefer given the two moving averages (0: not measured yet): frame pointers only once they are
/// measured to take at most half of DWARF's time. A system call costs more than its own duration (caches and
/// TLB entries it evicts, on kernels with speculative-execution mitigations): on our VM a tonic echo, whose
/// captures walk a few large frames (7–10 KiB of stack), was 1–6% slower end to end with frame pointers, and
/// inside it a frame-pointer capture took 5–9 µs against 2–6 µs with DWARF, while in a tight loop 30 small
/// frames take a third to a half of DWARF's time (BENCHMARKS.md).
#[cfg(target_os = "linux")]
fn prefer(frame_pointers_ns: u64, dwarf_ns: u64) -> StackWalker {
    if frame_pointers_ns != 0 && dwarf_ns != 0 && frame_pointers_ns.saturating_mul(2) <= dwarf_ns {
        StackWalker::FramePointers
    } else {
        StackWalker::Dwarf
    }
}

/// Inlined, as the walks above it are: every frame between the unwinder and the caller costs the DWARF
/// unwinder a step (about a microsecond with cold caches).
#[inline(always)]
fn walk_dwarf(visit: &mut dyn FnMut(usize) -> bool) {
    backtrace::trace(|frame| visit(frame.ip() as usize));
}

/// A frame-pointer walk; a refused read happens before any frame is visited, so unwinding instead visits
/// each frame once.
#[cfg(target_os = "linux")]
fn walk_frame_pointers(walker: &FramePointerWalker, visit: &mut dyn FnMut(usize) -> bool) -> StackWalker {
    match walker.walk(visit) {
        Ok(()) => StackWalker::FramePointers,
        Err(_) => {
            walk_dwarf(visit);
            StackWalker::Dwarf
        }
    }
}

/// The process's frame-pointer calibration: one per binary, done at most once.
#[cfg(target_os = "linux")]
fn frame_pointers() -> Result<Arc<FramePointerWalker>, Unavailable> {
    static DETECTED: OnceLock<Result<Arc<FramePointerWalker>, Unavailable>> = OnceLock::new();
    DETECTED
        .get_or_init(|| FramePointerWalker::detect().map(Arc::new))
        .clone()
}

impl Walk {
    /// Resolves a request; asking for frame pointers where there are none logs why and walks with DWARF.
    pub(crate) fn choose(requested: StackWalker) -> Walk {
        match requested {
            StackWalker::Dwarf => Walk::Dwarf,
            #[cfg(target_os = "linux")]
            StackWalker::Auto => frame_pointers().map_or(Walk::Dwarf, |fp| Walk::Measured(Arc::new(Measured::new(fp)))),
            #[cfg(target_os = "linux")]
            StackWalker::FramePointers => match frame_pointers() {
                Ok(walker) => Walk::FramePointers(walker),
                Err(why) => {
                    tracing::warn!(
                        reason = why.reason(),
                        "dei: frame-pointer walking unavailable; using DWARF"
                    );
                    Walk::Dwarf
                }
            },
            #[cfg(not(target_os = "linux"))]
            StackWalker::Auto | StackWalker::FramePointers => Walk::Dwarf,
        }
    }

    /// The walker in use (for `Auto`, the one currently preferred).
    pub(crate) fn kind(&self) -> StackWalker {
        match self {
            Walk::Dwarf => StackWalker::Dwarf,
            #[cfg(target_os = "linux")]
            Walk::FramePointers(w) if w.trusted() => StackWalker::FramePointers,
            #[cfg(target_os = "linux")]
            Walk::FramePointers(_) => StackWalker::Dwarf,
            #[cfg(target_os = "linux")]
            Walk::Measured(m) => m.preferred(),
        }
    }

    /// Turns frame pointers off for the process: a walk through them disagreed with the DWARF unwinder.
    pub(crate) fn distrust_frame_pointers(&self) {
        match self {
            Walk::Dwarf => {}
            #[cfg(target_os = "linux")]
            Walk::FramePointers(w) => w.distrust(),
            #[cfg(target_os = "linux")]
            Walk::Measured(m) => m.frame_pointers.distrust(),
        }
    }

    /// Calls `visit` with each return address on the calling thread's stack, innermost first, until it
    /// returns false; returns the walker that did. Inlined into the capture (see [`walk_dwarf`]).
    #[inline(always)]
    pub(crate) fn walk(&self, visit: &mut dyn FnMut(usize) -> bool) -> StackWalker {
        match self {
            Walk::Dwarf => {
                walk_dwarf(visit);
                StackWalker::Dwarf
            }
            #[cfg(target_os = "linux")]
            Walk::FramePointers(walker) => walk_frame_pointers(walker, visit),
            #[cfg(target_os = "linux")]
            Walk::Measured(m) => m.walk(visit),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stack::{CapturedStack, StackCapturer, StackConfig};

    #[test]
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    fn this_workspace_builds_with_frame_pointers() {
        // `.cargo/config.toml` sets `-C force-frame-pointers=yes`; a RUSTFLAGS variable would replace it.
        assert!(
            matches!(Walk::choose(StackWalker::Auto), Walk::Measured(_)),
            "{:?}",
            frame_pointers().err().map(|e| e.reason())
        );
        assert_eq!(
            Walk::choose(StackWalker::FramePointers).kind(),
            StackWalker::FramePointers
        );
        assert_eq!(Walk::choose(StackWalker::Dwarf).kind(), StackWalker::Dwarf);
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn the_cheaper_measured_walker_is_preferred() {
        assert_eq!(prefer(0, 0), StackWalker::Dwarf);
        assert_eq!(prefer(3_000, 0), StackWalker::Dwarf);
        assert_eq!(prefer(0, 3_000), StackWalker::Dwarf);
        assert_eq!(prefer(3_000, 2_000), StackWalker::Dwarf);
        // Cheaper, but not by half: a system call costs more than it measures.
        assert_eq!(prefer(2_000, 3_000), StackWalker::Dwarf);
        assert_eq!(prefer(3_000, 6_000), StackWalker::FramePointers);
        assert_eq!(prefer(2_500, 10_000), StackWalker::FramePointers);
    }

    #[test]
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    fn auto_times_both_walkers_and_uses_the_preferred_one_between_samples() {
        let Walk::Measured(measured) = Walk::choose(StackWalker::Auto) else {
            panic!("the workspace builds with frame pointers");
        };
        use std::sync::atomic::Ordering::Relaxed;
        let measured_yet = || measured.cost.each_ref().map(|c| c.load(Relaxed) > 0);
        let mut used = Vec::new();
        let mut first_costs = Vec::new();
        for _ in 0..4 * SAMPLE_EVERY {
            let mut frames = 0;
            let preferred = measured.preferred();
            let walker = measured.walk(&mut |_| {
                frames += 1;
                true
            });
            assert!(frames > 3);
            used.push((walker, preferred));
            if first_costs.len() < 4 {
                first_costs.push(measured_yet());
            }
        }
        // The warm-up captures are not timed: frame pointers' average is set by capture 1, DWARF's by capture 3.
        assert_eq!(
            first_costs,
            [[false, false], [true, false], [true, false], [true, true]]
        );
        // Captures 0 to 3 of every SAMPLE_EVERY warm and time each walker in turn; the rest follow the
        // preference.
        for (n, (walker, preferred)) in used.iter().enumerate() {
            match n as u64 % SAMPLE_EVERY {
                0 | 1 => assert_eq!(*walker, StackWalker::FramePointers),
                2 | 3 => assert_eq!(*walker, StackWalker::Dwarf),
                _ => assert_eq!(walker, preferred),
            }
        }
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn sampling_slows_down_once_the_averages_settled() {
        let timed =
            |range: std::ops::Range<u64>| range.filter(|&n| matches!(sample(n), Some(Sample::Timed(_)))).count() as u64;
        assert_eq!(timed(0..SETTLING_CAPTURES), 2 * SETTLING_CAPTURES / SAMPLE_EVERY);
        let later = SETTLING_CAPTURES..SETTLING_CAPTURES + 4 * SETTLED_SAMPLE_EVERY;
        assert_eq!(timed(later), 8);
        // Both walkers are still warmed and then timed, frame pointers first.
        let n = 5 * SETTLED_SAMPLE_EVERY;
        assert_eq!(sample(n), Some(Sample::Warm(StackWalker::FramePointers)));
        assert_eq!(sample(n + 1), Some(Sample::Timed(StackWalker::FramePointers)));
        assert_eq!(sample(n + 2), Some(Sample::Warm(StackWalker::Dwarf)));
        assert_eq!(sample(n + 3), Some(Sample::Timed(StackWalker::Dwarf)));
        assert_eq!(sample(n + 4), None);
        assert_eq!(sample(n + SAMPLE_EVERY), None);
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
                    // Enough captures that `Auto` runs both of its walkers.
                    let stacks: Vec<(String, StackWalker)> = std::iter::once(&dwarf)
                        .chain(std::iter::repeat_n(&auto, 8))
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
        let mut walkers = std::collections::HashSet::new();
        for task in tasks {
            let (a, used, depth) = rt.block_on(task).expect("task");
            walkers.extend(used);
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
        #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
        assert_eq!(walkers.len(), 2, "both walkers ran: {walkers:?}");
    }
}
