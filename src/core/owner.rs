//! A pod's top owner (its workload), resolved without calling the API server. This is the one
//! resolver: evaluation (`pods_by_owner`), the webhook (`decide_pod`), the standalone loader and
//! the reader (the ReplicaSet → Deployment and Job → CronJob links) all use it.
//!
//! Rules (docs/design/gpu-engine.md#g4 "owned by the workload"):
//! - Only the controller reference (`controller: true`) names an owner. Other owner references
//!   (a garbage-collection owner, one set by hand) never do.
//! - The API group is checked: `apps` for ReplicaSet, Deployment, StatefulSet and DaemonSet,
//!   `batch` for Job and CronJob. A kind of that name in another group is not followed.
//! - Pod → ReplicaSet → Deployment; Pod → Job → CronJob (the Job itself when no CronJob controls
//!   it); Pod → StatefulSet / DaemonSet directly (and a pod a Deployment or CronJob controls
//!   directly belongs to it).
//! - The ReplicaSet → Deployment and Job → CronJob links come from the caller (the store or the
//!   snapshot, filled by [`deployment_of`] / [`cronjob_of`]). When the ReplicaSet link is unknown
//!   (a pod created before the cache saw its ReplicaSet) the Deployment name is derived from the
//!   ReplicaSet name minus `-<pod-template-hash>`, which is how the Deployment controller names
//!   ReplicaSets. When the Job link is unknown, the webhook, and only when the Job has no
//!   recommendation of its own, tries the CronJob the Job's name gives ([`cronjob_named_in`]):
//!   the CronJob controller creates a Job and the Job controller its pods within milliseconds,
//!   so a CronJob's pods routinely reach admission before the watch has delivered their Job.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use crate::api::WorkloadKind;
use crate::core::model::WorkloadKey;
use crate::core::pod::{OwnerRef, StrMap};

/// An owner reference of either shape: the Kubernetes type (ReplicaSets and Jobs, the webhook's
/// pod) or kerf's slim [`OwnerRef`] (pods in the cluster view).
pub trait OwnerLink {
    fn api_version(&self) -> &str;
    fn kind(&self) -> &str;
    fn name(&self) -> &str;
    fn is_controller(&self) -> bool;
}

/// The label the Deployment controller puts on every pod and ReplicaSet it creates.
pub const POD_TEMPLATE_HASH_LABEL: &str = "pod-template-hash";

/// Both shapes have the same four fields.
macro_rules! owner_link {
    ($t:ty) => {
        impl OwnerLink for $t {
            fn api_version(&self) -> &str {
                &self.api_version
            }
            fn kind(&self) -> &str {
                &self.kind
            }
            fn name(&self) -> &str {
                &self.name
            }
            fn is_controller(&self) -> bool {
                self.controller == Some(true)
            }
        }
    };
}
owner_link!(OwnerReference);
owner_link!(OwnerRef);

/// ReplicaSets are in the `apps` group, like Deployments.
const REPLICASET_API_VERSION: &str = "apps/v1";

fn group(api_version: &str) -> &str {
    api_version.split_once('/').map_or("", |(g, _)| g)
}

/// The controller reference among `refs`: the only one that names an owner.
pub fn controller<O: OwnerLink>(refs: &[O]) -> Option<&O> {
    refs.iter().find(|o| o.is_controller())
}

/// What a controller reference names, its API group checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Controller<'a> {
    ReplicaSet(&'a str),
    Workload(WorkloadKind, &'a str),
}

fn controller_of(refs: &[impl OwnerLink]) -> Option<Controller<'_>> {
    let o = controller(refs).filter(|o| !o.name().is_empty())?;
    let in_group_of = |api_version: &str| group(o.api_version()) == group(api_version);
    if o.kind() == "ReplicaSet" {
        return in_group_of(REPLICASET_API_VERSION).then_some(Controller::ReplicaSet(o.name()));
    }
    let kind = WorkloadKind::ALL
        .into_iter()
        .find(|k| k.as_str() == o.kind())?;
    in_group_of(kind.api_version()).then_some(Controller::Workload(kind, o.name()))
}

fn controlling(meta: &ObjectMeta, kind: WorkloadKind) -> Option<&str> {
    match controller_of(meta.owner_references.as_deref()?)? {
        Controller::Workload(k, name) if k == kind => Some(name),
        _ => None,
    }
}

