//! Full function names from the executable's ELF symbol table, for display.
//!
//! With line tables only (the default `debug` setting for release builds with DEI), the debug info names
//! closures, async blocks and many functions by their short names (`{async_block#0}`, `capture_at`). The
//! symbol table still has the full path of every function that was not inlined away. [`SymbolTable::name_at`]
//! finds the function an address lies in and returns its demangled name without the hash.
//!
//! Read once per process, on the first address that needs it; compact: 16 bytes per function, the names stay
//! in the file and are read when a cold symbolization asks for one.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// The executable's functions, sorted by address, and how to read their names.
#[derive(Debug)]
pub(crate) struct SymbolTable {
    file: File,
    /// File offset of the symbol table's string table.
    strings: u64,
    /// `(file address, size, name offset in the string table)`, sorted by address.
    functions: Vec<(u64, u32, u32)>,
    /// The executable's mappings `(runtime start, runtime end, file address at start)`.
    mappings: Vec<(usize, usize, u64)>,
}

/// The longest name read (longer ones are cut, display only).
const MAX_NAME: usize = 4096;

impl SymbolTable {
    /// Reads the symbol table of the running executable; `None` when it has none or cannot be read.
    pub(crate) fn of_current_exe(mappings: &[(usize, usize, u64)]) -> Option<SymbolTable> {
        let exe = std::env::current_exe().ok()?;
        Self::of_file(&exe, mappings)
    }

    /// Reads the symbol table of the ELF file at `path`, mapped at `mappings` (runtime start, end, and the
    /// file offset each starts at, as `/proc/self/maps` lists them).
    pub(crate) fn of_file(path: &Path, mappings: &[(usize, usize, u64)]) -> Option<SymbolTable> {
        use object::read::elf::{FileHeader as _, ProgramHeader as _, SectionHeader as _, Sym as _};
        let file = File::open(path).ok()?;
        let data = object::ReadCache::new(file.try_clone().ok()?);
        let header = object::elf::FileHeader64::<object::Endianness>::parse(&data).ok()?;
        let endian = header.endian().ok()?;
        let sections = header.sections(endian, &data).ok()?;
        let symbols = sections.symbols(endian, &data, object::elf::SHT_SYMTAB).ok()?;
        if symbols.is_empty() {
            return None;
        }
        let strings = sections.section(symbols.string_section()).ok()?.sh_offset(endian);
        let mut functions: Vec<(u64, u32, u32)> = symbols
            .symbols()
            .iter()
            .filter(|s| s.st_type() == object::elf::STT_FUNC && s.st_size(endian) > 0 && s.st_value(endian) > 0)
            .map(|s| {
                (
                    s.st_value(endian),
                    u32::try_from(s.st_size(endian)).unwrap_or(u32::MAX),
                    s.st_name(endian),
                )
            })
            .collect();
        functions.sort_unstable();
        // Runtime address → file address: an executable mapping of file offset O at runtime address A holds
        // the bytes of the executable loadable segment that covers O, whose addresses are
        // `p_vaddr + (O - p_offset)` (O is rounded down to a page: the previous segment may share that page).
        let segments: Vec<(u64, u64, u64)> = header
            .program_headers(endian, &data)
            .ok()?
            .iter()
            .filter(|p| {
                p.p_type(endian) == object::elf::PT_LOAD
                    && (p.p_flags(endian) & object::elf::PF_X) != object::elf::ProgramFlags(0)
            })
            .map(|p| (p.p_offset(endian), p.p_filesz(endian), p.p_vaddr(endian)))
            .collect();
        let mappings = mappings
            .iter()
            .filter_map(|&(start, end, offset)| {
                let (p_offset, _, p_vaddr) = segments
                    .iter()
                    .find(|(o, size, _)| offset >= (o & !0xfff) && offset < o + size)?;
                Some((start, end, (p_vaddr + offset).checked_sub(*p_offset)?))
            })
            .collect();
        Some(SymbolTable {
            file,
            strings,
            functions,
            mappings,
        })
    }

    /// The demangled name (without its hash) of the function that runtime address `ip` lies in.
    pub(crate) fn name_at(&self, ip: usize) -> Option<String> {
        let &(start, _, at) = self.mappings.iter().find(|(s, e, _)| ip >= *s && ip < *e)?;
        let address = at + (ip - start) as u64;
        let i = self
            .functions
            .partition_point(|(a, _, _)| *a <= address)
            .checked_sub(1)?;
        let (a, size, name) = self.functions[i];
        if address >= a + u64::from(size) {
            return None;
        }
        let mangled = self.read_name(name)?;
        Some(format!("{:#}", backtrace::SymbolName::new(&mangled)))
    }

    fn read_name(&self, offset: u32) -> Option<Vec<u8>> {
        let mut name = Vec::new();
        let mut chunk = [0u8; 256];
        let mut at = self.strings + u64::from(offset);
        while name.len() < MAX_NAME {
            let n = self.file.read_at(&mut chunk, at).ok()?;
            if n == 0 {
                break;
            }
            match chunk[..n].iter().position(|b| *b == 0) {
                Some(end) => {
                    name.extend_from_slice(&chunk[..end]);
                    return Some(name);
                }
                None => name.extend_from_slice(&chunk[..n]),
            }
            at += n as u64;
        }
        (!name.is_empty()).then_some(name)
    }
}

#[cfg(test)]
mod tests {
    use super::SymbolTable;

    #[inline(never)]
    fn a_named_function() -> usize {
        a_named_function as fn() -> usize as usize
    }

    fn mappings() -> Vec<(usize, usize, u64)> {
        let exe = std::env::current_exe().expect("exe").to_string_lossy().into_owned();
        let maps = std::fs::read_to_string("/proc/self/maps").expect("maps");
        maps.lines()
            .filter_map(|line| {
                let f: Vec<&str> = line.split_whitespace().collect();
                let (range, perms, offset, path) = (f[0], f[1], f[2], f.get(5).copied().unwrap_or(""));
                let (a, b) = range.split_once('-')?;
                (path == exe && perms.contains('x')).then(|| {
                    (
                        usize::from_str_radix(a, 16).expect("hex"),
                        usize::from_str_radix(b, 16).expect("hex"),
                        u64::from_str_radix(offset, 16).expect("hex"),
                    )
                })
            })
            .collect()
    }

    #[test]
    fn names_the_function_an_address_lies_in() {
        let table = SymbolTable::of_current_exe(&mappings()).expect("a test binary has a symbol table");
        let f = a_named_function();
        let name = table.name_at(f + 1).expect("the function's own address");
        assert!(name.ends_with("symbol_table::tests::a_named_function"), "{name}");
        assert_eq!(table.name_at(1), None, "an address outside the executable");
    }

    #[test]
    fn a_file_that_is_not_elf_has_no_table() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml");
        assert!(SymbolTable::of_file(&path, &mappings()).is_none());
    }
}
