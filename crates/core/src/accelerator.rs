//! The GPU accelerator kerf sizes, and every name a pod uses to state it: the NVIDIA device
//! plugin's extended resource for whole GPUs, and the KAI scheduler's annotations and label for
//! fractions and queues (KAI contract `v1alpha1-2026-07`, docs/design/kai-admission.md). The
//! names live here once; the allocation reader (docs/design/gpu-engine.md#g1) and the admission
//! patch builder take them from [`NVIDIA_KAI`].

use crate::pod::StrMap;
#[cfg(test)]
use crate::pod::Strings;

use kerf_api::{GPU_KAI_CONTRACT, KAI_DEFAULT_QUEUE_LABEL};

/// How pods ask for an accelerator: a resource for whole devices, annotations for fractions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Accelerator {
    /// The contract these names belong to (`spec.experimental.gpuKaiContract`).
    pub contract: &'static str,
    /// Extended resource for whole devices, in a container's `resources.limits` / `requests`.
    pub resource_name: &'static str,
    /// Pod annotation: the fraction f of one device, 0 < f < 1.
    pub fraction_annotation: &'static str,
    /// Pod annotation: the number of devices n that each get f (default 1).
    pub fraction_devices_annotation: &'static str,
    /// Pod annotation: the container holding the fraction (default: the pod's first container).
    pub fraction_container_annotation: &'static str,
    /// Pod annotation: a share sized in memory, which kerf does not size.
    pub memory_annotation: &'static str,
    /// Pod annotation: `"true"` asks for CUDA MPS, which KAI allows only with a fraction.
    pub mps_annotation: &'static str,
    /// Prefix of KAI's per-container GPU memory annotations ("NvFractions":
    /// `nvidia.com/container.<name>.gpu-memory.request|limit`), which kerf does not size.
    pub nv_fractions_prefix: &'static str,
    /// Pod label: the scheduler queue — KAI's default key; GlobalConfiguration
    /// `kai.queueLabelKey` names the one in force.
    pub queue_label: &'static str,
}

/// NVIDIA GPUs shared through the KAI scheduler.
pub const NVIDIA_KAI: Accelerator = Accelerator {
    contract: GPU_KAI_CONTRACT,
    resource_name: "nvidia.com/gpu",
    fraction_annotation: "gpu-fraction",
    fraction_devices_annotation: "gpu-fraction-num-devices",
    fraction_container_annotation: "gpu-fraction-container-name",
    memory_annotation: "gpu-memory",
    mps_annotation: "mps",
    nv_fractions_prefix: "nvidia.com/container.",
    queue_label: KAI_DEFAULT_QUEUE_LABEL,
};

/// What a container holds of the accelerator as a pod (or template) states it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Holds {
    Nothing,
    /// `nvidia.com/gpu` in its requests or limits.
    Whole,
    /// The pod's fraction (`gpu-fraction` naming it, or it is the first container).
    Fraction,
}

/// A pod's fractional allocation as its annotations state it (docs/design/gpu-engine.md#g1).
#[derive(Clone, Debug, PartialEq)]
pub struct StatedFraction {
    /// The container holding it: the container annotation, else the pod's first container.
    pub container: String,
    /// The fraction f of one device (0 < f < 1) and the device count n, or why the annotations
    /// are not a usable fraction.
    pub size: Result<(f64, u32), FractionError>,
}

/// Why KAI's fraction annotations are not a usable fraction: the annotation and its value.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FractionError {
    #[error("{annotation}={value:?} is not a positive integer")]
    Devices {
        annotation: &'static str,
        value: String,
    },
    #[error("{annotation}={value:?} is not a fraction in (0, 1)")]
    Fraction {
        annotation: &'static str,
        value: String,
    },
}

impl Accelerator {
    /// The fraction a pod's `annotations` state; `first_container` is the pod's first (regular)
    /// container. `None` without the fraction annotation, or with no container to hold it. The
    /// one reading of these annotations: the allocation reader and admission both use it.
    pub fn stated_fraction(
        &self,
        annotations: &impl StrMap,
        first_container: Option<&str>,
    ) -> Option<StatedFraction> {
        let text = annotations.get_str(self.fraction_annotation)?;
        let container = annotations
            .get_str(self.fraction_container_annotation)
            .or(first_container)?
            .to_string();
        let devices = match annotations.get_str(self.fraction_devices_annotation) {
            None => Ok(1),
            Some(n) => n
                .trim()
                .parse::<u32>()
                .ok()
                .filter(|n| *n >= 1)
                .ok_or_else(|| FractionError::Devices {
                    annotation: self.fraction_devices_annotation,
                    value: n.to_string(),
                }),
        };
        let size = devices.and_then(|n| match text.trim().parse::<f64>() {
            Ok(f) if f > 0.0 && f < 1.0 => Ok((f, n)),
            _ => Err(FractionError::Fraction {
                annotation: self.fraction_annotation,
                value: text.to_string(),
            }),
        });
        Some(StatedFraction { container, size })
    }

