//! The in-cluster reconcile loop: every GlobalConfiguration `gpuReactiveCheckInterval`, take a
//! snapshot of the watch-fed indexes, run one evaluation cycle against Prometheus, refresh the
//! store the webhook reads, and queue the writes (the writer performs them only while this
//! replica holds the Lease; every replica computes and serves).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

use crate::api::{
    CONDITION_PROMETHEUS_AVAILABLE, CONDITION_READY, CONDITION_STRATEGY_RESOLVED, PolicyStatus,
    RecommendationPhase, RecommendationStatus, RightsizingRecommendation, WorkloadKind,
};
use crate::core::model::{ANNOTATION_ROLLBACK, PolicyId, ResourceRequests, WorkloadKey};
use crate::core::resources::{counted_containers, effective_requests};
use crate::core::rightsizing::{plan_restore, recommendation_spec, recommendation_status};
use crate::core::snapshot::{Snapshot, Workload, unresolved_strategy_message};
use crate::kube::reader::{InvalidPolicy, Reader};
use crate::kube::writer::{
    ConditionUpdate, CoordinatedChange, EventWrite, GpuAnnotations, HpaTarget, PolicyStatusWrite,
    RecommendationWrite, RestoreKind, RestoreWrite, WorkloadWrite, WriteOp, WriterHandle,
};
use crate::metrics::prometheus::PrometheusSource;
use crate::pipeline::{CycleOutput, run_cycle};

use crate::state::Store;

/// Name of a workload's RightsizingRecommendation: `<kind>-<name>`, lower-case kind.
pub fn recommendation_name(key: &WorkloadKey) -> String {
    format!("{}-{}", key.kind.as_str().to_lowercase(), key.name)
}

fn owner_of(w: &Workload) -> Option<OwnerReference> {
    w.uid.as_ref().map(|uid| OwnerReference {
        api_version: w.key.kind.api_version().into(),
        kind: w.key.kind.as_str().into(),
        name: w.key.name.clone(),
        uid: uid.clone(),
        ..Default::default()
    })
}

/// The template's requests differ from what kerf wants to set (so an `Applied` event is due).
fn requests_differ(w: &Workload, wanted: &BTreeMap<String, ResourceRequests>) -> bool {
    let spec = w.template.pod_spec();
    wanted.iter().any(|(name, want)| {
        let have = counted_containers(spec)
            .into_iter()
            .find(|c| &c.name == name)
            .and_then(|c| effective_requests(c).ok())
            .unwrap_or_default();
        (want.cpu_millis.is_some() && want.cpu_millis != have.cpu_millis)
            || (want.memory_bytes.is_some() && want.memory_bytes != have.memory_bytes)
    })
}

fn condition_writes(
    id: &PolicyId,
    generation: Option<i64>,
    observed: Option<PolicyStatus>,
    strategy: Result<(), String>,
    prometheus: Option<&Result<(), String>>,
    matched: i64,
) -> WriteOp {
    let mut conditions = Vec::new();
    let strategy_ok = strategy.is_ok();
    conditions.push(match &strategy {
        Ok(()) => ConditionUpdate::new(
            CONDITION_STRATEGY_RESOLVED,
            true,
            "Resolved",
            "automationStrategyRef resolves",
        ),
        Err(e) => ConditionUpdate::new(CONDITION_STRATEGY_RESOLVED, false, "NotFound", e.clone()),
    });
    match prometheus {
        Some(Ok(())) => conditions.push(ConditionUpdate::new(
            CONDITION_PROMETHEUS_AVAILABLE,
            true,
            "QueriesSucceeded",
            "the last range queries succeeded",
        )),
        Some(Err(e)) => conditions.push(ConditionUpdate::new(
            CONDITION_PROMETHEUS_AVAILABLE,
            false,
            "QueryFailed",
            format!("{e}; the last recommendations stay in force"),
        )),
        None => {}
    }
    conditions.push(if strategy_ok {
        ConditionUpdate::new(
            CONDITION_READY,
            true,
            "Evaluated",
            format!("{matched} workload(s) selected"),
        )
    } else {
        ConditionUpdate::new(
            CONDITION_READY,
            false,
            "StrategyUnresolved",
            "the policy is not applied",
        )
    });
    WriteOp::PolicyStatus(Box::new(PolicyStatusWrite {
        policy: id.clone(),
        generation,
        observed,
        conditions,
        matched_workloads: Some(matched),
    }))
}