/// The Deployment that controls a ReplicaSet (from the ReplicaSet's metadata).
pub fn deployment_of(replicaset: &ObjectMeta) -> Option<&str> {
    controlling(replicaset, WorkloadKind::Deployment)
}

/// The CronJob that controls a Job (from the Job's metadata).
pub fn cronjob_of(job: &ObjectMeta) -> Option<&str> {
    controlling(job, WorkloadKind::CronJob)
}

/// The CronJob a Job's name says scheduled it: the CronJob controller names each Job
/// `<cronjob>-<scheduled time in Unix minutes>`, eight digits from 1970 to 2160, so a user's
/// `migrate-42` or `eval-2024` is not taken for one. A hint for when the link ([`cronjob_of`])
/// is not known yet, never a replacement for it.
pub fn cronjob_named_in(job: &str) -> Option<&str> {
    let (cronjob, minutes) = job.rsplit_once('-')?;
    let scheduled = minutes.len() == 8 && minutes.bytes().all(|b| b.is_ascii_digit());
    (scheduled && !cronjob.is_empty()).then_some(cronjob)
}

/// A pod's `pod-template-hash` label.
pub fn pod_template_hash(labels: Option<&impl StrMap>) -> Option<&str> {
    labels?.get_str(POD_TEMPLATE_HASH_LABEL)
}

