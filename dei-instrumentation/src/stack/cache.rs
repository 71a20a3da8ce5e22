//! The per-address symbol cache: each instruction address is symbolized once per process.
//!
//! Symbolizing is the expensive part of a capture (microseconds to milliseconds per address, cold); unwinding
//! is about 100 ns per frame. The cache maps an address to what it means for the stack — nothing, the runtime
//! boundary, or the application frames it stands for (several when calls were inlined) — so that a warm
//! capture is an unwind plus one hash lookup per frame.

use super::filter::{Class, FrameFilter};
use super::mode::StackMode;
use dei_propagator::Frame;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::{Arc, RwLock};

/// One application frame, with its key line pre-rendered for the stack digest.
#[derive(Debug)]
pub(crate) struct AppFrame {
    /// `file:line:column\n`, the bytes this frame contributes to the stack digest.
    pub(crate) key: Box<str>,
    /// The frame, for display.
    pub(crate) frame: Frame,
}

/// What one address means for the stack.
#[derive(Clone, Debug)]
pub(crate) enum Resolved {
    /// Not the application's.
    Skip,
    /// The runtime's task machinery: stop walking.
    Boundary,
    /// Application frames, innermost (inlined) first.
    App(Arc<[AppFrame]>),
}

/// A hasher for addresses: they are already well distributed, a multiply is enough.
#[derive(Default)]
pub(crate) struct AddressHasher(u64);

impl Hasher for AddressHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.0 = (self.0.rotate_left(29) ^ u64::from_le_bytes(word)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_usize(&mut self, n: usize) {
        self.0 = (self.0.rotate_left(29) ^ n as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

pub(crate) type AddressMap = HashMap<usize, Resolved, BuildHasherDefault<AddressHasher>>;

/// Address ranges mapped from the main executable, read once from `/proc/self/maps`; addresses outside
/// them (libc, the loader) are skipped without symbolizing them, which keeps the first capture cheap.
#[derive(Debug, Default)]
struct ExecutableRanges(Vec<(usize, usize)>);

impl ExecutableRanges {
    fn detect() -> Self {
        let Ok(exe) = std::env::current_exe() else {
            return ExecutableRanges::default();
        };
        let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
            return ExecutableRanges::default();
        };
        let exe = exe.to_string_lossy().into_owned();
        let mut ranges = Vec::new();
        for line in maps.lines() {
            let mut fields = line.split_whitespace();
            let (Some(range), Some(perms)) = (fields.next(), fields.next()) else {
                continue;
            };
            let path = fields.nth(3).unwrap_or("");
            if path != exe || !perms.contains('x') {
                continue;
            }
            if let Some((a, b)) = range.split_once('-')
                && let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16))
            {
                ranges.push((a, b));
            }
        }
        ExecutableRanges(ranges)
    }

    /// True when the address is in the executable, or when the ranges are unknown.
    fn contains(&self, ip: usize) -> bool {
        self.0.is_empty() || self.0.iter().any(|&(a, b)| ip >= a && ip < b)
    }
}

/// The cache shared by every capture of one [`super::StackCapturer`].
#[derive(Debug)]
pub(crate) struct SymbolCache {
    map: RwLock<AddressMap>,
    exe: ExecutableRanges,
}

impl SymbolCache {
    pub(crate) fn new() -> Self {
        SymbolCache {
            map: RwLock::new(AddressMap::default()),
            exe: ExecutableRanges::detect(),
        }
    }

    /// The cache, for lookups during an unwind (hold it only for the walk).
    pub(crate) fn read(&self) -> std::sync::RwLockReadGuard<'_, AddressMap> {
        self.map.read().unwrap_or_else(|p| p.into_inner())
    }

    /// Cold path: symbolizes `ip` (unless another capture did meanwhile) and publishes the result.
    pub(crate) fn resolve(&self, ip: usize, filter: &FrameFilter, mode: StackMode) -> Resolved {
        if let Some(r) = self.read().get(&ip) {
            return r.clone();
        }
        let r = self.symbolize(ip, filter, mode);
        self.map
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .entry(ip)
            .or_insert(r)
            .clone()
    }

    /// Number of cached addresses.
    pub(crate) fn len(&self) -> usize {
        self.map.read().unwrap_or_else(|p| p.into_inner()).len()
    }

    fn symbolize(&self, ip: usize, filter: &FrameFilter, mode: StackMode) -> Resolved {
        if !self.exe.contains(ip) {
            return Resolved::Skip;
        }
        let mut frames = Vec::new();
        let mut boundary = false;
        backtrace::resolve(ip as *mut std::ffi::c_void, |symbol| {
            if boundary {
                return;
            }
            let name = symbol.name().map(|n| format!("{n:#}"));
            let raw_file = match mode {
                StackMode::LineTables => symbol.filename(),
                _ => None,
            };
            let located = raw_file.map(|f| (f.to_string_lossy(), filter.locate(f)));
            let file = located.as_ref().map(|(_, l)| l.name.clone());
            match filter.classify(name.as_deref(), located.as_ref().map(|(raw, l)| (raw.as_ref(), l))) {
                Class::Boundary => boundary = true,
                Class::Foreign => {}
                Class::App => {
                    let frame = match (mode, file) {
                        (StackMode::LineTables, Some(file)) => {
                            Frame::new(file, symbol.lineno().unwrap_or(0), symbol.colno().unwrap_or(0))
                        }
                        // Without line tables the function name is the best key there is.
                        _ => Frame::new(name.clone().unwrap_or_default(), 0, 0),
                    };
                    let frame = match name {
                        Some(n) => frame.with_function(n),
                        None => frame,
                    };
                    frames.push(AppFrame {
                        key: format!("{}:{}:{}\n", frame.file, frame.line, frame.column).into_boxed_str(),
                        frame,
                    });
                }
            }
        });
        if boundary && frames.is_empty() {
            Resolved::Boundary
        } else if frames.is_empty() {
            Resolved::Skip
        } else {
            Resolved::App(frames.into())
        }
    }
}
