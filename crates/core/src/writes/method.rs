//! How a workload's CPU/memory change reaches its running pods (docs/policies.md#in-place-resize):
//! a rollout (the template is written) or an in-place resize of each pod, one rule per function.

use jiff::Timestamp;

use super::recommendation::applied_change;
use super::resize::{Fallback, WorkloadResize, plan_workload_resize};
use crate::model::{ContainerRequests, rfc3339_secs};
use crate::pod::Pod;
use crate::snapshot::ResizeSupport;
use kerf_api::{ApplyMethod, ResizeFallback, ResizeStatus};

/// What decides the method of one workload's change.
pub struct MethodInput<'a> {
    /// kerf writes the workload's template (not a kind or a template another controller owns).
    pub template_writable: bool,
    /// No running pod may be replaced ([`running_pods_kept`]).
    pub new_pods_only: bool,
    /// The strategy says `resize: inPlaceOrRollout`.
    pub strategy_in_place: bool,
    pub support: ResizeSupport,
    /// The change moves the HPA's target with the requests.
    pub coordinated: bool,
    /// A GPU change recreates the pods this cycle.
    pub gpu_recreates: bool,
    /// The fallback recorded for an earlier cycle, if any.
    pub recorded_fallback: Option<&'a ResizeFallback>,
    /// The workload's running pods.
    pub pods: &'a [&'a Pod],
    pub requests: &'a ContainerRequests,
    /// The limits the change carries with them (`status.applied.limits`).
    pub limits: &'a ContainerRequests,
    pub now: Timestamp,
    /// kerf's last resize request of the workload, as recorded (`status.resize`).
    pub last_request: Option<Timestamp>,
}

/// The method, and for an in-place change where its pods stand.
#[derive(Clone, Debug, PartialEq)]
pub struct Delivery {
    pub method: ApplyMethod,
    /// In place: the pods' resizes. After a fallback: its record (pods counted).
    pub resize: Option<WorkloadResize>,
    /// The fallback of this cycle or the one kept from an earlier cycle.
    pub fallback: Option<ResizeFallback>,
    /// Why the change rolls out although the strategy allows in place.
    pub rollout_reason: Option<&'static str>,
    /// By eviction: this cycle's eviction and where it stands (filled by the write planning).
    pub eviction: Option<super::eviction::EvictionPlan>,
}

impl Delivery {
    fn rollout(reason: Option<&'static str>) -> Self {
        Self {
            method: ApplyMethod::Rollout,
            resize: None,
            fallback: None,
            rollout_reason: reason,
            eviction: None,
        }
    }

    /// In place, by eviction or at admission only: the template is never written.
    pub fn writes_no_template(&self) -> bool {
        matches!(
            self.method,
            ApplyMethod::InPlace | ApplyMethod::Evict | ApplyMethod::Admission
        )
    }

    /// What the RightsizingRecommendation's `status.resize` records.
    pub fn status(&self) -> Option<Box<ResizeStatus>> {
        if self.resize.is_none() && self.fallback.is_none() {
            return None;
        }
        let r = self.resize.clone().unwrap_or_default();
        Some(Box::new(ResizeStatus {
            pods_resized: r.resized,
            pods_pending: r.pending,
            pods_infeasible: r.infeasible,
            pods_waiting: r.waiting,
            last_request_time: r.last_request.map(rfc3339_secs),
            fallback: self.fallback.clone(),
        }))
    }

    /// A fallback first recorded this cycle (its Event and metric are due).
    pub fn new_fallback(&self) -> Option<&Fallback> {
        self.resize.as_ref()?.fallback.as_ref()
    }
}

/// The reason a RayJob's change reaches new pods only.
pub const REASON_JOB_CLUSTER: &str = "a RayJob's cluster is never evicted (losing its head fails \
    the job): the change reaches the pods its cluster creates from now on, at admission";

/// A RayJob's running cluster is never evicted: KubeRay's RayJob controls that cluster for one
/// job (`rayjob_controller.go`), and evicting its head fails the job. The change reaches the
/// pods that cluster creates from now on at admission (`applyMethod: admission`).
pub fn running_pods_kept(kind: kerf_api::WorkloadKind) -> bool {
    kind == kerf_api::WorkloadKind::RayJob
}

/// A template another controller owns is never written: the change reaches new pods at
/// admission and running ones by eviction (docs/workloads.md).
pub fn owned_template_evicts(input: &MethodInput<'_>) -> bool {
    !input.template_writable
}

