//! The replay's three outputs: the JSON contract (docs/simulate.md), the table, and the
//! self-contained HTML report (one inline SVG chart per workload).

use std::fmt::Write as _;

use serde_json::{Map, Value, json};

use super::{Coverage, Hours, Report, ResourceChart, WorkloadReport};
use crate::core::quantity::format_gpu;
use crate::core::quantity::{format_cpu_millis, format_memory_bytes};
use crate::core::recommenders::gpu::engine::Action;
use crate::views::chart::{self, Chart, Line, LineStyle, Marker, MarkerKind, esc, threshold_lines};
use crate::views::labels::format_duration;

fn time(t: jiff::Timestamp) -> String {
    crate::core::model::rfc3339_secs(t)
}

/// Hours rounded to 4 decimals (a stable, diffable contract).
fn round(v: f64) -> f64 {
    (v * 10_000.0).round() / 10_000.0
}

fn coverage_json(c: Option<Coverage>) -> Value {
    c.map_or(
        Value::Null,
        |c| json!({"from": time(c.from), "to": time(c.to), "cycles": c.cycles}),
    )
}

fn hours_json(h: &Hours) -> Value {
    json!({
        "allocatedAsIs": round(h.allocated_as_is),
        "allocatedWithKerf": round(h.allocated_with_kerf),
        "used": round(h.used),
        "coverage": coverage_json(h.coverage),
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
        "resizedInPlace": w.resized_in_place,
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
        "coverage": coverage_json(r.coverage),
        "workloads": r.workloads.iter().map(workload_json).collect::<Vec<_>>(),
    })
}

fn name(w: &WorkloadReport) -> String {
    format!("{}/{}/{}", w.key.namespace, w.key.kind, w.key.name)
}

/// Hours with kerf minus as is (negative: kerf would have saved).
fn difference(h: &Hours) -> f64 {
    h.allocated_with_kerf - h.allocated_as_is
}

/// The hours of every workload added up, per resource (GPU: workloads a GPU policy covers);
/// the coverage is the report's.
fn totals(r: &Report) -> (usize, usize, [Hours; 3]) {
    let mut h = [Hours::default(); 3];
    for w in &r.workloads {
        for (i, x) in resources(w).into_iter().enumerate() {
            let Some(x) = x.filter(|x| x.coverage.is_some()) else {
                continue;
            };
            h[i].allocated_as_is += x.allocated_as_is;
            h[i].allocated_with_kerf += x.allocated_with_kerf;
            h[i].used += x.used;
            h[i].coverage = r.coverage;
        }
    }
    let changes = r.workloads.iter().map(all_changes).sum();
    let rollouts = r.workloads.iter().map(|w| w.rollouts).sum();
    (changes, rollouts, h)
}

/// GPU changes and CPU/memory (requests, HPA target) changes: what the table counts.
fn all_changes(w: &WorkloadReport) -> usize {
    w.changes.len() + w.resource_changes.len()
}

/// GPU, CPU and memory hours of a workload; no GPU figures without a GPU policy.
fn resources(w: &WorkloadReport) -> [Option<&Hours>; 3] {
    [
        w.gpu_policy.then_some(&w.gpu_hours),
        Some(&w.cpu_core_hours),
        Some(&w.memory_gib_hours),
    ]
}

const RESOURCE_NAMES: [&str; 3] = ["GPU", "CPU", "memory"];

/// A time of the replay, as short as the replay allows (`11:40` within a day).
fn moment(t: jiff::Timestamp, r: &Report) -> String {
    if r.to.as_second() - r.from.as_second() <= 86_400 {
        let s = t.strftime("%H:%M:%S").to_string();
        s.strip_suffix(":00").map(str::to_string).unwrap_or(s)
    } else {
        t.strftime("%Y-%m-%d %H:%M").to_string()
    }
}

fn span(c: &Coverage, r: &Report) -> String {
    format!("{}–{}", moment(c.from, r), moment(c.to, r))
}

