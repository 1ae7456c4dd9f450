//! `kerf simulate`: the simulation rules of docs/simulate.md on the shipped examples and on
//! scenarios written for one rule each, through the library (`kerf::simulate::run`) and the
//! real binary.

use std::path::{Path, PathBuf};
use std::process::Command;

use jiff::Timestamp;
use kerf::api::Signal;
use kerf::core::recommenders::gpu::engine::Action;
use kerf::metrics::file::FileSource;
use kerf::simulate::{Options, Report, WorkloadReport, report, run};
use serde_json::Value;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn t(s: &str) -> Timestamp {
    s.parse().unwrap()
}

fn opts(from: &str, to: &str) -> Options {
    Options {
        from: t(from),
        to: t(to),
        every_seconds: 60,
        step_seconds: 15,
    }
}

fn replay(manifests: &Path, metrics: &FileSource, o: &Options) -> Report {
    let m = kerf::sources::dir::load_dir(manifests).unwrap();
    futures::executor::block_on(run(m, metrics, o)).unwrap()
}

fn workload<'a>(r: &'a Report, name: &str) -> &'a WorkloadReport {
    r.workloads
        .iter()
        .find(|w| w.key.name == name)
        .unwrap_or_else(|| panic!("no {name} in {:?}", r.workloads))
}

fn examples() -> Report {
    let metrics = FileSource::from_path(&root().join("examples/metrics.om")).unwrap();
    replay(
        &root().join("examples/manifests"),
        &metrics,
        &opts("2026-01-01T11:30:00Z", "2026-01-01T12:30:00Z"),
    )
}

/// The shipped llm runs hot from 11:42 (0.7 GPU on a 0.5 share): one upsize to 0.84 and one
/// rollout; the GPU-hours count 2 pods × 0.5 for the first 12 minutes and 2 × 0.84 after.
#[test]
fn the_shipped_llm_is_upsized_once_and_its_gpu_hours_follow_the_pods() {
    let r = examples();
    assert_eq!(r.cycles, 60);
    let llm = workload(&r, "llm");
    assert_eq!(llm.changes.len(), 1, "{:?}", llm.changes);
    let c = &llm.changes[0];
    assert_eq!(c.at, t("2026-01-01T11:42:00Z"));
    assert_eq!(c.action, Action::Upsize);
    assert_eq!(c.driver, Some(Signal::Compute));
    assert_eq!(c.gpu.get("inference"), Some(&0.84));
    assert!(c.reason.contains("upsize candidate 0.8400"), "{}", c.reason);
    assert_eq!(llm.rollouts, 1);
    assert!(
        llm.resource_changes.is_empty(),
        "{:?}",
        llm.resource_changes
    );
    let h = llm.gpu_hours;
    assert!((h.allocated_as_is - 1.0).abs() < 1e-9, "{h:?}");
    let with_kerf = 2.0 * 0.5 * 12.0 / 60.0 + 2.0 * 0.84 * 48.0 / 60.0;
    assert!((h.allocated_with_kerf - with_kerf).abs() < 1e-9, "{h:?}");
    // Recorded usage: 20 minutes of samples (to 12:00 and 5 minutes of lookback).
    assert!(h.used > 0.3 && h.used < 0.6, "{h:?}");
}

/// A scale-back to the baseline is one change and one rollout: the cycle after it emits no
/// recommendation (the pods are at the baseline), which changes no pod.
#[test]
fn a_scale_back_to_baseline_is_one_change_and_one_rollout() {
    let r = examples();
    let e = workload(&r, "embedder");
    assert_eq!(e.changes.len(), 1, "{:?}", e.changes);
    let c = &e.changes[0];
    assert_eq!(c.action, Action::ScaleBack);
    assert_eq!(c.gpu.get("encoder"), Some(&0.5));
    assert_eq!((c.before, c.after), (0.9, 0.5));
    assert_eq!(e.rollouts, 1);
    assert!(e.gpu_hours.allocated_with_kerf < e.gpu_hours.allocated_as_is);
}