/// An HPA-coordinated change always rolls out: the requests and the HPA target change together,
/// pod by pod as new pods come up (docs/hpa-coordination.md).
pub fn coordinated_change_rolls_out(input: &MethodInput<'_>) -> Option<&'static str> {
    input.coordinated.then_some("HPACoordinated")
}

/// A GPU change recreates the pods (extended resources and KAI's annotations cannot change in
/// place): the CPU/memory change goes with that rollout.
pub fn gpu_change_recreates(input: &MethodInput<'_>) -> Option<&'static str> {
    input.gpu_recreates.then_some("GPUChange")
}

/// A GPU recommendation reaches running pods the kind's way: where kerf writes the template, its
/// annotations change and the pods roll; where another controller owns it, new pods get it at
/// admission and running ones are replaced by eviction, as a CPU/memory change is.
pub fn gpu_change_method(template_writable: bool) -> ApplyMethod {
    if template_writable {
        ApplyMethod::Rollout
    } else {
        ApplyMethod::Evict
    }
}

/// A GPU recommendation with no CPU/memory change to deliver: its method
/// ([`gpu_change_method`]); the eviction is planned by the write planning.
pub fn gpu_delivery(template_writable: bool, new_pods_only: bool) -> Delivery {
    let method = match new_pods_only {
        true => ApplyMethod::Admission,
        false => gpu_change_method(template_writable),
    };
    Delivery {
        method,
        ..Delivery::rollout(None)
    }
}

/// Only where the API server serves `pods/resize` (Kubernetes 1.33 or later).
pub fn resize_served(input: &MethodInput<'_>) -> Option<&'static str> {
    (input.support == ResizeSupport::NotServed).then_some("ResizeNotServed")
}

/// A change that fell back to a rollout stays one while the recommendation is the same; a new
/// recommendation is tried in place again.
pub fn fallback_kept<'a>(input: &MethodInput<'a>) -> Option<&'a ResizeFallback> {
    let recorded = input.recorded_fallback?;
    (recorded.requests == applied_change(input.requests, None).requests).then_some(recorded)
}

/// The method of one workload's change, `budget` the pods still to be asked this cycle.
pub fn delivery(input: &MethodInput<'_>, budget: &mut usize) -> Delivery {
    if input.new_pods_only {
        return Delivery {
            method: ApplyMethod::Admission,
            ..Delivery::rollout(None)
        };
    }
    if owned_template_evicts(input) {
        return Delivery {
            method: ApplyMethod::Evict,
            ..Delivery::rollout(None)
        };
    }
    if !input.strategy_in_place {
        return Delivery::rollout(None);
    }
    let rule_says_rollout = coordinated_change_rolls_out(input)
        .or_else(|| gpu_change_recreates(input))
        .or_else(|| resize_served(input));
    if let Some(reason) = rule_says_rollout {
        return Delivery::rollout(Some(reason));
    }
    if let Some(kept) = fallback_kept(input) {
        return Delivery {
            fallback: Some(kept.clone()),
            ..Delivery::rollout(Some("ResizeFallback"))
        };
    }
    // Until discovery answers, the pods wait (a cycle later they are asked or roll out).
    let mut none_yet = 0;
    let budget = if input.support == ResizeSupport::Unknown {
        &mut none_yet
    } else {
        budget
    };
    let resize = plan_workload_resize(
        input.pods,
        (input.requests, input.limits),
        (input.now, input.last_request),
        budget,
    );
    match &resize.fallback {
        Some(f) => Delivery {
            method: ApplyMethod::Rollout,
            fallback: Some(ResizeFallback {
                reason: f.reason.to_string(),
                message: f.message.clone(),
                time: rfc3339_secs(input.now),
                requests: applied_change(input.requests, None).requests,
            }),
            resize: Some(resize),
            rollout_reason: Some("ResizeFallback"),
            eviction: None,
        },
        None => Delivery {
            method: ApplyMethod::InPlace,
            resize: Some(resize),
            fallback: None,
            rollout_reason: None,
            eviction: None,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::writes::resize::tests::cpu;

    fn pod(cpu: &str) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web-1", "namespace": "shop"},
            "spec": {"containers": [{"name": "app", "resources": {"requests": {"cpu": cpu}}}]},
            "status": {"phase": "Running"}
        }))
        .unwrap()
    }

    static NO_LIMITS: ContainerRequests = ContainerRequests::new();

    fn input<'a>(pods: &'a [&'a Pod], requests: &'a ContainerRequests) -> MethodInput<'a> {
        MethodInput {
            template_writable: true,
            new_pods_only: false,
            strategy_in_place: true,
            support: ResizeSupport::Served,
            coordinated: false,
            gpu_recreates: false,
            recorded_fallback: None,
            pods,
            requests,
            limits: &NO_LIMITS,
            now: "2026-07-01T12:00:00Z".parse().unwrap(),
            last_request: None,
        }
    }

    #[test]
    fn owned_template_evicts() {
        let r = cpu(250);
        let mut i = input(&[], &r);
        assert!(!super::owned_template_evicts(&i));
        i.template_writable = false;
        assert!(super::owned_template_evicts(&i));
        // Before any strategy choice: an owned template is never written, in place or not.
        assert_eq!(delivery(&i, &mut 10).method, ApplyMethod::Evict);
    }

    #[test]
    fn running_pods_kept() {
        use kerf_api::WorkloadKind;
        assert!(super::running_pods_kept(WorkloadKind::RayJob));
        assert!(!super::running_pods_kept(WorkloadKind::RayCluster));
        let r = cpu(250);
        let mut i = input(&[], &r);
        i.template_writable = false;
        i.new_pods_only = true;
        // Before any other rule: no eviction, no template, no resize.
        let d = delivery(&i, &mut 10);
        assert_eq!(d.method, ApplyMethod::Admission);
        assert!(d.eviction.is_none() && d.resize.is_none());
    }

    #[test]
    fn writes_no_template() {
        for (method, none) in [
            (ApplyMethod::Rollout, false),
            (ApplyMethod::InPlace, true),
            (ApplyMethod::Evict, true),
            (ApplyMethod::Admission, true),
        ] {
            let d = Delivery {
                method,
                ..Delivery::rollout(None)
            };
            assert_eq!(d.writes_no_template(), none, "{method:?}");
        }
    }

    #[test]
    fn coordinated_change_rolls_out() {
        let r = cpu(250);
        let mut i = input(&[], &r);
        assert_eq!(super::coordinated_change_rolls_out(&i), None);
        i.coordinated = true;
        assert_eq!(
            super::coordinated_change_rolls_out(&i),
            Some("HPACoordinated")
        );
        assert_eq!(delivery(&i, &mut 10).method, ApplyMethod::Rollout);
    }

    #[test]
    fn gpu_change_recreates() {
        let r = cpu(250);
        let mut i = input(&[], &r);
        i.gpu_recreates = true;
        assert_eq!(super::gpu_change_recreates(&i), Some("GPUChange"));
        assert_eq!(delivery(&i, &mut 10).method, ApplyMethod::Rollout);
    }

    #[test]
    fn gpu_change_method() {
        assert_eq!(super::gpu_change_method(true), ApplyMethod::Rollout);
        assert_eq!(super::gpu_change_method(false), ApplyMethod::Evict);
        let d = gpu_delivery(false, false);
        assert_eq!(d.method, ApplyMethod::Evict);
        assert_eq!(gpu_delivery(false, true).method, ApplyMethod::Admission);
        assert!(d.resize.is_none() && d.eviction.is_none() && d.rollout_reason.is_none());
    }

    #[test]
    fn resize_served() {
        let r = cpu(250);
        let mut i = input(&[], &r);
        for (support, rolls_out) in [
            (ResizeSupport::Served, false),
            (ResizeSupport::Assumed, false),
            (ResizeSupport::Unknown, false),
            (ResizeSupport::NotServed, true),
        ] {
            i.support = support;
            assert_eq!(super::resize_served(&i).is_some(), rolls_out, "{support:?}");
        }
    }

    #[test]
    fn fallback_kept() {
        let r = cpu(250);
        let recorded = ResizeFallback {
            reason: "Infeasible".into(),
            message: "node is full".into(),
            time: "2026-07-01T11:00:00Z".into(),
            requests: applied_change(&r, None).requests,
        };
        let mut i = input(&[], &r);
        i.recorded_fallback = Some(&recorded);
        assert!(super::fallback_kept(&i).is_some(), "same recommendation");
        let d = delivery(&i, &mut 10);
        assert_eq!(d.method, ApplyMethod::Rollout);
        assert_eq!(d.fallback.as_ref(), Some(&recorded));
        assert!(d.new_fallback().is_none(), "said once, when it happened");
        let other = cpu(300);
        i.requests = &other;
        assert!(super::fallback_kept(&i).is_none(), "a new recommendation");
        assert_eq!(delivery(&i, &mut 10).method, ApplyMethod::InPlace);
    }

    /// The strategy's choice first; until discovery answers, pods wait (nothing asked, nothing
    /// rolled out).
    #[test]
    fn delivery_follows_the_strategy_and_waits_for_discovery() {
        let r = cpu(250);
        let old = pod("500m");
        let pods = [&old];
        let mut i = input(&pods, &r);
        i.strategy_in_place = false;
        assert_eq!(delivery(&i, &mut 10).method, ApplyMethod::Rollout);
        i.strategy_in_place = true;
        let mut budget = 10;
        let d = delivery(&i, &mut budget);
        assert_eq!(d.method, ApplyMethod::InPlace);
        assert_eq!(d.resize.as_ref().unwrap().requests.len(), 1);
        assert_eq!(budget, 9);
        i.support = ResizeSupport::Unknown;
        let d = delivery(&i, &mut budget);
        assert_eq!(d.method, ApplyMethod::InPlace);
        assert!(d.resize.as_ref().unwrap().requests.is_empty());
        assert_eq!(d.resize.as_ref().unwrap().waiting, 1);
        assert_eq!(budget, 9, "the cycle's budget is left to others");
    }
}
