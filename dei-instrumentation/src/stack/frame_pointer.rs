//! The crate's one audited `unsafe` module: walks the calling thread's own stack through its saved frame
//! pointers.
//!
//! In a build with `-C force-frame-pointers=yes` every function starts by pushing its caller's frame pointer
//! and pointing its own at it, so each frame holds a *frame record* of two words: the caller's frame pointer,
//! then the return address into the caller (x86_64: `rbp`; aarch64: `x29`, the record that `x30` is saved
//! in). Following that chain from the current frame pointer gives the return addresses of the stack, innermost
//! first, for a few nanoseconds per frame, where the DWARF unwinder interprets each frame's unwind rules.
//!
//! **What is unsafe here, and why it is sound.** Four things only, each block with a `// SAFETY:` note:
//! - asking the C library for the thread's stack (`pthread_getattr_np`, `pthread_attr_getstack`,
//!   `pthread_attr_destroy` on an attribute object that this module owns), once per thread, cached in a
//!   thread-local ([`thread_stack`]);
//! - copying the frame-pointer and stack-pointer registers (an `asm!` that touches no memory);
//! - loading one frame record (an `asm!` load of two words). Before a record is read its address is checked
//!   ([`record_at`]): aligned to a word, at or above the lowest address a record may have (the stack pointer
//!   for the first record, the end of the previous record afterwards, so the chain strictly increases and
//!   ends), and with the whole record below the top of the thread's stack. Everything from the stack pointer
//!   to the top of the stack is the thread's live, mapped stack, so a checked load cannot fault, whatever
//!   values a frame without frame pointers left where a record was expected: garbage gives a wrong address,
//!   never a bad read. The load is done in `asm!` so that the compiler makes no assumption about the words
//!   (they may belong to frames that Rust code holds references into, or be padding): what is read is the
//!   bits, as a profiler reads them.
//!
//! A stack pointer outside the thread's stack (a signal handler's alternate stack, a coroutine's own stack),
//! a thread whose stack the C library cannot describe, or an architecture other than x86_64 and aarch64 on
//! Linux makes the walk refuse before it visits anything, and the caller unwinds with DWARF instead. Whether
//! the build has frame pointers at all is not decided here: [`super::walker`] compares a walk with the DWARF
//! unwinder once at start-up, and each distinct stack once more ([`super::StackCapturer`]).
//!
//! Nothing here is public outside `stack`, and no function here is `unsafe` to call.

#![deny(unsafe_op_in_unsafe_fn)]

use std::cell::Cell;

/// Why the frame-pointer walk cannot run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Unavailable {
    /// Not x86_64 or aarch64 Linux.
    Architecture,
    /// The C library could not describe this thread's stack.
    NoStackBounds,
    /// The stack pointer lies outside this thread's stack (an alternate signal stack, a coroutine's stack).
    OutsideStack,
    /// The frame-pointer walk disagrees with the DWARF unwinder: the build has no frame pointers.
    NoFramePointers,
}

impl Unavailable {
    /// Why, in words (logged when frame pointers are not used).
    pub(crate) fn reason(self) -> &'static str {
        match self {
            Unavailable::Architecture => "frame-pointer walking is implemented for x86_64 and aarch64 Linux only",
            Unavailable::NoStackBounds => "the C library could not describe this thread's stack",
            Unavailable::OutsideStack => "the stack pointer is outside this thread's stack",
            Unavailable::NoFramePointers => {
                "the binary has no frame pointers (build with RUSTFLAGS=\"-C force-frame-pointers=yes\")"
            }
        }
    }
}

/// Frame records followed at most per walk.
pub(crate) const MAX_FRAMES: usize = 256;

/// A machine word.
const WORD: usize = std::mem::size_of::<usize>();

/// A frame record: the caller's frame pointer, then the return address.
const RECORD: usize = 2 * WORD;

/// A thread's stack: `[low, high)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct StackBounds {
    /// The lowest address of the stack (its guard page excluded or not: the walk never reads below the stack
    /// pointer).
    pub(crate) low: usize,
    /// One past the highest address of the stack.
    pub(crate) high: usize,
}

thread_local! {
    /// This thread's stack, asked for once.
    static BOUNDS: Cell<Option<Result<StackBounds, Unavailable>>> = const { Cell::new(None) };
}

/// The calling thread's stack, from the C library on the thread's first call and from a thread-local after.
pub(crate) fn thread_stack() -> Result<StackBounds, Unavailable> {
    BOUNDS
        .try_with(|cell| {
            if let Some(known) = cell.get() {
                return known;
            }
            let asked = ask_for_thread_stack();
            cell.set(Some(asked));
            asked
        })
        // The thread's locals are being destroyed: no walk now.
        .unwrap_or(Err(Unavailable::NoStackBounds))
}

