//! The desired object while the builder edits it, copied only where it is written.
//!
//! The builder used to copy the whole skeleton, edit the copy and diff the two: every string of
//! the skeleton allocated twice and every value compared. A [`Draft`] starts as a reference to
//! the original; writing into an object or array replaces that level with a [`DraftObj`] or an
//! array of drafts whose entries still refer to the original's values, so only the maps on the
//! paths the builder writes are copied (and only as references), and the diff skips every
//! untouched value at once (it is the original's own value).
//!
//! A [`DraftObj`] keeps its entries in the same map type as [`Obj`] ([`Entries`]), with
//! `serde_json::Map`'s semantics under `preserve_order`: inserting an existing key replaces its
//! value in place, a new key is appended, removing a key moves the last entry into its place.
//! The order of the patch follows from them, so it is the one the copy gave, byte for byte.

use std::borrow::Cow;

use super::node::{Entries, Node, Obj};

/// A value of the desired object (see the module docs).
#[derive(Debug)]
pub enum Draft<'a> {
    /// The original's value, unchanged.
    Orig(&'a Node),
    /// An object being written into.
    Obj(DraftObj<'a>),
    /// An array being written into.
    Arr(Vec<Draft<'a>>),
    /// A value the builder wrote.
    New(Node),
}

/// An object being written into: its entries in [`Obj`]'s order ([`Entries`]).
#[derive(Debug, Default)]
pub struct DraftObj<'a> {
    entries: Entries<Cow<'a, str>, Draft<'a>>,
    /// The original object it was made from ([`DraftObj::of`]): under each of its keys an
    /// [`Draft::Orig`] entry is that object's own value.
    source: Option<&'a Obj>,
    /// Whether a key was removed (so some key of `source` may be missing).
    removed: bool,
}

impl<'a> DraftObj<'a> {
    /// The original object `o`, every entry still the original's.
    pub fn of(o: &'a Obj) -> Self {
        Self {
            entries: Entries::from_distinct(
                o.iter()
                    .map(|(k, v)| (Cow::Borrowed(k.as_str()), Draft::Orig(v)))
                    .collect(),
            ),
            source: Some(o),
            removed: false,
        }
    }

    /// An object the builder wrote whole, taken over entry by entry.
    fn owned(o: Obj) -> Self {
        Self {
            entries: Entries::from_distinct(
                o.into_entries()
                    .map(|(k, v)| (Cow::Owned(k), Draft::New(v)))
                    .collect(),
            ),
            ..Self::default()
        }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether this is a draft of `x` (see [`Self::source`]).
    pub fn drafts(&self, x: &Obj) -> bool {
        self.source.is_some_and(|s| std::ptr::eq(s, x))
    }

    /// Whether this is a draft of `x` that still has every key of `x`.
    pub fn keeps_every_key_of(&self, x: &Obj) -> bool {
        !self.removed && self.drafts(x)
    }

    pub fn get(&self, key: &str) -> Option<&Draft<'a>> {
        self.entries.get(key)
    }

    pub fn get_mut(&mut self, key: &str) -> Option<&mut Draft<'a>> {
        self.entries.get_mut(key)
    }

    /// The plain value at `key` (`None` for an object or array being written into, which no
    /// reader of a plain value takes either).
    pub fn node(&self, key: &str) -> Option<&Node> {
        self.get(key).and_then(Draft::node)
    }

    /// Replaces the value of an existing key in place, else appends (as [`Obj::insert`]).
    pub fn insert(&mut self, key: &'a str, value: Draft<'a>) {
        self.entries.insert(Cow::Borrowed(key), value);
    }

    /// Removes `key`, moving the last entry into its place (as [`Obj::remove`]); whether it
    /// was there.
    pub fn remove(&mut self, key: &str) -> bool {
        let found = self.entries.remove(key).is_some();
        self.removed |= found;
        found
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &Draft<'a>)> {
        self.entries.iter().map(|(k, v)| (k.as_ref(), v))
    }

    /// `self[key]`, looked for at position `at` first (see [`Obj::get_near`]).
    pub fn get_near(&self, at: usize, key: &str) -> Option<&Draft<'a>> {
        self.entries.get_near(at, key)
    }

    /// `self[key]` as an object to write into, created when missing or null (so missing parent
    /// maps get added); `None` when it holds something else.
    pub fn child_obj(&mut self, key: &'a str) -> Option<&mut DraftObj<'a>> {
        if self.get(key).is_none_or(Draft::is_null) {
            self.insert(key, Draft::Obj(DraftObj::default()));
        }
        self.get_mut(key).and_then(Draft::obj_mut)
    }

    /// The object as a plain value.
    pub fn to_node(&self) -> Node {
        Node::Object(
            self.entries
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_node()))
                .collect(),
        )
    }
}

impl<'a> Draft<'a> {
    /// The plain value, when this is one (the original's or a written one).
    pub fn node(&self) -> Option<&Node> {
        match self {
            Draft::Orig(n) => Some(n),
            Draft::New(n) => Some(n),
            Draft::Obj(_) | Draft::Arr(_) => None,
        }
    }

    fn is_null(&self) -> bool {
        self.node().is_some_and(Node::is_null)
    }

    /// The value as an object to write into; `None` when it is not an object.
    pub fn obj_mut(&mut self) -> Option<&mut DraftObj<'a>> {
        if let Draft::Orig(Node::Object(o)) = *self {
            *self = Draft::Obj(DraftObj::of(o));
        }
        if let Draft::New(Node::Object(o)) = self {
            let o = std::mem::take(o);
            *self = Draft::Obj(DraftObj::owned(o));
        }
        match self {
            Draft::Obj(o) => Some(o),
            _ => None,
        }
    }

    /// The value as an array to write into; `None` when it is not an array.
    pub fn arr_mut(&mut self) -> Option<&mut Vec<Draft<'a>>> {
        if let Draft::Orig(Node::Array(a)) = *self {
            *self = Draft::Arr(a.iter().map(Draft::Orig).collect());
        }
        if let Draft::New(Node::Array(a)) = self {
            let a = std::mem::take(a);
            *self = Draft::Arr(a.into_iter().map(Draft::New).collect());
        }
        match self {
            Draft::Arr(a) => Some(a),
            _ => None,
        }
    }

    /// The value as a plain value (copied).
    pub fn to_node(&self) -> Node {
        match self {
            Draft::Orig(n) => (*n).clone(),
            Draft::New(n) => n.clone(),
            Draft::Obj(o) => o.to_node(),
            Draft::Arr(a) => Node::Array(a.iter().map(Draft::to_node).collect()),
        }
    }
}
