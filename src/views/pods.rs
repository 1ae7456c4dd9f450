//! What a pod is allocated — GPUs and CPU/memory requests per container — as the replay and the
//! live page both compare it.

use std::collections::BTreeMap;

use crate::core::allocation::container_allocations;
use crate::core::pod::Pod;
use crate::core::quantity;

/// What one container of a pod is allocated.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ContainerAlloc {
    /// GPU units (None: no GPU allocation kerf can read).
    pub gpu: Option<f64>,
    pub cpu_millis: Option<i64>,
    pub memory_bytes: Option<i64>,
}

/// Per container name.
pub type PodAlloc = BTreeMap<String, ContainerAlloc>;

/// What `pod` is allocated, per container (regular and init).
pub fn pod_alloc(pod: &Pod) -> PodAlloc {
    let Some(spec) = pod.spec.as_ref() else {
        return PodAlloc::new();
    };
    let annotations = pod.metadata.annotations.clone().unwrap_or_default();
    let gpus = container_allocations(spec, &annotations);
    spec.containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .map(|c| {
            let request = |name: &str| {
                c.resources
                    .as_ref()
                    .and_then(|r| r.requests.as_ref())
                    .and_then(|m| m.get(name))
            };
            let alloc = ContainerAlloc {
                gpu: gpus.get(c.name.as_str()).and_then(|a| a.gpus()),
                cpu_millis: request("cpu").and_then(|q| quantity::cpu_millis(q).ok()),
                memory_bytes: request("memory").and_then(|q| quantity::memory_bytes(q).ok()),
            };
            (c.name.to_string(), alloc)
        })
        .collect()
}
