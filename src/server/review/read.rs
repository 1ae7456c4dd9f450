//! The review in one pass over the body, without serde walking the parts kerf does not use.
//!
//! serde_json has to validate every byte it skips (a body it rejects is a 400), and on a large
//! pod most of its time went to skipping env, probes and volumes. This reader walks the body
//! once with a small scanner that accepts exactly JSON's grammar (as serde_json does:
//! whitespace, literals, numbers, strings with their escapes; no depth limit needed below
//! [`MAX_DEPTH`]) and reads only the values kerf uses (a few strings, the request's kind, the
//! pod's metadata, `schedulerName`, each container's `name` and `resources`) into the same
//! types the two passes decode into. The pod's labels and annotations, and the `Node` values
//! (`schedulerName`, names, resources), it decodes itself as it walks them, as serde would:
//! maps, arrays and strings without escapes, and the owner references as k8s-openapi reads
//! them. Everything else (numbers, literals, escaped strings, raw-value maps) goes to
//! serde_json, each value as its own slice.
//!
//! It never decides an answer: whatever it does not take plainly (a value of an unexpected
//! type, an escaped or non-ASCII key, a duplicate field, the object before the kind, deep
//! nesting, anything serde_json might reject) gives `None`, and the caller reads the body in
//! the two passes ([`super::handle_in_two_passes`]). So it must never accept a body those
//! passes reject, nor read a value differently; it may refuse more
//! (test `one_pass_answers_as_the_two_passes`).

use serde::de::DeserializeOwned;

use super::{Gvk, Object, Request, Review};
use std::collections::BTreeMap;

use crate::core::admission::{
    ContainerSkeleton, MetaSkeleton, Node, ObjDecoder, PodSkeleton, RAW_VALUE_KEY, SpecSkeleton,
};
use crate::core::json_text::next_special;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

/// Deepest nesting taken. serde_json refuses values nested more than 128 deep where it decodes
/// them (not where it skips), and a slice decoded on its own starts that count afresh, so the
/// reader refuses bodies nested anywhere near that instead of counting as serde_json does.
const MAX_DEPTH: usize = 100;

/// The envelope and, when the request's kind comes before its object, a pod's skeleton.
pub(super) fn review(body: &[u8]) -> Option<(Review, Object)> {
    let mut r = Reader {
        b: body,
        i: 0,
        depth: 0,
    };
    let (mut api_version, mut kind, mut request) = (None, None, None);
    r.object(|r, key| match key {
        b"apiVersion" => set(&mut api_version, r.or_null(Reader::text)?),
        b"kind" => set(&mut kind, r.or_null(Reader::text)?),
        b"request" => set(&mut request, r.or_null(Reader::request)?),
        _ => r.skip(),
    })?;
    r.ws();
    if r.i != r.b.len() {
        return None;
    }
    let (request, object) = match request.flatten() {
        Some((req, object)) => (Some(req), object),
        None => (None, Object::Later),
    };
    Some((
        Review {
            api_version: api_version.flatten(),
            kind: kind.flatten(),
            request,
        },
        object,
    ))
}

/// Whether `body` is exactly one JSON value, surrounded by whitespace only.
pub(super) fn is_json(body: &[u8]) -> bool {
    skip(body, 0, 0).is_some_and(|end| ws(body, end) == body.len())
}

/// Sets a field read once; a second occurrence is a serde error, so the reader gives up.
fn set<T>(field: &mut Option<T>, value: T) -> Option<()> {
    match field.replace(value) {
        None => Some(()),
        Some(_) => None,
    }
}

struct Reader<'a> {
    b: &'a [u8],
    i: usize,
    depth: usize,
}

impl<'a> Reader<'a> {
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    /// JSON whitespace, as serde_json skips it.
    fn ws(&mut self) {
        self.i = ws(self.b, self.i);
    }

    fn eat(&mut self, c: u8) -> Option<()> {
        self.ws();
        (self.peek() == Some(c)).then(|| self.i += 1)
    }

