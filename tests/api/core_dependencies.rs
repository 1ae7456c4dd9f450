//! The pure core by construction: the core crate's dependency tree (what `cargo tree` prints for
//! it) has no kube client or runtime, no async runtime, no logging, no HTTP or TLS stack and no
//! compressor, so planning, the engines and the admission patch cannot do IO — the compiler
//! refuses it. kube-core's types and k8s-openapi are allowed.

use std::process::Command;

/// The crates the core may not depend on, directly or through another crate.
const IO_CRATES: &[&str] = &[
    "kube-client",
    "kube-runtime",
    "tokio",
    "tracing",
    "reqwest",
    "hyper",
    "axum",
    "rustls",
    "flate2",
];

/// The package names of `cargo tree -p <package> -e normal` (every normal dependency, at any
/// depth, once).
fn dependency_tree(package: &str) -> Vec<String> {
    let out = Command::new(env!("CARGO"))
        .args([
            "tree",
            "--offline",
            "-p",
            package,
            "-e",
            "normal",
            "--prefix",
            "none",
        ])
        .args(["--format", "{p}", "--no-dedupe"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo runs");
    assert!(
        out.status.success(),
        "cargo tree -p {package}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut names: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect();
    names.sort();
    names.dedup();
    names
}

fn io_crates_in(tree: &[String]) -> Vec<&'static str> {
    IO_CRATES
        .iter()
        .copied()
        .filter(|c| tree.iter().any(|n| n == c))
        .collect()
}

#[test]
fn the_core_crate_depends_on_no_io_crate() {
    for package in ["kerf-core", "kerf-api", "kerf-support"] {
        let tree = dependency_tree(package);
        assert!(
            tree.iter().any(|n| n == "serde"),
            "{package}'s tree read: {tree:?}"
        );
        assert_eq!(
            io_crates_in(&tree),
            Vec::<&str>::new(),
            "{package} depends on IO crates"
        );
    }
}

#[test]
fn the_dependency_check_finds_io_crates_in_the_io_crate() {
    let tree = dependency_tree("kerf");
    assert_eq!(io_crates_in(&tree), IO_CRATES, "{tree:?}");
}
