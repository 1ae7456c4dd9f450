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

use crate::model::{Name, WorkloadKey};
use crate::pod::{OwnerRef, StrMap};
use kerf_api::WorkloadKind;
use kerf_api::common::api_group;

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

/// Argo Rollouts' label of a pod's template hash (`rollouts-pod-template-hash`), its ReplicaSet
/// named `<rollout>-<hash>` (`rollout/replicaset.go`): Argo does not set `pod-template-hash`.
pub const ROLLOUTS_POD_TEMPLATE_HASH_LABEL: &str = "rollouts-pod-template-hash";

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
    let in_group_of = |api_version: &str| api_group(o.api_version()) == api_group(api_version);
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

/// The label LeaderWorkerSet puts on every pod of its groups, naming it
/// (`api/leaderworkerset/v1`: `SetNameLabelKey`).
pub const LWS_NAME_LABEL: &str = "leaderworkerset.sigs.k8s.io/name";

/// A pod's chain, with LeaderWorkerSet's label as the last link where the chain stops at a
/// StatefulSet its owners are not known of yet: LWS recreates a group's worker StatefulSet when
/// one of its pods goes, and its new pods are created before kerf has read the StatefulSet's
/// link to the leader Pod. Without this they would miss the change at admission, differ from the
/// recommendation and be evicted again, restarting the group each time.
fn with_lws_label(chain: Chain, labels: Option<&impl StrMap>) -> Chain {
    let stops_at_statefulset = chain.key.kind == WorkloadKind::StatefulSet;
    match labels.and_then(|l| l.get_str(LWS_NAME_LABEL)) {
        Some(lws) if stops_at_statefulset && !lws.is_empty() => {
            let top = Link::new(
                WorkloadKind::LeaderWorkerSet.api_version(),
                WorkloadKind::LeaderWorkerSet.kind_name(),
                lws,
            );
            let mut owners = chain.owners;
            owners.insert(0, top);
            Chain {
                key: WorkloadKey::new(chain.key.namespace, WorkloadKind::LeaderWorkerSet, lws),
                owners,
                owned: false,
            }
        }
        _ => chain,
    }
}

/// An owner reference as a chain records it: the owner's apiVersion, kind and name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Link {
    pub api_version: Name,
    pub kind: Name,
    pub name: Name,
}

impl Link {
    pub fn new(api_version: &str, kind: &str, name: &str) -> Self {
        Self {
            api_version: api_version.into(),
            kind: kind.into(),
            name: name.into(),
        }
    }

    fn of(o: &impl OwnerLink) -> Self {
        Self::new(o.api_version(), o.kind(), o.name())
    }

    fn is(&self, group: &str, kind: &str) -> bool {
        self.kind == kind && api_group(&self.api_version) == group
    }
}

/// The key of an object's controller link in the owner maps: `<Kind>/<name>` (the namespace
/// beside it).
pub fn link_key(kind: &str, name: &str) -> String {
    let mut k = String::with_capacity(kind.len() + 1 + name.len());
    k.push_str(kind);
    k.push('/');
    k.push_str(name);
    k
}

/// The objects a chain passes through on its way up without being workloads themselves
/// (docs/workloads.md): a ReplicaSet, a Knative Revision and Configuration, a
/// LeaderWorkerSet's leader Pod (which owns its group's worker StatefulSet), a Grove PodClique
/// and PodCliqueScalingGroup.
fn passed_through(l: &Link) -> bool {
    l.is("apps", "ReplicaSet")
        || l.is("serving.knative.dev", "Revision")
        || l.is("serving.knative.dev", "Configuration")
        || l.is("", "Pod")
        || l.is("grove.io", "PodClique")
        || l.is("grove.io", "PodCliqueScalingGroup")
}

/// Whether an object of `api_version` and `kind` is one an owner chain passes through.
pub fn passes_through(api_version: &str, kind: &str) -> bool {
    passed_through(&Link::new(api_version, kind, ""))
}

/// Owner chains are short (KServe on Knative is the longest: seven links); a longer one is a
/// loop in broken metadata, cut here.
const MAX_CHAIN: usize = 10;

/// A pod's owners up to its workload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chain {
    /// The workload: the topmost owner of a workload kind.
    pub key: WorkloadKey,
    /// Every owner from the topmost down to the pod's controller.
    pub owners: Vec<Link>,
    /// The workload is a Deployment or StatefulSet controlled by an object kerf does not know:
    /// that controller owns its template, so kerf never writes it.
    pub owned: bool,
}