    /// A map's entries, `each` reading the value of each key. Keys are compared as written, so
    /// a key with an escape or a non-ASCII byte (which serde would decode or check) is refused.
    fn object(&mut self, mut each: impl FnMut(&mut Self, &'a [u8]) -> Option<()>) -> Option<()> {
        self.eat(b'{')?;
        self.nest()?;
        if self.eat(b'}').is_none() {
            loop {
                let key = self.raw_string()?;
                if key.iter().any(|&c| c == b'\\' || c >= 0x80) {
                    return None;
                }
                self.eat(b':')?;
                each(self, key)?;
                if self.eat(b',').is_none() {
                    self.eat(b'}')?;
                    break;
                }
            }
        }
        self.depth -= 1;
        Some(())
    }

    /// An array's elements, `each` reading each one.
    fn array(&mut self, mut each: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
        self.eat(b'[')?;
        self.nest()?;
        if self.eat(b']').is_none() {
            loop {
                each(self)?;
                if self.eat(b',').is_none() {
                    self.eat(b']')?;
                    break;
                }
            }
        }
        self.depth -= 1;
        Some(())
    }

    fn nest(&mut self) -> Option<()> {
        self.depth += 1;
        (self.depth <= MAX_DEPTH).then_some(())
    }

    /// `null` as `None`, else what `read` reads.
    fn or_null<T>(&mut self, read: impl FnOnce(&mut Self) -> Option<T>) -> Option<Option<T>> {
        self.ws();
        if self.peek() == Some(b'n') {
            self.i = literal(self.b, self.i, b"null")?;
            return Some(None);
        }
        read(self).map(Some)
    }

    /// The next value decoded by serde_json on its own slice, after the scanner checked it
    /// (so its end is known and its nesting bounded).
    fn decode<T: DeserializeOwned>(&mut self) -> Option<T> {
        self.ws();
        let start = self.i;
        self.skip()?;
        serde_json::from_slice(&self.b[start..self.i]).ok()
    }

    /// Skips one value, accepting what serde_json's `ignore_value` accepts and no more.
    fn skip(&mut self) -> Option<()> {
        self.i = skip(self.b, self.i, self.depth)?;
        Some(())
    }

    /// The rest of a string after its opening quote, up to and including the closing one.
    fn string(&mut self) -> Option<()> {
        self.i = string(self.b, self.i)?;
        Some(())
    }

    /// `request`: its envelope fields and, for a pod whose kind came first, the skeleton.
    fn request(&mut self) -> Option<(Request, Object)> {
        let (mut uid, mut kind, mut namespace, mut operation, mut object) =
            (None, None::<Gvk>, None, None, None);
        self.object(|r, key| match key {
            b"uid" => set(&mut uid, r.text()?),
            b"kind" => {
                r.ws();
                // serde's derived structs also read a sequence; only a map is taken here.
                if r.peek() != Some(b'{') {
                    return None;
                }
                set(&mut kind, r.gvk()?)
            }
            b"namespace" => set(&mut namespace, r.or_null(Reader::text)?),
            b"operation" => set(&mut operation, r.text()?),
            b"object" => {
                let pod = kind
                    .as_ref()
                    .is_some_and(|k| k.group.is_empty() && k.kind == "Pod");
                let o = if pod {
                    Object::Pod(r.or_null(Reader::pod)?.map(Box::new))
                } else {
                    r.skip()?;
                    Object::Later
                };
                set(&mut object, o)
            }
            _ => r.skip(),
        })?;
        Some((
            Request {
                uid: uid?,
                kind: kind?,
                namespace: namespace.flatten(),
                operation: operation.unwrap_or_default(),
            },
            object.unwrap_or(Object::Later),
        ))
    }

    /// A pod's object into its skeleton: what `PodSkeleton`'s serde derive reads, the rest
    /// skipped.
    fn pod(&mut self) -> Option<PodSkeleton> {
        let (mut metadata, mut spec) = (None, None);
        self.object(|r, key| match key {
            b"metadata" => set(&mut metadata, r.or_null(Reader::meta)?),
            b"spec" => set(&mut spec, r.or_null(Reader::spec)?),
            _ => r.skip(),
        })?;
        Some(PodSkeleton {
            metadata: metadata.flatten(),
            spec: spec.flatten(),
        })
    }

    /// The pod's metadata: what `MetaSkeleton`'s serde derive reads (from a map only, as
    /// `object_only` takes it), the string maps read here, the rest by serde.
    fn meta(&mut self) -> Option<MetaSkeleton> {
        let (mut namespace, mut owner_references, mut labels, mut annotations) =
            (None, None, None, None);
        self.object(|r, key| match key {
            b"namespace" => set(&mut namespace, r.or_null(Reader::text)?),
            b"ownerReferences" => set(&mut owner_references, r.or_null(Reader::owners)?),
            b"labels" => set(&mut labels, r.or_null(Reader::labels)?),
            b"annotations" => set(
                &mut annotations,
                r.or_null(|r| r.entries().map(ObjDecoder::finish))?,
            ),
            _ => r.skip(),
        })?;
        Some(MetaSkeleton {
            namespace: namespace.flatten(),
            owner_references: owner_references.flatten(),
            labels: labels.flatten(),
            annotations: annotations.flatten(),
        })
    }

    /// `ownerReferences` as k8s-openapi's `OwnerReference` reads each one from a map: a string
    /// field missing or `null` is empty, a flag missing or `null` is `None`, unknown fields are
    /// skipped. Read here rather than by serde so a review runs none of serde_json's struct
    /// code: the handler's cost in the server is mostly its code and data falling out of the
    /// caches between requests, so code it does not run is worth more than instructions saved.
    fn owners(&mut self) -> Option<Vec<OwnerReference>> {
        let mut out = Vec::new();
        self.array(|r| {
            let (mut api_version, mut kind, mut name, mut uid) = (None, None, None, None);
            let (mut controller, mut block_owner_deletion) = (None, None);
            r.object(|r, key| match key {
                b"apiVersion" => set(&mut api_version, r.or_null(Reader::text)?),
                b"kind" => set(&mut kind, r.or_null(Reader::text)?),
                b"name" => set(&mut name, r.or_null(Reader::text)?),
                b"uid" => set(&mut uid, r.or_null(Reader::text)?),
                b"controller" => set(&mut controller, r.or_null(Reader::flag)?),
                b"blockOwnerDeletion" => set(&mut block_owner_deletion, r.or_null(Reader::flag)?),
                _ => r.skip(),
            })?;
            out.push(OwnerReference {
                api_version: api_version.flatten().unwrap_or_default(),
                kind: kind.flatten().unwrap_or_default(),
                name: name.flatten().unwrap_or_default(),
                uid: uid.flatten().unwrap_or_default(),
                controller: controller.flatten(),
                block_owner_deletion: block_owner_deletion.flatten(),
            });
            Some(())
        })?;
        Some(out)
    }

    /// `true` or `false`.
    fn flag(&mut self) -> Option<bool> {
        self.ws();
        let (word, value): (&[u8], bool) = match self.peek()? {
            b't' => (b"true", true),
            b'f' => (b"false", false),
            _ => return None,
        };
        self.i = literal(self.b, self.i, word)?;
        Some(value)
    }

    /// A map of strings as serde decodes a `BTreeMap<String, String>`: a repeated key keeps its
    /// last value; anything but a string value is refused.
    fn labels(&mut self) -> Option<BTreeMap<String, String>> {
        let mut out = BTreeMap::new();
        self.each_entry(Reader::plain_string, |k, v| {
            out.insert(k, v);
        })?;
        Some(out)
    }

    /// A map's entries as serde_json decodes a `Map` (see [`ObjDecoder`]), each value a [`Node`].
    fn entries(&mut self) -> Option<ObjDecoder> {
        let mut out = ObjDecoder::default();
        self.each_entry(Reader::node, |k, v| out.insert(k, v))?;
        Some(out)
    }

    /// A map's entries in order, each key owned and each value as `value` reads it.
    fn each_entry<V>(
        &mut self,
        mut value: impl FnMut(&mut Self) -> Option<V>,
        mut put: impl FnMut(String, V),
    ) -> Option<()> {
        self.object(|r, key| {
            let v = value(r)?;
            put(std::str::from_utf8(key).ok()?.to_owned(), v);
            Some(())
        })
    }

    /// Any value as serde decodes a [`Node`]: maps, arrays and strings without escapes read
    /// here, everything else (numbers, escaped strings, the raw-value key) by serde on its own
    /// slice.
    fn node(&mut self) -> Option<Node> {
        self.ws();
        let start = self.i;
        match self.peek()? {
            b'{' => {
                let map = self.entries()?;
                let obj = map.finish();
                // serde_json reads a map whose first key is this as the JSON text after it.
                if obj.keys().next().is_some_and(|k| k == RAW_VALUE_KEY) {
                    self.i = start;
                    return self.decode();
                }
                Some(Node::Object(obj))
            }
            b'[' => {
                let mut items = Vec::new();
                self.array(|r| {
                    items.push(r.node()?);
                    Some(())
                })?;
                Some(Node::Array(items))
            }
            b'"' => self.text().map(Node::String),
            b't' | b'f' | b'n' | b'-' | b'0'..=b'9' => self.decode(),
            _ => None,
        }
    }

    /// A string as serde decodes a `String`: read here when it has no escape, else by serde.
    fn text(&mut self) -> Option<String> {
        self.ws();
        let start = self.i;
        self.plain_string().or_else(|| {
            self.i = start;
            self.decode()
        })
    }

    /// The request's `kind` as `Gvk`'s serde derive reads it from a map: each field a string
    /// (missing: empty), unknown fields skipped.
    fn gvk(&mut self) -> Option<Gvk> {
        let (mut group, mut version, mut kind) = (None, None, None);
        self.object(|r, key| match key {
            b"group" => set(&mut group, r.text()?),
            b"version" => set(&mut version, r.text()?),
            b"kind" => set(&mut kind, r.text()?),
            _ => r.skip(),
        })?;
        Some(Gvk {
            group: group.unwrap_or_default(),
            version: version.unwrap_or_default(),
            kind: kind.unwrap_or_default(),
        })
    }

    /// A string without escapes, checked as serde_json checks it (valid UTF-8; the scanner
    /// refuses control characters); `None` for anything else.
    fn plain_string(&mut self) -> Option<String> {
        let text = self.raw_string()?;
        if text.contains(&b'\\') {
            return None;
        }
        Some(std::str::from_utf8(text).ok()?.to_owned())
    }

    /// A string's bytes as written, between its quotes (escapes not decoded).
    fn raw_string(&mut self) -> Option<&'a [u8]> {
        self.eat(b'"')?;
        let start = self.i;
        self.string()?;
        let body = self.b;
        Some(&body[start..self.i - 1])
    }

