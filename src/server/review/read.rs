//! The review in one pass over the body, without serde walking the parts kerf does not use.
//!
//! serde_json has to validate every byte it skips (a body it rejects is a 400), and on a large
//! pod most of its time went to skipping env, probes and volumes. This reader walks the body
//! once with a small scanner that accepts exactly JSON's grammar (as serde_json does:
//! whitespace, literals, numbers, strings with their escapes; no depth limit needed below
//! [`MAX_DEPTH`]) and hands only the values kerf reads (a few strings, the request's kind, the
//! pod's metadata, `schedulerName`, each container's `name` and `resources`) to serde_json,
//! each as its own slice, decoded into the same types the two passes decode into.
//!
//! It never decides an answer: whatever it does not take plainly (a value of an unexpected
//! type, an escaped or non-ASCII key, a duplicate field, the object before the kind, deep
//! nesting, anything serde_json might reject) gives `None`, and the caller reads the body in
//! the two passes ([`super::handle_in_two_passes`]). So it must never accept a body those
//! passes reject, nor read a value differently; it may refuse more
//! (test `one_pass_answers_as_the_two_passes`).

use serde::de::DeserializeOwned;

use super::{Gvk, Object, Request, Review};
use crate::core::admission::{ContainerSkeleton, MetaSkeleton, PodSkeleton, SpecSkeleton};

/// Deepest nesting taken. serde_json refuses values nested more than 128 deep where it decodes
/// them (not where it skips), and a slice decoded on its own starts that count afresh, so the
/// reader refuses bodies nested anywhere near that instead of counting as serde_json does.
const MAX_DEPTH: usize = 100;

