//! The in-memory writer: kerf's own writes (GPU annotations, template requests, rolling
//! restarts, HPA targets, RightsizingRecommendations, policy conditions) applied to objects held
//! in memory, for the modes without an API server (`kerf serve --standalone`, `kerf recommend`).
//!
//! The object source re-reads its manifests every cycle; [`MemoryWriter::overlay`] puts kerf's
//! writes back on top, as the fields kerf owns would stay on the objects in a cluster. So the next
//! cycle sees what the previous one wrote — baseline, last recommendation, applied requests —
//! exactly as the in-cluster loop does, and a cycle whose queries fail keeps them.
//! Like the cluster writer, it writes nothing to workloads or HPAs under `readOnly`.

use std::collections::BTreeMap;

use crate::core::hash::HashMap;
use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::api::PolicyStatus;
use crate::core::hpa::utilization_metrics;
use crate::core::model::{
    ANNOTATION_GPU_BASELINE, ANNOTATION_GPU_RECOMMENDATION, ANNOTATION_RESTARTED_AT,
    ANNOTATION_ROLLBACK, ContainerRequests, Name, PolicyId, RequestSet, WorkloadKey,
};
use crate::core::persisted::PersistedRecommendation;
use crate::core::pod::{PodSpec, PodTemplateSpec};
use crate::core::quantity::{format_cpu_millis, format_memory_bytes};
use crate::core::snapshot::{Snapshot, Workload};
use crate::core::writes::{
    EventWrite, GpuAnnotations, HpaTarget, RecommendationWrite, RestoreKind, WorkloadWrite,
    WriteOp, gpu_restart_due, merge_conditions, requests_match,
};

/// Events kept for inspection (oldest dropped first).
const EVENTS_KEPT: usize = 1000;

/// What kerf wrote to one workload.
#[derive(Clone, Debug, Default, PartialEq)]
struct WorkloadFields {
    /// The GPU annotations as kerf last applied them (`None`: kerf never wrote them).
    gpu: Option<Rendered>,
    /// Template requests kerf set, by container (a `None` resource is left as it is).
    requests: ContainerRequests,
    /// Template limits kerf set with them (docs/policies.md#limits).
    limits: ContainerRequests,
    /// Pod template `restartedAt` of kerf's last rolling restart.
    restarted_at: Option<String>,
    /// A rollback removed the `rollback` annotation.
    rollback_cleared: bool,
    /// Rolling restarts kerf made (kept here, not in a second map by workload).
    restarts: u32,
}

/// kerf's writes, kept in memory and laid over every fresh read of the objects.
#[derive(Debug, Default)]
pub struct MemoryWriter {
    /// Hashed: every workload of every read is looked up here (never walked in key order).
    /// Boxed fields: the table's empty slots then cost a key and a pointer, not the fields.
    workloads: HashMap<WorkloadKey, Box<WorkloadFields>>,
    /// (namespace, HPA name) → (resource, averageUtilization).
    hpa_targets: BTreeMap<(String, String), (String, i32)>,
    /// (namespace, name) → the RightsizingRecommendation as written. Hashed (a tree's nodes
    /// cost half as much again per entry, one per workload); read in name order.
    recommendations: HashMap<(Name, Name), Arc<PersistedRecommendation>>,
    policy_status: BTreeMap<PolicyId, PolicyStatus>,
    events: Vec<EventWrite>,
    /// (namespace, pod) → the requests and limits an in-place resize set, laid over the pod's
    /// containers.
    resized_pods: HashMap<(Name, Name), (ContainerRequests, ContainerRequests)>,
    /// The usage history's last checkpoint, in parts.
    checkpoint: Vec<Vec<u8>>,
}

impl MemoryWriter {
    pub fn new() -> Self {
        Self::default()
    }

