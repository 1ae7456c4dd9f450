//! One test per rule of docs/design/kai-admission.md.

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde_json::{Value, json};

use super::*;

#[path = "../../../../tests/support/kai_oracle.rs"]
mod kai_oracle;
use crate::model::{GpuMap, GpuRecommendation, PolicyId, ResourceRequests};
use kerf_api::{Enablement, GpuEnablement, KaiStrategy, OverrideScheduler, StrategyView, UpDown};

fn kai() -> KaiSettings {
    KaiSettings::default()
}

fn rec(pairs: &[(&str, f64)]) -> GpuRecommendation {
    GpuRecommendation {
        containers: pairs.iter().map(|(c, v)| (c.to_string(), *v)).collect(),
        driving_metric: None,
        policy: None,
        updated_at: None,
        by_policy: Default::default(),
    }
}

fn state(pairs: &[(&str, f64)]) -> WorkloadState {
    WorkloadState {
        gpu: Some(rec(pairs)),
        policy: Some(PolicyId::parse("GpuReactivePolicy/ml/train").unwrap()),
        ..Default::default()
    }
}

fn pod(annotations: Value, containers: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ml", "annotations": annotations},
        "spec": {"containers": containers}
    })
}

fn gpu_container(name: &str, n: u32) -> Value {
    json!({"name": name, "image": "x", "resources": {"requests": {"nvidia.com/gpu": n.to_string()}, "limits": {"nvidia.com/gpu": n.to_string()}}})
}

/// The patch as the JSON array the webhook sends.
fn ops(m: &Mutation) -> Value {
    serde_json::to_value(&m.patch).unwrap()
}

/// `doc` with the mutation's patch applied by json-patch (which checks the patch is valid RFC
/// 6902 and applies to it).
fn applied(doc: &Value, m: &Mutation) -> Value {
    let patch: json_patch::Patch = serde_json::from_value(ops(m)).expect("valid RFC 6902");
    let mut doc = doc.clone();
    json_patch::patch(&mut doc, &patch.0).expect("patch applies");
    doc
}

/// Applies the mutation's patch to the original (proves the patch is valid and equals the
/// desired object the builder drafted) and checks that a second invocation yields no patch.
fn run(p: &Value, s: &WorkloadState) -> Value {
    let m = mutate_pod(p, s, &kai()).expect("mutation builds");
    let doc = applied(p, &m);
    let skeleton = pod_skeleton(p).unwrap();
    let settings = kai();
    let (desired, _) = desired_pod(&skeleton, s, &settings).unwrap();
    assert_eq!(
        pod_skeleton(&doc).unwrap(),
        desired,
        "patch result equals the desired state"
    );
    let again = mutate_pod(&doc, s, &kai()).expect("second mutation builds");
    assert!(
        again.patch.is_empty(),
        "reinvocation must be a no-op, got {:?}",
        again.patch
    );
    doc
}

fn ann<'a>(p: &'a Value, k: &str) -> Option<&'a str> {
    p["metadata"]["annotations"].get(k).and_then(Value::as_str)
}

#[test]
fn rounding_removes_float_noise() {
    assert_eq!(ceil_hundredths(0.8400000001), 84);
    assert_eq!(ceil_hundredths(0.8399999999), 84);
    assert_eq!(ceil_hundredths(0.841), 85);
    assert_eq!(ceil_hundredths(0.1 + 0.2), 30);
    assert_eq!(
        GpuTarget::from_units(0.8400000001),
        Some(GpuTarget::Fraction {
            hundredths: 84,
            devices: 1
        })
    );
    // 2.0000000001 is 2 whole GPUs, not 3 devices.
    assert_eq!(
        GpuTarget::from_units(2.0000000001),
        Some(GpuTarget::Whole(2))
    );
    let out = run(
        &pod(json!({}), json!([gpu_container("main", 1)])),
        &state(&[("main", 0.8399999999)]),
    );
    assert_eq!(ann(&out, "gpu-fraction"), Some("0.84"));
}

#[test]
fn fraction_below_one_sets_gpu_fraction_annotation() {
    let out = run(
        &pod(json!({}), json!([gpu_container("main", 1)])),
        &state(&[("main", 0.333)]),
    );
    assert_eq!(ann(&out, "gpu-fraction"), Some("0.34"));
    assert_eq!(
        ann(&out, "gpu-fraction-container-name"),
        None,
        "first container needs no name"
    );
    assert_eq!(ann(&out, "gpu-fraction-num-devices"), None);
}

#[test]
fn fraction_is_at_least_one_hundredth() {
    let out = run(
        &pod(json!({}), json!([gpu_container("main", 1)])),
        &state(&[("main", 0.0001)]),
    );
    assert_eq!(ann(&out, "gpu-fraction"), Some("0.01"));
}

#[test]
fn fraction_removes_nvidia_gpu_from_requests_and_limits() {
    let out = run(
        &pod(json!({}), json!([gpu_container("main", 2)])),
        &state(&[("main", 0.5)]),
    );
    let res = &out["spec"]["containers"][0]["resources"];
    assert!(res["requests"].get("nvidia.com/gpu").is_none());
    assert!(res["limits"].get("nvidia.com/gpu").is_none());
}

#[test]
fn fraction_names_container_when_not_first() {
    let containers = json!([{"name": "sidecar", "image": "envoy"}, gpu_container("trainer", 1)]);
    let out = run(&pod(json!({}), containers), &state(&[("trainer", 0.25)]));
    assert_eq!(ann(&out, "gpu-fraction"), Some("0.25"));
    assert_eq!(ann(&out, "gpu-fraction-container-name"), Some("trainer"));
}

#[test]
fn whole_gpus_when_per_device_share_at_least_0_995() {
    let out = run(
        &pod(
            json!({"gpu-fraction": "0.5"}),
            json!([{"name": "main", "image": "x"}]),
        ),
        &state(&[("main", 1.99)]),
    );
    let res = &out["spec"]["containers"][0]["resources"];
    assert_eq!(res["requests"]["nvidia.com/gpu"], "2");
    assert_eq!(res["limits"]["nvidia.com/gpu"], "2");
    assert_eq!(
        ann(&out, "gpu-fraction"),
        None,
        "fraction annotations removed"
    );
    assert_eq!(ann(&out, "gpu-fraction-num-devices"), None);
}

