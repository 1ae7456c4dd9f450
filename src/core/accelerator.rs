//! The GPU accelerator kerf sizes, and every name a pod uses to state it: the NVIDIA device
//! plugin's extended resource for whole GPUs, and the KAI scheduler's annotations and label for
//! fractions and queues (KAI contract `v1alpha1-2026-07`, docs/design/kai-admission.md). The
//! names live here once; the allocation reader (docs/design/gpu-engine.md#g1) and the admission
//! patch builder take them from [`NVIDIA_KAI`].

use crate::api::GPU_KAI_CONTRACT;

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
    /// Pod label: the scheduler queue.
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
    queue_label: "kai.scheduler/queue",
};

impl Accelerator {
    /// The annotations of a fractional allocation: written, and removed, together.
    pub fn fraction_annotations(&self) -> [&'static str; 3] {
        [
            self.fraction_annotation,
            self.fraction_devices_annotation,
            self.fraction_container_annotation,
        ]
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
}
