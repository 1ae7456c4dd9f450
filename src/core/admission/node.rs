//! A JSON tree for the patch builder: what `serde_json::Value` holds, with objects as a short
//! vector of entries instead of a hashed, ordered map.
//!
//! The parts of a pod the builder handles are a handful of small maps (annotations, labels, a
//! container's resources). With `Value` each of them is a hash table whose keys are hashed
//! (SipHash) on every insert and lookup, copied with the whole skeleton and diffed; that was
//! most of the builder's time. Here an object is a `Vec` searched linearly, which for maps of
//! a few entries is cheaper than one hash.
//!
//! It keeps `Value`'s semantics exactly (serde_json with `preserve_order`), so the patch is the
//! same byte for byte: entries stay in insertion order; inserting an existing key replaces its
//! value in place; removing a key moves the last entry into its place (`swap_remove`); a key
//! read twice keeps its first position and its last value; equality ignores entry order; it
//! decodes and serializes as `Value` does.

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::{Number, Value};

use crate::core::hash::HashMap;
use crate::core::json_text;

/// A JSON value (see the module docs).
#[derive(Clone, Debug, Default, PartialEq)]
pub enum Node {
    #[default]
    Null,
    Bool(bool),
    Number(Number),
    String(String),
    Array(Vec<Node>),
    Object(Obj),
}

/// A JSON object: entries in insertion order, as serde_json's `preserve_order` map keeps them.
pub type Obj = Entries<String, Node>;

/// Keyed entries with the semantics of serde_json's `Map` under `preserve_order`: insertion
/// order, inserting an existing key replaces its value in place, removing a key moves the last
/// entry into its place. [`Obj`] and the builder's draft of one (`draft::DraftObj`) share it,
/// so the draft orders its entries as the object would.
#[derive(Clone, Debug)]
pub struct Entries<K, V>(Vec<(K, V)>);

impl<K, V> Default for Entries<K, V> {
    fn default() -> Self {
        Self(Vec::new())
    }
}

impl<K: AsRef<str>, V> Entries<K, V> {
    pub fn new() -> Self {
        Self::default()
    }

    /// Entries whose keys are already distinct (taken from another map), kept as they are.
    pub(super) fn from_distinct(entries: Vec<(K, V)>) -> Self {
        Self(entries)
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn position(&self, key: &str) -> Option<usize> {
        self.0.iter().position(|(k, _)| k.as_ref() == key)
    }

    pub fn get(&self, key: &str) -> Option<&V> {
        self.0
            .iter()
            .find(|(k, _)| k.as_ref() == key)
            .map(|(_, v)| v)
    }

    pub fn get_mut(&mut self, key: &str) -> Option<&mut V> {
        self.0
            .iter_mut()
            .find(|(k, _)| k.as_ref() == key)
            .map(|(_, v)| v)
    }

    /// `self[key]`, looked for at position `at` first: a copy with changes (the desired object
    /// against the original) mostly keeps each key where it was, so the search is rarely needed.
    pub fn get_near(&self, at: usize, key: &str) -> Option<&V> {
        match self.0.get(at) {
            Some((k, v)) if k.as_ref() == key => Some(v),
            _ => self.get(key),
        }
    }

    pub fn contains_key(&self, key: &str) -> bool {
        self.position(key).is_some()
    }

    /// Replaces the value of an existing key in place, else appends; the old value if any.
    pub fn insert(&mut self, key: K, value: V) -> Option<V> {
        match self.position(key.as_ref()) {
            Some(i) => Some(std::mem::replace(&mut self.0[i].1, value)),
            None => {
                self.0.push((key, value));
                None
            }
        }
    }

    /// Removes `key`, moving the last entry into its place (`Map::remove` with
    /// `preserve_order` does exactly this, and the order decides the order of the patch).
    pub fn remove(&mut self, key: &str) -> Option<V> {
        let i = self.position(key)?;
        Some(self.0.swap_remove(i).1)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.0.iter().map(|(k, v)| (k, v))
    }

    pub fn keys(&self) -> impl Iterator<Item = &K> {
        self.0.iter().map(|(k, _)| k)
    }

    pub fn into_entries(self) -> impl Iterator<Item = (K, V)> {
        self.0.into_iter()
    }
}

impl FromIterator<(String, Node)> for Obj {
    fn from_iter<I: IntoIterator<Item = (String, Node)>>(iter: I) -> Self {
        let mut m = ObjDecoder::default();
        for (k, v) in iter {
            m.insert(k, v);
        }
        m.finish()
    }
}

/// Inserting many entries one by one: up to [`Index::LINEAR`] entries each key is searched
/// linearly, beyond it through a map of positions, so a map of any size is built in linear time
/// (a body may hold hundreds of thousands of annotation keys: the API server checks their size
/// only after mutating webhooks).
#[derive(Default)]
struct Index(Option<HashMap<String, usize>>);

impl Index {
    const LINEAR: usize = 32;

