//! The length limits of DEVELOPERS.md: no function in the core crate (`crates/core`) over 100 lines, none elsewhere
//! over 150. A function is measured from `fn` to its closing brace. Test functions (`#[test]`,
//! `#[tokio::test]`, proptest blocks) are tables of cases and are not measured.
//!
//! `OVER_THE_LIMIT` lists the functions still over their limit, with their length today. It may
//! only shrink: a function not listed that grows over its limit fails, and so does a listed one
//! that grew, or that is now within its limit or gone (remove it from the list).

use std::path::{Path, PathBuf};

use syn::visit::Visit;

/// (file under src/, function name, lines today).
const OVER_THE_LIMIT: &[(&str, &str, usize)] = &[];

fn limit(file: &str) -> usize {
    if file.starts_with("crates/core/") {
        100
    } else {
        150
    }
}

struct Lengths<'a> {
    file: &'a str,
    found: &'a mut Vec<(String, String, usize)>,
}

fn is_test(attrs: &[syn::Attribute]) -> bool {
    // `#[test]`, `#[tokio::test]`: the last segment names it.
    attrs
        .iter()
        .any(|a| a.path().segments.last().is_some_and(|s| s.ident == "test"))
}

impl Lengths<'_> {
    fn measure(&mut self, attrs: &[syn::Attribute], sig: &syn::Signature, block: &syn::Block) {
        if is_test(attrs) {
            return;
        }
        let start = sig.fn_token.span.start().line;
        let end = block.brace_token.span.close().end().line;
        self.found.push((
            self.file.to_string(),
            sig.ident.to_string(),
            end - start + 1,
        ));
    }
}

impl<'ast> Visit<'ast> for Lengths<'_> {
    fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
        self.measure(&f.attrs, &f.sig, &f.block);
        syn::visit::visit_item_fn(self, f);
    }
    fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
        self.measure(&f.attrs, &f.sig, &f.block);
        syn::visit::visit_impl_item_fn(self, f);
    }
    fn visit_trait_item_fn(&mut self, f: &'ast syn::TraitItemFn) {
        if let Some(block) = &f.default {
            self.measure(&f.attrs, &f.sig, block);
        }
        syn::visit::visit_trait_item_fn(self, f);
    }
}

pub(crate) fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Every function of the workspace's crates with its length: (file under the root, name, lines).
fn function_lengths() -> Vec<(String, String, usize)> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&src.join("src"), &mut files);
    rust_files(&src.join("crates"), &mut files);
    let mut found = Vec::new();
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap();
        let parsed = syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let file = path
            .strip_prefix(src)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        Lengths {
            file: &file,
            found: &mut found,
        }
        .visit_file(&parsed);
    }
    found
}

#[test]
fn no_function_over_its_length_limit() {
    let lengths = function_lengths();
    let mut problems = Vec::new();
    for (file, name, lines) in &lengths {
        if *lines <= limit(file) {
            continue;
        }
        match OVER_THE_LIMIT
            .iter()
            .find(|(f, n, _)| f == file && n == name)
        {
            None => problems.push(format!(
                "{file} `{name}`: {lines} lines, over the limit of {}; split it into functions \
                 named after what each decides",
                limit(file)
            )),
            Some((_, _, today)) if lines > today => problems.push(format!(
                "{file} `{name}`: {lines} lines, longer than the {today} listed; split it instead"
            )),
            Some(_) => {}
        }
    }
    for (file, name, today) in OVER_THE_LIMIT {
        let now = lengths
            .iter()
            .filter(|(f, n, _)| f == file && n == name)
            .map(|(_, _, l)| *l)
            .max();
        match now {
            None => problems.push(format!(
                "{file} `{name}` is gone: remove it from OVER_THE_LIMIT"
            )),
            Some(l) if l <= limit(file) => problems.push(format!(
                "{file} `{name}` is {l} lines now, within its limit: remove it from OVER_THE_LIMIT"
            )),
            Some(l) if l < *today => problems.push(format!(
                "{file} `{name}` is {l} lines now: lower its entry in OVER_THE_LIMIT from {today}"
            )),
            Some(_) => {}
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_length_check_measures_from_fn_to_the_closing_brace() {
    let parsed =
        syn::parse_file("fn a() {\n    let x = 1;\n    x;\n}\n#[test]\nfn b() {\n}\n").unwrap();
    let mut found = Vec::new();
    Lengths {
        file: "core/x.rs",
        found: &mut found,
    }
    .visit_file(&parsed);
    assert_eq!(found, vec![("core/x.rs".to_string(), "a".to_string(), 4)]);
}
