//! What `/debug` shows of the last cycle: per workload a chart of the evaluation window (the
//! samples the cycle fetched anyway, kept downsampled and bounded), the decision and its
//! reasons, CPU/memory and HPA target before → after, and the policy's status.
//!
//! Bounds (docs/simulate.md#the-live-page): at most [`MAX_SERIES`] container series of the last
//! cycle are kept, each downsampled to at most [`MAX_POINTS`] points (peaks kept) — about
//! 7.7 MB at most; a workload whose series fell outside the bound shows no chart and says so.
//! Only the last cycle is kept.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use jiff::Timestamp;

use crate::api::{Interpretation, PolicyStatus, Signal};
use crate::core::grouping::pods_by_owner;
use crate::core::hpa::HpaResource;
use crate::core::model::PolicyId;
use crate::core::model::ResourceRequests;
use crate::core::model::WorkloadKey;
use crate::core::quantity::format_cpu_millis;
use crate::core::quantity::format_gpu;
use crate::core::recommenders::cycle::CycleOutput;
use crate::core::recommenders::gpu::WorkloadResult;
use crate::core::recommenders::resources::container::PolicyParams;
use crate::core::recommenders::resources::workload::{
    ContainerOutcome as ResourceOutcome, RightsizingOutcome, RsResult,
};
use crate::core::snapshot::{GpuPolicy, Snapshot};
use crate::metrics::{MetricError, MetricSource, RangeQuery, SeriesSet};
use crate::views::chart::threshold_lines;
use crate::views::chart::{self, Bar, Bars, Chart, Line, LineStyle, Marker, MarkerKind};
use crate::views::pods::{PodAlloc, pod_alloc};
use crate::views::usage;

/// Container series kept from one cycle.
pub const MAX_SERIES: usize = 4_000;
/// Points kept per series.
pub const MAX_POINTS: usize = 120;

/// (metric, namespace, pod, container).
type SeriesId = (String, String, String, String);

#[derive(Debug, Default)]
struct Recorded {
    series: HashMap<SeriesId, Vec<(i64, f64)>>,
    dropped: usize,
}

/// A metric source that keeps a bounded, downsampled copy of what it answers.
pub struct Recording<'a, S> {
    inner: &'a S,
    recorded: Mutex<Recorded>,
}

impl<'a, S: MetricSource> Recording<'a, S> {
    pub fn new(inner: &'a S) -> Self {
        Self {
            inner,
            recorded: Mutex::new(Recorded::default()),
        }
    }

    fn keep(&self, metric: &str, set: &SeriesSet) {
        let mut r = self.recorded.lock().unwrap_or_else(|e| e.into_inner());
        for (k, samples) in &set.series {
            if r.series.len() >= MAX_SERIES {
                r.dropped += 1;
                continue;
            }
            r.series.insert(
                (
                    metric.to_string(),
                    k.namespace.clone(),
                    k.pod.clone(),
                    k.container.clone(),
                ),
                chart::downsample(samples, MAX_POINTS),
            );
        }
    }
}

impl<S: MetricSource> MetricSource for Recording<'_, S> {
    async fn range_query(&self, query: &RangeQuery) -> Result<SeriesSet, MetricError> {
        let answer = self.inner.range_query(query).await;
        if let Ok(set) = &answer {
            self.keep(&query.metric, set);
        }
        answer
    }

    /// Window values are one number per container: nothing to plot, passed through.
    async fn window_query(
        &self,
        query: &crate::metrics::WindowQuery,
    ) -> Result<crate::metrics::WindowSet, MetricError> {
        self.inner.window_query(query).await
    }

    /// The incremental history's steps: folded into histograms, not plotted; passed through.
    async fn step_query(
        &self,
        query: &crate::metrics::window::StepQuery,
    ) -> Result<crate::metrics::window::StepSet, MetricError> {
        self.inner.step_query(query).await
    }

    fn record_split(&self) {
        self.inner.record_split();
    }

    fn coverage(&self) -> Option<(jiff::Timestamp, jiff::Timestamp)> {
        self.inner.coverage()
    }
}

