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
/// rollout. Its GPU samples run 11:40–12:00, which a range query answers until 12:05 (the
/// 5-minute lookback): the GPU-hours count the 26 covered cycles 11:40–12:05, 2 pods × 0.5
/// for the first 2 of them and 2 × 0.84 after.
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
    let covered = h.coverage.expect("the llm has GPU samples");
    assert_eq!(
        (covered.from, covered.to, covered.cycles),
        (t("2026-01-01T11:40:00Z"), t("2026-01-01T12:06:00Z"), 26)
    );
    assert!(
        (h.allocated_as_is - 2.0 * 0.5 * 26.0 / 60.0).abs() < 1e-9,
        "{h:?}"
    );
    let with_kerf = 2.0 * 0.5 * 2.0 / 60.0 + 2.0 * 0.84 * 24.0 / 60.0;
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
    // GPU (as is, kerf, used, difference), CPU and memory (as is, kerf, used), over the
    // covered cycles: GPU 26 of (2 × 0.5 + 0.9), CPU 24 of (2 × 2.1 + 1) cores, memory 26 of
    // (2 × (8 + 1/16) + 4) GiB — the pods' requests, which kerf leaves as they are.
    let cells: Vec<&str> = total.split_whitespace().collect();
    assert_eq!(
        cells[..7],
        ["TOTAL", "2", "2", "0.82", "0.92", "0.56", "+0.10"],
        "{table}"
    );
    let cpu = format!("{:.2}", 24.0 / 60.0 * (2.0 * 2.1 + 1.0));
    let memory = format!("{:.2}", 26.0 / 60.0 * (2.0 * (8.0 + 1.0 / 16.0) + 4.0));
    assert_eq!(cells[7..9], [cpu.as_str(), cpu.as_str()], "{table}");
    assert_eq!(cells[10..12], [memory.as_str(), memory.as_str()], "{table}");
    assert!(
        table.contains("Recorded usage covers 11:40–12:06 of 11:30–12:30 (26 of 60 cycles)"),
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
    assert_eq!(
        keys(v),
        ["coverage", "cycles", "every", "from", "to", "workloads"]
    );
    assert_eq!(
        v["coverage"],
        serde_json::json!({"from": "2026-01-01T11:40:00Z", "to": "2026-01-01T12:06:00Z", "cycles": 26})
    );
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
            "resizedInPlace",
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
            ["allocatedAsIs", "allocatedWithKerf", "coverage", "used"],
            "{h}"
        );
        assert_eq!(keys(&llm[h]["coverage"]), ["cycles", "from", "to"], "{h}");
    }
    assert_eq!(llm["gpuHours"]["allocatedAsIs"], 0.4333);
    assert_eq!(llm["cpuCoreHours"]["coverage"]["cycles"], 24);
    let embedder = &v["workloads"][1];
    assert_eq!(embedder["changes"][0]["action"], "scaleBack");
    assert_eq!(
        embedder["changes"][0]["gpu"],
        serde_json::json!({"encoder": "0.5"})
    );
}

/// The replay of 11:30–12:30 over GPU data covering 11:40–12:05 (samples to 12:00 and the
/// lookback) says so, and counts allocated and used hours over the same cycles: the figures
/// equal those of a replay of the covered span alone.
#[test]
fn a_replay_says_what_its_data_covers_and_counts_every_hour_over_that_span() {
    let full = examples();
    let c = full.coverage.expect("the examples have data");
    assert_eq!(
        (c.from, c.to, c.cycles),
        (t("2026-01-01T11:40:00Z"), t("2026-01-01T12:06:00Z"), 26)
    );
    let line = report::coverage_line(&full);
    assert!(
        line.contains("11:40–12:06 of 11:30–12:30 (26 of 60 cycles)"),
        "{line}"
    );
    let metrics = FileSource::from_path(&root().join("examples/metrics.om")).unwrap();
    let span = replay(
        &root().join("examples/manifests"),
        &metrics,
        &opts("2026-01-01T11:40:00Z", "2026-01-01T12:06:00Z"),
    );
    assert_eq!(span.coverage.map(|c| c.cycles), Some(span.cycles));
    assert!(report::coverage_line(&span).contains("whole replay"));
    for name in ["llm", "embedder"] {
        let (a, b) = (workload(&full, name), workload(&span, name));
        for (x, y) in [
            (a.gpu_hours, b.gpu_hours),
            (a.cpu_core_hours, b.cpu_core_hours),
            (a.memory_gib_hours, b.memory_gib_hours),
        ] {
            assert!(
                (x.allocated_as_is - y.allocated_as_is).abs() < 1e-9,
                "{name}: {x:?} {y:?}"
            );
            assert!((x.used - y.used).abs() < 1e-9, "{name}: {x:?} {y:?}");
            assert!(x.allocated_as_is > 0.0 && x.used > 0.0, "{name}: {x:?}");
        }
    }
}

