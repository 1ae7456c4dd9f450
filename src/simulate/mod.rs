//! `kerf simulate`: the reconcile loop replayed over recorded history (docs/simulate.md).
//!
//! Every tick from `--from` (inclusive) to `--to` (exclusive) runs the real cycle —
//! [`crate::reconcile::standalone::in_memory_cycle`]: `reconcile_once` and the in-memory writer —
//! over the manifests' objects, whose pods are replaced as simulated rollouts replace them. The
//! history is fetched once ([`history::HistorySource`]) and every tick's windows are slices of it.

pub mod history;
pub mod pods;
pub mod report;
pub mod synth;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use jiff::Timestamp;

use crate::api::{Interpretation, ResourceMode, Signal};
use crate::core::grouping::pods_by_owner;
use crate::core::hpa;
use crate::core::model::{PolicyId, WorkloadKey, WorkloadState};
use crate::core::pod::Pod;
use crate::core::recommenders::cycle::{CycleOutput, WorkloadOutcome};
use crate::core::recommenders::gpu::engine::Action;
use crate::core::recommenders::resources::container::PolicyParams;
use crate::core::snapshot::{GpuPolicy, Snapshot, Workload};
use crate::metrics::promql::LabelMatcher;
use crate::metrics::{MetricError, MetricSource, RangeQuery, SeriesSet};
use crate::reconcile::standalone::in_memory_cycle_keeping;
use crate::sources::dir::Manifests;
use crate::state::Store;
use crate::writers::memory::MemoryWriter;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;

use self::history::HistorySource;
use self::pods::rolled_out;
use crate::views::pods::{PodAlloc, pod_alloc};
use crate::views::usage;

/// What to replay.
#[derive(Clone, Debug)]
pub struct Options {
    pub from: Timestamp,
    pub to: Timestamp,
    pub every_seconds: i64,
    /// The query step (as `kerf recommend --step-seconds`).
    pub step_seconds: i64,
}

impl Options {
    /// The ticks: `from`, `from + every`, … before `to`.
    pub fn ticks(&self) -> Vec<Timestamp> {
        let every = jiff::SignedDuration::from_secs(self.every_seconds.max(1));
        std::iter::successors(Some(self.from), |t| Some(*t + every))
            .take_while(|t| *t < self.to)
            .collect()
    }
}

/// A tick at which the GPU allocation of the workload's pods changed.
#[derive(Clone, Debug, PartialEq)]
pub struct Change {
    pub at: Timestamp,
    /// The new allocation, per container with GPUs.
    pub gpu: BTreeMap<String, f64>,
    /// Upsize or scale-back.
    pub action: Action,
    pub driver: Option<Signal>,
    pub reason: String,
    /// Per-pod GPUs before and after (the chart's marker).
    pub before: f64,
    pub after: f64,
}

/// A tick at which the workload's CPU/memory requests or HPA target changed.
#[derive(Clone, Debug, PartialEq)]
pub struct ResourceChange {
    pub at: Timestamp,
    /// (cpu millicores, memory bytes) per container.
    pub requests: BTreeMap<String, (Option<i64>, Option<i64>)>,
    pub hpa_target: Option<i32>,
}

/// The part of the replay a resource's recorded usage covers: the cycles whose tick takes a
/// sample (the latest at or before it, not older than one tick).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Coverage {
    /// The first covered tick.
    pub from: Timestamp,
    /// The end of the last covered tick's interval (the next tick, or `--to`).
    pub to: Timestamp,
    /// Covered cycles (fewer than the span holds when the data has gaps).
    pub cycles: usize,
}

/// Resource-hours as the pods really were, as kerf would have made them, and the recorded
/// usage — all three over the cycles the recorded usage covers, so they compare.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Hours {
    pub allocated_as_is: f64,
    pub allocated_with_kerf: f64,
    pub used: f64,
    /// `None`: no recorded usage in the replay (the hours are then zero, not measured).
    pub coverage: Option<Coverage>,
}

/// A time series for the chart: (unix seconds, value).
pub use crate::views::Points;

/// What the workload's GPU chart shows, per pod (the hottest pod's usage, the largest pod's
/// allocation), in GPU units.
#[derive(Clone, Debug, Default)]
pub struct ChartData {
    /// Recorded usage per signal.
    pub usage: Vec<(Signal, Points)>,
    pub real: Points,
    pub simulated: Points,
    /// Upsize and scale-back thresholds, percent of the allocation, per signal.
    pub thresholds: Vec<(Signal, f64, f64)>,
    /// The CPU (cores) and memory (GiB) charts of a workload a rightsizing policy covers.
    pub cpu: ResourceChart,
    pub memory: ResourceChart,
}

/// One CPU or memory chart, per pod: the hottest pod's recorded usage, the usage the
/// recommendation rests on at each tick (CPU percentile, memory peak over the window), the
/// largest pod's request as is and with kerf, and, when kerf coordinates the workload's HPA on
/// this resource, the usage per pod at which the HPA scales out (target × request, with kerf).
#[derive(Clone, Debug, Default)]
pub struct ResourceChart {
    pub usage: Points,
    /// What `basis` is, e.g. `p95 over 1h`.
    pub basis_label: String,
    pub basis: Points,
    pub real: Points,
    pub simulated: Points,
    pub hpa: Points,
}