/// A scenario on the shipped manifests: the llm's first pod hot at 11:40 only, cold after;
/// memory footprint 90 % of the allocation the pods really had (0.5 → 0.45 GPU).
fn scenario_metrics() -> FileSource {
    let sm = "kubex_gpu_container_sm_utilization_percent";
    let mem = "kubex_gpu_container_memory_footprint_percent";
    let start = t("2026-01-01T11:00:00Z").as_second();
    let hot = t("2026-01-01T11:40:00Z").as_second();
    let mut text = format!("# TYPE {sm} gauge\n");
    for pod in ["llm-5f7c9d8b6-x2k4p", "llm-5f7c9d8b6-q8w1z"] {
        for ts in (start..=start + 7200).step_by(15) {
            let v = if ts == hot && pod.ends_with("x2k4p") {
                70
            } else {
                10
            };
            text.push_str(&format!(
                "{sm}{{namespace=\"ml\",pod=\"{pod}\",container=\"inference\"}} {v} {ts}\n"
            ));
        }
    }
    text.push_str(&format!("# TYPE {mem} gauge\n"));
    for pod in ["llm-5f7c9d8b6-x2k4p", "llm-5f7c9d8b6-q8w1z"] {
        for ts in (start..=start + 7200).step_by(15) {
            text.push_str(&format!(
                "{mem}{{namespace=\"ml\",pod=\"{pod}\",container=\"inference\"}} 90 {ts}\n"
            ));
        }
    }
    text.push_str("# EOF\n");
    FileSource::from_str(&text).unwrap()
}

fn scenario() -> Report {
    replay(
        &root().join("examples/manifests"),
        &scenario_metrics(),
        &opts("2026-01-01T11:30:00Z", "2026-01-01T12:30:00Z"),
    )
}

/// A simulated rollout starts the pods at the tick, so `minPodMetricsAge` (15m) applies to the
/// new pods: the llm is cold from 11:40:15 and its scale-back condition holds from 11:51, but
/// its pods (restarted at 11:40) are eligible only from 11:55.
#[test]
fn a_simulated_rollout_resets_the_pods_age() {
    let r = scenario();
    let llm = workload(&r, "llm");
    let at: Vec<(Timestamp, Action)> = llm.changes.iter().map(|c| (c.at, c.action)).collect();
    assert_eq!(
        at,
        vec![
            (t("2026-01-01T11:40:00Z"), Action::Upsize),
            (t("2026-01-01T11:55:00Z"), Action::ScaleBack)
        ],
        "{:?}",
        llm.changes
    );
    assert_eq!(llm.rollouts, 2);
}

/// `currentAllocation` samples are converted with the allocation the pod really had (0.5):
/// 90 % is 0.45 GPU whatever the simulated allocation (0.84), so the scale-back, driven by
/// memory, lands on 0.45 × 1.2 = 0.54. Read with the simulated 0.84 it would be 0.756 GPU,
/// above 60 % of 0.84: no scale-back at all.
#[test]
fn current_allocation_samples_are_converted_with_the_real_allocation() {
    let r = scenario();
    let llm = workload(&r, "llm");
    let back = llm
        .changes
        .iter()
        .find(|c| c.action == Action::ScaleBack)
        .unwrap_or_else(|| panic!("no scale-back: {:?}", llm.changes));
    assert_eq!(back.driver, Some(Signal::Memory), "{back:?}");
    assert_eq!(back.gpu.get("inference"), Some(&0.54), "{back:?}");
    // Used GPU-hours are the recorded usage: per pod the higher signal, memory's 0.45.
    let used = llm.gpu_hours.used;
    assert!((used - 2.0 * 0.45).abs() < 0.01, "{used}");
}

