//! `kerf recommend`: evaluate a manifests directory against a metric source and print the
//! recommendations (`-o json` is a stable contract; `-o table` is for people).

use std::fmt::Write as _;

use jiff::Timestamp;
use serde_json::{Value, json};

use super::{OutputFormat, RecommendArgs};
use crate::api::{ApplyMethod, RecommendationStatus, WriteMethod};
use crate::core::model::{PolicyId, WorkloadKey};
use crate::core::quantity::{format_cpu_millis, format_memory_bytes};
use crate::core::recommenders::cycle::CycleOutput;
use crate::core::recommenders::gpu::WorkloadResult;
use crate::core::recommenders::resources::workload::RsResult;
use crate::core::snapshot::{ResizeSupport, Snapshot, Workload};
use crate::core::writes::recommendation_name;
use crate::writers::memory::MemoryWriter;

pub async fn run(args: RecommendArgs) -> anyhow::Result<()> {
    let at = super::parse_at(args.at.as_deref())?;
    // One cycle of the reconcile loop, printed. The objects are read once: their
    // GlobalConfiguration (the Prometheus timeout) opens the source the cycle then reads.
    let own_namespace = args.own_namespace.detect();
    let manifests = args.objects.read(own_namespace.as_deref()).await?;
    // The objects are the user's input: an invalid policy there is an error, not a status.
    manifests.reject_invalid()?;
    let source =
        super::metric_source(&args.source, &args.connection, &manifests.snapshot.global).await?;
    let mut writer = crate::writers::memory::MemoryWriter::new();
    let evaluated = crate::reconcile::standalone::run_in_memory(
        &mut writer,
        manifests,
        &source,
        at,
        args.step_seconds,
        &crate::state::Store::default(),
        // One cycle: each window is asked whole.
        None,
    )
    .await;
    for note in &evaluated.notes {
        tracing::debug!("{note}");
    }
    let cycle = evaluated.cycle;
    for w in &cycle.warnings {
        eprintln!("warning: {w}");
    }
    for (policy, e) in cycle.query_failures() {
        eprintln!("warning: {policy}: {e}");
    }
    let statuses = policy_statuses(&evaluated.snapshot, &writer);
    let out = match args.format {
        OutputFormat::Json => {
            let mut json = to_json_recorded(&cycle, &writer, &evaluated.snapshot);
            json["inPlaceResize"] = json!(resize_support(evaluated.snapshot.resize));
            json["policies"] = policies_json(&statuses);
            serde_json::to_string_pretty(&json)? + "\n"
        }
        OutputFormat::Table => to_table(&cycle, at, &writer) + &conditions_table(&statuses),
    };
    args.output.write(&out)?;
    // Nothing was read: the output above holds no usage at all.
    if cycle.every_query_failed() {
        anyhow::bail!("every metric query failed (see the warnings above)");
    }
    Ok(())
}

/// Every policy of the directory with its status as the cycle wrote it, in snapshot order.
fn policy_statuses<'a>(
    snapshot: &'a crate::core::snapshot::Snapshot,
    writer: &'a crate::writers::memory::MemoryWriter,
) -> Vec<(&'a PolicyId, Option<&'a crate::api::PolicyStatus>)> {
    let gpu = snapshot.gpu_policies.iter().map(|p| &p.id);
    let rs = snapshot.rightsizing_policies.iter().map(|p| &p.id);
    gpu.chain(rs)
        .map(|id| (id, writer.policy_status(id)))
        .collect()
}

/// The top-level `policies` array: each policy's conditions as written to its status.
fn policies_json(statuses: &[(&PolicyId, Option<&crate::api::PolicyStatus>)]) -> Value {
    let entries: Vec<Value> = statuses
        .iter()
        .map(|(id, status)| {
            // By type: the order a status holds them in depends on the order they were first set.
            let mut sorted: Vec<_> = status.iter().flat_map(|s| &s.conditions).collect();
            sorted.sort_by(|a, b| a.type_.cmp(&b.type_));
            let conditions: Vec<Value> = sorted
                .into_iter()
                .map(|c| {
                    json!({"type": c.type_, "status": c.status, "reason": c.reason, "message": c.message})
                })
                .collect();
            json!({"kind": id.kind, "namespace": id.namespace, "name": id.name, "conditions": conditions})
        })
        .collect();
    Value::Array(entries)
}

/// The conditions that are not `True`, printed under the recommendations.
fn conditions_table(statuses: &[(&PolicyId, Option<&crate::api::PolicyStatus>)]) -> String {
    let mut s = String::new();
    for (id, status) in statuses {
        for c in status.iter().flat_map(|s| &s.conditions) {
            if c.status != "True" {
                let _ = writeln!(
                    s,
                    "{id}: {}={} ({}): {}",
                    c.type_, c.status, c.reason, c.message
                );
            }
        }
    }
    if s.is_empty() {
        s
    } else {
        format!("\nPolicy conditions\n{s}")
    }
}