/// One workload on the live page.
#[derive(Clone, Debug)]
pub struct LiveWorkload {
    pub key: WorkloadKey,
    pub policy: Option<String>,
    /// The policy's conditions, `Type=Status (Reason): message`.
    pub policy_status: Vec<String>,
    /// `upsize`, `scaleBack`, `reuse`, `none` (GPU), and the CPU/memory phase.
    pub decision: String,
    pub driver: Option<Signal>,
    pub reasons: Vec<String>,
    /// None: no GPU policy, or its series fell outside the bound (`chart_note` says which).
    pub chart: Option<Chart>,
    pub chart_note: Option<String>,
    /// Per container: cpu before, cpu after, memory before, memory after, each `request/limit`.
    pub requests: Vec<(String, [Option<String>; 4])>,
    /// HPA name, resource, target before, target after, skip reason.
    pub hpa: Option<String>,
    /// Per container with a GPU allocation, the running pods' allocation (lowest, highest):
    /// what the pods have now, which the template may not say (kerf's admission sized them).
    pub running_gpu: Vec<(String, f64, f64)>,
    /// CPU and memory per container (usage the recommendation rests on, request now, request
    /// recommended) and the HPA's scale-out point per pod when kerf coordinates it.
    pub cpu_bars: Option<Bars>,
    pub memory_bars: Option<Bars>,
}

fn cpu_text(cores: f64) -> String {
    format_cpu_millis((cores * 1000.0).round() as i64)
}

fn memory_text(bytes: f64) -> String {
    const MIB: f64 = (1u64 << 20) as f64;
    if bytes >= 1024.0 * MIB {
        format!("{:.2}Gi", bytes / (1024.0 * MIB))
    } else {
        format!("{:.0}Mi", bytes / MIB)
    }
}

/// How one resource is read from an outcome: the request (millicores, bytes), its text, the
/// usage the recommendation rests on (same unit).
type ReadersOf = (
    fn(&ResourceRequests) -> Option<i64>,
    fn(f64) -> String,
    fn(&ResourceOutcome) -> Option<f64>,
);

/// The CPU (`cpu`) or memory bars of a CPU/memory outcome; `None` when no container has a
/// figure for the resource.
fn resource_bars(
    key: &WorkloadKey,
    o: &RightsizingOutcome,
    resource: HpaResource,
    basis: &str,
) -> Option<Bars> {
    let (get, text, usage): ReadersOf = match resource {
        HpaResource::Cpu => (
            |r| r.cpu_millis,
            |v| cpu_text(v / 1000.0),
            |c| c.cpu_usage.map(|v| v * 1000.0),
        ),
        HpaResource::Memory => (|r| r.memory_bytes, memory_text, |c| c.memory_usage),
    };
    let bar = |label: &str, v: f64, color: &'static str| Bar {
        label: label.to_string(),
        value: v,
        color,
        text: text(v),
    };
    let mut rows = Vec::new();
    for c in o.containers.iter().filter(|c| c.in_scope) {
        let mut bars = Vec::new();
        if let Some(u) = usage(c) {
            bars.push(bar(basis, u, chart::USAGE_COLORS[1]));
        }
        if let Some(v) = get(&c.current) {
            bars.push(bar("request now", v as f64, chart::REAL_COLOR));
        }
        if let Some(v) = get(&c.recommended) {
            bars.push(bar("recommended", v as f64, chart::SIMULATED_COLOR));
        }
        if !bars.is_empty() {
            rows.push((c.name.clone(), bars));
        }
    }
    // The HPA scales out when the pods' average usage passes target × Σrequests: kerf moves
    // the target with the requests so that point stays where it was.
    if let Some(h) = o
        .hpa
        .as_ref()
        .filter(|h| o.managed.hpa_target && h.resource == Some(resource))
    {
        let before: i64 = o.containers.iter().filter_map(|c| get(&c.current)).sum();
        let after: i64 = o
            .containers
            .iter()
            .filter_map(|c| get(&c.recommended).or(get(&c.current)))
            .sum();
        let mut bars = Vec::new();
        for (label, target, sum) in [
            ("scales out at (now)", h.target_before, before),
            ("scales out at (with kerf)", h.target_after, after),
        ] {
            if let Some(t) = target {
                let v = sum as f64 * f64::from(t) / 100.0;
                let mut b = bar(label, v, chart::UPSIZE_COLOR);
                b.text = format!("{t}% of {} = {}", text(sum as f64), text(v));
                bars.push(b);
            }
        }
        if !bars.is_empty() {
            rows.push((format!("HPA {} (per pod)", h.name), bars));
        }
    }
    (!rows.is_empty()).then(|| Bars {
        id: key.to_string(),
        resource: resource.as_str(),
        rows,
    })
}

/// The last cycle, as `/debug` shows it.
#[derive(Clone, Debug, Default)]
pub struct LiveView {
    pub at: Option<Timestamp>,
    pub workloads: BTreeMap<WorkloadKey, LiveWorkload>,
}

