//! The watch-fed index of one kind: each object projected to what evaluation reads as it
//! arrives.

use super::*;

/// One Kubernetes kind as kerf keeps it: each object is projected to what evaluation reads as it
/// arrives, so the cache never holds whole objects (a full `Pod` or `Deployment` is kilobytes of
/// fields kerf never reads, and pods are the bulk of a cluster).
pub(super) struct Projected<T> {
    pub(super) state: RwLock<ProjectedState<T>>,
}

pub(super) struct ProjectedState<T> {
    pub(super) live: BTreeMap<ObjKey, T>,
    /// Keys seen by the relist in progress, if any.
    pub(super) relisted: Option<BTreeSet<ObjKey>>,
}

impl<T: Clone> Projected<T> {
    pub(super) fn new() -> Self {
        Self {
            state: RwLock::new(ProjectedState {
                live: BTreeMap::new(),
                relisted: None,
            }),
        }
    }

    /// Applies one event. A relist replaces objects one by one as they arrive and, once it has
    /// completed, drops those it did not list (deleted meanwhile). It never holds a second copy
    /// of the kind: at 33,000 pods that copy would double the cache during every relist.
    pub(super) fn apply<K: Resource>(&self, event: watcher::Event<K>, project: impl Fn(K) -> T) {
        let key = |o: &K| (o.meta().namespace.clone(), o.name_any());
        let mut st = self.state.write().unwrap_or_else(|e| e.into_inner());
        match event {
            watcher::Event::Apply(o) => {
                let k = key(&o);
                st.live.insert(k, project(o));
            }
            watcher::Event::Delete(o) => {
                st.live.remove(&key(&o));
            }
            watcher::Event::Init => st.relisted = Some(BTreeSet::new()),
            watcher::Event::InitApply(o) => {
                let k = key(&o);
                st.relisted.get_or_insert_default().insert(k.clone());
                st.live.insert(k, project(o));
            }
            watcher::Event::InitDone => {
                let listed = st.relisted.take().unwrap_or_default();
                st.live.retain(|k, _| listed.contains(k));
            }
        }
    }

    /// Drops every object (the resource is no longer served).
    pub(super) fn clear(&self) {
        let mut st = self.state.write().unwrap_or_else(|e| e.into_inner());
        st.live.clear();
        st.relisted = None;
    }

    /// Every object, ordered by (namespace, name).
    pub(super) fn entries(&self) -> Vec<(ObjKey, T)> {
        let st = self.state.read().unwrap_or_else(|e| e.into_inner());
        st.live
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    pub(super) fn values(&self) -> Vec<T> {
        let st = self.state.read().unwrap_or_else(|e| e.into_inner());
        st.live.values().cloned().collect()
    }
}