#[test]
fn fraction_over_devices_when_share_below_0_995() {
    let out = run(
        &pod(json!({}), json!([gpu_container("main", 1)])),
        &state(&[("main", 1.5)]),
    );
    assert_eq!(ann(&out, "gpu-fraction"), Some("0.75"));
    assert_eq!(ann(&out, "gpu-fraction-num-devices"), Some("2"));
    assert!(
        out["spec"]["containers"][0]["resources"]["limits"]
            .get("nvidia.com/gpu")
            .is_none()
    );
    // r/n rounds up: 2.5 / 3 = 0.8333 → 0.84.
    let out = run(
        &pod(json!({}), json!([gpu_container("main", 1)])),
        &state(&[("main", 2.5)]),
    );
    assert_eq!(ann(&out, "gpu-fraction"), Some("0.84"));
    assert_eq!(ann(&out, "gpu-fraction-num-devices"), Some("3"));
}

#[test]
fn exactly_one_gpu_is_whole() {
    let out = run(
        &pod(json!({"gpu-fraction": "0.5"}), json!([{"name": "main"}])),
        &state(&[("main", 1.0)]),
    );
    assert_eq!(
        out["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"],
        "1"
    );
    assert_eq!(ann(&out, "gpu-fraction"), None);
}

#[test]
fn kai_annotations_switch_scheduler_and_set_queue() {
    let out = run(
        &pod(json!({"gpu-fraction": "0.5"}), json!([{"name": "main"}])),
        &state(&[("main", 0.7)]),
    );
    assert_eq!(out["spec"]["schedulerName"], "kai-scheduler");
    assert_eq!(
        out["metadata"]["labels"]["kai.scheduler/queue"],
        "kerf-gpu-queue"
    );
}

#[test]
fn override_scheduler_kai_sets_scheduler_for_whole_gpus() {
    let mut s = state(&[("main", 2.0)]);
    s.strategy = std::sync::Arc::new(StrategyView {
        enablement: Enablement {
            override_scheduler: Some(OverrideScheduler::Kai),
            ..Default::default()
        },
        kai: Some(KaiStrategy {
            queue: "team-a".into(),
            set_queue_when_specified: false,
        }),
        ..Default::default()
    });
    let out = run(&pod(json!({}), json!([gpu_container("main", 1)])), &s);
    assert_eq!(out["spec"]["schedulerName"], "kai-scheduler");
    assert_eq!(out["metadata"]["labels"]["kai.scheduler/queue"], "team-a");
}

#[test]
fn no_scheduler_override_without_kai_for_whole_gpus() {
    let out = run(
        &pod(json!({}), json!([gpu_container("main", 1)])),
        &state(&[("main", 2.0)]),
    );
    assert!(out["spec"].get("schedulerName").is_none());
    assert!(out["metadata"].get("labels").is_none());
}

#[test]
fn queue_label_kept_unless_set_queue_when_specified() {
    let mut p = pod(json!({"gpu-fraction": "0.5"}), json!([{"name": "main"}]));
    p["metadata"]["labels"] = json!({"kai.scheduler/queue": "mine"});
    let out = run(&p, &state(&[("main", 0.6)]));
    assert_eq!(out["metadata"]["labels"]["kai.scheduler/queue"], "mine");

    let mut s = state(&[("main", 0.6)]);
    std::sync::Arc::make_mut(&mut s.strategy).kai = Some(KaiStrategy {
        queue: "theirs".into(),
        set_queue_when_specified: true,
    });
    let out = run(&p, &s);
    assert_eq!(out["metadata"]["labels"]["kai.scheduler/queue"], "theirs");
}

fn updown(upsize: bool, downsize: bool) -> StrategyView {
    StrategyView {
        enablement: Enablement {
            gpu: Some(GpuEnablement {
                requests: UpDown { upsize, downsize },
            }),
            ..Default::default()
        },
        ..Default::default()
    }
}

#[test]
fn downsize_disabled_keeps_template_allocation() {
    let mut s = state(&[("main", 0.5)]);
    s.strategy = updown(true, false).into();
    s.template_gpu = GpuMap::from([("main".to_string(), 1.0)]);
    let p = pod(json!({}), json!([gpu_container("main", 1)]));
    let m = mutate_pod(&p, &s, &kai()).unwrap();
    assert!(m.patch.is_empty(), "no change: {:?}", m.patch);
    assert!(
        m.notes.iter().any(|n| n.contains("downsize not allowed")),
        "{:?}",
        m.notes
    );
}

#[test]
fn upsize_disabled_keeps_template_allocation() {
    let mut s = state(&[("main", 0.8)]);
    s.strategy = updown(false, true).into();
    s.template_gpu = GpuMap::from([("main".to_string(), 0.5)]);
    let p = pod(json!({"gpu-fraction": "0.5"}), json!([{"name": "main"}]));
    let out = run(&p, &s);
    assert_eq!(ann(&out, "gpu-fraction"), Some("0.5"));
    // Downsize still allowed.
    let mut s = state(&[("main", 0.3)]);
    s.strategy = updown(false, true).into();
    s.template_gpu = GpuMap::from([("main".to_string(), 0.5)]);
    assert_eq!(ann(&run(&p, &s), "gpu-fraction"), Some("0.3"));
}

/// docs/design/gpu-engine.md#g11: with several policies sharing the recommendation, each
/// container's upsize/downsize follow its own policy's strategy, not the main one's.
#[test]
fn upsize_and_downsize_follow_each_containers_policy_strategy() {
    let (a, b) = (
        PolicyId::parse("GpuReactivePolicy/ml/a").unwrap(),
        PolicyId::parse("GpuReactivePolicy/ml/b").unwrap(),
    );
    let mut s = state(&[("a", 2.0), ("b", 3.0)]);
    let part = |c: &str| crate::model::PolicyPart {
        containers: [c.to_string()].into(),
        ..Default::default()
    };
    s.gpu.as_mut().unwrap().by_policy = [(a.clone(), part("a")), (b.clone(), part("b"))].into();
    // The main strategy forbids upsizing; a's own allows it, b's forbids it too.
    s.strategy = updown(false, true).into();
    s.gpu_strategies = [
        (a, updown(true, true).into()),
        (b, updown(false, true).into()),
    ]
    .into();
    s.template_gpu = GpuMap::from([("a".to_string(), 1.0), ("b".to_string(), 1.0)]);
    let p = pod(
        json!({}),
        json!([gpu_container("a", 1), gpu_container("b", 1)]),
    );
    let out = run(&p, &s);
    let gpus =
        |i: usize| out["spec"]["containers"][i]["resources"]["limits"]["nvidia.com/gpu"].clone();
    assert_eq!(gpus(0), "2", "a upsized under its policy's strategy: {out}");
    assert_eq!(
        gpus(1),
        "1",
        "b kept: its policy's strategy forbids upsize: {out}"
    );
}

