//! Call-stack capture: the `t` of an invocation signature `s(p)^t`.
//!
//! A capture walks the current thread's stack ([`StackWalker`]: saved frame pointers where the build has them,
//! the DWARF unwinder otherwise), stops at the async runtime's task machinery
//! (nothing outside it belongs to the request, and what is there varies with the worker that polled the task),
//! looks each address up in a per-address symbol cache (a warm capture only compares each address with the few
//! known boundary addresses and looks the whole walk up at once) and keeps only the application's frames
//! (see `filter`): unfiltered stacks are not deterministic in async Rust. Frames are keyed by
//! (workspace-relative file, line, column); function names are kept for display. A `#[track_caller]` call site
//! ([`CallSiteExt`]) becomes the innermost frame. What the binary offers is detected once ([`StackMode`]).
//!
//! ```
//! use dei_instrumentation::stack::{StackCapturer, StackConfig, StackMode};
//! let capturer = StackCapturer::new(StackConfig::default());
//! assert_eq!(capturer.mode(), StackMode::LineTables); // the workspace profiles keep line tables
//! // One call site, captured twice: one stack.
//! let stacks: Vec<_> = (0..2).map(|_| capturer.capture()).collect();
//! assert_eq!(stacks[0].digest(), stacks[1].digest());
//! assert!(!stacks[0].is_empty());
//! ```

mod build_layout;
mod cache;
mod call_site;
pub(crate) mod filter;
// The crate's one audited `unsafe` module (see its documentation); `unsafe_code` is denied everywhere else.
#[allow(unsafe_code)]
mod frame_pointer;
mod mode;
mod symbol_table;
mod walker;

pub use call_site::{AtCallSite, CallSiteExt, at_call_site};
pub use mode::{StackMode, detect as detect_mode};
pub use walker::StackWalker;
use walker::Walk;

use crate::interned::Interned;
use cache::{AppFrame, Resolved, SymbolCache};
use dei_propagator::{CallStack, Frame, StackDigest};
use filter::FrameFilter;
use opentelemetry::StringValue;
use sha2::{Digest, Sha256};
use std::collections::{HashMap, HashSet};
use std::hash::BuildHasherDefault;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};

/// Raw frames unwound at most per capture.
const MAX_RAW_FRAMES: usize = 256;

/// Distinct stacks remembered at most (beyond that, new stacks are digested on every capture).
const MAX_CACHED_STACKS: usize = 65_536;

/// Stacks by (call-site location address, the addresses walked): a warm capture is an unwind to a known
/// boundary ([`Boundaries`]) and one lookup here — no lookup per address, no digest. A stack is kept under the
/// walk that resolved it (up to its boundary or depth limit) and under the whole walk to its boundary.
type StackMap = HashMap<(usize, Vec<usize>), Arc<StackEntry>, BuildHasherDefault<cache::AddressHasher>>;

thread_local! {
    /// The buffer a capture on this thread collects return addresses in: a warm capture gives it back after its
    /// lookup, so that it does not allocate; a new stack keeps it as its key.
    static WALKED: std::cell::Cell<Vec<usize>> = const { std::cell::Cell::new(Vec::new()) };
}

/// Returns a capture's buffer to [`WALKED`] (dropped if the thread's locals are being destroyed).
fn give_back(walked: Vec<usize>) {
    let _ = WALKED.try_with(|cell| cell.set(walked));
}

/// Stack-capture settings.
#[derive(Clone, Debug)]
pub struct StackConfig {
    /// The root that files are named relative to; read from the binary when `None` (see
    /// [`StackConfig::workspace_root`]).
    pub workspace_root: Option<PathBuf>,
    /// Substrings of a file path or function name that keep a frame even where the built-in rules drop it
    /// (for example a vendored library that is part of the application).
    pub allow: Vec<String>,
    /// Substrings of a file path or function name that drop a frame (for example generated code).
    pub deny: Vec<String>,
    /// Application frames kept at most, innermost first.
    pub max_depth: usize,
    /// Forces a mode instead of detecting one; forcing an unwinding mode the binary cannot support falls back
    /// to what it can.
    pub mode: Option<StackMode>,
    /// How the stack is walked ([`StackWalker::Auto`] by default).
    pub walker: StackWalker,
}

