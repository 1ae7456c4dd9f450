//! One test per Behavior bullet and per engine rule of docs/design/gpu-engine.md, named after
//! the rule, plus property tests for the engine's invariants.

use std::collections::{BTreeMap, BTreeSet};

use crate::pod::{Meta, Resources};
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use proptest::prelude::*;

use super::*;
use crate::allocation::{Allocation, container_allocations};
use crate::model::{GpuMap, GpuRecommendation, PolicyId};
use crate::pod::{Container, Pod, PodSpec, PodStatus, PodTemplateSpec};
use crate::quantity::format_gpu;
use kerf_api::{GpuReactivePolicySpec, Signal};

const POLICY_YAML: &str = r#"
experimental: {gpuKaiContract: v1alpha1-2026-07}
scope: {containers: []}
minPodMetricsAge: 15m
metrics:
  compute:
    upsize: {thresholdPercent: 125, metricsWindow: 10m, headroomPercent: 20, maxPercent: 200}
    scaleBack: {thresholdPercent: 60, metricsWindow: 10m, headroomPercent: 20}
    prometheus: {metric: sm, interpretation: fullGPU}
  memory:
    upsize: {thresholdPercent: 125, metricsWindow: 10m, headroomPercent: 20, maxPercent: 200}
    scaleBack: {thresholdPercent: 60, metricsWindow: 10m, headroomPercent: 20}
    prometheus: {metric: mem, interpretation: currentAllocation}
automationStrategyRef: {name: s}
"#;

fn now() -> Timestamp {
    "2026-01-01T12:00:00Z".parse::<Timestamp>().unwrap()
}

fn policy() -> GpuReactivePolicySpec {
    serde_saphyr::from_str(POLICY_YAML).unwrap()
}

fn pid() -> PolicyId {
    PolicyId {
        kind: "GpuReactivePolicy".into(),
        namespace: Some("default".into()),
        name: "p".into(),
    }
}

fn container(name: &str, gpus: Option<&str>) -> Container {
    Container {
        name: name.into(),
        resources: gpus.map(|g| {
            Box::new(Resources {
                limits: Some(SmallMap::from([(
                    "nvidia.com/gpu".to_string(),
                    Quantity(g.into()),
                )])),
                ..Default::default()
            })
        }),
        ..Default::default()
    }
}

fn sidecar(name: &str) -> Container {
    Container {
        restart_policy: Some(Box::new("Always".into())),
        ..container(name, None)
    }
}

/// A pod with a KAI fraction on its first container (`fraction`), or whole GPUs per container.
struct PodB {
    name: String,
    containers: Vec<Container>,
    init: Vec<Container>,
    annotations: Strings,
    started_min_ago: Option<i64>,
    terminating: bool,
}

impl PodB {
    fn new(name: &str) -> Self {
        Self {
            name: name.into(),
            containers: vec![],
            init: vec![],
            annotations: Strings::new(),
            started_min_ago: Some(60),
            terminating: false,
        }
    }
    fn fraction(mut self, f: &str) -> Self {
        self.annotations.insert("gpu-fraction".into(), f.into());
        self
    }
    fn ann(mut self, k: &str, v: &str) -> Self {
        self.annotations.insert(k.into(), v.into());
        self
    }
    fn c(mut self, c: Container) -> Self {
        self.containers.push(c);
        self
    }
    fn init(mut self, c: Container) -> Self {
        self.init.push(c);
        self
    }
    fn started(mut self, mins: Option<i64>) -> Self {
        self.started_min_ago = mins;
        self
    }
    fn build(self) -> Pod {
        Pod {
            metadata: Meta {
                name: Some(self.name.into()),
                namespace: Some("default".into()),
                annotations: Some(self.annotations),
                deletion_timestamp: self
                    .terminating
                    .then(|| Box::new(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now()))),
                ..Default::default()
            },
            spec: Some(PodSpec {
                containers: self.containers,
                init_containers: (!self.init.is_empty()).then_some(self.init),
                resources: None,
                os: None,
            }),
            status: Some(PodStatus {
                start_time: self.started_min_ago.map(|m| {
                    k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                        now() - SignedDuration::from_mins(m),
                    )
                }),
                phase: Some("Running".into()),
                ..Default::default()
            }),
        }
    }
}

fn template_of(pod: &Pod) -> PodTemplateSpec {
    PodTemplateSpec {
        metadata: Some(crate::pod::TemplateMeta {
            annotations: pod.metadata.annotations.clone(),
            ..Default::default()
        }),
        spec: pod.spec.clone(),
    }
}

/// Constant samples every 15 s over the last 20 minutes.
fn flat(value: f64) -> Vec<(i64, f64)> {
    let end = now().as_second();
    (0..80).map(|i| (end - 15 * (79 - i), value)).collect()
}

fn samples(entries: &[(&str, &str, f64)]) -> SignalSamples {
    entries
        .iter()
        .map(|(p, c, v)| ((p.to_string(), c.to_string()), flat(*v)))
        .collect()
}

struct Case {
    policy: GpuReactivePolicySpec,
    template: PodTemplateSpec,
    pods: Vec<Pod>,
    compute: SignalSamples,
    memory: SignalSamples,
    baseline: Option<GpuMap>,
    previous: Option<GpuRecommendation>,
    containers_override: Option<BTreeSet<String>>,
}

impl Case {
    fn new(pods: Vec<Pod>) -> Self {
        Self {
            policy: policy(),
            template: template_of(&pods[0]),
            pods,
            compute: SignalSamples::new(),
            memory: SignalSamples::new(),
            baseline: None,
            previous: None,
            containers_override: None,
        }
    }
    fn run(&self) -> EngineOutput {
        let id = pid();
        let pods: Vec<&Pod> = self.pods.iter().collect();
        evaluate(&EngineInput {
            policy_id: &id,
            policy: &self.policy,
            containers_override: self.containers_override.as_ref(),
            template: &self.template,
            pods: &pods,
            compute: &self.compute,
            memory: &self.memory,
            baseline: self.baseline.as_ref(),
            previous: self.previous.as_ref(),
            now: now(),
        })
    }
}

fn rec(containers: &[(&str, f64)], driver: Option<Signal>) -> GpuRecommendation {
    GpuRecommendation {
        containers: containers
            .iter()
            .map(|(c, v)| (c.to_string(), *v))
            .collect(),
        driving_metric: driver,
        policy: Some(pid()),
        updated_at: Some(now() - SignedDuration::from_hours(1)),
        by_policy: Default::default(),
    }
}

fn gm(entries: &[(&str, f64)]) -> GpuMap {
    entries.iter().map(|(c, v)| (c.to_string(), *v)).collect()
}