#[cfg(target_os = "linux")]
fn ask_for_thread_stack() -> Result<StackBounds, Unavailable> {
    let mut attr = std::mem::MaybeUninit::<libc::pthread_attr_t>::uninit();
    // SAFETY: `pthread_self` has no preconditions; `pthread_getattr_np` gets the calling (live) thread and a
    // pointer to writable memory the size of a `pthread_attr_t`, which it initializes when it returns 0.
    let got = unsafe { libc::pthread_getattr_np(libc::pthread_self(), attr.as_mut_ptr()) };
    if got != 0 {
        return Err(Unavailable::NoStackBounds);
    }
    let mut addr: *mut libc::c_void = std::ptr::null_mut();
    let mut size: libc::size_t = 0;
    // SAFETY: `attr` was initialized by the successful `pthread_getattr_np` above and is not destroyed yet;
    // both out-pointers are to this frame's locals.
    let described = unsafe { libc::pthread_attr_getstack(attr.as_ptr(), &mut addr, &mut size) };
    // SAFETY: `attr` is initialized and destroyed exactly once, here; it is not used afterwards.
    unsafe { libc::pthread_attr_destroy(attr.as_mut_ptr()) };
    if described != 0 || addr.is_null() {
        return Err(Unavailable::NoStackBounds);
    }
    let low = addr as usize;
    let high = low.checked_add(size).ok_or(Unavailable::NoStackBounds)?;
    Ok(StackBounds { low, high })
}

#[cfg(not(target_os = "linux"))]
fn ask_for_thread_stack() -> Result<StackBounds, Unavailable> {
    Err(Unavailable::Architecture)
}

/// The address of the frame record at `fp`, if it may be read: `fp` is word-aligned, not below `lowest`, and
/// the whole record lies below `high`.
#[inline(always)]
pub(crate) fn record_at(fp: usize, lowest: usize, high: usize) -> Option<usize> {
    if !fp.is_multiple_of(WORD) || fp < lowest {
        return None;
    }
    let end = fp.checked_add(RECORD)?;
    (end <= high).then_some(fp)
}

/// Calls `visit` with each return address on the calling thread's stack, innermost first (the first is the
/// return into this function's caller), until it returns false, the chain ends or leaves the stack, or
/// [`MAX_FRAMES`] records were read. `Err` before any visit when the walk cannot run here: the caller unwinds
/// with DWARF instead.
#[inline(never)]
pub(crate) fn walk(visit: &mut dyn FnMut(usize) -> bool) -> Result<(), Unavailable> {
    let stack = thread_stack()?;
    let Some((mut fp, sp)) = registers() else {
        return Err(Unavailable::Architecture);
    };
    if sp < stack.low || sp >= stack.high {
        return Err(Unavailable::OutsideStack);
    }
    // Records lie between the stack pointer and the stack's top, each above the one before.
    let mut lowest = sp;
    for _ in 0..MAX_FRAMES {
        let Some(at) = record_at(fp, lowest, stack.high) else {
            break;
        };
        let (next, ret) = load_record(at);
        if ret == 0 || next <= fp {
            break;
        }
        if !visit(ret) {
            break;
        }
        lowest = at + RECORD; // no overflow: `record_at` checked `at + RECORD <= high`
        fp = next;
    }
    Ok(())
}

/// This function's frame pointer and the stack pointer; `None` on an architecture without a walk.
#[inline(always)]
fn registers() -> Option<(usize, usize)> {
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    {
        let (fp, sp): (usize, usize);
        // SAFETY: copies two registers into two outputs; reads and writes no memory, uses no stack, keeps the
        // flags.
        unsafe {
            std::arch::asm!(
                "mov {fp}, rbp",
                "mov {sp}, rsp",
                fp = out(reg) fp,
                sp = out(reg) sp,
                options(nomem, nostack, preserves_flags)
            );
        }
        Some((fp, sp))
    }
    #[cfg(all(target_os = "linux", target_arch = "aarch64"))]
    {
        let (fp, sp): (usize, usize);
        // SAFETY: copies two registers into two outputs; reads and writes no memory, uses no stack, keeps the
        // flags.
        unsafe {
            std::arch::asm!(
                "mov {fp}, x29",
                "mov {sp}, sp",
                fp = out(reg) fp,
                sp = out(reg) sp,
                options(nomem, nostack, preserves_flags)
            );
        }
        Some((fp, sp))
    }
    #[cfg(not(all(target_os = "linux", any(target_arch = "x86_64", target_arch = "aarch64"))))]
    {
        None
    }
}

