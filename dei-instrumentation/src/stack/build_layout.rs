//! Where the running binary was built, read from the binary itself.
//!
//! A frame's key must depend only on the source: not on where the binary runs, where it was built, or where
//! cargo keeps dependencies. The symbolizer gives absolute paths (the compilation directory joined with the
//! path rustc was given), so the build's own directories have to be known to strip them. They are read once
//! per process from the executable's DWARF compile units, which record, for each unit, the source path rustc
//! was given (`DW_AT_name`) and the directory it ran in (`DW_AT_comp_dir`). Cargo runs rustc:
//!
//! - for a workspace member, in the workspace root with a path relative to it: that directory is a
//!   **workspace root**, and the member's files are named relative to it;
//! - for any other package (registry, git, vendored, a path dependency outside the workspace), in the
//!   package's own directory with an absolute path: that directory is a **package root**, and every file
//!   below it belongs to a dependency.
//!
//! Nothing here looks at the current directory or the environment; `DEI_WORKSPACE_ROOT` and
//! [`StackConfig::workspace_root`](super::StackConfig::workspace_root) override the workspace root (see
//! [`super::filter`]).

use gimli::{EndianSlice, RunTimeEndian, SectionId};
use object::{Object, ObjectSection};
use std::sync::OnceLock;

/// Compile units read at most (a bound on the work done at start-up).
const MAX_UNITS: usize = 1_000_000;

/// DWARF's language code for Rust (`DW_LANG_Rust`).
const DW_LANG_RUST: u16 = 0x1c;

/// The build's directories, as the executable's debug info records them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct BuildLayout {
    /// Directories rustc ran in for units given relative paths: the workspace roots (normally exactly one),
    /// each ending in `/`.
    pub(crate) workspace_roots: Vec<String>,
    /// Directories of packages compiled from absolute paths (dependencies), each ending in `/`, longest first.
    pub(crate) package_roots: Vec<String>,
    /// Why no workspace root is known, when none is.
    pub(crate) missing: Option<String>,
}

impl BuildLayout {
    /// The layout of the running executable, read once per process.
    pub(crate) fn current() -> &'static BuildLayout {
        static LAYOUT: OnceLock<BuildLayout> = OnceLock::new();
        LAYOUT.get_or_init(|| match std::env::current_exe() {
            Ok(exe) => BuildLayout::of_file(&exe),
            Err(e) => BuildLayout::unavailable(format!("the executable's path is unknown: {e}")),
        })
    }

    fn unavailable(reason: String) -> Self {
        BuildLayout {
            missing: Some(reason),
            ..BuildLayout::default()
        }
    }

    /// Reads the compile units of the ELF file at `path`; never fails, a layout with `missing` set says why.
    pub(crate) fn of_file(path: &std::path::Path) -> Self {
        let file = match std::fs::File::open(path) {
            Ok(f) => f,
            Err(e) => return BuildLayout::unavailable(format!("{}: {e}", path.display())),
        };
        let cache = object::ReadCache::new(file);
        let object = match object::File::parse(&cache) {
            Ok(o) => o,
            Err(e) => return BuildLayout::unavailable(format!("{}: {e}", path.display())),
        };
        match read_units(&object) {
            Ok(units) => BuildLayout::from_units(units),
            Err(e) => BuildLayout::unavailable(format!("{}: its debug info could not be read: {e}", path.display())),
        }
    }

    /// The layout that a list of Rust compile units `(name, comp_dir)` implies.
    pub(crate) fn from_units<I: IntoIterator<Item = (String, String)>>(units: I) -> Self {
        let mut workspace_roots: Vec<String> = Vec::new();
        let mut package_roots: Vec<String> = Vec::new();
        for (name, comp_dir) in units {
            if comp_dir.is_empty() || is_toolchain_dir(&comp_dir) {
                continue;
            }
            let dir = with_slash(&comp_dir);
            let list = if name.starts_with('/') {
                &mut package_roots
            } else {
                &mut workspace_roots
            };
            if !list.contains(&dir) {
                list.push(dir);
            }
        }
        // A package root that holds a workspace (or is one) is not a dependency's directory.
        package_roots.retain(|p| !workspace_roots.iter().any(|w| w.starts_with(p.as_str())));
        package_roots.sort_by_key(|p| std::cmp::Reverse(p.len()));
        let missing = workspace_roots
            .is_empty()
            .then(|| "the executable has no Rust compile units with a recorded workspace (no debug info?)".into());
        BuildLayout {
            workspace_roots,
            package_roots,
            missing,
        }
    }

    /// The package root that `path` lies in, if it lies in a dependency's directory.
    pub(crate) fn package_of(&self, path: &str) -> Option<&str> {
        self.package_roots
            .iter()
            .find(|p| path.starts_with(p.as_str()))
            .map(String::as_str)
    }

    /// True when `path` lies beside a dependency's package root (for example a vendored or registry crate that
    /// has no compile unit of its own because all of its code was inlined), but not in a workspace.
    pub(crate) fn in_package_collection(&self, path: &str) -> bool {
        self.package_roots.iter().any(|p| {
            let parent = parent_dir(p);
            !parent.is_empty()
                && parent != "/"
                && path.starts_with(parent)
                && !self.workspace_roots.iter().any(|w| w.starts_with(parent))
        })
    }
}