/// The envelope and, when the request's kind comes before its object, a pod's skeleton.
pub(super) fn review(body: &[u8]) -> Option<(Review, Object)> {
    let mut r = Reader { b: body, i: 0, depth: 0 };
    let (mut api_version, mut kind, mut request) = (None, None, None);
    r.object(|r, key| {
        match key {
            b"apiVersion" => set(&mut api_version, r.decode::<Option<String>>()?),
            b"kind" => set(&mut kind, r.decode::<Option<String>>()?),
            b"request" => set(&mut request, r.or_null(Reader::request)?),
            _ => r.skip(),
        }
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
        while let Some(b' ' | b'\n' | b'\t' | b'\r') = self.peek() {
            self.i += 1;
        }
    }

    fn eat(&mut self, c: u8) -> Option<()> {
        self.ws();
        (self.peek() == Some(c)).then(|| self.i += 1)
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        let end = self.i + word.len();
        (self.b.get(self.i..end) == Some(word)).then(|| self.i = end)
    }

    /// A map's entries, `each` reading the value of each key. Keys are compared as written, so
    /// a key with an escape or a non-ASCII byte (which serde would decode or check) is refused.
    fn object(&mut self, mut each: impl FnMut(&mut Self, &'a [u8]) -> Option<()>) -> Option<()> {
        self.eat(b'{')?;
        self.nest()?;
        if self.eat(b'}').is_none() {
            loop {
                self.eat(b'"')?;
                let start = self.i;
                self.string()?;
                let body = self.b;
                let key = &body[start..self.i - 1];
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
            self.literal(b"null")?;
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
        self.ws();
        match self.peek()? {
            b'"' => {
                self.i += 1;
                self.string()
            }
            b'{' => self.object(|r, _| r.skip()),
            b'[' => self.array(Reader::skip),
            b'n' => self.literal(b"null"),
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'-' | b'0'..=b'9' => self.number(),
            _ => None,
        }
    }

    /// `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`
    fn number(&mut self) -> Option<()> {
        if self.peek() == Some(b'-') {
            self.i += 1;
        }
        match self.peek()? {
            b'0' => self.i += 1,
            b'1'..=b'9' => self.digits(),
            _ => return None,
        }
        if self.peek() == Some(b'.') {
            self.i += 1;
            self.digit()?;
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.i += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.i += 1;
            }
            self.digit()?;
        }
        // A digit right after a leading zero is an error for serde_json too.
        (!self.peek().is_some_and(|c| c.is_ascii_digit())).then_some(())
    }

    fn digit(&mut self) -> Option<()> {
        self.peek().filter(u8::is_ascii_digit)?;
        self.digits();
        Some(())
    }

    fn digits(&mut self) {
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.i += 1;
        }
    }

    /// The rest of a string after its opening quote, up to and including the closing one:
    /// control characters are refused, escapes must be JSON's (`\u` with four hex digits;
    /// serde_json checks neither surrogates nor UTF-8 in strings it skips).
    fn string(&mut self) -> Option<()> {
        loop {
            // Eight bytes at a time while none is a quote, a backslash or a control character.
            while let Some(chunk) = self.b.get(self.i..self.i + 8) {
                let found = special(u64::from_le_bytes(chunk.try_into().ok()?));
                if found != 0 {
                    // The lowest flagged byte is the first one to look at.
                    self.i += (found.trailing_zeros() / 8) as usize;
                    break;
                }
                self.i += 8;
            }
            let c = self.peek()?;
            self.i += 1;
            match c {
                b'"' => return Some(()),
                b'\\' => match self.peek()? {
                    b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => self.i += 1,
                    b'u' => {
                        let hex = self.b.get(self.i + 1..self.i + 5)?;
                        if !hex.iter().all(u8::is_ascii_hexdigit) {
                            return None;
                        }
                        self.i += 5;
                    }
                    _ => return None,
                },
                0..0x20 => return None,
                _ => {}
            }
        }
    }

    /// `request`: its envelope fields and, for a pod whose kind came first, the skeleton.
    fn request(&mut self) -> Option<(Request, Object)> {
        let (mut uid, mut kind, mut namespace, mut operation, mut object) =
            (None, None::<Gvk>, None, None, None);
        self.object(|r, key| match key {
            b"uid" => set(&mut uid, r.decode::<String>()?),
            b"kind" => {
                r.ws();
                // serde's derived structs also read a sequence; only a map is taken here.
                if r.peek() != Some(b'{') {
                    return None;
                }
                set(&mut kind, r.decode::<Gvk>()?)
            }
            b"namespace" => set(&mut namespace, r.decode::<Option<String>>()?),
            b"operation" => set(&mut operation, r.decode::<String>()?),
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
            b"metadata" => set(&mut metadata, r.or_null(Reader::map::<MetaSkeleton>)?),
            b"spec" => set(&mut spec, r.or_null(Reader::spec)?),
            _ => r.skip(),
        })?;
        Some(PodSkeleton {
            metadata: metadata.flatten(),
            spec: spec.flatten(),
        })
    }

    /// A struct from a map only (what `object_only` takes), decoded by serde.
    fn map<T: DeserializeOwned>(&mut self) -> Option<T> {
        self.ws();
        if self.peek() != Some(b'{') {
            return None;
        }
        self.decode()
    }

    fn spec(&mut self) -> Option<SpecSkeleton> {
        let (mut scheduler_name, mut containers, mut init_containers) = (None, None, None);
        self.object(|r, key| match key {
            b"schedulerName" => set(&mut scheduler_name, r.decode()?),
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
                b"name" => set(&mut name, r.decode()?),
                b"resources" => set(&mut resources, r.decode()?),
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

/// The bytes of `x` (little-endian) that are a quote, a backslash or below 0x20 have their high
/// bit set in the result: zero when there is none, and the lowest set bit is exact (bytes
/// above it may be flagged wrongly; the caller only looks at the lowest).
fn special(x: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let below = |v: u64, n: u64| v.wrapping_sub(ONES * n) & !v;
    (below(x, 0x20) | below(x ^ (ONES * u64::from(b'"')), 1) | below(x ^ (ONES * u64::from(b'\\')), 1))
        & HIGH
}
