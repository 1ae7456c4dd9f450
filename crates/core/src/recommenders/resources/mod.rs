//! Whole-snapshot CPU/memory evaluation (RightsizingPolicy / ClusterRightsizingPolicy), in the
//! same two pure halves as the GPU one: [`plan`] picks the winning policy per workload and the
//! batched queries, [`evaluate`] builds each workload's input for
//! [`workload::evaluate_workload`]. [`Resources`] is the recommender over them.
//!
//! The usage history is the workload's (docs/metrics.md#history): per batch of up to
//! [`WORKLOADS_PER_QUERY`] workloads of a policy, one window query per signal asks the metric
//! source for one value per (workload, container) — the CPU percentile, the memory peak, the
//! peak throttled share, the earliest sample, whether kube-state-metrics saw an OOM kill — so
//! what moves per cycle is O(containers), not O(containers × points). The HPAs' replica history
//! stays a range query per policy.

pub mod container;
pub mod floors;
pub mod histogram;
pub mod incremental;
pub mod summary;
pub mod workload;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::hash::{HashMap, HashSet};

use crate::pod::Pod;
use jiff::{SignedDuration, Timestamp};

use self::container::ContainerSignals;
use self::workload::{ContainerInput, EvaluationError, History, HpaInput, RsResult, WorkloadInput};
use crate::grouping::pods_by_owner;
use crate::hpa::{self, ReplicaHistory};
use crate::model::Sample;
use crate::model::WorkloadKey;
use crate::query::promql::LabelMatcher;
use crate::query::window::pod_name_suffix;
use crate::query::{
    Aggregation, MetricError, RangeQuery, WindowAggregate, WindowKey, WindowQuery, WorkloadSelector,
};
use crate::recommenders::cycle::CycleOutput;
use crate::recommenders::gpu::engine::ContainerOutcome as GpuContainer;
use crate::recommenders::{Answer, Evaluation, PlannedQuery, QueryRef, Recommender};
use crate::selection::covering;
use crate::selection::{self, Candidate};
use crate::snapshot::{Snapshot, Workload};
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use kerf_api::ResourceMetrics;
use kerf_support::small_map::SmallMap;

/// kube-state-metrics: a container's last termination reason (namespace/pod/container/reason
/// labels), read with `reason="OOMKilled"` ([`container::OOM_KILLED`]).
pub const LAST_TERMINATED_METRIC: &str = "kube_pod_container_status_last_terminated_reason";
/// kube-state-metrics: the same for init containers, sidecars included (same labels; the
/// regular metric never carries them: `internal/store/pod.go`,
/// `createPodInitContainerStatusLastTerminatedReasonFamilyGenerator`).
pub const INIT_LAST_TERMINATED_METRIC: &str =
    "kube_pod_init_container_status_last_terminated_reason";
pub const REASON_LABEL: &str = "reason";

/// Throttled when at some point of the window at least this share of CFS periods was throttled.
pub const THROTTLED_RATIO: f64 = 0.05;

/// Query grids stay below this many points: long windows (7d) use a coarser step.
const MAX_POINTS: i64 = 10_000;

/// Workloads per window query before any split: big enough that a 25,000-workload cluster
/// takes a few hundred queries, small enough that the text stays a few hundred kB. A batch the
/// source refuses is split (`crate::query::window_query_splitting`).
pub const WORKLOADS_PER_QUERY: usize = 500;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RsSignal {
    /// The CPU usage percentile over the CPU window.
    Cpu,
    /// The peak working set over the memory window.
    Memory,
    /// The peak throttled share of CFS periods over the CPU window.
    Throttled,
    /// The most steps a pod spent throttled ([`THROTTLED_RATIO`]) in the CPU window.
    ThrottledFor,
    /// The last step a pod was throttled in the CPU window (unix seconds).
    ThrottledAt,
    /// The earliest working-set sample over the longer window: how much history there is.
    History,
    /// kube-state-metrics: an OOM kill as a pod's last termination, at some step of the memory
    /// window (pods replaced since included): the last step it showed (unix seconds).
    OomKilled,
    /// The same for init containers (sidecars): asked only for batches with a sidecar.
    InitOomKilled,
    /// kube-state-metrics: the HPAs' current replicas (docs/design/hpa-coordination.md#h7).
    HpaCurrentReplicas,
    /// kube-state-metrics: the HPAs' `spec.maxReplicas`.
    HpaMaxReplicas,
}

impl RsSignal {
    /// The per-(workload, container) window signals, queried for every batch.
    pub const WINDOW: [RsSignal; 7] = [
        RsSignal::Cpu,
        RsSignal::Memory,
        RsSignal::Throttled,
        RsSignal::ThrottledFor,
        RsSignal::ThrottledAt,
        RsSignal::History,
        RsSignal::OomKilled,
    ];
    /// The HPA replica history, queried for every policy whose workloads have an HPA.
    pub const REPLICAS: [RsSignal; 2] = [RsSignal::HpaCurrentReplicas, RsSignal::HpaMaxReplicas];

    /// The metric the signal reads: cAdvisor's as `metrics` names them, kube-state-metrics' as
    /// they are.
    pub fn metric(self, metrics: &ResourceMetrics) -> &str {
        match self {
            RsSignal::Cpu => &metrics.cpu,
            RsSignal::Memory | RsSignal::History => &metrics.memory,
            RsSignal::Throttled | RsSignal::ThrottledFor | RsSignal::ThrottledAt => {
                &metrics.throttling
            }
            RsSignal::OomKilled => LAST_TERMINATED_METRIC,
            RsSignal::InitOomKilled => INIT_LAST_TERMINATED_METRIC,
            RsSignal::HpaCurrentReplicas => hpa::KSM_CURRENT_REPLICAS,
            RsSignal::HpaMaxReplicas => hpa::KSM_MAX_REPLICAS,
        }
    }