fn policy_json(p: Option<&PolicyId>) -> Value {
    match p {
        Some(p) => json!({"kind": p.kind, "namespace": p.namespace, "name": p.name}),
        None => Value::Null,
    }
}

fn gpu_json(r: Option<&WorkloadResult>) -> Value {
    let Some(r) = r else {
        return json!({"action": "none", "drivingMetric": null, "containers": {}});
    };
    let containers: serde_json::Map<String, Value> = r
        .containers
        .iter()
        .map(|(c, o)| {
            (
                c.clone(),
                json!({"current": o.current, "baseline": o.baseline, "recommended": o.recommended}),
            )
        })
        .collect();
    json!({
        "action": r.action.as_str(),
        "drivingMetric": r.driving_metric.map(|d| d.as_str()),
        "containers": containers,
    })
}

fn quantity(v: Option<i64>, format: fn(i64) -> String) -> Value {
    v.map_or(Value::Null, |v| Value::String(format(v)))
}

fn resources_json(rs: Option<&RsResult>) -> Value {
    let Some(Ok(o)) = rs.map(|r| &r.outcome) else {
        return json!({});
    };
    let m: serde_json::Map<String, Value> = o
        .containers
        .iter()
        .map(|c| {
            (
                c.name.clone(),
                json!({
                    "cpu": {
                        "current": quantity(c.current.cpu_millis, format_cpu_millis),
                        "recommended": quantity(c.recommended.cpu_millis, format_cpu_millis),
                        "limit": limit_json(
                            c.current_limits.cpu_millis,
                            c.recommended_limits.cpu_millis,
                            format_cpu_millis,
                        ),
                    },
                    "memory": {
                        "current": quantity(c.current.memory_bytes, format_memory_bytes),
                        "recommended": quantity(c.recommended.memory_bytes, format_memory_bytes),
                        "limit": limit_json(
                            c.current_limits.memory_bytes,
                            c.recommended_limits.memory_bytes,
                            format_memory_bytes,
                        ),
                    },
                }),
            )
        })
        .collect();
    Value::Object(m)
}

/// A container's limit of one resource (docs/policies.md#limits): null where it has none (kerf
/// never adds one).
fn limit_json(current: Option<i64>, recommended: Option<i64>, fmt: fn(i64) -> String) -> Value {
    match current {
        None => Value::Null,
        Some(_) => json!({
            "current": quantity(current, fmt),
            "recommended": quantity(recommended, fmt),
        }),
    }
}

fn hpa_json(rs: Option<&RsResult>) -> Value {
    let Some(h) = rs
        .and_then(|r| r.outcome.as_ref().ok())
        .and_then(|o| o.hpa.as_ref())
    else {
        return Value::Null;
    };
    json!({
        "name": h.name,
        "resource": h.resource.map(|r| r.as_str()),
        "targetBefore": h.target_before,
        "targetAfter": h.target_after,
        "skipReason": h.skip_reason.map(|s| s.as_str()),
        "blocked": h.blocked,
        "reason": h.reason,
    })
}

/// Whether the cluster serves in-place resize, as the output's `inPlaceResize` says it.
fn resize_support(support: ResizeSupport) -> &'static str {
    match support {
        ResizeSupport::Served => "served",
        ResizeSupport::NotServed => "notServed",
        // A directory: planned as a cluster that serves `pods/resize` would.
        ResizeSupport::Assumed => "assumed",
        ResizeSupport::Unknown => "unknown",
    }
}

/// How the workload's change reaches its pods, as the write planning recorded it in its
/// RightsizingRecommendation (GPU and CPU/memory alike).
fn apply_method(status: Option<&RecommendationStatus>) -> ApplyMethod {
    status
        .and_then(|s| s.apply_method)
        .unwrap_or(ApplyMethod::None)
}

/// The RightsizingRecommendation's status the cycle left for the workload `key`.
fn recorded_status<'a>(
    writer: &'a MemoryWriter,
    key: &WorkloadKey,
) -> Option<&'a RecommendationStatus> {
    writer
        .recommendation_named(&key.namespace, &recommendation_name(key))
        .and_then(|r| r.status.as_deref())
}