impl Default for StackConfig {
    /// Detected root, mode and walker, no allow or deny entries, 32 frames.
    fn default() -> Self {
        StackConfig {
            workspace_root: None,
            allow: Vec::new(),
            deny: Vec::new(),
            max_depth: 32,
            mode: None,
            walker: StackWalker::Auto,
        }
    }
}

impl StackConfig {
    /// Names files relative to this directory: the directory the binary was *built* in, for a binary whose
    /// debug info does not say (a separate debug file). Without it, the root is `DEI_WORKSPACE_ROOT`, then the
    /// workspace root recorded in the executable's debug info. Neither the current directory nor where the
    /// binary lies plays a part.
    pub fn workspace_root(mut self, root: impl Into<PathBuf>) -> Self {
        self.workspace_root = Some(root.into());
        self
    }

    /// Adds an allow-list entry.
    pub fn allow(mut self, pattern: impl Into<String>) -> Self {
        self.allow.push(pattern.into());
        self
    }

    /// Adds a deny-list entry.
    pub fn deny(mut self, pattern: impl Into<String>) -> Self {
        self.deny.push(pattern.into());
        self
    }

    /// Sets the maximum number of application frames.
    pub fn max_depth(mut self, depth: usize) -> Self {
        self.max_depth = depth;
        self
    }

    /// Forces a mode.
    pub fn mode(mut self, mode: StackMode) -> Self {
        self.mode = Some(mode);
        self
    }

    /// Chooses how the stack is walked.
    pub fn walker(mut self, walker: StackWalker) -> Self {
        self.walker = walker;
        self
    }
}

/// A captured stack: its digest, its frames for display and the mode it was captured in. Cheap to clone.
#[derive(Clone, Debug)]
pub struct CapturedStack {
    entry: Arc<StackEntry>,
    mode: StackMode,
    walker: StackWalker,
}

/// One distinct stack: shared by every capture that walked the same addresses from the same call site.
#[derive(Debug)]
struct StackEntry {
    digest: StackDigest,
    call_site: Option<Frame>,
    frames: Vec<Arc<[AppFrame]>>,
    max_depth: usize,
    readable: OnceLock<Arc<str>>,
    digest_hex: OnceLock<StringValue>,
    /// Set once this entry's frames were claimed for a span ([`CapturedStack::claim_frames`]).
    frames_claimed: AtomicBool,
}

/// Distinct stack digests whose frames went on a span in this process, at most [`MAX_CACHED_STACKS`]; past
/// that, frames are recorded for every new entry.
fn frames_recorded() -> &'static Mutex<HashSet<StackDigest>> {
    static RECORDED: OnceLock<Mutex<HashSet<StackDigest>>> = OnceLock::new();
    RECORDED.get_or_init(Mutex::default)
}

/// At most this many stack digests' hex forms are interned for the life of the process (about 400 KiB); the
/// hex forms of further stacks are reference-counted.
const MAX_INTERNED_HEX: usize = 4096;

/// The hex form of `digest` as a span attribute value: interned (static) while fewer than
/// [`MAX_INTERNED_HEX`] are.
fn interned_hex(digest: &StackDigest) -> StringValue {
    static HEX: OnceLock<Interned<StackDigest, str>> = OnceLock::new();
    let interned = HEX.get_or_init(|| Interned::new(MAX_INTERNED_HEX, "stack digests in hex"));
    match interned.get_or_make(digest, || (*digest, digest.to_hex().into_boxed_str())) {
        Some(hex) => StringValue::from(hex),
        None => StringValue::from(Arc::<str>::from(digest.to_hex())),
    }
}

