//! The replay's three outputs: the JSON contract (docs/simulate.md), the table, and the
//! self-contained HTML report (one inline SVG chart per workload).

use std::fmt::Write as _;

use serde_json::{Map, Value, json};

use super::{Hours, Report, WorkloadReport};
use crate::core::model::format_gpu;
use crate::core::quantity::{format_cpu_millis, format_memory_bytes};
use crate::core::recommenders::gpu::engine::Action;
use crate::server::chart::{self, Chart, Line, LineStyle, Marker, MarkerKind, esc};

fn time(t: jiff::Timestamp) -> String {
    crate::core::model::rfc3339_secs(t)
}

/// `90s` → `1m30s`: the `--every` duration as the policies write durations.
pub fn format_duration(seconds: i64) -> String {
    let mut s = String::new();
    let mut rest = seconds;
    for (unit, len) in [("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1)] {
        if rest >= len {
            let _ = write!(s, "{}{unit}", rest / len);
            rest %= len;
        }
    }
    if s.is_empty() { "0s".into() } else { s }
}

/// Hours rounded to 4 decimals (a stable, diffable contract).
fn round(v: f64) -> f64 {
    (v * 10_000.0).round() / 10_000.0
}

fn hours_json(h: &Hours) -> Value {
    json!({
        "allocatedAsIs": round(h.allocated_as_is),
        "allocatedWithKerf": round(h.allocated_with_kerf),
        "used": round(h.used),
    })
}

fn action(a: Action) -> &'static str {
    match a {
        Action::Upsize => "upsize",
        _ => "scaleBack",
    }
}

fn workload_json(w: &WorkloadReport) -> Value {
    let changes: Vec<Value> = w
        .changes
        .iter()
        .map(|c| {
            let gpu: Map<String, Value> = c
                .gpu
                .iter()
                .map(|(k, v)| (k.clone(), format_gpu(*v).into()))
                .collect();
            json!({
                "at": time(c.at),
                "gpu": gpu,
                "action": action(c.action),
                "driver": c.driver.map(|d| d.as_str()),
                "reason": c.reason,
            })
        })
        .collect();
    let resource_changes: Vec<Value> = w
        .resource_changes
        .iter()
        .map(|c| {
            let requests: Map<String, Value> = c
                .requests
                .iter()
                .map(|(k, (cpu, mem))| {
                    let mut m = Map::new();
                    if let Some(cpu) = cpu {
                        m.insert("cpu".into(), format_cpu_millis(*cpu).into());
                    }
                    if let Some(mem) = mem {
                        m.insert("memory".into(), format_memory_bytes(*mem).into());
                    }
                    (k.clone(), Value::Object(m))
                })
                .collect();
            json!({"at": time(c.at), "requests": requests, "hpaTarget": c.hpa_target})
        })
        .collect();
    json!({
        "namespace": w.key.namespace,
        "kind": w.key.kind.as_str(),
        "name": w.key.name,
        "policy": w.policy.as_ref().map(|p| p.to_string()),
        "notes": w.notes,
        "changes": changes,
        "resourceChanges": resource_changes,
        "rollouts": w.rollouts,
        "gpuHours": hours_json(&w.gpu_hours),
        "cpuCoreHours": hours_json(&w.cpu_core_hours),
        "memoryGiBHours": hours_json(&w.memory_gib_hours),
    })
}

/// `-o json`: the stable contract.
pub fn to_json(r: &Report) -> Value {
    json!({
        "from": time(r.from),
        "to": time(r.to),
        "every": format_duration(r.every_seconds),
        "cycles": r.cycles,
        "workloads": r.workloads.iter().map(workload_json).collect::<Vec<_>>(),
    })
}

fn name(w: &WorkloadReport) -> String {
    format!("{}/{}/{}", w.key.namespace, w.key.kind, w.key.name)
}

/// GPU-hours with kerf minus as is (negative: kerf would have saved).
fn difference(h: &Hours) -> f64 {
    h.allocated_with_kerf - h.allocated_as_is
}

fn totals(r: &Report) -> (usize, usize, Hours) {
    let mut h = Hours::default();
    for w in &r.workloads {
        h.allocated_as_is += w.gpu_hours.allocated_as_is;
        h.allocated_with_kerf += w.gpu_hours.allocated_with_kerf;
        h.used += w.gpu_hours.used;
    }
    let changes = r.workloads.iter().map(|w| w.changes.len()).sum();
    let rollouts = r.workloads.iter().map(|w| w.rollouts).sum();
    (changes, rollouts, h)
}