/// Resolves the owner chain of a pod in `namespace`: from its controller reference up through
/// the links the callers know — `replicaset_owner(rs)` (the Deployment of a ReplicaSet),
/// `job_owner(job)` (the CronJob of a Job) and `controller_of(kind, name)` (any other object's
/// controller reference). The workload is the topmost owner of a workload kind; a ReplicaSet
/// whose owner is unknown names its Deployment by the `pod-template-hash` rule (module docs).
/// `None` for a pod without a controller reference or whose chain reaches no workload kind.
pub fn owner_chain<R: AsRef<str>, J: AsRef<str>>(
    namespace: &str,
    owners: &[impl OwnerLink],
    hashes: TemplateHashes<'_>,
    replicaset_owner: impl Fn(&str) -> Option<R>,
    job_owner: impl Fn(&str) -> Option<J>,
    controller_of: impl Fn(&str, &str) -> Option<Link>,
) -> Option<Chain> {
    let first = controller(owners).filter(|o| !o.name().is_empty())?;
    let mut chain = vec![Link::of(first)];
    while chain.len() < MAX_CHAIN {
        let here = chain.last().expect("the chain starts with the controller");
        let known = passed_through(here)
            || WorkloadKind::of_object(&here.api_version, &here.kind).is_some();
        if !known {
            break;
        }
        let next = if here.is("apps", "ReplicaSet") {
            let first = chain.len() == 1;
            replicaset_owner(&here.name)
                .map(|d| Link::new("apps/v1", "Deployment", d.as_ref()))
                .or_else(|| controller_of(&here.kind, &here.name))
                // The pod's own ReplicaSet, not read yet: its Deployment by the hash rule, and
                // on up from there (a KServe predictor's InferenceService).
                .or_else(|| first.then(|| derived_owner(&here.name, hashes))?)
        } else if here.is("batch", "Job") {
            job_owner(&here.name).map(|c| Link::new("batch/v1", "CronJob", c.as_ref()))
        } else {
            controller_of(&here.kind, &here.name)
        };
        match next.filter(|n| !n.name.is_empty()) {
            Some(n) => chain.push(n),
            None => break,
        }
    }
    let (at, kind) = chain
        .iter()
        .enumerate()
        .rev()
        .find_map(|(i, l)| WorkloadKind::of_object(&l.api_version, &l.kind).map(|k| (i, k)))?;
    let owned = at + 1 < chain.len()
        && matches!(kind, WorkloadKind::Deployment | WorkloadKind::StatefulSet);
    let key = WorkloadKey::new(namespace, kind, chain[at].name.as_str());
    chain.reverse();
    Some(Chain {
        key,
        owners: chain,
        owned,
    })
}

/// A pod's template-hash labels: the Deployment controller's and Argo Rollouts'.
#[derive(Clone, Copy, Debug, Default)]
pub struct TemplateHashes<'a> {
    pub deployment: Option<&'a str>,
    pub rollout: Option<&'a str>,
}

impl<'a> TemplateHashes<'a> {
    /// The hashes a pod's labels carry.
    pub fn of(labels: Option<&'a impl StrMap>) -> Self {
        Self {
            deployment: pod_template_hash(labels),
            rollout: labels.and_then(|l| l.get_str(ROLLOUTS_POD_TEMPLATE_HASH_LABEL)),
        }
    }
}

/// The owner of a ReplicaSet not read yet, by its name: `<rollout>-<hash>` for a pod labelled
/// `rollouts-pod-template-hash` (an Argo Rollout's), else `<deployment>-<pod-template-hash>`
/// (module docs).
fn derived_owner(replicaset: &str, hashes: TemplateHashes<'_>) -> Option<Link> {
    let named = |hash: Option<&str>| {
        let hash = hash.filter(|h| !h.is_empty())?;
        let owner = replicaset.strip_suffix(hash)?.strip_suffix('-')?;
        (!owner.is_empty()).then_some(owner)
    };
    if let Some(rollout) = named(hashes.rollout) {
        return Some(Link::new("argoproj.io/v1alpha1", "Rollout", rollout));
    }
    named(hashes.deployment).map(|d| Link::new("apps/v1", "Deployment", d))
}