/// One workload's replay.
#[derive(Clone, Debug)]
pub struct WorkloadReport {
    pub key: WorkloadKey,
    pub policy: Option<PolicyId>,
    /// What the replay assumed for this workload (e.g. simulated as auto-patch).
    pub notes: Vec<String>,
    pub changes: Vec<Change>,
    pub resource_changes: Vec<ResourceChange>,
    pub rollouts: usize,
    /// Changes applied to the running pods in place (`pods/resize`), no rollout.
    pub resized_in_place: usize,
    /// A GPU reactive policy covers the workload (else its GPU figures mean nothing).
    pub gpu_policy: bool,
    /// A rightsizing policy covers the workload (it gets CPU and memory charts).
    pub resources_policy: bool,
    pub gpu_hours: Hours,
    pub cpu_core_hours: Hours,
    pub memory_gib_hours: Hours,
    pub chart: ChartData,
}

/// The replay.
#[derive(Clone, Debug)]
pub struct Report {
    pub from: Timestamp,
    pub to: Timestamp,
    pub every_seconds: i64,
    pub cycles: usize,
    pub workloads: Vec<WorkloadReport>,
    /// Range queries sent to the metric source (the history, fetched once per query shape).
    pub fetches: usize,
    /// The cycles any workload's recorded usage covers (`None`: no data in the range at all).
    pub coverage: Option<Coverage>,
    pub warnings: Vec<String>,
}

/// Per workload while replaying.
struct Track {
    report: WorkloadReport,
    gpu_policy: Option<GpuPolicy>,
    pods: Vec<usize>,
    /// What the last rollout check saw: the served state and the workload (its template).
    seen: Option<(Option<Arc<WorkloadState>>, Arc<Workload>)>,
    hpa_target: Option<i32>,
    /// The HPA kerf coordinates (resource, target as kerf's writes left it this tick).
    coordinated_hpa: Option<(hpa::HpaResource, i32)>,
    /// The pods' summed allocation from each tick on (only where it changes).
    allocations: Vec<(usize, TickAlloc)>,
}

/// The workload's allocation summed over its pods at one tick: (as is, with kerf).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct TickAlloc {
    gpu: (f64, f64),
    cores: (f64, f64),
    gib: (f64, f64),
}

const GIB: f64 = (1u64 << 30) as f64;

fn cores(alloc: &PodAlloc) -> f64 {
    alloc.values().filter_map(|c| c.cpu_millis).sum::<i64>() as f64 / 1000.0
}

fn gib(alloc: &PodAlloc) -> f64 {
    alloc.values().filter_map(|c| c.memory_bytes).sum::<i64>() as f64 / GIB
}

fn per_pod_gpu(alloc: &PodAlloc) -> f64 {
    alloc.values().filter_map(|c| c.gpu).sum()
}

fn gpu_map(alloc: &PodAlloc) -> BTreeMap<String, f64> {
    alloc
        .iter()
        .filter_map(|(c, a)| a.gpu.map(|g| (c.clone(), g)))
        .collect()
}

/// A pod's allocation summed for the hour integrals: computed when the pod changes, not at
/// every tick.
#[derive(Clone, Copy, Debug)]
struct AllocSums {
    gpu: f64,
    cores: f64,
    gib: f64,
}

impl AllocSums {
    const ZERO: Self = Self {
        gpu: 0.0,
        cores: 0.0,
        gib: 0.0,
    };

    /// The larger of each figure (the chart's largest pod).
    fn max(self, other: &Self) -> Self {
        Self {
            gpu: self.gpu.max(other.gpu),
            cores: self.cores.max(other.cores),
            gib: self.gib.max(other.gib),
        }
    }

    fn of(alloc: &PodAlloc) -> Self {
        Self {
            gpu: per_pod_gpu(alloc),
            cores: cores(alloc),
            gib: gib(alloc),
        }
    }
}

impl ChartData {
    fn cpu_or_memory(&mut self, resource: hpa::HpaResource) -> &mut ResourceChart {
        match resource {
            hpa::HpaResource::Cpu => &mut self.cpu,
            hpa::HpaResource::Memory => &mut self.memory,
        }
    }
}

/// Whether the rollout check saw this served state and workload template last time. The
/// overlay copies a workload only when kerf's writes change it, so the same `Arc` is the same
/// template (checked first: comparing templates field by field is the costly part).
fn seen_unchanged(
    seen: &(Option<Arc<WorkloadState>>, Arc<Workload>),
    state: &Option<Arc<WorkloadState>>,
    w: &Arc<Workload>,
) -> bool {
    seen.0 == *state && (Arc::ptr_eq(&seen.1, w) || seen.1.template == w.template)
}

fn requests_map(alloc: &PodAlloc) -> BTreeMap<String, (Option<i64>, Option<i64>)> {
    alloc
        .iter()
        .map(|(c, a)| (c.clone(), (a.cpu_millis, a.memory_bytes)))
        .collect()
}

/// Appends a step-function point, skipping values equal to the last one.
fn push_step(points: &mut Points, t: i64, v: f64) {
    if points
        .last()
        .is_none_or(|(_, last)| (last - v).abs() > 1e-12)
    {
        points.push((t, v));
    }
}

/// Makes readOnly and audit-only act as auto-patch, saying so per workload (the notes are
/// matched to workloads by policy once the cycle names them).
fn as_auto_patch(snapshot: &mut Snapshot) -> (Option<String>, HashMap<PolicyId, String>) {
    let global = snapshot.global.read_only.then(|| {
        snapshot.global.read_only = false;
        "GlobalConfiguration readOnly is true: simulated as if kerf applied its recommendations"
            .to_string()
    });
    let mut per_policy = HashMap::new();
    for p in &mut snapshot.rightsizing_policies {
        let mut audit = Vec::new();
        let cpu = p.spec.resources.cpu.get_or_insert_with(Default::default);
        if cpu.mode != ResourceMode::AutoPatch {
            cpu.mode = ResourceMode::AutoPatch;
            audit.push("cpu");
        }
        let memory = p.spec.resources.memory.get_or_insert_with(Default::default);
        if memory.mode != ResourceMode::AutoPatch {
            memory.mode = ResourceMode::AutoPatch;
            audit.push("memory");
        }
        if !audit.is_empty() {
            per_policy.insert(
                p.id.clone(),
                format!(
                    "{} is audit-only for {}: simulated as auto-patch",
                    p.id,
                    audit.join(" and ")
                ),
            );
        }
    }
    (global, per_policy)
}