/// A replay where there is no data at all says so and counts nothing: "no data" is not "no
/// change".
#[test]
fn a_replay_without_data_says_so() {
    let metrics = FileSource::from_path(&root().join("examples/metrics.om")).unwrap();
    let r = replay(
        &root().join("examples/manifests"),
        &metrics,
        &opts("2026-01-02T11:30:00Z", "2026-01-02T12:30:00Z"),
    );
    assert_eq!(r.coverage, None);
    let table = report::to_table(&r);
    assert!(
        table.contains("No recorded usage in 11:30–12:30"),
        "{table}"
    );
    let llm = table
        .lines()
        .find(|l| l.starts_with("ml/Deployment/llm"))
        .unwrap();
    assert_eq!(
        llm.split_whitespace().collect::<Vec<_>>(),
        [
            "ml/Deployment/llm",
            "0",
            "0",
            "-",
            "-",
            "-",
            "-",
            "-",
            "-",
            "-",
            "-",
            "-",
            "-"
        ],
        "{table}"
    );
    assert!(table.contains("data: ml/Deployment/llm: recorded usage: GPU no data, CPU no data"));
    assert_eq!(
        report::to_json(&r)["workloads"][0]["gpuHours"]["coverage"],
        Value::Null
    );
}

/// No CPU/memory policy covers the shipped GPU workloads: their pods keep the requests they
/// carry (the templates'), as is and with kerf — 2 pods × (2 + 0.1) cores over the 24 cycles
/// the CPU counter covers (a rate needs two samples in its 4-minute window: 11:41–12:05).
#[test]
fn workloads_no_cpu_policy_covers_keep_their_requests() {
    let r = examples();
    let cpu = workload(&r, "llm").cpu_core_hours;
    assert_eq!(cpu.coverage.map(|c| c.cycles), Some(24), "{cpu:?}");
    let want = 24.0 / 60.0 * 2.0 * 2.1;
    assert!((cpu.allocated_as_is - want).abs() < 1e-9, "{cpu:?}");
    assert!((cpu.allocated_with_kerf - want).abs() < 1e-9, "{cpu:?}");
    // Recorded: 1.25 cores per pod, below the requests.
    assert!(cpu.used > 0.8 && cpu.used < want, "{cpu:?}");
    let html = report::to_html(&r);
    assert_eq!(html.matches("data-resource=\"gpu\"").count(), 2);
    assert_eq!(
        html.matches("data-resource=\"cpu\"").count(),
        0,
        "no CPU chart without a CPU policy"
    );
}