/// The frame record at `at`: (the caller's frame pointer, the return address). `at` comes from
/// [`record_at`] with this walk's stack pointer (or a previous record's end) as lowest address and the
/// thread's stack top as highest, which is what makes the load sound.
#[inline(always)]
fn load_record(at: usize) -> (usize, usize) {
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    {
        let (next, ret): (usize, usize);
        // SAFETY: `at` is word-aligned and `[at, at + 16)` lies between the current stack pointer and the top
        // of this thread's stack (`record_at`), all of it the thread's live, mapped stack: the loads cannot
        // fault. They only read, use no stack and keep the flags; as asm, they assume nothing about the words.
        unsafe {
            std::arch::asm!(
                "mov {next}, qword ptr [{at}]",
                "mov {ret}, qword ptr [{at} + 8]",
                at = in(reg) at,
                next = out(reg) next,
                ret = out(reg) ret,
                options(readonly, nostack, preserves_flags)
            );
        }
        (next, ret)
    }
    #[cfg(all(target_os = "linux", target_arch = "aarch64"))]
    {
        let (next, ret): (usize, usize);
        // SAFETY: `at` is word-aligned and `[at, at + 16)` lies between the current stack pointer and the top
        // of this thread's stack (`record_at`), all of it the thread's live, mapped stack: the load cannot
        // fault. It only reads, uses no stack and keeps the flags; as asm, it assumes nothing about the words.
        unsafe {
            std::arch::asm!(
                "ldp {next}, {ret}, [{at}]",
                at = in(reg) at,
                next = out(reg) next,
                ret = out(reg) ret,
                options(readonly, nostack, preserves_flags)
            );
        }
        (next, ret)
    }
    #[cfg(not(all(target_os = "linux", any(target_arch = "x86_64", target_arch = "aarch64"))))]
    {
        // Unreachable: `registers` gives `None` here, so `walk` returns before reading a record.
        let _ = at;
        (0, 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_checked_before_they_are_read() {
        let (low, high) = (0x1000, 0x2000);
        assert_eq!(record_at(0x1000, low, high), Some(0x1000));
        assert_eq!(record_at(0x1ff0, low, high), Some(0x1ff0), "the last record that fits");
        assert_eq!(record_at(0x1ff8, low, high), None, "half past the top");
        assert_eq!(record_at(0x2000, low, high), None);
        assert_eq!(record_at(0x0ff8, low, high), None, "below the lowest address");
        assert_eq!(record_at(0x1004, low, high), None, "not aligned");
        assert_eq!(
            record_at(usize::MAX - 7, low, usize::MAX),
            None,
            "past the address space"
        );
        assert_eq!(record_at(0, 0, high), Some(0), "only the caller's bounds keep 0 out");
    }

    #[inline(never)]
    fn local_address() -> usize {
        let probe = 0u8;
        std::ptr::from_ref(std::hint::black_box(&probe)) as usize
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn each_thread_knows_its_own_stack() {
        let main = thread_stack().expect("bounds");
        let here = local_address();
        assert!(main.low <= here && here < main.high, "{main:?} {here:#x}");
        assert_eq!(thread_stack(), Ok(main), "cached");
        let size = 256 * 1024;
        let other = std::thread::Builder::new()
            .stack_size(size)
            .spawn(move || {
                let b = thread_stack().expect("bounds");
                let here = local_address();
                assert!(b.low <= here && here < b.high, "{b:?} {here:#x}");
                b
            })
            .expect("spawn")
            .join()
            .expect("thread");
        assert_ne!(other, main);
        assert!(other.high - other.low >= size, "{other:?}");
    }

    #[inline(never)]
    fn nest(depth: usize, f: &mut dyn FnMut() -> (Vec<usize>, Vec<usize>)) -> (Vec<usize>, Vec<usize>) {
        if depth == 0 {
            return f();
        }
        std::hint::black_box(nest(depth - 1, f))
    }

    #[test]
    #[cfg(all(target_os = "linux", any(target_arch = "x86_64", target_arch = "aarch64")))]
    fn the_walk_finds_the_unwinders_return_addresses() {
        for depth in [0, 3, 40] {
            let (walked, unwound) = nest(depth, &mut || {
                let mut walked = Vec::new();
                walk(&mut |ip| {
                    walked.push(ip);
                    true
                })
                .expect("walk");
                let mut unwound = Vec::new();
                backtrace::trace(|f| {
                    unwound.push(f.ip() as usize);
                    true
                });
                (walked, unwound)
            });
            // The first return address is into the closure, at another call than the unwinder's; from the
            // next one (into `nest`) on, both give the same addresses through every level of `nest` and this
            // test's frame.
            let j = unwound.iter().position(|&u| u == walked[1]).expect("shared");
            let n = depth + 2;
            assert_eq!(walked[1..1 + n], unwound[j..j + n], "depth {depth}");
            assert!(walked.len() <= MAX_FRAMES);
        }
    }

    #[test]
    #[cfg(all(target_os = "linux", any(target_arch = "x86_64", target_arch = "aarch64")))]
    fn a_walk_stops_where_the_visitor_says() {
        let mut seen = 0;
        walk(&mut |_| {
            seen += 1;
            seen < 2
        })
        .expect("walk");
        assert_eq!(seen, 2);
    }
}