    /// The annotations of a fractional allocation: written, and removed, together.
    pub fn fraction_annotations(&self) -> [&'static str; 3] {
        [
            self.fraction_annotation,
            self.fraction_devices_annotation,
            self.fraction_container_annotation,
        ]
    }

    /// Whether a pod shares GPUs by memory — `gpu-memory` or the per-container "NvFractions"
    /// annotations — which kerf does not size (contract `v1alpha1-2026-07` sizes `gpu-fraction`
    /// only) and never turns into a fraction.
    pub fn shares_by_memory(&self, annotations: &impl StrMap) -> Option<&'static str> {
        if annotations.get_str(self.memory_annotation).is_some() {
            return Some("KAI gpu-memory");
        }
        let nv_fraction = |k: &str| {
            k.strip_prefix(self.nv_fractions_prefix)
                .is_some_and(|rest| {
                    rest.ends_with(".gpu-memory.request") || rest.ends_with(".gpu-memory.limit")
                })
        };
        annotations
            .any_key(&nv_fraction)
            .then_some("KAI per-container GPU memory (nvidia.com/container.<name>.gpu-memory.*)")
    }

    /// Annotations that say a pod already uses the scheduler's GPU sharing.
    pub fn sharing_annotations(&self) -> [&'static str; 4] {
        [
            self.fraction_annotation,
            self.memory_annotation,
            self.fraction_devices_annotation,
            self.fraction_container_annotation,
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names are the contract's (docs/design/kai-admission.md); changing one breaks every
    /// pod that already carries it.
    #[test]
    fn nvidia_kai_names_are_those_of_the_kai_contract() {
        assert_eq!(NVIDIA_KAI.contract, "v1alpha1-2026-07");
        assert_eq!(NVIDIA_KAI.resource_name, "nvidia.com/gpu");
        assert_eq!(
            NVIDIA_KAI.fraction_annotations(),
            [
                "gpu-fraction",
                "gpu-fraction-num-devices",
                "gpu-fraction-container-name"
            ]
        );
        assert_eq!(
            NVIDIA_KAI.sharing_annotations(),
            [
                "gpu-fraction",
                "gpu-memory",
                "gpu-fraction-num-devices",
                "gpu-fraction-container-name"
            ]
        );
        assert_eq!(NVIDIA_KAI.queue_label, "kai.scheduler/queue");
    }

    fn stated(pairs: &[(&str, &str)]) -> Option<StatedFraction> {
        let annotations: Strings = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        NVIDIA_KAI.stated_fraction(&annotations, Some("first"))
    }

    /// docs/design/gpu-engine.md#g1: f on n devices, held by the named container or the first.
    #[test]
    fn a_kai_fraction_is_read_from_the_pod_annotations() {
        assert_eq!(stated(&[]), None);
        assert_eq!(
            stated(&[("gpu-fraction", " 0.5 ")]),
            Some(StatedFraction {
                container: "first".into(),
                size: Ok((0.5, 1))
            })
        );
        assert_eq!(
            stated(&[
                ("gpu-fraction", "0.25"),
                ("gpu-fraction-num-devices", "4"),
                ("gpu-fraction-container-name", "b")
            ]),
            Some(StatedFraction {
                container: "b".into(),
                size: Ok((0.25, 4))
            })
        );
        for (f, n, why) in [
            ("1", "1", "gpu-fraction=\"1\" is not a fraction in (0, 1)"),
            ("x", "1", "gpu-fraction=\"x\" is not a fraction in (0, 1)"),
            (
                "x",
                "0",
                "gpu-fraction-num-devices=\"0\" is not a positive integer",
            ),
        ] {
            let s = stated(&[("gpu-fraction", f), ("gpu-fraction-num-devices", n)]).unwrap();
            assert_eq!(s.size.unwrap_err().to_string(), why);
        }
        let annotations = Strings::from([("gpu-fraction".to_string(), "0.5".to_string())]);
        assert_eq!(
            NVIDIA_KAI.stated_fraction(&annotations, None),
            None,
            "no container holds it"
        );
    }
}