    /// Lays kerf's writes over `snapshot` (freshly read objects).
    pub fn overlay(&self, snapshot: &mut Snapshot) {
        for w in &mut snapshot.workloads {
            // Only a workload kerf's writes change is copied (and only if shared).
            if let Some(fields) = self.workloads.get(&w.key)
                && fields.changes(w)
            {
                fields.lay_over(Arc::make_mut(w));
            }
        }
        if !self.resized_pods.is_empty() {
            for pod in &mut snapshot.pods {
                let key = (
                    pod.metadata.namespace.clone().unwrap_or_default(),
                    pod.metadata.name.clone().unwrap_or_default(),
                );
                if let Some((requests, limits)) = self.resized_pods.get(&key)
                    && let Some(spec) = Arc::make_mut(pod).spec.as_mut()
                {
                    set_pod_requests(spec, requests);
                    set_pod_values(spec, limits, true);
                }
            }
        }
        for h in &mut snapshot.hpas {
            let key = (
                h.metadata.namespace.clone().unwrap_or_default(),
                h.metadata.name.clone().unwrap_or_default(),
            );
            if let Some((resource, target)) = self.hpa_targets.get(&key) {
                set_hpa_target(h, resource, *target);
            }
        }
        for p in &mut snapshot.gpu_policies {
            if let Some(s) = self.policy_status.get(&p.id) {
                p.status = Some(s.clone());
            }
        }
        for p in &mut snapshot.rightsizing_policies {
            if let Some(s) = self.policy_status.get(&p.id) {
                p.status = Some(s.clone());
            }
        }
    }

    /// The RightsizingRecommendations written so far, in name order.
    pub fn recommendations(&self) -> Vec<Arc<PersistedRecommendation>> {
        let mut all: Vec<_> = self.recommendations.values().cloned().collect();
        all.sort_unstable_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        all
    }

    /// The RightsizingRecommendation `namespace/name` as written.
    pub fn recommendation_named(
        &self,
        namespace: &str,
        name: &str,
    ) -> Option<&PersistedRecommendation> {
        self.recommendations
            .get(&(Name::from(namespace), Name::from(name)))
            .map(|r| &**r)
    }

    /// Rolling restarts kerf made to the workload `key`.
    pub fn restarts(&self, key: &WorkloadKey) -> u32 {
        self.workloads.get(key).map_or(0, |f| f.restarts)
    }

    /// The latest events (at most [`EVENTS_KEPT`]).
    pub fn events(&self) -> &[EventWrite] {
        &self.events
    }

    /// The usage history's last checkpoint (what a restarted kerf reads back).
    pub fn checkpoint(&self) -> &[Vec<u8>] {
        &self.checkpoint
    }

    pub fn policy_status(&self, id: &PolicyId) -> Option<&PolicyStatus> {
        self.policy_status.get(id)
    }

    /// Applies one cycle's writes, in order, as the cluster writer would: under `read_only`
    /// nothing is written to workloads or HPAs.
    pub fn apply_all(&mut self, ops: Vec<WriteOp>, read_only: bool, now: Timestamp) {
        for op in ops {
            self.apply(op, read_only, now);
        }
    }

