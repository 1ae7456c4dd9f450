//! `/debug/recommendations` (JSON) and the human page (`/debug`, `?format=html`): per workload,
//! an inline SVG bar chart of the template's, the running pods' and the recommended GPUs per
//! container, and the last cycle's view: the window's chart, decision, reasons, CPU/memory
//! requests and usage with the HPA's scale-out point, policy status.

use std::fmt::Write as _;

use serde_json::{Map, Value, json};

use crate::core::model::{WorkloadKey, WorkloadState};
use crate::core::quantity::format_gpu;
use crate::state::Store;

fn state_json(key: &WorkloadKey, s: &WorkloadState) -> Value {
    let mut m = Map::new();
    m.insert(
        "workload".into(),
        json!({"namespace": key.namespace, "kind": key.kind.as_str(), "name": key.name}),
    );
    if let Some(p) = &s.policy {
        m.insert("policy".into(), p.to_string().into());
    }
    if let Some(g) = &s.gpu {
        // The persisted annotation format, so this page and the workload annotation agree.
        m.insert(
            "gpuRecommendation".into(),
            serde_json::from_str(&g.render()).unwrap_or(Value::Null),
        );
    }
    let tmpl: Map<String, Value> = s
        .template_gpu
        .iter()
        .map(|(c, v)| (c.clone(), format_gpu(*v).into()))
        .collect();
    m.insert("templateGpu".into(), tmpl.into());
    if !s.resources.is_empty() {
        m.insert("resources".into(), json!(s.resources));
    }
    if let Some(h) = &s.hpa {
        m.insert("hpa".into(), json!(h));
    }
    m.insert(
        "strategy".into(),
        json!({
            "gpuUpsize": s.strategy.gpu_upsize(),
            "gpuDownsize": s.strategy.gpu_downsize(),
            "overrideScheduler": if s.strategy.override_kai() { "kai" } else { "none" },
            "kai": s.strategy.kai(),
        }),
    );
    Value::Object(m)
}

/// Every workload the store knows, in key order.
pub fn json(store: &Store) -> Value {
    let items: Vec<Value> = store
        .snapshot()
        .iter()
        .map(|(k, s)| state_json(k, s))
        .collect();
    // Workloads kerf stopped writing for a field conflict (docs/gitops.md).
    let conflicts: Vec<Value> = store
        .conflicts()
        .iter()
        .map(|(k, why)| json!({"workload": k.to_string(), "conflict": why}))
        .collect();
    json!({"ready": store.is_ready(), "workloads": items, "conflicts": conflicts})
}

use crate::views::chart::{self, Bar, Bars, esc};

/// Per container with GPUs: the template's allocation, the running pods' (when this process
/// ran the last cycle: the pods may differ from the template, kerf's admission sized them) and
/// the recommendation.
fn gpu_bars(key: &WorkloadKey, s: &WorkloadState, running: &[(String, f64, f64)]) -> String {
    let mut containers: Vec<&str> = s.template_gpu.keys().map(String::as_str).collect();
    if let Some(g) = &s.gpu {
        containers.extend(g.containers.keys().map(String::as_str));
    }
    containers.extend(running.iter().map(|(c, _, _)| c.as_str()));
    containers.sort();
    containers.dedup();
    // No GPU anywhere (a CPU/memory workload): no GPU picture at all.
    if containers.is_empty() {
        return String::new();
    }
    let rows = containers
        .into_iter()
        .map(|c| {
            let mut bars = Vec::new();
            if let Some(t) = s.template_gpu.get(c) {
                bars.push(Bar {
                    label: "template".into(),
                    value: *t,
                    color: chart::TEMPLATE_COLOR,
                    text: format_gpu(*t),
                });
            }
            if let Some((_, lo, hi)) = running.iter().find(|(name, _, _)| name == c) {
                bars.push(Bar {
                    label: "running pods".into(),
                    value: *hi,
                    color: chart::REAL_COLOR,
                    text: if (hi - lo).abs() < 1e-9 {
                        format_gpu(*hi)
                    } else {
                        format!("{}–{}", format_gpu(*lo), format_gpu(*hi))
                    },
                });
            }
            if let Some(r) = s.gpu.as_ref().and_then(|g| g.containers.get(c)) {
                bars.push(Bar {
                    label: "recommended".into(),
                    value: *r,
                    color: chart::SIMULATED_COLOR,
                    text: format_gpu(*r),
                });
            }
            (c.to_string(), bars)
        })
        .collect();
    chart::render_bars(&Bars {
        id: key.to_string(),
        resource: "gpu",
        rows,
    })
}