    /// [`Obj::insert`] on `m`, whose entries all went through this index.
    fn insert(&mut self, m: &mut Obj, key: String, value: Node) {
        if self.0.is_none() && m.len() < Self::LINEAR {
            m.insert(key, value);
            return;
        }
        let positions = self.0.get_or_insert_with(|| {
            m.0.iter()
                .enumerate()
                .map(|(i, (k, _))| (k.clone(), i))
                .collect()
        });
        match positions.get(&key) {
            Some(&i) => m.0[i].1 = value,
            None => {
                positions.insert(key.clone(), m.0.len());
                m.0.push((key, value));
            }
        }
    }
}

/// Equal when both have the same keys with equal values, in any order (as `Map`'s equality).
impl PartialEq for Obj {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len()
            && self
                .0
                .iter()
                .enumerate()
                .all(|(i, (k, v))| other.get_near(i, k) == Some(v))
    }
}

impl Node {
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Node::String(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_object(&self) -> Option<&Obj> {
        match self {
            Node::Object(m) => Some(m),
            _ => None,
        }
    }

    pub fn as_object_mut(&mut self) -> Option<&mut Obj> {
        match self {
            Node::Object(m) => Some(m),
            _ => None,
        }
    }

    pub fn is_null(&self) -> bool {
        matches!(self, Node::Null)
    }

    pub fn is_object(&self) -> bool {
        matches!(self, Node::Object(_))
    }

    /// `self[key]` of an object; `None` for anything else.
    pub fn get(&self, key: &str) -> Option<&Node> {
        self.as_object()?.get(key)
    }

    pub fn get_mut(&mut self, key: &str) -> Option<&mut Node> {
        self.as_object_mut()?.get_mut(key)
    }

    /// Element `i` of an array; `None` for anything else.
    pub fn at_mut(&mut self, i: usize) -> Option<&mut Node> {
        match self {
            Node::Array(a) => a.get_mut(i),
            _ => None,
        }
    }

    /// Appends the value's compact JSON, the bytes `serde_json::to_writer` writes for it.
    pub fn write_json(&self, out: &mut Vec<u8>) {
        match self {
            Node::Null => out.extend_from_slice(b"null"),
            Node::Bool(true) => out.extend_from_slice(b"true"),
            Node::Bool(false) => out.extend_from_slice(b"false"),
            // Writing into a Vec cannot fail.
            Node::Number(n) => {
                let _ = serde_json::to_writer(&mut *out, n);
            }
            Node::String(s) => json_text::push_str(out, s),
            Node::Array(a) => {
                out.push(b'[');
                for (i, v) in a.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    v.write_json(out);
                }
                out.push(b']');
            }
            Node::Object(m) => {
                out.push(b'{');
                for (i, (k, v)) in m.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    json_text::push_str(out, k);
                    out.push(b':');
                    v.write_json(out);
                }
                out.push(b'}');
            }
        }
    }

    /// The same value as a `serde_json::Value`.
    pub fn to_value(&self) -> Value {
        match self {
            Node::Null => Value::Null,
            Node::Bool(b) => Value::Bool(*b),
            Node::Number(n) => Value::Number(n.clone()),
            Node::String(s) => Value::String(s.clone()),
            Node::Array(a) => Value::Array(a.iter().map(Node::to_value).collect()),
            Node::Object(m) => {
                Value::Object(m.iter().map(|(k, v)| (k.clone(), v.to_value())).collect())
            }
        }
    }
}

impl From<&Value> for Node {
    fn from(v: &Value) -> Self {
        match v {
            Value::Null => Node::Null,
            Value::Bool(b) => Node::Bool(*b),
            Value::Number(n) => Node::Number(n.clone()),
            Value::String(s) => Node::String(s.clone()),
            Value::Array(a) => Node::Array(a.iter().map(Node::from).collect()),
            Value::Object(m) => Node::Object(Obj::from_distinct(
                m.iter().map(|(k, v)| (k.clone(), Node::from(v))).collect(),
            )),
        }
    }
}