impl CapturedStack {
    /// The stack digest (SHA-256 over `file:line:column\n` per frame, innermost first; see
    /// [`CallStack::digest`]).
    pub fn digest(&self) -> StackDigest {
        self.entry.digest
    }

    /// The mode the stack was captured in.
    pub fn mode(&self) -> StackMode {
        self.mode
    }

    /// How the stack was walked: [`StackWalker::Dwarf`] or [`StackWalker::FramePointers`] (never `Auto`).
    pub fn walker(&self) -> StackWalker {
        self.walker
    }

    fn iter(&self) -> impl Iterator<Item = &Frame> {
        let e = &*self.entry;
        e.call_site
            .iter()
            .chain(e.frames.iter().flat_map(|group| group.iter().map(|f| &f.frame)))
            .take(e.max_depth)
    }

    /// The frames as a [`CallStack`], innermost first.
    pub fn to_call_stack(&self) -> CallStack {
        CallStack::new(self.iter().cloned().collect())
    }

    /// Readable frames, one per line, innermost first (the `dei.stack` attribute).
    pub fn readable(&self) -> String {
        self.readable_shared().to_string()
    }

    /// [`readable`](Self::readable), built once per distinct stack and shared.
    pub fn readable_shared(&self) -> Arc<str> {
        self.entry
            .readable
            .get_or_init(|| {
                let mut out = String::new();
                for (i, frame) in self.iter().enumerate() {
                    if i > 0 {
                        out.push('\n');
                    }
                    out.push_str(&frame.to_string());
                }
                out.into()
            })
            .clone()
    }

    /// The digest's 64-character hex form.
    pub fn digest_hex(&self) -> Arc<str> {
        self.digest_hex_value().as_str().into()
    }

    /// [`digest_hex`](Self::digest_hex) as the `dei.stack.digest` value: built once per distinct stack, and
    /// static for the first [`MAX_INTERNED_HEX`] digests of the process (a copy of it touches no reference
    /// count that the exporter's thread, which drops it, shares).
    pub(crate) fn digest_hex_value(&self) -> StringValue {
        self.entry
            .digest_hex
            .get_or_init(|| interned_hex(&self.entry.digest))
            .clone()
    }

    /// True the first time in this process that the frames of this stack's digest are asked to go on a span
    /// (`dei.stack`, recorded once per distinct stack: [`crate::config::StackFrames::OncePerStack`]); false
    /// afterwards. The check is one atomic load once a stack's frames were recorded.
    pub(crate) fn claim_frames(&self) -> bool {
        let entry = &*self.entry;
        if entry.frames_claimed.load(Ordering::Relaxed) || entry.frames_claimed.swap(true, Ordering::AcqRel) {
            return false;
        }
        // The first claim through this entry: another capturer (another configuration) may have recorded the
        // same digest already.
        let mut recorded = frames_recorded().lock().unwrap_or_else(|p| p.into_inner());
        if recorded.len() >= MAX_CACHED_STACKS {
            return !recorded.contains(&entry.digest);
        }
        recorded.insert(entry.digest)
    }

    /// Number of application frames.
    pub fn len(&self) -> usize {
        self.iter().count()
    }

    /// True when no application frame was found.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// How many of the runtime's boundary addresses a capturer remembers for its warm path.
const MAX_BOUNDARIES: usize = 8;

/// Return addresses where walks stopped at the runtime's task machinery ([`Resolved::Boundary`]), at most
/// [`MAX_BOUNDARIES`]: a warm capture compares each address it walks with these few, where looking each one up
/// in the symbol cache reads a line of a large table per frame, which a busy service has evicted between two
/// captures.
#[derive(Debug, Default)]
struct Boundaries([std::sync::atomic::AtomicUsize; MAX_BOUNDARIES]);

impl Boundaries {
    /// The addresses known now (an address is never 0).
    fn known(&self) -> ([usize; MAX_BOUNDARIES], usize) {
        let mut out = [0; MAX_BOUNDARIES];
        let mut n = 0;
        for slot in &self.0 {
            let ip = slot.load(Ordering::Relaxed);
            if ip == 0 {
                break;
            }
            out[n] = ip;
            n += 1;
        }
        (out, n)
    }