    fn spec(&mut self) -> Option<SpecSkeleton> {
        let (mut scheduler_name, mut containers, mut init_containers) = (None, None, None);
        self.object(|r, key| match key {
            b"schedulerName" => set(&mut scheduler_name, r.or_null(Reader::node)?),
            b"containers" => set(&mut containers, r.or_null(Reader::containers)?),
            b"initContainers" => set(&mut init_containers, r.or_null(Reader::containers)?),
            _ => r.skip(),
        })?;
        Some(SpecSkeleton {
            scheduler_name: scheduler_name.flatten(),
            containers: containers.flatten(),
            init_containers: init_containers.flatten(),
        })
    }

    fn containers(&mut self) -> Option<Vec<ContainerSkeleton>> {
        let mut out = Vec::new();
        self.array(|r| {
            let (mut name, mut resources) = (None, None);
            r.object(|r, key| match key {
                b"name" => set(&mut name, r.or_null(Reader::node)?),
                b"resources" => set(&mut resources, r.or_null(Reader::node)?),
                _ => r.skip(),
            })?;
            out.push(ContainerSkeleton {
                name: name.flatten(),
                resources: resources.flatten(),
            });
            Some(())
        })?;
        Some(out)
    }
}

/// JSON whitespace, as serde_json skips it.
fn ws(b: &[u8], mut i: usize) -> usize {
    while let Some(b' ' | b'\n' | b'\t' | b'\r') = b.get(i) {
        i += 1;
    }
    i
}