/// The history is fetched once per query shape, however many ticks read it.
#[test]
fn the_history_is_fetched_once_not_per_tick() {
    let metrics = FileSource::from_path(&root().join("examples/metrics.om")).unwrap();
    let short = replay(
        &root().join("examples/manifests"),
        &metrics,
        &opts("2026-01-01T11:30:00Z", "2026-01-01T12:00:00Z"),
    );
    let long = replay(
        &root().join("examples/manifests"),
        &metrics,
        &opts("2026-01-01T11:30:00Z", "2026-01-01T16:00:00Z"),
    );
    assert_eq!((short.cycles, long.cycles), (30, 270));
    // compute, memory (GPU), CPU and memory usage (the report's used hours).
    assert_eq!(short.fetches, 4);
    assert_eq!(long.fetches, 4);
}

/// readOnly (and audit-only) workloads are simulated as if in auto-patch, and the report says so.
#[test]
fn read_only_is_simulated_as_auto_patch_and_said() {
    let dir = tempfile::tempdir().unwrap();
    for f in ["pods.yaml", "workloads.yaml", "policies.yaml"] {
        let text = std::fs::read_to_string(root().join("examples/manifests").join(f)).unwrap();
        let text = text.replace(
            "  gpuReactiveCheckInterval: 1m\n",
            "  gpuReactiveCheckInterval: 1m\n  readOnly: true\n",
        );
        std::fs::write(dir.path().join(f), text).unwrap();
    }
    let metrics = FileSource::from_path(&root().join("examples/metrics.om")).unwrap();
    let r = replay(
        dir.path(),
        &metrics,
        &opts("2026-01-01T11:30:00Z", "2026-01-01T12:30:00Z"),
    );
    let plain = examples();
    for (a, b) in r.workloads.iter().zip(&plain.workloads) {
        assert_eq!(a.changes, b.changes);
        assert!(
            a.notes.iter().any(|n| n.contains("readOnly")),
            "{:?}",
            a.notes
        );
        assert!(b.notes.is_empty());
    }
}

/// CPU/memory and the HPA: the shipped HPA example (memory audit-only, simulated as
/// auto-patch) moves requests to 700m / 360Mi and the HPA target to 71 % in one rollout.
#[test]
fn requests_and_the_hpa_target_move_together_in_one_rollout() {
    let metrics = FileSource::from_path(&root().join("examples/hpa/metrics.om")).unwrap();
    let r = replay(
        &root().join("examples/hpa/manifests"),
        &metrics,
        &opts("2026-01-01T11:00:00Z", "2026-01-01T12:00:00Z"),
    );
    let web = workload(&r, "web");
    assert_eq!(web.rollouts, 1);
    assert!(web.changes.is_empty());
    let json = report::to_json(&r);
    let rc = &json["workloads"][0]["resourceChanges"];
    assert_eq!(
        rc,
        // The example's history starts at 10:55: the policy's 1 h window is covered, and
        // auto-patch allowed (docs/design/hpa-coordination.md, insufficient history), at 11:55.
        &serde_json::json!([{"at": "2026-01-01T11:55:00Z",
            "requests": {"app": {"cpu": "700m", "memory": "360Mi"}}, "hpaTarget": 71}])
    );
    assert!(
        web.notes
            .iter()
            .any(|n| n.contains("audit-only for memory"))
    );
    let cpu = web.cpu_core_hours;
    assert!((cpu.allocated_as_is - 3.0).abs() < 1e-9, "{cpu:?}");
    // 3 pods at 1 core until the 11:55 rollout, then at 700m: 3 × (55/60 + 5/60 × 0.7).
    assert!((cpu.allocated_with_kerf - 2.925).abs() < 1e-9, "{cpu:?}");
    assert!(
        cpu.used > 0.0 && cpu.used < cpu.allocated_with_kerf,
        "{cpu:?}"
    );
}

fn kerf(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_kerf"))
        .args(args)
        .current_dir(root())
        .output()
        .expect("kerf runs")
}

const RANGE: [&str; 4] = [
    "--from",
    "2026-01-01T11:30:00Z",
    "--to",
    "2026-01-01T12:30:00Z",
];

