//! The frame-pointer walker: follows the chain of saved frame pointers instead of interpreting DWARF unwind
//! tables, for binaries built with `-C force-frame-pointers=yes` (x86_64 Linux).
//!
//! Each frame of such a build starts with `push rbp; mov rbp, rsp`, so the word at `rbp` is the caller's
//! `rbp` and the word above it the return address. Reading those words needs the stack's memory; this crate
//! has no `unsafe`, so a capture copies the top of its own stack with one `process_vm_readv(2)` on its own
//! process (the kernel checks every address) and walks the copy. The copy costs most of a capture; the walk
//! itself is a few nanoseconds per frame.
//!
//! Safe Rust cannot read `rbp` either. [`FramePointerWalker::detect`] calibrates once: inside the walking
//! function it finds the function's canonical frame address with the DWARF unwinder (the stack pointer of the
//! innermost frame above a local of the function), which gives the fixed distance from that local to the
//! function's saved `rbp`. It then walks the live stack both ways and accepts the walker only when the
//! distance is the same from two call depths and the frame-pointer walk returns exactly the return addresses
//! that the DWARF unwinder finds; a build without frame pointers, or a kernel that refuses the read, fails
//! that check and keeps the DWARF walker.

use nix::sys::uio::{RemoteIoVec, process_vm_readv};
use nix::unistd::Pid;
use std::cell::RefCell;
use std::io::IoSliceMut;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicUsize, Ordering};

/// Bytes read per capture at first; grows (up to [`MAX_READ`]) to what the deepest walk that stopped at the
/// runtime's boundary or at the depth limit needed.
const FIRST_READ: usize = 4 * 1024;

/// Stack bytes read at most per capture.
const MAX_READ: usize = 256 * 1024;

/// The deeper calibration's nesting.
const CALIBRATION_DEPTH: usize = 4;

/// Frames followed at most.
const MAX_FRAMES: usize = 256;

/// A fresh value per walk, written to the walking function's stack and checked in the copy: a copy that does
/// not hold it was read from another process (a child after `fork` holds its parent's pid).
static MARKERS: AtomicU64 = AtomicU64::new(0x5eed_0000_0000_0001);

/// The process id is re-read every this many walks (one `getpid`, amortised to nanoseconds).
const PID_CHECK_EVERY: u64 = 64;

/// Why the frame-pointer walker is not used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Unavailable {
    /// Not x86_64: the frame record's place relative to the canonical frame address differs.
    Architecture,
    /// The kernel refused to copy this process's stack (seccomp, a sandbox).
    ReadRefused,
    /// The calibration gave different offsets at two call depths.
    Unstable,
    /// The frame-pointer walk disagrees with the DWARF unwinder: the build has no frame pointers.
    NoFramePointers,
}

impl Unavailable {
    /// Why, in words (logged when the walker was asked for and is not used).
    pub(crate) fn reason(self) -> &'static str {
        match self {
            Unavailable::Architecture => "frame-pointer walking is implemented for x86_64 only",
            Unavailable::ReadRefused => "the kernel refused process_vm_readv on this process",
            Unavailable::Unstable => "the calibration found no fixed frame layout",
            Unavailable::NoFramePointers => {
                "the binary has no frame pointers (build with RUSTFLAGS=\"-C force-frame-pointers=yes\")"
            }
        }
    }
}

/// A calibrated frame-pointer walker.
#[derive(Debug)]
pub(crate) struct FramePointerWalker {
    /// From the address of `walk_here`'s local to its saved `rbp`.
    offset: usize,
    /// This process's id, refreshed when a copy shows that it changed (after `fork`).
    pid: AtomicI32,
    /// Bytes the first read takes (rounded up to a page's end): the most a completed walk needed so far.
    read_size: AtomicUsize,
    /// Cleared when a walk disagreed with the DWARF unwinder (code without frame pointers on the way).
    trusted: AtomicBool,
}

/// What a calibration saw: the offset, and whether the frame-pointer walk agreed with the DWARF unwinder.
struct Calibration {
    offset: Option<usize>,
    /// The innermost frames that must match: the calibration's own, which this crate compiled.
    must_match: usize,
    agrees: bool,
}