/// One `recommendations[]` entry.
pub fn workload_json(
    key: &WorkloadKey,
    gpu: Option<&WorkloadResult>,
    rs: Option<&RsResult>,
    status: Option<&RecommendationStatus>,
    support: ResizeSupport,
) -> Value {
    let policy = gpu
        .and_then(|g| g.main_policy())
        .or_else(|| rs.map(|r| &r.policy));
    let mut reasons: Vec<String> = gpu.map(|g| g.reasons.clone()).unwrap_or_default();
    let outcome = rs.map(|r| &r.outcome);
    match outcome {
        Some(Ok(o)) => {
            if !o.message.is_empty() {
                reasons.push(o.message.clone());
            }
            reasons.extend(o.reasons.iter().cloned());
        }
        Some(Err(e)) => reasons.push(format!(
            "{}: unusable policy: {e}",
            rs.map(|r| r.policy.to_string()).unwrap_or_default()
        )),
        _ => {}
    }
    if rs.is_some_and(|r| r.metrics_unavailable) {
        reasons.push("CPU/memory metrics unavailable: nothing is applied this cycle".into());
    }
    if let Some(f) = status
        .and_then(|s| s.resize.as_ref())
        .and_then(|r| r.fallback.as_ref())
    {
        reasons.push(format!(
            "in-place resize fell back to a rollout ({}): {}",
            f.reason, f.message
        ));
    }
    let method = apply_method(status);
    if method == ApplyMethod::Admission {
        reasons.push(crate::core::writes::method::REASON_JOB_CLUSTER.into());
    }
    if method == ApplyMethod::InPlace && support == ResizeSupport::Assumed {
        reasons.push(
            "resized in place as a cluster serving pods/resize (Kubernetes 1.33+) would: no API \
             server was asked"
                .into(),
        );
    }
    let ok = outcome.and_then(|o| o.as_ref().ok());
    json!({
        "namespace": key.namespace,
        "kind": key.kind.as_str(),
        "name": key.name,
        "policy": policy_json(policy),
        "gpu": gpu_json(gpu),
        "resources": resources_json(rs),
        "hpa": hpa_json(rs),
        "riskFlags": ok.map(|o| o.risk_flags.clone()).unwrap_or_default(),
        "savings": ok.map(|o| serde_json::to_value(&o.savings).unwrap_or(Value::Null)).unwrap_or_else(|| json!({})),
        "phase": ok.map(|o| serde_json::to_value(o.phase).unwrap_or(Value::Null)),
        // The phase's reason (`HPACoupled`, `VPAConflict`, …), as the recommendation's status says.
        "reason": ok.and_then(|o| o.reason.clone()),
        "applyMethod": method.as_str(),
        // How the template write is sent (docs/gitops.md#how-kerf-writes); null: none.
        "writeMethod": status.and_then(|s| s.write_method).map(WriteMethod::as_str),
        "writeMethodReason": status.and_then(|s| s.write_method_reason.clone()),
        "eviction": status.and_then(|s| s.eviction.as_ref()).map(|e| json!({
            "podsToReplace": e.pods_to_replace,
            "lastEvictionTime": e.last_eviction_time,
            "lastEvictedPod": e.last_evicted_pod,
            "waiting": e.waiting,
        })),
        "resize": status.and_then(|s| s.resize.as_ref()).map(|r| json!({
            "podsResized": r.pods_resized,
            "podsPending": r.pods_pending,
            "podsInfeasible": r.pods_infeasible,
            "podsWaiting": r.pods_waiting,
            "fallback": r.fallback.as_ref().map(|f| f.reason.clone()),
        })),
        "reasons": reasons,
    })
}

/// One entry per workload, in the cycle's order: every GPU-policy workload, then the
/// CPU/memory-only ones.
pub fn to_json(cycle: &CycleOutput) -> Value {
    to_json_recorded(cycle, &MemoryWriter::new(), &Snapshot::default())
}

/// The workload's owner chain, topmost first (docs/workloads.md): the owners its pods sit
/// under, or the workload alone.
fn owners_json(key: &WorkloadKey, w: Option<&Workload>) -> Value {
    let link = |api_version: &str, kind: &str, name: &str| json!({"kind": kind, "apiVersion": api_version, "name": name});
    match w.map(|w| &w.ownership.chain).filter(|c| !c.is_empty()) {
        Some(chain) => chain
            .iter()
            .map(|l| link(&l.api_version, &l.kind, &l.name))
            .collect(),
        None => json!([link(
            key.kind.api_version(),
            key.kind.kind_name(),
            &key.name
        )]),
    }
}

