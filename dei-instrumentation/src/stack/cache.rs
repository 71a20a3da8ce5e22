//! The per-address symbol cache: each instruction address is symbolized once per process.
//!
//! Symbolizing is the expensive part of a capture (microseconds to milliseconds per address, cold); unwinding
//! is about 100 ns per frame. The cache maps an address to what it means for the stack — nothing, the runtime
//! boundary, or the application frames it stands for (several when calls were inlined) — so that a warm
//! capture is an unwind plus one hash lookup per frame.

use super::filter::{Class, FrameFilter};
use super::mode::StackMode;
use super::symbol_table::SymbolTable;
use dei_propagator::Frame;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::{Arc, OnceLock, RwLock};

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
struct ExecutableRanges(Vec<(usize, usize, u64)>);

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
            let (Some(range), Some(perms), Some(offset)) = (fields.next(), fields.next(), fields.next()) else {
                continue;
            };
            let path = fields.nth(2).unwrap_or("");
            if path != exe || !perms.contains('x') {
                continue;
            }
            if let Some((a, b)) = range.split_once('-')
                && let (Ok(a), Ok(b), Ok(offset)) = (
                    usize::from_str_radix(a, 16),
                    usize::from_str_radix(b, 16),
                    u64::from_str_radix(offset, 16),
                )
            {
                ranges.push((a, b, offset));
            }
        }
        ExecutableRanges(ranges)
    }

    /// True when the address is in the executable, or when the ranges are unknown.
    fn contains(&self, ip: usize) -> bool {
        self.0.is_empty() || self.0.iter().any(|&(a, b, _)| ip >= a && ip < b)
    }
}

/// The cache shared by every capture of one [`super::StackCapturer`].
#[derive(Debug)]
pub(crate) struct SymbolCache {
    map: RwLock<AddressMap>,
    exe: ExecutableRanges,
    /// The executable's symbol table, read on the first address whose function the line tables name by a
    /// short name only.
    symbols: OnceLock<Option<SymbolTable>>,
}

impl SymbolCache {
    pub(crate) fn new() -> Self {
        SymbolCache {
            map: RwLock::new(AddressMap::default()),
            exe: ExecutableRanges::detect(),
            symbols: OnceLock::new(),
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
        // The symbolizer reports the inlined frames first, by their short DWARF names (`{async_block#0}`,
        // `{closure#0}`: line tables carry no paths), and the function the code sits in last, by its full
        // symbol-table name.
        let mut symbols: Vec<Symbol> = Vec::new();
        backtrace::resolve(ip as *mut std::ffi::c_void, |symbol| {
            symbols.push(Symbol {
                name: symbol.name().map(|n| format!("{n:#}")),
                file: match mode {
                    StackMode::LineTables => symbol.filename().map(std::path::Path::to_path_buf),
                    _ => None,
                },
                line: symbol.lineno().unwrap_or(0),
                column: symbol.colno().unwrap_or(0),
            });
        });
        // The function the address lies in, by its full name: the last symbol's, or the symbol table's when
        // the line tables give a short one.
        let physical = match symbols.last().and_then(|s| s.name.as_deref()) {
            Some(name) if name.contains("::") => Some(name.to_string()),
            short => self
                .symbols
                .get_or_init(|| SymbolTable::of_current_exe(&self.exe.0))
                .as_ref()
                .and_then(|table| table.name_at(ip))
                .or_else(|| short.map(str::to_string)),
        };
        let last = symbols.len().saturating_sub(1);
        let mut frames = Vec::new();
        let mut boundary = false;
        for (i, symbol) in symbols.into_iter().enumerate() {
            let located = symbol.file.as_deref().map(|f| (f.to_string_lossy(), filter.locate(f)));
            let file = located.as_ref().map(|(_, l)| l.name.clone());
            match filter.classify(
                symbol.name.as_deref(),
                located.as_ref().map(|(raw, l)| (raw.as_ref(), l)),
            ) {
                Class::Boundary => {
                    boundary = true;
                    break;
                }
                Class::Foreign => {}
                Class::App => {
                    let frame = match (mode, file) {
                        (StackMode::LineTables, Some(file)) => Frame::new(file, symbol.line, symbol.column),
                        // Without line tables the function name is the best key there is.
                        _ => Frame::new(symbol.name.clone().unwrap_or_default(), 0, 0),
                    };
                    let frame = match (symbol.name, &physical) {
                        // the function itself, by its full name
                        (_, Some(full)) if i == last => frame.with_function(full.clone()),
                        (Some(n), _) => frame.with_function(display_name(n, physical.as_deref())),
                        (None, _) => frame,
                    };
                    frames.push(AppFrame {
                        key: format!("{}:{}:{}\n", frame.file, frame.line, frame.column).into_boxed_str(),
                        frame,
                    });
                }
            }
        }
        if boundary && frames.is_empty() {
            Resolved::Boundary
        } else if frames.is_empty() {
            Resolved::Skip
        } else {
            Resolved::App(frames.into())
        }
    }
}

/// One symbol of an address, as the symbolizer reported it.
struct Symbol {
    name: Option<String>,
    file: Option<std::path::PathBuf>,
    line: u32,
    column: u32,
}

/// The name shown for a frame: a short name of inlined code (no path: `{async_block#0}`, `new<T>`) says which
/// function it was inlined into, the nearest the binary's line tables can tell; full names stay as they are.
/// Display only: a frame's key is its file, line and column.
fn display_name(name: String, physical: Option<&str>) -> String {
    match physical {
        Some(outer) if !name.contains("::") && outer.contains("::") && outer != name => {
            format!("{name} in {outer}")
        }
        _ => name,
    }
}

#[cfg(test)]
mod tests {
    use super::display_name;

    #[test]
    fn short_inlined_names_say_where_they_were_inlined() {
        assert_eq!(
            display_name("{async_block#0}".into(), Some("svc::users::get_user::{{closure}}")),
            "{async_block#0} in svc::users::get_user::{{closure}}"
        );
        // a full name, or no better outer name, stays as it is
        assert_eq!(display_name("svc::f".into(), Some("svc::g")), "svc::f");
        assert_eq!(display_name("{closure#0}".into(), Some("{closure#0}")), "{closure#0}");
        assert_eq!(display_name("{closure#0}".into(), None), "{closure#0}");
    }
}