/// The pods as recorded and as the replay has rolled them out, by index in the manifests.
struct ReplayPods {
    real: Vec<Arc<Pod>>,
    real_alloc: Vec<PodAlloc>,
    real_sums: Vec<AllocSums>,
    /// Each pod's recorded start (unix seconds): before it, the pod did not exist.
    real_start: Vec<Option<i64>>,
    sim: Vec<Arc<Pod>>,
    sim_alloc: Vec<PodAlloc>,
    sim_sums: Vec<AllocSums>,
}

impl ReplayPods {
    fn recorded(pods: &[Arc<Pod>]) -> Self {
        let real: Vec<Arc<Pod>> = pods.to_vec();
        let real_alloc: Vec<PodAlloc> = real.iter().map(|p| pod_alloc(p)).collect();
        let real_sums: Vec<AllocSums> = real_alloc.iter().map(AllocSums::of).collect();
        let real_start = real
            .iter()
            .map(|p| {
                p.status
                    .as_ref()
                    .and_then(|s| s.start_time.as_ref())
                    .map(|t| t.0.as_second())
            })
            .collect();
        Self {
            sim: real.clone(),
            sim_alloc: real_alloc.clone(),
            sim_sums: real_sums.clone(),
            real,
            real_alloc,
            real_sums,
            real_start,
        }
    }

    fn roll_out(&mut self, pi: usize, pod: Pod, alloc: PodAlloc) {
        self.sim[pi] = Arc::new(pod);
        self.sim_sums[pi] = AllocSums::of(&alloc);
        self.sim_alloc[pi] = alloc;
    }

    /// currentAllocation samples of a re-allocated pod: real ÷ simulated.
    fn rescale_history<S: MetricSource>(
        &self,
        history: &mut HistorySource<'_, S>,
        rolled: &[usize],
    ) {
        for &pi in rolled {
            let (Some(ns), Some(name)) = (
                &self.real[pi].metadata.namespace,
                &self.real[pi].metadata.name,
            ) else {
                continue;
            };
            for (c, a) in &self.sim_alloc[pi] {
                let factor = match (self.real_alloc[pi].get(c).and_then(|r| r.gpu), a.gpu) {
                    (Some(r), Some(s)) if s > 0.0 => r / s,
                    _ => 1.0,
                };
                history.set_scale(ns, name, c, factor);
            }
        }
    }
}

/// The history the replay reads: the manifests' namespaces and pods, and the GPU metrics read
/// as a share of the current allocation (rescaled when the replay re-allocates a pod).
fn history_for<'a, S: MetricSource>(
    source: &'a S,
    base: &Snapshot,
    opts: &Options,
    last: Timestamp,
) -> HistorySource<'a, S> {
    let relative: HashSet<String> = base
        .gpu_policies
        .iter()
        .flat_map(|p| Signal::BOTH.map(|s| p.spec.metrics.signal(s).prometheus.clone()))
        .filter(|m| m.interpretation == Interpretation::CurrentAllocation)
        .map(|m| m.metric)
        .collect();
    let namespaces: Vec<String> = base
        .pods
        .iter()
        .filter_map(|p| p.metadata.namespace.as_deref().map(str::to_string))
        .chain(base.workloads.iter().map(|w| w.key.namespace.to_string()))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let pod_names: Vec<String> = base
        .pods
        .iter()
        .filter_map(|p| p.metadata.name.as_deref().map(str::to_string))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    HistorySource::new(source, opts.from, last, namespaces, pod_names, relative)
}

/// The HPAs by the workload they scale ([`hpa::hpa_index`]).
type HpaIndex<'h> =
    crate::core::hash::HashMap<(&'h str, &'h str, &'h str), &'h HorizontalPodAutoscaler>;

/// Each workload's pods, by index in the manifests ([`pods_by_owner`]).
type PodsByOwner = crate::core::hash::HashMap<WorkloadKey, Vec<usize>>;

/// The target of the HPA scaling the workload on CPU or memory utilization.
fn hpa_target_of(hpas: &HpaIndex<'_>, key: &WorkloadKey) -> Option<(hpa::HpaResource, i32)> {
    hpas.get(&(key.namespace.as_str(), key.kind.as_str(), key.name.as_str()))
        .and_then(|h| hpa::utilization_target(h))
}

/// The notes saying what the replay assumed: readOnly and audit-only simulated as auto-patch.
struct AutoPatchNotes {
    global: Option<String>,
    per_policy: HashMap<PolicyId, String>,
}

/// The replay's state across ticks: one track per workload the cycle names.
struct Replay<'b> {
    base: &'b Snapshot,
    notes: AutoPatchNotes,
    pods_of: PodsByOwner,
    workload_at: HashMap<WorkloadKey, usize>,
    /// Per workload (index in the manifests), its track: created in the order the cycle first
    /// names the workloads.
    track_of: Vec<Option<usize>>,
    tracks: Vec<Track>,
    /// What a rollout gave each workload's pods last.
    references: HashMap<WorkloadKey, Vec<PodAlloc>>,
    pods: ReplayPods,
    /// The workloads the last cycle resizes in place (`applyMethod: inPlace`).
    in_place: HashSet<WorkloadKey>,
}

