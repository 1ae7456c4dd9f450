//! docs/design/gpu-engine.md#g1: the current GPU allocation of each container (KAI contract
//! `v1alpha1-2026-07`), and which containers a policy's scope includes.

use std::borrow::Cow;
use std::sync::LazyLock;

use crate::pod::{Container, PodSpec, StrMap};
use crate::quantity::{self, QuantityError};

use crate::accelerator::{Holds, NVIDIA_KAI};
use kerf_support::small_map::SmallMap;

/// A container's allocation, or why it has none.
#[derive(Clone, Debug, PartialEq)]
pub enum Allocation {
    Gpus(f64),
    Missing(Cow<'static, str>),
}

/// The fixed reasons for no allocation, formatted once: every container of every pod is read
/// every cycle, and most sidecars have no GPU.
static KAI_MEMORY_NOT_SIZED: LazyLock<String> = LazyLock::new(|| {
    format!(
        "KAI {} allocations are not sized by kerf",
        NVIDIA_KAI.memory_annotation
    )
});
static KAI_NV_FRACTIONS_NOT_SIZED: LazyLock<String> = LazyLock::new(|| {
    format!(
        "KAI per-container GPU memory ({}<name>.gpu-memory.*) allocations are not sized by kerf",
        NVIDIA_KAI.nv_fractions_prefix
    )
});
static NO_GPU: LazyLock<String> = LazyLock::new(|| {
    format!(
        "neither {} nor {}",
        NVIDIA_KAI.fraction_annotation, NVIDIA_KAI.resource_name
    )
});

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
        .filter(|c| c.is_sidecar());
    spec.containers.iter().chain(sidecars).collect()
}

/// Names the policy scope includes for this pod spec. Exact names are looked up among all
/// containers (regular and init); an empty scope means the default set.
pub fn scoped_container_names(spec: &PodSpec, scope: &[String]) -> Vec<String> {
    if scope.is_empty() {
        return default_scope_containers(spec)
            .into_iter()
            .map(|c| c.name.to_string())
            .collect();
    }
    let all = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten());
    all.filter(|c| scope.iter().any(|s| s == c.name))
        .map(|c| c.name.to_string())
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
/// `nvidia.com/gpu` limits (else requests); anything else has no allocation. A [`SmallMap`]: it
/// is read for every pod and template each cycle, and a pod has a few containers.
pub fn container_allocations(
    spec: &PodSpec,
    annotations: &impl StrMap,
) -> SmallMap<String, Allocation> {
    let mut out = SmallMap::new();
    let fraction = NVIDIA_KAI.stated_fraction(
        annotations,
        spec.containers.first().map(|c| c.name.as_str()),
    );
    let all = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten());
    for c in all {
        let alloc = if let Some(f) = fraction.as_ref().filter(|f| f.container == c.name) {
            match &f.size {
                Ok((f, n)) => Allocation::Gpus(f * f64::from(*n)),
                Err(why) => Allocation::Missing(Cow::Owned(why.to_string())),
            }
        } else {
            match whole_gpus(c) {
                Some(Ok(g)) if g > 0.0 => Allocation::Gpus(g),
                Some(Err(e)) => {
                    Allocation::Missing(Cow::Owned(format!("{}: {e}", NVIDIA_KAI.resource_name)))
                }
                _ if annotations.get_str(NVIDIA_KAI.memory_annotation).is_some() => {
                    Allocation::Missing(Cow::Borrowed(KAI_MEMORY_NOT_SIZED.as_str()))
                }
                _ if NVIDIA_KAI.shares_by_memory(annotations).is_some() => {
                    Allocation::Missing(Cow::Borrowed(KAI_NV_FRACTIONS_NOT_SIZED.as_str()))
                }
                _ => Allocation::Missing(Cow::Borrowed(NO_GPU.as_str())),
            }
        };
        out.insert(c.name.to_string(), alloc);
    }
    out
}

/// What each container of a pod (or pod template) holds of the GPU, regular then init
/// containers in pod order: the fraction's container, else whoever states `nvidia.com/gpu`
/// (docs/design/kai-admission.md#k4 reads these, as KAI's validator does).
pub fn gpu_holdings<'s>(spec: &'s PodSpec, annotations: &impl StrMap) -> Vec<(&'s str, Holds)> {
    let fraction = NVIDIA_KAI.stated_fraction(
        annotations,
        spec.containers.first().map(|c| c.name.as_str()),
    );
    spec.containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .map(|c| {
            let holds = if fraction.as_ref().is_some_and(|f| f.container == c.name) {
                Holds::Fraction
            } else if whole_gpus(c).is_some() {
                Holds::Whole
            } else {
                Holds::Nothing
            };
            (c.name.as_str(), holds)
        })
        .collect()
}