fn conditions(status: Option<&PolicyStatus>) -> Vec<String> {
    status
        .map(|s| {
            s.conditions
                .iter()
                .map(|c| format!("{}={} ({}): {}", c.type_, c.status, c.reason, c.message))
                .collect()
        })
        .unwrap_or_default()
}

/// The status of the policy `id`, GPU or CPU/memory.
fn policy_status<'s>(snapshot: &'s Snapshot, id: &PolicyId) -> Option<&'s PolicyStatus> {
    snapshot
        .gpu_policies
        .iter()
        .find(|p| &p.id == id)
        .map(|p| p.status.as_ref())
        .or_else(|| {
            snapshot
                .rightsizing_policies
                .iter()
                .find(|p| &p.id == id)
                .map(|p| p.status.as_ref())
        })
        .flatten()
}

/// What `/debug` shows of a CPU/memory outcome besides its reasons and decision.
#[derive(Default)]
struct ResourcesView {
    requests: Vec<(String, [Option<String>; 4])>,
    hpa: Option<String>,
    cpu_bars: Option<Bars>,
    memory_bars: Option<Bars>,
}

/// A CPU/memory outcome as `/debug` shows it; its message and reasons go to `reasons`, its
/// phase to `decision`.
fn resources_view(
    snapshot: &Snapshot,
    key: &WorkloadKey,
    r: &RsResult,
    o: &RightsizingOutcome,
    reasons: &mut Vec<String>,
    decision: &mut Option<String>,
) -> ResourcesView {
    let mut requests = Vec::new();
    let [cpu_basis, memory_basis] = snapshot
        .rightsizing_policies
        .iter()
        .find(|p| p.id == r.policy)
        .and_then(|p| PolicyParams::from_spec(&p.spec).ok())
        .map(|p| crate::views::labels::usage_basis(&p))
        .unwrap_or_default();
    let cpu_bars = resource_bars(key, o, HpaResource::Cpu, &cpu_basis);
    let memory_bars = resource_bars(key, o, HpaResource::Memory, &memory_basis);
    if !o.message.is_empty() {
        reasons.push(o.message.clone());
    }
    reasons.extend(o.reasons.iter().cloned());
    let phase = serde_json::to_value(o.phase)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default();
    *decision = Some(match decision.take() {
        Some(d) => format!("{d}; CPU/memory {phase}"),
        None => format!("CPU/memory {phase}"),
    });
    for c in &o.containers {
        requests.push((c.name.clone(), crate::views::labels::resource_cells(c)));
    }
    let hpa = o.hpa.as_ref().map(|h| {
        let pct = |t: Option<i32>| t.map_or("-".into(), |t| format!("{t}%"));
        let mut s = format!(
            "{} {} target {} → {}",
            h.name,
            h.resource.map_or("-", |r| r.as_str()),
            pct(h.target_before),
            pct(h.target_after)
        );
        if let Some(skip) = h.skip_reason {
            s.push_str(&format!(" (skipped: {})", skip.as_str()));
        }
        if h.blocked {
            s.push_str(" (blocked)");
        }
        s
    });
    ResourcesView {
        requests,
        hpa,
        cpu_bars,
        memory_bars,
    }
}

/// The GPU chart of a workload's window, or why there is none, and the GPUs its running pods
/// hold per container.
struct GpuChart {
    chart: Option<Chart>,
    note: Option<String>,
    running_gpu: Vec<(String, f64, f64)>,
}

/// Per container, the least and most GPU the running pods hold.
fn running_gpu(pods: &[(String, PodAlloc)]) -> Vec<(String, f64, f64)> {
    let mut by_container: BTreeMap<&str, (f64, f64)> = BTreeMap::new();
    for (c, g) in pods
        .iter()
        .flat_map(|(_, a)| a.iter().filter_map(|(c, x)| Some((c, x.gpu?))))
    {
        let e = by_container.entry(c).or_insert((g, g));
        *e = (e.0.min(g), e.1.max(g));
    }
    by_container
        .into_iter()
        .map(|(c, (lo, hi))| (c.to_string(), lo, hi))
        .collect()
}