impl<'b> Replay<'b> {
    fn new(base: &'b Snapshot, notes: AutoPatchNotes, store: &Store, from: Timestamp) -> Self {
        let pods_of = pods_by_owner(base);
        let workload_at = base
            .workloads
            .iter()
            .enumerate()
            .map(|(i, w)| (w.key.clone(), i))
            .collect();
        let pods = ReplayPods::recorded(&base.pods);
        let references = rollout_references(base, &pods_of, &pods.real, store, from);
        Self {
            base,
            notes,
            pods_of,
            workload_at,
            track_of: vec![None; base.workloads.len()],
            tracks: Vec::new(),
            references,
            pods,
            in_place: HashSet::new(),
        }
    }

    /// Follows one cycle's outcomes: the usage the recommendations rest on, and the rollouts
    /// kerf's writes cause. Returns the pods rolled out.
    fn follow_cycle(
        &mut self,
        cycle: &CycleOutput,
        after: &Snapshot,
        store: &Store,
        tick: Timestamp,
    ) -> Vec<usize> {
        let hpas = hpa::hpa_index(&after.hpas);
        let mut rolled = Vec::new();
        for outcome in &cycle.workloads {
            let key = outcome.key();
            let Some(&wi) = self.workload_at.get(key) else {
                continue;
            };
            let t = match self.track_of[wi] {
                Some(t) => t,
                None => {
                    let track = self.new_track(outcome, &hpas);
                    self.tracks.push(track);
                    self.track_of[wi] = Some(self.tracks.len() - 1);
                    self.tracks.len() - 1
                }
            };
            record_resource_basis(&mut self.tracks[t], outcome, &hpas, tick);
            let w = &after.workloads[wi];
            let state = store.get(key);
            rolled.extend(self.roll_out_if_changed(t, outcome, w, state, &hpas, tick));
        }
        rolled
    }

