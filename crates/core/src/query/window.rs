//! Window aggregates: one value per (namespace, workload, container) over a long window (the
//! CPU/memory recommender's 7 days), computed where the data is. Prometheus evaluates one
//! instant query built here; the file source evaluates the same definition
//! ([`super::file::FileSource::evaluate_window`]), so both answer alike.
//!
//! A workload's series are selected by the workload, not by today's pods: every pod whose name
//! the workload's controller could have given it ([`pod_name_suffix`]), plus today's pods by
//! name (a pod named otherwise still counts). Per pod and container the series are summed at
//! each step of a subquery on the absolute grid of `step_seconds`; the aggregate is taken per pod
//! over the window, then across the workload's pods per container name (as VPA matches
//! containers by name across pods). See docs/metrics.md.

use std::collections::BTreeMap;

use jiff::Timestamp;

use super::MetricError;
use super::promql::{LabelMatcher, quote, regex_escape};
use kerf_api::WorkloadKind;
use kerf_support::metric_name::{is_label_name, is_metric_name};

/// The label kerf's window queries add to name the workload a series belongs to.
pub const WORKLOAD_LABEL: &str = "kerf_workload";

/// The characters Kubernetes uses in generated name suffixes (`k8s.io/apimachinery`
/// `rand.String`, `rand.SafeEncodeString`): no vowels, no 0/1/3, so suffixes spell no words.
const SAFE: &str = "[bcdfghjklmnpqrstvwxz2456789]";

/// The regex (RE2 and Rust `regex` alike) of what a workload's controller appends to the
/// workload's name to name a pod: `-<pod-template-hash>-<5>` (Deployment's ReplicaSets),
/// `-<ordinal>` (StatefulSet), `-<5>` (DaemonSet), `-[<index>-]<5>` (Job),
/// `-<scheduled minute>-[<index>-]<5>` (CronJob's Jobs).
pub fn pod_name_suffix(kind: WorkloadKind) -> String {
    match kind {
        WorkloadKind::Deployment => format!("-{SAFE}{{1,10}}-{SAFE}{{5}}"),
        WorkloadKind::StatefulSet => "-(?:0|[1-9][0-9]*)".to_string(),
        WorkloadKind::DaemonSet => format!("-{SAFE}{{5}}"),
        WorkloadKind::Job => format!("-(?:[0-9]+-)?{SAFE}{{5}}"),
        WorkloadKind::CronJob => format!("-[0-9]+-(?:[0-9]+-)?{SAFE}{{5}}"),
        // Rollout → ReplicaSet `<rollout>-<pod-template-hash>` → pods, as a Deployment's.
        WorkloadKind::Rollout => format!("-{SAFE}{{1,10}}-{SAFE}{{5}}"),
        // `<isvc>-predictor` Deployment (`-predictor-default` before KServe 0.8); on Knative its
        // Revision `…-00001` and that Revision's `-deployment`. A transformer or explainer is a
        // workload of its own (`core::grouping`).
        WorkloadKind::InferenceService => {
            format!("-predictor(?:-default)?(?:-[0-9]{{5}}-deployment)?-{SAFE}{{1,10}}-{SAFE}{{5}}")
        }
        // Revision `<service>-00001`, its Deployment `<revision>-deployment`.
        WorkloadKind::KnativeService => {
            format!("-[0-9]{{5}}-deployment-{SAFE}{{1,10}}-{SAFE}{{5}}")
        }
        // Leader `<lws>-<group>`, workers `<lws>-<group>-<worker>` (StatefulSet ordinals).
        WorkloadKind::LeaderWorkerSet => "-(?:0|[1-9][0-9]*)(?:-(?:0|[1-9][0-9]*))?".to_string(),
        // Head `<cluster>-head-<5>` (`<cluster>-head` with KubeRay's deterministic head
        // name), workers `<cluster>-<group>-worker-<5>`.
        WorkloadKind::RayCluster => {
            format!("-(?:head(?:-{SAFE}{{5}})?|[a-z0-9.-]+-worker-{SAFE}{{5}})")
        }
        // Its RayCluster `<service>-raycluster-<5>` (or `<service>-<5>`), that cluster's pods.
        WorkloadKind::RayService => format!(
            "(?:-raycluster)?-{SAFE}{{5}}-(?:head(?:-{SAFE}{{5}})?|[a-z0-9.-]+-worker-{SAFE}{{5}})"
        ),
        // Its RayCluster `<job>-<5>` (KubeRay's `GenerateRayClusterName`), that cluster's pods.
        WorkloadKind::RayJob => {
            format!("-{SAFE}{{5}}-(?:head(?:-{SAFE}{{5}})?|[a-z0-9.-]+-worker-{SAFE}{{5}})")
        }
        // PodClique `<set>-<replica>-<clique>`, its pods `<clique>-<5>`.
        WorkloadKind::PodCliqueSet => format!("-(?:0|[1-9][0-9]*)-[a-z0-9.-]+-{SAFE}{{5}}"),
        // A listed kind's controller names its pods as it does: any suffix after a dash.
        WorkloadKind::Listed(_) => "-[a-z0-9][a-z0-9.-]*".to_string(),
    }
}