/// The last cycle's view of one workload: status, decision, the window's chart, requests and
/// HPA target before → after, reasons.
fn live_section(out: &mut String, w: &crate::views::live::LiveWorkload) {
    if !w.policy_status.is_empty() {
        out.push_str("<ul class=\"status\">");
        for c in &w.policy_status {
            let _ = write!(out, "<li>{}</li>", esc(c));
        }
        out.push_str("</ul>");
    }
    let _ = write!(
        out,
        "<p>last decision: <b class=\"decision\">{}</b>{}</p>",
        esc(&w.decision),
        w.driver
            .map(|d| format!(" (driver {})", d.as_str()))
            .unwrap_or_default()
    );
    if let Some(chart) = &w.chart {
        out.push_str(&crate::views::chart::render(chart));
    }
    if let Some(note) = &w.chart_note {
        let _ = write!(out, "<p class=\"note\">{}</p>", esc(note));
    }
    if !w.requests.is_empty() {
        out.push_str(
            "<table class=\"requests\"><caption>request/limit (- where none)</caption>\
             <tr><th>container</th><th>CPU now</th><th>CPU recommended</th>\
             <th>memory now</th><th>memory recommended</th></tr>",
        );
        for (c, v) in &w.requests {
            let cell = |x: &Option<String>| esc(x.as_deref().unwrap_or("-"));
            let _ = write!(
                out,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(c),
                cell(&v[0]),
                cell(&v[1]),
                cell(&v[2]),
                cell(&v[3])
            );
        }
        out.push_str("</table>");
    }
    for (title, bars) in [("CPU", &w.cpu_bars), ("memory", &w.memory_bars)] {
        if let Some(b) = bars {
            let _ = write!(out, "<p class=\"bars-title\">{title}, last cycle</p>");
            out.push_str(&chart::render_bars(b));
        }
    }
    if let Some(h) = &w.hpa {
        let _ = write!(out, "<p class=\"hpa\">HPA {}</p>", esc(h));
    }
    if !w.reasons.is_empty() {
        out.push_str("<details open><summary>reasons</summary><ul class=\"reasons\">");
        for r in &w.reasons {
            let _ = write!(out, "<li>{}</li>", esc(r));
        }
        out.push_str("</ul></details>");
    }
}

/// The human page: every workload the store serves (current vs recommended GPUs) and, where
/// this process runs the cycles, the last cycle's view of it (see [`crate::views::live`]).
pub fn html(store: &Store) -> String {
    let mut out = String::from(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>kerf recommendations</title>\
         <style>body{font-family:system-ui,sans-serif;margin:24px;max-width:1200px;color:#222}\
         section{margin-bottom:2em;border-top:1px solid #ddd}code{background:#eee}\
         table{border-collapse:collapse}td,th{border:1px solid #ddd;padding:3px 8px}\
         .note{color:#8a5a00}.status{color:#444}</style>\
         </head><body><h1>kerf recommendations</h1>",
    );
    let _ = write!(
        out,
        "<p>ready: {} — <a href=\"/debug/recommendations\">JSON</a></p>",
        store.is_ready()
    );
    for (k, why) in store.conflicts().iter() {
        let _ = write!(
            out,
            "<p class=\"conflict\">field conflict: <code>{}</code> not written: {}</p>",
            esc(&k.to_string()),
            esc(why)
        );
    }
    let live = store.live();
    if let Some(at) = live.as_ref().and_then(|l| l.at) {
        let _ = write!(
            out,
            "<p>last cycle at <time>{}</time>; charts show its evaluation window</p>",
            crate::core::model::rfc3339_secs(at)
        );
    }
    let snap = store.snapshot();
    let mut keys: Vec<&WorkloadKey> = snap.iter().map(|(k, _)| k).collect();
    if let Some(l) = &live {
        keys.extend(l.workloads.keys());
    }
    keys.sort();
    keys.dedup();
    if keys.is_empty() {
        out.push_str("<p>No workload has a recommendation yet.</p>");
    }
    for k in keys {
        let state = snap.iter().find(|(key, _)| key == k).map(|(_, s)| s);
        let lw = live.as_ref().and_then(|l| l.workloads.get(k));
        let _ = write!(out, "<section><h2>{}</h2>", esc(&k.to_string()));
        let policy = state
            .and_then(|s| s.policy.as_ref().map(|p| p.to_string()))
            .or_else(|| lw.and_then(|w| w.policy.clone()));
        if let Some(p) = &policy {
            let _ = write!(out, "<p>policy <code>{}</code></p>", esc(p));
        }
        if let Some(s) = state {
            let running = lw.map(|w| w.running_gpu.as_slice()).unwrap_or_default();
            out.push_str(&gpu_bars(k, s, running));
            if let Some(h) = &s.hpa {
                let _ = write!(
                    out,
                    "<p>HPA <code>{}</code> {} target {}% → {}%</p>",
                    esc(&h.hpa_name),
                    esc(&h.resource),
                    h.target_before,
                    h.target_after
                );
            }
        }
        if let Some(w) = lw {
            live_section(&mut out, w);
        }
        out.push_str("</section>");
    }
    out.push_str("</body></html>");
    out
}