    fn new_track(&self, outcome: &WorkloadOutcome, hpas: &HpaIndex<'_>) -> Track {
        let base = self.base;
        let key = outcome.key();
        let gpu_policy = outcome
            .gpu
            .as_ref()
            .and_then(|g| g.main_policy())
            .and_then(|id| base.gpu_policies.iter().find(|p| &p.id == id))
            .cloned();
        let rs_policy = outcome.resources.as_ref().map(|r| r.policy.clone());
        let policy = gpu_policy.as_ref().map(|p| p.id.clone()).or(rs_policy);
        let mut notes: Vec<String> = self.notes.global.iter().cloned().collect();
        if let Some(n) = outcome
            .resources
            .as_ref()
            .and_then(|r| self.notes.per_policy.get(&r.policy))
        {
            notes.push(n.clone());
        }
        let [cpu_basis, memory_basis] = outcome
            .resources
            .as_ref()
            .and_then(|r| base.rightsizing_policies.iter().find(|p| p.id == r.policy))
            .and_then(|p| PolicyParams::from_spec(&p.spec).ok())
            .map(|p| crate::views::labels::usage_basis(&p))
            .unwrap_or_default();
        let thresholds = gpu_policy
            .as_ref()
            .map(|p| {
                Signal::BOTH
                    .iter()
                    .map(|s| {
                        let c = p.spec.metrics.signal(*s);
                        (
                            *s,
                            c.upsize.threshold_percent,
                            c.scale_back.threshold_percent,
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        Track {
            report: WorkloadReport {
                key: key.clone(),
                policy,
                notes,
                changes: Vec::new(),
                resource_changes: Vec::new(),
                rollouts: 0,
                resized_in_place: 0,
                gpu_policy: gpu_policy.is_some(),
                resources_policy: outcome.resources.is_some(),
                gpu_hours: Hours::default(),
                cpu_core_hours: Hours::default(),
                memory_gib_hours: Hours::default(),
                chart: ChartData {
                    thresholds,
                    cpu: ResourceChart {
                        basis_label: cpu_basis,
                        ..Default::default()
                    },
                    memory: ResourceChart {
                        basis_label: memory_basis,
                        ..Default::default()
                    },
                    ..Default::default()
                },
            },
            gpu_policy,
            pods: self.pods_of.get(key).cloned().unwrap_or_default(),
            seen: None,
            hpa_target: hpa_target_of(hpas, key).map(|(_, t)| t),
            coordinated_hpa: None,
            allocations: Vec::new(),
        }
    }

    /// Rolls the workload's pods out when kerf's writes change what a new pod would get,
    /// recording the change. Returns the pods rolled out.
    fn roll_out_if_changed(
        &mut self,
        t: usize,
        outcome: &WorkloadOutcome,
        w: &Arc<Workload>,
        state: Option<Arc<WorkloadState>>,
        hpas: &HpaIndex<'_>,
        tick: Timestamp,
    ) -> Vec<usize> {
        let key = outcome.key();
        let kai = &self.base.global.kai;
        let track = &mut self.tracks[t];
        let unchanged = track
            .seen
            .as_ref()
            .is_some_and(|seen| seen_unchanged(seen, &state, w));
        if unchanged {
            return Vec::new();
        }
        // The pods a rollout now would create; a rollout happens when they differ.
        let candidates: Vec<(usize, Pod, PodAlloc)> = track
            .pods
            .iter()
            .map(|&pi| {
                let pod = rolled_out(
                    &self.pods.real[pi],
                    &w.template,
                    state.as_deref(),
                    kai,
                    tick,
                );
                let alloc = pod_alloc(&pod);
                (pi, pod, alloc)
            })
            .collect();
        track.seen = Some((state, w.clone()));
        let allocs: Vec<PodAlloc> = candidates.iter().map(|(_, _, a)| a.clone()).collect();
        let reference = self.references.entry(key.clone()).or_default();
        if *reference == allocs {
            return Vec::new();
        }
        // What kerf changed: the new pods against what a rollout gave before.
        let was = std::mem::replace(reference, allocs);
        let Some((first, _, new)) = candidates.first().cloned() else {
            return Vec::new();
        };
        let old = self.pods.sim_alloc[first].clone();
        let was = was.first().unwrap_or(&old);
        // Resized in place: the same pods take the new requests (a GPU change always rolls).
        let in_place = self.in_place.contains(key) && gpu_map(was) == gpu_map(&new);
        if in_place {
            track.report.resized_in_place += 1;
        } else {
            track.report.rollouts += 1;
        }
        if gpu_map(was) != gpu_map(&new) {
            track
                .report
                .changes
                .push(gpu_change(outcome, &old, &new, tick));
        }
        let hpa_target = hpa_target_of(hpas, key).map(|(_, t)| t);
        if requests_map(was) != requests_map(&new) || hpa_target != track.hpa_target {
            track.report.resource_changes.push(ResourceChange {
                at: tick,
                requests: requests_map(&new),
                hpa_target,
            });
            track.hpa_target = hpa_target;
        }
        let mut rolled = Vec::with_capacity(candidates.len());
        for (pi, pod, alloc) in candidates {
            self.pods.roll_out(pi, pod, alloc);
            rolled.push(pi);
        }
        rolled
    }

    /// Each tick's allocation holds until the next tick (or --to); the hours are counted at the
    /// end, over the ticks the recorded usage covers.
    fn record_allocations(&mut self, ti: usize, tick: Timestamp) {
        let at = tick.as_second();
        let pods = &self.pods;
        for track in &mut self.tracks {
            let mut sum = TickAlloc::default();
            let (mut real_pod, mut sim_pod) = (AllocSums::ZERO, AllocSums::ZERO);
            for &pi in &track.pods {
                if pods.real_start[pi].is_some_and(|s| s > at) {
                    continue;
                }
                let (real, sim) = (pods.real_sums[pi], pods.sim_sums[pi]);
                sum.gpu.0 += real.gpu;
                sum.gpu.1 += sim.gpu;
                sum.cores.0 += real.cores;
                sum.cores.1 += sim.cores;
                sum.gib.0 += real.gib;
                sum.gib.1 += sim.gib;
                real_pod = real_pod.max(&real);
                sim_pod = sim_pod.max(&sim);
            }
            if track
                .allocations
                .last()
                .is_none_or(|(_, last)| *last != sum)
            {
                track.allocations.push((ti, sum));
            }
            chart_allocations(track, at, &real_pod, &sim_pod);
        }
    }
}

/// What a rollout gives each workload's pods before the replay: the manifests' templates
/// admitted with the state their persisted annotations serve (pods recorded under an older
/// state are not a change kerf makes).
fn rollout_references(
    base: &Snapshot,
    pods_of: &PodsByOwner,
    real: &[Arc<Pod>],
    store: &Store,
    from: Timestamp,
) -> HashMap<WorkloadKey, Vec<PodAlloc>> {
    let mut references = HashMap::new();
    for w in &base.workloads {
        let Some(pods) = pods_of.get(&w.key) else {
            continue;
        };
        let state = store.get(&w.key);
        let allocs = pods
            .iter()
            .map(|&pi| {
                let pod = rolled_out(
                    &real[pi],
                    &w.template,
                    state.as_deref(),
                    &base.global.kai,
                    from,
                );
                pod_alloc(&pod)
            })
            .collect();
        references.insert(w.key.clone(), allocs);
    }
    references
}

/// A GPU change the rollout makes: its action as the engine decided it (or as the allocation
/// moved), its driving metric and reason.
fn gpu_change(
    outcome: &WorkloadOutcome,
    old: &PodAlloc,
    new: &PodAlloc,
    tick: Timestamp,
) -> Change {
    let gpu = outcome.gpu.as_ref();
    let (before, after) = (per_pod_gpu(old), per_pod_gpu(new));
    let action = match gpu.map(|g| g.action) {
        Some(a @ (Action::Upsize | Action::ScaleBack)) => a,
        _ if after > before => Action::Upsize,
        _ => Action::ScaleBack,
    };
    let driver = gpu.and_then(|g| g.driving_metric);
    let reasons = gpu.map(|g| g.reasons.as_slice()).unwrap_or_default();
    Change {
        at: tick,
        gpu: gpu_map(new),
        action,
        driver,
        reason: crate::views::labels::change_reason(reasons, driver),
        before,
        after,
    }
}

/// What the CPU/memory recommendation rests on this tick, and the HPA kerf coordinates as its
/// writes left it: the charts draw them at every tick.
fn record_resource_basis(
    track: &mut Track,
    outcome: &WorkloadOutcome,
    hpas: &HpaIndex<'_>,
    tick: Timestamp,
) {
    track.coordinated_hpa = None;
    let Some(Ok(o)) = outcome.resources.as_ref().map(|r| &r.outcome) else {
        return;
    };
    let summed = |v: &mut dyn Iterator<Item = f64>| {
        v.fold(None, |acc: Option<f64>, x| Some(acc.unwrap_or(0.0) + x))
    };
    let scoped = || o.containers.iter().filter(|c| c.in_scope);
    let chart = &mut track.report.chart;
    if let Some(v) = summed(&mut scoped().filter_map(|c| c.cpu_usage)) {
        push_step(&mut chart.cpu.basis, tick.as_second(), v);
    }
    if let Some(v) = summed(&mut scoped().filter_map(|c| c.memory_usage)) {
        push_step(&mut chart.memory.basis, tick.as_second(), v / GIB);
    }
    if o.managed.hpa_target {
        track.coordinated_hpa = hpa_target_of(hpas, outcome.key());
    }
}

/// The chart's largest pod, as is and with kerf, and the usage at which the coordinated HPA
/// scales out.
fn chart_allocations(track: &mut Track, at: i64, real_pod: &AllocSums, sim_pod: &AllocSums) {
    let chart = &mut track.report.chart;
    push_step(&mut chart.real, at, real_pod.gpu);
    push_step(&mut chart.simulated, at, sim_pod.gpu);
    push_step(&mut chart.cpu.real, at, real_pod.cores);
    push_step(&mut chart.cpu.simulated, at, sim_pod.cores);
    push_step(&mut chart.memory.real, at, real_pod.gib);
    push_step(&mut chart.memory.simulated, at, sim_pod.gib);
    if let Some((resource, target)) = track.coordinated_hpa {
        let request = match resource {
            hpa::HpaResource::Cpu => sim_pod.cores,
            hpa::HpaResource::Memory => sim_pod.gib,
        };
        push_step(
            &mut chart.cpu_or_memory(resource).hpa,
            at,
            request * f64::from(target) / 100.0,
        );
    }
}

/// Closes the step functions at the end of the replay.
fn close_charts(chart: &mut ChartData, to: Timestamp) {
    for points in [
        &mut chart.real,
        &mut chart.simulated,
        &mut chart.cpu.real,
        &mut chart.cpu.simulated,
        &mut chart.cpu.basis,
        &mut chart.cpu.hpa,
        &mut chart.memory.real,
        &mut chart.memory.simulated,
        &mut chart.memory.basis,
        &mut chart.memory.hpa,
    ] {
        if let Some(&(_, v)) = points.last() {
            points.push((to.as_second(), v));
        }
    }
}

/// What the replay reads when it reports: the ticks, the history, the recorded pods and the
/// cAdvisor names the recommender reads (GlobalConfiguration `resourceMetrics`).
struct Reporting<'r, 'a, S> {
    ticks: &'r [Timestamp],
    last: Timestamp,
    opts: &'r Options,
    history: &'r HistorySource<'a, S>,
    pods: &'r ReplayPods,
    resource_metrics: &'r crate::api::ResourceMetrics,
}

impl<S: MetricSource> Reporting<'_, '_, S> {
    /// One workload's report: its charts closed, its recorded usage and the hours over the
    /// ticks that usage covers (marked in `covered`).
    async fn report(
        &self,
        track: Track,
        covered: &mut Vec<bool>,
    ) -> Result<WorkloadReport, MetricError> {
        let Track {
            mut report,
            gpu_policy,
            pods,
            allocations,
            ..
        } = track;
        close_charts(&mut report.chart, self.opts.to);
        let key = report.key.clone();
        let ctx = UsageContext {
            history: self.history,
            real: &self.pods.real,
            real_alloc: &self.pods.real_alloc,
            pods: &pods,
            key: &key,
            from: self.opts.from,
            last: self.last,
            step: self.opts.step_seconds,
        };
        let hours = |used: &BTreeMap<i64, f64>,
                     pick: fn(&TickAlloc) -> (f64, f64),
                     covered: &mut Vec<bool>| {
            hours_over(used, &allocations, pick, self.ticks, self.opts, covered)
        };
        if let Some(policy) = &gpu_policy {
            let (usage, used) = ctx.gpu_usage(policy).await?;
            report.chart.usage = usage;
            report.gpu_hours = hours(&used, |a| a.gpu, covered);
        }
        let metrics = self.resource_metrics;
        let matchers = LabelMatcher::of_resource_metrics(metrics);
        let (cpu, cpu_pod) = ctx.summed(&metrics.cpu, &matchers, Some(true)).await?;
        report.cpu_core_hours = hours(&cpu, |a| a.cores, covered);
        let (memory, memory_pod) = ctx.summed(&metrics.memory, &matchers, Some(false)).await?;
        let memory: BTreeMap<i64, f64> = memory.into_iter().map(|(t, v)| (t, v / GIB)).collect();
        report.memory_gib_hours = hours(&memory, |a| a.gib, covered);
        if report.resources_policy {
            report.chart.cpu.usage = cpu_pod;
            report.chart.memory.usage = memory_pod.into_iter().map(|(t, v)| (t, v / GIB)).collect();
        }
        Ok(report)
    }
}

/// Replays `manifests` over `source`'s history as [`Options`] say.
pub async fn run<S: MetricSource>(
    manifests: Manifests,
    source: &S,
    opts: &Options,
) -> Result<Report, SimulateError> {
    if opts.every_seconds <= 0 {
        return Err(SimulateError::Flag("--every must be positive"));
    }
    if opts.step_seconds <= 0 {
        return Err(SimulateError::Flag("--step-seconds must be positive"));
    }
    if opts.from >= opts.to {
        return Err(SimulateError::Flag("--from must be before --to"));
    }
    let ticks = opts.ticks();
    let last = *ticks.last().expect("from < to gives a tick");
    manifests.reject_invalid()?;
    let Manifests {
        snapshot: mut base,
        invalid,
        ..
    } = manifests;
    let (global, per_policy) = as_auto_patch(&mut base);
    let mut history = history_for(source, &base, opts, last);
    let mut writer = MemoryWriter::new();
    let store = Store::default();
    crate::reconcile::serve_persisted(&store, &base, &writer.recommendations());
    let notes = AutoPatchNotes { global, per_policy };
    let mut replay = Replay::new(&base, notes, &store, opts.from);
    let mut warnings = Vec::new();

    // The objects as the last tick's writes left them (overlaying kerf's writes again is a
    // no-op), with the simulated pods: no fresh copy of the manifests per tick.
    let mut current = base.clone();
    // Kept between ticks as a Lease holder keeps it: each tick asks for the steps since the last.
    let usage: crate::reconcile::History = Default::default();
    for (ti, &tick) in ticks.iter().enumerate() {
        current.pods = replay.pods.sim.clone();
        let (after, cycle, _) = in_memory_cycle_keeping(
            &mut writer,
            current,
            &invalid,
            &history,
            tick,
            opts.step_seconds,
            &store,
            Some(&usage),
        )
        .await;
        for (policy, e) in cycle.query_failures() {
            warnings.push(format!("{tick}: {policy}: {e}"));
        }
        replay.in_place = resized_in_place(&writer);
        let rolled = replay.follow_cycle(&cycle, &after, &store, tick);
        current = after;
        replay.pods.rescale_history(&mut history, &rolled);
        replay.record_allocations(ti, tick);
    }

    let mut tracks = std::mem::take(&mut replay.tracks);
    for t in tracks.iter_mut().filter(|t| t.report.resized_in_place > 0) {
        t.report.notes.push(format!(
            "resized in place {} time(s), as a cluster serving pods/resize (Kubernetes 1.33+) \
             would: no API server was asked",
            t.report.resized_in_place
        ));
    }
    let reporting = Reporting {
        ticks: &ticks,
        last,
        opts,
        history: &history,
        pods: &replay.pods,
        resource_metrics: &base.global.prometheus.resource_metrics,
    };
    let mut workloads = Vec::with_capacity(tracks.len());
    let mut covered = vec![false; ticks.len()];
    for track in tracks {
        workloads.push(reporting.report(track, &mut covered).await?);
    }
    warnings.extend(history.warnings().await);
    Ok(Report {
        from: opts.from,
        to: opts.to,
        every_seconds: opts.every_seconds,
        cycles: ticks.len(),
        workloads,
        fetches: history.fetches(),
        coverage: coverage(&covered, &ticks, opts),
        warnings,
    })
}

/// The workloads whose change kerf applies in place (`applyMethod: inPlace`), as the cycle
/// recorded them.
fn resized_in_place(writer: &MemoryWriter) -> HashSet<WorkloadKey> {
    writer
        .recommendations()
        .iter()
        .filter(|r| {
            r.status
                .as_ref()
                .is_some_and(|s| s.apply_method == Some(crate::api::ApplyMethod::InPlace))
        })
        .filter_map(|r| r.workload())
        .collect()
}

/// The value tick `i` takes from `values`: the latest sample at or before it, not older than
/// one tick (`None`: the tick is not covered).
fn tick_value(values: &BTreeMap<i64, f64>, tick: Timestamp, opts: &Options) -> Option<f64> {
    let t = tick.as_second();
    let (&at, &v) = values.range(..=t).next_back()?;
    (t - at < opts.every_seconds.max(opts.step_seconds)).then_some(v)
}

/// The tick's interval in hours: until the next tick, or `--to`.
fn tick_hours(ticks: &[Timestamp], i: usize, opts: &Options) -> f64 {
    let next = ticks.get(i + 1).copied().unwrap_or(opts.to);
    (next.as_second() - ticks[i].as_second()) as f64 / 3600.0
}

/// Step integrals at tick resolution over the ticks `used` covers: the usage, and the
/// allocation `pick` reads (as is, with kerf) from the change points `allocations`, each held
/// until the next tick. Marks the covered ticks in `covered`.
fn hours_over(
    used: &BTreeMap<i64, f64>,
    allocations: &[(usize, TickAlloc)],
    pick: fn(&TickAlloc) -> (f64, f64),
    ticks: &[Timestamp],
    opts: &Options,
    covered: &mut [bool],
) -> Hours {
    let mut h = Hours::default();
    let mut mine = vec![false; ticks.len()];
    let mut next_change = 0;
    let mut alloc = (0.0, 0.0);
    for (i, &tick) in ticks.iter().enumerate() {
        while let Some((at, a)) = allocations.get(next_change).filter(|(at, _)| *at <= i) {
            debug_assert!(*at <= i);
            alloc = pick(a);
            next_change += 1;
        }
        let Some(v) = tick_value(used, tick, opts) else {
            continue;
        };
        let dt = tick_hours(ticks, i, opts);
        h.used += v * dt;
        h.allocated_as_is += alloc.0 * dt;
        h.allocated_with_kerf += alloc.1 * dt;
        mine[i] = true;
        covered[i] = true;
    }
    h.coverage = coverage(&mine, ticks, opts);
    h
}

/// The span of the covered ticks.
fn coverage(covered: &[bool], ticks: &[Timestamp], opts: &Options) -> Option<Coverage> {
    let first = covered.iter().position(|c| *c)?;
    let last = covered.iter().rposition(|c| *c)?;
    Some(Coverage {
        from: ticks[first],
        to: ticks.get(last + 1).copied().unwrap_or(opts.to),
        cycles: covered.iter().filter(|c| **c).count(),
    })
}

/// Reads a workload's recorded usage from the history.
struct UsageContext<'h, 'a, S> {
    history: &'h HistorySource<'a, S>,
    real: &'h [Arc<Pod>],
    real_alloc: &'h [PodAlloc],
    pods: &'h [usize],
    key: &'h WorkloadKey,
    from: Timestamp,
    last: Timestamp,
    step: i64,
}

impl<S: MetricSource> UsageContext<'_, '_, S> {
    fn pod_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .pods
            .iter()
            .filter_map(|&pi| self.real[pi].metadata.name.as_deref().map(str::to_string))
            .collect();
        names.sort();
        names
    }

    async fn recorded(
        &self,
        metric: &crate::api::PrometheusMetric,
        counter: Option<bool>,
        matchers: &[LabelMatcher],
    ) -> Result<SeriesSet, MetricError> {
        let pods = self.pod_names();
        if pods.is_empty() {
            return Ok(SeriesSet::default());
        }
        let q = RangeQuery {
            metric: metric.metric.clone(),
            namespace_label: metric.namespace_label.clone(),
            pod_label: metric.pod_label.clone(),
            container_label: metric.container_label.clone(),
            namespaces: vec![self.key.namespace.to_string()],
            pods: pods.into(),
            start: self.from,
            end: self.last,
            step_seconds: self.step,
            counter,
            aggregation: crate::metrics::Aggregation::of(metric.interpretation),
            matchers: matchers.to_vec(),
        };
        self.history.recorded(&q).await
    }

    /// Per signal, the hottest pod's usage in GPUs at each sample; and the workload's usage
    /// (per pod the higher of the two signals, summed over pods).
    async fn gpu_usage(
        &self,
        policy: &GpuPolicy,
    ) -> Result<(Vec<(Signal, Points)>, BTreeMap<i64, f64>), MetricError> {
        let pods: Vec<(&str, &PodAlloc)> = self
            .pods
            .iter()
            .filter_map(|&pi| {
                Some((
                    self.real[pi].metadata.name.as_deref()?,
                    &self.real_alloc[pi],
                ))
            })
            .collect();
        // (signal, pod index in `pods`) → the pod's totals in time order.
        let mut totals: BTreeMap<(Signal, usize), Points> = BTreeMap::new();
        let mut usage = Vec::new();
        for signal in Signal::BOTH {
            let m = &policy.spec.metrics.signal(signal).prometheus;
            let set = self.recorded(m, None, &[]).await?;
            let by_key: HashMap<(&str, &str), &[(i64, f64)]> = set
                .series
                .iter()
                .map(|(k, v)| ((k.pod.as_str(), k.container.as_str()), v.as_slice()))
                .collect();
            let per_pod =
                usage::pod_totals(&pods, m.interpretation, |p, c| by_key.get(&(p, c)).copied());
            usage.push((signal, usage::hottest(&per_pod)));
            for (i, per) in per_pod.into_iter().enumerate() {
                totals.insert((signal, i), per);
            }
        }
        // Per pod and time, the higher signal; summed over pods in pod order.
        let mut per_pod: Vec<(i64, f64)> = Vec::new();
        for pi in 0..pods.len() {
            // The higher of the two signals at each time (from 0), in time order.
            let both: Vec<(i64, f64)> = [Signal::Compute, Signal::Memory]
                .iter()
                .filter_map(|signal| totals.get(&(*signal, pi)))
                .flatten()
                .copied()
                .collect();
            per_pod.extend(usage::fold_by_time(both, 0.0, f64::max));
        }
        let used = usage::fold_by_time(per_pod, 0.0, |total, v| total + v)
            .into_iter()
            .collect();
        Ok((usage, used))
    }

    /// A cAdvisor metric summed over the workload's pods and containers, per sample; and the
    /// hottest pod's (its containers summed) at each sample.
    /// A cAdvisor series (`resourceMetrics`: its name and matchers) summed over the workload's
    /// containers, and the hottest pod's.
    async fn summed(
        &self,
        metric: &str,
        matchers: &[LabelMatcher],
        counter: Option<bool>,
    ) -> Result<(BTreeMap<i64, f64>, Points), MetricError> {
        let m = crate::api::PrometheusMetric {
            metric: metric.to_string(),
            interpretation: Interpretation::FullGpu,
            namespace_label: "namespace".into(),
            pod_label: "pod".into(),
            container_label: "container".into(),
        };
        let set = self.recorded(&m, counter, matchers).await?;
        let mut by_pod: BTreeMap<&str, Vec<(i64, f64)>> = BTreeMap::new();
        for (k, samples) in &set.series {
            by_pod
                .entry(k.pod.as_str())
                .or_default()
                .extend(samples.iter().copied());
        }
        let per_pod: Vec<Points> = by_pod
            .into_values()
            .map(|v| usage::fold_by_time(v, 0.0, |total, v| total + v))
            .collect();
        let all: Vec<(i64, f64)> = set.series.values().flatten().copied().collect();
        let summed = usage::fold_by_time(all, 0.0, |total, v| total + v)
            .into_iter()
            .collect();
        Ok((summed, usage::hottest(&per_pod)))
    }
}

/// Why a replay cannot be made: a flag out of range, the manifests' invalid policies, or the
/// recorded history the metric source could not give.
#[derive(Debug, thiserror::Error)]
pub enum SimulateError {
    #[error("{0}")]
    Flag(&'static str),
    #[error(transparent)]
    Manifests(#[from] crate::sources::dir::ManifestError),
    #[error(transparent)]
    History(#[from] MetricError),
}