/// `-o table` (the default).
pub fn to_table(r: &Report) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "Replay {} → {} every {}: {} cycles",
        time(r.from),
        time(r.to),
        format_duration(r.every_seconds),
        r.cycles
    );
    let _ = writeln!(
        s,
        "{:<28} {:>7} {:>8} {:>12} {:>12} {:>10} {:>11}",
        "WORKLOAD", "CHANGES", "ROLLOUTS", "GPU-H AS IS", "GPU-H KERF", "GPU-H USED", "DIFFERENCE"
    );
    let row = |s: &mut String, label: &str, changes: usize, rollouts: usize, h: &Hours| {
        let _ = writeln!(
            s,
            "{label:<28} {changes:>7} {rollouts:>8} {:>12.2} {:>12.2} {:>10.2} {:>+11.2}",
            h.allocated_as_is,
            h.allocated_with_kerf,
            h.used,
            difference(h)
        );
    };
    for w in &r.workloads {
        row(&mut s, &name(w), w.changes.len(), w.rollouts, &w.gpu_hours);
    }
    let (changes, rollouts, h) = totals(r);
    row(&mut s, "TOTAL", changes, rollouts, &h);
    for w in &r.workloads {
        for n in &w.notes {
            let _ = writeln!(s, "note: {}: {n}", name(w));
        }
    }
    s
}

/// The workload's chart: recorded usage per signal, real and simulated allocation, thresholds
/// and a marker per change.
pub fn workload_chart(w: &WorkloadReport, from: i64, to: i64) -> Chart {
    let mut lines = Vec::new();
    for (i, (signal, points)) in w.chart.usage.iter().enumerate() {
        lines.push(Line {
            label: format!("{} used", signal.as_str()),
            color: chart::USAGE_COLORS[i % 2],
            style: LineStyle::Samples,
            points: chart::downsample(points, 720),
        });
    }
    lines.push(Line {
        label: "allocation as is".into(),
        color: chart::REAL_COLOR,
        style: LineStyle::Steps,
        points: w.chart.real.clone(),
    });
    lines.push(Line {
        label: "allocation with kerf".into(),
        color: chart::SIMULATED_COLOR,
        style: LineStyle::Steps,
        points: w.chart.simulated.clone(),
    });
    lines.extend(threshold_lines(&w.chart.thresholds, &w.chart.simulated));
    let markers = w
        .changes
        .iter()
        .map(|c| Marker {
            t: c.at.as_second(),
            value: c.after,
            kind: if c.action == Action::Upsize {
                MarkerKind::Upsize
            } else {
                MarkerKind::ScaleBack
            },
            title: format!(
                "{} {} → {} GPU per pod ({}): {}",
                time(c.at),
                format_gpu(c.before),
                format_gpu(c.after),
                c.driver.map_or("-", |d| d.as_str()),
                c.reason
            ),
        })
        .collect();
    Chart {
        id: name(w),
        unit: "GPUs per pod".into(),
        from,
        to,
        lines,
        markers,
    }
}

/// Upsize and scale-back thresholds over an allocation: one line per distinct percent.
pub fn threshold_lines(
    thresholds: &[(crate::api::Signal, f64, f64)],
    allocation: &[(i64, f64)],
) -> Vec<Line> {
    let mut out = Vec::new();
    let mut seen: Vec<(bool, f64)> = Vec::new();
    for (signal, up, back) in thresholds {
        for (is_up, pct) in [(true, *up), (false, *back)] {
            if seen
                .iter()
                .any(|(u, p)| *u == is_up && (p - pct).abs() < 1e-9)
            {
                continue;
            }
            seen.push((is_up, pct));
            let others_differ = thresholds.iter().any(|(_, u, b)| {
                let other = if is_up { *u } else { *b };
                (other - pct).abs() > 1e-9
            });
            let which = if others_differ {
                format!(" ({})", signal.as_str())
            } else {
                String::new()
            };
            out.push(Line {
                label: format!(
                    "{} {}%{which}",
                    if is_up {
                        "upsize at"
                    } else {
                        "scale back below"
                    },
                    pct
                ),
                color: if is_up {
                    chart::UPSIZE_COLOR
                } else {
                    chart::SCALE_BACK_COLOR
                },
                style: LineStyle::Dashed,
                points: allocation
                    .iter()
                    .map(|(t, v)| (*t, v * pct / 100.0))
                    .collect(),
            });
        }
    }
    out
}