/// The end of the value starting at `i` (after whitespace), `depth` levels deep. A loop with
/// the open brackets as a bit stack (1: object), not recursion: skipping is most of the
/// reader's work and most of a large pod.
fn skip(b: &[u8], mut i: usize, depth: usize) -> Option<usize> {
    let mut open: u128 = 0;
    let mut levels = 0;
    'value: loop {
        i = ws(b, i);
        match *b.get(i)? {
            b'"' => i = string(b, i + 1)?,
            c @ (b'{' | b'[') => {
                levels += 1;
                if depth + levels > MAX_DEPTH {
                    return None;
                }
                open = open << 1 | u128::from(c == b'{');
                i = ws(b, i + 1);
                if b.get(i) == Some(&(c + 2)) {
                    // `{}` or `[]` (the closing bracket is the opening one + 2 in ASCII).
                    i += 1;
                    levels -= 1;
                    open >>= 1;
                } else {
                    if c == b'{' {
                        i = key(b, i)?;
                    }
                    continue 'value;
                }
            }
            b'n' => i = literal(b, i, b"null")?,
            b't' => i = literal(b, i, b"true")?,
            b'f' => i = literal(b, i, b"false")?,
            b'-' | b'0'..=b'9' => i = number(b, i)?,
            _ => return None,
        }
        // After a value: a comma and the next entry, or the end of the enclosing brackets.
        loop {
            if levels == 0 {
                return Some(i);
            }
            i = ws(b, i);
            let object = open & 1 == 1;
            match (*b.get(i)?, object) {
                (b',', true) => {
                    i = key(b, ws(b, i + 1))?;
                    continue 'value;
                }
                (b',', false) => {
                    i += 1;
                    continue 'value;
                }
                (b'}', true) | (b']', false) => {
                    i += 1;
                    levels -= 1;
                    open >>= 1;
                }
                _ => return None,
            }
        }
    }
}