/// What is computed per pod and container over the window.
#[derive(Clone, Debug, PartialEq)]
pub enum WindowAggregate {
    /// `quantile_over_time(φ, …)` of the usage rate (a counter's `rate`), φ in [0, 1]
    /// (Prometheus's interpolation, [`quantile`]); the highest across the workload's pods.
    RateQuantile { quantile: f64 },
    /// `max_over_time` of a gauge, of every sample: at each step the highest sample of the
    /// step's interval (`max_over_time(m[step])`), then the highest step; the highest across
    /// pods.
    Peak,
    /// `max_over_time` of `rate(metric) / rate(denominator)` where the denominator's rate is
    /// positive (the throttled share of CFS periods); the highest across pods.
    RateRatioPeak { denominator: String },
    /// Where that rate ratio reached `ratio`: the number of steps at or above it
    /// (`count_over_time`), or with `last` the latest such step (unix seconds); the highest
    /// across pods. What a throttling floor's reason says.
    RateRatioAbove {
        denominator: String,
        ratio: f64,
        last: bool,
    },
    /// The latest step at which the gauge's step peak (as [`WindowAggregate::Peak`]) was above
    /// 0, unix seconds; the latest across pods (kube-state-metrics' OOM kills: when one was last
    /// shown).
    LastPositive,
    /// The earliest subquery step at which the gauge had a value (unix seconds); the earliest
    /// across pods: how much history there is.
    FirstSeen,
}

/// One workload of a window query.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkloadSelector {
    pub namespace: String,
    pub kind: WorkloadKind,
    pub name: String,
    /// Today's pods whose name does not follow [`pod_name_suffix`] (selected by exact name).
    pub other_pods: Vec<String>,
}

impl WorkloadSelector {
    /// The value of [`WORKLOAD_LABEL`] for this workload.
    pub fn label(&self) -> String {
        format!("{}/{}", self.kind.as_str(), self.name)
    }
}

/// One batched window query: `aggregate` of `metric` for every workload of `workloads`, over
/// `(at − window, at]`, on a subquery grid of `step_seconds`.
#[derive(Clone, Debug, PartialEq)]
pub struct WindowQuery {
    pub metric: String,
    pub aggregate: WindowAggregate,
    /// More `label="value"` matchers on every selector of the query, besides the namespace, pod
    /// and container ones (kube-state-metrics' `reason="OOMKilled"`). As in PromQL, an empty
    /// value matches the series without that label.
    pub matchers: Vec<LabelMatcher>,
    pub namespace_label: String,
    pub pod_label: String,
    pub container_label: String,
    /// Shared by the queries of one batch (one per signal): the plan holds each workload's
    /// selector once.
    pub workloads: std::sync::Arc<[WorkloadSelector]>,
    pub at: Timestamp,
    pub window_seconds: i64,
    pub step_seconds: i64,
    /// `R` of `rate(m[R])`: the CPU usage rate's timescale, the same whatever the window
    /// (the policy's `rateWindow`).
    pub rate_seconds: i64,
}