    /// How the signal is named in messages.
    pub fn as_str(self) -> &'static str {
        match self {
            RsSignal::Cpu => "cpu",
            RsSignal::Memory => "memory",
            RsSignal::Throttled => "cpu_throttling",
            RsSignal::ThrottledFor => "cpu_throttled_steps",
            RsSignal::ThrottledAt => "cpu_throttled_at",
            RsSignal::History => "history",
            RsSignal::OomKilled => "oom_killed",
            RsSignal::InitOomKilled => "init_oom_killed",
            RsSignal::HpaCurrentReplicas => hpa::KSM_CURRENT_REPLICAS,
            RsSignal::HpaMaxReplicas => hpa::KSM_MAX_REPLICAS,
        }
    }
}

/// The windows of a policy's recipes, in seconds: (cpu, memory).
fn windows(spec: &kerf_api::RightsizingPolicySpec) -> (i64, i64) {
    let cpu = spec.resources.cpu.clone().unwrap_or_default().window;
    let memory = spec.resources.memory.clone().unwrap_or_default().window;
    (cpu.seconds() as i64, memory.seconds() as i64)
}

/// The CPU usage rate's timescale of a policy, in seconds (`rateWindow`).
fn rate_window(spec: &kerf_api::RightsizingPolicySpec) -> i64 {
    let cpu = spec.resources.cpu.clone().unwrap_or_default();
    cpu.rate_window.seconds() as i64
}

/// The range query of one HPA replica signal selecting `series` (namespace, HPA name) over the
/// last `window` seconds.
fn replicas_query(
    signal: RsSignal,
    metrics: &ResourceMetrics,
    series: &BTreeSet<(String, String)>,
    window: i64,
    now: Timestamp,
    step_seconds: i64,
) -> RangeQuery {
    let sorted = |v: Vec<String>| -> Vec<String> {
        v.into_iter().collect::<BTreeSet<_>>().into_iter().collect()
    };
    RangeQuery {
        metric: signal.metric(metrics).into(),
        namespace_label: "namespace".into(),
        pod_label: hpa::KSM_HPA_LABEL.into(),
        container_label: String::new(),
        namespaces: sorted(series.iter().map(|(ns, _)| ns.clone()).collect()),
        pods: sorted(series.iter().map(|(_, p)| p.clone()).collect()).into(),
        start: now - SignedDuration::from_secs(window),
        end: now,
        step_seconds: step_for(window, step_seconds),
        counter: Some(false),
        // Several kube-state-metrics replicas export the same value: one value, not a sum.
        aggregation: Aggregation::Max,
        // kube-state-metrics' series: another job's, none of cAdvisor's matchers.
        matchers: Vec::new(),
    }
}

/// The window query of one signal for a batch of workloads.
fn window_query(
    signal: RsSignal,
    spec: &kerf_api::RightsizingPolicySpec,
    metrics: &ResourceMetrics,
    workloads: Arc<[WorkloadSelector]>,
    now: Timestamp,
    step_seconds: i64,
) -> WindowQuery {
    let (cpu_window, mem_window) = windows(spec);
    // The configured matchers pick one scrape of cAdvisor; kube-state-metrics' series are
    // another job's and keep none of them.
    let mut matchers: Vec<LabelMatcher> = match signal {
        RsSignal::OomKilled | RsSignal::InitOomKilled => Vec::new(),
        _ => LabelMatcher::of_resource_metrics(metrics),
    };
    let rate = rate_window(spec);
    let (aggregate, window) = match signal {
        RsSignal::Cpu => {
            let percentile = spec.resources.cpu.clone().unwrap_or_default().percentile;
            (
                WindowAggregate::RateQuantile {
                    quantile: percentile / 100.0,
                },
                cpu_window,
            )
        }
        RsSignal::Memory => (WindowAggregate::Peak, mem_window),
        RsSignal::OomKilled | RsSignal::InitOomKilled => {
            matchers.push(LabelMatcher {
                name: REASON_LABEL.into(),
                value: container::OOM_KILLED.into(),
            });
            (WindowAggregate::LastPositive, mem_window)
        }
        RsSignal::Throttled => (
            WindowAggregate::RateRatioPeak {
                denominator: metrics.periods.clone(),
            },
            cpu_window,
        ),
        RsSignal::ThrottledFor | RsSignal::ThrottledAt => (
            WindowAggregate::RateRatioAbove {
                denominator: metrics.periods.clone(),
                ratio: THROTTLED_RATIO,
                last: signal == RsSignal::ThrottledAt,
            },
            cpu_window,
        ),
        _ => (WindowAggregate::FirstSeen, cpu_window.max(mem_window)),
    };
    WindowQuery {
        metric: signal.metric(metrics).into(),
        aggregate,
        matchers,
        namespace_label: "namespace".into(),
        pod_label: "pod".into(),
        container_label: "container".into(),
        workloads,
        at: now,
        window_seconds: window,
        step_seconds: match signal {
            RsSignal::Cpu
            | RsSignal::Throttled
            | RsSignal::ThrottledFor
            | RsSignal::ThrottledAt => cpu_step_for(window, step_seconds, rate),
            _ => step_for(window, step_seconds),
        },
        rate_seconds: rate,
    }
}