/// The patched pod as KAI's own validating webhook judges it ([`kai_oracle`]): `run` plus the
/// check that KAI accepts the result.
fn run_kai(p: &Value, s: &WorkloadState) -> Value {
    let out = run(p, s);
    kai_oracle::assert_kai_accepts_patched(p, &out);
    out
}

fn mutated(p: &Value) -> Value {
    serde_json::from_str(ann(p, "rightsizing.kubex.ai/mutated").expect("mutated annotation"))
        .unwrap()
}

/// docs/design/kai-admission.md#k4: KAI refuses a fraction beside any whole GPU, so two GPU
/// containers of which one would end fractional both get whole GPUs, each rounded up; the
/// recommendation stays as it was and the annotation says why.
#[test]
fn one_fraction_and_no_whole_gpus_beside_it() {
    let containers = json!([gpu_container("a", 2), gpu_container("b", 2)]);
    let p = pod(json!({}), containers);
    let s = state(&[("a", 1.8), ("b", 2.0)]);
    let out = run_kai(&p, &s);
    assert_eq!(ann(&out, "gpu-fraction"), None, "{out}");
    assert_eq!(ann(&out, "gpu-fraction-num-devices"), None);
    for i in 0..2 {
        assert_eq!(
            out["spec"]["containers"][i]["resources"]["limits"]["nvidia.com/gpu"],
            "2"
        );
    }
    let why = mutated(&out)["gpuShape"].as_str().unwrap().to_string();
    assert!(
        why.contains("KAI accepts one fractional container per pod")
            && why.contains("a gets 2 whole GPUs instead of 2x0.9"),
        "{why}"
    );

    // Two containers that would both be fractional: both whole, nothing fractional is left.
    let p = pod(
        json!({}),
        json!([gpu_container("a", 1), gpu_container("b", 1)]),
    );
    let out = run_kai(&p, &state(&[("a", 0.4), ("b", 0.6)]));
    assert_eq!(ann(&out, "gpu-fraction"), None);
    for i in 0..2 {
        assert_eq!(
            out["spec"]["containers"][i]["resources"]["limits"]["nvidia.com/gpu"],
            "1"
        );
    }
}

/// K4 counts init containers: a GPU sidecar keeping `nvidia.com/gpu: 2` leaves no room for a
/// fraction on the main container.
#[test]
fn a_gpu_sidecar_keeps_the_pod_on_whole_gpus() {
    let mut p = pod(json!({}), json!([gpu_container("main", 1)]));
    p["spec"]["initContainers"] = json!([{"name": "side", "restartPolicy": "Always",
        "resources": {"limits": {"nvidia.com/gpu": "2"}, "requests": {"nvidia.com/gpu": "2"}}}]);
    let out = run_kai(&p, &state(&[("main", 0.5), ("side", 2.0)]));
    assert_eq!(ann(&out, "gpu-fraction"), None, "{out}");
    assert_eq!(
        out["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"],
        "1"
    );
    assert_eq!(
        out["spec"]["initContainers"][0]["resources"]["limits"]["nvidia.com/gpu"],
        "2"
    );
}

/// K4 counts containers kerf does not size: one outside `scope.containers` holding a whole GPU
/// keeps the recommended container on whole GPUs.
#[test]
fn a_container_out_of_scope_holding_gpus_keeps_the_pod_on_whole_gpus() {
    let p = pod(
        json!({}),
        json!([gpu_container("main", 1), gpu_container("other", 1)]),
    );
    let out = run_kai(&p, &state(&[("main", 0.5)]));
    assert_eq!(ann(&out, "gpu-fraction"), None, "{out}");
    assert_eq!(
        out["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"],
        "1"
    );
    assert_eq!(
        out["spec"]["containers"][1]["resources"]["limits"]["nvidia.com/gpu"],
        "1"
    );
}

/// K4: when whole GPUs are the only shape KAI accepts and the strategy does not allow them
/// (upsize off), the pod's GPU setup is left as admitted, and the reason says so.
#[test]
fn whole_gpus_the_strategy_refuses_leave_the_pods_gpu_as_is() {
    let p = pod(
        json!({"gpu-fraction": "0.5"}),
        json!([{"name": "a"}, {"name": "b"}]),
    );
    let mut s = state(&[("a", 0.4), ("b", 0.4)]);
    s.template_gpu = GpuMap::from([("a".to_string(), 0.5), ("b".to_string(), 0.5)]);
    s.strategy = std::sync::Arc::new(updown(false, true));
    let m = mutate_pod(&p, &s, &kai()).unwrap();
    assert!(
        m.notes
            .iter()
            .any(|n| n.contains("whole GPUs for a are not allowed") && n.contains("left as is")),
        "{:?}",
        m.notes
    );
    let out = run_kai(&p, &s);
    assert_eq!(ann(&out, "gpu-fraction"), Some("0.5"));
    assert!(out["spec"]["containers"][1].get("resources").is_none());
}

/// KAI accepts `mps: "true"` only with a fraction: a pod leaving its fraction for whole GPUs
/// loses `mps`, and so does a pod without a fraction that kerf sends to KAI.
#[test]
fn mps_goes_with_the_fraction() {
    let p = pod(
        json!({"gpu-fraction": "0.5", "mps": "true"}),
        json!([{"name": "main"}]),
    );
    let out = run_kai(&p, &state(&[("main", 1.0)]));
    assert_eq!(ann(&out, "gpu-fraction"), None);
    assert_eq!(ann(&out, "mps"), None, "{out}");
    assert_eq!(mutated(&out)["mps"], "removed");

    let mut s = state(&[("main", 2.0)]);
    std::sync::Arc::make_mut(&mut s.strategy)
        .enablement
        .override_scheduler = Some(OverrideScheduler::Kai);
    let p = pod(json!({"mps": "true"}), json!([gpu_container("main", 1)]));
    let out = run_kai(&p, &s);
    assert_eq!(out["spec"]["schedulerName"], "kai-scheduler");
    assert_eq!(ann(&out, "mps"), None, "{out}");

    // A fraction that stays keeps its mps.
    let p = pod(
        json!({"gpu-fraction": "0.5", "mps": "true"}),
        json!([{"name": "main"}]),
    );
    let out = run_kai(&p, &state(&[("main", 0.7)]));
    assert_eq!(ann(&out, "mps"), Some("true"));
}