impl WindowQuery {
    /// The two halves of a batch (for a query the source refused), or `None` for one workload.
    pub fn split(&self) -> Option<(WindowQuery, WindowQuery)> {
        if self.workloads.len() < 2 {
            return None;
        }
        let mid = self.workloads.len() / 2;
        let half = |w: &[WorkloadSelector]| WindowQuery {
            workloads: w.into(),
            ..self.clone()
        };
        Some((half(&self.workloads[..mid]), half(&self.workloads[mid..])))
    }

    /// The metrics the query reads (the denominator too).
    pub fn metrics(&self) -> Vec<&str> {
        let mut m = vec![self.metric.as_str()];
        if let WindowAggregate::RateRatioPeak { denominator }
        | WindowAggregate::RateRatioAbove { denominator, .. } = &self.aggregate
        {
            m.push(denominator);
        }
        m
    }
}

/// Identity of one window value.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WindowKey {
    pub namespace: String,
    /// `<Kind>/<name>` ([`WorkloadSelector::label`]).
    pub workload: String,
    pub container: String,
}

/// The answer to a window query.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct WindowSet {
    pub values: BTreeMap<WindowKey, f64>,
    pub warnings: Vec<String>,
    /// Samples the source loaded to answer (Prometheus `stats`), when it says.
    pub samples_loaded: Option<u64>,
    /// Queries sent (more than one when the source refused a batch and it was split).
    pub queries: usize,
    /// Times a refused batch was split in two.
    pub splits: usize,
}

impl WindowSet {
    /// Adds the other half of a split batch.
    pub fn merge(&mut self, other: WindowSet) {
        self.values.extend(other.values);
        self.warnings.extend(other.warnings);
        self.samples_loaded = add_loaded(self.samples_loaded, other.samples_loaded);
        self.queries += other.queries;
        self.splits += other.splits;
    }
}

/// The values a window query aggregates, for the grid steps in `(from, to]` only: per pod and
/// container of its workloads, the rate, gauge or rate ratio at each step (the expression inside
/// its `*_over_time`). The incremental history (docs/metrics.md#incremental-history) asks this
/// for the steps since the last cycle and for those that just left the window.
#[derive(Clone, Debug, PartialEq)]
pub struct StepQuery {
    pub window: WindowQuery,
    /// Left-open, right-closed, unix seconds; the steps are the multiples of the window's step.
    pub from: i64,
    pub to: i64,
}

impl StepQuery {
    /// The grid steps asked: the multiples of the step in `(from, to]`.
    pub fn grid(&self) -> Vec<i64> {
        let step = self.window.step_seconds;
        let mut t = (self.from.div_euclid(step) + 1) * step;
        let mut out = Vec::new();
        while t <= self.to {
            out.push(t);
            t += step;
        }
        out
    }

    /// The two halves of a batch, as [`WindowQuery::split`].
    pub fn split(&self) -> Option<(StepQuery, StepQuery)> {
        let (a, b) = self.window.split()?;
        Some((
            StepQuery { window: a, ..*self },
            StepQuery { window: b, ..*self },
        ))
    }
}

/// One pod's values in one container of a workload, ascending by step.
#[derive(Clone, Debug, PartialEq)]
pub struct PodSteps {
    pub key: WindowKey,
    pub pod: String,
    pub steps: Vec<(i64, f64)>,
}

/// The answer to a step query.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StepSet {
    pub steps: Vec<PodSteps>,
    pub warnings: Vec<String>,
    /// Samples the source loaded to answer (Prometheus `stats`), when it says.
    pub samples_loaded: Option<u64>,
    pub queries: usize,
    pub splits: usize,
}

impl StepSet {
    /// Adds the other half of a split batch.
    pub fn merge(&mut self, other: StepSet) {
        self.steps.extend(other.steps);
        self.warnings.extend(other.warnings);
        self.samples_loaded = add_loaded(self.samples_loaded, other.samples_loaded);
        self.queries += other.queries;
        self.splits += other.splits;
    }
}