#[derive(Clone, Debug)]
pub struct RsWorkloadPlan {
    pub workload: usize,
    pub policy: usize,
    /// Today's pods (their statuses say what was OOM-killed; the window's OOM signal adds the
    /// pods replaced since).
    pub pods: Vec<usize>,
}

/// A query of the plan.
#[derive(Clone, Debug)]
pub enum RsQuery {
    /// One signal for a batch (`batch` indexes [`RsPlan::batches`]).
    Window { batch: usize, query: WindowQuery },
    /// One signal's steps for a group of the incremental history (`group` indexes
    /// [`RsPlan::groups`]; its workloads are `batch`).
    Steps {
        batch: usize,
        group: usize,
        part: incremental::Part,
        query: crate::query::window::StepQuery,
    },
    /// The HPAs' replica history of a policy.
    Range(RangeQuery),
}

#[derive(Clone, Debug, Default)]
pub struct RsPlan {
    pub workloads: Vec<RsWorkloadPlan>,
    /// Batches of plan workloads (indexes into `workloads`), each of one policy.
    pub batches: Vec<Vec<usize>>,
    /// (policy, signal, query), in the order they are asked.
    pub queries: Vec<(usize, RsSignal, RsQuery)>,
    /// Policies whose strategy does not resolve, with the message for their status: they still
    /// recommend, and are not applied.
    pub unresolved: BTreeMap<usize, String>,
    /// The incremental history's groups, when it is kept ([`Resources::history`]).
    pub groups: Vec<incremental::Group>,
}

/// The step for a window: at least `step`, coarse enough to stay under [`MAX_POINTS`].
/// (Memory needs no finer one: its peak counts every sample of each step's interval.)
pub fn step_for(window_seconds: i64, step: i64) -> i64 {
    step.max((window_seconds + MAX_POINTS - 1) / MAX_POINTS)
}

/// Steps of a CPU window at most: a histogram's bin counts to 65,535 (45 days at 1 minute).
const MAX_CPU_STEPS: i64 = 65_000;

/// The CPU grid's step for a window: [`step_for`]'s, but never coarser than the rate window
/// `rate_seconds`, so the percentile is one of rates over `rate_seconds` whatever the window
/// (a coarser grid would sample fewer of them, not other ones) — up to [`MAX_CPU_STEPS`].
pub fn cpu_step_for(window_seconds: i64, step: i64, rate_seconds: i64) -> i64 {
    let finest = (window_seconds + MAX_CPU_STEPS - 1) / MAX_CPU_STEPS;
    step_for(window_seconds, step)
        .min(rate_seconds)
        .max(finest)
        .max(1)
}

/// Selects a workload's pods by the names its controller gives them ([`pod_name_suffix`]);
/// today's pods named otherwise are listed by name.
struct Selectors {
    suffixes: HashMap<kerf_api::WorkloadKind, regex::Regex>,
    /// Every listed kind's ([`pod_name_suffix`] is one for all).
    listed: regex::Regex,
}

impl Selectors {
    fn new() -> Self {
        let re = |k| {
            regex::Regex::new(&format!("^(?:{})$", pod_name_suffix(k)))
                .expect("the suffix patterns are valid")
        };
        let suffixes = kerf_api::WorkloadKind::ALL
            .into_iter()
            .map(|k| (k, re(k)))
            .collect();
        let listed = kerf_api::WorkloadKind::Listed(kerf_api::listed_kinds::ListedKind::of(
            &Default::default(),
        ));
        Self {
            suffixes,
            listed: re(listed),
        }
    }

    fn selector(&self, key: &WorkloadKey, pods: &[&Pod]) -> WorkloadSelector {
        let suffix = self.suffixes.get(&key.kind).unwrap_or(&self.listed);
        let other_pods = pods
            .iter()
            .filter_map(|p| p.metadata.name.as_deref())
            .filter(|name| {
                !name
                    .strip_prefix(key.name.as_str())
                    .is_some_and(|rest| suffix.is_match(rest))
            })
            .map(str::to_string)
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        WorkloadSelector {
            namespace: key.namespace.to_string(),
            kind: key.kind,
            name: key.name.to_string(),
            other_pods,
        }
    }
}