/// Which part of the replay the report's data covers, in one sentence.
pub fn coverage_line(r: &Report) -> String {
    match &r.coverage {
        None => format!(
            "No recorded usage in {}–{}: no hours are counted.",
            moment(r.from, r),
            moment(r.to, r)
        ),
        Some(c) if c.cycles == r.cycles => format!(
            "Recorded usage covers the whole replay ({} cycles).",
            r.cycles
        ),
        Some(c) => format!(
            "Recorded usage covers {} of {}–{} ({} of {} cycles): allocated and used hours are counted over the cycles each workload's data covers.",
            span(c, r),
            moment(r.from, r),
            moment(r.to, r),
            c.cycles,
            r.cycles
        ),
    }
}

/// Per resource of the workload, the span its recorded usage covers.
pub fn workload_coverage(w: &WorkloadReport, r: &Report) -> String {
    let parts: Vec<String> = resources(w)
        .into_iter()
        .zip(RESOURCE_NAMES)
        .filter_map(|(h, name)| {
            let h = h?;
            Some(match &h.coverage {
                Some(c) => format!("{name} {} ({} cycles)", span(c, r), c.cycles),
                None => format!("{name} no data"),
            })
        })
        .collect();
    format!("recorded usage: {}", parts.join(", "))
}

fn cell(h: Option<&Hours>, v: impl Fn(&Hours) -> f64, signed: bool) -> String {
    match h.filter(|h| h.coverage.is_some()) {
        Some(h) if signed => format!("{:+.2}", v(h)),
        Some(h) => format!("{:.2}", v(h)),
        None => "-".into(),
    }
}

/// `-o table` (the default): per workload its changes and rollouts, then GPU-hours (as is,
/// with kerf, used, difference), CPU core-hours and memory GiB-hours (as is, with kerf, used);
/// `-` where a workload has no such figure (no GPU policy, no recorded usage).
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
    let _ = writeln!(s, "{}", coverage_line(r));
    let groups = format!(
        "{:<47}{:<33}{:<25}{}",
        "", "GPU-hours", "CPU core-hours", "memory GiB-hours"
    );
    let _ = writeln!(s, "{}", groups.trim_end());
    let _ = writeln!(
        s,
        "{:<28} {:>7} {:>8}  {:>7} {:>7} {:>7} {:>7}  {:>7} {:>7} {:>7}  {:>7} {:>7} {:>7}",
        "WORKLOAD",
        "CHANGES",
        "ROLLOUTS",
        "AS IS",
        "KERF",
        "USED",
        "DIFF",
        "AS IS",
        "KERF",
        "USED",
        "AS IS",
        "KERF",
        "USED"
    );
    let row = |s: &mut String,
               label: &str,
               changes: usize,
               rollouts: usize,
               [gpu, cpu, mem]: [Option<&Hours>; 3]| {
        let _ = write!(s, "{label:<28} {changes:>7} {rollouts:>8}  ");
        for (h, with_difference) in [(gpu, true), (cpu, false), (mem, false)] {
            let _ = write!(
                s,
                "{:>7} {:>7} {:>7}",
                cell(h, |h| h.allocated_as_is, false),
                cell(h, |h| h.allocated_with_kerf, false),
                cell(h, |h| h.used, false)
            );
            if with_difference {
                let _ = write!(s, " {:>7}", cell(h, difference, true));
            }
            s.push_str("  ");
        }
        s.truncate(s.trim_end().len());
        s.push('\n');
    };
    for w in &r.workloads {
        row(&mut s, &name(w), all_changes(w), w.rollouts, resources(w));
    }
    let (changes, rollouts, h) = totals(r);
    let [g, c, m] = &h;
    row(
        &mut s,
        "TOTAL",
        changes,
        rollouts,
        [Some(g), Some(c), Some(m)],
    );
    for w in &r.workloads {
        let _ = writeln!(s, "data: {}: {}", name(w), workload_coverage(w, r));
        for n in &w.notes {
            let _ = writeln!(s, "note: {}: {n}", name(w));
        }
    }
    s
}