    /// Remembers `ip` (once; not past [`MAX_BOUNDARIES`]).
    fn add(&self, ip: usize) {
        for slot in &self.0 {
            match slot.compare_exchange(0, ip, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return,
                Err(known) if known == ip => return,
                Err(_) => {}
            }
        }
    }
}

/// Captures filtered application stacks; cheap to clone (the cache is shared).
#[derive(Clone, Debug)]
pub struct StackCapturer {
    inner: Arc<CapturerInner>,
}

#[derive(Debug)]
struct CapturerInner {
    filter: FrameFilter,
    cache: SymbolCache,
    stacks: RwLock<StackMap>,
    boundaries: Boundaries,
    /// Captures that the warm path served (for tests).
    #[cfg(test)]
    warm_hits: std::sync::atomic::AtomicUsize,
    mode: StackMode,
    walk: Walk,
    max_depth: usize,
}

impl StackCapturer {
    /// A capturer with its own cache; detects the mode unless the configuration forces one.
    pub fn new(config: StackConfig) -> Self {
        Self::with_walk_choice(config, Walk::choose)
    }

    /// [`new`](Self::new), resolving the requested walker with `choose` (tests stand in a binary without
    /// frame pointers this way).
    fn with_walk_choice(config: StackConfig, choose: impl FnOnce(StackWalker) -> Walk) -> Self {
        let detected = mode::detect();
        let mode = match config.mode {
            None => detected,
            Some(StackMode::CallSiteOnly) => StackMode::CallSiteOnly,
            Some(StackMode::LineTables) if detected == StackMode::LineTables => StackMode::LineTables,
            Some(StackMode::SymbolsOnly | StackMode::LineTables) if detected != StackMode::Stripped => {
                StackMode::SymbolsOnly
            }
            Some(_) => StackMode::Stripped,
        };
        if mode != StackMode::LineTables && config.mode.is_none() {
            tracing::warn!(
                mode = mode.as_str(),
                "dei: the binary has no line tables; call stacks fall back to {mode} \
                 (build with `debug = \"line-tables-only\"` for the full index)"
            );
        }
        StackCapturer {
            inner: Arc::new(CapturerInner {
                filter: FrameFilter::new(config.workspace_root.as_deref(), config.allow, config.deny),
                cache: SymbolCache::new(),
                stacks: RwLock::new(StackMap::default()),
                boundaries: Boundaries::default(),
                #[cfg(test)]
                warm_hits: std::sync::atomic::AtomicUsize::new(0),
                walk: if mode.unwinds() {
                    choose(config.walker)
                } else {
                    Walk::Dwarf
                },
                mode,
                max_depth: config.max_depth,
            }),
        }
    }

    /// The mode in use.
    pub fn mode(&self) -> StackMode {
        self.inner.mode
    }

    /// The walker in use: [`StackWalker::Dwarf`] or [`StackWalker::FramePointers`] (with `Auto`, frame
    /// pointers where the binary has them).
    pub fn walker(&self) -> StackWalker {
        self.inner.walk.kind()
    }

    /// The directory the binary's workspace was built in, as frames are named relative to it: the configured
    /// root, `DEI_WORKSPACE_ROOT`, or the one the executable's debug info records (`None` when none is known,
    /// and frames keep absolute paths; a warning says so at start-up).
    pub fn workspace_root(&self) -> Option<&str> {
        self.inner.filter.root()
    }

    /// Number of addresses symbolized so far.
    pub fn cached_addresses(&self) -> usize {
        self.inner.cache.len()
    }