impl From<String> for Node {
    fn from(s: String) -> Self {
        Node::String(s)
    }
}

impl Serialize for Node {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Node::Null => s.serialize_unit(),
            Node::Bool(b) => s.serialize_bool(*b),
            Node::Number(n) => n.serialize(s),
            Node::String(v) => s.serialize_str(v),
            Node::Array(a) => s.collect_seq(a),
            Node::Object(m) => m.serialize(s),
        }
    }
}

impl Serialize for Obj {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.len()))?;
        for (k, v) in &self.0 {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

/// The key serde_json's `Value` takes for a raw value (feature `raw_value`, which a dependency
/// turns on): an object whose first key is this decodes the string after it as JSON.
pub const RAW_VALUE_KEY: &str = "$serde_json::private::RawValue";

/// The string after [`RAW_VALUE_KEY`], read as serde_json reads it (its errors say
/// "expected raw value", as `Value`'s do).
struct RawText;

impl<'de> de::DeserializeSeed<'de> for RawText {
    type Value = String;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<String, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for RawText {
    type Value = String;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("raw value")
    }
    fn visit_str<E>(self, v: &str) -> Result<String, E> {
        Ok(v.to_owned())
    }
    fn visit_string<E>(self, v: String) -> Result<String, E> {
        Ok(v)
    }
}

/// An object being decoded entry by entry, as `Map<String, Value>` decodes one: a repeated key
/// keeps its first position and its last value, in linear time for any size (a position
/// index past 32 entries).
#[derive(Default)]
pub struct ObjDecoder {
    obj: Obj,
    index: Index,
}

impl ObjDecoder {
    pub fn insert(&mut self, key: String, value: Node) {
        self.index.insert(&mut self.obj, key, value);
    }

    pub fn finish(self) -> Obj {
        self.obj
    }

    /// Inserts the rest of a map being decoded, as `Map<String, Value>` does.
    fn fill<'de, A: MapAccess<'de>>(mut self, mut map: A) -> Result<Obj, A::Error> {
        while let Some((k, v)) = map.next_entry()? {
            self.insert(k, v);
        }
        Ok(self.finish())
    }
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct NodeVisitor;
        impl<'de> Visitor<'de> for NodeVisitor {
            type Value = Node;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any valid JSON value")
            }
            fn visit_bool<E>(self, v: bool) -> Result<Node, E> {
                Ok(Node::Bool(v))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Node, E> {
                Ok(Node::Number(v.into()))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Node, E> {
                Ok(Node::Number(v.into()))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Node, E> {
                Ok(Number::from_f64(v).map_or(Node::Null, Node::Number))
            }
            fn visit_str<E>(self, v: &str) -> Result<Node, E> {
                Ok(Node::String(v.to_owned()))
            }
            fn visit_string<E>(self, v: String) -> Result<Node, E> {
                Ok(Node::String(v))
            }
            fn visit_none<E>(self) -> Result<Node, E> {
                Ok(Node::Null)
            }
            fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Node, D::Error> {
                Node::deserialize(d)
            }
            fn visit_unit<E>(self) -> Result<Node, E> {
                Ok(Node::Null)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
                let mut out = Vec::new();
                while let Some(v) = seq.next_element()? {
                    out.push(v);
                }
                Ok(Node::Array(out))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
                let Some(first) = map.next_key::<String>()? else {
                    return Ok(Node::Object(Obj::new()));
                };
                if first == RAW_VALUE_KEY {
                    let raw = map.next_value_seed(RawText)?;
                    return serde_json::from_str(&raw).map_err(de::Error::custom);
                }
                let mut m = ObjDecoder::default();
                m.insert(first, map.next_value()?);
                Ok(Node::Object(m.fill(map)?))
            }
        }
        d.deserialize_any(NodeVisitor)
    }
}

/// As `Map<String, Value>` decodes: a map (or unit, as an empty map), a repeated key keeping
/// its first position and its last value.
impl<'de> Deserialize<'de> for Obj {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct ObjVisitor;
        impl<'de> Visitor<'de> for ObjVisitor {
            type Value = Obj;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map")
            }
            fn visit_unit<E>(self) -> Result<Obj, E> {
                Ok(Obj::new())
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Obj, A::Error> {
                ObjDecoder::default().fill(map)
            }
        }
        d.deserialize_map(ObjVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Map, json};

    /// Bodies with repeated keys, nesting, numbers of every kind, escapes and a raw-value key:
    /// a `Node` decodes, serializes, compares and edits as a `Value` does.
    #[test]
    fn node_decodes_serializes_and_edits_as_a_value() {
        let texts = [
            r#"{"b":1,"a":{"x":[1,-2,3.5,1e300,null,true,"s\u00e9\n"],"y":{}},"b":2,"c":[]}"#,
            r#"{"k":1,"k":{"k":"v"},"j":0.1,"k":null}"#,
            r#"{"$serde_json::private::RawValue":"{\"z\":1,\"a\":2}"}"#,
            r#"[18446744073709551615,-9223372036854775808,0,-0,0.0]"#,
            r#"{}"#,
            r#""plain""#,
        ];
        for t in texts {
            let v: Value = serde_json::from_str(t).unwrap();
            let n: Node = serde_json::from_str(t).unwrap();
            assert_eq!(
                serde_json::to_string(&n).unwrap(),
                serde_json::to_string(&v).unwrap(),
                "{t}"
            );
            assert_eq!(n.to_value(), v, "{t}");
            assert_eq!(Node::from(&v), n, "{t}");
        }
        // A raw-value key with a non-string value fails with `Value`'s words.
        let bad = r#"{"x":{"$serde_json::private::RawValue":5}}"#;
        assert_eq!(
            serde_json::from_str::<Node>(bad).unwrap_err().to_string(),
            serde_json::from_str::<Value>(bad).unwrap_err().to_string()
        );
        // Large maps with repeated keys (indexed beyond 32 entries) keep `Map`'s order and values.
        let mut big = String::from("{");
        for i in 0..200 {
            big.push_str(&format!(r#""k{}":{i},"#, (i * 7) % 90));
        }
        big.push_str(r#""end":true}"#);
        let n: Node = serde_json::from_str(&big).unwrap();
        let v: Value = serde_json::from_str(&big).unwrap();
        assert_eq!(
            serde_json::to_string(&n).unwrap(),
            serde_json::to_string(&v).unwrap()
        );
        let o: Obj = serde_json::from_str(&big).unwrap();
        let m: Map<String, Value> = serde_json::from_str(&big).unwrap();
        assert_eq!(
            serde_json::to_string(&o).unwrap(),
            serde_json::to_string(&m).unwrap()
        );
        let collected: Obj = m.iter().map(|(k, v)| (k.clone(), Node::from(v))).collect();
        assert_eq!(Node::Object(collected).to_value(), Value::Object(m));

        let a: Obj = serde_json::from_str(r#"{"a":1,"b":2,"a":3}"#).unwrap();
        let m: Map<String, Value> = serde_json::from_str(r#"{"a":1,"b":2,"a":3}"#).unwrap();
        assert_eq!(
            serde_json::to_string(&a).unwrap(),
            serde_json::to_string(&m).unwrap()
        );

        // Edits in the same sequence leave the same order.
        let mut n = Obj::new();
        let mut m = Map::new();
        for (i, k) in ["a", "b", "c", "d", "e"].iter().enumerate() {
            n.insert(k.to_string(), Node::from(&json!(i)));
            m.insert(k.to_string(), json!(i));
        }
        n.remove("b");
        m.remove("b");
        n.insert("c".into(), Node::from(&json!("new")));
        m.insert("c".into(), json!("new"));
        n.insert("f".into(), Node::Null);
        m.insert("f".into(), Value::Null);
        assert_eq!(n.keys().collect::<Vec<_>>(), m.keys().collect::<Vec<_>>());
        assert_eq!(Node::Object(n.clone()).to_value(), Value::Object(m));

        // Equality ignores order, as `Map`'s does.
        let x: Node = serde_json::from_str(r#"{"a":1,"b":{"c":2,"d":3}}"#).unwrap();
        let y: Node = serde_json::from_str(r#"{"b":{"d":3,"c":2},"a":1}"#).unwrap();
        let z: Node = serde_json::from_str(r#"{"b":{"d":3,"c":2},"a":2}"#).unwrap();
        assert_eq!(x, y);
        assert_ne!(x, z);
        assert_ne!(x, Node::Object(Obj::new()));
    }
}
