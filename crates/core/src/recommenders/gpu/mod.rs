//! Whole-snapshot GPU evaluation, in two pure halves around the metric IO:
//! [`plan`] decides which policy wins which workload and which series to query (one batched
//! range query per policy and signal); [`evaluate`] runs the engine on the fetched samples.

pub mod engine;
pub mod recommender;
pub mod samples;

use std::collections::{BTreeMap, BTreeSet};

use crate::hash::{HashMap, HashMapExt};
use std::sync::Arc;

use crate::pod::Pod;
use jiff::{SignedDuration, Timestamp};

use self::engine::{Action, EngineInput, EngineOutput, SignalSamples};
use crate::accelerator::NVIDIA_KAI;
use crate::admission::{GpuTarget, allowed, kai};
use crate::allocation::{container_allocations, default_scope_containers, gpu_holdings};
use crate::model::{ANNOTATION_GPU_BASELINE, ANNOTATION_GPU_RECOMMENDATION};
use crate::model::{
    GpuMap, GpuRecommendation, PolicyId, PolicyPart, WorkloadKey, WorkloadState, parse_baseline,
};
use crate::query::{RangeQuery, SeriesSet};
use crate::selection::{self, Candidate};
use crate::snapshot::{GpuPolicy, Snapshot, Workload};
use kerf_api::{Signal, StrategyView};
use kerf_support::small_map::SmallMap;

use crate::grouping::pods_by_owner;

/// Resolves a GPU policy's `automationStrategyRef` ([`Snapshot::strategy`]).
pub fn resolve_strategy<'a>(
    snapshot: &'a Snapshot,
    policy: &GpuPolicy,
) -> Option<&'a Arc<StrategyView>> {
    snapshot.strategy(
        policy.id.namespace.as_deref(),
        &policy.spec.automation_strategy_ref.name,
    )
}

/// The policies that may cover a workload of a namespace: the cluster ones and those of that
/// namespace (a namespaced policy covers nothing else), so selection does not test every policy
/// against every workload (200 namespaces × 110,000 workloads at the largest bench size).
struct PoliciesByNamespace<'a> {
    cluster: Vec<usize>,
    namespaced: HashMap<&'a str, Vec<usize>>,
}

impl<'a> PoliciesByNamespace<'a> {
    fn new(policies: &'a [GpuPolicy]) -> Self {
        let mut out = Self {
            cluster: Vec::new(),
            namespaced: HashMap::new(),
        };
        for (i, p) in policies.iter().enumerate() {
            if p.policy_type.is_cluster() {
                out.cluster.push(i);
            } else if let Some(ns) = p.id.namespace.as_deref() {
                out.namespaced.entry(ns).or_default().push(i);
            }
        }
        out
    }

    /// Indexes of the policies to test, ascending (the order of [`selection::covering`]).
    fn candidates(&self, namespace: &str) -> impl Iterator<Item = usize> + '_ {
        let own = self
            .namespaced
            .get(namespace)
            .map_or(&[][..], Vec::as_slice);
        let (mut a, mut b) = (self.cluster.iter().peekable(), own.iter().peekable());
        std::iter::from_fn(move || match (a.peek(), b.peek()) {
            (Some(x), Some(y)) if x < y => a.next().copied(),
            (Some(_), Some(_)) | (None, Some(_)) => b.next().copied(),
            (Some(_), None) => a.next().copied(),
            (None, None) => None,
        })
    }
}

/// One policy's share of one workload.
#[derive(Clone, Debug)]
pub struct Assignment {
    pub policy: usize,
    /// Containers won in multi-policy mode (None = the policy's own scope).
    pub containers: Option<BTreeSet<String>>,
}

#[derive(Clone, Debug)]
pub struct WorkloadPlan {
    pub workload: usize,
    pub assignments: Vec<Assignment>,
    /// The assigned policies' ids, in assignment order: one list shared by every workload
    /// with the same assignments ([`shared_policy_ids`]), held again in each result.
    pub policy_ids: Arc<[PolicyId]>,
    /// Pods of the workload (indexes into `snapshot.pods`).
    pub pods: Vec<usize>,
    pub reasons: Vec<String>,
}

impl WorkloadPlan {
    /// The distinct policies assigned to the workload.
    pub fn policies(&self) -> BTreeSet<usize> {
        self.assignments.iter().map(|a| a.policy).collect()
    }
}

