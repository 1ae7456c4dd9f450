//! Replacing running pods by eviction, pure (docs/workloads.md): for a workload whose template
//! another controller owns, kerf never writes the template; new pods get the change at
//! admission, and running pods whose requests differ are evicted one at a time — only while
//! every pod of the workload is ready, at most one per [`EVICTION_INTERVAL`], each through the
//! Eviction API so PodDisruptionBudgets decide (a refusal waits for the next turn, never
//! forced). VPA's updater works the same way for the kinds it does not own.

use jiff::{SignedDuration, Timestamp};

use super::resize::{pod_matches, pod_resources};
use crate::admission::GpuTarget;
use crate::allocation::{Allocation, container_allocations};
use crate::model::{ContainerRequests, GpuMap, rfc3339_secs};
use crate::pod::{POD_READY, Pod, Strings};
use kerf_api::EvictionStatus;

/// The least time between two evictions of one workload's pods: a model server's replacement
/// pod needs minutes to load its weights and become ready.
pub const EVICTION_INTERVAL: SignedDuration = SignedDuration::from_mins(5);

/// Why no pod is evicted now although one is due.
pub const WAITING_NOT_ALL_READY: &str = "NotAllReady";
pub const WAITING_PACED: &str = "Paced";
/// The pod last asked is still running with the old requests, its interval not over: the
/// eviction was refused (a PodDisruptionBudget's 429) or failed; it is asked again once paced.
pub const WAITING_REFUSED: &str = "EvictionRefused";

/// One eviction to ask for.
#[derive(Clone, Debug, PartialEq)]
pub struct PodEviction {
    pub namespace: String,
    pub pod: String,
}

/// A workload's eviction of this cycle and where it stands.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EvictionPlan {
    pub evict: Option<PodEviction>,
    pub status: EvictionStatus,
}

fn ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c.type_ == POD_READY && c.status == "True")
        })
}

/// Evictions wait until the workload has all its replicas ready: `replicas` pods (when the
/// workload says how many it wants), every one of them ready.
pub fn all_replicas_ready(pods: &[&Pod], replicas: Option<i32>) -> bool {
    let enough = replicas.is_none_or(|r| pods.len() >= usize::try_from(r).unwrap_or(0));
    enough && pods.iter().all(|p| ready(p))
}

/// At most one eviction per workload per [`EVICTION_INTERVAL`].
pub fn paced(last: Option<&str>, now: Timestamp) -> bool {
    last.and_then(|t| t.parse::<Timestamp>().ok())
        .is_none_or(|t| now.duration_since(t) >= EVICTION_INTERVAL)
}

/// KubeRay's label of a pod's role in its cluster (`ray-operator/controllers/ray/utils`:
/// `RayNodeTypeLabelKey`), `head` on the head pod.
const RAY_NODE_TYPE_LABEL: &str = "ray.io/node-type";

/// Whether a pod is replaced after the others of its workload: a Ray cluster's head, whose
/// loss restarts the cluster (its actors and Serve replicas, without GCS fault tolerance).
pub fn replaced_last(pod: &Pod) -> bool {
    use crate::pod::StrMap;
    pod.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get_str(RAY_NODE_TYPE_LABEL))
        == Some("head")
}

/// What a workload's new pods are admitted with: the CPU/memory requests kerf applies and,
/// per container, the GPUs recommended.
#[derive(Clone, Copy, Debug)]
pub struct Wanted<'a> {
    pub requests: &'a ContainerRequests,
    /// The limits the change carries with the requests (a pod admitted gets them too).
    pub limits: &'a ContainerRequests,
    pub gpu: Option<&'a GpuMap>,
}

/// Whether a pod holds the GPUs admission gives a new pod of its workload: per container the
/// recommended size as admission writes it ([`GpuTarget`]); a size admission cannot use, or a
/// container the pod does not have, leaves the pod as it is.
pub fn pod_gpu_matches(pod: &Pod, gpu: &GpuMap) -> bool {
    let Some(spec) = pod.spec.as_ref() else {
        return true;
    };
    let none = Strings::new();
    let annotations = pod.metadata.annotations.as_ref().unwrap_or(&none);
    let held = container_allocations(spec, annotations);
    gpu.iter().all(|(container, units)| {
        let Some(target) = GpuTarget::from_units(*units) else {
            return true;
        };
        match held.get(container) {
            Some(Allocation::Gpus(g)) => (g - target.units()).abs() < 1e-9,
            Some(Allocation::Missing(_)) => false,
            None => true,
        }
    })
}

/// The pods whose requests (capped at their limits, as admission sets them) or GPUs differ
/// from what a new pod is admitted with, by name, a Ray head last.
pub fn pods_to_replace<'a>(pods: &[&'a Pod], wanted: Wanted<'_>) -> Vec<&'a Pod> {
    let mut out: Vec<&Pod> = pods
        .iter()
        .copied()
        .filter(|p| {
            let requests_differ = p.spec.as_ref().is_some_and(|s| {
                !pod_matches(s, &pod_resources(s, wanted.requests, wanted.limits))
            });
            requests_differ || wanted.gpu.is_some_and(|g| !pod_gpu_matches(p, g))
        })
        .collect();
    out.sort_by(|a, b| {
        (replaced_last(a), &a.metadata.name).cmp(&(replaced_last(b), &b.metadata.name))
    });
    out
}