/// A pod's owner chain ([`owner_chain`]), read with its labels: the `pod-template-hash`
/// names the Deployment of a ReplicaSet not read yet, LeaderWorkerSet's name label the
/// LeaderWorkerSet of a group whose StatefulSet is not read yet ([`LWS_NAME_LABEL`]). The one
/// reader of a pod's workload, for grouping and admission alike.
pub fn pod_chain<R: AsRef<str>, J: AsRef<str>>(
    namespace: &str,
    owners: &[impl OwnerLink],
    labels: Option<&impl StrMap>,
    replicaset_owner: impl Fn(&str) -> Option<R>,
    job_owner: impl Fn(&str) -> Option<J>,
    controller_of: impl Fn(&str, &str) -> Option<Link>,
) -> Option<Chain> {
    let chain = owner_chain(
        namespace,
        owners,
        TemplateHashes::of(labels),
        replicaset_owner,
        job_owner,
        controller_of,
    )?;
    Some(with_lws_label(chain, labels))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The workload of a pod in `namespace` labelled with `pod_template_hash`, through the one
    /// reader ([`pod_chain`]).
    fn top_owner<R: AsRef<str>, J: AsRef<str>>(
        namespace: &str,
        owners: &[impl OwnerLink],
        pod_template_hash: Option<&str>,
        replicaset_owner: impl Fn(&str) -> Option<R>,
        job_owner: impl Fn(&str) -> Option<J>,
        controller_of: impl Fn(&str, &str) -> Option<Link>,
    ) -> Option<WorkloadKey> {
        let labels: std::collections::BTreeMap<String, String> = pod_template_hash
            .map(|h| (POD_TEMPLATE_HASH_LABEL.to_string(), h.to_string()))
            .into_iter()
            .collect();
        pod_chain(
            namespace,
            owners,
            Some(&labels),
            replicaset_owner,
            job_owner,
            controller_of,
        )
        .map(|c| c.key)
    }

    /// LeaderWorkerSet's name label is the workload where the chain stops at a StatefulSet
    /// (a recreated group's worker StatefulSet, not read yet); elsewhere it changes nothing.
    /// Argo Rollouts labels its pods `rollouts-pod-template-hash`: a pod of a ReplicaSet not read
    /// yet is the Rollout's; the Deployment controller's label names a Deployment.
    #[test]
    fn derived_owner() {
        let argo = TemplateHashes {
            deployment: None,
            rollout: Some("5f7d8c9b4"),
        };
        let got = super::derived_owner("canary-5f7d8c9b4", argo).unwrap();
        assert_eq!(
            (got.kind.as_str(), got.name.as_str()),
            ("Rollout", "canary")
        );
        let apps = TemplateHashes {
            deployment: Some("6f9c8d7b5"),
            rollout: None,
        };
        let got = super::derived_owner("web-6f9c8d7b5", apps).unwrap();
        assert_eq!(
            (got.kind.as_str(), got.name.as_str()),
            ("Deployment", "web")
        );
        assert!(super::derived_owner("web-6f9c8d7b5", TemplateHashes::default()).is_none());
        assert!(super::derived_owner("other-1", argo).is_none());
        let labels: std::collections::BTreeMap<String, String> = [(
            ROLLOUTS_POD_TEMPLATE_HASH_LABEL.to_string(),
            "5f7d8c9b4".to_string(),
        )]
        .into();
        let rs = [oref("apps/v1", "ReplicaSet", "canary-5f7d8c9b4", true)];
        let chain = pod_chain(
            "ml",
            &rs,
            Some(&labels),
            |_| None::<String>,
            |_| None::<String>,
            |_, _| None,
        )
        .unwrap();
        assert_eq!(chain.key.kind, WorkloadKind::Rollout);
    }

    #[test]
    fn with_lws_label() {
        let labels: std::collections::BTreeMap<String, String> =
            [(LWS_NAME_LABEL.to_string(), "vllm".to_string())].into();
        let sts = [oref("apps/v1", "StatefulSet", "vllm-1", true)];
        let chain = |owners: &[OwnerReference]| {
            pod_chain("ml", owners, Some(&labels), none, none, no_link).map(|c| c.key)
        };
        assert_eq!(
            chain(&sts),
            Some(WorkloadKey::new(
                "ml",
                WorkloadKind::LeaderWorkerSet,
                "vllm"
            ))
        );
        let rs = [oref("apps/v1", "ReplicaSet", "web-7d9f", true)];
        assert_eq!(
            chain(&rs),
            None,
            "no hash, no Deployment: the label names no LWS here"
        );
    }

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
    fn no_link(_: &str, _: &str) -> Option<Link> {
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
            no_link,
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
            no_link,
        );
        assert_eq!(
            k,
            Some(WorkloadKey::new("ns", WorkloadKind::Deployment, "my-app"))
        );
    }

    /// A KServe predictor's pod admitted before its ReplicaSet is read: its Deployment by the
    /// hash rule, and that Deployment's InferenceService from there.
    #[test]
    fn replicaset_without_link_derives_deployment_and_goes_on_up() {
        let k = top_owner(
            "ml",
            &[rs("llm-predictor-6f9c8d7b5")],
            Some("6f9c8d7b5"),
            none,
            none,
            |kind: &str, name: &str| {
                (kind == "Deployment" && name == "llm-predictor")
                    .then(|| Link::new("serving.kserve.io/v1beta1", "InferenceService", "llm"))
            },
        );
        assert_eq!(
            k,
            Some(WorkloadKey::new(
                "ml",
                WorkloadKind::InferenceService,
                "llm"
            ))
        );
    }

    #[test]
    fn replicaset_without_link_or_matching_hash_is_no_workload() {
        assert_eq!(
            top_owner("ns", &[rs("my-app-x")], Some("7d9f"), none, none, no_link),
            None
        );
        assert_eq!(
            top_owner("ns", &[rs("my-app-x")], None, none, none, no_link),
            None
        );
        assert_eq!(
            top_owner("ns", &[rs("-abc")], Some("abc"), none, none, no_link),
            None
        );
    }

    #[test]
    fn job_resolves_to_cronjob_when_linked() {
        let job = oref("batch/v1", "Job", "nightly-2903040", true);
        let k = top_owner(
            "ns",
            std::slice::from_ref(&job),
            None,
            none,
            |_| Some("nightly".to_string()),
            no_link,
        );
        assert_eq!(
            k,
            Some(WorkloadKey::new("ns", WorkloadKind::CronJob, "nightly"))
        );
        let k = top_owner("ns", &[job], None, none, none, no_link);
        assert_eq!(
            k,
            Some(WorkloadKey::new("ns", WorkloadKind::Job, "nightly-2903040"))
        );
    }

    #[test]
    fn statefulset_daemonset_direct_and_others_ignored() {
        let mk = |api_version, kind| oref(api_version, kind, "x", true);
        assert_eq!(
            top_owner(
                "ns",
                &[mk("apps/v1", "StatefulSet")],
                None,
                none,
                none,
                no_link
            )
            .map(|k| k.kind),
            Some(WorkloadKind::StatefulSet)
        );
        assert_eq!(
            top_owner(
                "ns",
                &[mk("apps/v1", "DaemonSet")],
                None,
                none,
                none,
                no_link
            )
            .map(|k| k.kind),
            Some(WorkloadKind::DaemonSet)
        );
        assert_eq!(
            top_owner(
                "ns",
                &[mk("v1", "ReplicationController")],
                None,
                none,
                none,
                no_link
            ),
            None
        );
        assert_eq!(
            top_owner(
                "ns",
                &[mk("example.com/v1", "Job")],
                None,
                none,
                none,
                no_link
            ),
            None
        );
        let no_owners: &[OwnerReference] = &[];
        assert_eq!(top_owner("ns", no_owners, None, none, none, no_link), None);
    }

    #[test]
    fn controller_reference_wins_over_first() {
        let a = oref("apps/v1", "DaemonSet", "a", false);
        let b = oref("apps/v1", "StatefulSet", "b", true);
        assert_eq!(
            top_owner("ns", &[a, b], None, none, none, no_link),
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
                top_owner(
                    "ns",
                    &[r],
                    Some("abc"),
                    |_| Some("web".to_string()),
                    none,
                    no_link
                ),
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
                none,
                no_link
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
                top_owner("ns", &[r], None, none, |_| Some("c".to_string()), no_link),
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
                top_owner("ns", &[r], None, none, none, no_link),
                Some(WorkloadKey::new("ns", workload, "w"))
            );
        }
    }
}