/// Which workload a pod of `q` belongs to: the terms' patterns, as the window query's
/// `label_replace` names it.
pub struct PodOwners {
    terms: Vec<(Term, regex::Regex)>,
}

impl PodOwners {
    pub fn new(q: &WindowQuery) -> Result<Self, MetricError> {
        let terms = terms(q)
            .into_iter()
            .map(|t| {
                let re = regex::Regex::new(&format!("^(?:{})$", t.pod_regex)).map_err(|e| {
                    MetricError::Other(format!("invalid pod pattern {:?}: {e}", t.pod_regex))
                })?;
                Ok((t, re))
            })
            .collect::<Result<_, MetricError>>()?;
        Ok(Self { terms })
    }

    /// The `<Kind>/<name>` of the first term selecting `pod` in `namespace`.
    pub fn workload(&self, namespace: &str, pod: &str) -> Option<String> {
        let (t, re) = self
            .terms
            .iter()
            .find(|(t, re)| t.namespace == namespace && re.is_match(pod))?;
        if t.capture == ".*" {
            return Some(t.replacement.clone());
        }
        let caps = re.captures(pod)?;
        let mut out = String::new();
        caps.expand(&t.replacement, &mut out);
        Some(out)
    }
}

/// The PromQL of a step query (a range query on the window's grid): the expression inside the
/// window query's `*_over_time`, per (namespace, pod, container), every term's pods at once.
pub fn build_steps(q: &WindowQuery, extra: Option<&LabelMatcher>) -> String {
    let by = format!(
        "{},{},{}",
        q.namespace_label, q.pod_label, q.container_label
    );
    let r = secs(q.rate_seconds);
    let s = secs(q.step_seconds);
    let terms: Vec<String> = terms(q)
        .into_iter()
        .map(|t| {
            let sel = |metric: &str| selector(q, extra, &t, metric);
            match &q.aggregate {
                WindowAggregate::RateQuantile { .. } => {
                    format!("sum by ({by}) (rate({}[{r}]))", sel(&q.metric))
                }
                WindowAggregate::Peak | WindowAggregate::LastPositive => {
                    format!("sum by ({by}) (max_over_time({}[{s}]))", sel(&q.metric))
                }
                WindowAggregate::FirstSeen => {
                    format!("sum by ({by}) ({})", sel(&q.metric))
                }
                WindowAggregate::RateRatioPeak { denominator }
                | WindowAggregate::RateRatioAbove { denominator, .. } => format!(
                    "(sum by ({by}) (rate({}[{r}])) / (sum by ({by}) (rate({}[{r}])) > 0))",
                    sel(&q.metric),
                    sel(denominator)
                ),
            }
        })
        .collect();
    terms.join(" or ")
}

/// The selector of `metric` for one term's pods.
fn selector(q: &WindowQuery, extra: Option<&LabelMatcher>, t: &Term, metric: &str) -> String {
    let mut out = format!("{metric}{{");
    for m in extra.into_iter().chain(&q.matchers) {
        out.push_str(&format!("{}={},", m.name, quote(&m.value)));
    }
    out.push_str(&format!(
        "{}={},{}=~{},{}!=\"\"}}",
        q.namespace_label,
        quote(&t.namespace),
        q.pod_label,
        quote(&t.pod_regex),
        q.container_label
    ));
    out
}

/// The samples two halves of a split batch loaded: unknown only when neither says.
fn add_loaded(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(0) + b.unwrap_or(0)),
    }
}