    /// Captures the current stack, with the innermost marked call site ([`CallSiteExt`]) if any.
    #[inline(never)]
    pub fn capture(&self) -> CapturedStack {
        self.capture_at(call_site::current())
    }

    /// [`capture`](Self::capture) for this crate's layers, without a frame of its own: one unwinder step fewer
    /// per call (about a microsecond with cold caches). The public `capture` keeps its frame, so that its
    /// caller's frame is resolved with its full name (the symbolizer names the function that an inlined call
    /// sits in by its short name).
    #[inline(always)]
    pub(crate) fn capture_inlined(&self) -> CapturedStack {
        self.capture_at(call_site::current())
    }

    /// Captures the current stack with `call_site` (a `#[track_caller]` location) as innermost frame.
    #[inline(never)]
    pub fn capture_at(&self, call_site: Option<&'static std::panic::Location<'static>>) -> CapturedStack {
        let inner = &*self.inner;
        let site_key = call_site.map_or(0, |loc| std::ptr::from_ref(loc) as usize);
        // (A capture while the thread's locals are being destroyed allocates instead.)
        let mut seen = WALKED.try_with(std::cell::Cell::take).unwrap_or_default();
        seen.clear();
        // Warm path: walk up to a known boundary, comparing each address with those few only, and look the whole
        // walk up at once (stacks are kept under this key too, see below).
        let mut whole_walk = None;
        if inner.mode.unwinds() {
            seen.reserve(48);
            let (known, n) = inner.boundaries.known();
            let known = &known[..n];
            // A stack deeper than this before its boundary takes the path below (walked twice, then).
            let limit = (4 * inner.max_depth).clamp(16, MAX_RAW_FRAMES);
            let mut at_boundary = false;
            let walker = inner.walk.walk(&mut |ip| {
                if known.contains(&ip) {
                    at_boundary = true;
                    return false;
                }
                seen.push(ip);
                seen.len() < limit
            });
            if at_boundary {
                let key = (site_key, seen);
                if let Some(entry) = inner.cached_stack(&key) {
                    #[cfg(test)]
                    inner.warm_hits.fetch_add(1, Ordering::Relaxed);
                    give_back(key.1);
                    return CapturedStack {
                        entry,
                        mode: inner.mode,
                        walker,
                    };
                }
                whole_walk = Some(key);
                seen = Vec::with_capacity(48);
            } else {
                seen.clear();
            }
        }
        let mut warm = true;
        let mut walker = StackWalker::Dwarf; // what a mode that does not unwind reports
        if inner.mode.unwinds() {
            // Look each address up while walking, and stop at the runtime boundary or once enough application
            // frames were found. Addresses not cached yet are resolved afterwards.
            let mut kept = usize::from(call_site.is_some());
            let mut boundary = None;
            let map = inner.cache.read();
            walker = inner.walk.walk(&mut |ip| {
                match map.get(&ip) {
                    Some(Resolved::Boundary) => {
                        boundary = Some(ip);
                        return false;
                    }
                    Some(Resolved::Skip) => {}
                    Some(Resolved::App(group)) => kept += group.len(),
                    None => warm = false,
                }
                seen.push(ip);
                kept < inner.max_depth && seen.len() < MAX_RAW_FRAMES
            });
            drop(map);
            if let Some(ip) = boundary {
                inner.boundaries.add(ip);
            }
        }
        let key = (site_key, seen);
        let cached = if warm { inner.cached_stack(&key) } else { None };
        let (entry, walker) = match cached {
            Some(entry) => {
                give_back(key.1);
                (entry, walker)
            }
            None => inner.new_stack(call_site, key, walker),
        };
        if let Some(whole) = whole_walk {
            inner.remember(whole, &entry);
        }
        CapturedStack {
            entry,
            mode: inner.mode,
            walker,
        }
    }
}

impl CapturerInner {
    /// The stack kept under `key` (call site, addresses walked), if any.
    fn cached_stack(&self, key: &(usize, Vec<usize>)) -> Option<Arc<StackEntry>> {
        self.stacks.read().unwrap_or_else(|p| p.into_inner()).get(key).cloned()
    }