    fn apply(&mut self, op: WriteOp, read_only: bool, now: Timestamp) {
        match op {
            // Nothing fails here: the unit is its parts, then what says it is whole.
            WriteOp::Change(c) => {
                for part in c.parts {
                    self.apply(part, read_only, now);
                }
                self.recommendation(c.done);
                for e in c.events {
                    self.event(e);
                }
            }
            WriteOp::Workload(_)
            | WriteOp::Restart(_)
            | WriteOp::Coordinated(_)
            | WriteOp::Restore(_)
            | WriteOp::Resize(_)
            | WriteOp::Evict(_)
                if read_only => {}
            // The pod's replacement is admitted with the change: the replay's rollout.
            WriteOp::Evict(e) => self.event(e.event),
            // kerf's own state, written under readOnly too (as its recommendations are).
            WriteOp::Checkpoint(c) => self.checkpoint = c.parts,
            WriteOp::Resize(r) => {
                for pod in &r.pods {
                    let key = (pod.namespace.as_str().into(), pod.pod.as_str().into());
                    let (requests, limits) = self.resized_pods.entry(key).or_default();
                    merge_requests(requests, &pod.requests);
                    merge_requests(limits, &pod.limits);
                }
                self.event(r.event);
            }
            WriteOp::Workload(w) => self.workload(&w, now),
            WriteOp::Restart(key) => self.restart(&key, now),
            WriteOp::Coordinated(c) => {
                self.workload(&c.workload, now);
                self.hpa(&c.hpa);
            }
            WriteOp::PolicyStatus(s) => {
                let observed = self
                    .policy_status
                    .get(&s.policy)
                    .cloned()
                    .or(s.observed.clone())
                    .unwrap_or_default();
                let status = PolicyStatus {
                    conditions: merge_conditions(
                        &observed.conditions,
                        &s.conditions,
                        s.generation,
                        now,
                    ),
                    observed_generation: s.generation,
                    matched_workloads: s.matched_workloads,
                };
                self.policy_status.insert(s.policy.clone(), status);
            }
            WriteOp::Recommendation(r) => self.recommendation(*r),
            WriteOp::Event(e) => self.event(*e),
            WriteOp::Warning(w) => tracing::warn!(workload = %w.workload, "{}", w.message),
            WriteOp::Restore(r) => {
                let fields = self.workloads.entry(r.observed.key.clone()).or_default();
                // A request kerf created goes: the manifest had none.
                let removed = r.removed.iter().map(|(c, set)| (c, *set));
                match r.kind {
                    // kerf keeps owning the fields, with the values from before kerf.
                    RestoreKind::Rollback | RestoreKind::HalfPair => {
                        merge_requests(&mut fields.requests, &r.requests);
                        let restored = r.requests.iter().map(|(c, v)| (c, RequestSet::of(v)));
                        drop_requests(&mut fields.limits, restored.chain(removed.clone()));
                        drop_requests(&mut fields.requests, removed);
                        // Only a rollback takes its annotation off.
                        fields.rollback_cleared |= r.kind == RestoreKind::Rollback;
                        if let Some(h) = &r.hpa {
                            self.hpa(h);
                        }
                    }
                    // kerf gives the fields back: the manifests' own values (those from before
                    // kerf) stand again; what kerf keeps is applied in the same step.
                    RestoreKind::Release => {
                        let restored = r.requests.iter().map(|(c, v)| (c, RequestSet::of(v)));
                        let gone = restored.chain(removed);
                        let gone: Vec<(&String, RequestSet)> = gone.collect();
                        drop_requests(&mut fields.limits, gone.iter().map(|(c, s)| (*c, *s)));
                        drop_requests(&mut fields.requests, gone.into_iter());
                        if let Some(h) = &r.hpa {
                            self.hpa_targets
                                .remove(&(h.namespace.clone(), h.name.clone()));
                        }
                        if let Some(keep) = &r.keep {
                            merge_requests(&mut fields.requests, &keep.requests);
                            merge_requests(&mut fields.limits, &keep.limits);
                            if let Some(h) = &keep.hpa {
                                self.hpa(h);
                            }
                        }
                    }
                }
                if let Some(rec) = r.recommendation {
                    self.recommendation(rec);
                }
                self.event(r.event);
            }
        }
    }

    fn workload(&mut self, w: &WorkloadWrite, now: Timestamp) {
        let key = &w.observed.key;
        let restart = w
            .gpu
            .as_ref()
            .is_some_and(|g| gpu_restart_due(&w.observed, g));
        let fields = self.workloads.entry(key.clone()).or_default();
        if let Some(g) = &w.gpu {
            fields.gpu = Some(Rendered::of(g));
        }
        if let Some(r) = &w.requests {
            merge_requests(&mut fields.requests, r);
        }
        if let Some(l) = &w.limits {
            merge_requests(&mut fields.limits, l);
        }
        if restart {
            self.restart(key, now);
        }
    }

    fn restart(&mut self, key: &WorkloadKey, now: Timestamp) {
        let at = crate::core::model::rfc3339_secs(now);
        let fields = self.workloads.entry(key.clone()).or_default();
        fields.restarted_at = Some(at);
        fields.restarts += 1;
    }

    fn hpa(&mut self, h: &HpaTarget) {
        self.hpa_targets.insert(
            (h.namespace.clone(), h.name.clone()),
            (h.resource.clone(), h.average_utilization),
        );
    }

    /// Takes the write over (a first cycle writes one per workload: no second copy of each).
    fn recommendation(&mut self, r: RecommendationWrite) {
        let status = r
            .status
            .map(Box::new)
            .or_else(|| r.observed.and_then(|o| o.status));
        let rec = PersistedRecommendation {
            owner_uids: r.owner.map(|o| o.uid).into_iter().collect(),
            namespace: r.namespace.into(),
            name: r.name.into(),
            spec: r.spec,
            status,
        };
        self.recommendations
            .insert((rec.namespace.clone(), rec.name.clone()), Arc::new(rec));
    }

    fn event(&mut self, e: EventWrite) {
        if self.events.len() == EVENTS_KEPT {
            self.events.remove(0);
        }
        self.events.push(e);
    }
}

