#![forbid(unsafe_code)]

use std::io::IsTerminal;

use clap::Parser;

/// mimalloc instead of the C library's allocator: a cycle makes millions of small allocations,
/// which glibc's and musl's allocators serve slower. Its v2 line (Cargo feature `v2`) hands freed
/// pages back to the OS sooner than v3, so one phase's freed memory does not stay resident into
/// the next; built without transparent huge pages (`no_thp`), whose partly used 2 MiB pages
/// count whole in RSS (figures in docs/performance.md).
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
    // reader rate-limited and with the fix (`src/sources/kube/watch_errors.rs`), the writer, the Lease — so
    // those lines are left out, unless RUST_LOG names a kube crate itself.
    if !std::env::var("RUST_LOG").is_ok_and(|v| v.contains("kube")) {
        for directive in [
            "kube_client::client::builder=off",
            "kube_runtime::watcher=error",
        ] {
            filter = filter.add_directive(directive.parse().expect("a valid directive"));
        }
    }
    let cli = kerf::cli::Cli::parse();
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match cli.log_format {
        kerf::cli::LogFormat::Text => logs.with_ansi(ansi).init(),
        // Each line names the spans it is in, outermost first: a write's line carries the cycle
        // that planned it.
        kerf::cli::LogFormat::Json => logs
            .json()
            .with_current_span(true)
            .with_span_list(true)
            .init(),
    }
    match kerf::cli::run(cli).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