/// Resolves the top owner of a pod in `namespace`.
///
/// `owners` are the pod's owner references. `pod_template_hash` is the pod's
/// `pod-template-hash` label. `replicaset_owner(rs)` and `job_owner(job)` look the links up
/// (names in the pod's namespace). Returns `None` for a pod without a controller reference or
/// controlled by something that is not a workload (see the module rules).
pub fn top_owner<R: AsRef<str>, J: AsRef<str>>(
    namespace: &str,
    owners: &[impl OwnerLink],
    pod_template_hash: Option<&str>,
    replicaset_owner: impl Fn(&str) -> Option<R>,
    job_owner: impl Fn(&str) -> Option<J>,
) -> Option<WorkloadKey> {
    let key = |kind, name: &str| Some(WorkloadKey::new(namespace, kind, name));
    match controller_of(owners)? {
        Controller::ReplicaSet(rs) => {
            if let Some(dep) = replicaset_owner(rs) {
                return key(WorkloadKind::Deployment, dep.as_ref());
            }
            let hash = pod_template_hash.filter(|h| !h.is_empty())?;
            let dep = rs.strip_suffix(hash)?.strip_suffix('-')?;
            (!dep.is_empty()).then(|| WorkloadKey::new(namespace, WorkloadKind::Deployment, dep))
        }
        Controller::Workload(WorkloadKind::Job, job) => match job_owner(job) {
            Some(cron) => key(WorkloadKind::CronJob, cron.as_ref()),
            None => key(WorkloadKind::Job, job),
        },
        Controller::Workload(kind, name) => key(kind, name),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn oref(api_version: &str, kind: &str, name: &str, controller: bool) -> OwnerReference {
        OwnerReference {
            api_version: api_version.into(),
            kind: kind.into(),
            name: name.into(),
            controller: Some(controller),
            ..Default::default()
        }
    }

    fn rs(name: &str) -> OwnerReference {
        oref("apps/v1", "ReplicaSet", name, true)
    }
    fn none(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn cronjob_named_in_takes_the_name_before_the_scheduled_minutes() {
        assert_eq!(
            cronjob_named_in("nightly-eval-29034720"),
            Some("nightly-eval")
        );
        assert_eq!(cronjob_named_in("nightly-eval-manual"), None);
        assert_eq!(cronjob_named_in("nightly-eval-"), None);
        assert_eq!(cronjob_named_in("-29034720"), None);
        assert_eq!(cronjob_named_in("29034720"), None);
        assert_eq!(cronjob_named_in("eval-2903472x"), None);
        assert_eq!(cronjob_named_in("migrate-42"), None);
        assert_eq!(cronjob_named_in("eval-2024"), None);
        assert_eq!(cronjob_named_in("eval-290347200"), None);
    }

    #[test]
    fn replicaset_resolved_through_store_link() {
        let k = top_owner(
            "ns",
            &[rs("web-abc")],
            Some("abc"),
            |n| (n == "web-abc").then(|| "web".to_string()),
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
        let job = oref("batch/v1", "Job", "nightly-2903040", true);
        let k = top_owner("ns", std::slice::from_ref(&job), None, none, |_| {
            Some("nightly".to_string())
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
        let mk = |api_version, kind| oref(api_version, kind, "x", true);
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
        let no_owners: &[OwnerReference] = &[];
        assert_eq!(top_owner("ns", no_owners, None, none, none), None);
    }

    #[test]
    fn controller_reference_wins_over_first() {
        let a = oref("apps/v1", "DaemonSet", "a", false);
        let b = oref("apps/v1", "StatefulSet", "b", true);
        assert_eq!(
            top_owner("ns", &[a, b], None, none, none),
            Some(WorkloadKey::new("ns", WorkloadKind::StatefulSet, "b"))
        );
    }

    fn meta(refs: Vec<OwnerReference>) -> ObjectMeta {
        ObjectMeta {
            owner_references: Some(refs),
            ..Default::default()
        }
    }

    #[test]
    fn a_non_controller_owner_reference_is_not_the_owner() {
        // A pod whose only reference is not its controller has no workload…
        for r in [
            oref("apps/v1", "StatefulSet", "db", false),
            oref("apps/v1", "ReplicaSet", "web-abc", false),
            oref("batch/v1", "Job", "once", false),
        ] {
            assert_eq!(
                top_owner("ns", &[r], Some("abc"), |_| Some("web".to_string()), none),
                None
            );
        }
        // …a ReplicaSet or Job the same: no link to a Deployment or CronJob.
        let rs = meta(vec![oref("apps/v1", "Deployment", "web", false)]);
        assert_eq!(deployment_of(&rs), None);
        let job = meta(vec![oref("batch/v1", "CronJob", "nightly", false)]);
        assert_eq!(cronjob_of(&job), None);
        // The controller counts wherever it stands in the list.
        let job = meta(vec![
            oref("batch/v1", "CronJob", "other", false),
            oref("batch/v1", "CronJob", "nightly", true),
        ]);
        assert_eq!(cronjob_of(&job), Some("nightly"));
    }

    #[test]
    fn a_replicaset_of_another_api_group_is_not_followed() {
        let foreign = oref("example.com/v1", "ReplicaSet", "web-abc", true);
        assert_eq!(
            top_owner(
                "ns",
                &[foreign],
                Some("abc"),
                |_| Some("web".to_string()),
                none
            ),
            None
        );
    }

    #[test]
    fn a_workload_kind_of_another_api_group_is_not_an_owner() {
        for (api_version, kind) in [
            ("example.com/v1", "StatefulSet"),
            ("example.com/v1", "DaemonSet"),
            ("example.com/v1", "Deployment"),
            ("apps/v1", "Job"),
            ("apps/v1", "CronJob"),
            ("batch/v1", "StatefulSet"),
            ("v1", "Deployment"),
        ] {
            let r = oref(api_version, kind, "x", true);
            assert_eq!(
                top_owner("ns", &[r], None, none, |_| Some("c".to_string())),
                None,
                "{api_version} {kind}"
            );
        }
        let rs = meta(vec![oref("example.com/v1", "Deployment", "web", true)]);
        assert_eq!(deployment_of(&rs), None);
        let job = meta(vec![oref("example.com/v1", "CronJob", "nightly", true)]);
        assert_eq!(cronjob_of(&job), None);
    }

    #[test]
    fn replicaset_and_job_links_name_their_controller() {
        let rs = meta(vec![oref("apps/v1", "Deployment", "web", true)]);
        assert_eq!(deployment_of(&rs), Some("web"));
        assert_eq!(cronjob_of(&rs), None, "a Deployment is not a CronJob");
        let job = meta(vec![oref("batch/v1", "CronJob", "nightly", true)]);
        assert_eq!(cronjob_of(&job), Some("nightly"));
        assert_eq!(deployment_of(&ObjectMeta::default()), None);
    }

    #[test]
    fn deployment_and_cronjob_controllers_own_their_pods_directly() {
        for (api_version, kind, workload) in [
            ("apps/v1", "Deployment", WorkloadKind::Deployment),
            ("batch/v1", "CronJob", WorkloadKind::CronJob),
        ] {
            let r = oref(api_version, kind, "w", true);
            assert_eq!(
                top_owner("ns", &[r], None, none, none),
                Some(WorkloadKey::new("ns", workload, "w"))
            );
        }
    }
}
