//! DEVELOPERS.md's module map names files and folders: every one must exist, so a move or a
//! deletion fails here until the map follows. The map is an indented tree: a line at column 0
//! whose first word ends in `/` is a folder of the repository; a line indented two spaces deeper
//! than its parent starts with a file (`.rs`) or folder (`/`) inside it; deeper lines are the
//! description.

use std::path::Path;

fn entry(word: &str) -> bool {
    (word.ends_with('/') || word.ends_with(".rs"))
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_./-".contains(c))
}

/// Every path the map in `text` names, relative to the repository.
fn mapped_paths(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack: Vec<(usize, String)> = Vec::new();
    for line in text.lines() {
        if line.starts_with("```") {
            stack.clear();
            continue;
        }
        let indent = line.len() - line.trim_start().len();
        let Some(word) = line.split_whitespace().next() else {
            continue;
        };
        if indent == 0 {
            stack.clear();
            if word.ends_with('/') && entry(word) {
                out.push(word.to_string());
                stack.push((0, word.to_string()));
            }
            continue;
        }
        while stack.last().is_some_and(|(i, _)| *i >= indent) {
            stack.pop();
        }
        let Some((parent_indent, parent)) = stack.last() else {
            continue;
        };
        if indent == parent_indent + 2 && entry(word) {
            let path = format!("{parent}{word}");
            out.push(path.clone());
            if word.ends_with('/') {
                stack.push((indent, path));
            }
        }
    }
    out
}

#[test]
fn every_path_the_module_map_names_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(root.join("DEVELOPERS.md")).unwrap();
    let paths = mapped_paths(&text);
    assert!(
        paths.len() > 40,
        "only {} paths read: {paths:?}",
        paths.len()
    );
    let missing: Vec<&String> = paths.iter().filter(|p| !root.join(p).exists()).collect();
    assert!(
        missing.is_empty(),
        "DEVELOPERS.md's module map names what does not exist: {missing:?}"
    );
}

#[test]
fn the_map_reader_follows_the_indentation() {
    let map = "```\nsrc/      the crate\n  core/   pure\n    a.rs  one\n          b.rs continued\n  c.rs    two\n```\n  d.rs not in a map\n";
    assert_eq!(
        mapped_paths(map),
        ["src/", "src/core/", "src/core/a.rs", "src/c.rs"]
    );
}
