//! Simulated rollouts: the pod a rollout puts in place of a recorded one.

use jiff::Timestamp;

use crate::core::accelerator::NVIDIA_KAI;
use crate::core::admission::mutate_pod;
use crate::core::model::{ANNOTATION_MUTATED, WorkloadState};
use crate::core::pod::{Container, Pod, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// The pod a rollout creates in place of `recorded` at `at`: same name and containers, the
/// resources and GPU annotations of the workload's `template` (as kerf's writes left it), then
/// admitted by kerf's webhook with the workload's served `state` — exactly what a new pod of
/// the workload would get in a cluster.
pub fn rolled_out(
    recorded: &Pod,
    template: &PodTemplateSpec,
    state: Option<&WorkloadState>,
    kai: &crate::api::KaiSettings,
    at: Timestamp,
) -> Pod {
    let mut pod = recorded.clone();
    let annotations = pod
        .metadata
        .annotations
        .get_or_insert_with(Default::default);
    for k in NVIDIA_KAI.sharing_annotations() {
        annotations.remove(k);
    }
    annotations.remove(ANNOTATION_MUTATED);
    for (k, v) in template.annotations() {
        annotations.insert(k.clone(), v.clone());
    }
    let from_template = |c: &mut Container, list: &[Container]| {
        if let Some(t) = list.iter().find(|t| t.name == c.name) {
            c.resources = t.resources.clone();
        }
    };
    let tspec = template.pod_spec();
    if let Some(spec) = pod.spec.as_mut() {
        for c in &mut spec.containers {
            from_template(c, &tspec.containers);
        }
        let tinit = tspec.init_containers.as_deref().unwrap_or_default();
        for c in spec.init_containers.iter_mut().flatten() {
            from_template(c, tinit);
        }
    }
    if let Some(state) = state {
        pod = admitted(pod, state, kai);
    }
    pod.status.get_or_insert_with(Default::default).start_time = Some(Time(at));
    pod
}

/// `pod` with the webhook's patch applied (unchanged if the webhook would not patch it).
fn admitted(pod: Pod, state: &WorkloadState, kai: &crate::api::KaiSettings) -> Pod {
    let Ok(mut value) = serde_json::to_value(&pod) else {
        return pod;
    };
    let Ok(mutation) = mutate_pod(&value, state, kai) else {
        return pod;
    };
    if json_patch::patch(&mut value, &mutation.patch).is_err() {
        return pod;
    }
    serde_json::from_value(value).unwrap_or(pod)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::model::{GpuMap, GpuRecommendation};
    use crate::views::pods::pod_alloc;

    fn pod() -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "llm-1", "namespace": "ml",
                         "annotations": {"gpu-fraction": "0.5", "other": "kept"}},
            "spec": {"containers": [
                {"name": "inference", "resources": {"requests": {"cpu": "2", "memory": "8Gi"}}},
                {"name": "proxy"}]},
            "status": {"phase": "Running", "startTime": "2026-01-01T10:00:00Z"}
        }))
        .unwrap()
    }

    fn template(cpu: &str) -> PodTemplateSpec {
        serde_json::from_value(serde_json::json!({
            "metadata": {"annotations": {"gpu-fraction": "0.5"}},
            "spec": {"containers": [
                {"name": "inference", "resources": {"requests": {"cpu": cpu, "memory": "8Gi"}}},
                {"name": "proxy"}]}
        }))
        .unwrap()
    }

    #[test]
    fn a_rolled_out_pod_gets_the_template_and_the_webhooks_gpu_and_starts_at_the_tick() {
        let at: Timestamp = "2026-01-02T00:00:00Z".parse().unwrap();
        let state = WorkloadState {
            gpu: Some(GpuRecommendation {
                containers: GpuMap::from([("inference".to_string(), 0.84)]),
                ..Default::default()
            }),
            template_gpu: GpuMap::from([("inference".to_string(), 0.5)]),
            ..Default::default()
        };
        let new = rolled_out(
            &pod(),
            &template("700m"),
            Some(&state),
            &Default::default(),
            at,
        );
        let alloc = pod_alloc(&new);
        assert_eq!(alloc["inference"].gpu, Some(0.84));
        assert_eq!(alloc["inference"].cpu_millis, Some(700));
        assert_eq!(alloc["inference"].memory_bytes, Some(8 << 30));
        assert_eq!(new.metadata.name.as_deref(), Some("llm-1"));
        assert_eq!(new.metadata.annotations.as_ref().unwrap()["other"], "kept");
        let started = new.status.as_ref().unwrap().start_time.as_ref().unwrap();
        assert_eq!(started.0, at);

        // Without a recommendation the template's own 0.5 comes back.
        let back = rolled_out(&new, &template("700m"), None, &Default::default(), at);
        assert_eq!(pod_alloc(&back)["inference"].gpu, Some(0.5));
    }
}