/// Rejects window queries neither source can answer, with the same message for both.
pub fn validate(q: &WindowQuery) -> Result<(), MetricError> {
    for m in q.metrics() {
        if !is_metric_name(m) {
            return Err(MetricError::Other(format!("invalid metric name {m:?}")));
        }
    }
    for (what, l) in [
        ("namespace", &q.namespace_label),
        ("pod", &q.pod_label),
        ("container", &q.container_label),
    ]
    .into_iter()
    .chain(q.matchers.iter().map(|m| ("matcher", &m.name)))
    {
        if !is_label_name(l) {
            return Err(MetricError::Other(format!(
                "invalid {what} label name {l:?}"
            )));
        }
    }
    if q.step_seconds <= 0 || q.window_seconds <= 0 {
        return Err(MetricError::Other(format!(
            "window query needs a positive window and step, got {} s and {} s",
            q.window_seconds, q.step_seconds
        )));
    }
    if let WindowAggregate::RateQuantile { quantile } = q.aggregate
        && !(0.0..=1.0).contains(&quantile)
    {
        return Err(MetricError::Other(format!(
            "quantile must be in [0, 1], got {quantile}"
        )));
    }
    Ok(())
}

/// One selector of a query: the pods of `names` (by pattern, capture group 1 = the name) or of
/// one workload (by exact pod names).
pub struct Term {
    pub namespace: String,
    /// RE2 regex, anchored by Prometheus, the pod label must match.
    pub pod_regex: String,
    /// `label_replace` regex and replacement that give the workload label from the pod name.
    pub capture: String,
    pub replacement: String,
}

/// The selectors of `q`: per (namespace, kind) one pattern with every name as alternatives,
/// then one per workload with pods named otherwise. Deterministic order. (Measured on 7 days
/// of 33,000 pods: one alternation of 500 names answered in 2.8 s; 500 selectors of one name
/// each, 61 s — every selector costs Prometheus a pass over the index.)
pub fn terms(q: &WindowQuery) -> Vec<Term> {
    let mut groups: BTreeMap<(&str, WorkloadKind), Vec<&str>> = BTreeMap::new();
    for w in q.workloads.iter() {
        groups
            .entry((w.namespace.as_str(), w.kind))
            .or_default()
            .push(w.name.as_str());
    }
    let mut out = Vec::new();
    for ((ns, kind), names) in groups {
        let alt: Vec<String> = names.iter().map(|n| regex_escape(n)).collect();
        let pattern = format!("({}){}", alt.join("|"), pod_name_suffix(kind));
        out.push(Term {
            namespace: ns.to_string(),
            pod_regex: pattern.clone(),
            capture: pattern,
            replacement: format!("{}/$1", kind.as_str()),
        });
    }
    for w in q.workloads.iter().filter(|w| !w.other_pods.is_empty()) {
        let alt: Vec<String> = w.other_pods.iter().map(|p| regex_escape(p)).collect();
        out.push(Term {
            namespace: w.namespace.clone(),
            pod_regex: alt.join("|"),
            capture: ".*".to_string(),
            replacement: w.label(),
        });
    }
    out
}

/// Formats seconds for PromQL durations.
fn secs(s: i64) -> String {
    format!("{s}s")
}