/// The rightsizing policy that wins a workload (docs/design/gpu-engine.md#g11), as its index in
/// the snapshot; None when none covers it or no single one wins.
fn winning_policy(snapshot: &Snapshot, w: &Workload) -> Option<usize> {
    let covering: Vec<(usize, Candidate<'_>)> =
        covering(&snapshot.rightsizing_policies, w, |p| p.candidate())
            .into_iter()
            .collect();
    let candidates: Vec<Candidate<'_>> = covering.iter().map(|(_, c)| c.clone()).collect();
    let winner = selection::single_winner(&candidates, &snapshot.precedence)?;
    covering
        .iter()
        .find(|(_, c)| c.id == winner.id)
        .map(|(i, _)| *i)
}

pub fn plan(
    snapshot: &Snapshot,
    now: Timestamp,
    step_seconds: i64,
    history: Option<&summary::HistoryStore>,
) -> RsPlan {
    let mut out = RsPlan::default();
    // Without a rightsizing policy nothing is covered: no owner index to build (a GPU-only
    // cluster of 150,000 pods spent ≈3 % of its cycle on it).
    if snapshot.rightsizing_policies.is_empty() {
        return out;
    }
    for (i, p) in snapshot.rightsizing_policies.iter().enumerate() {
        let name = &p.spec.automation_strategy_ref.name;
        if let Some(why) = snapshot.unresolved_strategy(p.id.namespace.as_deref(), name) {
            out.unresolved.insert(i, why);
        }
    }
    let mut pods_by_owner = pods_by_owner(snapshot);
    let hpas = hpa::hpa_index(&snapshot.hpas);
    let selectors = Selectors::new();
    // Per policy: its plan workloads with their selectors, and its HPAs.
    let mut per_policy: BTreeMap<usize, Vec<(usize, WorkloadSelector)>> = BTreeMap::new();
    let mut hpas_per_policy: BTreeMap<usize, BTreeSet<(String, String)>> = BTreeMap::new();
    for (wi, w) in snapshot.workloads.iter().enumerate() {
        if snapshot.global.is_protected(&w.key.namespace) {
            continue;
        }
        let Some(policy) = winning_policy(snapshot, w) else {
            continue;
        };
        let pods = pods_by_owner.remove(&w.key).unwrap_or_default();
        let pod_refs: Vec<&Pod> = pods.iter().map(|&i| &*snapshot.pods[i]).collect();
        per_policy
            .entry(policy)
            .or_default()
            .push((out.workloads.len(), selectors.selector(&w.key, &pod_refs)));
        if let Some(h) = hpa::workload_hpa(&hpas, w) {
            hpas_per_policy.entry(policy).or_default().insert((
                w.key.namespace.to_string(),
                h.metadata.name.clone().unwrap_or_default(),
            ));
        }
        out.workloads.push(RsWorkloadPlan {
            workload: wi,
            policy,
            pods,
        });
    }
    plan_batches(&mut out, snapshot, per_policy, history, now, step_seconds);
    // The HPAs' replica history over the longer window, batched like the rest: one query per
    // policy and series (docs/design/hpa-coordination.md#h7).
    for (pi, hpas) in hpas_per_policy {
        let (cpu_window, mem_window) = windows(&snapshot.rightsizing_policies[pi].spec);
        for signal in RsSignal::REPLICAS {
            let q = replicas_query(
                signal,
                &snapshot.global.prometheus.resource_metrics,
                &hpas,
                cpu_window.max(mem_window),
                now,
                step_seconds,
            );
            out.queries.push((pi, signal, RsQuery::Range(q)));
        }
    }
    out
}

/// Each policy's workloads in batches, each asked through the window queries or, with a kept
/// `history`, through the step queries of its incremental-history groups.
fn plan_batches(
    out: &mut RsPlan,
    snapshot: &Snapshot,
    per_policy: BTreeMap<usize, Vec<(usize, WorkloadSelector)>>,
    history: Option<&summary::HistoryStore>,
    now: Timestamp,
    step_seconds: i64,
) {
    let mut backfill_budget = incremental::backfill_budget(per_policy.values().map(Vec::len).sum());
    for (pi, members) in per_policy {
        let spec = &snapshot.rightsizing_policies[pi].spec;
        for chunk in members.chunks(WORKLOADS_PER_QUERY) {
            let Some(history) = history else {
                push_window_batch(out, snapshot, pi, chunk, now, step_seconds);
                continue;
            };
            let selectors: Vec<WorkloadSelector> = chunk.iter().map(|(_, s)| s.clone()).collect();
            let groups =
                incremental::group_of(history, spec, &selectors, now.as_second(), step_seconds);
            for (group, members) in groups {
                let members: Vec<(usize, WorkloadSelector)> =
                    members.into_iter().map(|i| chunk[i].clone()).collect();
                if !group.is_backfill() {
                    push_step_batch(out, snapshot, pi, group, &members, now, step_seconds);
                    continue;
                }
                // Those waiting for their turn to backfill: the window answers them meanwhile.
                let turn = backfill_budget.min(members.len());
                let (members, waiting) = members.split_at(turn);
                if !waiting.is_empty() {
                    push_window_batch(out, snapshot, pi, waiting, now, step_seconds);
                }
                backfill_budget -= turn;
                for part in members.chunks(incremental::BACKFILL_WORKLOADS_PER_QUERY) {
                    let group = incremental::Group {
                        workloads: part
                            .iter()
                            .map(|(_, s)| (s.namespace.clone(), s.label()))
                            .collect(),
                        ..group.clone()
                    };
                    push_step_batch(out, snapshot, pi, group, part, now, step_seconds);
                }
            }
        }
    }
}

/// Whether some workload of `members` rightsizes a sidecar: its terminations are another
/// series, asked only then, so clusters without sidecars pay no extra query.
fn has_sidecar(out: &RsPlan, snapshot: &Snapshot, members: &[(usize, WorkloadSelector)]) -> bool {
    members.iter().any(|(i, _)| {
        let spec = snapshot.workloads[out.workloads[*i].workload]
            .template
            .pod_spec();
        container::counted_containers(spec).len() > spec.containers.len()
    })
}

/// A new batch of `members`: its index and its workloads' selectors, shared by its queries
/// ([`batch_selectors`]).
fn new_batch(
    out: &mut RsPlan,
    members: &[(usize, WorkloadSelector)],
) -> (usize, Arc<[WorkloadSelector]>) {
    out.batches.push(members.iter().map(|(i, _)| *i).collect());
    (out.batches.len() - 1, batch_selectors(members))
}

/// The selectors of a batch's workloads, held once and shared by every query of the batch (one
/// per signal and part) and its incremental-history group: a plan of 25,000 workloads held
/// each selector five to eight times (docs/performance.md).
pub fn batch_selectors(members: &[(usize, WorkloadSelector)]) -> Arc<[WorkloadSelector]> {
    members.iter().map(|(_, s)| s.clone()).collect()
}

/// One batch of plan workloads `members` of policy `pi`, asked through the window queries.
fn push_window_batch(
    out: &mut RsPlan,
    snapshot: &Snapshot,
    pi: usize,
    members: &[(usize, WorkloadSelector)],
    now: Timestamp,
    step_seconds: i64,
) {
    let spec = &snapshot.rightsizing_policies[pi].spec;
    let (batch, selectors) = new_batch(out, members);
    let init = has_sidecar(out, snapshot, members).then_some(RsSignal::InitOomKilled);
    for signal in RsSignal::WINDOW.into_iter().chain(init) {
        let query = window_query(
            signal,
            spec,
            &snapshot.global.prometheus.resource_metrics,
            selectors.clone(),
            now,
            step_seconds,
        );
        out.queries
            .push((pi, signal, RsQuery::Window { batch, query }));
    }
}

/// One batch of plan workloads `members` of policy `pi`, asked through the step queries of
/// their incremental-history `group`.
fn push_step_batch(
    out: &mut RsPlan,
    snapshot: &Snapshot,
    pi: usize,
    group: incremental::Group,
    members: &[(usize, WorkloadSelector)],
    now: Timestamp,
    step_seconds: i64,
) {
    let spec = &snapshot.rightsizing_policies[pi].spec;
    let (batch, selectors) = new_batch(out, members);
    let init = has_sidecar(out, snapshot, members);
    let gi = out.groups.len();
    let group = incremental::Group { selectors, ..group };
    let queries = group.queries(
        spec,
        &snapshot.global.prometheus.resource_metrics,
        init,
        now,
        step_seconds,
    );
    out.groups.push(group);
    for (signal, part, query) in queries {
        out.queries.push((
            pi,
            signal,
            RsQuery::Steps {
                batch,
                group: gi,
                part,
                query,
            },
        ));
    }
}

/// An HPA's replica samples by (namespace, HPA name).
type ReplicaSamples = HashMap<(String, String), Vec<Sample>>;

/// What the answers said: window values per signal, the HPAs' replica samples per policy, the
/// plan workloads whose queries failed.
#[derive(Debug, Default)]
pub struct RsAnswers {
    window: HashMap<RsSignal, HashMap<WindowKey, f64>>,
    replicas: HashMap<(usize, RsSignal), ReplicaSamples>,
    /// Plan workloads (indexes) a failed query left without some signal.
    failed: HashSet<usize>,
    /// Incremental-history groups a failed query left incomplete.
    failed_groups: HashSet<usize>,
    /// The step answers folded once the cycle's answers are all in (a steady group's, which
    /// are small, and every fresh part), by plan query index.
    pending_steps: Vec<(usize, incremental::Part, crate::query::window::StepSet)>,
}

impl RsAnswers {
    /// Takes the answer to `plan.queries[index]`.
    pub fn answer(&mut self, plan: &RsPlan, index: usize, answer: Result<Answer, MetricError>) {
        let (pi, signal, query) = &plan.queries[index];
        match (query, answer) {
            (RsQuery::Window { .. }, Ok(Answer::Window(set))) => {
                self.window.entry(*signal).or_default().extend(set.values);
            }
            (RsQuery::Range(_), Ok(Answer::Range(set))) => {
                let m = set
                    .series
                    .into_iter()
                    .map(|(k, v)| ((k.namespace, k.pod), v))
                    .collect();
                self.replicas.insert((*pi, *signal), m);
            }
            (RsQuery::Steps { .. }, Ok(Answer::Steps(set))) => {
                self.steps_answer(plan, index, set, None);
            }
            (RsQuery::Window { batch, .. }, _) => {
                self.failed.extend(plan.batches[*batch].iter().copied());
            }
            (RsQuery::Steps { batch, group, .. }, _) => {
                self.failed.extend(plan.batches[*batch].iter().copied());
                self.failed_groups.insert(*group);
            }
            (RsQuery::Range(_), _) => {
                let of_policy = plan.workloads.iter().enumerate();
                self.failed
                    .extend(of_policy.filter(|(_, w)| w.policy == *pi).map(|(i, _)| i));
            }
        }
    }

    fn value(&self, signal: RsSignal, key: &WindowKey) -> Option<f64> {
        self.window.get(&signal)?.get(key).copied()
    }

    /// Takes a step answer: a backfill's settled steps folded into `history` as they arrive
    /// (a week of steps per pod is not held until the last answer), the others kept until all
    /// are in.
    fn steps_answer(
        &mut self,
        plan: &RsPlan,
        index: usize,
        set: crate::query::window::StepSet,
        mut history: Option<&mut summary::HistoryStore>,
    ) {
        let (_, signal, RsQuery::Steps { group, part, .. }) = &plan.queries[index] else {
            return;
        };
        for (part, set) in incremental::split_answer(*part, set) {
            match history.as_deref_mut() {
                Some(h) if folded_on_arrival(plan, *group, part) => {
                    plan.groups[*group].fold_answer(h, *signal, part, &set)
                }
                _ => self.pending_steps.push((index, part, set)),
            }
        }
    }

    /// Once every answer is in, per group: its pending answers folded, the fresh steps counted
    /// for this cycle's window values and taken out again, and what it now covers. A steady
    /// group a query failed for is left as it was (the next cycle asks for the steps since);
    /// a backfill that failed is forgotten and read again. Their workloads keep their last
    /// recommendations meanwhile.
    fn finish_steps(&mut self, plan: &RsPlan, history: &mut summary::HistoryStore) {
        let mut pending: BTreeMap<usize, Vec<(RsSignal, incremental::Part, StepSetRef)>> =
            BTreeMap::new();
        for (index, part, set) in std::mem::take(&mut self.pending_steps) {
            if let (_, signal, RsQuery::Steps { group, .. }) = &plan.queries[index] {
                pending
                    .entry(*group)
                    .or_default()
                    .push((*signal, part, set));
            }
        }
        for (gi, group) in plan.groups.iter().enumerate() {
            if self.failed_groups.contains(&gi) {
                if group.is_backfill() {
                    history.forget(&group.workloads);
                }
                continue;
            }
            let answers = pending.remove(&gi).unwrap_or_default();
            for (signal, part, set) in &answers {
                group.fold_answer(history, *signal, *part, set);
            }
            for (signal, key, v) in group.values(history) {
                self.window.entry(signal).or_default().insert(key, v);
            }
            for (signal, part, set) in &answers {
                if *part == incremental::Part::Fresh {
                    group.unfold_fresh(history, *signal, set);
                }
            }
            group.cover(history);
        }
    }
}

/// Whether a step answer is folded as it arrives: a backfill's settled steps (large, and
/// forgotten whole if the group fails).
fn folded_on_arrival(plan: &RsPlan, group: usize, part: incremental::Part) -> bool {
    plan.groups[group].is_backfill() && part == incremental::Part::New
}

type StepSetRef = crate::query::window::StepSet;

/// The HPA's kube-state-metrics replica history over the window of the resource it scales on
/// (docs/design/hpa-coordination.md#h7); `None` when there is no current-replicas series for it.
fn replica_history(
    answers: &RsAnswers,
    policy: usize,
    namespace: &str,
    h: &HorizontalPodAutoscaler,
    spec: &kerf_api::RightsizingPolicySpec,
    now: Timestamp,
) -> Option<ReplicaHistory> {
    let a = hpa::analyze_metrics(h);
    let resource = a
        .supported
        .or(a.first_target)
        .map(|(r, _)| r)
        .or_else(|| a.utilization_resources.first().copied());
    let (cpu_window, mem_window) = windows(spec);
    let window = match resource {
        Some(hpa::HpaResource::Memory) => mem_window,
        _ => cpu_window,
    };
    let from = now.as_second() - window;
    let key = (
        namespace.to_string(),
        h.metadata.name.clone().unwrap_or_default(),
    );
    let in_window = |signal: RsSignal| -> Option<Vec<Sample>> {
        let samples = answers.replicas.get(&(policy, signal))?.get(&key)?;
        Some(
            samples
                .iter()
                .filter(|(t, _)| *t > from && *t <= now.as_second())
                .copied()
                .collect(),
        )
    };
    Some(ReplicaHistory {
        current: in_window(RsSignal::HpaCurrentReplicas)?,
        max: in_window(RsSignal::HpaMaxReplicas).unwrap_or_default(),
    })
}

/// The workload's usage history: the earliest sample of any of its containers in the longer
/// window. History within 1 % of the window (at least two grid steps) counts as the whole
/// window: the grid's first step and scrape timing put the first sample a little late.
fn history(
    answers: &RsAnswers,
    keys: &[WindowKey],
    spec: &kerf_api::RightsizingPolicySpec,
    now: Timestamp,
    step_seconds: i64,
) -> History {
    let (cpu_window, mem_window) = windows(spec);
    let window = cpu_window.max(mem_window);
    let first = keys
        .iter()
        .filter_map(|k| answers.value(RsSignal::History, k))
        .reduce(f64::min);
    History {
        seconds: first.map(|t| now.as_second() - t.floor() as i64),
        window_seconds: window,
        slack_seconds: (2 * step_for(window, step_seconds)).max(window / 100),
    }
}

/// One container's signals over the window, from the window answers and today's pods (`oom`:
/// their OOM kills' `finishedAt`), the CPU grid's step `cpu_step`.
fn observed_signals(
    name: &str,
    current: crate::model::ResourceRequests,
    key: &WindowKey,
    answers: &RsAnswers,
    oom: &BTreeMap<String, i64>,
    cpu_step: i64,
) -> ContainerSignals {
    let peak_share = answers.value(RsSignal::Throttled, key);
    // Names are unique across a pod's containers and init containers: the two series never
    // speak of the same container.
    let shown = [RsSignal::OomKilled, RsSignal::InitOomKilled]
        .into_iter()
        .filter_map(|s| answers.value(s, key))
        .filter(|v| container::oom_killed_in_history(Some(*v)))
        .reduce(f64::max);
    let oom_killed_at = match (oom.get(name), shown) {
        (Some(at), _) => Some(container::OomSeen::Killed(*at)),
        (None, Some(at)) => Some(container::OomSeen::Shown(at as i64)),
        (None, None) => None,
    };
    ContainerSignals {
        name: name.to_string(),
        current,
        cpu: answers.value(RsSignal::Cpu, key),
        memory: answers.value(RsSignal::Memory, key),
        throttled: container::throttled(peak_share, THROTTLED_RATIO),
        oom_killed: oom_killed_at.is_some(),
        throttling: peak_share.map(|peak_share| container::Episode {
            peak_share,
            seconds: answers
                .value(RsSignal::ThrottledFor, key)
                .map(|steps| steps as i64 * cpu_step),
            last_at: answers.value(RsSignal::ThrottledAt, key).map(|t| t as i64),
        }),
        oom_killed_at,
    }
}

/// What HPA coordination reads of a workload's HPA: the HPA, and whether it reached
/// `maxReplicas` in the window (from its replica history, when there is one).
fn hpa_input(
    answers: &RsAnswers,
    policy: usize,
    h: &HorizontalPodAutoscaler,
    spec: &kerf_api::RightsizingPolicySpec,
    pod_spec: &crate::pod::PodSpec,
    now: Timestamp,
    w: &Workload,
) -> HpaInput {
    let history = replica_history(answers, policy, &w.key.namespace, h, spec, now);
    HpaInput {
        hpa: h.clone(),
        max_replicas_reached: hpa::max_replicas_reached(h, history.as_ref()),
        replica_history: history.is_some(),
        pod_level_requests: hpa::pod_level_requests_set(pod_spec),
        owner_managed: owner_managed(w),
    }
}

/// Who owns a workload's template (and so its HPA) when kerf does not write it.
fn owner_managed(w: &Workload) -> Option<String> {
    if w.template_writable() {
        return None;
    }
    Some(match w.ownership.controller.as_deref() {
        Some(c) if w.ownership.owned => format!("{} {}", c.kind, c.name),
        _ => format!("the {} controller", w.key.kind.as_str()),
    })
}

/// The keys under which the window answers hold each counted container of a workload.
fn window_keys(key: &WorkloadKey, counted: &[&crate::pod::Container]) -> Vec<WindowKey> {
    let workload_label = format!("{}/{}", key.kind.as_str(), key.name);
    counted
        .iter()
        .map(|c| WindowKey {
            namespace: key.namespace.to_string(),
            workload: workload_label.clone(),
            container: c.name.to_string(),
        })
        .collect()
}

/// Evaluates every planned workload. `gpu` carries the GPU engine's per-container values so the
/// recommendation resource shows them and counts them in savings. Each result boxed as it is
/// built: joining them to the cycle's outcomes then moves pointers, not the results (25,000
/// results were held twice for a moment, docs/performance.md).
pub fn evaluate(
    snapshot: &Snapshot,
    plan: &RsPlan,
    answers: &RsAnswers,
    gpu: &HashMap<&WorkloadKey, &SmallMap<String, GpuContainer>>,
    now: Timestamp,
    step_seconds: i64,
) -> Vec<Box<RsResult>> {
    let hpas = hpa::hpa_index(&snapshot.hpas);
    let mut out = Vec::with_capacity(plan.workloads.len());
    for (i, wp) in plan.workloads.iter().enumerate() {
        let w = &snapshot.workloads[wp.workload];
        let policy = &snapshot.rightsizing_policies[wp.policy];
        let pods: Vec<&Pod> = wp.pods.iter().map(|&i| &*snapshot.pods[i]).collect();
        let spec = w.template.pod_spec();
        let mem_window = policy
            .spec
            .resources
            .memory
            .clone()
            .unwrap_or_default()
            .window
            .signed();
        // Today's pods' statuses; the window query below adds the pods replaced since.
        let oom = container::oom_killed_containers(&pods, now - mem_window, now);
        let counted = container::counted_containers(spec);
        let keys = window_keys(&w.key, &counted);
        let mut containers = Vec::new();
        let mut bad_request: Option<EvaluationError> = None;
        let gpu_w = gpu.get(&w.key).copied();
        let (cpu_window, _) = windows(&policy.spec);
        let cpu_step = cpu_step_for(cpu_window, step_seconds, rate_window(&policy.spec));
        for (c, key) in counted.iter().zip(&keys) {
            let current = match container::effective_requests(c) {
                Ok(r) => r,
                Err(e) => {
                    bad_request = Some(EvaluationError::Request {
                        container: c.name.to_string(),
                        error: e,
                    });
                    Default::default()
                }
            };
            let in_scope = policy.spec.scope.containers.is_empty()
                || policy.spec.scope.containers.iter().any(|n| *n == c.name);
            let g = gpu_w.and_then(|m| m.get(c.name.as_str()));
            containers.push(ContainerInput {
                signals: observed_signals(&c.name, current, key, answers, &oom, cpu_step),
                limits: container::container_limits(c),
                in_scope,
                gpu_current: g.and_then(|g| g.current),
                gpu_recommended: g.and_then(|g| g.recommended),
            });
        }
        let hpa = hpa::workload_hpa(&hpas, w)
            .map(|h| hpa_input(answers, wp.policy, h, &policy.spec, spec, now, w));
        let metrics_unavailable = answers.failed.contains(&i);
        let outcome = match bad_request {
            Some(e) => Err(e),
            None => workload::evaluate_workload(&WorkloadInput {
                strategy_unresolved: plan.unresolved.get(&wp.policy).cloned(),
                policy: policy.spec.clone(),
                containers,
                hpa,
                pod_level_resources: hpa::pod_level_resources(spec),
                limit_range: crate::limits::namespace_limit_range(
                    &snapshot.limit_ranges,
                    &w.key.namespace,
                ),
                regular_containers: spec.containers.len(),
                quotas: crate::limits::namespace_quotas(
                    &snapshot.resource_quotas,
                    &w.key.namespace,
                ),
                vpa: crate::vpa::applying_vpa(
                    &snapshot.vpas,
                    &w.key.namespace,
                    w.key.kind.as_str(),
                    &w.key.name,
                )
                .cloned(),
                replicas: w.replicas.unwrap_or(1),
                history: history(answers, &keys, &policy.spec, now, step_seconds),
                now,
            })
            .map_err(EvaluationError::from),
        };
        out.push(Box::new(RsResult {
            key: w.key.clone(),
            policy: policy.id.clone(),
            outcome,
            metrics_unavailable,
        }));
    }
    out
}

/// CPU/memory requests with HPA coordination (docs/design/hpa-coordination.md).
#[derive(Clone, Default)]
pub struct Resources {
    /// The usage history kept between cycles (docs/metrics.md#incremental-history); `None`
    /// asks every window whole (a one-shot `kerf recommend`).
    pub history: Option<std::sync::Arc<std::sync::Mutex<summary::HistoryStore>>>,
}

impl Resources {
    /// The recommender keeping its usage history in `history` between cycles.
    pub fn incremental(history: std::sync::Arc<std::sync::Mutex<summary::HistoryStore>>) -> Self {
        Self {
            history: Some(history),
        }
    }

    fn locked(&self) -> Option<std::sync::MutexGuard<'_, summary::HistoryStore>> {
        let h = self.history.as_ref()?;
        Some(h.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

pub struct ResourcesEvaluation<'p> {
    recommender: &'p Resources,
    snapshot: &'p Snapshot,
    plan: &'p RsPlan,
    answers: RsAnswers,
    now: Timestamp,
    step_seconds: i64,
}

/// The plan and the step it was made with (evaluation reads the history slack from it).
pub struct ResourcesPlan {
    pub plan: RsPlan,
    pub step_seconds: i64,
}

impl Recommender for Resources {
    type Plan = ResourcesPlan;
    type Evaluation<'p> = ResourcesEvaluation<'p>;

    fn name(&self) -> &'static str {
        "resources"
    }

    fn plan(&self, snapshot: &Snapshot, now: Timestamp, step_seconds: i64) -> ResourcesPlan {
        let mut history = self.locked();
        if let Some(h) = history.as_deref_mut() {
            let metrics = &snapshot.global.prometheus.resource_metrics;
            h.keep_source(&serde_json::to_string(metrics).unwrap_or_default());
        }
        ResourcesPlan {
            plan: plan(snapshot, now, step_seconds, history.as_deref()),
            step_seconds,
        }
    }

    fn queries<'p>(
        &self,
        snapshot: &'p Snapshot,
        plan: &'p ResourcesPlan,
    ) -> Vec<PlannedQuery<'p>> {
        plan.plan
            .queries
            .iter()
            .map(|(pi, signal, q)| PlannedQuery {
                policy: &snapshot.rightsizing_policies[*pi].id,
                what: signal.as_str(),
                query: match q {
                    RsQuery::Window { query, .. } => QueryRef::Window(query),
                    RsQuery::Steps { query, .. } => QueryRef::Steps(query),
                    RsQuery::Range(query) => QueryRef::Range(query),
                },
            })
            .collect()
    }

    fn start<'p>(
        &'p self,
        snapshot: &'p Snapshot,
        plan: &'p ResourcesPlan,
        now: Timestamp,
    ) -> ResourcesEvaluation<'p> {
        if let Some(mut history) = self.locked() {
            for group in &plan.plan.groups {
                group.begin(&mut history);
            }
        }
        ResourcesEvaluation {
            recommender: self,
            snapshot,
            plan: &plan.plan,
            answers: RsAnswers::default(),
            now,
            step_seconds: plan.step_seconds,
        }
    }
}