/// KAI's per-container GPU memory annotations ("NvFractions") share a GPU by memory, as
/// `gpu-memory` does: kerf never adds `gpu-fraction` to such a pod and says why.
#[test]
fn kerf_never_adds_a_fraction_to_pods_sharing_by_memory() {
    let p = pod(
        json!({"nvidia.com/container.main.gpu-memory.request": "4096"}),
        json!([gpu_container("main", 1)]),
    );
    let s = state(&[("main", 0.5)]);
    let m = mutate_pod(&p, &s, &kai()).unwrap();
    assert!(
        m.notes
            .iter()
            .any(|n| n.contains("per-container GPU memory") && n.contains("left as is")),
        "{:?}",
        m.notes
    );
    let out = run_kai(&p, &s);
    assert_eq!(ann(&out, "gpu-fraction"), None);
    assert_eq!(
        out["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"],
        "1"
    );
}

/// K5: the queue label key is GlobalConfiguration `kai.queueLabelKey` (KAI's
/// `global.queueLabelKey`), for reading and for writing.
#[test]
fn the_queue_label_key_is_kais_configured_one() {
    let settings = KaiSettings {
        queue_label_key: "runai/queue".into(),
        ..KaiSettings::default()
    };
    let p = pod(json!({"gpu-fraction": "0.5"}), json!([{"name": "main"}]));
    let m = mutate_pod(&p, &state(&[("main", 0.7)]), &settings).unwrap();
    let out = applied(&p, &m);
    assert_eq!(out["metadata"]["labels"]["runai/queue"], "kerf-gpu-queue");
    assert!(
        out["metadata"]["labels"]
            .get("kai.scheduler/queue")
            .is_none()
    );

    let mut p = p;
    p["metadata"]["labels"] = json!({"runai/queue": "mine"});
    let m = mutate_pod(&p, &state(&[("main", 0.7)]), &settings).unwrap();
    assert_eq!(applied(&p, &m)["metadata"]["labels"]["runai/queue"], "mine");
}

/// K5: KAI's pod grouper reads the top owner's queue label before the pod's, so with one on
/// the workload kerf sets none on the pod, even with `setQueueWhenSpecified`.
#[test]
fn an_owner_queue_label_wins_so_the_pod_gets_none() {
    let p = pod(json!({"gpu-fraction": "0.5"}), json!([{"name": "main"}]));
    let mut s = state(&[("main", 0.7)]);
    s.owner_queue = Some("team-a".into());
    std::sync::Arc::make_mut(&mut s.strategy).kai = Some(KaiStrategy {
        queue: "theirs".into(),
        set_queue_when_specified: true,
    });
    let out = run_kai(&p, &s);
    assert!(out["metadata"].get("labels").is_none(), "{out}");
    assert_eq!(out["spec"]["schedulerName"], "kai-scheduler");
}

#[test]
fn gpu_memory_pods_keep_their_gpu_setup() {
    let p = pod(json!({"gpu-memory": "4096"}), json!([{"name": "main"}]));
    let s = state(&[("main", 0.5)]);
    let m = mutate_pod(&p, &s, &kai()).unwrap();
    assert!(m.notes.iter().any(|n| n.contains("gpu-memory")));
    kai_oracle::assert_kai_accepts_patched(&p, &applied(&p, &m));
    // No GPU size (no gpu-fraction, no nvidia.com/gpu, gpu-memory kept): only the KAI
    // scheduler and queue a pod with KAI annotations gets (K5), and the record of it.
    assert_eq!(
        ops(&m),
        json!([
            {"op": "add", "path": "/metadata/annotations/rightsizing.kubex.ai~1mutated",
             "value": "{\"policy\":\"GpuReactivePolicy/ml/train\",\"queue\":\"kerf-gpu-queue\",\"schedulerName\":\"kai-scheduler\"}"},
            {"op": "add", "path": "/metadata/labels", "value": {"kai.scheduler/queue": "kerf-gpu-queue"}},
            {"op": "add", "path": "/spec/schedulerName", "value": "kai-scheduler"}
        ])
    );
    let out = run(&p, &s);
    assert_eq!(ann(&out, "gpu-memory"), Some("4096"));
    assert_eq!(out["spec"]["containers"], json!([{"name": "main"}]));
}

#[test]
fn missing_parent_maps_are_added() {
    let p = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "main"}]}});
    let out = run(&p, &state(&[("main", 0.5)]));
    assert_eq!(ann(&out, "gpu-fraction"), Some("0.5"));
    assert_eq!(
        out["metadata"]["labels"]["kai.scheduler/queue"],
        "kerf-gpu-queue"
    );
    let m = mutate_pod(&p, &state(&[("main", 0.5)]), &kai()).unwrap();
    let ops = ops(&m);
    assert!(
        ops.as_array().unwrap().iter().any(|op| op["op"] == "add"
            && op["path"] == "/metadata/annotations"
            && op["value"]["gpu-fraction"] == "0.5"),
        "{ops}"
    );
}

#[test]
fn patch_paths_escape_tilde_and_slash() {
    let p = pod(
        json!({"example.com/a~b": "keep"}),
        json!([{"name": "main"}]),
    );
    let m = mutate_pod(&p, &state(&[("main", 0.5)]), &kai()).unwrap();
    let ops = ops(&m);
    let paths: Vec<&str> = ops
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["path"].as_str().unwrap())
        .collect();
    assert!(
        paths.contains(&"/metadata/annotations/rightsizing.kubex.ai~1mutated"),
        "{paths:?}"
    );
    assert!(paths.contains(&"/metadata/labels"), "{paths:?}");
    let out = run(&p, &state(&[("main", 0.5)]));
    assert_eq!(ann(&out, "example.com/a~b"), Some("keep"));
}

#[test]
fn cpu_and_memory_requests_set_in_consistent_units() {
    let mut s = WorkloadState::default();
    s.resources.insert(
        "main".into(),
        ResourceRequests {
            cpu_millis: Some(700),
            memory_bytes: Some(512 << 20),
        },
    );
    s.resources.insert(
        "side".into(),
        ResourceRequests {
            cpu_millis: Some(1500),
            memory_bytes: Some(2 << 30),
        },
    );
    let p = pod(
        json!(null),
        json!([{"name": "main", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}, {"name": "side"}]),
    );
    let out = run(&p, &s);
    assert_eq!(
        out["spec"]["containers"][0]["resources"]["requests"]["cpu"],
        "700m"
    );
    assert_eq!(
        out["spec"]["containers"][0]["resources"]["requests"]["memory"],
        "512Mi"
    );
    assert_eq!(
        out["spec"]["containers"][1]["resources"]["requests"]["cpu"],
        "1500m"
    );
    assert_eq!(
        out["spec"]["containers"][1]["resources"]["requests"]["memory"],
        "2Gi"
    );
    assert_eq!(fmt_memory(1000), "1000");
    // Equivalent existing quantity: no rewrite.
    let p = pod(
        json!({}),
        json!([{"name": "main", "resources": {"requests": {"cpu": "0.7", "memory": "536870912"}}}]),
    );
    let mut s2 = s.clone();
    s2.resources.remove("side");
    assert!(mutate_pod(&p, &s2, &kai()).unwrap().patch.is_empty());
}