/// The PromQL of `q` (instant query at `q.at`); `extra` is the cluster label. Call
/// [`validate`] first.
pub fn build(q: &WindowQuery, extra: Option<&LabelMatcher>) -> String {
    let by = format!(
        "{},{},{}",
        q.namespace_label, q.pod_label, q.container_label
    );
    // One millisecond short of the window: the grid steps are whole seconds, so the window is
    // `(at − window, at]` in Prometheus 2 (closed ranges) and 3 (left-open) alike.
    let w = format!("{}ms", q.window_seconds * 1000 - 1);
    let s = secs(q.step_seconds);
    let r = secs(q.rate_seconds);
    let terms: Vec<String> = terms(q)
        .into_iter()
        .map(|t| {
            let sel = |metric: &str| selector(q, extra, &t, metric);
            let inner = match &q.aggregate {
                WindowAggregate::RateQuantile { quantile } => format!(
                    "quantile_over_time({quantile}, sum by ({by}) (rate({}[{r}]))[{w}:{s}])",
                    sel(&q.metric)
                ),
                // Each step's interval's highest sample, not the value at the step: every
                // sample of the window counts, whatever the step.
                WindowAggregate::Peak => format!(
                    "max_over_time(sum by ({by}) (max_over_time({}[{s}]))[{w}:{s}])",
                    sel(&q.metric)
                ),
                WindowAggregate::RateRatioPeak { denominator } => format!(
                    "max_over_time((sum by ({by}) (rate({}[{r}])) / (sum by ({by}) (rate({}[{r}])) > 0))[{w}:{s}])",
                    sel(&q.metric),
                    sel(denominator)
                ),
                WindowAggregate::RateRatioAbove { denominator, ratio, last } => {
                    let above = format!(
                        "(sum by ({by}) (rate({}[{r}])) / (sum by ({by}) (rate({}[{r}])) > 0)) >= {ratio}",
                        sel(&q.metric),
                        sel(denominator)
                    );
                    if *last {
                        format!("max_over_time(timestamp({above})[{w}:{s}])")
                    } else {
                        format!("count_over_time(({above})[{w}:{s}])")
                    }
                }
                WindowAggregate::LastPositive => format!(
                    "max_over_time(timestamp(sum by ({by}) (max_over_time({}[{s}])) > 0)[{w}:{s}])",
                    sel(&q.metric)
                ),
                WindowAggregate::FirstSeen => format!(
                    "min_over_time(timestamp(sum by ({by}) ({}))[{w}:{s}])",
                    sel(&q.metric)
                ),
            };
            format!(
                "label_replace({inner}, {}, {}, {}, {})",
                quote(WORKLOAD_LABEL),
                quote(&t.replacement),
                quote(&q.pod_label),
                quote(&t.capture)
            )
        })
        .collect();
    let across = match q.aggregate {
        WindowAggregate::FirstSeen => "min",
        _ => "max",
    };
    format!(
        "{across} by ({},{WORKLOAD_LABEL},{}) ({})",
        q.namespace_label,
        q.container_label,
        terms.join(" or ")
    )
}

/// Prometheus's `quantile` (promql/quantile.go): for φ in [0, 1] over n values sorted
/// ascending, rank = φ × (n − 1); the result interpolates linearly between the values at
/// ⌊rank⌋ and ⌊rank⌋ + 1. `None` without values.
pub fn quantile(phi: f64, values: &mut [f64]) -> Option<f64> {
    if values.is_empty() || phi.is_nan() {
        return None;
    }
    if phi < 0.0 {
        return Some(f64::NEG_INFINITY);
    }
    if phi > 1.0 {
        return Some(f64::INFINITY);
    }
    values.sort_by(f64::total_cmp);
    let n = values.len() as f64;
    let rank = phi * (n - 1.0);
    let lower = rank.floor().max(0.0);
    let upper = (lower + 1.0).min(n - 1.0);
    let weight = rank - rank.floor();
    Some(values[lower as usize] * (1.0 - weight) + values[upper as usize] * weight)
}