/// `dir` with one trailing `/`.
fn with_slash(dir: &str) -> String {
    let mut s = dir.replace('\\', "/");
    if !s.ends_with('/') {
        s.push('/');
    }
    s
}

/// The parent of a directory that ends in `/`, itself ending in `/`.
fn parent_dir(dir: &str) -> &str {
    let trimmed = dir.trim_end_matches('/');
    match trimmed.rfind('/') {
        Some(i) => &trimmed[..=i],
        None => "",
    }
}

/// True for the directories the standard library was built in (`/rustc/<commit>`, remapped by the toolchain).
fn is_toolchain_dir(dir: &str) -> bool {
    dir.starts_with("/rustc/") || dir == "/rustc"
}

/// The `(DW_AT_name, DW_AT_comp_dir)` of every Rust compile unit in `object`.
fn read_units<'data, R: object::ReadRef<'data>>(
    object: &object::File<'data, R>,
) -> Result<Vec<(String, String)>, gimli::Error> {
    let endian = if object.is_little_endian() {
        RunTimeEndian::Little
    } else {
        RunTimeEndian::Big
    };
    let wanted = [
        SectionId::DebugAbbrev,
        SectionId::DebugInfo,
        SectionId::DebugStr,
        SectionId::DebugLineStr,
    ];
    let load = |id: SectionId| -> Result<EndianSlice<'data, RunTimeEndian>, gimli::Error> {
        let data = if wanted.contains(&id) {
            object
                .section_by_name(id.name())
                .and_then(|s| s.data().ok())
                .unwrap_or(&[])
        } else {
            &[]
        };
        Ok(EndianSlice::new(data, endian))
    };
    let dwarf = gimli::Dwarf::load(load)?;
    let mut units = Vec::new();
    let mut headers = dwarf.units();
    while let Some(header) = headers.next()? {
        if units.len() >= MAX_UNITS {
            break;
        }
        let abbreviations = dwarf.abbreviations(&header)?;
        let mut entries = header.entries(&abbreviations);
        let Some(root) = entries.next_dfs()? else {
            continue;
        };
        let rust = matches!(
            root.attr_value(gimli::DW_AT_language),
            Some(gimli::AttributeValue::Language(lang)) if lang.0 == DW_LANG_RUST
        );
        if !rust {
            continue;
        }
        let text = |attr| {
            root.attr_value(attr)
                .and_then(|v| dwarf.attr_line_string(v).ok())
                .map(|s| s.to_string_lossy().into_owned())
        };
        if let (Some(name), Some(comp_dir)) = (text(gimli::DW_AT_name), text(gimli::DW_AT_comp_dir)) {
            units.push((name, comp_dir));
        }
    }
    Ok(units)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn units(list: &[(&str, &str)]) -> BuildLayout {
        BuildLayout::from_units(list.iter().map(|(n, d)| (n.to_string(), d.to_string())))
    }

    #[test]
    fn workspace_and_package_roots_from_units() {
        let layout = units(&[
            ("examples/fig2_loops.rs/@/fig2_loops.abc-cgu.0", "/build/ws"),
            ("dei-sfit/src/lib.rs/@/dei_sfit.x", "/build/ws"),
            ("library/std/src/lib.rs/@/std.x", "/rustc/59807616e1fa"),
            (
                "/usr/local/cargo/registry/src/index.crates.io-1949cf8c6b5b557f/tonic-0.14.9/src/lib.rs/@/tonic.x",
                "/usr/local/cargo/registry/src/index.crates.io-1949cf8c6b5b557f/tonic-0.14.9",
            ),
            ("/build/ws/vendor/tower/src/lib.rs/@/tower.x", "/build/ws/vendor/tower"),
            ("/home/u/common/src/lib.rs/@/common.x", "/home/u/common"),
        ]);
        assert_eq!(layout.workspace_roots, vec!["/build/ws/".to_string()]);
        assert_eq!(layout.missing, None);
        assert_eq!(
            layout.package_of("/build/ws/vendor/tower/src/util.rs"),
            Some("/build/ws/vendor/tower/")
        );
        assert_eq!(layout.package_of("/build/ws/examples/fig2_loops.rs"), None);
        // A vendored crate without a unit of its own lies beside one that has.
        assert!(layout.in_package_collection("/build/ws/vendor/pin-project-lite/src/lib.rs"));
        assert!(layout.in_package_collection(
            "/usr/local/cargo/registry/src/index.crates.io-1949cf8c6b5b557f/futures-util-0.3.31/src/lib.rs"
        ));
        // Beside a path dependency outside the workspace: another package.
        assert!(layout.in_package_collection("/home/u/other/src/lib.rs"));
        // A directory that holds the workspace is not a collection of packages.
        let sibling = units(&[
            ("src/main.rs/@/svc.x", "/home/u/ws"),
            ("/home/u/common/src/lib.rs/@/c.x", "/home/u/common"),
        ]);
        assert!(!sibling.in_package_collection("/home/u/other/src/lib.rs"));
        assert!(!sibling.in_package_collection("/home/u/ws/src/main.rs"));
        assert!(!layout.in_package_collection("/build/ws/examples/fig2_loops.rs"));
    }

    #[test]
    fn no_units_says_why() {
        let layout = units(&[]);
        assert!(layout.workspace_roots.is_empty());
        assert!(layout.missing.is_some());
        let unreadable = BuildLayout::of_file(std::path::Path::new("/nonexistent/binary"));
        assert!(unreadable.missing.is_some_and(|m| m.contains("/nonexistent/binary")));
    }

    #[test]
    fn this_test_binary_records_the_workspace_it_was_built_in() {
        let layout = BuildLayout::current();
        assert_eq!(layout.missing, None, "{layout:?}");
        // Built by cargo from this workspace: rustc ran in the workspace root, whose manifest declares it.
        let root = layout.workspace_roots.first().expect("a workspace root");
        let manifest_dir = env!("CARGO_MANIFEST_DIR");
        assert!(
            with_slash(manifest_dir).starts_with(root.as_str()),
            "{manifest_dir} not under {root}"
        );
        // Dependencies are package roots outside it.
        assert!(layout.package_roots.iter().any(|p| p.contains("/tonic-")), "{layout:?}");
        assert!(layout.package_roots.iter().all(|p| !p.starts_with(root.as_str())));
    }
}
