//! A pod's top owner (its workload), resolved without calling the API server.
//!
//! Pod → ReplicaSet → Deployment, Pod → Job → CronJob, Pod → StatefulSet/DaemonSet/Job. The
//! ReplicaSet → Deployment and Job → CronJob links come from the store (filled by the reader);
//! when the ReplicaSet link is unknown (a pod created before the cache saw its ReplicaSet) the
//! Deployment name is derived from the ReplicaSet name minus `-<pod-template-hash>`, which is how
//! the Deployment controller names ReplicaSets.

use crate::api::WorkloadKind;
use crate::core::model::WorkloadKey;

/// The label the Deployment controller puts on every pod and ReplicaSet it creates.
pub const POD_TEMPLATE_HASH_LABEL: &str = "pod-template-hash";

/// One `metadata.ownerReferences` entry, reduced to what owner resolution needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnerRef<'a> {
    pub api_version: &'a str,
    pub kind: &'a str,
    pub name: &'a str,
    pub controller: bool,
}

/// Resolves the top owner of a pod in `namespace`.
///
/// `owners` are the pod's owner references; the controller reference wins, else the first one.
/// `pod_template_hash` is the pod's `pod-template-hash` label. `replicaset_owner(rs)` and
/// `job_owner(job)` look the links up (names in the pod's namespace).
/// Returns `None` for pods without an owner or owned by something that is not a workload kind.
pub fn top_owner(
    namespace: &str,
    owners: &[OwnerRef<'_>],
    pod_template_hash: Option<&str>,
    replicaset_owner: impl Fn(&str) -> Option<String>,
    job_owner: impl Fn(&str) -> Option<String>,
) -> Option<WorkloadKey> {
    let owner = owners
        .iter()
        .find(|o| o.controller)
        .or_else(|| owners.first())?;
    if owner.name.is_empty() {
        return None;
    }
    let group = owner.api_version.split_once('/').map_or("", |(g, _)| g);
    let key = |kind, name: &str| Some(WorkloadKey::new(namespace, kind, name));
    match (group, owner.kind) {
        ("apps", "ReplicaSet") => {
            if let Some(dep) = replicaset_owner(owner.name) {
                return key(WorkloadKind::Deployment, &dep);
            }
            let hash = pod_template_hash.filter(|h| !h.is_empty())?;
            let dep = owner.name.strip_suffix(hash)?.strip_suffix('-')?;
            (!dep.is_empty()).then(|| WorkloadKey::new(namespace, WorkloadKind::Deployment, dep))
        }
        ("apps", "StatefulSet") => key(WorkloadKind::StatefulSet, owner.name),
        ("apps", "DaemonSet") => key(WorkloadKind::DaemonSet, owner.name),
        ("apps", "Deployment") => key(WorkloadKind::Deployment, owner.name),
        ("batch", "Job") => match job_owner(owner.name) {
            Some(cron) => key(WorkloadKind::CronJob, &cron),
            None => key(WorkloadKind::Job, owner.name),
        },
        ("batch", "CronJob") => key(WorkloadKind::CronJob, owner.name),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rs(name: &str) -> OwnerRef<'_> {
        OwnerRef {
            api_version: "apps/v1",
            kind: "ReplicaSet",
            name,
            controller: true,
        }
    }
    fn none(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn replicaset_resolved_through_store_link() {
        let k = top_owner(
            "ns",
            &[rs("web-abc")],
            Some("abc"),
            |n| (n == "web-abc").then(|| "web".into()),
            none,
        );
        assert_eq!(
            k,
            Some(WorkloadKey::new("ns", WorkloadKind::Deployment, "web"))
        );
    }

    #[test]
    fn replicaset_without_link_derives_deployment_from_hash() {
        let k = top_owner(
            "ns",
            &[rs("my-app-7d9f8c6b5d")],
            Some("7d9f8c6b5d"),
            none,
            none,
        );
        assert_eq!(
            k,
            Some(WorkloadKey::new("ns", WorkloadKind::Deployment, "my-app"))
        );
    }

    #[test]
    fn replicaset_without_link_or_matching_hash_is_no_workload() {
        assert_eq!(
            top_owner("ns", &[rs("my-app-x")], Some("7d9f"), none, none),
            None
        );
        assert_eq!(top_owner("ns", &[rs("my-app-x")], None, none, none), None);
        assert_eq!(
            top_owner("ns", &[rs("-abc")], Some("abc"), none, none),
            None
        );
    }

    #[test]
    fn job_resolves_to_cronjob_when_linked() {
        let job = OwnerRef {
            api_version: "batch/v1",
            kind: "Job",
            name: "nightly-2903040",
            controller: true,
        };
        let k = top_owner("ns", std::slice::from_ref(&job), None, none, |_| {
            Some("nightly".into())
        });
        assert_eq!(
            k,
            Some(WorkloadKey::new("ns", WorkloadKind::CronJob, "nightly"))
        );
        let k = top_owner("ns", &[job], None, none, none);
        assert_eq!(
            k,
            Some(WorkloadKey::new("ns", WorkloadKind::Job, "nightly-2903040"))
        );
    }

    #[test]
    fn statefulset_daemonset_direct_and_others_ignored() {
        let mk = |api_version, kind| OwnerRef {
            api_version,
            kind,
            name: "x",
            controller: true,
        };
        assert_eq!(
            top_owner("ns", &[mk("apps/v1", "StatefulSet")], None, none, none).map(|k| k.kind),
            Some(WorkloadKind::StatefulSet)
        );
        assert_eq!(
            top_owner("ns", &[mk("apps/v1", "DaemonSet")], None, none, none).map(|k| k.kind),
            Some(WorkloadKind::DaemonSet)
        );
        assert_eq!(
            top_owner("ns", &[mk("v1", "ReplicationController")], None, none, none),
            None
        );
        assert_eq!(
            top_owner("ns", &[mk("example.com/v1", "Job")], None, none, none),
            None
        );
        assert_eq!(top_owner("ns", &[], None, none, none), None);
    }

    #[test]
    fn controller_reference_wins_over_first() {
        let a = OwnerRef {
            api_version: "apps/v1",
            kind: "DaemonSet",
            name: "a",
            controller: false,
        };
        let b = OwnerRef {
            api_version: "apps/v1",
            kind: "StatefulSet",
            name: "b",
            controller: true,
        };
        assert_eq!(
            top_owner("ns", &[a, b], None, none, none),
            Some(WorkloadKey::new("ns", WorkloadKind::StatefulSet, "b"))
        );
    }
}