/// A rollback was asked for: the workload carries `rightsizing.kubex.ai/rollback` with a
/// non-empty value.
pub fn rollback_requested(w: &Workload) -> bool {
    w.annotations
        .get(ANNOTATION_ROLLBACK)
        .is_some_and(|v| !v.trim().is_empty())
}

/// The recommendation says kerf was rolled back there and must not apply (until it is deleted).
pub fn rolled_back(status: Option<&RecommendationStatus>) -> bool {
    status.is_some_and(|s| {
        s.phase == RecommendationPhase::AuditOnly
            && s.reason.as_deref() == Some(RestoreKind::Rollback.reason())
    })
}

/// kerf applied something there that a release must give back.
fn kerf_applied(status: Option<&RecommendationStatus>) -> bool {
    status.is_some_and(|s| s.previous_hpa_target.is_some() || !s.original_requests.is_empty())
}

/// The workload a RightsizingRecommendation is about.
fn recommendation_key(rec: &RightsizingRecommendation) -> Option<WorkloadKey> {
    Some(WorkloadKey::new(
        rec.metadata.namespace.clone()?,
        WorkloadKind::parse(&rec.spec.workload.kind)?,
        rec.spec.workload.name.clone(),
    ))
}

fn find_recommendation<'a>(
    recommendations: &'a [Arc<RightsizingRecommendation>],
    key: &WorkloadKey,
) -> Option<&'a RightsizingRecommendation> {
    let name = recommendation_name(key);
    recommendations
        .iter()
        .find(|rec| {
            rec.metadata.namespace.as_deref() == Some(key.namespace.as_str())
                && rec.metadata.name.as_deref() == Some(name.as_str())
        })
        .map(|rec| &**rec)
}

/// Workloads whose CPU/memory kerf must not set, at admission or by the agent: a rollback is
/// asked for or was done (see [`rolled_back`]).
pub fn held_back(
    snapshot: &Snapshot,
    recommendations: &[Arc<RightsizingRecommendation>],
) -> BTreeSet<WorkloadKey> {
    let mut out: BTreeSet<WorkloadKey> = snapshot
        .workloads
        .iter()
        .filter(|w| rollback_requested(w))
        .map(|w| w.key.clone())
        .collect();
    out.extend(
        recommendations
            .iter()
            .filter(|r| rolled_back(r.status.as_ref()))
            .filter_map(|r| recommendation_key(r)),
    );
    out
}

/// The status a restore leaves: audit-only with the restore's reason; nothing kerf applied is
/// left to give back.
fn restored_status(mut status: RecommendationStatus, kind: RestoreKind) -> RecommendationStatus {
    status.phase = RecommendationPhase::AuditOnly;
    status.reason = Some(kind.reason().into());
    status.previous_hpa_target = None;
    status.original_requests.clear();
    status
}