/// A key of a skipped map and its colon (serde_json skips such keys as it skips strings).
/// Inlined, as [`string`] is, into the skip loop: a large pod has a few hundred of them.
#[inline(always)]
fn key(b: &[u8], i: usize) -> Option<usize> {
    if b.get(i) != Some(&b'"') {
        return None;
    }
    let i = ws(b, string(b, i + 1)?);
    (b.get(i) == Some(&b':')).then_some(i + 1)
}

fn literal(b: &[u8], i: usize, word: &[u8]) -> Option<usize> {
    let end = i + word.len();
    (b.get(i..end) == Some(word)).then_some(end)
}

/// `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`
fn number(b: &[u8], mut i: usize) -> Option<usize> {
    let digits = |mut i: usize| {
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        i
    };
    let some_digits = |i: usize| b.get(i).filter(|c| c.is_ascii_digit()).map(|_| digits(i));
    if b.get(i) == Some(&b'-') {
        i += 1;
    }
    i = match b.get(i)? {
        b'0' => i + 1,
        b'1'..=b'9' => digits(i),
        _ => return None,
    };
    if b.get(i) == Some(&b'.') {
        i = some_digits(i + 1)?;
    }
    if let Some(b'e' | b'E') = b.get(i) {
        i += 1;
        if let Some(b'+' | b'-') = b.get(i) {
            i += 1;
        }
        i = some_digits(i)?;
    }
    // A digit right after a leading zero is an error for serde_json too.
    (!b.get(i).is_some_and(u8::is_ascii_digit)).then_some(i)
}

/// The end of a string whose opening quote is before `i` (just past its closing quote):
/// control characters are refused, escapes must be JSON's (`\u` with four hex digits;
/// serde_json checks neither surrogates nor UTF-8 in strings it skips).
#[inline(always)]
fn string(b: &[u8], mut i: usize) -> Option<usize> {
    loop {
        i = next_special(b, i);
        match *b.get(i)? {
            b'"' => return Some(i + 1),
            b'\\' => match *b.get(i + 1)? {
                b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => i += 2,
                b'u' => {
                    let hex = b.get(i + 2..i + 6)?;
                    if !hex.iter().all(u8::is_ascii_hexdigit) {
                        return None;
                    }
                    i += 6;
                }
                _ => return None,
            },
            0..0x20 => return None,
            // `next_special` stops only at the bytes above (or the end); kept total.
            _ => i += 1,
        }
    }
}