/// The HPA example (no GPU policy) gets a CPU and a memory chart and no GPU figures: the CPU
/// chart draws the request as is (1000m) and with kerf (700m from 11:55), the p95 the
/// recommendation rests on, and the HPA's scale-out point target × request, 50 % × 1000m
/// before the rollout and 71 % × 700m after.
#[test]
fn a_cpu_workload_gets_cpu_and_memory_charts_with_the_hpa_and_no_gpu_figures() {
    let metrics = FileSource::from_path(&root().join("examples/hpa/metrics.om")).unwrap();
    let r = replay(
        &root().join("examples/hpa/manifests"),
        &metrics,
        &opts("2026-01-01T11:00:00Z", "2026-01-01T12:00:00Z"),
    );
    let web = workload(&r, "web");
    let (start, rollout) = (
        t("2026-01-01T11:00:00Z").as_second(),
        t("2026-01-01T11:55:00Z").as_second(),
    );
    let cpu = &web.chart.cpu;
    assert_eq!(cpu.real.first(), Some(&(start, 1.0)));
    assert_eq!(cpu.simulated[..2], [(start, 1.0), (rollout, 0.7)]);
    assert_eq!(cpu.hpa.len(), 3, "{:?}", cpu.hpa);
    assert_eq!(cpu.hpa[0], (start, 0.5));
    assert_eq!(cpu.hpa[1].0, rollout);
    assert!((cpu.hpa[1].1 - 0.7 * 0.71).abs() < 1e-9, "{:?}", cpu.hpa);
    assert_eq!(cpu.basis_label, "p95 over 1h");
    assert!(
        cpu.basis.iter().all(|(_, v)| (v - 0.7).abs() < 0.01),
        "{:?}",
        cpu.basis
    );
    assert!(
        cpu.usage.iter().any(|(_, v)| (v - 0.7).abs() < 0.01),
        "{:?}",
        cpu.usage
    );
    assert!(web.chart.memory.hpa.is_empty(), "the HPA measures CPU");
    assert_eq!(web.chart.memory.simulated[1], (rollout, 360.0 / 1024.0));

    let html = report::to_html(&r);
    assert_eq!(html.matches("<svg class=\"chart\"").count(), 2);
    assert_eq!(html.matches("data-resource=\"cpu\"").count(), 1);
    assert_eq!(html.matches("data-resource=\"memory\"").count(), 1);
    assert_eq!(html.matches("data-resource=\"gpu\"").count(), 0);
    assert_eq!(html.matches("class=\"marker requests\"").count(), 2);
    let table = report::to_table(&r);
    let row = table
        .lines()
        .find(|l| l.starts_with("shop/Deployment/web"))
        .unwrap();
    let cells: Vec<&str> = row.split_whitespace().collect();
    // One change (requests and target), one rollout, no GPU figures, then CPU: 3 pods × 1 core.
    assert_eq!(
        cells[..8],
        ["shop/Deployment/web", "1", "1", "-", "-", "-", "-", "3.00"],
        "{table}"
    );
}

/// The replay reads CPU usage under the name GlobalConfiguration `resourceMetrics.cpu` gives,
/// as the recommender does: the example's cAdvisor series renamed, and the configuration
/// naming them, give the same CPU hours as the shipped example.
#[test]
fn the_replay_reads_the_configured_cadvisor_names() {
    let dir = tempfile::tempdir().unwrap();
    let manifests = dir.path().join("manifests");
    std::fs::create_dir(&manifests).unwrap();
    for e in std::fs::read_dir(root().join("examples/manifests")).unwrap() {
        let p = e.unwrap().path();
        let text = std::fs::read_to_string(&p).unwrap().replace(
            "    requestTimeout: 30s\n",
            "    requestTimeout: 30s\n    resourceMetrics:\n      cpu: my_cpu_seconds_total\n",
        );
        std::fs::write(manifests.join(p.file_name().unwrap()), text).unwrap();
    }
    let om = std::fs::read_to_string(root().join("examples/metrics.om"))
        .unwrap()
        .replace("container_cpu_usage_seconds", "my_cpu_seconds");
    let om_path = dir.path().join("metrics.om");
    std::fs::write(&om_path, om).unwrap();
    let metrics = FileSource::from_path(&om_path).unwrap();
    let renamed = replay(
        &manifests,
        &metrics,
        &opts("2026-01-01T11:30:00Z", "2026-01-01T12:30:00Z"),
    );
    let shipped = examples();
    let cpu = |r: &Report| workload(r, "llm").cpu_core_hours;
    assert_eq!(cpu(&renamed), cpu(&shipped));
    assert!(cpu(&renamed).coverage.is_some());
}

