//! A map kept as one sorted vector: the API and iteration order of `BTreeMap`, for the maps kerf
//! holds per workload and per container, which have one to a few entries. A `BTreeMap`'s first
//! entry allocates a whole node; here an entry costs its own size (memory: docs/performance.md).
//! Lookups are binary searches: fine for the handful of entries these maps hold, not meant for
//! large maps.

use std::borrow::Borrow;
use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

#[derive(Clone, PartialEq, Eq, Hash)]
pub struct SmallMap<K, V> {
    /// Sorted by key, keys unique.
    entries: Vec<(K, V)>,
}

impl<K, V> Default for SmallMap<K, V> {
    fn default() -> Self {
        Self {
            entries: Vec::new(),
        }
    }
}

impl<K: Ord, V> SmallMap<K, V> {
    pub const fn new() -> Self {
        Self {
            entries: Vec::new(),
        }
    }

    fn find<Q>(&self, key: &Q) -> Result<usize, usize>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.entries.binary_search_by(|(k, _)| k.borrow().cmp(key))
    }

    pub fn get<Q>(&self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.find(key).ok().map(|i| &self.entries[i].1)
    }

    pub fn get_mut<Q>(&mut self, key: &Q) -> Option<&mut V>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.find(key).ok().map(|i| &mut self.entries[i].1)
    }

    pub fn contains_key<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.find(key).is_ok()
    }

    /// Sets `key` to `value`; the old value, if any, is returned.
    pub fn insert(&mut self, key: K, value: V) -> Option<V> {
        match self.find(&key) {
            Ok(i) => Some(std::mem::replace(&mut self.entries[i].1, value)),
            Err(i) => {
                self.entries.insert(i, (key, value));
                None
            }
        }
    }

    pub fn remove<Q>(&mut self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.find(key).ok().map(|i| self.entries.remove(i).1)
    }

    /// As `BTreeMap::entry`, for the `or_default`/`or_insert_with` uses.
    pub fn entry(&mut self, key: K) -> Entry<'_, K, V> {
        Entry { map: self, key }
    }

    pub fn retain(&mut self, mut keep: impl FnMut(&K, &mut V) -> bool) {
        self.entries.retain_mut(|(k, v)| keep(k, v));
    }
}

pub struct Entry<'a, K, V> {
    map: &'a mut SmallMap<K, V>,
    key: K,
}

impl<'a, K: Ord, V> Entry<'a, K, V> {
    pub fn or_insert_with(self, make: impl FnOnce() -> V) -> &'a mut V {
        let i = match self.map.find(&self.key) {
            Ok(i) => i,
            Err(i) => {
                self.map.entries.insert(i, (self.key, make()));
                i
            }
        };
        &mut self.map.entries[i].1
    }

    pub fn or_default(self) -> &'a mut V
    where
        V: Default,
    {
        self.or_insert_with(V::default)
    }
}

impl<K, V> SmallMap<K, V> {
    pub fn clear(&mut self) {
        self.entries.clear();
    }

    pub fn shrink_to_fit(&mut self) {
        self.entries.shrink_to_fit();
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Bytes its entries' storage takes (not what the entries point to).
    pub fn heap_bytes(&self) -> usize {
        self.entries.capacity() * std::mem::size_of::<(K, V)>()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Entries in key order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (&K, &V)> + ExactSizeIterator {
        self.entries.iter().map(|(k, v)| (k, v))
    }

    pub fn iter_mut(
        &mut self,
    ) -> impl DoubleEndedIterator<Item = (&K, &mut V)> + ExactSizeIterator {
        self.entries.iter_mut().map(|(k, v)| (&*k, v))
    }

    pub fn keys(&self) -> impl DoubleEndedIterator<Item = &K> + ExactSizeIterator {
        self.entries.iter().map(|(k, _)| k)
    }

    pub fn values(&self) -> impl DoubleEndedIterator<Item = &V> + ExactSizeIterator {
        self.entries.iter().map(|(_, v)| v)
    }
}

/// As `BTreeMap`: panics when `key` is absent.
impl<K: Ord + Borrow<Q>, Q: Ord + ?Sized, V> std::ops::Index<&Q> for SmallMap<K, V> {
    type Output = V;

    fn index(&self, key: &Q) -> &V {
        self.get(key).expect("key in SmallMap")
    }
}

impl<K: Ord, V> Extend<(K, V)> for SmallMap<K, V> {
    fn extend<I: IntoIterator<Item = (K, V)>>(&mut self, iter: I) {
        for (k, v) in iter {
            self.insert(k, v);
        }
    }
}

/// As `BTreeMap`: of two entries with the same key, the later one stays.
impl<K: Ord, V> FromIterator<(K, V)> for SmallMap<K, V> {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let mut entries: Vec<(K, V)> = iter.into_iter().collect();
        // Stable: equal keys keep their input order. `dedup_by` keeps the first of a run, so
        // each later value is moved into it as the run is folded.
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        entries.dedup_by(|later, kept| {
            let same = later.0 == kept.0;
            if same {
                std::mem::swap(&mut later.1, &mut kept.1);
            }
            same
        });
        entries.shrink_to_fit();
        Self { entries }
    }
}

impl<K: Ord, V, const N: usize> From<[(K, V); N]> for SmallMap<K, V> {
    fn from(entries: [(K, V); N]) -> Self {
        entries.into_iter().collect()
    }
}

impl<K, V> IntoIterator for SmallMap<K, V> {
    type Item = (K, V);
    type IntoIter = std::vec::IntoIter<(K, V)>;