    /// Keeps `entry` under a warm path's key as well: the whole walk up to a known boundary.
    #[inline(never)]
    fn remember(&self, whole_walk: (usize, Vec<usize>), entry: &Arc<StackEntry>) {
        let mut stacks = self.stacks.write().unwrap_or_else(|p| p.into_inner());
        if stacks.len() < MAX_CACHED_STACKS {
            stacks.entry(whole_walk).or_insert_with(|| entry.clone());
        }
    }

    /// A stack not seen yet: symbolizes the misses in order (stopping at the boundary), digests, and remembers
    /// the stack under what was walked. Kept out of [`StackCapturer::capture_at`], so that the frame that every
    /// capture walks through stays small.
    ///
    /// A stack walked through frame pointers is checked against the DWARF unwinder here, once per distinct
    /// stack: code built without frame pointers on the way (a doctest, a C library calling back) breaks the
    /// chain in ways that can differ from walk to walk, and the first disagreement turns frame pointers off
    /// for the process.
    #[inline(never)]
    fn new_stack(
        &self,
        call_site: Option<&'static std::panic::Location<'static>>,
        key: (usize, Vec<usize>),
        mut walker: StackWalker,
    ) -> (Arc<StackEntry>, StackWalker) {
        let inner = self;
        let mut frames = self.app_frames(&key.1, call_site.is_some());
        if walker == StackWalker::FramePointers
            && let Some(unwound) = self.disagreeing_unwind(&key.1, call_site.is_some())
        {
            walker::distrust_frame_pointers();
            frames = self.app_frames(&unwound, call_site.is_some());
            walker = StackWalker::Dwarf;
        }
        let call_site = call_site.map(|loc| {
            Frame::new(
                inner.filter.relative(std::path::Path::new(loc.file())),
                loc.line(),
                loc.column(),
            )
        });
        let mut hasher = Sha256::new();
        let mut taken = 0;
        if let Some(f) = &call_site {
            hasher.update(format!("{}:{}:{}\n", f.file, f.line, f.column).as_bytes());
            taken += 1;
        }
        'outer: for group in &frames {
            for f in group.iter() {
                if taken >= inner.max_depth {
                    break 'outer;
                }
                hasher.update(f.key.as_bytes());
                taken += 1;
            }
        }
        let entry = Arc::new(StackEntry {
            digest: StackDigest(hasher.finalize().into()),
            call_site,
            frames,
            max_depth: inner.max_depth,
            readable: OnceLock::new(),
            digest_hex: OnceLock::new(),
            frames_claimed: AtomicBool::new(false),
        });
        // Keyed by what was walked: after a cold walk (which went past the boundary) the key is one that a
        // warm walk never produces, which is harmless.
        let (site, mut walked) = key;
        // The walk's buffer has room to spare: a cached key keeps only what it holds (shrunk before locking).
        walked.shrink_to_fit();
        let mut stacks = inner.stacks.write().unwrap_or_else(|p| p.into_inner());
        if stacks.len() < MAX_CACHED_STACKS {
            stacks.insert((site, walked), entry.clone());
        } else {
            give_back(walked);
        }
        drop(stacks);
        (entry, walker)
    }