/// Rollbacks (annotation) and releases (a recommendation kerf applied from, whose workload no
/// longer has an auto-patch outcome): one [`RestoreWrite`] each. Nothing under `readOnly`.
fn restore_writes(
    snapshot: &Snapshot,
    cycle: &CycleOutput,
    recommendations: &[Arc<RightsizingRecommendation>],
    workloads: &HashMap<&WorkloadKey, &Arc<Workload>>,
    now: DateTime<Utc>,
) -> BTreeMap<WorkloadKey, WriteOp> {
    let mut out = BTreeMap::new();
    if snapshot.global.read_only {
        return out;
    }
    let results: HashMap<&WorkloadKey, &crate::core::rs_evaluate::RsResult> =
        cycle.rightsizing.iter().map(|r| (&r.key, r)).collect();
    let mut due: BTreeMap<WorkloadKey, RestoreKind> = snapshot
        .workloads
        .iter()
        .filter(|w| rollback_requested(w))
        .map(|w| (w.key.clone(), RestoreKind::Rollback))
        .collect();
    for rec in recommendations {
        let Some(key) = recommendation_key(rec) else {
            continue;
        };
        if due.contains_key(&key)
            || !workloads.contains_key(&key)
            || !kerf_applied(rec.status.as_ref())
        {
            continue;
        }
        // Still auto-patch (applied, blocked for now, pending) or unknown this cycle (metrics
        // unavailable, unusable policy): nothing is released.
        let leaves = match results.get(&key) {
            None => true,
            Some(r) => {
                !r.metrics_unavailable
                    && r.outcome
                        .as_ref()
                        .is_ok_and(|o| o.phase == RecommendationPhase::AuditOnly)
            }
        };
        if leaves {
            due.insert(key, RestoreKind::Release);
        }
    }
    for (key, kind) in due {
        let Some(w) = workloads.get(&key) else {
            continue;
        };
        let observed = find_recommendation(recommendations, &key).cloned();
        let outcome = results
            .get(&key)
            .and_then(|r| r.outcome.as_ref().ok().map(|o| (o, &r.policy)));
        let (plan, problem) = match &observed {
            Some(rec) => match rec.status.as_ref() {
                Some(status) => match plan_restore(&rec.spec, status) {
                    Ok(p) => (p, None),
                    Err(e) => (Default::default(), Some(format!("nothing restored: {e}"))),
                },
                None => (Default::default(), None),
            },
            None => (Default::default(), None),
        };
        let hpa = plan.hpa.as_ref().and_then(|h| {
            let live = snapshot.hpas.iter().find(|x| {
                x.metadata.namespace.as_deref() == Some(key.namespace.as_str())
                    && x.metadata.name.as_deref() == Some(h.name.as_str())
            })?;
            Some(HpaTarget {
                namespace: key.namespace.clone(),
                name: h.name.clone(),
                resource: h.resource.clone(),
                average_utilization: h.target,
                observed: Some(live.clone()),
            })
        });
        let hpa_from = hpa.as_ref().and_then(HpaTarget::current).map(|(_, t)| t);
        let recommendation = match (&observed, outcome) {
            (_, Some((o, policy))) => {
                let prev = observed.as_ref().and_then(|r| r.status.as_ref());
                Some((
                    recommendation_spec(o, &key, Some(policy)),
                    recommendation_status(o, prev),
                ))
            }
            (Some(rec), None) => Some((rec.spec.clone(), rec.status.clone().unwrap_or_default())),
            (None, None) => None,
        }
        .map(|(spec, status)| {
            let mut status = restored_status(status, kind);
            status.last_applied_time = Some(now.to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
            RecommendationWrite {
                namespace: key.namespace.clone(),
                name: recommendation_name(&key),
                spec,
                status: Some(status),
                owner: owner_of(w),
                observed: observed.clone(),
            }
        });
        let event = EventWrite::restored(
            w,
            kind,
            &plan.requests,
            hpa.as_ref(),
            hpa_from,
            problem.as_deref(),
        );
        out.insert(
            key,
            WriteOp::Restore(Box::new(RestoreWrite {
                kind,
                observed: Arc::clone(w),
                requests: plan.requests,
                hpa,
                recommendation,
                event,
            })),
        );
    }
    out
}

/// Pure: every write one cycle calls for. The writer skips what the cluster already has.
pub fn plan_writes(
    snapshot: &Snapshot,
    cycle: &CycleOutput,
    invalid: &[InvalidPolicy],
    recommendations: &[Arc<RightsizingRecommendation>],
    now: DateTime<Utc>,
) -> Vec<WriteOp> {
    let mut ops = Vec::new();
    let workloads: HashMap<&WorkloadKey, &Arc<Workload>> =
        snapshot.workloads.iter().map(|w| (&w.key, w)).collect();

    // GPU: baseline and recommendation annotations (restart on change is the writer's job).
    for r in &cycle.results {
        if r.metrics_unavailable {
            continue; // nothing flaps: persisted state stays as it is
        }
        let Some(w) = workloads.get(&r.key) else {
            continue;
        };
        ops.push(WriteOp::Workload(Box::new(WorkloadWrite {
            observed: Arc::clone(w),
            gpu: Some(GpuAnnotations {
                baseline: r.baseline.clone(),
                recommendation: r.recommendation.clone(),
            }),
            requests: None,
        })));
    }

    // Rollbacks and releases carry their own RightsizingRecommendation write (made once the
    // restore went through), so those workloads are skipped below.
    let mut restores = restore_writes(snapshot, cycle, recommendations, &workloads, now);

    // CPU/memory: the RightsizingRecommendation, then the change (coordinated when an HPA is).
    for r in &cycle.rightsizing {
        if let Some(op) = restores.remove(&r.key) {
            ops.push(op);
            continue;
        }
        let Ok(outcome) = &r.outcome else { continue };
        let Some(w) = workloads.get(&r.key) else {
            continue;
        };
        let name = recommendation_name(&r.key);
        let observed = find_recommendation(recommendations, &r.key).cloned();
        let previous_status = observed.as_ref().and_then(|o| o.status.clone());
        let mut status = recommendation_status(outcome, previous_status.as_ref());
        // Rolled back (or asked to be, under readOnly): recommendation only.
        let held = rolled_back(previous_status.as_ref()) || rollback_requested(w);
        if held {
            status.previous_hpa_target =
                previous_status.as_ref().and_then(|p| p.previous_hpa_target);
            status.original_requests = previous_status
                .as_ref()
                .map(|p| p.original_requests.clone())
                .unwrap_or_default();
            if rolled_back(previous_status.as_ref()) {
                status.phase = RecommendationPhase::AuditOnly;
                status.reason = Some(RestoreKind::Rollback.reason().into());
            }
        }
        let plan = outcome
            .apply
            .as_ref()
            .filter(|_| !r.metrics_unavailable && !snapshot.global.read_only && !held);
        let changing = plan.is_some_and(|p| requests_differ(w, &p.requests));
        if changing {
            status.last_applied_time = Some(now.to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
        }
        if snapshot.global.read_only && outcome.phase == RecommendationPhase::Applied {
            status.phase = RecommendationPhase::AuditOnly;
            status.reason = Some("ReadOnly".into());
        }
        ops.push(WriteOp::Recommendation(Box::new(RecommendationWrite {
            namespace: r.key.namespace.clone(),
            name,
            spec: recommendation_spec(outcome, &r.key, Some(&r.policy)),
            status: Some(status),
            owner: owner_of(w),
            observed,
        })));
        let was_blocked = previous_status
            .as_ref()
            .is_some_and(|s| s.phase == RecommendationPhase::Blocked);
        if outcome.phase == RecommendationPhase::Blocked && !was_blocked && !held {
            let reason = outcome
                .reason
                .clone()
                .unwrap_or_else(|| "HPACoupled".into());
            ops.push(WriteOp::Event(Box::new(EventWrite::blocked(
                w,
                &reason,
                &outcome.message,
            ))));
        }
        let Some(plan) = plan else { continue };
        let workload = WorkloadWrite {
            observed: Arc::clone(w),
            gpu: None,
            requests: Some(plan.requests.clone()),
        };
        match &plan.hpa {
            Some(h) => {
                let hpa = snapshot.hpas.iter().find(|x| {
                    x.metadata.namespace.as_deref() == Some(r.key.namespace.as_str())
                        && x.metadata.name.as_deref() == Some(h.hpa_name.as_str())
                });
                ops.push(WriteOp::Coordinated(Box::new(CoordinatedChange {
                    workload,
                    hpa: HpaTarget {
                        namespace: r.key.namespace.clone(),
                        name: h.hpa_name.clone(),
                        resource: h.resource.clone(),
                        average_utilization: h.target_after,
                        observed: hpa.cloned(),
                    },
                })));
                if changing {
                    ops.push(WriteOp::Event(Box::new(EventWrite::applied(w, h))));
                }
            }
            None => ops.push(WriteOp::Workload(Box::new(workload))),
        }
    }

    // Restores of workloads the cycle has no result for (policy deleted, no longer selected).
    ops.extend(restores.into_values());

    // Policy status conditions.
    let mut matched: HashMap<PolicyId, i64> = HashMap::new();
    for r in &cycle.results {
        if let Some(p) = r.policies.first() {
            *matched.entry(p.clone()).or_default() += 1;
        }
    }
    for r in &cycle.rightsizing {
        *matched.entry(r.policy.clone()).or_default() += 1;
    }
    for (i, p) in snapshot.gpu_policies.iter().enumerate() {
        let strategy = match cycle.unresolved_strategies.get(&i) {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        };
        ops.push(condition_writes(
            &p.id,
            p.generation,
            p.status.clone(),
            strategy,
            cycle.prometheus.get(&i),
            matched.get(&p.id).copied().unwrap_or(0),
        ));
    }
    for (i, p) in snapshot.rightsizing_policies.iter().enumerate() {
        let name = &p.spec.automation_strategy_ref.name;
        let strategy = match snapshot.strategy(p.id.namespace.as_deref(), name) {
            Some(_) => Ok(()),
            None => Err(unresolved_strategy_message(name)),
        };
        ops.push(condition_writes(
            &p.id,
            p.generation,
            p.status.clone(),
            strategy,
            cycle.rs_prometheus.get(&i),
            matched.get(&p.id).copied().unwrap_or(0),
        ));
    }
    for bad in invalid {
        ops.push(WriteOp::PolicyStatus(Box::new(PolicyStatusWrite {
            policy: bad.id.clone(),
            generation: bad.generation,
            observed: bad.status.clone(),
            conditions: vec![ConditionUpdate::new(
                CONDITION_READY,
                false,
                "Invalid",
                bad.error.clone(),
            )],
            matched_workloads: Some(0),
        })));
    }
    ops
}

/// Refreshes the store from a cycle. Workloads whose metrics were unavailable keep what they had.
pub fn refresh_store(store: &Store, snapshot: &Snapshot, cycle: &CycleOutput) {
    refresh_store_except(store, snapshot, cycle, &BTreeSet::new());
}

/// [`refresh_store`] without CPU/memory requests or HPA target for the `held` workloads (see
/// [`held_back`]): admission must not put kerf's values back on a rolled-back workload's pods,
/// nor its coordinated target back on the HPA the rollback restores.
pub fn refresh_store_except(
    store: &Store,
    snapshot: &Snapshot,
    cycle: &CycleOutput,
    held: &BTreeSet<WorkloadKey>,
) {
    store.set_global(snapshot.global.clone());
    let unavailable: HashSet<&WorkloadKey> = cycle
        .results
        .iter()
        .filter(|r| r.metrics_unavailable)
        .map(|r| &r.key)
        .collect();
    let mut present: HashSet<WorkloadKey> = HashSet::new();
    // Each state replaces its predecessor in place: the store never holds two cycles' worth.
    cycle.each_state(|key, mut state| {
        present.insert(key.clone());
        if unavailable.contains(key)
            && let Some(old) = store.get(key)
        {
            state = (*old).clone();
        }
        if held.contains(key) {
            state.resources.clear();
            state.hpa = None;
        }
        store.put(key.clone(), state);
    });
    store.retain(|k| present.contains(k));
}

/// One reconcile cycle, the same in every mode (in-cluster, standalone, `kerf recommend`):
/// batched queries and engines over `snapshot`, the admission store refreshed (workloads whose
/// metrics were unavailable keep their last state), the failure reported, and the writes the
/// cycle calls for — for the caller's writer (the Lease-gated cluster writer or the in-memory
/// one). `recommendations` are the RightsizingRecommendations as the writer last left them.
pub async fn reconcile_once<S: crate::metrics::MetricSource>(
    snapshot: &Snapshot,
    invalid: &[InvalidPolicy],
    recommendations: &[Arc<RightsizingRecommendation>],
    source: &S,
    now: DateTime<Utc>,
    step_seconds: i64,
    store: &Store,
) -> (CycleOutput, Vec<WriteOp>) {
    let cycle = run_cycle(snapshot, source, now, step_seconds).await;
    let held = held_back(snapshot, recommendations);
    refresh_store_except(store, snapshot, &cycle, &held);
    let failures = cycle.query_failures(snapshot);
    if !failures.is_empty() {
        crate::telemetry::metrics().reconcile_errors.inc();
        for (policy, e) in &failures {
            tracing::warn!(%policy, "{e}; the last recommendations stay in force");
        }
    }
    let ops = plan_writes(snapshot, &cycle, invalid, recommendations, now);
    crate::telemetry::metrics().reconcile_cycles.inc();
    (cycle, ops)
}

pub struct ReconcilerConfig {
    /// kerf's own namespace (Lease, events' reporting instance).
    pub namespace: String,
    pub step_seconds: i64,
}

/// Runs forever: readiness after restart recovery, then a cycle every interval (missed ticks are
/// skipped; a changed interval or Prometheus URL is picked up at the next cycle).
pub async fn run(
    client: ::kube::Client,
    store: Arc<Store>,
    cfg: ReconcilerConfig,
) -> anyhow::Result<()> {
    let reader = Reader::start_with_store(client.clone(), store.clone());
    let lease = crate::kube::lease::Lease::spawn(
        client.clone(),
        &cfg.namespace,
        crate::kube::default_identity(),
    );
    let writer: WriterHandle =
        crate::kube::writer::Writer::spawn(client.clone(), &cfg.namespace, lease);
    let recovered = crate::kube::recovery::prime_store(&reader, &store).await;
    tracing::info!(
        workloads = recovered.entries.len(),
        "store primed from workload annotations; ready"
    );
    every_interval(&mut ReconcileCycle {
        reader,
        writer,
        store,
        step_seconds: cfg.step_seconds,
        source: None,
    })
    .await
}

/// One reconcile cycle, run by [`every_interval`].
pub trait Cycle {
    /// Runs once; returns the interval to the next run.
    fn run_once(&mut self) -> impl Future<Output = anyhow::Result<Duration>> + Send;
}

struct ReconcileCycle {
    reader: Reader,
    writer: WriterHandle,
    store: Arc<Store>,
    step_seconds: i64,
    /// The Prometheus source with the URL and timeout it was built for.
    source: Option<(String, u64, PrometheusSource)>,
}

impl Cycle for ReconcileCycle {
    /// Snapshot → queries → engines → store → writer queue; the interval is the snapshot's
    /// `gpuReactiveCheckInterval`.
    async fn run_once(&mut self) -> anyhow::Result<Duration> {
        let started = std::time::Instant::now();
        let (snapshot, invalid) = self.reader.snapshot();
        self.writer.set_read_only(snapshot.global.read_only);
        let interval = check_interval(&snapshot.global);
        let url = snapshot.global.prometheus.url.clone();
        let timeout = snapshot.global.prometheus.request_timeout.seconds();
        if self
            .source
            .as_ref()
            .is_none_or(|(u, t, _)| u != &url || *t != timeout)
        {
            match PrometheusSource::new(&url, Duration::from_secs(timeout)) {
                Ok(s) => self.source = Some((url.clone(), timeout, s)),
                Err(e) => tracing::error!("prometheus.url {url:?}: {e}"),
            }
        }
        if let Some((_, _, prom)) = &self.source {
            let now = Utc::now();
            let recommendations = self.reader.recommendations();
            let (_, ops) = reconcile_once(
                &snapshot,
                &invalid,
                &recommendations,
                prom,
                now,
                self.step_seconds,
                &self.store,
            )
            .await;
            for op in ops {
                if self.writer.send(op).await.is_err() {
                    anyhow::bail!("the writer task stopped");
                }
            }
        } else {
            crate::telemetry::metrics().reconcile_errors.inc();
            crate::telemetry::metrics().reconcile_cycles.inc();
        }
        crate::telemetry::metrics()
            .reconcile_duration_seconds
            .observe(started.elapsed().as_secs_f64());
        Ok(interval)
    }
}

/// `gpuReactiveCheckInterval`, never under the documented minimum of one minute (the CRD rejects
/// less; this guards a configuration read some other way).
pub fn check_interval(global: &crate::api::GlobalConfigurationSpec) -> Duration {
    Duration::from_secs(global.gpu_reactive_check_interval.seconds().max(60))
}

/// Runs `cycle` until it fails, each run starting one interval after the previous one started.
/// `cycle` returns the interval from the GlobalConfiguration it just read, so a changed
/// `gpuReactiveCheckInterval` applies from the next wait. A cycle that overruns its interval is
/// followed at once by the next: missed ticks are skipped, never caught up in a burst.
pub async fn every_interval(cycle: &mut impl Cycle) -> anyhow::Result<()> {
    loop {
        let started = tokio::time::Instant::now();
        let interval = cycle.run_once().await?;
        tokio::time::sleep(interval.saturating_sub(started.elapsed())).await;
    }
}

#[cfg(test)]
mod loop_tests {
    use std::collections::VecDeque;

    use tokio::time::Instant;

    use super::*;

    /// Each run takes `work`, then asks for `interval`; the script's end stops the loop.
    struct Scripted {
        script: VecDeque<(u64, u64)>,
        starts: Vec<Instant>,
    }

    impl Cycle for Scripted {
        async fn run_once(&mut self) -> anyhow::Result<Duration> {
            self.starts.push(Instant::now());
            let Some((work, interval)) = self.script.pop_front() else {
                anyhow::bail!("script done");
            };
            tokio::time::sleep(Duration::from_secs(work)).await;
            Ok(Duration::from_secs(interval))
        }
    }

    #[tokio::test(start_paused = true)]
    async fn interval_changes_apply_from_the_next_wait_and_missed_ticks_are_skipped() {
        let mut cycle = Scripted {
            script: VecDeque::from([
                (1, 60),
                (1, 60),
                (1, 120), // interval raised
                (1, 120),
                (150, 120), // overruns its interval
                (1, 60),    // interval lowered
            ]),
            starts: Vec::new(),
        };
        let err = every_interval(&mut cycle).await.unwrap_err();
        assert_eq!(err.to_string(), "script done");
        let gaps: Vec<u64> = cycle
            .starts
            .windows(2)
            .map(|w| (w[1] - w[0]).as_secs())
            .collect();
        // After the overrun the next run starts at once (150 s), and only one run: no catch-up.
        assert_eq!(gaps, [60, 60, 120, 120, 150, 60]);
    }

    #[test]
    fn check_interval_is_the_global_configuration_interval_at_least_one_minute() {
        let global = |interval: &str| -> crate::api::GlobalConfigurationSpec {
            serde_json::from_value(serde_json::json!({ "gpuReactiveCheckInterval": interval }))
                .unwrap()
        };
        assert_eq!(check_interval(&global("5m")), Duration::from_secs(300));
        assert_eq!(check_interval(&global("1m")), Duration::from_secs(60));
        assert_eq!(check_interval(&global("10s")), Duration::from_secs(60));
        assert_eq!(
            check_interval(&Default::default()),
            Duration::from_secs(60),
            "default 1m"
        );
    }
}
