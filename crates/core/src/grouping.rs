//! Workloads under their topmost owner (docs/workloads.md), pure, shared by both object
//! sources: a Deployment or StatefulSet another controller owns (a KServe predictor, a Knative
//! Revision's Deployment, a LeaderWorkerSet's StatefulSets) is not a workload of its own; its
//! pods, template and replicas count under the topmost owner — the InferenceService, the
//! Knative Service, the LeaderWorkerSet. A controller that creates pods directly (a RayCluster,
//! a Grove PodClique) has its pods' containers as its template.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::hash::{HashMap, HashMapExt};
use crate::model::{Name, WorkloadKey};
use crate::owner::{Chain, Link, link_key, owner_chain, pod_chain};
use crate::pod::Pod;
use crate::pod::{Container, OwnerRef, PodSpec, PodTemplateSpec, Strings};
use crate::snapshot::{Ownership, Snapshot, Workload};

/// The owner chain of a pod ([`crate::owner::pod_chain`]), with the snapshot's owner
/// maps as the ReplicaSet → Deployment, Job → CronJob and other controller links.
pub fn pod_owner(pod: &Pod, snapshot: &Snapshot) -> Option<Chain> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
    let link = |map: &HashMap<(Name, Name), Name>, name: &str| {
        map.get(&(Name::from(ns), Name::from(name))).cloned()
    };
    pod_chain(
        ns,
        pod.metadata.owner_references.as_deref().unwrap_or_default(),
        pod.metadata.labels.as_ref(),
        |rs| link(&snapshot.replicaset_owners, rs),
        |job| link(&snapshot.job_owners, job),
        |kind, name| snapshot.controller_of(ns, kind, name),
    )
}

/// Indexes of `snapshot.pods` by the workload that owns them (each owner's pods in snapshot
/// order). Hashed: its readers look workloads up, never in key order, and a hash per pod is
/// cheaper than sorting every pod by its key.
pub fn pods_by_owner(snapshot: &Snapshot) -> HashMap<WorkloadKey, Vec<usize>> {
    // About one owner per workload: sized once instead of rehashing every key as it grows.
    let mut out: HashMap<WorkloadKey, Vec<usize>> =
        HashMap::with_capacity(snapshot.workloads.len());
    for (i, pod) in snapshot.pods.iter().enumerate() {
        if let Some(chain) = pod_owner(pod, snapshot) {
            out.entry(chain.key).or_default().push(i);
        }
    }
    out
}

/// The chain from a workload's own controller reference up (the workload itself excluded).
fn chain_above(snapshot: &Snapshot, w: &Workload, controller: &Link) -> Option<Chain> {
    let ns = w.key.namespace.as_str();
    let owners = [OwnerRef {
        api_version: controller.api_version.clone(),
        kind: controller.kind.clone(),
        name: controller.name.clone(),
        controller: Some(true),
    }];
    let link = |map: &HashMap<(Name, Name), Name>, name: &str| {
        map.get(&(Name::from(ns), Name::from(name))).cloned()
    };
    owner_chain(
        ns,
        &owners,
        crate::owner::TemplateHashes::default(),
        |rs| link(&snapshot.replicaset_owners, rs),
        |job| link(&snapshot.job_owners, job),
        |kind, name| snapshot.controller_of(ns, kind, name),
    )
}

/// KServe's label naming an InferenceService component (`pkg/constants`: `component`).
const KSERVE_COMPONENT_LABEL: &str = "component";

/// A KServe transformer's or explainer's Deployment: a workload apart from its
/// InferenceService, whose workload is the predictor. The components run different servers
/// (a GPU model server, a CPU transformer) whose main container KServe names alike
/// (`kserve-container`): folded together they would share one recommendation. Never written
/// (its InferenceService owns it).
fn kserve_component_apart(w: &Workload) -> bool {
    let Some(c) = w.ownership.controller.as_deref() else {
        return false;
    };
    c.kind == "InferenceService"
        && c.api_version.starts_with("serving.kserve.io/")
        && w.labels
            .get(KSERVE_COMPONENT_LABEL)
            .is_some_and(|component| component != "predictor")
}

/// Every workload's own controller reference, as a link of the owner chains; and a leader
/// Pod's, where a LeaderWorkerSet's worker StatefulSet names that Pod as its controller.
pub fn record_workload_controllers(snapshot: &mut Snapshot) {
    let mut pods_named = BTreeSet::new();
    for w in &snapshot.workloads {
        let Some(c) = w.ownership.controller.as_deref() else {
            continue;
        };
        if kserve_component_apart(w) {
            continue;
        }
        if c.kind == "Pod" {
            pods_named.insert((w.key.namespace.clone(), c.name.clone()));
        }
        let key = link_key(w.key.kind.kind_name(), &w.key.name);
        snapshot
            .controllers
            .insert((w.key.namespace.clone(), key.as_str().into()), c.clone());
    }
    for pod in &snapshot.pods {
        let (Some(ns), Some(name)) = (&pod.metadata.namespace, &pod.metadata.name) else {
            continue;
        };
        if !pods_named.contains(&(ns.clone(), name.clone())) {
            continue;
        }
        let owners = pod.metadata.owner_references.as_deref().unwrap_or_default();
        if let Some(c) = crate::owner::controller(owners) {
            let link = Link::new(&c.api_version, &c.kind, &c.name);
            let key = link_key("Pod", name);
            snapshot
                .controllers
                .insert((ns.clone(), key.as_str().into()), link);
        }
    }
}