/// The binary on the shipped examples: the table by default, the JSON contract and the HTML
/// report written to `--output`.
#[test]
fn the_binary_prints_a_table_and_writes_json_and_html() {
    let base = [
        "simulate",
        "--manifests",
        "examples/manifests",
        "--metrics",
        "examples/metrics.om",
    ];
    let out = kerf(&[&base[..], &RANGE[..]].concat());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let table = String::from_utf8(out.stdout).unwrap();
    assert!(table.contains("60 cycles"), "{table}");
    let total = table.lines().find(|l| l.starts_with("TOTAL")).unwrap();
    assert_eq!(
        total.split_whitespace().collect::<Vec<_>>(),
        ["TOTAL", "2", "2", "1.90", "2.11", "0.56", "+0.21"],
        "{table}"
    );

    let dir = tempfile::tempdir().unwrap();
    let json_path = dir.path().join("r.json");
    let args = [
        &base[..],
        &RANGE[..],
        &["-o", "json", "--output", json_path.to_str().unwrap()][..],
    ]
    .concat();
    let out = kerf(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.stdout.is_empty(), "the report goes to the file");
    let v: Value = serde_json::from_slice(&std::fs::read(&json_path).unwrap()).unwrap();
    assert_contract(&v);

    let html_path = dir.path().join("r.html");
    let args = [
        &base[..],
        &RANGE[..],
        &["-o", "html", "--output", html_path.to_str().unwrap()][..],
    ]
    .concat();
    assert!(kerf(&args).status.success());
    let html = std::fs::read_to_string(&html_path).unwrap();
    assert_eq!(html.matches("<svg class=\"chart\"").count(), 2);
    for external in ["<script", "src=", "@import", "url(", "<link"] {
        assert!(!html.contains(external), "self-contained: found {external}");
    }
}

/// The JSON contract of docs/simulate.md, field by field.
fn assert_contract(v: &Value) {
    let keys = |v: &Value| -> Vec<String> {
        let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
        k.sort();
        k
    };
    assert_eq!(keys(v), ["cycles", "every", "from", "to", "workloads"]);
    assert_eq!(v["from"], "2026-01-01T11:30:00Z");
    assert_eq!(v["to"], "2026-01-01T12:30:00Z");
    assert_eq!(v["every"], "1m");
    assert_eq!(v["cycles"], 60);
    let llm = &v["workloads"][0];
    assert_eq!(
        keys(llm),
        [
            "changes",
            "cpuCoreHours",
            "gpuHours",
            "kind",
            "memoryGiBHours",
            "name",
            "namespace",
            "notes",
            "policy",
            "resourceChanges",
            "rollouts"
        ]
    );
    assert_eq!(
        (&llm["namespace"], &llm["kind"], &llm["name"]),
        (&"ml".into(), &"Deployment".into(), &"llm".into())
    );
    assert_eq!(llm["policy"], "GpuReactivePolicy/ml/gpu-reactive");
    let change = &llm["changes"][0];
    assert_eq!(keys(change), ["action", "at", "driver", "gpu", "reason"]);
    assert_eq!(change["at"], "2026-01-01T11:42:00Z");
    assert_eq!(change["gpu"], serde_json::json!({"inference": "0.84"}));
    assert_eq!(change["action"], "upsize");
    assert_eq!(change["driver"], "compute");
    assert_eq!(llm["rollouts"], 1);
    for h in ["gpuHours", "cpuCoreHours", "memoryGiBHours"] {
        assert_eq!(
            keys(&llm[h]),
            ["allocatedAsIs", "allocatedWithKerf", "used"],
            "{h}"
        );
    }
    assert_eq!(llm["gpuHours"]["allocatedAsIs"], 1.0);
    let embedder = &v["workloads"][1];
    assert_eq!(embedder["changes"][0]["action"], "scaleBack");
    assert_eq!(
        embedder["changes"][0]["gpu"],
        serde_json::json!({"encoder": "0.5"})
    );
}