/// The two GPU annotations' values as kerf rendered them (two fields rather than a map: one is
/// held per workload kerf wrote to).
#[derive(Clone, Debug, Default, PartialEq)]
struct Rendered {
    baseline: Option<String>,
    recommendation: Option<String>,
}

impl Rendered {
    fn of(g: &GpuAnnotations) -> Self {
        let mut r = g.rendered();
        Self {
            baseline: r.remove(ANNOTATION_GPU_BASELINE),
            recommendation: r.remove(ANNOTATION_GPU_RECOMMENDATION),
        }
    }

    /// The value of the annotation `key` (one of the two GPU annotations).
    fn get(&self, key: &str) -> Option<&String> {
        match key {
            ANNOTATION_GPU_BASELINE => self.baseline.as_ref(),
            ANNOTATION_GPU_RECOMMENDATION => self.recommendation.as_ref(),
            _ => None,
        }
    }
}

impl WorkloadFields {
    /// Laying these fields over `w` would change it.
    fn changes(&self, w: &Workload) -> bool {
        let gpu = self.gpu.as_ref().is_some_and(|rendered| {
            [ANNOTATION_GPU_BASELINE, ANNOTATION_GPU_RECOMMENDATION]
                .iter()
                .any(|k| rendered.get(k) != w.annotations.get(*k))
        });
        let restart = self.restarted_at.as_ref().is_some_and(|at| {
            w.template
                .metadata
                .as_ref()
                .and_then(|m| m.annotations.as_ref())
                .and_then(|a| a.get(ANNOTATION_RESTARTED_AT))
                != Some(at)
        });
        gpu || restart
            || (self.rollback_cleared && w.annotations.contains_key(ANNOTATION_ROLLBACK))
            || !requests_match(&w.template, &self.requests)
            || !crate::core::writes::limits_match(&w.template, &self.limits)
    }

    fn lay_over(&self, w: &mut Workload) {
        if let Some(rendered) = &self.gpu {
            for k in [ANNOTATION_GPU_BASELINE, ANNOTATION_GPU_RECOMMENDATION] {
                match rendered.get(k) {
                    Some(v) => w.annotations.insert(k.to_string(), v.clone()),
                    None => w.annotations.remove(k),
                };
            }
        }
        if self.rollback_cleared {
            w.annotations.remove(ANNOTATION_ROLLBACK);
        }
        // The overlaid workload is held as the cluster's: no growth slack.
        w.annotations.shrink_to_fit();
        set_template_requests(&mut w.template, &self.requests);
        if let Some(spec) = w.template.spec.as_mut() {
            set_pod_values(spec, &self.limits, true);
        }
        if let Some(at) = &self.restarted_at {
            let annotations = w
                .template
                .metadata
                .get_or_insert_with(Default::default)
                .annotations
                .get_or_insert_with(Default::default);
            annotations.insert(ANNOTATION_RESTARTED_AT.to_string(), at.clone());
            annotations.shrink_to_fit();
        }
    }
}

/// `want`'s values over `have` (a `None` resource leaves `have`'s value).
fn merge_requests(have: &mut ContainerRequests, want: &ContainerRequests) {
    for (c, w) in want {
        let e = have.entry(c.clone()).or_default();
        e.cpu_millis = w.cpu_millis.or(e.cpu_millis);
        e.memory_bytes = w.memory_bytes.or(e.memory_bytes);
    }
}

/// Forgets kerf's values of the `which` requests (the manifests' own values stand again).
fn drop_requests<'a>(
    have: &mut ContainerRequests,
    which: impl Iterator<Item = (&'a String, RequestSet)>,
) {
    for (c, set) in which {
        if let Some(e) = have.get_mut(c) {
            if set.cpu {
                e.cpu_millis = None;
            }
            if set.memory {
                e.memory_bytes = None;
            }
        }
    }
    have.retain(|_, r| r.cpu_millis.is_some() || r.memory_bytes.is_some());
}

/// Sets the requests kerf owns on the template's containers (regular and init) of that name.
fn set_template_requests(template: &mut PodTemplateSpec, requests: &ContainerRequests) {
    if let Some(spec) = template.spec.as_mut() {
        set_pod_requests(spec, requests);
    }
}

/// Sets `requests` on the containers of a pod spec (a template's or a resized pod's).
fn set_pod_requests(spec: &mut PodSpec, requests: &ContainerRequests) {
    set_pod_values(spec, requests, false);
}