    /// Unwinds with DWARF and compares with `walked` (a frame-pointer walk from [`StackCapturer::capture_at`]):
    /// `None` when both give the same application frames, else the return addresses to use instead. The two
    /// walks start in different places (this function, the walker's own functions), so they are compared from
    /// the first return address they share: the one into `capture_at`'s caller.
    #[inline(never)]
    fn disagreeing_unwind(&self, walked: &[usize], call_site: bool) -> Option<Vec<usize>> {
        let mut unwound = Vec::new();
        backtrace::trace(|frame| {
            unwound.push(frame.ip() as usize);
            unwound.len() < MAX_RAW_FRAMES
        });
        let Some((i, j)) = walked
            .iter()
            .enumerate()
            .find_map(|(i, ip)| unwound.iter().position(|u| u == ip).map(|j| (i, j)))
        else {
            return Some(unwound);
        };
        let keys = |ips: &[usize]| -> Vec<Box<str>> {
            self.app_frames(ips, call_site)
                .iter()
                .flat_map(|group| group.iter().map(|f| f.key.clone()))
                .collect()
        };
        if keys(&walked[i..]) == keys(&unwound[j..]) {
            None
        } else {
            // The walk is right up to the shared address (this crate's own frames, checked at start-up).
            Some([&walked[..i], &unwound[j..]].concat())
        }
    }