/// The marker of this cycle's GPU change, if it made one.
fn gpu_marker(
    gpu: &WorkloadResult,
    now: Timestamp,
    current: f64,
    recommended: Option<f64>,
) -> Option<Marker> {
    Some(gpu)
        .filter(|g| {
            matches!(
                g.action,
                crate::core::recommenders::gpu::engine::Action::Upsize
                    | crate::core::recommenders::gpu::engine::Action::ScaleBack
            )
        })
        .map(|g| Marker {
            t: now.as_second(),
            value: recommended.unwrap_or(current),
            kind: if g.action == crate::core::recommenders::gpu::engine::Action::Upsize {
                MarkerKind::Upsize
            } else {
                MarkerKind::ScaleBack
            },
            title: format!(
                "{} {} → {} GPU per pod: {}",
                g.action.as_str(),
                format_gpu(current),
                format_gpu(recommended.unwrap_or(current)),
                crate::views::labels::change_reason(&g.reasons, g.driving_metric)
            ),
        })
}

/// The GPU chart of a workload under its main GPU policy: the hottest pod's usage per signal
/// from the recorded samples, the allocation now, the recommendation and the thresholds.
fn gpu_chart(
    recorded: &Recorded,
    snapshot: &Snapshot,
    pods: &[usize],
    key: &WorkloadKey,
    gpu: &WorkloadResult,
    policy: &GpuPolicy,
    now: Timestamp,
) -> GpuChart {
    let pods: Vec<(String, PodAlloc)> = pods
        .iter()
        .map(|&pi| &*snapshot.pods[pi])
        // The live pods, as the engine counts them: what runs now.
        .filter(|p| !crate::core::recommenders::gpu::engine::pod_is_terminating(p))
        .filter_map(|p| Some((p.metadata.name.as_deref()?.to_string(), pod_alloc(p))))
        .collect();
    let view: Vec<(&str, &PodAlloc)> = pods.iter().map(|(n, a)| (n.as_str(), a)).collect();
    let running_gpu = running_gpu(&pods);
    let mut lines = Vec::new();
    let mut any = false;
    let mut window = 0;
    for (i, signal) in Signal::BOTH.into_iter().enumerate() {
        let cfg = policy.spec.metrics.signal(signal);
        window = window.max(
            cfg.upsize
                .metrics_window
                .seconds()
                .max(cfg.scale_back.metrics_window.seconds()),
        );
        let m = &cfg.prometheus;
        let interp: Interpretation = m.interpretation;
        let totals = usage::pod_totals(&view, interp, |pod, c| {
            let id = (
                m.metric.clone(),
                key.namespace.to_string(),
                pod.to_string(),
                c.to_string(),
            );
            recorded.series.get(&id).map(Vec::as_slice)
        });
        any |= totals.iter().any(|t| !t.is_empty());
        lines.push(Line {
            label: format!("{} used (hottest pod)", signal.as_str()),
            color: chart::USAGE_COLORS[i],
            style: LineStyle::Samples,
            points: usage::hottest(&totals),
        });
    }
    let from = now.as_second() - window as i64;
    let current = pods
        .iter()
        .map(|(_, a)| a.values().filter_map(|c| c.gpu).sum::<f64>())
        .fold(0.0, f64::max);
    let allocation = vec![(from, current)];
    lines.push(Line {
        label: "allocation now".into(),
        color: chart::REAL_COLOR,
        style: LineStyle::Steps,
        points: allocation.clone(),
    });
    let recommended = gpu
        .recommendation
        .as_ref()
        .map(|r| r.containers.values().sum::<f64>());
    if let Some(r) = recommended {
        lines.push(Line {
            label: "recommended".into(),
            color: chart::SIMULATED_COLOR,
            style: LineStyle::Steps,
            points: vec![(from, r)],
        });
    }
    let thresholds: Vec<(Signal, f64, f64)> = Signal::BOTH
        .iter()
        .map(|s| {
            let c = policy.spec.metrics.signal(*s);
            (
                *s,
                c.upsize.threshold_percent,
                c.scale_back.threshold_percent,
            )
        })
        .collect();
    lines.extend(threshold_lines(&thresholds, &allocation));
    let markers = gpu_marker(gpu, now, current, recommended)
        .into_iter()
        .collect();
    let note = (!any && recorded.dropped > 0).then(|| {
        format!("no chart: the last cycle's samples beyond {MAX_SERIES} series are not kept")
    });
    let chart = Chart {
        id: key.to_string(),
        resource: "gpu",
        unit: "GPUs per pod".into(),
        from,
        to: now.as_second(),
        lines,
        markers,
        // The window is what the cycle fetched: nothing to shade.
        covered: None,
    };
    GpuChart {
        chart: note.is_none().then_some(chart),
        note,
        running_gpu,
    }
}

