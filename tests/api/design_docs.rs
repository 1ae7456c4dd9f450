//! docs/design/ names the functions that implement each rule: every name its "Implemented by"
//! and "Test" lines give must exist in the code, so a rename or a deletion fails here until
//! the design page follows.

use std::collections::BTreeSet;
use std::path::Path;

fn rust_sources(dir: &Path, out: &mut String) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push_str(&std::fs::read_to_string(&p).unwrap());
            out.push('\n');
        }
    }
}

/// Backticked names in the paragraphs that start with "Implemented by" or "Test".
fn named(page: &str) -> Vec<String> {
    let mut out = Vec::new();
    for para in page.split("\n\n") {
        let starts = ["Implemented by", "Test:", "Tests:"];
        if !para
            .lines()
            .any(|l| starts.iter().any(|s| l.trim_start().starts_with(s)))
        {
            continue;
        }
        for (i, part) in para.split('`').enumerate() {
            let name = part.trim().trim_end_matches("()");
            let identifier = !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
                && name.chars().next().is_some_and(|c| c.is_ascii_alphabetic());
            // camelCase is a field of an object kerf reads or writes, not a Rust name.
            let field = name.starts_with(|c: char| c.is_ascii_lowercase())
                && name.contains(|c: char| c.is_ascii_uppercase())
                && !name.contains("::");
            if i % 2 == 1 && identifier && !field {
                out.push(name.to_string());
            }
        }
    }
    out
}

fn defined(code: &str, name: &str) -> bool {
    let last = name.rsplit("::").next().unwrap_or(name);
    let is_item = |kw: &str| {
        code.match_indices(&format!("{kw} {last}")).any(|(i, m)| {
            code[i + m.len()..]
                .chars()
                .next()
                .is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '_'))
        })
    };
    if last.chars().next().is_some_and(|c| c.is_ascii_uppercase()) {
        // Types, constants and enum variants: the word must occur in the code.
        return code.match_indices(last).any(|(i, m)| {
            let before = code[..i].chars().next_back();
            let after = code[i + m.len()..].chars().next();
            before.is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '_'))
                && after.is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '_'))
        });
    }
    // Functions, modules and fields; a metric by the field that registers it (prometheus-client
    // names `kerf_<field>`, with `_total` for counters).
    let metric_field = last
        .strip_prefix("kerf_")
        .map(|m| m.strip_suffix("_total").unwrap_or(m))
        .is_some_and(|f| code.contains(&format!("pub {f}:")));
    ["fn", "mod"].iter().any(|kw| is_item(kw))
        || code.contains(&format!("pub {last}:"))
        || code.contains(&format!("pub(crate) {last}:"))
        || code.contains(&format!(" {last}: "))
        || metric_field
}

#[test]
fn design_docs_name_only_functions_that_exist() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut code = String::new();
    for d in ["src", "crates", "tests", "benches"] {
        rust_sources(&root.join(d), &mut code);
    }
    let mut missing = BTreeSet::new();
    let mut checked = 0;
    for e in std::fs::read_dir(root.join("docs/design")).unwrap() {
        let p = e.unwrap().path();
        let page = std::fs::read_to_string(&p).unwrap();
        for name in named(&page) {
            checked += 1;
            if !defined(&code, &name) {
                missing.insert(format!(
                    "{}: {name}",
                    p.file_name().unwrap().to_string_lossy()
                ));
            }
        }
    }
    assert!(checked > 100, "only {checked} names found");
    assert!(
        missing.is_empty(),
        "docs/design names what the code does not define:\n  {}",
        missing.into_iter().collect::<Vec<_>>().join("\n  ")
    );
}