/// The subquery grid of `q` as Prometheus evaluates it: the multiples of the step (absolute
/// time) in `(at − window, at]`, in seconds (see [`build`]).
pub fn grid(q: &WindowQuery) -> Vec<i64> {
    let (step, end) = (q.step_seconds, q.at.as_second());
    let from = end - q.window_seconds;
    let mut t = from.div_euclid(step) * step;
    while t <= from {
        t += step;
    }
    let mut out = Vec::new();
    while t <= end {
        out.push(t);
        t += step;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(aggregate: WindowAggregate) -> WindowQuery {
        WindowQuery {
            metric: "container_cpu_usage_seconds_total".into(),
            aggregate,
            matchers: vec![],
            namespace_label: "namespace".into(),
            pod_label: "pod".into(),
            container_label: "container".into(),
            workloads: vec![
                WorkloadSelector {
                    namespace: "shop".into(),
                    kind: WorkloadKind::Deployment,
                    name: "web".into(),
                    other_pods: vec!["web-manual".into()],
                },
                WorkloadSelector {
                    namespace: "shop".into(),
                    kind: WorkloadKind::Deployment,
                    name: "a.b".into(),
                    other_pods: vec![],
                },
                WorkloadSelector {
                    namespace: "shop".into(),
                    kind: WorkloadKind::StatefulSet,
                    name: "db".into(),
                    other_pods: vec![],
                },
            ]
            .into(),
            at: Timestamp::from_second(1_767_268_800).unwrap(),
            window_seconds: 604_800,
            step_seconds: 61,
            rate_seconds: 244,
        }
    }

    /// Prometheus's documented examples of `quantile` interpolation.
    #[test]
    fn quantile_interpolates_like_prometheus() {
        let mut v: Vec<f64> = (1..=20).map(f64::from).collect();
        // rank 0.95 × 19 = 18.05: 19 + 0.05 × (20 − 19).
        assert!((quantile(0.95, &mut v).unwrap() - 19.05).abs() < 1e-12);
        assert_eq!(quantile(1.0, &mut v), Some(20.0));
        assert_eq!(quantile(0.0, &mut v), Some(1.0));
        assert_eq!(quantile(0.5, &mut [3.0, 1.0, 2.0, 4.0]), Some(2.5));
        assert_eq!(quantile(0.95, &mut [0.3]), Some(0.3));
        assert_eq!(quantile(0.95, &mut []), None);
    }

    #[test]
    fn pod_name_suffixes_match_what_controllers_generate() {
        let matches = |kind, pod: &str, name: &str| {
            regex::Regex::new(&format!(
                "^(?:({}){})$",
                regex_escape(name),
                pod_name_suffix(kind)
            ))
            .unwrap()
            .is_match(pod)
        };
        use WorkloadKind::*;
        assert!(matches(Deployment, "web-7d9c8b5f6d-x2x4z", "web"));
        assert!(!matches(Deployment, "web-api-7d9c8b5f6d-x2x4z", "web"));
        assert!(!matches(Deployment, "web-7d9c8b5f6d", "web"));
        assert!(matches(StatefulSet, "db-0", "db"));
        assert!(matches(StatefulSet, "db-12", "db"));
        assert!(!matches(StatefulSet, "db-01", "db"));
        assert!(matches(DaemonSet, "agent-x2x4z", "agent"));
        assert!(matches(Job, "load-x2x4z", "load"));
        assert!(matches(Job, "load-3-x2x4z", "load"));
        assert!(matches(CronJob, "nightly-29430000-x2x4z", "nightly"));
        assert!(!matches(CronJob, "nightly-x2x4z", "nightly"));
        // KubeRay: a RayService's cluster, its head (random or deterministic name) and workers.
        assert!(matches(
            RayService,
            "svc-raycluster-bcdfg-head-x2x4z",
            "svc"
        ));
        assert!(matches(RayService, "svc-raycluster-bcdfg-head", "svc"));
        assert!(matches(
            RayService,
            "svc-raycluster-bcdfg-gpu-worker-x2x4z",
            "svc"
        ));
        assert!(!matches(
            RayService,
            "svc-raycluster-bcdfg-gpu-worker",
            "svc"
        ));
        // KubeRay: a RayJob's cluster `<job>-<5>`, its head and workers.
        assert!(matches(RayJob, "train-bcdfg-head-x2x4z", "train"));
        assert!(matches(RayJob, "train-bcdfg-gpu-worker-x2x4z", "train"));
        assert!(!matches(RayJob, "train-x2x4z", "train"));
        // KServe: the predictor only (a transformer is a workload of its own).
        assert!(matches(
            InferenceService,
            "llm-predictor-6f9c8d7b5-x2x4z",
            "llm"
        ));
        assert!(!matches(
            InferenceService,
            "llm-transformer-6f9c8d7b5-x2x4z",
            "llm"
        ));
    }

    #[test]
    fn query_selects_by_workload_and_labels_each_series_with_it() {
        let text = build(&q(WindowAggregate::RateQuantile { quantile: 0.95 }), None);
        assert!(text.starts_with("max by (namespace,kerf_workload,container) (label_replace(quantile_over_time(0.95, sum by (namespace,pod,container) (rate(container_cpu_usage_seconds_total{namespace=\"shop\",pod=~\"(web|a\\\\.b)-"), "{text}");
        assert!(text.contains("[244s]))[604799999ms:61s])"), "{text}");
        assert!(
            text.contains("\"kerf_workload\", \"Deployment/$1\""),
            "{text}"
        );
        assert!(
            text.contains("pod=~\"(db)-(?:0|[1-9][0-9]*)\",container!=\"\""),
            "{text}"
        );
        assert!(text.contains("pod=~\"web-manual\""), "{text}");
        assert!(
            text.contains("\"Deployment/web\", \"pod\", \".*\")"),
            "{text}"
        );
        assert_eq!(text.matches(" or ").count(), 2, "{text}");
        let first = build(&q(WindowAggregate::FirstSeen), None);
        assert!(first.starts_with("min by"), "{first}");
        assert!(first.contains("min_over_time(timestamp(sum by"), "{first}");
        let ratio = build(
            &q(WindowAggregate::RateRatioPeak {
                denominator: "periods_total".into(),
            }),
            None,
        );
        assert!(
            ratio.contains("/ (sum by (namespace,pod,container) (rate(periods_total{"),
            "{ratio}"
        );
    }

    fn reason(value: &str) -> LabelMatcher {
        LabelMatcher {
            name: "reason".into(),
            value: value.into(),
        }
    }

    #[test]
    fn matchers_go_into_every_selector_after_the_cluster_label() {
        let query = WindowQuery {
            matchers: vec![reason("OOMKilled")],
            ..q(WindowAggregate::RateRatioPeak {
                denominator: "periods_total".into(),
            })
        };
        validate(&query).unwrap();
        let cluster = LabelMatcher {
            name: "cluster".into(),
            value: "eu".into(),
        };
        let text = build(&query, Some(&cluster));
        // Three terms (Deployments, the StatefulSet, a pod named by hand) of two selectors each
        // (the ratio's numerator and denominator).
        assert_eq!(
            text.matches("{cluster=\"eu\",reason=\"OOMKilled\",namespace=\"shop\",")
                .count(),
            6,
            "{text}"
        );
        let bad = WindowQuery {
            matchers: vec![
                reason("x"),
                LabelMatcher {
                    name: "a-b".into(),
                    value: "x".into(),
                },
            ],
            ..q(WindowAggregate::Peak)
        };
        let e = validate(&bad).unwrap_err().to_string();
        assert!(e.contains("invalid matcher label name \"a-b\""), "{e}");
    }

    #[test]
    fn split_halves_the_batch_down_to_one_workload() {
        let whole = WindowQuery {
            matchers: vec![reason("OOMKilled")],
            ..q(WindowAggregate::Peak)
        };
        let (a, b) = whole.split().unwrap();
        assert_eq!((a.workloads.len(), b.workloads.len()), (1, 2));
        assert_eq!(
            (&a.matchers, &b.matchers),
            (&whole.matchers, &whole.matchers),
            "the halves select the same series"
        );
        assert!(a.split().is_none());
        let (c, d) = b.split().unwrap();
        assert_eq!(
            [&a.workloads[..], &c.workloads[..], &d.workloads[..]].concat(),
            whole.workloads.to_vec()
        );
    }

    #[test]
    fn grid_is_aligned_to_the_step_inside_the_window() {
        let mut query = q(WindowAggregate::Peak);
        query.window_seconds = 600;
        query.step_seconds = 60;
        let g = grid(&query);
        // at is a multiple of 60: the window start is on the grid, and left out.
        assert_eq!(g.first(), Some(&(1_767_268_800 - 540)));
        assert_eq!(g.last(), Some(&1_767_268_800));
        assert_eq!(g.len(), 10);
        query.at += jiff::SignedDuration::from_secs(7);
        assert_eq!(grid(&query).first(), Some(&(1_767_268_800 - 540)));
        assert_eq!(grid(&query).last(), Some(&1_767_268_800));
    }
}