/// A cluster that scrapes cAdvisor twice (the kubelet's and a standalone cAdvisor's series, told
/// apart by `job`): the replay's range queries carry `resourceMetrics.matchers`, as the
/// recommender's window queries do, so `job="kubelet"` gives the shipped example's CPU hours, and
/// without it both scrapes are summed.
#[test]
fn the_replay_reads_one_scrape_of_cadvisor_by_the_configured_matchers() {
    let family = "container_cpu_usage_seconds_total{";
    let shipped_om = std::fs::read_to_string(root().join("examples/metrics.om")).unwrap();
    let mut om = String::new();
    let mut second_scrape = String::new();
    for line in shipped_om.lines() {
        if let Some(rest) = line.strip_prefix(family) {
            om.push_str(&format!("{family}job=\"kubelet\",{rest}\n"));
            // The same container seen by the other scrape, at three times the usage.
            let (labels, sample) = rest.split_once("} ").unwrap();
            let (value, at) = sample.split_once(' ').unwrap();
            let tripled = value.parse::<f64>().unwrap() * 3.0;
            second_scrape.push_str(&format!(
                "{family}job=\"cadvisor\",{labels}}} {tripled} {at}\n"
            ));
            continue;
        }
        if line.starts_with('#') && !second_scrape.is_empty() {
            om.push_str(&std::mem::take(&mut second_scrape));
        }
        om.push_str(line);
        om.push('\n');
    }
    let dir = tempfile::tempdir().unwrap();
    let om_path = dir.path().join("metrics.om");
    std::fs::write(&om_path, om).unwrap();
    let metrics = FileSource::from_path(&om_path).unwrap();
    let with_matchers = |matchers: &str| {
        let manifests = dir.path().join(format!("manifests-{}", matchers.len()));
        std::fs::create_dir(&manifests).unwrap();
        for e in std::fs::read_dir(root().join("examples/manifests")).unwrap() {
            let p = e.unwrap().path();
            let text = std::fs::read_to_string(&p).unwrap().replace(
                "    requestTimeout: 30s\n",
                &format!("    requestTimeout: 30s\n{matchers}"),
            );
            std::fs::write(manifests.join(p.file_name().unwrap()), text).unwrap();
        }
        replay(
            &manifests,
            &metrics,
            &opts("2026-01-01T11:30:00Z", "2026-01-01T12:30:00Z"),
        )
    };
    let cpu = |r: &Report| workload(r, "llm").cpu_core_hours;
    let shipped = cpu(&examples());
    assert!(shipped.used > 0.0, "{shipped:?}");
    let kubelet = cpu(&with_matchers(
        "    resourceMetrics:\n      matchers: ['job=\"kubelet\"']\n",
    ));
    assert_eq!(kubelet, shipped);
    let both = cpu(&with_matchers(""));
    assert!(
        (both.used - 4.0 * shipped.used).abs() < 1e-6 * shipped.used,
        "both scrapes summed: {both:?} against {shipped:?}"
    );
}

/// With `resize: inPlaceOrRollout` and no HPA, the replay applies the change to the same pods
/// in place: no rollout, the same allocation from then on, and the replay says it planned as a
/// cluster serving `pods/resize` would.
#[test]
fn an_in_place_change_is_resized_not_rolled_out_and_said() {
    let dir = crate::recommend_cli::in_place_example(false);
    let metrics = FileSource::from_path(&root().join("examples/hpa/metrics.om")).unwrap();
    let r = replay(
        dir.path(),
        &metrics,
        &opts("2026-01-01T11:00:00Z", "2026-01-01T12:00:00Z"),
    );
    let web = workload(&r, "web");
    assert_eq!((web.rollouts, web.resized_in_place), (0, 1));
    assert!(
        web.notes
            .iter()
            .any(|n| n.contains("no API server was asked")),
        "{:?}",
        web.notes
    );
    assert_eq!(report::to_json(&r)["workloads"][0]["resizedInPlace"], 1);
    // 3 pods at 1 core until 11:55, then at 700m, as for a rollout.
    assert!((web.cpu_core_hours.allocated_with_kerf - 2.925).abs() < 1e-9);
}
