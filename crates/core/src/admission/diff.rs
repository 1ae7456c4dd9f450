//! The JSON Patch between the object as admitted and as kerf wants it: the operations
//! `json_patch::diff` gives, in its order, from a walk that costs less on the webhook's path.
//!
//! `json_patch::diff` looks every key up by hash twice (once in each object) and moves a
//! `PointerBuf` back and forth at every node, which allocates on each step back: an eighth of
//! a pod review, on the webhook's throughput goal (docs/performance.md, "The patch walk"). The
//! desired object is a copy of the original with kerf's edits, so the keys of two objects at
//! the same place almost always sit in the same order: this walk pairs them by position and
//! looks a key up only where the order differs, and writes a path only for an operation. The
//! algorithm, the operations and their order are json-patch's (`src/diff.rs`, 4.2); the tests
//! hold it to `json_patch::diff` on generated objects.

use std::fmt::Write as _;

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, PatchOperation, RemoveOperation, ReplaceOperation};
use serde_json::{Map, Value};

/// One step of the path from the root to the value being compared.
#[derive(Clone, Copy)]
enum Step<'a> {
    Key(&'a str),
    Index(usize),
}

struct Walk<'a> {
    path: Vec<Step<'a>>,
    patch: Vec<PatchOperation>,
    /// The encoded path of the operation being written (reused: one allocation per path).
    text: String,
}

impl<'a> Walk<'a> {
    /// The pointer to `last` under the current path (to the current path itself without one).
    fn at(&mut self, last: Option<Step<'a>>) -> PointerBuf {
        self.text.clear();
        for step in self.path.iter().chain(last.as_ref()) {
            self.text.push('/');
            match *step {
                Step::Key(k) => push_escaped(&mut self.text, k),
                Step::Index(i) => {
                    let _ = write!(self.text, "{i}");
                }
            }
        }
        // Every token is escaped and follows a `/`: the text is always a valid pointer.
        PointerBuf::parse(self.text.as_str()).expect("an escaped path parses")
    }

    fn value(&mut self, left: &'a Value, right: &'a Value) {
        match (left, right) {
            (Value::Object(l), Value::Object(r)) => self.object(l, r),
            (Value::Array(l), Value::Array(r)) => self.array(l, r),
            _ if left == right => {}
            _ => {
                let path = self.at(None);
                self.patch.push(PatchOperation::Replace(ReplaceOperation {
                    path,
                    value: right.clone(),
                }));
            }
        }
    }

    fn nested(&mut self, step: Step<'a>, left: &'a Value, right: &'a Value) {
        self.path.push(step);
        self.value(left, right);
        self.path.pop();
    }

    fn array(&mut self, left: &'a [Value], right: &'a [Value]) {
        let mut shift = 0;
        for idx in 0..left.len().max(right.len()) {
            let at = Step::Index(idx - shift);
            match (left.get(idx), right.get(idx)) {
                (Some(l), Some(r)) => self.nested(at, l, r),
                (Some(_), None) => {
                    shift += 1;
                    let path = self.at(Some(at));
                    self.patch
                        .push(PatchOperation::Remove(RemoveOperation { path }));
                }
                (None, Some(r)) => {
                    let path = self.at(Some(at));
                    self.patch.push(PatchOperation::Add(AddOperation {
                        path,
                        value: r.clone(),
                    }));
                }
                (None, None) => {}
            }
        }
    }

    /// The right object's keys in its order (nested changes, or an `add`), then the left's keys
    /// the right lacks (`remove`), as `json_patch::diff` visits them.
    fn object(&mut self, left: &'a Map<String, Value>, right: &'a Map<String, Value>) {
        let mut lefts = left.iter();
        for (key, r) in right {
            match same_key(lefts.next(), key).or_else(|| left.get(key)) {
                Some(l) => self.nested(Step::Key(key), l, r),
                None => {
                    let path = self.at(Some(Step::Key(key)));
                    self.patch.push(PatchOperation::Add(AddOperation {
                        path,
                        value: r.clone(),
                    }));
                }
            }
        }
        let mut rights = right.iter();
        for key in left.keys() {
            let kept = same_key(rights.next(), key).is_some() || right.contains_key(key);
            if !kept {
                let path = self.at(Some(Step::Key(key)));
                self.patch
                    .push(PatchOperation::Remove(RemoveOperation { path }));
            }
        }
    }
}

/// `key` as a pointer's token (RFC 6901: `~` as `~0`, `/` as `~1`), written straight into the
/// path instead of through jsonptr's `Token`, which allocates for every key that needs escaping
/// (`nvidia.com/gpu`, the annotations' prefixes).
fn push_escaped(text: &mut String, key: &str) {
    let mut rest = key;
    while let Some(at) = rest.bytes().position(|b| b == b'~' || b == b'/') {
        text.push_str(&rest[..at]);
        text.push_str(if rest.as_bytes()[at] == b'~' {
            "~0"
        } else {
            "~1"
        });
        rest = &rest[at + 1..];
    }
    text.push_str(rest);
}

/// The entry's value when the entry at the same position of the other object has `key`.
fn same_key<'a>(entry: Option<(&String, &'a Value)>, key: &str) -> Option<&'a Value> {
    entry.filter(|(k, _)| k.as_str() == key).map(|(_, v)| v)
}

/// The RFC 6902 operations turning `original` into `desired`: `json_patch::diff`'s.
pub fn patch_between(original: &Value, desired: &Value) -> Vec<PatchOperation> {
    // A pod's paths are a few steps deep, its patch a few operations long: sized so that
    // neither grows on the usual review.
    let mut walk = Walk {
        path: Vec::with_capacity(8),
        patch: Vec::with_capacity(8),
        text: String::with_capacity(96),
    };
    walk.value(original, desired);
    walk.patch
}

#[cfg(test)]
mod tests;