/// The workload's GPU chart: recorded usage per signal, real and simulated allocation,
/// thresholds and a marker per change.
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
        resource: "gpu",
        unit: "GPUs per pod".into(),
        from,
        to,
        lines,
        markers,
        covered: covered_band(&w.gpu_hours),
    }
}

/// The chart's shaded span: where the recorded usage the hours count covers.
fn covered_band(h: &Hours) -> Option<(i64, i64, String)> {
    h.coverage.map(|c| {
        (
            c.from.as_second(),
            c.to.as_second(),
            format!(
                "recorded usage {} → {} ({} cycles): the hours count these",
                time(c.from),
                time(c.to),
                c.cycles
            ),
        )
    })
}

/// The step function's value at `t` (the last point at or before it).
fn value_at(points: &[(i64, f64)], t: i64) -> Option<f64> {
    points.iter().take_while(|p| p.0 <= t).last().map(|p| p.1)
}

/// A CPU (`cpu`) or memory (`memory`) chart of a workload a rightsizing policy covers: the
/// hottest pod's recorded usage, the usage the recommendation rests on, the request per pod
/// as is and with kerf, the HPA's scale-out point when kerf coordinates it, and a marker at
/// each change of the requests.
pub fn resource_chart(w: &WorkloadReport, resource: &'static str, from: i64, to: i64) -> Chart {
    let (c, unit, what): (&ResourceChart, &str, &str) = match resource {
        "cpu" => (&w.chart.cpu, "CPU cores per pod", "CPU"),
        _ => (&w.chart.memory, "memory GiB per pod", "memory"),
    };
    let mut lines = Vec::new();
    if !c.basis.is_empty() {
        lines.push(Line {
            label: format!("{} (recommendation's basis)", c.basis_label),
            color: chart::USAGE_COLORS[1],
            style: LineStyle::Steps,
            points: c.basis.clone(),
        });
    }
    lines.push(Line {
        label: "request as is".into(),
        color: chart::REAL_COLOR,
        style: LineStyle::Steps,
        points: c.real.clone(),
    });
    lines.push(Line {
        label: "request with kerf".into(),
        color: chart::SIMULATED_COLOR,
        style: LineStyle::Steps,
        points: c.simulated.clone(),
    });
    if !c.hpa.is_empty() {
        lines.push(Line {
            label: "HPA target × request, with kerf".into(),
            color: chart::UPSIZE_COLOR,
            style: LineStyle::Dashed,
            points: c.hpa.clone(),
        });
    }
    // Drawn last: on top of a basis it often equals.
    lines.push(Line {
        label: "used (hottest pod)".into(),
        color: chart::USAGE_COLORS[0],
        style: LineStyle::Samples,
        points: chart::downsample(&c.usage, 720),
    });
    let mut markers = Vec::new();
    for rc in &w.resource_changes {
        let t = rc.at.as_second();
        let after = value_at(&c.simulated, t).unwrap_or(0.0);
        let requests: Vec<String> = rc
            .requests
            .iter()
            .filter_map(|(k, (cpu, mem))| {
                Some(match resource {
                    "cpu" => format!("{k} {}", format_cpu_millis((*cpu)?)),
                    _ => format!("{k} {}", format_memory_bytes((*mem)?)),
                })
            })
            .collect();
        markers.push(Marker {
            t,
            value: after,
            kind: MarkerKind::Requests,
            title: format!(
                "{} {what} requests {}{}",
                time(rc.at),
                requests.join(", "),
                rc.hpa_target
                    .map(|t| format!("; HPA target {t}%"))
                    .unwrap_or_default()
            ),
        });
    }
    let hours = match resource {
        "cpu" => &w.cpu_core_hours,
        _ => &w.memory_gib_hours,
    };
    Chart {
        id: name(w),
        resource,
        unit: unit.into(),
        from,
        to,
        lines,
        markers,
        covered: covered_band(hours),
    }
}

