//! `dei-collector`: serve (receive, analyze, forward) and analyze files offline.

/// jemalloc: the collector decodes and frees many small OTLP objects per request (glibc's allocator spent a
/// third of the time in `malloc`/`free` under load), and large request buffers whose lifetimes differ (queued
/// for forwarding, records waiting for the analysis). Its background threads return freed pages to the system
/// after 200 ms (`dirty_decay_ms`, set at build time in `.cargo/config.toml`; `_RJEM_MALLOC_CONF` overrides it
/// at run time), off the request path: mimalloc, used before, kept them for a second and would have purged on
/// the request path (BENCHMARKS.md, row 10).
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> std::process::ExitCode {
    dei_collector::cli::main()
}