impl<S> Recording<'_, S> {
    /// The live view of `cycle`, run at `now` over `snapshot` (the objects with the cycle's
    /// policy statuses), from the samples this source recorded.
    pub fn view(&self, snapshot: &Snapshot, cycle: &CycleOutput, now: Timestamp) -> LiveView {
        let recorded = self.recorded.lock().unwrap_or_else(|e| e.into_inner());
        let pods_of = pods_by_owner(snapshot);
        let mut out = LiveView {
            at: Some(now),
            workloads: BTreeMap::new(),
        };
        for w in &cycle.workloads {
            let gpu = w.gpu.as_deref();
            let rs = w.resources.as_deref();
            let policy_id = gpu
                .and_then(|g| g.main_policy())
                .or_else(|| rs.map(|r| &r.policy));
            let status = policy_id.and_then(|id| policy_status(snapshot, id));
            let mut reasons: Vec<String> = gpu.map(|g| g.reasons.clone()).unwrap_or_default();
            let mut decision = gpu.map(|g| g.action.as_str().to_string());
            let resources = match rs.map(|r| (r, &r.outcome)) {
                Some((r, Ok(o))) => {
                    resources_view(snapshot, w.key(), r, o, &mut reasons, &mut decision)
                }
                Some((r, Err(e))) => {
                    reasons.push(format!("{}: unusable policy: {e}", r.policy));
                    ResourcesView::default()
                }
                None => ResourcesView::default(),
            };
            let main_gpu_policy = gpu.and_then(|g| {
                let id = g.main_policy()?;
                Some((g, snapshot.gpu_policies.iter().find(|p| &p.id == id)?))
            });
            let pods = pods_of.get(w.key()).map_or(&[][..], Vec::as_slice);
            let g = match main_gpu_policy {
                Some((g, policy)) => gpu_chart(&recorded, snapshot, pods, w.key(), g, policy, now),
                None => GpuChart {
                    chart: None,
                    note: None,
                    running_gpu: Vec::new(),
                },
            };
            out.workloads.insert(
                w.key().clone(),
                LiveWorkload {
                    key: w.key().clone(),
                    policy: policy_id.map(|p| p.to_string()),
                    policy_status: conditions(status),
                    decision: decision.unwrap_or_else(|| "none".into()),
                    driver: gpu.and_then(|g| g.driving_metric),
                    reasons,
                    chart: g.chart,
                    chart_note: g.note,
                    requests: resources.requests,
                    hpa: resources.hpa,
                    running_gpu: g.running_gpu,
                    cpu_bars: resources.cpu_bars,
                    memory_bars: resources.memory_bars,
                },
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::SeriesKey;

    /// Answers every query with 5,000 series of 1,000 points.
    struct Wide;

    impl MetricSource for Wide {
        async fn window_query(
            &self,
            _: &crate::metrics::WindowQuery,
        ) -> Result<crate::metrics::WindowSet, MetricError> {
            Ok(Default::default())
        }

        async fn range_query(&self, _: &RangeQuery) -> Result<SeriesSet, MetricError> {
            let mut set = SeriesSet::default();
            for i in 0..5_000 {
                set.series.insert(
                    SeriesKey {
                        namespace: "ns".into(),
                        pod: format!("p{i}"),
                        container: "c".into(),
                    },
                    (0..1_000).map(|t| (t, t as f64)).collect(),
                );
            }
            Ok(set)
        }
    }

    #[test]
    fn the_recorded_samples_stay_within_the_stated_bound() {
        let recording = Recording::new(&Wide);
        let q = RangeQuery {
            metric: "m".into(),
            namespace_label: "namespace".into(),
            pod_label: "pod".into(),
            container_label: "container".into(),
            namespaces: vec!["ns".into()],
            pods: Default::default(),
            start: Timestamp::from_second(0).unwrap(),
            end: Timestamp::from_second(999).unwrap(),
            step_seconds: 1,
            counter: None,
            aggregation: Default::default(),
            matchers: Vec::new(),
        };
        let answer = futures::executor::block_on(recording.range_query(&q)).unwrap();
        assert_eq!(answer.series.len(), 5_000, "the cycle gets every series");
        let r = recording.recorded.lock().unwrap();
        assert_eq!(r.series.len(), MAX_SERIES);
        assert_eq!(r.dropped, 1_000);
        assert!(r.series.values().all(|s| s.len() <= MAX_POINTS));
        // Peaks survive downsampling.
        assert!(r.series.values().all(|s| s.iter().any(|p| p.1 == 999.0)));
    }
}