fn approx(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

fn recommended(out: &EngineOutput, c: &str) -> f64 {
    out.recommendation
        .as_ref()
        .expect("a recommendation")
        .containers[c]
}

fn half_gpu_pod(name: &str) -> Pod {
    PodB::new(name)
        .fraction("0.5")
        .c(container("inference", None))
        .build()
}

// ---- docs/design/gpu-engine.md#g1: current allocation --------------------------------------

#[test]
fn kai_fraction_is_the_first_containers_allocation() {
    let p = PodB::new("p")
        .fraction("0.5")
        .c(container("a", None))
        .c(container("b", None))
        .build();
    let a = container_allocations(
        p.spec.as_ref().unwrap(),
        p.metadata.annotations.as_ref().unwrap(),
    );
    assert_eq!(a["a"], Allocation::Gpus(0.5));
    assert!(a["b"].gpus().is_none());
}

#[test]
fn kai_fraction_times_num_devices_on_named_container() {
    let p = PodB::new("p")
        .fraction("0.25")
        .ann("gpu-fraction-num-devices", "4")
        .ann("gpu-fraction-container-name", "b")
        .c(container("a", None))
        .c(container("b", None))
        .build();
    let a = container_allocations(
        p.spec.as_ref().unwrap(),
        p.metadata.annotations.as_ref().unwrap(),
    );
    assert_eq!(a["b"], Allocation::Gpus(1.0));
    assert!(
        a["a"].gpus().is_none(),
        "no other container has a fractional allocation"
    );
}

#[test]
fn whole_gpus_from_limits_else_requests() {
    let mut by_request = container("r", None);
    by_request.resources = Some(Box::new(Resources {
        requests: Some(SmallMap::from([(
            "nvidia.com/gpu".to_string(),
            Quantity("3".into()),
        )])),
        ..Default::default()
    }));
    let p = PodB::new("p")
        .c(container("l", Some("2")))
        .c(by_request)
        .build();
    let a = container_allocations(p.spec.as_ref().unwrap(), &BTreeMap::new());
    assert_eq!(a["l"], Allocation::Gpus(2.0));
    assert_eq!(a["r"], Allocation::Gpus(3.0));
}

/// docs/design/gpu-engine.md#g1: `nvidia.com/gpu` is read by core/quantity.rs (the reader
/// admission uses too) in GPU units, suffixes included; a value that is not a quantity is no
/// allocation, and the reason says why.
#[test]
fn whole_gpus_are_read_as_exact_quantities() {
    let p = PodB::new("p")
        .c(container("milli", Some("2000m")))
        .c(container("half", Some("500m")))
        .c(container("negative", Some("-1")))
        .c(container("zero", Some("0")))
        .build();
    let a = container_allocations(p.spec.as_ref().unwrap(), &BTreeMap::new());
    assert_eq!(a["milli"], Allocation::Gpus(2.0));
    assert_eq!(a["half"], Allocation::Gpus(0.5));
    assert!(
        matches!(&a["negative"], Allocation::Missing(why) if why.contains("nvidia.com/gpu") && why.contains("negative")),
        "{:?}",
        a["negative"]
    );
    assert!(matches!(&a["zero"], Allocation::Missing(why) if why.contains("neither")));
}

#[test]
fn kai_gpu_memory_pod_has_no_allocation() {
    let p = PodB::new("p")
        .ann("gpu-memory", "4000")
        .c(container("a", None))
        .build();
    let a = container_allocations(
        p.spec.as_ref().unwrap(),
        p.metadata.annotations.as_ref().unwrap(),
    );
    assert!(matches!(&a["a"], Allocation::Missing(why) if why.contains("gpu-memory")));
}

// ---- docs/design/gpu-engine.md#behavior and #g2 to #g10 -------------------------------

#[test]
fn full_gpu_interpretation_is_percent_of_one_whole_gpu() {
    // 90 % of one GPU = 0.9 GPU on a 0.5 allocation: above 125 % → upsize to 0.9 × 1.2 = 1.08,
    // capped at 200 % of the 0.5 baseline = 1.0.
    let mut case = Case::new(vec![half_gpu_pod("p1")]);
    case.compute = samples(&[("p1", "inference", 90.0)]);
    let out = case.run();
    assert_eq!(out.action, Action::Upsize);
    assert!(approx(recommended(&out, "inference"), 1.0));
}

#[test]
fn current_allocation_interpretation_is_percent_of_the_containers_allocation() {
    // 140 % of a 0.5 allocation = 0.7 GPU > 0.625 → upsize to 0.7 × 1.2 = 0.84.
    let mut case = Case::new(vec![half_gpu_pod("p1")]);
    case.memory = samples(&[("p1", "inference", 140.0)]);
    let out = case.run();
    assert_eq!(out.action, Action::Upsize);
    assert_eq!(out.driving_metric, Some(Signal::Memory));
    assert!(approx(recommended(&out, "inference"), 0.84));
}

#[test]
fn both_signals_compute_and_memory_are_evaluated() {
    let mut case = Case::new(vec![half_gpu_pod("p1")]);
    case.compute = samples(&[("p1", "inference", 70.0)]); // 0.7 → 0.84
    let compute_only = case.run();
    assert_eq!(compute_only.driving_metric, Some(Signal::Compute));
    case.compute = samples(&[("p1", "inference", 10.0)]);
    case.memory = samples(&[("p1", "inference", 150.0)]); // 0.75 → 0.9
    let memory_only = case.run();
    assert_eq!(memory_only.driving_metric, Some(Signal::Memory));
    assert!(approx(recommended(&memory_only, "inference"), 0.9));
}

#[test]
fn pod_total_sums_included_containers_against_summed_allocation() {
    // Two whole-GPU containers (1 + 1). Usage 0.9 + 0.9 = 1.8 < 2 × 1.25: no upsize even though
    // each container alone would be above its own share.
    let pod = PodB::new("p1")
        .c(container("a", Some("1")))
        .c(container("b", Some("1")))
        .build();
    let mut case = Case::new(vec![pod]);
    case.compute = samples(&[("p1", "a", 90.0), ("p1", "b", 90.0)]);
    assert_eq!(case.run().action, Action::None);
    // 1.5 + 1.2 = 2.7 > 2.5 → upsize of the pod total: 2.7 × 1.2 = 3.24, split 1:1.
    case.compute = samples(&[("p1", "a", 150.0), ("p1", "b", 120.0)]);
    let out = case.run();
    assert_eq!(out.action, Action::Upsize);
    assert!(approx(recommended(&out, "a"), 1.62));
    assert!(approx(recommended(&out, "b"), 1.62));
}

#[test]
fn pod_total_is_taken_per_aligned_timestamp_and_maxed_over_the_window() {
    // a peaks at t-60, b at t-30: the pod total is 2.1 at both timestamps (< 2 × 1.25), so no
    // upsize — although max(a) + max(b) = 4.0 would have triggered one.
    let pod = PodB::new("p1")
        .c(container("a", Some("1")))
        .c(container("b", Some("1")))
        .build();
    let mut case = Case::new(vec![pod]);
    let t = now().as_second();
    case.compute = SignalSamples::from([
        (
            ("p1".into(), "a".into()),
            vec![(t - 60, 200.0), (t - 30, 10.0)],
        ),
        (
            ("p1".into(), "b".into()),
            vec![(t - 60, 10.0), (t - 30, 200.0)],
        ),
    ]);
    assert_eq!(case.run().action, Action::None);
    // A sample outside the 10m window does not count.
    case.compute = SignalSamples::from([(
        ("p1".into(), "a".into()),
        vec![(t - 601, 500.0), (t - 30, 10.0)],
    )]);
    assert_eq!(case.run().action, Action::None);
    case.compute = SignalSamples::from([(
        ("p1".into(), "a".into()),
        vec![(t - 599, 500.0), (t - 30, 10.0)],
    )]);
    assert_eq!(case.run().action, Action::Upsize);
}

#[test]
fn upsize_is_pod_level_any_single_pod_over_threshold_triggers() {
    let mut case = Case::new(vec![half_gpu_pod("cold"), half_gpu_pod("hot")]);
    case.compute = samples(&[("cold", "inference", 5.0), ("hot", "inference", 70.0)]);
    let out = case.run();
    assert_eq!(out.action, Action::Upsize);
    assert!(approx(recommended(&out, "inference"), 0.84));
}

#[test]
fn upsize_target_is_hottest_pod_plus_headroom_capped_by_max_percent_of_baseline() {
    let mut case = Case::new(vec![half_gpu_pod("p1"), half_gpu_pod("p2")]);
    case.compute = samples(&[("p1", "inference", 70.0), ("p2", "inference", 80.0)]);
    assert!(
        approx(recommended(&case.run(), "inference"), 0.96),
        "0.8 × 1.2"
    );
    case.compute = samples(&[("p1", "inference", 99.0)]);
    case.policy.metrics.compute.upsize.max_percent = 150.0;
    assert!(
        approx(recommended(&case.run(), "inference"), 0.75),
        "capped at 150 % of 0.5"
    );
}

#[test]
fn scale_back_is_owner_wide_every_pod_must_stay_below_threshold() {
    let pods = vec![
        PodB::new("p1")
            .fraction("0.9")
            .c(container("inference", None))
            .build(),
        PodB::new("p2")
            .fraction("0.9")
            .c(container("inference", None))
            .build(),
    ];
    let mut case = Case::new(pods);
    case.template = template_of(&half_gpu_pod("t"));
    case.baseline = Some(gm(&[("inference", 0.5)]));
    case.previous = Some(rec(&[("inference", 0.9)], Some(Signal::Compute)));
    // p2 at 0.6 of 0.9 = 67 % ≥ 60 % → no scale-back; reuse.
    case.compute = samples(&[("p1", "inference", 20.0), ("p2", "inference", 60.0)]);
    case.memory = samples(&[("p1", "inference", 10.0), ("p2", "inference", 10.0)]);
    assert_eq!(case.run().action, Action::Reuse);
    // Both below → scale back to hottest 0.3 × 1.2 = 0.36, floored at 0.5.
    case.compute = samples(&[("p1", "inference", 20.0), ("p2", "inference", 30.0)]);
    let out = case.run();
    assert_eq!(out.action, Action::ScaleBack);
    assert!(approx(recommended(&out, "inference"), 0.5));
}

#[test]
fn scale_back_target_is_hottest_plus_headroom_floored_at_baseline() {
    let pod = PodB::new("p1").c(container("inference", Some("2"))).build();
    let mut case = Case::new(vec![pod]);
    case.template = template_of(&PodB::new("t").c(container("inference", Some("1"))).build());
    case.baseline = Some(gm(&[("inference", 1.0)]));
    case.previous = Some(rec(&[("inference", 2.0)], Some(Signal::Compute)));
    case.compute = samples(&[("p1", "inference", 100.0)]); // 1.0 of 2 = 50 % < 60 %
    case.memory = samples(&[("p1", "inference", 10.0)]);
    let out = case.run();
    assert_eq!(out.action, Action::ScaleBack);
    assert!(
        approx(recommended(&out, "inference"), 1.2),
        "1.0 × 1.2 above the 1.0 floor"
    );
}

#[test]
fn scale_back_requires_samples_for_every_included_container() {
    let pod = PodB::new("p1")
        .c(container("a", Some("2")))
        .c(container("b", Some("2")))
        .build();
    let mut case = Case::new(vec![pod]);
    case.template = template_of(
        &PodB::new("t")
            .c(container("a", Some("1")))
            .c(container("b", Some("1")))
            .build(),
    );
    case.baseline = Some(gm(&[("a", 1.0), ("b", 1.0)]));
    case.previous = Some(rec(&[("a", 2.0), ("b", 2.0)], Some(Signal::Compute)));
    case.compute = samples(&[("p1", "a", 10.0)]); // b has no samples
    case.memory = samples(&[("p1", "a", 10.0), ("p1", "b", 10.0)]);
    let out = case.run();
    assert_ne!(out.action, Action::ScaleBack);
    assert!(out.reasons.iter().any(|r| r.contains("lacks samples")));
}

#[test]
fn scale_back_is_not_evaluated_before_the_first_upsize() {
    let mut case = Case::new(vec![half_gpu_pod("p1")]);
    case.compute = samples(&[("p1", "inference", 1.0)]);
    case.memory = samples(&[("p1", "inference", 1.0)]);
    let out = case.run();
    assert_eq!(out.action, Action::None);
    assert!(out.recommendation.is_none());
}

#[test]
fn pod_metrics_count_only_after_min_pod_metrics_age() {
    let young = PodB::new("p1")
        .fraction("0.5")
        .c(container("inference", None))
        .started(Some(5))
        .build();
    let mut case = Case::new(vec![young]);
    case.compute = samples(&[("p1", "inference", 90.0)]);
    let out = case.run();
    assert_eq!(out.action, Action::None);
    assert!(
        out.reasons
            .iter()
            .any(|r| r.contains("younger than minPodMetricsAge"))
    );
    case.policy.min_pod_metrics_age = kerf_api::DurationStr::parse("0s").unwrap();
    assert_eq!(case.run().action, Action::Upsize);
}

#[test]
fn pods_without_status_start_time_are_ineligible() {
    let pod = PodB::new("p1")
        .fraction("0.5")
        .c(container("inference", None))
        .started(None)
        .build();
    let mut case = Case::new(vec![pod]);
    case.compute = samples(&[("p1", "inference", 90.0)]);
    let out = case.run();
    assert_eq!(out.action, Action::None);
    assert!(
        out.reasons
            .iter()
            .any(|r| r.contains("no status.startTime"))
    );
}

#[test]
fn terminating_pods_are_ineligible() {
    let mut b = PodB::new("p1")
        .fraction("0.5")
        .c(container("inference", None));
    b.terminating = true;
    let mut case = Case::new(vec![b.build()]);
    case.compute = samples(&[("p1", "inference", 90.0)]);
    assert_eq!(case.run().action, Action::None);
}

#[test]
fn containers_missing_a_gpu_allocation_are_excluded_and_omitted() {
    // sidecar "proxy" has no GPU: its samples are ignored and it gets no recommendation.
    let pod = PodB::new("p1")
        .fraction("0.5")
        .c(container("inference", None))
        .c(container("proxy", None))
        .build();
    let mut case = Case::new(vec![pod]);
    case.compute = samples(&[("p1", "inference", 70.0), ("p1", "proxy", 500.0)]);
    let out = case.run();
    assert!(
        approx(recommended(&out, "inference"), 0.84),
        "proxy usage not aggregated"
    );
    assert!(
        !out.recommendation
            .as_ref()
            .unwrap()
            .containers
            .contains_key("proxy")
    );
    assert_eq!(out.containers["proxy"].current, None);
    assert_eq!(out.containers["proxy"].recommended, None);
    assert!(
        out.reasons
            .iter()
            .any(|r| r.contains("proxy has no current GPU allocation"))
    );
}

#[test]
fn empty_scope_means_regular_and_restartable_init_containers() {
    let mut init_gpu = sidecar("warmup");
    init_gpu.resources = container("x", Some("1")).resources;
    let mut plain_init = container("setup", Some("1"));
    plain_init.restart_policy = None;
    let pod = PodB::new("p1")
        .c(container("a", Some("1")))
        .init(init_gpu)
        .init(plain_init)
        .build();
    let mut case = Case::new(vec![pod]);
    case.compute = samples(&[
        ("p1", "a", 150.0),
        ("p1", "warmup", 150.0),
        ("p1", "setup", 150.0),
    ]);
    let out = case.run();
    let keys: Vec<&String> = out.containers.keys().collect();
    assert_eq!(
        keys,
        vec!["a", "warmup"],
        "non-restartable init container excluded"
    );
    assert!(approx(
        recommended(&out, "a") + recommended(&out, "warmup"),
        3.0 * 1.2
    ));
}

#[test]
fn scope_containers_limits_baseline_metrics_aggregation_and_redistribution() {
    let pod = PodB::new("p1")
        .c(container("inference", Some("1")))
        .c(container("other", Some("1")))
        .build();
    let mut case = Case::new(vec![pod]);
    case.policy.scope.containers = vec!["inference".into()];
    case.compute = samples(&[("p1", "inference", 150.0), ("p1", "other", 900.0)]);
    let out = case.run();
    assert_eq!(out.containers.keys().collect::<Vec<_>>(), vec!["inference"]);
    assert!(approx(recommended(&out, "inference"), 1.8));
    assert_eq!(out.baseline, Some(gm(&[("inference", 1.0)])));
}

#[test]
fn narrowing_scope_removes_excluded_baseline_and_recommendation_entries() {
    let pod = PodB::new("p1")
        .c(container("a", Some("2")))
        .c(container("b", Some("2")))
        .build();
    let mut case = Case::new(vec![pod]);
    case.template = template_of(
        &PodB::new("t")
            .c(container("a", Some("1")))
            .c(container("b", Some("1")))
            .build(),
    );
    case.baseline = Some(gm(&[("a", 1.0), ("b", 1.0)]));
    case.previous = Some(rec(&[("a", 2.0), ("b", 2.0)], Some(Signal::Compute)));
    case.policy.scope.containers = vec!["a".into()];
    case.compute = samples(&[("p1", "a", 100.0)]);
    case.memory = samples(&[("p1", "a", 80.0)]);
    let out = case.run();
    assert_eq!(out.baseline, Some(gm(&[("a", 1.0)])));
    let r = out.recommendation.expect("reused");
    assert_eq!(r.containers.keys().collect::<Vec<_>>(), vec!["a"]);
}

#[test]
fn baseline_is_the_live_allocation_before_the_first_upsize_per_container() {
    let pod = PodB::new("p1")
        .c(container("a", Some("1")))
        .c(container("b", Some("2")))
        .build();
    let mut case = Case::new(vec![pod]);
    case.compute = samples(&[("p1", "a", 200.0), ("p1", "b", 200.0)]);
    let out = case.run();
    assert_eq!(out.action, Action::Upsize);
    assert_eq!(out.baseline, Some(gm(&[("a", 1.0), ("b", 2.0)])));
    // The next upsize keeps the recorded baseline.
    case.baseline = out.baseline.clone();
    case.previous = out.recommendation.clone();
    case.pods = vec![
        PodB::new("p1")
            .c(container("a", Some("2")))
            .c(container("b", Some("4")))
            .build(),
    ];
    assert_eq!(case.run().baseline, Some(gm(&[("a", 1.0), ("b", 2.0)])));
}

#[test]
fn changing_the_template_gpu_allocation_resets_baseline_and_recommendation() {
    let pod = PodB::new("p1").c(container("a", Some("2"))).build();
    let mut case = Case::new(vec![pod]);
    case.baseline = Some(gm(&[("a", 1.0)]));
    case.previous = Some(rec(&[("a", 1.5)], Some(Signal::Compute)));
    // The template now asks for 2 GPUs itself.
    case.compute = samples(&[("p1", "a", 100.0)]);
    case.memory = samples(&[("p1", "a", 50.0)]);
    let out = case.run();
    assert!(out.reasons.iter().any(|r| r.contains("reset")));
    assert_eq!(out.action, Action::None);
    assert!(out.recommendation.is_none());
    assert!(out.baseline.is_none());
}

/// A pod (or template) with containers `a` and `b` holding whole GPUs (`None`: no GPU).
fn ab_pod(name: &str, a: Option<&str>, b: Option<&str>) -> Pod {
    PodB::new(name)
        .c(container("a", a))
        .c(container("b", b))
        .build()
}

/// docs/design/gpu-engine.md#g7: the baseline is per container. A container without an entry —
/// added to the template, or brought in by a wider scope, after the first upsize — gets one from
/// its allocation before any upsize of it, so its `maxPercent` cap and its scale-back floor do
/// not follow its own upsizes (1 → 2 → 4).
#[test]
fn a_container_without_a_baseline_entry_gets_one_before_any_upsize_of_it() {
    // `a` was upsized to 2 before `b` (1 GPU) was added; both run hot.
    let mut case = Case::new(vec![ab_pod("p1", Some("2"), Some("1"))]);
    case.template = template_of(&ab_pod("t", Some("1"), Some("1")));
    case.baseline = Some(gm(&[("a", 1.0)]));
    case.previous = Some(rec(&[("a", 2.0)], Some(Signal::Compute)));
    case.compute = samples(&[("p1", "a", 400.0), ("p1", "b", 400.0)]);
    let out = case.run();
    assert_eq!(out.action, Action::Upsize);
    assert_eq!(
        out.baseline,
        Some(gm(&[("a", 1.0), ("b", 1.0)])),
        "b's entry is its allocation before its first upsize"
    );
    let total = |o: &EngineOutput| o.recommendation.as_ref().unwrap().total();
    assert!(approx(total(&out), 4.0), "capped at 200 % of 1 + 1");

    // Next cycle, the pods run the upsized sizes: the cap is still 200 % of the baseline.
    let first = out.recommendation.clone().unwrap();
    case.baseline = out.baseline.clone();
    case.previous = Some(first.clone());
    case.pods = vec![ab_pod(
        "p2",
        Some(&format_gpu(first.containers["a"])),
        Some(&format_gpu(first.containers["b"])),
    )];
    case.compute = samples(&[("p2", "a", 800.0), ("p2", "b", 800.0)]);
    let out = case.run();
    assert!(
        approx(total(&out), 4.0),
        "no ratchet: {:?}",
        out.recommendation
    );
    assert_eq!(out.baseline, Some(gm(&[("a", 1.0), ("b", 1.0)])));

    // And the scale-back floor is the summed baseline, not b's upsized allocation.
    case.compute = samples(&[("p2", "a", 1.0), ("p2", "b", 1.0)]);
    case.memory = samples(&[("p2", "a", 1.0), ("p2", "b", 1.0)]);
    let out = case.run();
    assert_eq!(out.action, Action::ScaleBack);
    assert!(approx(total(&out), 2.0), "{:?}", out.recommendation);

    // A baseline recorded without b (older kerf) is completed from the template, whatever b runs.
    case.baseline = Some(gm(&[("a", 1.0)]));
    assert_eq!(case.run().baseline, Some(gm(&[("a", 1.0), ("b", 1.0)])));
}

/// docs/design/gpu-engine.md#g7: a container the baseline names that the template no longer
/// gives a GPU — removed from the template, or its GPU taken away — changes the template's own
/// GPU allocation: baseline and recommendation are reset. (Narrowing `scope.containers` of a
/// container still in the template only drops its entries.)
#[test]
fn a_template_whose_gpu_container_set_changed_resets_baseline_and_recommendation() {
    for template in [
        // b removed from the template
        PodB::new("t").c(container("a", Some("1"))).build(),
        // b no longer has a GPU
        ab_pod("t", Some("1"), None),
    ] {
        // The running pods still have the upsized a and b.
        let mut case = Case::new(vec![ab_pod("p1", Some("2"), Some("2"))]);
        case.template = template_of(&template);
        case.baseline = Some(gm(&[("a", 1.0), ("b", 1.0)]));
        case.previous = Some(rec(&[("a", 2.0), ("b", 2.0)], Some(Signal::Compute)));
        case.compute = samples(&[("p1", "a", 100.0), ("p1", "b", 100.0)]);
        case.memory = samples(&[("p1", "a", 50.0), ("p1", "b", 50.0)]);
        let out = case.run();
        assert!(
            out.reasons.iter().any(|r| r.contains("reset")),
            "{:#?}",
            out.reasons
        );
        assert_eq!(out.baseline, None);
        assert_eq!(out.recommendation, None);
    }
}

#[test]
fn the_higher_of_compute_and_memory_wins() {
    let mut case = Case::new(vec![half_gpu_pod("p1")]);
    case.compute = samples(&[("p1", "inference", 70.0)]); // 0.84
    case.memory = samples(&[("p1", "inference", 150.0)]); // 0.75 → 0.9
    let out = case.run();
    assert_eq!(out.driving_metric, Some(Signal::Memory));
    assert!(approx(recommended(&out, "inference"), 0.9));
}

/// A workload already upsized to 0.9 (baseline 0.5) by `driver`.
fn upsized_case(driver: Option<Signal>) -> Case {
    let pod = PodB::new("p1")
        .fraction("0.9")
        .c(container("inference", None))
        .build();
    let mut case = Case::new(vec![pod]);
    case.template = template_of(&half_gpu_pod("t"));
    case.baseline = Some(gm(&[("inference", 0.5)]));
    case.previous = Some(rec(&[("inference", 0.9)], driver));
    case
}

#[test]
fn higher_candidate_is_accepted_and_drives() {
    let mut case = upsized_case(Some(Signal::Compute));
    case.memory = samples(&[("p1", "inference", 130.0)]); // 1.17 > 1.125 → 1.404, cap 1.0
    case.compute = samples(&[("p1", "inference", 30.0)]);
    let out = case.run();
    assert_eq!(out.driving_metric, Some(Signal::Memory));
    assert!(approx(recommended(&out, "inference"), 1.0));
}

#[test]
fn lower_recommendation_accepted_when_driven_by_the_same_metric() {
    let mut case = upsized_case(Some(Signal::Compute));
    case.compute = samples(&[("p1", "inference", 40.0)]); // 0.4 < 0.54 → 0.48 floored 0.5
    case.memory = samples(&[("p1", "inference", 70.0)]); // 0.63 of 0.9 = 70 %: no scale-back
    let out = case.run();
    assert_eq!(out.action, Action::ScaleBack);
    assert_eq!(out.driving_metric, Some(Signal::Compute));
    assert!(approx(recommended(&out, "inference"), 0.5));
}

#[test]
fn lower_cross_metric_recommendation_accepted_only_if_driver_also_emits() {
    let mut case = upsized_case(Some(Signal::Compute));
    // memory emits a scale-back of 0.6; compute (the driver) is silent → rejected, reused.
    case.compute = samples(&[("p1", "inference", 60.0)]);
    case.memory = samples(&[("p1", "inference", 50.0)]); // 0.45 → 0.54 → floor 0.5? 0.54
    let out = case.run();
    assert_eq!(out.action, Action::Reuse);
    assert!(
        out.reasons
            .iter()
            .any(|r| r.contains("driving metric compute emitted no candidate"))
    );
    // Now compute emits 0.5 (≤ memory's 0.54): memory's lower total is accepted and drives.
    case.compute = samples(&[("p1", "inference", 20.0)]);
    let out = case.run();
    assert_eq!(out.action, Action::ScaleBack);
    assert_eq!(out.driving_metric, Some(Signal::Memory));
    assert!(approx(recommended(&out, "inference"), 0.54));
}

#[test]
fn equal_lower_totals_keep_the_existing_driving_metric() {
    let mut case = upsized_case(Some(Signal::Compute));
    // Both floor at the 0.5 baseline: same lower total → driver stays compute.
    case.compute = samples(&[("p1", "inference", 10.0)]);
    case.memory = samples(&[("p1", "inference", 10.0)]);
    let out = case.run();
    assert_eq!(out.driving_metric, Some(Signal::Compute));
    case.previous = Some(rec(&[("inference", 0.9)], Some(Signal::Memory)));
    assert_eq!(case.run().driving_metric, Some(Signal::Memory));
}

#[test]
fn equal_total_keeps_driver_even_from_the_other_metric() {
    let mut case = upsized_case(Some(Signal::Compute));
    case.previous = Some(rec(&[("inference", 1.0)], Some(Signal::Compute)));
    case.memory = samples(&[("p1", "inference", 140.0)]); // 1.26 → cap 1.0 = R
    case.compute = samples(&[("p1", "inference", 70.0)]);
    let out = case.run();
    assert_eq!(out.driving_metric, Some(Signal::Compute));
}

#[test]
fn legacy_recommendation_without_driver_is_never_lowered() {
    let mut case = upsized_case(None);
    case.compute = samples(&[("p1", "inference", 10.0)]);
    case.memory = samples(&[("p1", "inference", 10.0)]);
    let out = case.run();
    assert_eq!(out.action, Action::Reuse);
    assert!(approx(recommended(&out, "inference"), 0.9));
    assert_eq!(out.driving_metric, None);
}

#[test]
fn legacy_recommendation_gets_a_driver_from_a_non_decreasing_recommendation() {
    let mut case = upsized_case(None);
    case.compute = samples(&[("p1", "inference", 120.0)]); // 1.2 > 1.125 → cap 1.0 ≥ 0.9
    let out = case.run();
    assert_eq!(out.action, Action::Upsize);
    assert_eq!(out.driving_metric, Some(Signal::Compute));
}

#[test]
fn redistribution_is_proportional_to_current_allocations() {
    let pod = PodB::new("p1")
        .c(container("a", Some("1")))
        .c(container("b", Some("3")))
        .build();
    let mut case = Case::new(vec![pod]);
    case.compute = samples(&[("p1", "a", 300.0), ("p1", "b", 300.0)]); // 6 > 5 → 7.2
    let out = case.run();
    assert!(approx(recommended(&out, "a"), 1.8));
    assert!(approx(recommended(&out, "b"), 5.4));
}

#[test]
fn previous_recommendation_reused_when_nothing_accepted_and_allocation_differs_from_baseline() {
    let mut case = upsized_case(Some(Signal::Compute));
    case.compute = samples(&[("p1", "inference", 70.0)]); // 0.7 of 0.9: neither up nor back
    case.memory = samples(&[("p1", "inference", 70.0)]);
    let out = case.run();
    assert_eq!(out.action, Action::Reuse);
    assert!(approx(recommended(&out, "inference"), 0.9));
}

#[test]
fn nothing_emitted_when_nothing_accepted_and_allocation_equals_baseline() {
    let mut case = upsized_case(Some(Signal::Compute));
    case.pods = vec![half_gpu_pod("p1")];
    case.compute = samples(&[("p1", "inference", 50.0)]); // 0.5 of 0.5 = 100 %: no change
    let out = case.run();
    assert_eq!(out.action, Action::None);
    assert!(out.recommendation.is_none());
}

#[test]
fn unchanged_recommendation_keeps_its_timestamp() {
    let mut case = upsized_case(Some(Signal::Compute));
    case.previous = Some(rec(&[("inference", 0.84)], Some(Signal::Compute)));
    case.pods = vec![half_gpu_pod("p1")];
    case.compute = samples(&[("p1", "inference", 70.0)]);
    let out = case.run();
    assert_eq!(
        out.recommendation.unwrap().updated_at,
        case.previous.unwrap().updated_at
    );
}

#[test]
fn multi_policy_override_limits_the_engine_to_won_containers() {
    let pod = PodB::new("p1")
        .c(container("a", Some("1")))
        .c(container("b", Some("1")))
        .build();
    let mut case = Case::new(vec![pod]);
    case.containers_override = Some(BTreeSet::from(["b".to_string()]));
    case.compute = samples(&[("p1", "a", 300.0), ("p1", "b", 150.0)]);
    let out = case.run();
    assert_eq!(out.containers.keys().collect::<Vec<_>>(), vec!["b"]);
    assert!(approx(recommended(&out, "b"), 1.8));
}

// ---- Properties ----------------------------------------------------------------------------

fn arb_case() -> impl Strategy<Value = (Vec<(f64, f64)>, f64, f64, bool, Option<u8>)> {
    (
        prop::collection::vec((1.0f64..400.0, 1.0f64..400.0), 1..4),
        100.0f64..400.0,
        0.0f64..100.0,
        any::<bool>(),
        prop::option::of(0u8..3),
    )
}

fn build_case(
    pods: &[(f64, f64)],
    max_percent: f64,
    headroom: f64,
    upsized: bool,
    driver: Option<u8>,
) -> Case {
    let alloc = if upsized { "0.9" } else { "0.5" };
    let built: Vec<Pod> = (0..pods.len())
        .map(|i| {
            PodB::new(&format!("p{i}"))
                .fraction(alloc)
                .c(container("inference", None))
                .build()
        })
        .collect();
    let mut case = Case::new(built);
    case.template = template_of(&half_gpu_pod("t"));
    for s in [
        &mut case.policy.metrics.compute,
        &mut case.policy.metrics.memory,
    ] {
        s.upsize.max_percent = max_percent;
        s.upsize.headroom_percent = headroom;
        s.scale_back.headroom_percent = headroom;
    }
    let names: Vec<String> = (0..pods.len()).map(|i| format!("p{i}")).collect();
    case.compute = names
        .iter()
        .zip(pods)
        .map(|(n, (c, _))| ((n.clone(), "inference".into()), flat(*c)))
        .collect();
    case.memory = names
        .iter()
        .zip(pods)
        .map(|(n, (_, m))| ((n.clone(), "inference".into()), flat(*m)))
        .collect();
    if upsized {
        case.baseline = Some(gm(&[("inference", 0.5)]));
        let d = match driver {
            Some(0) => Some(Signal::Compute),
            Some(1) => Some(Signal::Memory),
            _ => None,
        };
        case.previous = Some(rec(&[("inference", 0.9)], d));
    }
    case
}

/// Runs `property` over `cases` inputs of `strategy` (saved regressions first, as `proptest!`
/// does). The property returns whether the input reached the branch it checks; returns how many
/// did, of how many inputs, so a property asserting only inside a branch shows it was exercised.
fn run_counting<S: Strategy>(
    cases: u32,
    strategy: S,
    property: impl Fn(S::Value) -> Result<bool, TestCaseError>,
) -> (u32, u32) {
    let counts = std::cell::Cell::new((0u32, 0u32));
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases,
        source_file: Some(file!()),
        ..ProptestConfig::default()
    });
    let result = runner.run(&strategy, |value| {
        let reached = property(value)?;
        let (r, n) = counts.get();
        counts.set((r + u32::from(reached), n + 1));
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    counts.get()
}

/// Asserts that at least `min_percent` % of the inputs reached the checked branch.
fn assert_reached((reached, total): (u32, u32), min_percent: u32, branch: &str) {
    eprintln!("{reached} of {total} inputs reached {branch}");
    assert!(
        reached * 100 >= total * min_percent,
        "only {reached} of {total} inputs reached {branch} (want at least {min_percent} %)"
    );
}

/// What docs/design/gpu-engine.md#g5 to #g8 say for a `build_case` input, computed directly from
/// the rules (not by the engine): the action, the driving metric and the recommended total.
fn expected_for_case(
    pods: &[(f64, f64)],
    max_percent: f64,
    headroom: f64,
    upsized: bool,
    driver: Option<u8>,
) -> (Action, Option<Signal>, Option<f64>) {
    let same = |a: f64, b: f64| (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0);
    // Every pod: one container with the same fraction; template and baseline 0.5.
    let alloc = if upsized { 0.9 } else { 0.5 };
    let baseline = 0.5;
    let previous = upsized.then(|| {
        let d = match driver {
            Some(0) => Some(Signal::Compute),
            Some(1) => Some(Signal::Memory),
            _ => None,
        };
        (0.9, d)
    });
    // G2: compute is fullGPU (percent of a GPU), memory currentAllocation (percent of alloc).
    let usage = |signal: Signal| -> Vec<f64> {
        pods.iter()
            .map(|&(c, m)| match signal {
                Signal::Compute => c / 100.0,
                Signal::Memory => m / 100.0 * alloc,
            })
            .collect()
    };
    let mut candidates: Vec<(Signal, Action, f64)> = Vec::new();
    for signal in Signal::BOTH {
        let u = usage(signal);
        let hottest = u.iter().copied().fold(f64::MIN, f64::max);
        // G5: some pod above 125 % of its allocation; hottest + headroom, capped at
        // max_percent of the baseline (the live allocation before any upsize).
        if u.iter().any(|&v| v > alloc * 1.25) {
            let total = (hottest * (1.0 + headroom / 100.0)).min(baseline * max_percent / 100.0);
            candidates.push((signal, Action::Upsize, total));
            continue;
        }
        // G6: only above a recorded baseline; every pod below 60 %; floored at the baseline.
        if upsized && alloc > baseline && u.iter().all(|&v| v < alloc * 0.6) {
            let total = (hottest * (1.0 + headroom / 100.0)).max(baseline);
            candidates.push((signal, Action::ScaleBack, total));
        }
    }
    // G8: W is the higher candidate (on equal totals, the existing driver's).
    let driver = previous.and_then(|(_, d)| d);
    let mut winner: Option<(Signal, Action, f64)> = None;
    for c in &candidates {
        winner = match winner {
            None => Some(*c),
            Some(w) if c.2 > w.2 && !same(c.2, w.2) => Some(*c),
            Some(w) if same(c.2, w.2) && Some(c.0) == driver && Some(w.0) != driver => Some(*c),
            w => w,
        };
    }
    let accepted = match (winner, previous) {
        (None, _) => None,
        (Some(w), None) => Some((w, w.0)),
        (Some(w), Some((r, None))) => (w.2 > r || same(w.2, r)).then_some((w, w.0)),
        (Some(w), Some((r, Some(d)))) if same(w.2, r) => Some((w, d)),
        (Some(w), Some((r, Some(_)))) if w.2 > r => Some((w, w.0)),
        (Some(w), Some((_, Some(d)))) if w.0 == d => Some((w, d)),
        (Some(w), Some((_, Some(d)))) => candidates
            .iter()
            .find(|c| c.0 == d)
            .map(|dc| (w, if same(dc.2, w.2) { d } else { w.0 })),
    };
    match (accepted, previous) {
        (Some(((_, action, total), drive)), _) => (action, Some(drive), Some(total)),
        // Nothing accepted: the pods (0.9) differ from the baseline (0.5), so R is reused.
        (None, Some((r, d))) => (Action::Reuse, d, Some(r)),
        (None, None) => (Action::None, None, None),
    }
}

/// Runs `build_case` on `cases` inputs of `strategy` (`upsized` overrides the input's flag when
/// set) and `check(max_percent, total)` on the recommended total of those whose action is
/// `action`; asserts that at least `min_percent` % of the inputs got there.
fn check_total_of(
    action: Action,
    min_percent: u32,
    cases: u32,
    strategy: impl Strategy<Value = (Vec<(f64, f64)>, f64, f64, bool, Option<u8>)>,
    upsized: Option<bool>,
    check: impl Fn(f64, f64) -> Result<(), TestCaseError>,
) {
    let reached = run_counting(
        cases,
        strategy,
        |(pods, max_percent, headroom, case_upsized, driver)| {
            let upsized = upsized.unwrap_or(case_upsized);
            let out = build_case(&pods, max_percent, headroom, upsized, driver).run();
            if out.action != action {
                return Ok(false);
            }
            check(max_percent, out.recommendation.unwrap().total())?;
            Ok(true)
        },
    );
    assert_reached(reached, min_percent, action.as_str());
}

#[test]
fn prop_upsize_never_exceeds_max_percent_of_baseline() {
    check_total_of(
        Action::Upsize,
        10,
        256,
        arb_case(),
        None,
        |max_percent, total| {
            prop_assert!(total <= 0.5 * max_percent / 100.0 + 1e-9, "{total} > cap");
            Ok(())
        },
    );
}

/// `arb_case` with three usage values in four below the scale-back threshold (60 % of 0.9 GPU):
/// with uniform values over 1..400 % the scale-back branch is almost never reached.
fn arb_low_usage_case() -> impl Strategy<Value = (Vec<(f64, f64)>, f64, f64, bool, Option<u8>)> {
    let usage = || prop_oneof![1 => 1.0f64..400.0, 3 => 1.0f64..54.0];
    (
        prop::collection::vec((usage(), usage()), 1..4),
        100.0f64..400.0,
        0.0f64..100.0,
        any::<bool>(),
        prop::option::of(0u8..3),
    )
}

#[test]
fn prop_scale_back_never_goes_below_baseline() {
    let strategy = arb_low_usage_case();
    check_total_of(
        Action::ScaleBack,
        2,
        512,
        strategy,
        Some(true),
        |_, total| {
            prop_assert!(total >= 0.5 - 1e-9, "{total} below the baseline 0.5");
            Ok(())
        },
    );
}

#[test]
fn prop_redistribution_sums_to_the_chosen_total() {
    let strategy = (0.1f64..4.0, 0.1f64..4.0, 50.0f64..400.0, 50.0f64..400.0);
    let reached = run_counting(256, strategy, |(a, b, ua, ub)| {
        let pod = PodB::new("p1")
            .c(container("a", Some(&format!("{a}"))))
            .c(container("b", Some(&format!("{b}"))))
            .build();
        let mut case = Case::new(vec![pod]);
        case.compute = samples(&[("p1", "a", ua), ("p1", "b", ub)]);
        let out = case.run();
        if out.action != Action::Upsize {
            return Ok(false);
        }
        let r = out.recommendation.unwrap();
        let hot = (ua + ub) / 100.0 * 1.2;
        let cap = (a + b) * 2.0;
        prop_assert!((r.total() - hot.min(cap)).abs() < 1e-9);
        prop_assert!((r.containers["a"] / r.containers["b"] - a / b).abs() < 1e-9);
        Ok(true)
    });
    assert_reached(reached, 10, "an upsize");
}

#[test]
fn prop_legacy_recommendation_is_never_lowered() {
    let reached = run_counting(256, arb_case(), |(pods, max_percent, headroom, _u, _d)| {
        let out = build_case(&pods, max_percent, headroom, true, None).run();
        let total = out.recommendation.map(|r| r.total());
        prop_assert!(
            total.is_some_and(|t| t >= 0.9 - 1e-9),
            "legacy 0.9 lowered to {total:?}"
        );
        // Reached: the same recommendation with a driver would have been lowered.
        Ok([Some(0), Some(1)].into_iter().any(|d| {
            build_case(&pods, max_percent, headroom, true, d)
                .run()
                .recommendation
                .is_some_and(|r| r.total() < 0.9 - 1e-9)
        }))
    });
    assert_reached(
        reached,
        10,
        "a candidate that would lower a recommendation with a driver",
    );
}

/// The engine is a function of its input, and that function is the one the design states:
/// two independently built copies of a case give the same output, equal to `expected_for_case`.
#[test]
fn prop_same_input_same_output_as_the_design_rules() {
    let reached = run_counting(
        512,
        arb_case(),
        |(pods, max_percent, headroom, upsized, driver)| {
            let out = build_case(&pods, max_percent, headroom, upsized, driver).run();
            let again = build_case(&pods, max_percent, headroom, upsized, driver).run();
            prop_assert_eq!(&out, &again);
            let (action, driving, total) =
                expected_for_case(&pods, max_percent, headroom, upsized, driver);
            let got = out.recommendation.as_ref().map(|r| r.total());
            prop_assert_eq!(
                (out.action, out.driving_metric),
                (action, driving),
                "{:?}",
                out.reasons
            );
            prop_assert!(
                match (got, total) {
                    (Some(g), Some(t)) => (g - t).abs() <= 1e-9 * t.max(1.0),
                    (g, t) => g == t,
                },
                "recommended {got:?}, the rules say {total:?}: {:?}",
                out.reasons
            );
            Ok(action != Action::None)
        },
    );
    assert_reached(reached, 50, "a recommendation");
}

// ---- docs/design/gpu-engine.md#g13: no samples is said, never "no condition met" -----------

#[test]
fn pods_without_samples_are_counted_per_signal_instead_of_no_condition_met() {
    let mut case = Case::new(vec![half_gpu_pod("a"), half_gpu_pod("b")]);
    // Compute: pod a has samples, b none; memory: nothing at all.
    case.compute = samples(&[("a", "inference", 20.0)]);
    let out = case.run();
    assert_eq!(out.action, Action::None);
    let counts: Vec<(Signal, usize, usize)> = out
        .missing_samples
        .iter()
        .map(|m| (m.signal, m.missing, m.total))
        .collect();
    assert_eq!(counts, [(Signal::Compute, 1, 2), (Signal::Memory, 2, 2)]);
    assert_eq!(out.missing_samples[1].metric, "mem");
    assert_eq!(out.missing_samples[1].window, "10m");
    assert!(
        !out.reasons
            .iter()
            .any(|r| r.contains("no upsize or scale-back")),
        "{:?}",
        out.reasons
    );
    // Every pod read: "no condition met" is true again, and nothing is missing.
    case.compute = samples(&[("a", "inference", 20.0), ("b", "inference", 20.0)]);
    case.memory = samples(&[("a", "inference", 20.0), ("b", "inference", 20.0)]);
    let out = case.run();
    assert!(out.missing_samples.is_empty());
    assert!(
        out.reasons
            .iter()
            .any(|r| r == "no upsize or scale-back condition met"),
        "{:?}",
        out.reasons
    );
}

/// Samples older than the query's window are no samples.
#[test]
fn samples_only_before_the_window_count_as_missing() {
    let mut case = Case::new(vec![half_gpu_pod("a")]);
    let old: Vec<(i64, f64)> = flat(20.0).into_iter().map(|(t, v)| (t - 3600, v)).collect();
    case.compute = [(("a".to_string(), "inference".to_string()), old)].into();
    case.memory = samples(&[("a", "inference", 20.0)]);
    let out = case.run();
    assert_eq!(out.missing_samples.len(), 1);
    assert_eq!(out.missing_samples[0].signal, Signal::Compute);
}

/// g2/g3 as the charts read them: per timestamp the sum over the containers of the
/// allocation with a series (value/100 × allocation for `currentAllocation`), inside
/// (from, to], in time order; a container without an allocation adds nothing.
#[test]
fn g3_pod_totals_sum_the_allocated_containers_per_timestamp_inside_the_window() {
    let alloc = gm(&[("a", 0.5), ("b", 0.25)]);
    let series: BTreeMap<&str, Vec<(i64, f64)>> = BTreeMap::from([
        ("a", vec![(10, 40.0), (20, 80.0), (30, f64::NAN)]),
        // Unsorted on purpose: the totals come out in time order anyway.
        ("b", vec![(30, 100.0), (20, 20.0)]),
        ("no-allocation", vec![(20, 100.0)]),
    ]);
    let mut got = Vec::new();
    pod_totals(
        &alloc,
        |c| series.get(c).map(Vec::as_slice),
        Interpretation::CurrentAllocation,
        (10, 30),
        |t, v| got.push((t, v)),
    );
    // t=10 is outside (from, to]; t=20: 0.8 × 0.5 + 0.2 × 0.25; t=30: a's NaN is skipped.
    assert_eq!(got, vec![(20, 0.4 + 0.05), (30, 0.25)]);
    let mut full = Vec::new();
    pod_totals(
        &alloc,
        |c| series.get(c).map(Vec::as_slice),
        Interpretation::FullGpu,
        (i64::MIN, i64::MAX),
        |t, v| full.push((t, v)),
    );
    assert_eq!(full, vec![(10, 0.4), (20, 0.8 + 0.2), (30, 1.0)]);
}