    fn into_iter(self) -> Self::IntoIter {
        self.entries.into_iter()
    }
}

impl<'a, K, V> IntoIterator for &'a SmallMap<K, V> {
    type Item = (&'a K, &'a V);
    type IntoIter = std::iter::Map<std::slice::Iter<'a, (K, V)>, fn(&'a (K, V)) -> (&'a K, &'a V)>;

    fn into_iter(self) -> Self::IntoIter {
        self.entries.iter().map(|(k, v)| (k, v))
    }
}

impl<K: fmt::Debug, V: fmt::Debug> fmt::Debug for SmallMap<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl<K: Serialize, V: Serialize> Serialize for SmallMap<K, V> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.iter())
    }
}

impl<'de, K: Ord + Deserialize<'de>, V: Deserialize<'de>> Deserialize<'de> for SmallMap<K, V> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let map = std::collections::BTreeMap::<K, V>::deserialize(d)?;
        Ok(map.into_iter().collect())
    }
}

/// The schema of the `BTreeMap` it stands for: the CRDs are the same either way.
impl<K: schemars::JsonSchema, V: schemars::JsonSchema> schemars::JsonSchema for SmallMap<K, V> {
    fn inline_schema() -> bool {
        <std::collections::BTreeMap<K, V>>::inline_schema()
    }

    fn schema_name() -> std::borrow::Cow<'static, str> {
        <std::collections::BTreeMap<K, V>>::schema_name()
    }

    fn schema_id() -> std::borrow::Cow<'static, str> {
        <std::collections::BTreeMap<K, V>>::schema_id()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        <std::collections::BTreeMap<K, V>>::json_schema(generator)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[test]
    fn small_map_behaves_as_a_btreemap() {
        let ops: [(&str, i32); 7] = [
            ("proxy", 1),
            ("app", 2),
            ("zeta", 3),
            ("app", 4),
            ("mid", 5),
            ("proxy", 6),
            ("b", 7),
        ];
        let mut small = SmallMap::new();
        let mut tree = BTreeMap::new();
        for (k, v) in ops {
            assert_eq!(
                small.insert(k.to_string(), v),
                tree.insert(k.to_string(), v)
            );
        }
        assert!(small.iter().eq(tree.iter()));
        assert_eq!(small.remove("mid"), tree.remove("mid"));
        assert_eq!(small.remove("absent"), tree.remove("absent"));
        assert!(small.iter().eq(tree.iter()));
        assert_eq!(small.get("app"), tree.get("app"));
        assert_eq!(small.get("absent"), None);
        assert_eq!(format!("{small:?}"), format!("{tree:?}"));
        let collected: SmallMap<String, i32> =
            ops.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        let collected_tree: BTreeMap<String, i32> =
            ops.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        assert!(
            collected.iter().eq(collected_tree.iter()),
            "the later duplicate stays"
        );
        assert_eq!(
            serde_json::to_string(&collected).unwrap(),
            serde_json::to_string(&collected_tree).unwrap()
        );
        let back: SmallMap<String, i32> =
            serde_json::from_str(&serde_json::to_string(&collected).unwrap()).unwrap();
        assert_eq!(back, collected);
    }
}