/// This cycle's eviction of a workload's running `pods`, from the last recorded status.
pub fn plan_eviction(
    pods: &[&Pod],
    replicas: Option<i32>,
    wanted: Wanted<'_>,
    previous: Option<&EvictionStatus>,
    now: Timestamp,
) -> EvictionPlan {
    let due = pods_to_replace(pods, wanted);
    let mut status = EvictionStatus {
        pods_to_replace: u32::try_from(due.len()).unwrap_or(u32::MAX),
        last_eviction_time: previous.and_then(|p| p.last_eviction_time.clone()),
        last_evicted_pod: previous.and_then(|p| p.last_evicted_pod.clone()),
        waiting: None,
    };
    let Some(next) = due.first() else {
        return EvictionPlan {
            evict: None,
            status,
        };
    };
    if !all_replicas_ready(pods, replicas) {
        status.waiting = Some(WAITING_NOT_ALL_READY.into());
        return EvictionPlan {
            evict: None,
            status,
        };
    }
    if !paced(status.last_eviction_time.as_deref(), now) {
        let refused = status
            .last_evicted_pod
            .as_deref()
            .is_some_and(|last| due.iter().any(|p| p.metadata.name.as_deref() == Some(last)));
        status.waiting = Some(
            if refused {
                WAITING_REFUSED
            } else {
                WAITING_PACED
            }
            .into(),
        );
        return EvictionPlan {
            evict: None,
            status,
        };
    }
    let name = next
        .metadata
        .name
        .as_deref()
        .unwrap_or_default()
        .to_string();
    status.last_eviction_time = Some(rfc3339_secs(now));
    status.last_evicted_pod = Some(name.clone());
    EvictionPlan {
        evict: Some(PodEviction {
            namespace: next
                .metadata
                .namespace
                .as_deref()
                .unwrap_or_default()
                .into(),
            pod: name,
        }),
        status,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::writes::resize::tests::cpu;

    fn pod(name: &str, cpu: &str, is_ready: bool) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "ml"},
            "spec": {"containers": [{"name": "app", "resources": {"requests": {"cpu": cpu}}}]},
            "status": {"phase": "Running", "conditions": [
                {"type": "Ready", "status": if is_ready { "True" } else { "False" }}]}
        }))
        .unwrap()
    }

    static NO_LIMITS: ContainerRequests = ContainerRequests::new();

    fn cpu_only(requests: &ContainerRequests) -> Wanted<'_> {
        Wanted {
            requests,
            limits: &NO_LIMITS,
            gpu: None,
        }
    }

    /// A KAI fractional pod (`gpu-fraction`) or one holding whole `nvidia.com/gpu`.
    fn gpu_pod(name: &str, fraction: Option<&str>, whole: Option<&str>) -> Pod {
        let mut resources = serde_json::json!({"requests": {"cpu": "250m"}});
        if let Some(n) = whole {
            resources["limits"] = serde_json::json!({"nvidia.com/gpu": n});
        }
        let annotations = match fraction {
            Some(f) => serde_json::json!({"gpu-fraction": f}),
            None => serde_json::json!({}),
        };
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "ml", "annotations": annotations},
            "spec": {"containers": [{"name": "kserve-container", "resources": resources}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
        }))
        .unwrap()
    }

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn all_replicas_ready() {
        let a = pod("a", "1", true);
        let b = pod("b", "1", false);
        assert!(super::all_replicas_ready(&[&a], Some(1)));
        assert!(
            !super::all_replicas_ready(&[&a], Some(2)),
            "one replica missing"
        );
        assert!(!super::all_replicas_ready(&[&a, &b], None), "one not ready");
    }

    #[test]
    fn paced() {
        let now = at("2026-07-01T12:00:00Z");
        assert!(super::paced(None, now));
        assert!(!super::paced(Some("2026-07-01T11:56:00Z"), now));
        assert!(super::paced(Some("2026-07-01T11:55:00Z"), now));
    }

    #[test]
    fn replaced_last() {
        let mut head = pod("raycluster-kuberay-head-x2x4z", "1", true);
        head.metadata.labels = Some(
            [("ray.io/node-type".to_string(), "head".to_string())]
                .into_iter()
                .collect(),
        );
        let worker = pod("raycluster-kuberay-workergroup-worker-b6c7d", "1", true);
        assert!(super::replaced_last(&head) && !super::replaced_last(&worker));
        let got = super::pods_to_replace(&[&head, &worker], cpu_only(&cpu(250)));
        let names: Vec<_> = got.iter().map(|p| p.metadata.name.as_deref()).collect();
        assert_eq!(
            names,
            [
                Some("raycluster-kuberay-workergroup-worker-b6c7d"),
                Some("raycluster-kuberay-head-x2x4z")
            ],
            "the head after the workers, though it sorts first by name"
        );
    }

    #[test]
    fn pod_gpu_matches() {
        let wanted = GpuMap::from([("kserve-container".to_string(), 0.7)]);
        assert!(super::pod_gpu_matches(
            &gpu_pod("a", Some("0.7"), None),
            &wanted
        ));
        assert!(!super::pod_gpu_matches(
            &gpu_pod("a", Some("0.5"), None),
            &wanted
        ));
        // Whole GPUs (`nvidia.com/gpu`).
        let two = GpuMap::from([("kserve-container".to_string(), 2.0)]);
        assert!(super::pod_gpu_matches(&gpu_pod("a", None, Some("2")), &two));
        assert!(!super::pod_gpu_matches(
            &gpu_pod("a", None, Some("1")),
            &two
        ));
        // A size admission cannot use, or another container's: the pod is left as it is.
        let other = GpuMap::from([("sidecar".to_string(), 1.0)]);
        assert!(super::pod_gpu_matches(
            &gpu_pod("a", None, Some("1")),
            &other
        ));
        let unusable = GpuMap::from([("kserve-container".to_string(), 0.0)]);
        assert!(super::pod_gpu_matches(
            &gpu_pod("a", None, Some("1")),
            &unusable
        ));
    }

    /// A GPU change alone replaces the pods not yet holding it, as a CPU/memory change does.
    #[test]
    fn pods_to_replace_follows_the_gpu_too() {
        let none = ContainerRequests::default();
        let gpu = GpuMap::from([("kserve-container".to_string(), 1.0)]);
        let (old, new) = (
            gpu_pod("a", Some("0.5"), None),
            gpu_pod("b", None, Some("1")),
        );
        let wanted = Wanted {
            requests: &none,
            limits: &none,
            gpu: Some(&gpu),
        };
        let got = super::pods_to_replace(&[&old, &new], wanted);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].metadata.name.as_deref(), Some("a"));
        let now = at("2026-07-01T12:00:00Z");
        let plan = plan_eviction(&[&old, &new], Some(2), wanted, None, now);
        assert_eq!(plan.evict.unwrap().pod, "a");
        assert!(super::pods_to_replace(&[&old, &new], cpu_only(&none)).is_empty());
    }

    #[test]
    fn pods_to_replace() {
        let done = pod("a", "250m", true);
        let old = pod("b", "1", true);
        let got = super::pods_to_replace(&[&old, &done], cpu_only(&cpu(250)));
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].metadata.name.as_deref(), Some("b"));
    }

    /// One pod per turn, the first by name whose requests differ, and only when ready and paced.
    #[test]
    fn plan_eviction_takes_one_pod_per_interval_while_all_are_ready() {
        let now = at("2026-07-01T12:00:00Z");
        let (a, b) = (pod("llm-b", "1", true), pod("llm-a", "1", true));
        let p = plan_eviction(&[&a, &b], Some(2), cpu_only(&cpu(250)), None, now);
        assert_eq!(p.evict.as_ref().unwrap().pod, "llm-a");
        assert_eq!(p.status.pods_to_replace, 2);
        assert_eq!(
            p.status.last_eviction_time.as_deref(),
            Some("2026-07-01T12:00:00Z")
        );

        // llm-a evicted and replaced (its replacement admitted with the change): paced.
        let later = at("2026-07-01T12:02:00Z");
        let replaced = pod("llm-a-new", "250m", true);
        let p2 = plan_eviction(
            &[&a, &replaced],
            Some(2),
            cpu_only(&cpu(250)),
            Some(&p.status),
            later,
        );
        assert!(p2.evict.is_none());
        assert_eq!(p2.status.waiting.as_deref(), Some(WAITING_PACED));

        // llm-a still running with the old requests: the eviction was refused (429), said so,
        // and asked again once the interval is over — never forced sooner.
        let refused = plan_eviction(
            &[&a, &b],
            Some(2),
            cpu_only(&cpu(250)),
            Some(&p.status),
            later,
        );
        assert!(refused.evict.is_none());
        assert_eq!(refused.status.waiting.as_deref(), Some(WAITING_REFUSED));
        let retry = at("2026-07-01T12:05:00Z");
        let again = plan_eviction(
            &[&a, &b],
            Some(2),
            cpu_only(&cpu(250)),
            Some(&p.status),
            retry,
        );
        assert_eq!(again.evict.as_ref().unwrap().pod, "llm-a");

        let unready = pod("llm-a", "250m", false);
        let p3 = plan_eviction(&[&a, &unready], Some(2), cpu_only(&cpu(250)), None, now);
        assert!(p3.evict.is_none());
        assert_eq!(p3.status.waiting.as_deref(), Some(WAITING_NOT_ALL_READY));

        let done = pod("llm-a", "250m", true);
        let finished = pod("llm-b", "250m", true);
        let p4 = plan_eviction(&[&done, &finished], Some(2), cpu_only(&cpu(250)), None, now);
        assert!(p4.evict.is_none() && p4.status.waiting.is_none());
        assert_eq!(p4.status.pods_to_replace, 0);
    }
}