/// Sets `values` as the requests (or `limits`) of the containers of a pod spec.
fn set_pod_values(spec: &mut PodSpec, values: &ContainerRequests, limits: bool) {
    let requests = values;
    let containers = spec
        .containers
        .iter_mut()
        .chain(spec.init_containers.iter_mut().flatten());
    for c in containers {
        let Some(want) = requests.get(c.name.as_str()) else {
            continue;
        };
        let resources = c.resources.get_or_insert_with(Default::default);
        let map = match limits {
            true => &mut resources.limits,
            false => &mut resources.requests,
        }
        .get_or_insert_with(Default::default);
        if let Some(m) = want.cpu_millis {
            map.insert("cpu".into(), Quantity(format_cpu_millis(m)));
        }
        if let Some(b) = want.memory_bytes {
            map.insert("memory".into(), Quantity(format_memory_bytes(b)));
        }
    }
}

/// The HPA's metrics become the single utilization metric kerf writes.
fn set_hpa_target(h: &mut HorizontalPodAutoscaler, resource: &str, target: i32) {
    let spec = h.spec.clone();
    h.spec.metrics = serde_json::from_value(utilization_metrics(resource, target))
        .ok()
        .or(spec.metrics);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::WorkloadKind;
    use crate::core::model::{GpuMap, GpuRecommendation};

    /// The embedder of the examples: a KAI 0.5 template, upsized to 0.9 by kerf.
    fn embedder(recommended: Option<f64>) -> Arc<Workload> {
        let template: PodTemplateSpec = serde_json::from_value(serde_json::json!({
            "metadata": {"annotations": {"gpu-fraction": "0.5"}},
            "spec": {"containers": [{"name": "encoder", "image": "e"}]}
        }))
        .unwrap();
        let mut annotations = BTreeMap::new();
        if let Some(r) = recommended {
            annotations.insert(
                ANNOTATION_GPU_RECOMMENDATION.to_string(),
                recommendation(r).render(),
            );
        }
        Arc::new(Workload {
            key: WorkloadKey::new("ml", WorkloadKind::Deployment, "embedder"),
            uid: None,
            labels: Default::default(),
            annotations: annotations.into_iter().collect(),
            template,
            replicas: Some(1),
            field_managers: Vec::new(),
            ownership: Default::default(),
        })
    }

    fn recommendation(encoder: f64) -> GpuRecommendation {
        GpuRecommendation {
            containers: GpuMap::from([("encoder".to_string(), encoder)]),
            driving_metric: Some(crate::api::Signal::Compute),
            policy: None,
            updated_at: None,
            by_policy: Default::default(),
        }
    }

    fn write(observed: Arc<Workload>, recommended: Option<f64>) -> WriteOp {
        WriteOp::Workload(Box::new(WorkloadWrite {
            observed,
            gpu: Some(GpuAnnotations {
                baseline: Some(GpuMap::from([("encoder".to_string(), 0.5)])),
                recommendation: recommended.map(recommendation),
            }),
            requests: None,
            limits: None,
            method: crate::api::WriteMethod::Apply,
        }))
    }

    /// docs/design/kai-admission.md#k9: a rolling restart is due only when the allocation the
    /// pods would get changes. A scale-back lands on the baseline (the template's own 0.5); the
    /// next cycle emits nothing, and removing the annotation changes no pod: no second restart.
    #[test]
    fn a_rolling_restart_is_due_only_when_the_pods_allocation_changes() {
        let now = Timestamp::from_second(1_767_268_800).unwrap();
        let mut w = MemoryWriter::new();
        let key = embedder(None).key.clone();
        // 0.9 → 0.5 (scale-back to the baseline): the pods change.
        w.apply_all(vec![write(embedder(Some(0.9)), Some(0.5))], false, now);
        assert_eq!(w.restarts(&key), 1);
        // 0.5 → nothing: the pods get the template's 0.5 either way.
        w.apply_all(vec![write(embedder(Some(0.5)), None)], false, now);
        assert_eq!(w.restarts(&key), 1, "no pod would change");
        // nothing → 0.9: the pods change.
        w.apply_all(vec![write(embedder(None), Some(0.9))], false, now);
        assert_eq!(w.restarts(&key), 2);
        // 0.9 → 0.9: nothing changes.
        w.apply_all(vec![write(embedder(Some(0.9)), Some(0.9))], false, now);
        assert_eq!(w.restarts(&key), 2);
    }
}