/// [`to_json`] with each workload's apply method and resize progress as `writer` recorded
/// them in its RightsizingRecommendation.
pub fn to_json_recorded(cycle: &CycleOutput, writer: &MemoryWriter, snapshot: &Snapshot) -> Value {
    let support = snapshot.resize;
    // Looked up once per workload: a cluster read with --kubeconfig has many.
    let by_key: crate::core::hash::HashMap<&WorkloadKey, &Workload> =
        snapshot.workloads.iter().map(|w| (&w.key, &**w)).collect();
    let entries: Vec<Value> = cycle
        .workloads
        .iter()
        .map(|w| {
            let status = recorded_status(writer, w.key());
            let mut entry = workload_json(
                w.key(),
                w.gpu.as_deref(),
                w.resources.as_deref(),
                status,
                support,
            );
            entry["owners"] = owners_json(w.key(), by_key.get(w.key()).copied());
            entry
        })
        .collect();
    json!({"recommendations": entries})
}

fn num(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), crate::core::quantity::format_gpu)
}

pub fn to_table(cycle: &CycleOutput, at: Timestamp, writer: &MemoryWriter) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "GPU recommendations at {}",
        crate::core::model::rfc3339_secs(at)
    );
    let _ = writeln!(
        s,
        "{:<28} {:<12} {:<10} {:<8} {:>8} {:>8} {:>11}  POLICY",
        "WORKLOAD", "CONTAINER", "ACTION", "DRIVER", "CURRENT", "BASELINE", "RECOMMENDED"
    );
    for r in cycle.gpu_results() {
        let name = format!("{}/{}/{}", r.key.namespace, r.key.kind, r.key.name);
        let policy = r
            .policies
            .first()
            .map(|p| p.to_string())
            .unwrap_or_default();
        let driver = r.driving_metric.map_or("-", |d| d.as_str());
        if r.containers.is_empty() {
            let _ = writeln!(
                s,
                "{name:<28} {:<12} {:<10} {driver:<8} {:>8} {:>8} {:>11}  {policy}",
                "-",
                r.action.as_str(),
                "-",
                "-",
                "-"
            );
        }
        for (c, o) in &r.containers {
            let _ = writeln!(
                s,
                "{name:<28} {c:<12} {:<10} {driver:<8} {:>8} {:>8} {:>11}  {policy}",
                r.action.as_str(),
                num(o.current),
                num(o.baseline),
                num(o.recommended),
            );
        }
        for reason in &r.reasons {
            let _ = writeln!(s, "    - {reason}");
        }
    }
    if cycle.gpu_results().next().is_none() {
        let _ = writeln!(s, "(no workload is matched by a GPU reactive policy)");
    }
    if cycle.resource_results().next().is_some() {
        let _ = writeln!(
            s,
            "\nCPU/memory recommendations (request/limit, - where none)"
        );
        let _ = writeln!(
            s,
            "{:<28} {:<12} {:>11} {:>11} {:>13} {:>13}  {:<11} {:<8} {:<24} RISK",
            "WORKLOAD", "CONTAINER", "CPU", "→ CPU", "MEMORY", "→ MEMORY", "PHASE", "METHOD", "HPA"
        );
    }
    for r in cycle.resource_results() {
        let name = format!("{}/{}/{}", r.key.namespace, r.key.kind, r.key.name);
        let o = match &r.outcome {
            Ok(o) => o,
            Err(e) => {
                let _ = writeln!(s, "{name:<28} unusable policy {}: {e}", r.policy);
                continue;
            }
        };
        let phase = serde_json::to_value(o.phase)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        let hpa = o.hpa.as_ref().map_or_else(
            || "-".to_string(),
            |h| {
                let res = h.resource.map_or("-", |r| r.as_str());
                let before = h.target_before.map_or("-".into(), |t| format!("{t}%"));
                match (h.target_after, h.skip_reason, h.blocked) {
                    (Some(after), None, false) => format!("{} {res} {before}→{after}%", h.name),
                    (_, Some(skip), _) => format!("{} {res} {before} {}", h.name, skip.as_str()),
                    (_, None, true) => format!("{} {res} {before} blocked", h.name),
                    _ => format!("{} {res} {before}", h.name),
                }
            },
        );
        let method = apply_method(recorded_status(writer, &r.key)).as_str();
        for c in &o.containers {
            let [cpu, to_cpu, memory, to_memory] =
                crate::views::labels::resource_cells(c).map(|v| v.unwrap_or_else(|| "-".into()));
            let _ = writeln!(
                s,
                "{name:<28} {:<12} {cpu:>11} {to_cpu:>11} {memory:>13} {to_memory:>13}  {phase:<11} {method:<8} {hpa:<24} {}",
                c.name,
                o.risk_flags.join(","),
            );
        }
        let message = (!o.message.is_empty()).then_some(&o.message);
        for reason in message.into_iter().chain(&o.reasons) {
            let _ = writeln!(s, "    - {reason}");
        }
    }
    s
}
