#![forbid(unsafe_code)]

use std::io::IsTerminal;

use clap::Parser;

/// mimalloc instead of the C library's allocator: a cycle makes millions of small allocations
/// (glibc's malloc/free were ~30 % of its CPU), and the image's musl allocator is slower still
/// (docs/performance.md). Its v2 line (Cargo feature `v2`): v2 hands freed pages back to the OS
/// after 10 ms, v3 after 1 s, which kept one phase's freed memory resident into the next and
/// raised a cycle's peak RSS by tens of MiB.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    // One rustls provider for the whole process (ring), installed before any TLS use.
    let _ = rustls::crypto::ring::default_provider().install_default();
    // Colours only on a terminal: `kubectl logs` and log collectors get plain lines.
    let ansi = std::io::stderr().is_terminal()
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let mut filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // kube logs every failed request (its client's trace layer, at error) and every failed
    // watch retry (its watcher, at warn). kerf reports each failure where it happens — the
    // reader rate-limited and with the fix (`src/sources/kube/mod.rs`), the writer, the Lease — so
    // those lines are left out, unless RUST_LOG names a kube crate itself.
    if !std::env::var("RUST_LOG").is_ok_and(|v| v.contains("kube")) {
        for directive in [
            "kube_client::client::builder=off",
            "kube_runtime::watcher=error",
        ] {
            filter = filter.add_directive(directive.parse().expect("a valid directive"));
        }
    }
    tracing_subscriber::fmt()
        .with_ansi(ansi)
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    match kerf::cli::run(kerf::cli::Cli::parse()).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
