//! The owner objects the reader keeps: a ReplicaSet's controller, a CronJob's Jobs, and the
//! resources owner chains pass through (docs/workloads.md).

use super::*;

/// A Job run by a CronJob is part of that CronJob, not a workload of its own.
#[derive(Clone, Debug)]
pub(super) enum ListedJob {
    OfCronJob(String),
    Workload(Arc<Workload>),
}

/// A snapshot's map keyed by (namespace, name).
pub(super) type ByName<V> = BTreeMap<(Name, Name), V>;

/// A ReplicaSet's controller: a Deployment (the webhook store's map too), or another kind's
/// object (an Argo Rollout), a link of the owner chains.
#[derive(Clone, Debug)]
pub(super) enum ReplicaSetOwner {
    Deployment(String),
    Other(owner::Link),
}

pub(super) fn replicaset_owner(meta: &ObjectMeta) -> Option<ReplicaSetOwner> {
    if let Some(d) = owner::deployment_of(meta) {
        return Some(ReplicaSetOwner::Deployment(d.to_string()));
    }
    let c = meta
        .owner_references
        .as_deref()
        .and_then(owner::controller)?;
    Some(ReplicaSetOwner::Other(owner::Link::new(
        &c.api_version,
        &c.kind,
        &c.name,
    )))
}

/// An object of [`owner_resources`] as the index keeps it.
#[derive(Clone, Debug)]
pub(super) enum OwnerObject {
    /// A topmost owner: its metadata (a Rollout's template and replicas too).
    Workload(Arc<Workload>),
    /// An object a chain passes through: its kind and controller reference.
    Link {
        kind: &'static str,
        controller: owner::Link,
    },
    /// Neither (an object without a controller reference, or one that cannot be read).
    Nothing,
}

/// A resource of the controllers GPU inference runs under (docs/workloads.md), or of an object
/// their owner chains pass through. Each is optional: where its CRD is not installed there are
/// none of its objects.
#[derive(Clone, Copy, Debug)]
pub(crate) struct OwnerResource {
    /// How kerf names the kind (readiness, logs; a Knative Service is `KnativeService`).
    pub label: &'static str,
    pub api_version: &'static str,
    pub kind: &'static str,
    pub plural: &'static str,
    /// The workload kind of its objects; `None` for an object chains pass through.
    pub workload: Option<WorkloadKind>,
}

impl OwnerResource {
    pub fn api_resource(&self) -> ApiResource {
        let (group, version) = self
            .api_version
            .split_once('/')
            .unwrap_or(("", self.api_version));
        ApiResource::from_gvk_with_plural(
            &::kube::api::GroupVersionKind::gvk(group, version, self.kind),
            self.plural,
        )
    }
}

/// The extra workload kinds and the objects an owner chain passes through
/// ([`owner::passes_through`]) that are not built-in kinds.
pub(crate) fn owner_resources() -> Vec<OwnerResource> {
    let mut out: Vec<OwnerResource> = WorkloadKind::ALL
        .into_iter()
        .filter(|k| !WorkloadKind::BUILT_IN.contains(k))
        .map(|k| OwnerResource {
            label: k.as_str(),
            api_version: k.api_version(),
            kind: k.kind_name(),
            plural: k.plural(),
            workload: Some(k),
        })
        .collect();
    let through = |api_version, kind, plural| OwnerResource {
        label: kind,
        api_version,
        kind,
        plural,
        workload: None,
    };
    out.push(through(
        "serving.knative.dev/v1",
        "Configuration",
        "configurations",
    ));
    out.push(through("serving.knative.dev/v1", "Revision", "revisions"));
    out.push(through("grove.io/v1alpha1", "PodClique", "podcliques"));
    out.push(through(
        "grove.io/v1alpha1",
        "PodCliqueScalingGroup",
        "podcliquescalinggroups",
    ));
    out
}

/// An object of `resource` from its metadata and `spec` (read only for a Rollout).
pub(super) fn owner_object(
    resource: &OwnerResource,
    mut meta: ObjectMeta,
    object: Option<&serde_json::Value>,
) -> OwnerObject {
    match resource.workload {
        Some(kind) => {
            strip_last_applied(&mut meta);
            let (namespace, name) = (meta.namespace.clone(), meta.name.clone());
            match Workload::of_controller(meta, kind, object) {
                Ok(w) => OwnerObject::Workload(Arc::new(w)),
                Err(e) => {
                    tracing::warn!(
                        namespace = namespace.as_deref().unwrap_or(""),
                        name = name.as_deref().unwrap_or(""),
                        "{} left out: {e}",
                        resource.label
                    );
                    OwnerObject::Nothing
                }
            }
        }
        None => match meta.owner_references.as_deref().and_then(owner::controller) {
            Some(c) => OwnerObject::Link {
                kind: resource.kind,
                controller: owner::Link::new(&c.api_version, &c.kind, &c.name),
            },
            None => OwnerObject::Nothing,
        },
    }
}
