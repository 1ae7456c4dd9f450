//! docs/design/gpu-engine.md#g1: the current GPU allocation of each container (KAI contract
//! `v1alpha1-2026-07`), and which containers a policy's scope includes.

use std::collections::BTreeMap;

use crate::core::pod::{Container, PodSpec};
use crate::core::quantity::{self, QuantityError};

use crate::core::accelerator::NVIDIA_KAI;

/// A container's allocation, or why it has none.
#[derive(Clone, Debug, PartialEq)]
pub enum Allocation {
    Gpus(f64),
    Missing(String),
}

impl Allocation {
    pub fn gpus(&self) -> Option<f64> {
        match self {
            Allocation::Gpus(g) => Some(*g),
            Allocation::Missing(_) => None,
        }
    }
}

/// Regular containers, then restartable init containers (sidecars): the containers an empty
/// `scope.containers` covers, in pod order.
pub fn default_scope_containers(spec: &PodSpec) -> Vec<&Container> {
    let sidecars = spec
        .init_containers
        .iter()
        .flatten()
        .filter(|c| c.restart_policy.as_deref() == Some("Always"));
    spec.containers.iter().chain(sidecars).collect()
}

/// Names the policy scope includes for this pod spec. Exact names are looked up among all
/// containers (regular and init); an empty scope means the default set.
pub fn scoped_container_names(spec: &PodSpec, scope: &[String]) -> Vec<String> {
    if scope.is_empty() {
        return default_scope_containers(spec)
            .into_iter()
            .map(|c| c.name.clone())
            .collect();
    }
    let all = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten());
    all.filter(|c| scope.iter().any(|s| s == &c.name))
        .map(|c| c.name.clone())
        .collect()
}

/// A container's `nvidia.com/gpu`: its limit, else its request, in GPU units
/// ([`quantity::gpus`]); `None` when it states neither.
fn whole_gpus(c: &Container) -> Option<Result<f64, QuantityError>> {
    let res = c.resources.as_ref()?;
    let limit = res
        .limits
        .as_ref()
        .and_then(|m| m.get(NVIDIA_KAI.resource_name));
    let request = res
        .requests
        .as_ref()
        .and_then(|m| m.get(NVIDIA_KAI.resource_name));
    limit.or(request).map(quantity::gpus)
}

/// Allocation of every container of a pod (or pod template) keyed by name, following the KAI
/// contract: a fractional pod gives its fraction × devices to one container; otherwise
/// `nvidia.com/gpu` limits (else requests); anything else has no allocation.
pub fn container_allocations(
    spec: &PodSpec,
    annotations: &BTreeMap<String, String>,
) -> BTreeMap<String, Allocation> {
    let mut out = BTreeMap::new();
    let fraction = annotations
        .get(NVIDIA_KAI.fraction_annotation)
        .map(|f| f.trim().parse::<f64>());
    let fraction_container = annotations
        .get(NVIDIA_KAI.fraction_container_annotation)
        .cloned()
        .or_else(|| spec.containers.first().map(|c| c.name.clone()));
    let devices = match annotations.get(NVIDIA_KAI.fraction_devices_annotation) {
        None => Ok(1.0),
        Some(n) => n
            .trim()
            .parse::<u32>()
            .ok()
            .filter(|n| *n >= 1)
            .map(f64::from)
            .ok_or_else(|| {
                format!(
                    "{}={n:?} is not a positive integer",
                    NVIDIA_KAI.fraction_devices_annotation
                )
            }),
    };
    let all = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten());
    for c in all {
        let alloc = if fraction.is_some() && fraction_container.as_deref() == Some(c.name.as_str())
        {
            match (&fraction, &devices) {
                (Some(Ok(f)), Ok(n)) if *f > 0.0 && *f < 1.0 => Allocation::Gpus(f * n),
                (Some(_), Err(e)) => Allocation::Missing(e.clone()),
                _ => Allocation::Missing(format!(
                    "{}={:?} is not a fraction in (0, 1)",
                    NVIDIA_KAI.fraction_annotation,
                    annotations
                        .get(NVIDIA_KAI.fraction_annotation)
                        .map(String::as_str)
                        .unwrap_or_default()
                )),
            }
        } else {
            match whole_gpus(c) {
                Some(Ok(g)) if g > 0.0 => Allocation::Gpus(g),
                Some(Err(e)) => Allocation::Missing(format!("{}: {e}", NVIDIA_KAI.resource_name)),
                _ if annotations.contains_key(NVIDIA_KAI.memory_annotation) => {
                    Allocation::Missing(format!(
                        "KAI {} allocations are not sized by kerf",
                        NVIDIA_KAI.memory_annotation
                    ))
                }
                _ => Allocation::Missing(format!(
                    "neither {} nor {}",
                    NVIDIA_KAI.fraction_annotation, NVIDIA_KAI.resource_name
                )),
            }
        };
        out.insert(c.name.clone(), alloc);
    }
    out
}