pub const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:24px;max-width:1200px;color:#222}\
table{border-collapse:collapse;margin:12px 0}th,td{border:1px solid #ddd;padding:4px 8px;text-align:right}\
th:first-child,td:first-child,td.policy{text-align:left}th{vertical-align:bottom}tr.total td{font-weight:bold;background:#f3f3f3}\
section{margin:28px 0}code{background:#eee;padding:0 3px}.note{color:#8a5a00}\
td.reason{text-align:left;max-width:640px}";

/// `-o html`: one self-contained page.
pub fn to_html(r: &Report) -> String {
    let mut s = String::new();
    let _ = write!(
        s,
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>kerf simulate</title>\
         <style>{STYLE}</style></head><body><h1>kerf simulate</h1>\
         <p>Replay of <b>{}</b> → <b>{}</b> every {} (<span id=\"cycles\">{}</span> cycles) through kerf's reconcile loop. \
         Negative difference: kerf would have allocated fewer GPU-hours.</p>",
        time(r.from),
        time(r.to),
        format_duration(r.every_seconds),
        r.cycles
    );
    s.push_str(
        "<table id=\"summary\"><thead><tr><th>workload</th><th>policy</th><th>changes</th><th>rollouts</th>\
         <th>GPU-h as is</th><th>GPU-h with kerf</th><th>GPU-h used</th><th>difference</th>\
         <th>CPU core-h as&nbsp;is → kerf</th><th>memory GiB-h as&nbsp;is → kerf</th></tr></thead><tbody>",
    );
    for w in &r.workloads {
        let _ = write!(
            s,
            "<tr><td><a href=\"#w-{}\">{}</a></td><td class=\"policy\">{}</td><td>{}</td><td>{}</td><td>{:.2}</td><td>{:.2}</td><td>{:.2}</td><td>{:+.2}</td><td>{:.2} → {:.2}</td><td>{:.2} → {:.2}</td></tr>",
            esc(&anchor(w)),
            esc(&name(w)),
            esc(&w.policy.as_ref().map(|p| p.to_string()).unwrap_or_default()),
            w.changes.len(),
            w.rollouts,
            w.gpu_hours.allocated_as_is,
            w.gpu_hours.allocated_with_kerf,
            w.gpu_hours.used,
            difference(&w.gpu_hours),
            w.cpu_core_hours.allocated_as_is,
            w.cpu_core_hours.allocated_with_kerf,
            w.memory_gib_hours.allocated_as_is,
            w.memory_gib_hours.allocated_with_kerf,
        );
    }
    let (changes, rollouts, h) = totals(r);
    let _ = write!(
        s,
        "</tbody><tfoot><tr class=\"total\"><td>total</td><td></td><td>{changes}</td><td>{rollouts}</td>\
         <td>{:.2}</td><td>{:.2}</td><td>{:.2}</td><td id=\"total-difference\">{:+.2}</td><td></td><td></td></tr></tfoot></table>",
        h.allocated_as_is,
        h.allocated_with_kerf,
        h.used,
        difference(&h)
    );
    for w in &r.workloads {
        let _ = write!(
            s,
            "<section id=\"w-{}\"><h2>{}</h2>",
            esc(&anchor(w)),
            esc(&name(w))
        );
        for n in &w.notes {
            let _ = write!(s, "<p class=\"note\">{}</p>", esc(n));
        }
        s.push_str(&chart::render(&workload_chart(
            w,
            r.from.as_second(),
            r.to.as_second(),
        )));
        if !w.changes.is_empty() {
            s.push_str("<table class=\"changes\"><thead><tr><th>at</th><th>action</th><th>driver</th><th>GPUs</th><th>reason</th></tr></thead><tbody>");
            for c in &w.changes {
                let gpu: Vec<String> = c
                    .gpu
                    .iter()
                    .map(|(k, v)| format!("{k} {}", format_gpu(*v)))
                    .collect();
                let _ = write!(
                    s,
                    "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"reason\">{}</td></tr>",
                    time(c.at),
                    action(c.action),
                    c.driver.map_or("-", |d| d.as_str()),
                    esc(&gpu.join(", ")),
                    esc(&c.reason)
                );
            }
            s.push_str("</tbody></table>");
        }
        if !w.resource_changes.is_empty() {
            s.push_str("<table class=\"resource-changes\"><thead><tr><th>at</th><th>requests</th><th>HPA target</th></tr></thead><tbody>");
            for c in &w.resource_changes {
                let req: Vec<String> = c
                    .requests
                    .iter()
                    .map(|(k, (cpu, mem))| {
                        format!(
                            "{k}: cpu {}, memory {}",
                            cpu.map_or("-".into(), format_cpu_millis),
                            mem.map_or("-".into(), format_memory_bytes)
                        )
                    })
                    .collect();
                let _ = write!(
                    s,
                    "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
                    time(c.at),
                    esc(&req.join("; ")),
                    c.hpa_target.map_or("-".into(), |t| format!("{t}%"))
                );
            }
            s.push_str("</tbody></table>");
        }
        s.push_str("</section>");
    }
    s.push_str("</body></html>\n");
    s
}

fn anchor(w: &WorkloadReport) -> String {
    format!("{}-{}-{}", w.key.namespace, w.key.kind, w.key.name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_print_as_policies_write_them() {
        assert_eq!(format_duration(60), "1m");
        assert_eq!(format_duration(90), "1m30s");
        assert_eq!(format_duration(86_400 + 3_600), "1d1h");
        assert_eq!(format_duration(15), "15s");
    }
}