thread_local! {
    /// The copy of the stack's top, reused by every capture on this thread.
    static SNAPSHOT: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

impl FramePointerWalker {
    /// Calibrates and checks the walker against the DWARF unwinder.
    pub(crate) fn detect() -> Result<Self, Unavailable> {
        if !cfg!(target_arch = "x86_64") {
            return Err(Unavailable::Architecture);
        }
        let mut walker = FramePointerWalker {
            offset: 0,
            pid: AtomicI32::new(nix::unistd::getpid().as_raw()),
            read_size: AtomicUsize::new(FIRST_READ),
            trusted: AtomicBool::new(true),
        };
        if walker.read(&mut [0u8; 64], probe_address()).is_err() {
            return Err(Unavailable::ReadRefused);
        }
        let shallow = calibrate_at_depth(&walker, 1);
        let deep = calibrate_at_depth(&walker, CALIBRATION_DEPTH);
        match (shallow.offset, deep.offset) {
            (Some(a), Some(b)) if a == b => walker.offset = a,
            _ => return Err(Unavailable::Unstable),
        }
        if !(shallow.agrees && deep.agrees) {
            return Err(Unavailable::NoFramePointers);
        }
        Ok(walker)
    }

    /// Walks the calling thread's stack, calling `visit` with each return address, innermost first, until it
    /// returns false. `Err` (before any visit) when the stack could not be read or the walker is no longer
    /// trusted: the caller unwinds with DWARF instead.
    pub(crate) fn walk(&self, visit: &mut dyn FnMut(usize) -> bool) -> Result<(), Unavailable> {
        if !self.trusted() {
            return Err(Unavailable::NoFramePointers);
        }
        self.walk_here(Some(visit), None)
    }

    /// False once a walk disagreed with the DWARF unwinder.
    pub(crate) fn trusted(&self) -> bool {
        self.trusted.load(Ordering::Relaxed)
    }

    /// Stops using frame pointers in this process (a walk disagreed with the DWARF unwinder); logs once.
    pub(crate) fn distrust(&self) {
        if self.trusted.swap(false, Ordering::Relaxed) {
            tracing::warn!(
                "dei: a frame-pointer walk disagreed with the DWARF unwinder (code without frame pointers on the \
                 stack, or a stack deeper than the walk's limits); walking with DWARF from now on"
            );
        }
    }

    /// Copies `buf.len()` bytes of this process's memory at `address` into `buf`; the count copied (less
    /// at the end of a mapping).
    fn read(&self, buf: &mut [u8], address: usize) -> Result<usize, Unavailable> {
        let remote = [RemoteIoVec {
            base: address,
            len: buf.len(),
        }];
        let pid = Pid::from_raw(self.pid.load(Ordering::Relaxed));
        process_vm_readv(pid, &mut [IoSliceMut::new(buf)], &remote).map_err(|_| Unavailable::ReadRefused)
    }

    /// Copies `buf.len()` bytes of the stack from `base`, where this walk's `marker` lies; when the copy does
    /// not hold the marker, the process id is stale (a `fork`): refreshes it and copies again once.
    fn read_own(&self, buf: &mut [u8], base: usize, marker: u64) -> Result<usize, Unavailable> {
        let holds_marker = |buf: &[u8], have: usize| have >= 8 && word(&buf[..8]) as u64 == marker;
        // The marker alone cannot tell a forked child from its parent (both count on from the same value),
        // so the process id is also checked every PID_CHECK_EVERY walks.
        if marker.is_multiple_of(PID_CHECK_EVERY) {
            self.pid.store(nix::unistd::getpid().as_raw(), Ordering::Relaxed);
        }
        if let Ok(have) = self.read(buf, base)
            && holds_marker(buf, have)
        {
            return Ok(have);
        }
        // A refused read or someone else's memory: a stale process id (after `fork`) explains both.
        let now = nix::unistd::getpid().as_raw();
        if self.pid.swap(now, Ordering::Relaxed) == now {
            return Err(Unavailable::ReadRefused);
        }
        let have = self.read(buf, base)?;
        if holds_marker(buf, have) {
            Ok(have)
        } else {
            Err(Unavailable::ReadRefused)
        }
    }

    /// The one function whose frame the offset belongs to: never inlined, never generic, so it has one
    /// layout. With `calibration` it measures the offset (or checks it) instead of visiting.
    #[inline(never)]
    fn walk_here(
        &self,
        visit: Option<&mut dyn FnMut(usize) -> bool>,
        calibration: Option<&mut Calibration>,
    ) -> Result<(), Unavailable> {
        let marker: u64 = MARKERS.fetch_add(1, Ordering::Relaxed);
        let local = std::ptr::from_ref(std::hint::black_box(&marker)) as usize;
        let mut offset = self.offset;
        let mut expected: Vec<usize> = Vec::new();
        if calibration.is_some() {
            // The DWARF unwinder's frames: (return address, stack pointer at that frame's call, which is the
            // canonical frame address of the frame inside it).
            let mut frames: Vec<(usize, usize)> = Vec::new();
            backtrace::trace(|f| {
                frames.push((f.ip() as usize, f.sp() as usize));
                frames.len() < MAX_FRAMES
            });
            // The first frame whose stack pointer lies above this function's local is its caller's, and its
            // stack pointer is this function's CFA; the saved rbp sits just below the return address there.
            let Some(caller) = frames.iter().position(|&(_, sp)| sp > local) else {
                return Ok(());
            };
            offset = frames[caller].1.wrapping_sub(16).wrapping_sub(local);
            expected = frames[caller..].iter().map(|&(ip, _)| ip).collect();
        }
        let mut seen: Vec<usize> = Vec::new();
        let mut collect = |ip: usize| {
            seen.push(ip);
            true
        };
        let visit: &mut dyn FnMut(usize) -> bool = match visit {
            Some(v) => v,
            None => &mut collect,
        };
        let outcome = SNAPSHOT.with(|cell| match cell.try_borrow_mut() {
            Ok(mut buf) => self.follow_chain(&mut buf, local, marker, local.wrapping_add(offset), visit),
            Err(_) => self.follow_chain(&mut Vec::new(), local, marker, local.wrapping_add(offset), visit),
        });
        if let Some(cal) = calibration {
            cal.offset = Some(offset);
            // Only the calibration's own frames must match: code further out (a precompiled standard library,
            // libc's thread start) may have no frame pointers, which skips or ends frames there.
            let n = cal.must_match;
            cal.agrees = outcome.is_ok() && seen.len() >= n && expected.len() >= n && seen[..n] == expected[..n];
        }
        outcome
    }

    /// Copies the stack from `base` (where `marker` lies) up and follows the saved-`rbp` chain from `rbp`.
    fn follow_chain(
        &self,
        buf: &mut Vec<u8>,
        base: usize,
        marker: u64,
        mut rbp: usize,
        visit: &mut dyn FnMut(usize) -> bool,
    ) -> Result<(), Unavailable> {
        // Read to a page's end: the kernel copies whole pages anyway.
        let want = page_end(base, self.read_size.load(Ordering::Relaxed)).ok_or(Unavailable::ReadRefused)?;
        buf.resize(want, 0);
        let mut have = self.read_own(&mut buf[..want], base, marker)?;
        let mut end_of_mapping = have < want;
        for _ in 0..MAX_FRAMES {
            // A saved rbp of code without frame pointers can be any value: every sum is checked.
            let Some(at) = rbp.checked_sub(base) else { break };
            let Some(record_end) = at.checked_add(16) else { break };
            if record_end > have {
                // The chain goes on above the copy: copy more, unless the mapping ended or the cap is hit.
                let Some(grow) = page_end(base, record_end) else { break };
                if end_of_mapping || grow > MAX_READ {
                    break;
                }
                buf.resize(grow, 0);
                // A refused read here (the first one succeeded) ends the walk like the end of the copy.
                let Ok(more) = self.read(&mut buf[have..grow], base + have) else {
                    break;
                };
                end_of_mapping = have + more < grow;
                have += more;
                if record_end > have {
                    break;
                }
            }
            let next = word(&buf[at..at + 8]);
            let ret = word(&buf[at + 8..record_end]);
            if ret == 0 || next <= rbp {
                break;
            }
            if !visit(ret) {
                // Learn how far walks that end where the caller wanted reach, so that the next one copies
                // enough at once. (Walks to the bottom of the stack, the first ones before the runtime's
                // boundary is known, are not learnt from.)
                self.read_size.fetch_max(record_end, Ordering::Relaxed);
                break;
            }
            rbp = next;
        }
        Ok(())
    }
}

/// The length from `base` to the end of the page holding `base + len - 1`; `None` past the address space.
fn page_end(base: usize, len: usize) -> Option<usize> {
    const PAGE: usize = 4096;
    Some(base.checked_add(len)?.checked_next_multiple_of(PAGE)? - base)
}

/// A native-endian machine word.
fn word(bytes: &[u8]) -> usize {
    const N: usize = std::mem::size_of::<usize>();
    let mut w = [0u8; N];
    w.copy_from_slice(&bytes[..N]);
    usize::from_ne_bytes(w)
}

/// An address on this thread's stack.
#[inline(never)]
fn probe_address() -> usize {
    let probe = 0u8;
    std::ptr::from_ref(std::hint::black_box(&probe)) as usize
}

/// Calibrates from `depth` nested calls, so that two depths can be compared.
#[inline(never)]
fn calibrate_at_depth(walker: &FramePointerWalker, depth: usize) -> Calibration {
    calibrate_nested(walker, depth, depth)
}

/// `remaining` more calls deep, then calibrates; the `depth` calls and [`FramePointerWalker::detect`] are the
/// frames that must match.
#[inline(never)]
fn calibrate_nested(walker: &FramePointerWalker, depth: usize, remaining: usize) -> Calibration {
    if remaining > 1 {
        let inner = calibrate_nested(walker, depth, remaining - 1);
        return std::hint::black_box(inner);
    }
    let mut cal = Calibration {
        offset: None,
        must_match: depth + 2,
        agrees: false,
    };
    let _ = walker.walk_here(None, Some(&mut cal));
    cal
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;

    #[test]
    fn page_ends_past_the_address_space_are_none() {
        assert_eq!(page_end(0x1000, 1), Some(0x1000));
        assert_eq!(page_end(0x1008, 0x1000), Some(0x1ff8));
        assert_eq!(page_end(usize::MAX - 10, 100), None);
        assert_eq!(page_end(usize::MAX - 4000, 16), None);
    }

    #[test]
    fn a_copy_without_the_walks_marker_is_refused() {
        let walker = FramePointerWalker::detect().expect("the workspace builds with frame pointers");
        let marker: u64 = MARKERS.fetch_add(1, Ordering::Relaxed);
        let at = std::ptr::from_ref(std::hint::black_box(&marker)) as usize;
        let mut buf = vec![0u8; 64];
        assert_eq!(walker.read_own(&mut buf, at, marker), Ok(64));
        // Another walk's marker: the copy is not this walk's stack (as a forked child's copy of its parent's
        // stack would not be), and the process id is current, so the copy is refused.
        assert_eq!(walker.read_own(&mut buf, at, marker + 1), Err(Unavailable::ReadRefused));
        assert_eq!(walker.pid.load(Ordering::Relaxed), nix::unistd::getpid().as_raw());
    }

    /// `levels` frames of over 512 bytes each, then `f`.
    #[inline(never)]
    fn deep(levels: usize, f: &mut dyn FnMut()) {
        let pad = std::hint::black_box([levels as u8; 512]);
        if levels == 0 {
            f();
        } else {
            deep(levels - 1, f);
        }
        std::hint::black_box(pad);
    }

    #[test]
    fn copies_grow_to_what_completed_walks_needed() {
        let walker = FramePointerWalker::detect().expect("the workspace builds with frame pointers");
        deep(16, &mut || {
            let mut all = 0;
            walker
                .walk(&mut |_| {
                    all += 1;
                    true
                })
                .expect("walk");
            // A walk to the bottom of the stack teaches nothing.
            assert_eq!(walker.read_size.load(Ordering::Relaxed), FIRST_READ);
            // One that stops where its caller wants (a runtime boundary, say) does: 17 frames of over 512
            // bytes reach past the first copy, which then grows to fit.
            let mut visited = 0;
            walker
                .walk(&mut |_| {
                    visited += 1;
                    visited < 20
                })
                .expect("walk");
            assert!(all > 20, "{all}");
            assert_eq!(visited, 20);
            assert!(walker.read_size.load(Ordering::Relaxed) > 16 * 512);
        });
    }
}