impl Evaluation for ResourcesEvaluation<'_> {
    fn answer(&mut self, index: usize, answer: Result<Answer, MetricError>) {
        match answer {
            Ok(Answer::Steps(set)) => {
                let mut history = self.recommender.locked();
                self.answers
                    .steps_answer(self.plan, index, set, history.as_deref_mut());
            }
            other => self.answers.answer(self.plan, index, other),
        }
    }

    fn finish(mut self, out: &mut CycleOutput) {
        if let Some(mut history) = self.recommender.locked() {
            self.answers.finish_steps(self.plan, &mut history);
            let planned: HashSet<(String, String)> = self
                .plan
                .workloads
                .iter()
                .map(|w| {
                    let k = &self.snapshot.workloads[w.workload].key;
                    (
                        k.namespace.to_string(),
                        format!("{}/{}", k.kind.as_str(), k.name),
                    )
                })
                .collect();
            history.retain_workloads(&planned);
        }
        let results = {
            let gpu: HashMap<&WorkloadKey, _> =
                out.gpu_results().map(|r| (&r.key, &r.containers)).collect();
            evaluate(
                self.snapshot,
                self.plan,
                &self.answers,
                &gpu,
                self.now,
                self.step_seconds,
            )
        };
        // The window values are read: gone before the results join the outcomes.
        drop(std::mem::take(&mut self.answers));
        out.add_resources(results);
        for (i, p) in self.snapshot.rightsizing_policies.iter().enumerate() {
            out.policies
                .entry(p.id.clone())
                .or_default()
                .unresolved_strategy = self.plan.unresolved.get(&i).cloned();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_step_for_is_never_coarser_than_the_rate_window() {
        // 1 day, 7 days, 14 days at the default 15 s step and 1-minute rates: the memory grid
        // coarsens with the window, the CPU grid stops at the rate window.
        assert_eq!(step_for(86_400, 15), 15);
        assert_eq!(cpu_step_for(86_400, 15, 60), 15);
        assert_eq!(step_for(604_800, 15), 61);
        assert_eq!(cpu_step_for(604_800, 15, 60), 60);
        assert_eq!(cpu_step_for(1_209_600, 15, 60), 60);
        // A 5-minute timescale on a 7-day window: the usual grid is fine enough.
        assert_eq!(cpu_step_for(604_800, 15, 300), 61);
        // Beyond 45 days at 1 minute the histograms' counts would overflow: coarser.
        assert_eq!(cpu_step_for(90 * 86_400, 15, 60), 120);
    }
}