    /// The application frames among `ips` (innermost first), up to the runtime's boundary and the depth
    /// limit; `call_site` says whether a call-site frame comes first.
    fn app_frames(&self, ips: &[usize], call_site: bool) -> Vec<Arc<[AppFrame]>> {
        let mut frames: Vec<Arc<[AppFrame]>> = Vec::new();
        let mut kept = usize::from(call_site);
        for &ip in ips {
            let group = match self.cache.resolve(ip, &self.filter, self.mode) {
                Resolved::Boundary => break,
                Resolved::Skip => continue,
                Resolved::App(group) => group,
            };
            kept += group.len();
            frames.push(group);
            if kept >= self.max_depth {
                break;
            }
        }
        frames
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[inline(never)]
    fn site_a(c: &StackCapturer) -> CapturedStack {
        c.capture()
    }

    #[inline(never)]
    fn site_b(c: &StackCapturer) -> CapturedStack {
        c.capture()
    }

    #[test]
    fn call_sites_differ_and_repeat() {
        // This crate's own frames are dropped by default; the allow list keeps this file's.
        let c = StackCapturer::new(StackConfig::default().allow("src/stack/mod.rs"));
        // Two captures from one call site (a loop), and one from another.
        let mut a = Vec::new();
        for _ in 0..2 {
            a.push(site_a(&c));
        }
        let (a1, a2) = (&a[0], &a[1]);
        let b = site_b(&c);
        assert_eq!(a1.digest(), a2.digest(), "{}\n--\n{}", a1.readable(), a2.readable());
        assert_ne!(a1.digest(), b.digest());
        assert_eq!(
            a1.digest(),
            a1.to_call_stack().digest(),
            "digest matches the model's rule"
        );
        assert!(!a1.readable().contains(".cargo/registry"), "{}", a1.readable());
        assert!(a1.readable().contains("site_a"), "{}", a1.readable());
    }

    async fn inner_async(c: &StackCapturer) -> CapturedStack {
        async { c.capture() }.await
    }

    /// A capturer that keeps this file's frames, and a multi-thread runtime to capture in.
    fn capturer_and_runtime() -> (StackCapturer, tokio::runtime::Runtime) {
        let c = StackCapturer::new(StackConfig::default().allow("src/stack/mod.rs"));
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .build()
            .expect("runtime");
        (c, rt)
    }

    #[test]
    fn async_frames_are_named_by_the_function_they_sit_in() {
        let (c, rt) = capturer_and_runtime();
        let captured = rt.block_on(async { tokio::spawn(async move { inner_async(&c).await }).await.expect("task") });
        let stack = captured.to_call_stack();
        assert!(!stack.frames.is_empty(), "{}", captured.readable());
        for f in &stack.frames {
            let name = f.function.as_deref().unwrap_or_default();
            // a bare `{async_block#0}` or `{closure#0}` names nothing a reader can find
            assert!(
                name.contains("::"),
                "frame without a path: {name:?} in\n{}",
                captured.readable()
            );
        }
        assert!(captured.readable().contains("inner_async"), "{}", captured.readable());
    }

    #[inline(never)]
    fn site_in_task(c: &StackCapturer, n: usize) -> CapturedStack {
        // Two call sites in one task, chosen at run time: two stacks.
        if n.is_multiple_of(2) { site_a(c) } else { site_b(c) }
    }

    #[test]
    fn warm_captures_in_tasks_take_the_whole_walk_and_give_the_same_stacks() {
        let (c, rt) = capturer_and_runtime();
        let stacks: Vec<CapturedStack> = rt.block_on(async {
            let mut out = Vec::new();
            for n in 0..40 {
                let c = c.clone();
                out.push(tokio::spawn(async move { site_in_task(&c, n) }).await.expect("task"));
            }
            out
        });
        // Every capture from one call site has the one digest, from the first (cold) to the last (warm).
        for (n, s) in stacks.iter().enumerate() {
            assert_eq!(s.digest(), stacks[n % 2].digest(), "capture {n}:\n{}", s.readable());
        }
        assert_ne!(stacks[0].digest(), stacks[1].digest());
        assert!(stacks[0].readable().contains("site_a"), "{}", stacks[0].readable());
        // The walks stopped at the runtime's task machinery, which is now known by address ...
        let (known, n) = c.inner.boundaries.known();
        assert!(n >= 1, "no boundary learned");
        // ... and, after a few captures of each stack (the first resolves, the next learn the boundary and keep
        // the stack under the whole walk), the warm path served the rest.
        let hits = c.inner.warm_hits.load(Ordering::Relaxed);
        assert!(hits >= 30, "{hits} of 40 captures warm; boundaries {:?}", &known[..n]);
    }

    /// Return addresses from here outwards, through one more frame of this module.
    #[inline(never)]
    fn walk_one_level_down() -> Vec<usize> {
        let mut ips = Vec::new();
        backtrace::trace(|frame| {
            ips.push(frame.ip() as usize);
            true
        });
        std::hint::black_box(ips)
    }

    #[inline(never)]
    fn outer_frame_for_the_check(c: &StackCapturer) {
        let walked = walk_one_level_down();
        // The same stack: no disagreement, whatever the innermost frames were.
        assert_eq!(c.inner.disagreeing_unwind(&walked, false), None);
        // A walk that went astray past the shared frames (the test's frame repeated, as a broken chain can make
        // it): the unwind's frames are offered instead.
        let test_frame = walked.iter().position(|ip| {
            c.inner
                .app_frames(&[*ip], false)
                .iter()
                .flat_map(|g| g.iter())
                .any(|f| {
                    f.frame
                        .function
                        .as_deref()
                        .is_some_and(|n| n.contains("frame_pointer_walks_are_checked"))
                })
        });
        let i = test_frame.expect("the test's own frame is an application frame");
        let mut astray = walked.clone();
        astray.insert(i, walked[i]);
        let instead = c.inner.disagreeing_unwind(&astray, false).expect("disagreement");
        assert!(c.inner.disagreeing_unwind(&instead, false).is_none());
        // A walk sharing nothing with the unwind is replaced whole.
        assert!(c.inner.disagreeing_unwind(&[1, 2, 3], false).is_some());
    }

    #[test]
    fn frame_pointer_walks_are_checked_against_the_unwinder() {
        let c = StackCapturer::new(StackConfig::default().allow("stack::tests").walker(StackWalker::Dwarf));
        outer_frame_for_the_check(&c);
    }

    #[test]
    fn max_depth_and_call_site_only() {
        let c = StackCapturer::new(StackConfig::default().allow("src/stack/mod.rs").max_depth(1));
        assert_eq!(site_a(&c).len(), 1);
        let fast = StackCapturer::new(StackConfig::default().mode(StackMode::CallSiteOnly));
        assert!(site_a(&fast).is_empty());
        let marked = futures::executor::block_on(async { async { site_a(&fast) }.at_call_site().await });
        assert_eq!(marked.len(), 1);
        assert!(marked.readable().contains("src/stack/mod.rs"), "{}", marked.readable());
    }
}
