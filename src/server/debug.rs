//! `/debug/recommendations` (JSON) and the human page (`/debug`, `?format=html`): per workload,
//! an inline SVG bar chart of current (template) vs recommended GPUs per container, and the
//! last cycle's view: the window's chart, decision, reasons, requests, HPA, policy status.

use std::fmt::Write as _;

use serde_json::{Map, Value, json};

use crate::core::model::{WorkloadKey, WorkloadState, format_gpu};
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

use crate::server::chart::esc;

fn chart(s: &WorkloadState) -> String {
    let mut containers: Vec<&String> = s.template_gpu.keys().collect();
    if let Some(g) = &s.gpu {
        containers.extend(g.containers.keys());
    }
    containers.sort();
    containers.dedup();
    if containers.is_empty() {
        return "<p>no GPU data</p>".into();
    }
    let rows: Vec<(&str, f64, Option<f64>)> = containers
        .iter()
        .map(|c| {
            let cur = s.template_gpu.get(*c).copied().unwrap_or(0.0);
            let rec = s.gpu.as_ref().and_then(|g| g.containers.get(*c).copied());
            (c.as_str(), cur, rec)
        })
        .collect();
    let max = rows
        .iter()
        .map(|(_, a, b)| a.max(b.unwrap_or(0.0)))
        .fold(0.0f64, f64::max)
        .max(1.0);
    let (label_w, bar_w, row_h) = (140.0, 360.0, 36.0);
    let h = row_h * rows.len() as f64 + 10.0;
    let mut svg = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{h}" role="img">"#,
        label_w + bar_w + 90.0
    );
    for (i, (c, cur, rec)) in rows.iter().enumerate() {
        let y = i as f64 * row_h + 5.0;
        let _ = write!(
            svg,
            r#"<text x="0" y="{}" font-size="12">{}</text>"#,
            y + 20.0,
            esc(c)
        );
        let wc = cur / max * bar_w;
        let _ = write!(
            svg,
            r##"<rect x="{label_w}" y="{y}" width="{wc:.1}" height="12" fill="#9aa"><title>current {}</title></rect><text x="{}" y="{}" font-size="10">current {}</text>"##,
            format_gpu(*cur),
            label_w + wc + 4.0,
            y + 10.0,
            format_gpu(*cur)
        );
        if let Some(r) = rec {
            let wr = r / max * bar_w;
            let _ = write!(
                svg,
                r##"<rect x="{label_w}" y="{}" width="{wr:.1}" height="12" fill="#2a7"><title>recommended {}</title></rect><text x="{}" y="{}" font-size="10">recommended {}</text>"##,
                y + 14.0,
                format_gpu(*r),
                label_w + wr + 4.0,
                y + 24.0,
                format_gpu(*r)
            );
        }
    }
    svg.push_str("</svg>");
    svg
}

/// The last cycle's view of one workload: status, decision, the window's chart, requests and
/// HPA target before → after, reasons.
fn live_section(out: &mut String, w: &crate::server::live::LiveWorkload) {
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
        out.push_str(&crate::server::chart::render(chart));
    }
    if let Some(note) = &w.chart_note {
        let _ = write!(out, "<p class=\"note\">{}</p>", esc(note));
    }
    if !w.requests.is_empty() {
        out.push_str(
            "<table class=\"requests\"><tr><th>container</th><th>CPU now</th><th>CPU recommended</th>\
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
/// this process runs the cycles, the last cycle's view of it (see [`crate::server::live`]).
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
            out.push_str(&chart(s));
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