#[derive(Clone, Debug, Default)]
pub struct Plan {
    pub workloads: Vec<WorkloadPlan>,
    /// One batched query per (policy, signal).
    pub queries: Vec<(usize, Signal, RangeQuery)>,
    /// Policies whose strategy does not resolve, with the message for their status.
    pub unresolved: BTreeMap<usize, String>,
    /// Per policy with queries: how many (namespace, pod) its queries select.
    pub query_pods: BTreeMap<usize, usize>,
}

fn is_eligible(pod: &Pod, policy: &GpuPolicy, now: Timestamp) -> bool {
    let started = pod
        .status
        .as_ref()
        .and_then(|s| s.start_time.as_ref())
        .map(|t| t.0);
    pod.metadata.deletion_timestamp.is_none()
        && started
            .is_some_and(|t| now.duration_since(t) >= policy.spec.min_pod_metrics_age.signed())
}

/// The policies that size a workload's containers among those covering it (gpu-engine G11):
/// the one winner, or with multi-policy container rightsizing one per set of containers.
fn assignments(
    snapshot: &Snapshot,
    w: &Workload,
    usable: &[(usize, Candidate<'_>)],
) -> Vec<Assignment> {
    let index_of = |id: &PolicyId| usable.iter().find(|(_, c)| c.id == id).map(|(i, _)| *i);
    let candidates: Vec<Candidate<'_>> = usable.iter().map(|(_, c)| c.clone()).collect();
    if snapshot.global.multi_policy_container_rightsizing_enabled {
        let spec = w.template.pod_spec();
        let defaults: Vec<String> = default_scope_containers(spec)
            .into_iter()
            .map(|c| c.name.to_string())
            .collect();
        let all: Vec<String> = spec
            .containers
            .iter()
            .chain(spec.init_containers.iter().flatten())
            .map(|c| c.name.to_string())
            .collect();
        selection::per_container_winners(&candidates, &defaults, &all, &snapshot.precedence)
            .into_iter()
            .filter_map(|(id, set)| {
                index_of(&id).map(|policy| Assignment {
                    policy,
                    containers: Some(set),
                })
            })
            .collect()
    } else {
        selection::single_winner(&candidates, &snapshot.precedence)
            .and_then(|w| index_of(w.id))
            .map(|policy| Assignment {
                policy,
                containers: None,
            })
            .into_iter()
            .collect()
    }
}

/// One policy's range queries, both signals, over the pods its workloads run (one pod list
/// shared by both).
fn policy_queries(
    snapshot: &Snapshot,
    pi: usize,
    pods: &[(&str, &str)],
    now: Timestamp,
    step_seconds: i64,
) -> Vec<(usize, Signal, RangeQuery)> {
    let mut queries = Vec::with_capacity(Signal::BOTH.len());
    let policy = &snapshot.gpu_policies[pi];
    let namespaces: BTreeSet<&str> = pods.iter().map(|(ns, _)| *ns).collect();
    // One list for both signals' queries.
    let pod_names: Arc<[String]> = pods
        .iter()
        .map(|(_, p)| *p)
        .collect::<BTreeSet<_>>()
        .into_iter()
        .map(str::to_string)
        .collect();
    for signal in Signal::BOTH {
        let cfg = policy.spec.metrics.signal(signal);
        // The window the no-samples count and message use too.
        let window = samples::query_window(&policy.spec, signal).seconds() as i64;
        queries.push((
            pi,
            signal,
            RangeQuery {
                metric: cfg.prometheus.metric.clone(),
                namespace_label: cfg.prometheus.namespace_label.clone(),
                pod_label: cfg.prometheus.pod_label.clone(),
                container_label: cfg.prometheus.container_label.clone(),
                namespaces: namespaces.iter().map(|ns| ns.to_string()).collect(),
                pods: Arc::clone(&pod_names),
                start: now - SignedDuration::from_secs(window),
                end: now,
                step_seconds,
                counter: None,
                aggregation: crate::query::Aggregation::of(cfg.prometheus.interpretation),
                matchers: Vec::new(),
            },
        ));
    }
    queries
}

pub fn plan(snapshot: &Snapshot, now: Timestamp, step_seconds: i64) -> Plan {
    let mut out = Plan::default();
    for (i, p) in snapshot.gpu_policies.iter().enumerate() {
        let name = &p.spec.automation_strategy_ref.name;
        if let Some(why) = snapshot.unresolved_strategy(p.id.namespace.as_deref(), name) {
            out.unresolved.insert(i, why);
        }
    }
    let pods_by_owner = pods_by_owner(snapshot);
    // (namespace, pod) borrowed from the snapshot: owned only once, in the queries. Gathered,
    // then sorted and deduplicated once per policy (cheaper than a set insert per pod).
    let mut pods_per_policy: BTreeMap<usize, Vec<(&str, &str)>> = BTreeMap::new();
    let by_namespace = PoliciesByNamespace::new(&snapshot.gpu_policies);
    let mut policy_id_lists = HashMap::default();
    for (wi, w) in snapshot.workloads.iter().enumerate() {
        if snapshot.global.is_protected(&w.key.namespace) {
            continue;
        }
        let covering: Vec<(usize, Candidate<'_>)> = by_namespace
            .candidates(&w.key.namespace)
            .map(|i| (i, snapshot.gpu_policies[i].candidate()))
            .filter(|(_, c)| selection::covers(c, &w.key, &w.labels, w.template.labels()))
            .collect();
        if covering.is_empty() {
            continue;
        }
        let mut reasons = Vec::new();
        for (i, _) in &covering {
            if let Some(msg) = out.unresolved.get(i) {
                reasons.push(format!("{}: {msg}", snapshot.gpu_policies[*i].id));
            }
        }
        let usable: Vec<(usize, Candidate<'_>)> = covering
            .into_iter()
            .filter(|(i, _)| !out.unresolved.contains_key(i))
            .collect();
        let assignments = assignments(snapshot, w, &usable);
        let pods = pods_by_owner.get(&w.key).cloned().unwrap_or_default();
        for a in &assignments {
            let policy = &snapshot.gpu_policies[a.policy];
            for &pi in &pods {
                let pod = &snapshot.pods[pi];
                if is_eligible(pod, policy, now) {
                    pods_per_policy.entry(a.policy).or_default().push((
                        w.key.namespace.as_str(),
                        pod.metadata.name.as_deref().unwrap_or_default(),
                    ));
                }
            }
        }
        out.workloads.push(WorkloadPlan {
            workload: wi,
            policy_ids: shared_policy_ids(snapshot, &assignments, &mut policy_id_lists),
            assignments,
            pods,
            reasons,
        });
    }
    // Held while the cycle's queries are answered: no growth slack.
    out.workloads.shrink_to_fit();
    for (pi, mut pods) in pods_per_policy {
        pods.sort_unstable();
        pods.dedup();
        out.query_pods.insert(pi, pods.len());
        out.queries
            .extend(policy_queries(snapshot, pi, &pods, now, step_seconds));
    }
    out
}

/// The ids of the policies of `assignments`, in their order, shared through `lists` by every
/// workload assigned the same policies: one list per policy set, not one per workload.
fn shared_policy_ids(
    snapshot: &Snapshot,
    assignments: &[Assignment],
    lists: &mut HashMap<Vec<usize>, Arc<[PolicyId]>>,
) -> Arc<[PolicyId]> {
    let policies: Vec<usize> = assignments.iter().map(|a| a.policy).collect();
    lists
        .entry(policies)
        .or_insert_with_key(|policies| {
            policies
                .iter()
                .map(|&i| snapshot.gpu_policies[i].id.clone())
                .collect()
        })
        .clone()
}

/// Outcome of one workload's GPU evaluation.
#[derive(Clone, Debug)]
pub struct WorkloadResult {
    pub key: WorkloadKey,
    /// The policies that contributed, in plan order (the one the pods are admitted under is
    /// [`Self::main_policy`]); shared with the plan.
    pub policies: Arc<[PolicyId]>,
    pub action: Action,
    pub driving_metric: Option<Signal>,
    pub containers: SmallMap<String, engine::ContainerOutcome>,
    /// Boxed: many workloads have none, and a result is held per workload for the cycle.
    pub recommendation: Option<Box<GpuRecommendation>>,
    pub baseline: Option<GpuMap>,
    pub template_gpu: GpuMap,
    /// The strategy of the recommendation's policy (the largest contributor's when several
    /// policies share it), else of the main policy.
    pub strategy: Arc<StrategyView>,
    /// Each contributing policy's strategy when several share the recommendation (else empty):
    /// their containers' upsize/downsize follow their own (`WorkloadState::gpu_strategy_of`).
    /// Boxed: most recommendations come from one policy, and a result is held per workload.
    pub gpu_strategies: Option<Box<BTreeMap<PolicyId, Arc<StrategyView>>>>,
    pub reasons: Vec<String>,
    /// Set when a metric query for one of the workload's policies failed: nothing changes.
    pub metrics_unavailable: bool,
    /// The workload's own KAI queue label (`WorkloadState::owner_queue`).
    pub owner_queue: Option<String>,
    /// Signals some eligible pod had no sample of (docs/design/gpu-engine.md#g13); their
    /// messages join the reasons once the cycle knows the metric file's range.
    pub missing_samples: Box<[samples::MissingSamples]>,
}

/// Annotations that failed to parse are reported and treated as absent.
fn read_state(
    w: &Workload,
    reasons: &mut Vec<String>,
) -> (Option<GpuMap>, Option<GpuRecommendation>) {
    let baseline =
        w.annotations
            .get(ANNOTATION_GPU_BASELINE)
            .and_then(|t| match parse_baseline(t) {
                Ok(b) => Some(b),
                Err(e) => {
                    reasons.push(format!(
                        "ignoring annotation {ANNOTATION_GPU_BASELINE}: {e}"
                    ));
                    None
                }
            });
    let previous = w
        .annotations
        .get(ANNOTATION_GPU_RECOMMENDATION)
        .and_then(|t| match GpuRecommendation::parse(t) {
            Ok(r) => Some(r),
            Err(e) => {
                reasons.push(format!(
                    "ignoring annotation {ANNOTATION_GPU_RECOMMENDATION}: {e}"
                ));
                None
            }
        });
    (baseline, previous)
}

/// GPU allocation the template asks for, per container that has one.
pub fn template_gpu(w: &Workload) -> GpuMap {
    container_allocations(w.template.pod_spec(), w.template.annotations())
        .into_iter()
        .filter_map(|(c, a)| a.gpus().map(|g| (c, g)))
        .collect()
}

/// The answered queries' samples, split per (policy, signal) by namespace into the engine's
/// per-(pod, container) samples, so each workload is a lookup.
#[derive(Debug, Default)]
pub struct SampleIndex {
    by_query: BTreeMap<(usize, Signal), HashMap<String, SignalSamples>>,
}

impl SampleIndex {
    pub fn insert(&mut self, policy: usize, signal: Signal, set: SeriesSet) {
        let by_ns = self.by_query.entry((policy, signal)).or_default();
        for (key, samples) in set.series {
            by_ns
                .entry(key.namespace)
                .or_default()
                .insert(key.pod, key.container, samples);
        }
    }

    /// Drops a policy's samples (its workloads are evaluated).
    pub fn remove_policy(&mut self, policy: usize) {
        self.by_query.retain(|(p, _), _| *p != policy);
    }

    /// Policies whose samples are held.
    pub fn policies(&self) -> BTreeSet<usize> {
        self.by_query.keys().map(|(p, _)| *p).collect()
    }

    fn lookup(&self, policy: usize, signal: Signal, namespace: &str) -> Option<&SignalSamples> {
        self.by_query.get(&(policy, signal))?.get(namespace)
    }
}

/// Runs the engine for every planned workload. `results[(policy, signal)]` holds the query
/// result; a missing entry means the query failed: the workload then keeps its previous state.
pub fn evaluate(
    snapshot: &Snapshot,
    plan: &Plan,
    results: BTreeMap<(usize, Signal), SeriesSet>,
    failed: &BTreeSet<usize>,
    now: Timestamp,
) -> Vec<WorkloadResult> {
    let mut index = SampleIndex::default();
    for ((policy, signal), set) in results {
        index.insert(policy, signal, set);
    }
    plan.workloads
        .iter()
        .map(|wp| evaluate_workload(snapshot, wp, &index, failed, now))
        .collect()
}

/// Evaluates workloads as the answers of their policies arrive and drops each policy's samples
/// once every workload it covers is evaluated: a cycle holds the samples of the policies in
/// flight, not of the whole cluster. Same results, in plan order, as [`evaluate`].
pub struct StreamingEvaluation<'a> {
    snapshot: &'a Snapshot,
    plan: &'a Plan,
    now: Timestamp,
    index: SampleIndex,
    failed: BTreeSet<usize>,
    /// Per policy: queries not answered yet.
    unanswered: BTreeMap<usize, usize>,
    /// Per plan workload: how many of its policies have unanswered queries (a count, not a set:
    /// one set per workload was ≈100 bytes each, 11 MB at 110,000 workloads).
    waiting_on: Vec<u32>,
    /// Per policy with unanswered queries: its plan workloads, in plan order.
    covers: BTreeMap<usize, Vec<usize>>,
    /// Per policy: how many of its plan workloads are not evaluated yet.
    pending: BTreeMap<usize, usize>,
    results: Vec<Option<Box<WorkloadResult>>>,
    /// Per answered (policy, signal): how many selected pods had samples.
    found: BTreeMap<(usize, Signal), usize>,
}

impl<'a> StreamingEvaluation<'a> {
    /// How many workloads are evaluated and waiting to be taken (their samples are dropped).
    pub fn evaluated(&self) -> usize {
        self.results.iter().flatten().count()
    }

    pub fn new(snapshot: &'a Snapshot, plan: &'a Plan, now: Timestamp) -> Self {
        let mut unanswered: BTreeMap<usize, usize> = BTreeMap::new();
        for (policy, _, _) in &plan.queries {
            *unanswered.entry(*policy).or_default() += 1;
        }
        let mut covers: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        let mut pending: BTreeMap<usize, usize> = BTreeMap::new();
        let waiting_on = plan
            .workloads
            .iter()
            .enumerate()
            .map(|(wi, wp)| {
                let mut waiting = 0;
                for p in wp.policies() {
                    *pending.entry(p).or_default() += 1;
                    if unanswered.contains_key(&p) {
                        covers.entry(p).or_default().push(wi);
                        waiting += 1;
                    }
                }
                waiting
            })
            .collect();
        let mut out = Self {
            snapshot,
            plan,
            now,
            index: SampleIndex::default(),
            failed: BTreeSet::new(),
            unanswered,
            waiting_on,
            covers,
            pending,
            results: plan.workloads.iter().map(|_| None).collect(),
            found: BTreeMap::new(),
        };
        // Workloads whose policies query nothing (no eligible pod) need no answer.
        let ready: Vec<usize> = (0..out.waiting_on.len())
            .filter(|&wi| out.waiting_on[wi] == 0)
            .collect();
        for wi in ready {
            out.evaluate_now(wi);
        }
        out
    }

    /// Takes one query's answer (`None`: the query failed).
    pub fn answer(&mut self, policy: usize, signal: Signal, set: Option<SeriesSet>) {
        match set {
            Some(set) => {
                self.found.insert((policy, signal), pods_with_samples(&set));
                self.index.insert(policy, signal, set);
            }
            None => {
                self.failed.insert(policy);
            }
        }
        let Some(left) = self.unanswered.get_mut(&policy) else {
            return;
        };
        *left = left.saturating_sub(1);
        if *left > 0 {
            return;
        }
        self.unanswered.remove(&policy);
        // A policy is answered once: its list is not needed again.
        let waiting = self.covers.remove(&policy).unwrap_or_default();
        for wi in waiting {
            self.waiting_on[wi] -= 1;
            if self.waiting_on[wi] == 0 && self.results[wi].is_none() {
                self.evaluate_now(wi);
            }
        }
    }

    /// Per answered (policy, signal), how many selected pods had samples.
    pub fn pods_found(&self) -> &BTreeMap<(usize, Signal), usize> {
        &self.found
    }

    /// Policies whose samples are still held.
    pub fn held_policies(&self) -> BTreeSet<usize> {
        self.index.policies()
    }

    /// The results in plan order; a workload still waiting (an answer never came) is evaluated
    /// with what is there, as if that query had failed.
    pub fn finish(mut self) -> Vec<Box<WorkloadResult>> {
        for p in std::mem::take(&mut self.unanswered).into_keys() {
            self.failed.insert(p);
        }
        for wi in 0..self.results.len() {
            if self.results[wi].is_none() {
                self.evaluate_now(wi);
            }
        }
        self.results.into_iter().flatten().collect()
    }

    fn evaluate_now(&mut self, wi: usize) {
        let wp = &self.plan.workloads[wi];
        self.results[wi] = Some(Box::new(evaluate_workload(
            self.snapshot,
            wp,
            &self.index,
            &self.failed,
            self.now,
        )));
        // Each policy once: the counts are per distinct policy.
        for policy in wp.policies() {
            let Some(left) = self.pending.get_mut(&policy) else {
                continue;
            };
            *left -= 1;
            if *left == 0 {
                self.pending.remove(&policy);
                self.index.remove_policy(policy);
            }
        }
    }
}

/// Distinct (namespace, pod) with at least one sample in a query's answer.
fn pods_with_samples(set: &SeriesSet) -> usize {
    let mut pods: Vec<(&str, &str)> = set
        .series
        .iter()
        .filter(|(_, points)| !points.is_empty())
        .map(|(k, _)| (k.namespace.as_str(), k.pod.as_str()))
        .collect();
    // Keys are sorted by (namespace, pod, container): one pod's containers are adjacent.
    pods.dedup();
    pods.len()
}

/// Per policy and signal whose query was answered, the selected pods without samples
/// (docs/design/gpu-engine.md#g13); empty for a policy whose pods all had samples.
pub fn policy_missing_samples(
    snapshot: &Snapshot,
    plan: &Plan,
    found: &BTreeMap<(usize, Signal), usize>,
    now: Timestamp,
) -> BTreeMap<usize, Vec<samples::MissingSamples>> {
    let mut out: BTreeMap<usize, Vec<samples::MissingSamples>> = BTreeMap::new();
    for (&(policy, signal), &with) in found {
        let total = plan.query_pods.get(&policy).copied().unwrap_or(0);
        let entry = out.entry(policy).or_default();
        if with < total {
            entry.push(samples::MissingSamples::of(
                &snapshot.gpu_policies[policy].spec,
                signal,
                total - with,
                total,
                now,
            ));
        }
    }
    out
}

/// A workload whose metrics are unavailable keeps its persisted state untouched, so nothing
/// flaps: the last recommendation and baseline, over the current allocations the engine read.
fn keep_last_recommendation(
    result: &mut WorkloadResult,
    outputs: Vec<(usize, EngineOutput)>,
    baseline: Option<&GpuMap>,
    previous: Option<&GpuRecommendation>,
) {
    result.action = if previous.is_some() {
        Action::Reuse
    } else {
        Action::None
    };
    result.recommendation = previous.cloned().map(Box::new);
    result.driving_metric = previous.and_then(|r| r.driving_metric);
    for (_, o) in outputs {
        result.containers.extend(o.containers);
    }
    for (c, o) in result.containers.iter_mut() {
        o.baseline = baseline.and_then(|b| b.get(c).copied());
        o.recommended = previous.and_then(|r| r.containers.get(c).copied());
    }
}

/// The strategies a result is applied under: the recommendation's policy's for the pod, each
/// part's for its containers.
fn assign_strategies(snapshot: &Snapshot, wp: &WorkloadPlan, result: &mut WorkloadResult) {
    let strategy_of = |id: &PolicyId| {
        let a = wp
            .assignments
            .iter()
            .find(|a| snapshot.gpu_policies[a.policy].id == *id)?;
        resolve_strategy(snapshot, &snapshot.gpu_policies[a.policy]).cloned()
    };
    result.strategy = result
        .main_policy()
        .and_then(strategy_of)
        .unwrap_or_default();
    if let Some(r) = &result.recommendation {
        let strategies: BTreeMap<_, _> = r
            .by_policy
            .keys()
            .filter_map(|id| Some((id.clone(), strategy_of(id)?)))
            .collect();
        result.gpu_strategies = (!strategies.is_empty()).then(|| Box::new(strategies));
    }
}

/// Runs the engine for one planned workload on the samples in `index`.
pub fn evaluate_workload(
    snapshot: &Snapshot,
    wp: &WorkloadPlan,
    index: &SampleIndex,
    failed: &BTreeSet<usize>,
    now: Timestamp,
) -> WorkloadResult {
    let empty = SignalSamples::new();
    let lookup = |policy: usize, signal: Signal, ns: &str| {
        index.lookup(policy, signal, ns).unwrap_or(&empty)
    };
    let w = &snapshot.workloads[wp.workload];
    let mut reasons = wp.reasons.clone();
    let (baseline, previous) = read_state(w, &mut reasons);
    let pods: Vec<&Pod> = wp.pods.iter().map(|&i| &*snapshot.pods[i]).collect();
    let tgpu = template_gpu(w);
    let mut result = WorkloadResult {
        key: w.key.clone(),
        policies: wp.policy_ids.clone(),
        action: Action::None,
        driving_metric: None,
        containers: SmallMap::new(),
        recommendation: None,
        baseline: baseline.clone(),
        template_gpu: tgpu,
        strategy: Default::default(),
        gpu_strategies: None,
        reasons: Vec::new(),
        metrics_unavailable: false,
        owner_queue: w.labels.get(&snapshot.global.kai.queue_label_key).cloned(),
        missing_samples: Box::default(),
    };
    let mut outputs: Vec<(usize, EngineOutput)> = Vec::new();
    for a in &wp.assignments {
        let policy = &snapshot.gpu_policies[a.policy];
        if failed.contains(&a.policy) {
            result.metrics_unavailable = true;
            reasons.push(format!(
                "{}: metrics unavailable: keeping the last recommendation and baseline",
                policy.id
            ));
        }
        let ns = &w.key.namespace;
        // Without data the engine still reads the current allocations (for the report);
        // its decision is discarded below.
        let compute = lookup(a.policy, Signal::Compute, ns);
        let memory = lookup(a.policy, Signal::Memory, ns);
        // Each policy is compared with its own part of a shared recommendation: the driver of
        // the containers it owns (docs/design/gpu-engine.md#g8, #g11).
        let own_previous = previous.as_ref().map(|r| r.part_of(&policy.id));
        let input = EngineInput {
            policy_id: &policy.id,
            policy: &policy.spec,
            containers_override: a.containers.as_ref(),
            template: &w.template,
            pods: &pods,
            compute,
            memory,
            baseline: baseline.as_ref(),
            previous: own_previous.as_ref(),
            now,
        };
        outputs.push((a.policy, engine::evaluate(&input)));
    }
    if result.metrics_unavailable {
        keep_last_recommendation(&mut result, outputs, baseline.as_ref(), previous.as_ref());
    } else {
        merge_outputs(&mut result, outputs, &mut reasons);
    }
    assign_strategies(snapshot, wp, &mut result);
    reasons.extend(kai_shape_reason(w, &result));
    if let Some(q) = &result.owner_queue {
        if result.recommendation.is_some() && result.strategy.kai().set_queue_when_specified {
            reasons.push(format!(
                "the workload's own label {}={q} sets its pods' queue: KAI reads the top owner's queue label before the pod's, so setQueueWhenSpecified sets no queue on its pods",
                snapshot.global.kai.queue_label_key
            ));
        }
    }
    result.reasons = reasons;
    // A result is held per workload until the writes are planned: no growth slack.
    result.reasons.shrink_to_fit();
    result.containers.shrink_to_fit();
    result
}

/// Why the pods cannot take the recommendation as it is under KAI's admission rules, and the
/// shape they get instead (docs/design/kai-admission.md#k4), read on the workload's template:
/// the recommendation itself stays as computed.
fn kai_shape_reason(w: &Workload, result: &WorkloadResult) -> Option<String> {
    let rec = result.recommendation.as_deref()?;
    if NVIDIA_KAI
        .shares_by_memory(w.template.annotations())
        .is_some()
    {
        return None;
    }
    let slots: Vec<kai::Slot<'_>> = gpu_holdings(w.template.pod_spec(), w.template.annotations())
        .into_iter()
        .map(|(name, holds)| kai::Slot {
            name,
            holds,
            target: rec
                .containers
                .get(name)
                .and_then(|&r| GpuTarget::from_units(r)),
        })
        .collect();
    // Most workloads need no change of shape: only then is the served state built.
    let all_planned: Vec<_> = slots.iter().map(|s| s.target).collect();
    if kai::accepted(&slots, &all_planned) {
        return None;
    }
    let state = result.to_state();
    let shape = kai::one_fraction_and_no_whole_gpus_beside_it(&slots, |i, t| {
        let name = slots[i].name;
        allowed(t, result.template_gpu.get(name).copied(), &state, name)
    });
    shape.why.filter(|_| shape.targets != all_planned)
}

/// Combines the engine outputs of the policies sharing a workload (one in the default mode).
fn merge_outputs(
    result: &mut WorkloadResult,
    outputs: Vec<(usize, EngineOutput)>,
    reasons: &mut Vec<String>,
) {
    let mut baseline: Option<GpuMap> = None;
    let mut rec: Option<GpuRecommendation> = None;
    let mut best_total = f64::MIN;
    let mut parts = BTreeMap::new();
    let mut missing_samples = Vec::new();
    for (_, o) in outputs {
        reasons.extend(o.reasons);
        missing_samples.extend(o.missing_samples);
        result.containers.extend(o.containers);
        if let Some(b) = o.baseline {
            baseline.get_or_insert_with(GpuMap::new).extend(b);
        }
        if let Some(r) = o.recommendation {
            let total = r.total();
            if let Some(p) = &r.policy {
                parts.insert(
                    p.clone(),
                    PolicyPart {
                        containers: r.containers.keys().cloned().collect(),
                        driving_metric: r.driving_metric,
                        updated_at: r.updated_at,
                    },
                );
            }
            let merged = rec.get_or_insert_with(GpuRecommendation::default);
            merged.containers.extend(r.containers.clone());
            // The largest contributor names the driver and policy of the merged annotation.
            if total > best_total {
                best_total = total;
                merged.driving_metric = r.driving_metric;
                merged.policy = r.policy.clone();
                merged.updated_at = r.updated_at;
                result.action = o.action;
                result.driving_metric = o.driving_metric;
            }
        }
    }
    // Several contributors: each one's part is kept, so the next cycle compares each policy
    // with its own driver.
    if let Some(r) = rec.as_mut().filter(|_| parts.len() > 1) {
        r.by_policy = parts;
    }
    result.baseline = baseline;
    result.recommendation = rec.map(Box::new);
    result.missing_samples = missing_samples.into_boxed_slice();
}

impl WorkloadResult {
    /// The policy the workload's pods are admitted under, among the policies planned for it
    /// ([`GpuRecommendation::main_policy_among`]), else the first.
    pub fn main_policy(&self) -> Option<&PolicyId> {
        self.recommendation
            .as_ref()
            .and_then(|r| r.main_policy_among(|p| self.policies.contains(p)))
            .or(self.policies.first())
    }

    /// What the admission path serves for this workload.
    pub fn to_state(&self) -> WorkloadState {
        let mut gpu = self.recommendation.as_deref().cloned();
        if let Some(g) = gpu.as_mut().filter(|g| !g.by_policy.is_empty()) {
            // A reused recommendation's part whose policy is no longer planned (gone, or its
            // strategy does not resolve) is not served, as after a restart (`recover`).
            let unserved: Vec<String> = g
                .by_policy
                .iter()
                .filter(|(id, _)| {
                    !self
                        .gpu_strategies
                        .as_ref()
                        .is_some_and(|s| s.contains_key(*id))
                })
                .flat_map(|(_, part)| part.containers.iter().cloned())
                .collect();
            g.containers.retain(|c, _| !unserved.contains(c));
        }
        WorkloadState {
            gpu,
            template_gpu: self.template_gpu.clone(),
            resources: Default::default(),
            limits: Default::default(),
            hpa: None,
            policy: self.main_policy().cloned(),
            strategy: self.strategy.clone(),
            gpu_strategies: self.gpu_strategies.as_deref().cloned().unwrap_or_default(),
            owner_queue: self.owner_queue.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kerf_api::PolicyType;

    fn gpu_policy(name: &str) -> GpuPolicy {
        GpuPolicy {
            id: PolicyId {
                kind: "GpuReactivePolicy".into(),
                namespace: Some("ml".into()),
                name: name.into(),
            },
            policy_type: PolicyType::GpuReactivePolicy,
            creation: None,
            generation: None,
            spec: serde_saphyr::from_str(
                r#"
experimental: {gpuKaiContract: v1alpha1-2026-07}
metrics:
  compute: {prometheus: {metric: sm, interpretation: fullGPU}}
  memory: {prometheus: {metric: mem, interpretation: currentAllocation}}
automationStrategyRef: {name: s}
"#,
            )
            .unwrap(),
            status: None,
        }
    }

    fn assigned(policies: &[usize]) -> Vec<Assignment> {
        policies
            .iter()
            .map(|&policy| Assignment {
                policy,
                containers: None,
            })
            .collect()
    }

    #[test]
    fn shared_policy_ids_gives_workloads_with_the_same_policies_one_list() {
        let snapshot = Snapshot {
            gpu_policies: vec![gpu_policy("a"), gpu_policy("b")],
            ..Default::default()
        };
        let mut lists = HashMap::default();
        let first = shared_policy_ids(&snapshot, &assigned(&[0]), &mut lists);
        let second = shared_policy_ids(&snapshot, &assigned(&[0]), &mut lists);
        let both = shared_policy_ids(&snapshot, &assigned(&[1, 0]), &mut lists);
        assert!(Arc::ptr_eq(&first, &second), "one list for one policy set");
        assert_eq!(&*first, &[snapshot.gpu_policies[0].id.clone()]);
        // In assignment order, a list of its own.
        assert_eq!(
            &*both,
            &[
                snapshot.gpu_policies[1].id.clone(),
                snapshot.gpu_policies[0].id.clone()
            ]
        );
        assert_eq!(lists.len(), 2);
    }
}
