//! The pure core by construction: no file under src/core names kube, tokio or tracing in its
//! code (a `use`, a path, a macro), so planning, the engines and the admission patch stay plain
//! functions over plain data, and warnings are returned as values.

use std::path::Path;

use crate::function_length::rust_files;

/// The crates the core may not name, found in the code's tokens (comments are not tokens).
fn forbidden_crates(code: &str) -> Vec<&'static str> {
    let stream: proc_macro2::TokenStream = code.parse().expect("Rust tokens");
    let tokens: Vec<String> = stream.into_iter().flat_map(flatten).collect();
    ["kube", "tokio", "tracing"]
        .into_iter()
        .filter(|c| tokens.windows(2).any(|w| w[0] == *c && w[1] == ":"))
        .collect()
}

fn flatten(t: proc_macro2::TokenTree) -> Vec<String> {
    match t {
        proc_macro2::TokenTree::Group(g) => g.stream().into_iter().flat_map(flatten).collect(),
        other => vec![other.to_string()],
    }
}

#[test]
fn the_core_names_no_kube_tokio_or_tracing() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("src/core"), &mut files);
    assert!(files.len() > 20, "src/core read: {files:?}");
    let found: Vec<String> = files
        .iter()
        .filter_map(|f| {
            let crates = forbidden_crates(&std::fs::read_to_string(f).unwrap());
            (!crates.is_empty()).then(|| format!("{}: {crates:?}", f.display()))
        })
        .collect();
    assert!(found.is_empty(), "the core imports IO crates: {found:?}");
}

#[test]
fn the_purity_check_finds_a_use_and_a_macro_but_not_a_comment() {
    assert_eq!(forbidden_crates("use tokio::sync::Mutex;"), ["tokio"]);
    assert_eq!(
        forbidden_crates("fn f() { tracing::warn!(\"x\"); }"),
        ["tracing"]
    );
    assert_eq!(
        forbidden_crates("fn f(o: kube::api::DynamicObject) {}"),
        ["kube"]
    );
    assert!(forbidden_crates("//! no tokio, no kube::Client\nfn f() {}").is_empty());
}