/// A template of the containers of `templates`, each container from the first that has it
/// (a LeaderWorkerSet's leader and worker templates name their containers apart), and the
/// first pod-level resources set: the guard that keeps kerf off pod-level requests reads them
/// here, as on a Deployment's template.
fn merged_template<'a>(templates: impl Iterator<Item = &'a PodSpec>) -> PodSpec {
    let mut out = PodSpec::default();
    let add = |list: &mut Vec<Container>, c: &Container| {
        if !list.iter().any(|have| have.name == c.name) {
            list.push(c.clone());
        }
    };
    for t in templates {
        if out.resources.is_none() && crate::hpa::pod_level_resources_set(t) {
            out.resources = t.resources.clone();
        }
        for c in &t.containers {
            add(&mut out.containers, c);
        }
        for c in t.init_containers.iter().flatten() {
            add(out.init_containers.get_or_insert_with(Vec::new), c);
        }
    }
    out
}

/// The annotations of the templates an owner's objects hold, the first one's where two set one:
/// KAI's GPU fraction is stated there, and admission's GPU baseline is read from it.
fn merged_annotations<'a>(templates: impl Iterator<Item = &'a Strings>) -> Option<Strings> {
    let mut out = Strings::new();
    for t in templates {
        for (k, v) in t.iter() {
            if out.get(k).is_none() {
                out.insert(k.clone(), v.clone());
            }
        }
    }
    (!out.is_empty()).then_some(out)
}

/// The workload of a topmost owner seen only through what it owns (its object was not read).
fn seen_through(key: &WorkloadKey, below: &[Arc<Workload>]) -> Workload {
    Workload {
        key: key.clone(),
        uid: None,
        labels: below.first().map(|w| w.labels.clone()).unwrap_or_default(),
        annotations: Strings::new(),
        template: PodTemplateSpec::default(),
        replicas: None,
        field_managers: Vec::new(),
        ownership: Ownership::default(),
    }
}

/// Groups the snapshot's workloads under their topmost owners (module docs). Call once the
/// snapshot holds every object it will (both sources do, last).
pub fn group_under_topmost_owners(snapshot: &mut Snapshot) {
    resolve_workload_refs(snapshot);
    record_workload_controllers(snapshot);
    let mut below: BTreeMap<WorkloadKey, Vec<Arc<Workload>>> = BTreeMap::new();
    let mut owned = BTreeSet::new();
    let mut absorbed = BTreeSet::new();
    for w in &snapshot.workloads {
        let Some(c) = w.ownership.controller.as_deref() else {
            continue;
        };
        let chain = match kserve_component_apart(w) {
            true => None,
            false => chain_above(snapshot, w, c),
        };
        match chain {
            Some(chain) if chain.key != w.key => {
                absorbed.insert(w.key.clone());
                below.entry(chain.key).or_default().push(Arc::clone(w));
            }
            // Controlled by a kind kerf does not follow: the workload stays, its template not
            // kerf's to write.
            _ if matches!(
                w.key.kind,
                kerf_api::WorkloadKind::Deployment | kerf_api::WorkloadKind::StatefulSet
            ) =>
            {
                owned.insert(w.key.clone());
            }
            _ => {}
        }
    }
    if below.is_empty() && owned.is_empty() && !has_pod_controlled_tops(snapshot) {
        return;
    }
    snapshot.workloads.retain(|w| !absorbed.contains(&w.key));
    for w in &mut snapshot.workloads {
        if owned.contains(&w.key) {
            Arc::make_mut(w).ownership.owned = true;
        }
    }
    for (top, parts) in &below {
        if !snapshot.workloads.iter().any(|w| &w.key == top) {
            snapshot.workloads.push(Arc::new(seen_through(top, parts)));
        }
        let w = snapshot
            .workloads
            .iter_mut()
            .find(|w| &w.key == top)
            .expect("pushed above");
        if w.key.kind.template_writable() {
            continue;
        }
        let w = Arc::make_mut(w);
        let spec = merged_template(parts.iter().map(|p| p.template.pod_spec()));
        let mut metadata = w.template.metadata.take().unwrap_or_default();
        metadata.annotations = merged_annotations(parts.iter().map(|p| p.template.annotations()));
        w.template = PodTemplateSpec {
            metadata: Some(metadata),
            spec: Some(spec),
        };
        w.replicas = Some(parts.iter().filter_map(|p| p.replicas).sum());
    }
    from_pods(snapshot);
}