#[test]
fn request_capped_at_existing_limit() {
    let mut s = WorkloadState::default();
    s.resources.insert(
        "main".into(),
        ResourceRequests {
            cpu_millis: Some(3000),
            memory_bytes: None,
        },
    );
    let p = pod(
        json!({}),
        json!([{"name": "main", "resources": {"limits": {"cpu": "2"}}}]),
    );
    let out = run(&p, &s);
    assert_eq!(
        out["spec"]["containers"][0]["resources"]["requests"]["cpu"],
        "2000m"
    );
}

/// A change carrying limits (`RequestsAndLimits`) sets them with the requests: a Guaranteed pod
/// admitted smaller stays Guaranteed (docs/policies.md#limits).
#[test]
fn limits_the_change_carries_are_set_with_the_requests() {
    let mut s = WorkloadState::default();
    let both = ResourceRequests {
        cpu_millis: Some(2500),
        memory_bytes: Some(10 << 30),
    };
    s.resources.insert("main".into(), both.clone());
    s.limits.insert("main".into(), both);
    let p = pod(
        json!({}),
        json!([{"name": "main", "resources": {
            "requests": {"cpu": "4", "memory": "16Gi"},
            "limits": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"}}}]),
    );
    let out = run(&p, &s);
    let r = &out["spec"]["containers"][0]["resources"];
    assert_eq!(r["requests"], json!({"cpu": "2500m", "memory": "10Gi"}));
    assert_eq!(
        r["limits"],
        json!({"cpu": "2500m", "memory": "10Gi", "nvidia.com/gpu": "1"})
    );
    let qos = |r: &Value| {
        let cpu = |m: &Value| {
            crate::quantity::cpu_millis(&Quantity(m["cpu"].as_str().unwrap().into())).ok()
        };
        let mem = |m: &Value| {
            crate::quantity::memory_bytes(&Quantity(m["memory"].as_str().unwrap().into())).ok()
        };
        let pair = |m: &Value| ResourceRequests {
            cpu_millis: cpu(m),
            memory_bytes: mem(m),
        };
        crate::limits::qos_class(&[(pair(&r["requests"]), pair(&r["limits"]))])
    };
    assert_eq!(qos(r), "Guaranteed");
}

#[test]
fn init_container_requests_set_by_name() {
    let mut s = WorkloadState::default();
    s.resources.insert(
        "proxy".into(),
        ResourceRequests {
            cpu_millis: Some(100),
            memory_bytes: None,
        },
    );
    let mut p = pod(json!({}), json!([{"name": "main"}]));
    p["spec"]["initContainers"] = json!([{"name": "proxy", "restartPolicy": "Always"}]);
    let out = run(&p, &s);
    assert_eq!(
        out["spec"]["initContainers"][0]["resources"]["requests"]["cpu"],
        "100m"
    );
}

#[test]
fn mutated_annotation_lists_policy_and_changes() {
    let out = run(
        &pod(json!({}), json!([gpu_container("main", 1)])),
        &state(&[("main", 1.5)]),
    );
    let m: Value =
        serde_json::from_str(ann(&out, "rightsizing.kubex.ai/mutated").unwrap()).unwrap();
    assert_eq!(m["policy"], "GpuReactivePolicy/ml/train");
    assert_eq!(m["containers"]["main"]["gpu"], "2x0.75");
    assert_eq!(m["schedulerName"], "kai-scheduler");
}

#[test]
fn unchanged_pod_gets_no_patch_and_no_annotation() {
    let p = pod(json!({"gpu-fraction": "0.50"}), json!([{"name": "main"}]));
    let mut p2 = p.clone();
    p2["spec"]["schedulerName"] = json!("kai-scheduler");
    p2["metadata"]["labels"] = json!({"kai.scheduler/queue": "q"});
    let m = mutate_pod(&p2, &state(&[("main", 0.5)]), &kai()).unwrap();
    assert!(m.patch.is_empty(), "{:?}", m.patch);
}

#[test]
fn recommendation_for_unknown_container_is_noted() {
    let p = pod(json!({}), json!([{"name": "main"}]));
    let m = mutate_pod(&p, &state(&[("ghost", 0.5)]), &kai()).unwrap();
    assert!(m.patch.is_empty());
    assert!(m.notes.iter().any(|n| n.contains("ghost")));
}

#[test]
fn bad_sizes_are_not_applied() {
    for r in [f64::NAN, f64::INFINITY, -1.0, 0.0, 1e9] {
        assert_eq!(GpuTarget::from_units(r), None, "{r}");
    }
}

#[test]
fn malformed_pods_are_shape_errors_not_panics() {
    let s = state(&[("main", 0.5)]);
    for p in [
        json!(1),
        json!({"spec": 3}),
        json!({"spec": {"containers": {}}}),
        json!({"spec": {"containers": [{"noname": 1}]}}),
        json!({"metadata": {"annotations": {"a": 1}}, "spec": {"containers": []}}),
        json!({"metadata": [], "spec": {"containers": []}}),
    ] {
        assert!(mutate_pod(&p, &s, &kai()).is_err(), "{p}");
    }
    let p = json!({"spec": {"containers": [{"name": "main", "resources": {"limits": 5}}]}});
    assert!(mutate_pod(&p, &state(&[("main", 2.0)]), &kai()).is_err());
}

#[test]
fn hpa_target_set_to_coordinated_value() {
    let hpa = json!({
        "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                 "minReplicas": 2, "maxReplicas": 10,
                 "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 60}}}]}
    });
    let c = CoordinatedHpa {
        hpa_name: "web".into(),
        resource: "cpu".into(),
        target_before: 60,
        target_after: 72,
    };
    let m = mutate_hpa(&hpa, &c).unwrap();
    assert_eq!(
        ops(&m),
        json!([
            {"op": "replace", "path": "/spec/metrics/0/resource/target/averageUtilization", "value": 72}
        ])
    );
    assert!(mutate_hpa(&applied(&hpa, &m), &c).unwrap().patch.is_empty());
    let other = CoordinatedHpa {
        hpa_name: "other".into(),
        ..c.clone()
    };
    assert!(mutate_hpa(&hpa, &other).unwrap().patch.is_empty());
    let mem = CoordinatedHpa {
        resource: "memory".into(),
        ..c
    };
    assert!(mutate_hpa(&hpa, &mem).unwrap().patch.is_empty());
}

/// docs/design/hpa-coordination.md#h1: admission reads an HPA without metrics as the engine and
/// the writer do, at CPU utilization 80 %, and writes the coordinated target out.
#[test]
fn an_hpa_without_metrics_is_cpu_utilization_80_percent() {
    let c = CoordinatedHpa {
        hpa_name: "web".into(),
        resource: "cpu".into(),
        target_before: 80,
        target_after: 89,
    };
    let metric = json!([{"type": "Resource", "resource": {"name": "cpu",
        "target": {"type": "Utilization", "averageUtilization": 89}}}]);
    for metrics in [None, Some(json!([]))] {
        let mut hpa = json!({
            "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "web", "namespace": "shop"},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                     "maxReplicas": 10}
        });
        let op = match metrics {
            None => "add",
            Some(m) => {
                hpa["spec"]["metrics"] = m;
                "replace"
            }
        };
        let m = mutate_hpa(&hpa, &c).unwrap();
        assert_eq!(applied(&hpa, &m)["spec"]["metrics"], metric, "{op}");
        assert!(mutate_hpa(&applied(&hpa, &m), &c).unwrap().patch.is_empty());
        // Already at the coordinated target: nothing to write.
        let at_80 = CoordinatedHpa {
            target_after: 80,
            ..c.clone()
        };
        assert!(mutate_hpa(&hpa, &at_80).unwrap().patch.is_empty());
        // The default is CPU: a memory coordination leaves it alone.
        let mem = CoordinatedHpa {
            resource: "memory".into(),
            ..c.clone()
        };
        let m = mutate_hpa(&hpa, &mem).unwrap();
        assert!(m.patch.is_empty());
        assert!(m.notes[0].contains("scales on cpu"), "{:?}", m.notes);
    }
}

#[test]
fn parse_quantity_handles_suffixes() {
    // Read through core/quantity.rs, exactly, in the unit of each resource.
    assert_eq!(cpu_millis_of(&json!("700m")), Some(700));
    assert_eq!(memory_bytes_of(&json!("1Gi")), Some(1073741824));
    assert_eq!(gpus_of(&json!("2")), Some(2.0));
    assert_eq!(memory_bytes_of(&json!("1e3")), Some(1000));
    assert_eq!(memory_bytes_of(&json!("Mi")), None);
    assert_eq!(cpu_millis_of(&json!("abc")), None);
}

/// Admission reads quantities with core/quantity.rs, as the engine does: a bare JSON number is a
/// quantity too, suffixes are exact, and GPUs are GPU units.
#[test]
fn quantities_are_read_by_the_one_quantity_parser() {
    assert_eq!(cpu_millis_of(&json!(2)), Some(2000));
    assert_eq!(cpu_millis_of(&json!(0.25)), Some(250));
    assert_eq!(
        cpu_millis_of(&json!("0.1m")),
        Some(1),
        "rounded up, as Kubernetes does"
    );
    assert_eq!(memory_bytes_of(&json!(1024)), Some(1024));
    assert_eq!(gpus_of(&json!("2000m")), Some(2.0));
    assert_eq!(gpus_of(&json!(3)), Some(3.0));
    assert_eq!(gpus_of(&json!("500m")), Some(0.5));
    for invalid in [json!("-1"), json!("1 GPU"), json!(true)] {
        assert_eq!(gpus_of(&invalid), None, "{invalid}");
    }
    assert_eq!(cpu_millis_of(&json!(null)), None);
}

#[test]
fn decoded_skeleton_equals_skeleton_of_whole_pod() {
    let p = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ml", "annotations": {"a/b": "1"}, "labels": {"x": "y"},
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "r", "uid": "u", "controller": true}]},
        "spec": {"schedulerName": "default-scheduler",
                 "containers": [{"name": "main", "image": "i", "env": [{"name": "A", "value": "1"}],
                                 "resources": {"limits": {"nvidia.com/gpu": "1"}}}, {"name": "side"}],
                 "initContainers": [{"name": "init", "resources": {}}],
                 "volumes": [{"name": "v", "emptyDir": {}}]}
    });
    let decoded: PodSkeleton = serde_json::from_value(p.clone()).unwrap();
    assert_eq!(decoded.to_value(), pod_skeleton(&p).unwrap());
    let meta = decoded.metadata.as_ref().unwrap();
    assert_eq!(meta.namespace.as_deref(), Some("ml"));
    assert_eq!(meta.owner_references.as_ref().unwrap()[0].name, "r");
    // Same patch either way.
    let s = state(&[("main", 0.5)]);
    assert_eq!(
        mutate_skeleton(&decoded.to_value(), &s, &kai())
            .unwrap()
            .patch,
        mutate_pod(&p, &s, &kai()).unwrap().patch
    );
}