pub const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:24px;max-width:1200px;color:#222}\
table{border-collapse:collapse;margin:12px 0}th,td{border:1px solid #ddd;padding:4px 8px;text-align:right}\
th{white-space:nowrap;vertical-align:bottom}th.group{text-align:center}\
th:first-child,td:first-child{text-align:left}tr.total td{font-weight:bold;background:#f3f3f3}\
.policy{color:#555;font-size:85%;white-space:nowrap}\
section{margin:28px 0}code{background:#eee;padding:0 3px}.note{color:#8a5a00}.coverage{color:#444}\
td.reason{text-align:left;max-width:640px}";

/// The summary's cells of one workload's (or the total's) hours.
fn hour_cells(s: &mut String, [gpu, cpu, mem]: [Option<&Hours>; 3], total: bool) {
    for (i, h) in [gpu, cpu, mem].into_iter().enumerate() {
        let _ = write!(
            s,
            "<td>{}</td><td>{}</td><td>{}</td>",
            cell(h, |h| h.allocated_as_is, false),
            cell(h, |h| h.allocated_with_kerf, false),
            cell(h, |h| h.used, false)
        );
        if i == 0 {
            let id = if total {
                " id=\"total-difference\""
            } else {
                ""
            };
            let _ = write!(s, "<td{id}>{}</td>", cell(h, difference, true));
        }
    }
}

/// `-o html`: one self-contained page.
pub fn to_html(r: &Report) -> String {
    let mut s = String::new();
    let _ = write!(
        s,
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>kerf simulate</title>\
         <style>{STYLE}</style></head><body><h1>kerf simulate</h1>\
         <p>Replay of <b>{}</b> → <b>{}</b> every {} (<span id=\"cycles\">{}</span> cycles) through kerf's reconcile loop. \
         Negative difference: kerf would have allocated fewer GPU-hours.</p><p id=\"coverage\" class=\"coverage\">{}</p>",
        time(r.from),
        time(r.to),
        format_duration(r.every_seconds),
        r.cycles,
        esc(&coverage_line(r))
    );
    s.push_str(
        "<table id=\"summary\"><thead><tr><th rowspan=\"2\">workload</th><th rowspan=\"2\">changes</th>\
         <th rowspan=\"2\">rollouts</th><th class=\"group\" colspan=\"4\">GPU-hours</th>\
         <th class=\"group\" colspan=\"3\">CPU core-hours</th><th class=\"group\" colspan=\"3\">memory GiB-hours</th></tr>\
         <tr><th>as is</th><th>with kerf</th><th>used</th><th>difference</th>\
         <th>as is</th><th>with kerf</th><th>used</th><th>as is</th><th>with kerf</th><th>used</th></tr></thead><tbody>",
    );
    for w in &r.workloads {
        let _ = write!(
            s,
            "<tr><td><a href=\"#w-{}\">{}</a><br><span class=\"policy\">{}</span></td><td>{}</td><td>{}</td>",
            esc(&anchor(w)),
            esc(&name(w)),
            esc(&w.policy.as_ref().map(|p| p.to_string()).unwrap_or_default()),
            all_changes(w),
            w.rollouts,
        );
        hour_cells(&mut s, resources(w), false);
        s.push_str("</tr>");
    }
    let (changes, rollouts, h) = totals(r);
    let [g, c, m] = &h;
    let _ = write!(
        s,
        "</tbody><tfoot><tr class=\"total\"><td>total</td><td>{changes}</td><td>{rollouts}</td>"
    );
    hour_cells(&mut s, [Some(g), Some(c), Some(m)], true);
    s.push_str("</tr></tfoot></table>");
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
        let _ = write!(
            s,
            "<p class=\"coverage\">{}</p>",
            esc(&workload_coverage(w, r))
        );
        let (from, to) = (r.from.as_second(), r.to.as_second());
        if w.gpu_policy {
            s.push_str(&chart::render(&workload_chart(w, from, to)));
        }
        if w.resources_policy {
            for resource in ["cpu", "memory"] {
                s.push_str(&chart::render(&resource_chart(w, resource, from, to)));
            }
        }
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
