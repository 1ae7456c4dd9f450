//! `kerf recommend`: evaluate a manifests directory against a metric source and print the
//! recommendations (`-o json` is a stable contract; `-o table` is for people).

use std::fmt::Write as _;

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use super::{OutputFormat, RecommendArgs};
use crate::core::evaluate::WorkloadResult;
use crate::core::model::PolicyId;
use crate::pipeline::CycleOutput;

pub async fn run(args: RecommendArgs) -> anyhow::Result<()> {
    let at = super::parse_at(args.at.as_deref())?;
    let manifests = crate::standalone::load_dir(&args.manifests)?;
    for note in &manifests.notes {
        tracing::debug!("{note}");
    }
    let source = super::metric_source(&args.source, &manifests.snapshot.global).await?;
    let cycle =
        crate::pipeline::run_gpu_cycle(&manifests.snapshot, &source, at, args.step_seconds).await;
    for w in &cycle.warnings {
        eprintln!("warning: {w}");
    }
    for (pi, r) in &cycle.prometheus {
        if let Err(e) = r {
            eprintln!("warning: {}: {e}", manifests.snapshot.gpu_policies[*pi].id);
        }
    }
    let out = match args.output {
        OutputFormat::Json => serde_json::to_string_pretty(&to_json(&cycle))? + "\n",
        OutputFormat::Table => to_table(&cycle, at),
    };
    print!("{out}");
    Ok(())
}

fn policy_json(p: Option<&PolicyId>) -> Value {
    match p {
        Some(p) => json!({"kind": p.kind, "namespace": p.namespace, "name": p.name}),
        None => Value::Null,
    }
}

/// One `recommendations[]` entry.
pub fn workload_json(r: &WorkloadResult) -> Value {
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
        "namespace": r.key.namespace,
        "kind": r.key.kind.as_str(),
        "name": r.key.name,
        "policy": policy_json(r.policies.first()),
        "gpu": {
            "action": r.action.as_str(),
            "drivingMetric": r.driving_metric.map(|d| d.as_str()),
            "containers": containers,
        },
        "reasons": r.reasons,
    })
}

pub fn to_json(cycle: &CycleOutput) -> Value {
    json!({"recommendations": cycle.results.iter().map(workload_json).collect::<Vec<_>>()})
}

fn num(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), crate::core::model::format_gpu)
}

pub fn to_table(cycle: &CycleOutput, at: DateTime<Utc>) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "GPU recommendations at {}",
        at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    );
    let _ = writeln!(
        s,
        "{:<28} {:<12} {:<10} {:<8} {:>8} {:>8} {:>11}  POLICY",
        "WORKLOAD", "CONTAINER", "ACTION", "DRIVER", "CURRENT", "BASELINE", "RECOMMENDED"
    );
    for r in &cycle.results {
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
                "{name:<28} {:<12} {:<10} {driver:<8} {:<14} {:>8} {:>8} {:>11}  {policy}",
                "-",
                r.action.as_str(),
                "",
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
    if cycle.results.is_empty() {
        let _ = writeln!(s, "(no workload is matched by a GPU reactive policy)");
    }
    s
}