/// docs/design/kai-admission.md#k2 and #k3 with gpu-engine.md#g1: the engine sizes restartable
/// init containers (sidecars) like regular ones, and admission applies what it recommends for
/// them — KAI places a fraction on the container `gpu-fraction-container-name` names, init
/// containers included; whole GPUs go into the init container's resources.
#[test]
fn a_restartable_init_containers_gpu_recommendation_is_applied() {
    let sidecar_pod = || {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ml"},
            "spec": {
                "containers": [{"name": "main", "image": "x"}],
                "initContainers": [{"name": "warmup", "image": "w", "restartPolicy": "Always",
                    "resources": {"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}}]
            }
        })
    };
    let m = mutate_pod(&sidecar_pod(), &state(&[("warmup", 0.5)]), &kai()).unwrap();
    assert!(
        !m.notes.iter().any(|n| n.contains("not in the pod")),
        "{:?}",
        m.notes
    );
    let out = run(&sidecar_pod(), &state(&[("warmup", 0.5)]));
    assert_eq!(ann(&out, "gpu-fraction"), Some("0.5"));
    assert_eq!(ann(&out, "gpu-fraction-container-name"), Some("warmup"));
    let res = &out["spec"]["initContainers"][0]["resources"];
    assert!(res["requests"].get("nvidia.com/gpu").is_none());
    assert!(res["limits"].get("nvidia.com/gpu").is_none());

    let out = run(&sidecar_pod(), &state(&[("warmup", 2.0)]));
    let res = &out["spec"]["initContainers"][0]["resources"];
    assert_eq!(res["limits"]["nvidia.com/gpu"], "2");
    assert_eq!(res["requests"]["nvidia.com/gpu"], "2");
    assert_eq!(ann(&out, "gpu-fraction"), None);
    assert!(
        ann(&out, "rightsizing.kubex.ai/mutated")
            .unwrap()
            .contains("warmup")
    );
}

/// docs/design/kai-admission.md#k8: the patch compares the value it would write with the value
/// the pod has — not both after rounding up — so a pod arriving with `gpu-fraction: 0.841` for
/// a recommendation of 0.85 gets 0.85. Texts of the same value (`0.5`, `0.50`) stay equal.
#[test]
fn a_gpu_fraction_is_compared_as_the_patch_would_write_it() {
    let p = pod(
        json!({"gpu-fraction": "0.841"}),
        json!([{"name": "main", "image": "x"}]),
    );
    let out = run(&p, &state(&[("main", 0.85)]));
    assert_eq!(ann(&out, "gpu-fraction"), Some("0.85"));

    let p = pod(
        json!({"gpu-fraction": "0.50"}),
        json!([{"name": "main", "image": "x"}]),
    );
    let m = mutate_pod(&p, &state(&[("main", 0.5)]), &kai()).unwrap();
    let ops = ops(&m);
    assert!(
        !ops.as_array()
            .unwrap()
            .iter()
            .any(|op| op["path"] == "/metadata/annotations/gpu-fraction"),
        "{ops}"
    );
}

/// The texts kerf writes: hundredths without trailing zeros (`0.5`, `0.05`, `1`), CPU in
/// millicores, memory in whole Gi or Mi or else bytes — the same as the format strings they
/// stand for, over every size kerf can write.
#[test]
fn sizes_are_written_as_their_shortest_texts() {
    for h in 0..=(MAX_GPUS as u32 * 100) {
        let formatted = format!("{}.{:02}", h / 100, h % 100);
        let expected = formatted.trim_end_matches('0').trim_end_matches('.');
        assert_eq!(fmt_hundredths(h), expected, "{h}");
    }
    for m in [0, 1, 7, 700, 1000, 123_456, i64::MAX, -5] {
        assert_eq!(fmt_cpu(m), format!("{m}m"));
    }
    for (b, text) in [
        (0, "0"),
        (1, "1"),
        (48 << 20, "48Mi"),
        (1 << 30, "1Gi"),
        (1536 << 20, "1536Mi"),
        ((1 << 30) + 1, "1073741825"),
        (3 << 40, "3072Gi"),
    ] {
        assert_eq!(fmt_memory(b), text);
    }
}

mod kai_property {
    //! docs/design/kai-admission.md#k4: whatever a pod's containers hold — in the
    //! recommendation or not, regular, init or sidecar; whole, fractional, `gpu-memory`,
    //! `mps`, per-container GPU memory, nothing — and whatever kerf recommends, a pod KAI
    //! accepts before kerf's patch is one KAI accepts after it ([`kai_oracle`]).

    use super::*;
    use proptest::prelude::*;

    #[derive(Clone, Debug)]
    enum Holding {
        Nothing,
        Whole(u32),
        LimitOnly(u32),
    }

    #[derive(Clone, Debug)]
    enum Sharing {
        None,
        /// `gpu-fraction` (hundredths) on container i, on n devices.
        Fraction(u32, usize, u32),
        Memory,
        NvFractions,
    }

    fn holding() -> impl Strategy<Value = Holding> {
        prop_oneof![
            3 => Just(Holding::Nothing),
            2 => (1u32..4).prop_map(Holding::Whole),
            1 => (1u32..3).prop_map(Holding::LimitOnly),
        ]
    }

    fn sharing() -> impl Strategy<Value = Sharing> {
        prop_oneof![
            2 => Just(Sharing::None),
            3 => (1u32..100, 0usize..6, 1u32..3).prop_map(|(h, i, n)| Sharing::Fraction(h, i, n)),
            1 => Just(Sharing::Memory),
            1 => Just(Sharing::NvFractions),
        ]
    }

    fn container(name: &str, h: &Holding, sidecar: bool) -> Value {
        let mut c = json!({"name": name, "image": "x"});
        match h {
            Holding::Nothing => {}
            Holding::Whole(n) => {
                c["resources"] = json!({"requests": {"nvidia.com/gpu": n.to_string(), "cpu": "1"},
                    "limits": {"nvidia.com/gpu": n.to_string()}});
            }
            Holding::LimitOnly(n) => {
                c["resources"] = json!({"limits": {"nvidia.com/gpu": n.to_string()}});
            }
        }
        if sidecar {
            c["restartPolicy"] = json!("Always");
        }
        c
    }

    #[allow(clippy::type_complexity)]
    fn case() -> impl Strategy<
        Value = (
            Vec<Holding>,
            Vec<(Holding, bool)>,
            Sharing,
            Option<&'static str>,
            Option<&'static str>,
            Vec<Option<u32>>,
            (bool, bool, bool),
        ),
    > {
        (
            prop::collection::vec(holding(), 1..5),
            prop::collection::vec((holding(), any::<bool>()), 0..3),
            sharing(),
            prop::option::of(prop_oneof![Just("true"), Just("false")]),
            prop::option::of(prop_oneof![
                Just("kai-scheduler"),
                Just("default-scheduler")
            ]),
            // A recommendation per container (hundredths of a GPU), the last for a ghost.
            prop::collection::vec(prop::option::of(1u32..450), 7),
            (any::<bool>(), any::<bool>(), any::<bool>()),
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

        #[test]
        fn every_patched_pod_passes_kais_admission_rule(
            (regular, init, sharing, mps, scheduler, recs, (override_kai, up, down)) in case()
        ) {
            let names: Vec<String> = (0..regular.len() + init.len())
                .map(|i| format!("c{i}"))
                .collect();
            let mut p = pod(json!({}), Value::Array(
                regular.iter().enumerate().map(|(i, h)| container(&names[i], h, false)).collect(),
            ));
            if !init.is_empty() {
                p["spec"]["initContainers"] = Value::Array(
                    init.iter()
                        .enumerate()
                        .map(|(i, (h, sidecar))| container(&names[regular.len() + i], h, *sidecar))
                        .collect(),
                );
            }
            let a = &mut p["metadata"]["annotations"];
            match sharing {
                Sharing::None => {}
                Sharing::Fraction(h, i, n) => {
                    a["gpu-fraction"] = json!(fmt_hundredths(h));
                    if n > 1 {
                        a["gpu-fraction-num-devices"] = json!(n.to_string());
                    }
                    if i > 0 && i < names.len() {
                        a["gpu-fraction-container-name"] = json!(names[i]);
                    }
                }
                Sharing::Memory => a["gpu-memory"] = json!("2048"),
                Sharing::NvFractions => {
                    a[format!("nvidia.com/container.{}.gpu-memory.request", names[0])] = json!("2048");
                }
            }
            if let Some(m) = mps {
                a["mps"] = json!(m);
            }
            if let Some(s) = scheduler {
                p["spec"]["schedulerName"] = json!(s);
            }
            let pairs: Vec<(String, f64)> = recs
                .iter()
                .enumerate()
                .filter_map(|(i, r)| {
                    let name = names.get(i).cloned().unwrap_or_else(|| "ghost".into());
                    r.map(|h| (name, f64::from(h) / 100.0))
                })
                .collect();
            let refs: Vec<(&str, f64)> = pairs.iter().map(|(n, v)| (n.as_str(), *v)).collect();
            let mut s = state(&refs);
            let mut view = updown(up, down);
            if override_kai {
                view.enablement.override_scheduler = Some(OverrideScheduler::Kai);
            }
            s.strategy = std::sync::Arc::new(view);
            let m = mutate_pod(&p, &s, &kai()).expect("mutation builds");
            let out = applied(&p, &m);
            kai_oracle::assert_kai_accepts_patched(&p, &out);
            let again = mutate_pod(&out, &s, &kai()).expect("second mutation builds");
            prop_assert!(again.patch.is_empty(), "reinvocation is a no-op: {:?}", again.patch);
        }
    }

    /// The generator reaches the shapes the rule is about: without kerf's rule, many patched
    /// pods here would hold a fraction beside whole GPUs.
    #[test]
    fn the_oracle_refuses_what_kerf_must_never_make() {
        let refused = |p: Value| kai_oracle::kai_validate_gpu_requests(&p).unwrap_err();
        let mut p = pod(
            json!({"gpu-fraction": "0.9", "gpu-fraction-num-devices": "2"}),
            json!([{"name": "a"}, gpu_container("b", 2)]),
        );
        assert!(refused(p.clone()).contains("cannot have both GPU fraction request and whole GPU"));
        p["spec"]["containers"] = json!([{"name": "a"}]);
        p["spec"]["initContainers"] = json!([gpu_container("side", 2)]);
        assert!(refused(p.clone()).contains("cannot have both"));
        let p = pod(json!({"mps": "true"}), json!([gpu_container("a", 1)]));
        assert_eq!(
            refused(p),
            "MPS is only supported with GPU fraction request"
        );
        let p = pod(json!({"gpu-fraction": "1.0"}), json!([{"name": "a"}]));
        assert!(refused(p).contains("smaller than 1.0"));
        let p = pod(
            json!({"gpu-memory": "100", "gpu-fraction": "0.5"}),
            json!([{"name": "a"}]),
        );
        assert_eq!(refused(p), "cannot request both GPU and GPU memory");
        let p = pod(
            json!({"gpu-fraction-num-devices": "2"}),
            json!([{"name": "a"}]),
        );
        assert!(refused(p).contains("without specifying fraction portion"));
        let ok = pod(
            json!({"gpu-fraction": "0.5", "mps": "true"}),
            json!([{"name": "a"}]),
        );
        assert_eq!(kai_oracle::kai_validate_gpu_requests(&ok), Ok(()));
    }
}

/// A pod with pod-level requests (or limits, which default them): kerf's container requests are
/// set only where their aggregate stays within them; beyond, that resource is left as the pod
/// had it (the API server would refuse the pod), the other still set, and the reason said.
#[test]
fn pod_level_requests_kept() {
    let mut s = WorkloadState::default();
    for (name, cpu) in [("vllm-worker", 3000), ("proxy", 500)] {
        s.resources.insert(
            name.into(),
            ResourceRequests {
                cpu_millis: Some(cpu),
                memory_bytes: Some(1 << 30),
            },
        );
    }
    let with_pod_level = |resources: Value| {
        let mut p = pod(
            json!(null),
            json!([{"name": "vllm-worker", "resources": {"requests": {"cpu": "2", "memory": "2Gi"}}},
                   {"name": "proxy"}]),
        );
        p["spec"]["resources"] = resources;
        p
    };
    // cpu 3.5 over a pod-level 3: kept; memory 2Gi within 4Gi (a limit: the request's default).
    let p = with_pod_level(json!({"requests": {"cpu": "3"}, "limits": {"memory": "4Gi"}}));
    let m = mutate_pod(&p, &s, &kai()).unwrap();
    let out = run(&p, &s);
    let c = &out["spec"]["containers"];
    assert_eq!(c[0]["resources"]["requests"]["cpu"], "2");
    assert!(c[1]["resources"]["requests"].get("cpu").is_none());
    assert_eq!(c[0]["resources"]["requests"]["memory"], "1Gi");
    assert_eq!(c[1]["resources"]["requests"]["memory"], "1Gi");
    assert!(
        m.notes.iter().any(|n| n.contains("pod-level cpu")),
        "{:?}",
        m.notes
    );
    assert!(super::aggregate_container_requests(&out, "cpu") <= 3000);
    // Within the pod-level request: set as on any pod.
    let p = with_pod_level(json!({"requests": {"cpu": "4"}}));
    let out = run(&p, &s);
    assert_eq!(
        out["spec"]["containers"][0]["resources"]["requests"]["cpu"],
        "3000m"
    );
    // `resources: {}` is no pod-level request.
    assert_eq!(
        super::pod_level_request(&with_pod_level(json!({})), "cpu"),
        None
    );
    // A container limit kerf scales above the pod-level limit: both go back as the pod had them.
    let mut limited = s.clone();
    limited.limits.insert(
        "vllm-worker".into(),
        ResourceRequests {
            cpu_millis: Some(6000),
            memory_bytes: None,
        },
    );
    let mut p = with_pod_level(json!({"requests": {"cpu": "8"}, "limits": {"cpu": "5"}}));
    p["spec"]["containers"][0]["resources"]["limits"] = json!({"cpu": "4"});
    let out = run(&p, &limited);
    let c = &out["spec"]["containers"][0]["resources"];
    assert_eq!(
        (&c["requests"]["cpu"], &c["limits"]["cpu"]),
        (&json!("2"), &json!("4"))
    );
}

/// The regular containers' and sidecars' sum, or an init container with the sidecars before it.
#[test]
fn aggregate_container_requests() {
    let p = json!({"spec": {
        "initContainers": [
            {"name": "mesh", "restartPolicy": "Always", "resources": {"requests": {"cpu": "100m"}}},
            {"name": "download", "resources": {"requests": {"cpu": "4"}}}],
        "containers": [{"name": "a", "resources": {"requests": {"cpu": "1"}}}, {"name": "b"}]}});
    assert_eq!(super::aggregate_container_requests(&p, "cpu"), 4100);
    let p = json!({"spec": {"containers": [
        {"name": "a", "resources": {"requests": {"memory": "1Gi"}}},
        {"name": "b", "resources": {"requests": {"memory": "1Gi"}}}]}});
    assert_eq!(super::aggregate_container_requests(&p, "memory"), 2 << 30);
}