/// A Rollout with `spec.workloadRef` to a Deployment (Argo's `rollout/templateref.go`) has an
/// empty template of its own: its template is that Deployment's, where kerf writes its
/// CPU/memory change. The Deployment is then not kerf's to write as a workload of its own (two
/// recommendations would take turns on one template): its pods are evicted as an owned
/// Deployment's. Without the Deployment in the snapshot the Rollout's template stays empty, and
/// nothing is written.
pub fn resolve_workload_refs(snapshot: &mut Snapshot) {
    let mut refs = Vec::new();
    for (i, w) in snapshot.workloads.iter().enumerate() {
        if w.ownership.template_ref.is_none() {
            continue;
        }
        let target = w.template_write_key();
        if let Some(d) = snapshot.workloads.iter().position(|d| d.key == target) {
            refs.push((i, d));
        }
    }
    for (rollout, deployment) in refs {
        let d = Arc::make_mut(&mut snapshot.workloads[deployment]);
        d.ownership.owned = true;
        let template = d.template.clone();
        let r = Arc::make_mut(&mut snapshot.workloads[rollout]);
        r.template = template;
        r.ownership.template_ref_found = true;
    }
}

/// Whether a workload of a kind whose template kerf does not write may take its template from
/// its pods (a RayCluster, a PodCliqueSet: their pods are created directly).
fn has_pod_controlled_tops(snapshot: &Snapshot) -> bool {
    snapshot
        .workloads
        .iter()
        .any(|w| !w.key.kind.template_writable())
}

/// The topmost owners without a template (pods created directly, or what they own not read):
/// their pods' containers, replicas and owner chain.
fn from_pods(snapshot: &mut Snapshot) {
    let by_owner = pods_by_owner(snapshot);
    let mut updates = Vec::new();
    for (i, w) in snapshot.workloads.iter().enumerate() {
        if w.key.kind.template_writable() {
            continue;
        }
        let Some(pods) = by_owner.get(&w.key) else {
            continue;
        };
        let mut sorted: Vec<_> = pods.iter().map(|p| &snapshot.pods[*p]).collect();
        sorted.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        let chain = sorted
            .first()
            .and_then(|p| pod_owner(p, snapshot))
            .map(|c| c.owners)
            .unwrap_or_default();
        let spec = w
            .template
            .pod_spec()
            .containers
            .is_empty()
            .then(|| merged_template(sorted.iter().filter_map(|p| p.spec.as_ref())));
        updates.push((i, chain, spec, sorted.len()));
    }
    for (i, chain, spec, pods) in updates {
        let w = Arc::make_mut(&mut snapshot.workloads[i]);
        w.ownership.chain = chain;
        if let Some(spec) = spec {
            w.template.spec = Some(spec);
            w.replicas = Some(i32::try_from(pods).unwrap_or(i32::MAX));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A template of two templates' containers, each once, the first one's where both name it.
    #[test]
    fn merged_template_keeps_each_container_once() {
        let t = |names: &[&str]| -> PodSpec {
            serde_json::from_value(serde_json::json!({
                "containers": names.iter().map(|n| serde_json::json!({"name": n})).collect::<Vec<_>>()
            }))
            .unwrap()
        };
        let (leader, worker) = (t(&["vllm-leader", "proxy"]), t(&["vllm-worker", "proxy"]));
        let m = merged_template([&leader, &worker].into_iter());
        let names: Vec<&str> = m.containers.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["vllm-leader", "proxy", "vllm-worker"]);
    }

    /// The first template's pod-level resources that are set (an empty `resources: {}` is not).
    #[test]
    fn merged_template_keeps_pod_level_resources() {
        let t = |resources: serde_json::Value| -> PodSpec {
            serde_json::from_value(serde_json::json!({
                "containers": [{"name": "vllm-worker"}], "resources": resources
            }))
            .unwrap()
        };
        let (empty, set) = (
            t(serde_json::json!({})),
            t(serde_json::json!({"requests": {"cpu": "4"}})),
        );
        let m = merged_template([&empty, &set].into_iter());
        assert!(crate::hpa::pod_level_resources_set(&m));
        assert_eq!(m.resources, set.resources);
        assert!(merged_template([&empty].into_iter()).resources.is_none());
    }

    /// KAI's fraction annotation of the owned templates reaches the merged one, the first's kept.
    #[test]
    fn merged_annotations() {
        let a = Strings::from([("gpu-fraction".to_string(), "0.5".to_string())]);
        let b = Strings::from([
            ("gpu-fraction".to_string(), "0.25".to_string()),
            ("team".to_string(), "x".to_string()),
        ]);
        let m = super::merged_annotations([&a, &b].into_iter()).unwrap();
        assert_eq!(m.get("gpu-fraction").map(String::as_str), Some("0.5"));
        assert_eq!(m.len(), 2);
        assert!(super::merged_annotations(std::iter::empty()).is_none());
    }
}
