//! The only code that writes to the cluster: one task consuming a queue of [`WriteOp`]s.
//!
//! - Gated by the writer Lease: while this replica does not hold it, queued ops are dropped
//!   ([`WriteOutcome::NotLeader`]) — the next evaluation cycle recomputes them anyway — and the
//!   Lease is re-checked before every request, so losing it stops writing at once.
//! - `readOnly` (GlobalConfiguration): nothing is written to workloads or HPAs; policy status,
//!   RightsizingRecommendations and Events still are.
//! - Every request: a timeout, up to `tries` attempts with exponential backoff on server errors,
//!   timeouts and transport errors, and `kerf_cluster_writes{target,outcome}`.
//! - Workloads and HPAs are written with server-side apply, field manager `kerf`, forced (kerf is
//!   the controller of these fields). Server-side apply removes what the manager no longer sends,
//!   so each apply to a workload carries every field kerf owns there: the op says what it changes
//!   and the rest (read from the live object's `managedFields` just before) is carried forward
//!   ([`kerf_apply`]); a field kerf stops managing leaves only through a release. The rolling
//!   restart annotation is a plain merge patch (as `kubectl rollout restart` does), so later
//!   applies never remove it and trigger another rollout.
//! - Nothing is written when the observed object already matches.
//! - Rollback and release ([`WriteOp::Restore`]) write the recorded original requests and HPA
//!   target back before the RightsizingRecommendation and the Event, so a failure leaves the
//!   record for the next cycle. A release writes the values as [`RELEASE_FIELD_MANAGER`] (an
//!   Update moves the changed fields to it) and then applies as `kerf` without them (and without
//!   the requests kerf created where there were none), carrying what kerf keeps in the same apply,
//!   so kerf gives up ownership without server-side apply deleting the values (see
//!   docs/hpa-coordination.md, docs/design/hpa-coordination.md#h13).

pub mod lease;

pub use lease::{LEASE_NAME, Lease, LeaseConfig, default_identity};

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use ::kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use ::kube::{Client, Error as KubeError};
use jiff::Timestamp;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference, Pod};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot, watch};

use crate::api::{
    ClusterGpuReactivePolicy, ClusterRightsizingPolicy, GpuReactivePolicy, PolicyStatus,
    RightsizingPolicy, RightsizingRecommendation, WorkloadKind, WriteMethod,
};
use crate::core::hpa::utilization_metrics;
use crate::core::model::{
    ANNOTATION_GPU_BASELINE, ANNOTATION_GPU_RECOMMENDATION, ANNOTATION_ROLLBACK, ContainerRequests,
    RequestSet, WorkloadKey,
};
use crate::core::writes::pending::{self, ChangePart};
use crate::core::writes::write_method::json_patch;
use crate::core::writes::{limits_match, restored_limits, template_limits};
use crate::telemetry::{EvictionLabels, Metrics, ResizeLabels, WriteLabels};
use std::collections::BTreeMap;

use crate::checkpoint::{
    HISTORY_CONFIGMAP_PREFIX, HISTORY_KEY, HISTORY_LABEL, HISTORY_LABEL_VALUE,
};
use crate::core::managed_fields::{FIELD_MANAGER, RELEASE_FIELD_MANAGER, hpa_metrics_owners};
use crate::core::writes::*;

#[derive(Clone, Debug, PartialEq)]
pub enum WriteOutcome {
    /// `requests` API requests succeeded.
    Written {
        requests: usize,
    },
    /// The cluster already matched: nothing sent.
    Unchanged,
    /// This replica does not hold the writer Lease: nothing (more) sent.
    NotLeader,
    /// `readOnly`: workloads and HPAs are not written.
    ReadOnly,
    Failed(String),
}

#[derive(Clone, Debug)]
pub struct WriterConfig {
    /// kerf's namespace (logged with every write).
    pub namespace: String,
    /// Reported as the Events' `reportingInstance`.
    pub identity: String,
    pub timeout: Duration,
    pub tries: u32,
    /// First retry delay; doubles each retry.
    pub backoff: Duration,
    pub queue: usize,
    /// `readOnly` until told otherwise: a writer that has not seen the GlobalConfiguration
    /// must not touch workloads.
    pub read_only: bool,
    /// Where the writes are counted (`kerf_cluster_writes`): the process's registry.
    pub metrics: Arc<Metrics>,
}

impl WriterConfig {
    pub fn new(namespace: &str) -> Self {
        Self {
            namespace: namespace.into(),
            identity: crate::writers::kube::lease::default_identity(),
            timeout: Duration::from_secs(10),
            tries: 3,
            backoff: Duration::from_millis(500),
            queue: 1024,
            read_only: true,
            metrics: Metrics::new(),
        }
    }
}

/// A queued op: the cycle that planned it (its log lines carry the id), and who waits for its
/// outcome.
struct Queued {
    op: WriteOp,
    cycle: Option<u64>,
    reply: Option<oneshot::Sender<WriteOutcome>>,
}

fn count_fallback(metrics: &Metrics) {
    metrics
        .resizes
        .get_or_create(&ResizeLabels {
            outcome: "fallback".into(),
        })
        .inc();
}

/// The pause between two pods' resize requests: a workload's pods are resized one after
/// another, never in one burst (at most 10 a second).
pub const RESIZE_PACE: Duration = Duration::from_millis(100);

#[derive(Debug, thiserror::Error)]
#[error("the writer task has stopped")]
pub struct WriterStopped;

/// Sends ops to the writer task. Cheap to clone.
#[derive(Clone)]
pub struct WriterHandle {
    tx: mpsc::Sender<Queued>,
    read_only: Arc<watch::Sender<bool>>,
}

impl WriterHandle {
    /// Queues an op (waits only when the queue is full).
    pub async fn send(&self, op: WriteOp) -> Result<(), WriterStopped> {
        self.queue(op, None).await
    }

    /// Queues an op the cycle `cycle` planned: its write span carries the cycle's id, so the log
    /// finds every write of a cycle.
    pub async fn send_planned(&self, op: WriteOp, cycle: u64) -> Result<(), WriterStopped> {
        self.queue(op, Some(cycle)).await
    }

    async fn queue(&self, op: WriteOp, cycle: Option<u64>) -> Result<(), WriterStopped> {
        let queued = Queued {
            op,
            cycle,
            reply: None,
        };
        self.tx.send(queued).await.map_err(|_| WriterStopped)
    }

    /// Queues an op and waits for its outcome.
    pub async fn apply(&self, op: WriteOp) -> WriteOutcome {
        let (tx, rx) = oneshot::channel();
        let queued = Queued {
            op,
            cycle: None,
            reply: Some(tx),
        };
        if self.tx.send(queued).await.is_err() {
            return WriteOutcome::Failed(WriterStopped.to_string());
        }
        rx.await
            .unwrap_or_else(|_| WriteOutcome::Failed(WriterStopped.to_string()))
    }

    /// Resolves when the writer task has ended (it panicked, or the runtime is shutting down).
    pub async fn stopped(&self) {
        self.tx.closed().await
    }

    /// GlobalConfiguration `readOnly`; set it from every snapshot.
    pub fn set_read_only(&self, read_only: bool) {
        self.read_only
            .send_if_modified(|v| std::mem::replace(v, read_only) != read_only);
    }
}

pub struct Writer;

/// This replica holds the Lease: the Lease task says so and is still running (a stopped Lease
/// task renews nothing, so its last word cannot be trusted).
fn holds_lease(lease: &watch::Receiver<bool>) -> bool {
    lease.has_changed().is_ok() && *lease.borrow()
}

impl Writer {
    /// Spawns the writer task with default settings (10 s timeout, 3 tries), counting its writes
    /// in `metrics`.
    pub fn spawn(
        client: Client,
        namespace: &str,
        lease: watch::Receiver<bool>,
        metrics: Arc<Metrics>,
    ) -> WriterHandle {
        let cfg = WriterConfig {
            metrics,
            ..WriterConfig::new(namespace)
        };
        Self::spawn_with(client, lease, cfg)
    }

    pub fn spawn_with(
        client: Client,
        lease: watch::Receiver<bool>,
        cfg: WriterConfig,
    ) -> WriterHandle {
        let (tx, mut rx) = mpsc::channel::<Queued>(cfg.queue.max(1));
        let (ro_tx, ro_rx) = watch::channel(cfg.read_only);
        let mut task = Task {
            client,
            cfg,
            lease,
            read_only: ro_rx,
            last_applied: HashMap::new(),
        };
        tokio::spawn(async move {
            while let Some(Queued { op, cycle, reply }) = rx.recv().await {
                let outcome = if holds_lease(&task.lease) {
                    task.execute(op, cycle).await
                } else {
                    WriteOutcome::NotLeader
                };
                if let Some(reply) = reply {
                    let _ = reply.send(outcome);
                }
            }
        });
        WriterHandle {
            tx,
            read_only: Arc::new(ro_tx),
        }
    }
}

/// Why a write did not go through. Matched by variant, never by message text.
#[derive(Debug, thiserror::Error)]
enum CallError {
    #[error("this replica does not hold the writer Lease")]
    NotLeader,
    /// The API server refused the request (not retried).
    #[error("{what}: {source}")]
    Rejected {
        what: String,
        #[source]
        source: KubeError,
    },
    /// Server errors, timeouts or transport errors on every attempt.
    #[error("{what}: {last} (after {tries} attempts)")]
    GaveUp {
        what: String,
        last: String,
        tries: u32,
    },
    #[error("{0} no longer exists")]
    Gone(WorkloadKey),
    /// An op kerf itself got wrong (a bug, reported rather than sent).
    #[error("{0}")]
    Invalid(String),
}

impl CallError {
    /// The object to create is there already (an Event's name is unique per nanosecond).
    fn already_exists(&self) -> bool {
        matches!(self, CallError::Rejected { source: KubeError::Api(s), .. } if s.is_already_exists())
    }
}

impl From<CallError> for WriteOutcome {
    fn from(e: CallError) -> Self {
        match e {
            CallError::NotLeader => WriteOutcome::NotLeader,
            e => WriteOutcome::Failed(e.to_string()),
        }
    }
}

fn count(metrics: &Metrics, target: &str, outcome: &str) {
    metrics
        .cluster_writes
        .get_or_create(&WriteLabels {
            target: target.into(),
            outcome: outcome.into(),
        })
        .inc();
}

fn retryable(e: &KubeError) -> bool {
    match e {
        KubeError::Api(s) => s.code >= 500 || s.code == 429,
        KubeError::SerdeError(_) | KubeError::BuildRequest(_) => false,
        _ => true,
    }
}

fn apply_params() -> PatchParams {
    PatchParams::apply(FIELD_MANAGER).force()
}

/// The request restoring the original requests on a built-in kind as `kerf-release`: a
/// strategic merge patch (an Update: the changed fields move to that manager, and an Update
/// never prunes). Custom kinds, which take no strategic merge patch, get a JSON Patch
/// ([`Task::release_by_json_patch`]).
fn release_request(body: &Value) -> (PatchParams, Patch<Value>) {
    let params = PatchParams {
        field_manager: Some(RELEASE_FIELD_MANAGER.into()),
        ..Default::default()
    };
    (params, Patch::Strategic(body.clone()))
}

struct Task {
    client: Client,
    cfg: WriterConfig,
    lease: watch::Receiver<bool>,
    read_only: watch::Receiver<bool>,
    /// The last body applied per workload: a removal kerf cannot make (another manager owns
    /// the annotation) is not re-sent every cycle.
    last_applied: HashMap<WorkloadKey, Value>,
}

/// The API resource of a workload kind.
pub fn workload_resource(kind: WorkloadKind) -> ApiResource {
    match kind {
        WorkloadKind::Deployment => ApiResource::erase::<Deployment>(&()),
        WorkloadKind::StatefulSet => ApiResource::erase::<StatefulSet>(&()),
        WorkloadKind::DaemonSet => ApiResource::erase::<DaemonSet>(&()),
        WorkloadKind::Job => ApiResource::erase::<Job>(&()),
        WorkloadKind::CronJob => ApiResource::erase::<CronJob>(&()),
        other => {
            let (group, version) = other.api_version().split_once('/').unwrap_or(("", "v1"));
            ApiResource::from_gvk_with_plural(
                &::kube::api::GroupVersionKind::gvk(group, version, other.kind_name()),
                other.plural(),
            )
        }
    }
}

fn policy_resource(kind: &str) -> Option<(ApiResource, bool)> {
    Some(match kind {
        "GpuReactivePolicy" => (ApiResource::erase::<GpuReactivePolicy>(&()), true),
        "ClusterGpuReactivePolicy" => (ApiResource::erase::<ClusterGpuReactivePolicy>(&()), false),
        "RightsizingPolicy" => (ApiResource::erase::<RightsizingPolicy>(&()), true),
        "ClusterRightsizingPolicy" => (ApiResource::erase::<ClusterRightsizingPolicy>(&()), false),
        _ => return None,
    })
}

impl Task {
    /// One request with timeout, retries and the write metric. The Lease is checked before
    /// every attempt.
    /// `target` labels the write metric; `None` for reads.
    async fn call<T, F, Fut>(
        &self,
        target: Option<&str>,
        what: &str,
        mut f: F,
    ) -> Result<T, CallError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, KubeError>>,
    {
        let mut delay = self.cfg.backoff;
        let tries = self.cfg.tries.max(1);
        for attempt in 1..=tries {
            if !holds_lease(&self.lease) {
                return Err(CallError::NotLeader);
            }
            let error = match tokio::time::timeout(self.cfg.timeout, f()).await {
                Ok(Ok(v)) => {
                    target.inspect(|t| count(&self.cfg.metrics, t, "ok"));
                    return Ok(v);
                }
                Ok(Err(e)) if !retryable(&e) => {
                    target.inspect(|t| count(&self.cfg.metrics, t, "error"));
                    return Err(CallError::Rejected {
                        what: what.to_string(),
                        source: e,
                    });
                }
                Ok(Err(e)) => e.to_string(),
                Err(_) => format!("timed out after {:?}", self.cfg.timeout),
            };
            if attempt == tries {
                target.inspect(|t| count(&self.cfg.metrics, t, "error"));
                return Err(CallError::GaveUp {
                    what: what.to_string(),
                    last: error,
                    tries,
                });
            }
            tracing::info!(namespace = %self.cfg.namespace, attempt, error = %error, "{what}: retrying");
            tokio::time::sleep(delay).await;
            delay = delay.saturating_mul(2);
        }
        unreachable!("the loop returns on its last attempt")
    }

    /// One write in a span naming what it is about and the cycle that planned it, so its log
    /// lines (retries, conflicts, refusals) say which workload and which cycle.
    async fn execute(&mut self, op: WriteOp, cycle: Option<u64>) -> WriteOutcome {
        use tracing::Instrument as _;
        let span = tracing::info_span!(
            "write",
            cycle = tracing::field::Empty,
            subject = %op.subject()
        );
        if let Some(id) = cycle {
            span.record("cycle", id);
        }
        let outcome = self.execute_op(op).instrument(span.clone()).await;
        span.in_scope(|| match &outcome {
            WriteOutcome::Failed(e) => tracing::warn!(error = %e, "cluster write failed"),
            other => tracing::debug!(outcome = ?other, "cluster write"),
        });
        outcome
    }

    async fn execute_op(&mut self, op: WriteOp) -> WriteOutcome {
        if let WriteOp::Warning(w) = &op {
            tracing::warn!(workload = %w.workload, "{}", w.message);
            return WriteOutcome::Unchanged;
        }
        let read_only = *self.read_only.borrow();
        let result = match op {
            WriteOp::Workload(w) if read_only => {
                tracing::debug!(workload = %w.observed.key, "readOnly: workload not written");
                return WriteOutcome::ReadOnly;
            }
            // readOnly: the parts are not sent; the recommendation is still written.
            WriteOp::Change(c) if read_only => self.recommendation(&c.done).await,
            WriteOp::Restart(_)
            | WriteOp::Coordinated(_)
            | WriteOp::Restore(_)
            | WriteOp::Resize(_)
            | WriteOp::Evict(_)
                if read_only =>
            {
                return WriteOutcome::ReadOnly;
            }
            WriteOp::Resize(r) => self.resize(&r).await,
            WriteOp::Evict(e) => self.evict(&e).await,
            WriteOp::Checkpoint(c) => self.checkpoint(&c).await,
            WriteOp::Workload(w) => self.write_workload(&w).await,
            WriteOp::Restart(key) => self.restart(&key).await.map(|()| 1),
            WriteOp::Coordinated(c) => self.coordinated(&c).await,
            WriteOp::PolicyStatus(s) => self.policy_status(&s).await,
            WriteOp::Recommendation(r) => self.recommendation(&r).await,
            WriteOp::Event(e) => self.event(&e).await.map(|()| 1),
            WriteOp::Restore(r) => self.restore(&r).await,
            WriteOp::Change(c) => self.change(&c).await,
            WriteOp::Warning(_) => Ok(0),
        };
        match result {
            Ok(0) => WriteOutcome::Unchanged,
            Ok(n) => WriteOutcome::Written { requests: n },
            Err(e) => e.into(),
        }
    }

    fn workload_api(&self, key: &WorkloadKey) -> Api<DynamicObject> {
        Api::namespaced_with(
            self.client.clone(),
            &key.namespace,
            &workload_resource(key.kind),
        )
    }

    /// Applies kerf's fields on a workload when they differ; restarts it when the GPU
    /// recommendation's values changed. Returns the number of requests made.
    async fn write_workload(&mut self, w: &WorkloadWrite) -> Result<usize, CallError> {
        self.write_workload_parts(w).await.map_err(|(_, e)| e)
    }

    /// [`Task::write_workload`], a failure naming its part: the restart, or the write before it.
    async fn write_workload_parts(
        &mut self,
        w: &WorkloadWrite,
    ) -> Result<usize, (ChangePart, CallError)> {
        let part = match w.requests.is_some() {
            true => ChangePart::Template,
            false => ChangePart::GpuAnnotations,
        };
        let tag = |e| (part, e);
        // A CPU/memory change goes where the template is (a workload-reference Rollout's
        // Deployment); GPU annotations and restarts stay on the workload.
        let target = match w.requests.is_some() {
            true => w.observed.template_write_key(),
            false => w.observed.key.clone(),
        };
        let key = &target;
        let observed_ann = &w.observed.annotations;
        let desired_ann = w.gpu.as_ref().map(GpuAnnotations::rendered);
        let mut annotation_values_differ = false;
        let mut annotation_removal = false;
        if let Some(d) = &desired_ann {
            for k in [ANNOTATION_GPU_BASELINE, ANNOTATION_GPU_RECOMMENDATION] {
                match (observed_ann.get(k), d.get(k)) {
                    (Some(a), Some(b)) if a != b => annotation_values_differ = true,
                    (None, Some(_)) => annotation_values_differ = true,
                    (Some(_), None) => annotation_removal = true,
                    _ => {}
                }
            }
        }
        let limits = w.limits.clone().unwrap_or_default();
        let requests_differ = w
            .requests
            .as_ref()
            .is_some_and(|r| !requests_match(&w.observed.template, r))
            || !limits_match(&w.observed.template, &limits);
        if !annotation_values_differ && !annotation_removal && !requests_differ {
            return Ok(0);
        }

        // Carry forward whatever kerf owns that this op leaves alone: an apply that left out a
        // field kerf owns would delete it.
        let api = self.workload_api(key);
        let live = self
            .call(None, &format!("read {key}"), || api.get_opt(&key.name))
            .await
            .map_err(tag)?;
        let mut made = 1;
        let Some(live) = live else {
            return Err(tag(CallError::Gone(key.clone())));
        };
        let set = w.requests.clone().unwrap_or_default();
        if w.method == WriteMethod::JsonPatch {
            let mut annotations: BTreeMap<String, Option<String>> = BTreeMap::new();
            if let Some(d) = &desired_ann {
                for k in [ANNOTATION_GPU_BASELINE, ANNOTATION_GPU_RECOMMENDATION] {
                    annotations.insert(k.to_string(), d.get(k).cloned());
                }
            }
            made += self
                .json_patch(
                    key,
                    &live,
                    FIELD_MANAGER,
                    &annotations,
                    (&set, &limits),
                    &BTreeMap::new(),
                )
                .await
                .map_err(tag)?;
        } else {
            made += self
                .apply_kerfs(
                    key,
                    &live,
                    desired_ann.as_ref(),
                    (&set, &limits),
                    annotation_values_differ || requests_differ,
                )
                .await
                .map_err(tag)?;
        }
        if w.gpu
            .as_ref()
            .is_some_and(|g| gpu_restart_due(&w.observed, g))
        {
            self.restart(&w.observed.key)
                .await
                .map_err(|e| (ChangePart::Restart, e))?;
            made += 1;
        }
        Ok(made)
    }

    /// kerf's server-side apply of its fields on `live` (annotations, requests): the number of
    /// requests made (none when only a removal kerf already applied is left).
    async fn apply_kerfs(
        &mut self,
        key: &WorkloadKey,
        live: &DynamicObject,
        desired_ann: Option<&BTreeMap<String, String>>,
        (set, limits): (&ContainerRequests, &ContainerRequests),
        values_differ: bool,
    ) -> Result<usize, CallError> {
        let api = self.workload_api(key);
        let body = self::applied_body(
            key,
            kerf_apply(key, live_of(live), desired_ann, set, limits, Released::NONE),
        );
        if !values_differ && self.last_applied.get(key) == Some(&body) {
            // Only a removal kerf already applied: another manager keeps the annotation.
            return Ok(0);
        }
        let params = apply_params();
        let patch = Patch::Apply(&body);
        self.call(Some("annotations"), &format!("apply {key}"), || {
            api.patch(&key.name, &params, &patch)
        })
        .await?;
        self.last_applied.insert(key.clone(), body);
        Ok(1)
    }

    /// A JSON Patch of `live` by `manager`, each container pinned by a `test` of its name
    /// (docs/gitops.md#how-kerf-writes): 1 request, or 0 when there is nothing to change.
    #[allow(clippy::too_many_arguments)]
    async fn json_patch(
        &self,
        key: &WorkloadKey,
        live: &DynamicObject,
        manager: &str,
        annotations: &BTreeMap<String, Option<String>>,
        (set, limits): (&ContainerRequests, &ContainerRequests),
        removed: &BTreeMap<String, RequestSet>,
    ) -> Result<usize, CallError> {
        let object = serde_json::to_value(live).unwrap_or_default();
        let (patch, missing) = json_patch(&object, key.kind, annotations, set, limits, removed);
        for c in &missing {
            tracing::warn!(workload = %key, container = %c, "template has no such container: requests not written");
        }
        let changes = patch
            .0
            .iter()
            .any(|op| !matches!(op, json_patch::PatchOperation::Test(_)));
        if !changes {
            return Ok(0);
        }
        let api = self.workload_api(key);
        let params = PatchParams {
            field_manager: Some(manager.into()),
            ..Default::default()
        };
        let patch = Patch::<()>::Json(patch);
        self.call(Some("template"), &format!("patch {key}"), || {
            api.patch(&key.name, &params, &patch)
        })
        .await?;
        Ok(1)
    }

    /// A workload's in-place resize: each pod's `resize` subresource patched in turn, paced by
    /// [`RESIZE_PACE`], then the Event. A refused pod does not stop the others.
    async fn resize(&self, r: &ResizeWrite) -> Result<usize, CallError> {
        let count = |outcome: &str| {
            self.cfg
                .metrics
                .resizes
                .get_or_create(&ResizeLabels {
                    outcome: outcome.into(),
                })
                .inc();
        };
        if let Some(reason) = r.fallback {
            count(match reason {
                "Infeasible" => "infeasible",
                "DeferredTooLong" | "InProgressTooLong" => "timed_out",
                _ => "fallback",
            });
        }
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..Default::default()
        };
        let mut made = 0;
        let mut first_error = None;
        for (i, pod) in r.pods.iter().enumerate() {
            if i > 0 {
                tokio::time::sleep(RESIZE_PACE).await;
            }
            let api: Api<Pod> = Api::namespaced(self.client.clone(), &pod.namespace);
            let patch = Patch::Strategic(&pod.body);
            let sent = self
                .call(
                    Some("resize"),
                    &format!("resize pod {}/{}", pod.namespace, pod.pod),
                    || api.patch_subresource("resize", &pod.pod, &params, &patch),
                )
                .await;
            match sent {
                Ok(_) => {
                    count("accepted");
                    made += 1;
                }
                Err(CallError::NotLeader) => return Err(CallError::NotLeader),
                Err(e) => {
                    count("refused");
                    tracing::warn!(pod = %pod.pod, error = %e, "in-place resize refused");
                    first_error.get_or_insert(e);
                }
            }
        }
        self.event(&r.event).await?;
        let Some(e) = first_error else {
            return Ok(made + 1);
        };
        // A pod deleted meanwhile (404) is no refusal: its replacement is admitted with the change.
        let gone =
            matches!(&e, CallError::Rejected { source: KubeError::Api(s), .. } if s.code == 404);
        if matches!(e, CallError::Rejected { .. }) && !gone {
            // Refused for good (not a timeout): the next cycle rolls the workload out.
            self.record_refused_resize(r, &e).await?;
        }
        Err(e)
    }

    /// The usage history's checkpoint: ConfigMaps `kerf-history-<index>` in kerf's namespace
    /// (server-side apply as `kerf`), then those of higher index removed.
    async fn checkpoint(&mut self, c: &CheckpointWrite) -> Result<usize, CallError> {
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), &self.cfg.namespace);
        let params = apply_params();
        for (i, part) in c.parts.iter().enumerate() {
            let name = format!("{HISTORY_CONFIGMAP_PREFIX}{i}");
            let body = json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": self.cfg.namespace,
                             "labels": {HISTORY_LABEL: HISTORY_LABEL_VALUE}},
                "binaryData": {HISTORY_KEY: base64::Engine::encode(&base64::engine::general_purpose::STANDARD, part)},
            });
            let patch = Patch::Apply(&body);
            self.call(None, &format!("checkpoint {name}"), || {
                api.patch(&name, &params, &patch)
            })
            .await?;
        }
        let lp = ::kube::api::ListParams::default()
            .labels(&format!("{HISTORY_LABEL}={HISTORY_LABEL_VALUE}"));
        let listed = self
            .call(None, "list checkpoints", || api.list_metadata(&lp))
            .await?;
        let mut removed = 0;
        for cm in listed.items {
            let name = cm.metadata.name.unwrap_or_default();
            let index = name
                .strip_prefix(HISTORY_CONFIGMAP_PREFIX)
                .and_then(|i| i.parse::<usize>().ok());
            if index.is_some_and(|i| i >= c.parts.len()) {
                let dp = ::kube::api::DeleteParams::default();
                self.call(None, &format!("remove {name}"), || api.delete(&name, &dp))
                    .await?;
                removed += 1;
            }
        }
        Ok(c.parts.len() + removed)
    }

    /// One eviction through the Eviction API (`pods/<name>/eviction`): a PodDisruptionBudget
    /// that forbids it now answers 429, which is counted and left for the next turn (never
    /// retried here, never forced). The Event follows an eviction that went through.
    async fn evict(&self, e: &EvictWrite) -> Result<usize, CallError> {
        let count = |outcome: &str| {
            self.cfg
                .metrics
                .evictions
                .get_or_create(&EvictionLabels {
                    outcome: outcome.into(),
                })
                .inc();
        };
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &e.pod.namespace);
        let params = ::kube::api::EvictParams {
            post_options: PostParams {
                field_manager: Some(FIELD_MANAGER.into()),
                ..Default::default()
            },
            ..Default::default()
        };
        let what = format!("evict pod {}/{}", e.pod.namespace, e.pod.pod);
        // One attempt: a refusal (429) is the disruption budget speaking, and the next turn
        // (the pace) is its retry.
        if !holds_lease(&self.lease) {
            return Err(CallError::NotLeader);
        }
        let sent = tokio::time::timeout(self.cfg.timeout, api.evict(&e.pod.pod, &params)).await;
        match sent {
            Ok(Ok(_)) => {
                count("evicted");
                self::count(&self.cfg.metrics, "eviction", "ok");
            }
            Ok(Err(KubeError::Api(s))) if budget_refusal(s.code, &s.message) => {
                count("disruption_budget");
                tracing::info!(pod = %e.pod.pod, code = s.code, "eviction refused by a PodDisruptionBudget ({}): next turn", s.message);
                return Ok(1);
            }
            Ok(Err(KubeError::Api(s))) if s.code == 404 => {
                count("gone");
                return Ok(1);
            }
            Ok(Err(source)) => {
                count("failed");
                self::count(&self.cfg.metrics, "eviction", "error");
                return Err(CallError::Rejected { what, source });
            }
            Err(_) => {
                count("failed");
                self::count(&self.cfg.metrics, "eviction", "error");
                return Err(CallError::GaveUp {
                    what,
                    last: format!("timed out after {:?}", self.cfg.timeout),
                    tries: 1,
                });
            }
        }
        self.event(&e.event).await?;
        Ok(2)
    }

    /// Records on the RightsizingRecommendation that the API server refused a resize: the next
    /// cycle plans the change as a rollout (the fallback is kept while the recommendation is
    /// the same), with its Event.
    async fn record_refused_resize(&self, r: &ResizeWrite, e: &CallError) -> Result<(), CallError> {
        let (namespace, name) = &r.recommendation;
        let mut status = r.status.clone();
        let resize = status.resize.get_or_insert_with(Default::default);
        resize.fallback = Some(crate::api::ResizeFallback {
            reason: "Refused".into(),
            message: format!("the API server refused the resize: {e}"),
            time: crate::core::model::rfc3339_secs(Timestamp::now()),
            requests: status
                .applied
                .as_ref()
                .map(|a| a.requests.clone())
                .unwrap_or_default(),
        });
        let body = json!({
            "apiVersion": "rightsizing.kubex.ai/v1alpha1",
            "kind": "RightsizingRecommendation",
            "status": status,
        });
        let api: Api<RightsizingRecommendation> = Api::namespaced(self.client.clone(), namespace);
        let params = apply_params();
        let patch = Patch::Apply(&body);
        self.call(
            Some("recommendation"),
            &format!("status of RightsizingRecommendation {namespace}/{name}"),
            || api.patch_status(name, &params, &patch),
        )
        .await?;
        count_fallback(&self.cfg.metrics);
        let event = EventWrite {
            warning: true,
            reason: "ResizeFallback".into(),
            action: "Rollout".into(),
            note: format!("Refused: {}; rolling out instead", e),
            details: std::collections::BTreeMap::from([("reason".into(), "Refused".into())]),
            ..r.event.clone()
        };
        self.event(&event).await
    }

    /// Rolling restart through the pod template annotation (a merge patch: see the module docs).
    async fn restart(&self, key: &WorkloadKey) -> Result<(), CallError> {
        let at = crate::core::model::rfc3339_secs(Timestamp::now());
        let body = crate::core::writes::restart_body(key.kind, &at);
        let api = self.workload_api(key);
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..Default::default()
        };
        let patch = Patch::Merge(&body);
        self.call(Some("template"), &format!("restart {key}"), || {
            api.patch(&key.name, &params, &patch)
        })
        .await?;
        tracing::info!(workload = %key, "rolling restart requested");
        Ok(())
    }

    async fn hpa(&self, h: &HpaTarget) -> Result<usize, CallError> {
        if h.in_place() {
            return Ok(0);
        }
        let body = json!({
            "apiVersion": "autoscaling/v2",
            "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": h.name, "namespace": h.namespace},
            "spec": {"metrics": utilization_metrics(&h.resource, h.average_utilization)},
        });
        let api: Api<HorizontalPodAutoscaler> = Api::namespaced(self.client.clone(), &h.namespace);
        let params = apply_params();
        let patch = Patch::Apply(&body);
        self.call(
            Some("hpa"),
            &format!("apply HPA {}/{}", h.namespace, h.name),
            || api.patch(&h.name, &params, &patch),
        )
        .await?;
        Ok(1)
    }

    /// Both halves of a coordinated change. The order keeps the transient state
    /// over-provisioned: a rising target (requests shrink) waits for the template; a falling
    /// target (requests grow) goes first.
    async fn coordinated(&mut self, c: &CoordinatedChange) -> Result<usize, CallError> {
        if c.hpa.goes_first() {
            let hpa = self.hpa(&c.hpa).await?;
            Ok(hpa + self.write_workload(&c.workload).await?)
        } else {
            let template = self.write_workload(&c.workload).await?;
            Ok(template + self.hpa(&c.hpa).await?)
        }
    }

    /// A change as one unit (docs/design/runtime.md#r17): its record says `pending` with the
    /// parts before any is sent; a part that fails stops the unit and the record names it with
    /// its error and when it is tried again; the record says `applied`, and the `Applied` Event
    /// is emitted, only once every part went through. Dropped as NotLeader, the `pending`
    /// record is what the next Lease holder goes on from.
    async fn change(&mut self, c: &ChangeWrite) -> Result<usize, CallError> {
        let mut made = self.recommendation(&c.intent).await?;
        let intent = c.intent.status.clone().unwrap_or_default();
        let written = Some(c.intent.as_written());
        let parts: Vec<ChangePart> = c.parts.iter().flat_map(pending::parts_of).collect();
        let mut sent = 0;
        for op in &c.parts {
            match self.change_part(op).await {
                Ok(n) => {
                    made += n;
                    sent += pending::parts_of(op).len();
                }
                Err((failed, e)) => {
                    if !matches!(e, CallError::NotLeader) {
                        let at = parts[sent..]
                            .iter()
                            .position(|p| *p == failed)
                            .map_or(sent, |i| sent + i);
                        let error = e.to_string();
                        let status =
                            pending::failed_status(&intent, &parts[at..], &error, c.planned_at);
                        let failure = RecommendationWrite {
                            status: Some(status),
                            observed: written,
                            ..c.intent.clone()
                        };
                        self.recommendation(&failure).await?;
                    }
                    return Err(e);
                }
            }
        }
        let done = RecommendationWrite {
            observed: written,
            ..c.done.clone()
        };
        made += self.recommendation(&done).await?;
        for e in &c.events {
            self.event(e).await?;
            made += 1;
        }
        Ok(made)
    }

    /// One part of a [`ChangeWrite`]; a failure names the part.
    async fn change_part(&mut self, op: &WriteOp) -> Result<usize, (ChangePart, CallError)> {
        let hpa_failed = |e| (ChangePart::Hpa, e);
        match op {
            WriteOp::Workload(w) => self.write_workload_parts(w).await,
            WriteOp::Restart(key) => self
                .restart(key)
                .await
                .map(|()| 1)
                .map_err(|e| (ChangePart::Restart, e)),
            WriteOp::Coordinated(c) if c.hpa.goes_first() => {
                let hpa = self.hpa(&c.hpa).await.map_err(hpa_failed)?;
                Ok(hpa + self.write_workload_parts(&c.workload).await?)
            }
            WriteOp::Coordinated(c) => {
                let template = self.write_workload_parts(&c.workload).await?;
                Ok(template + self.hpa(&c.hpa).await.map_err(hpa_failed)?)
            }
            other => Err((
                ChangePart::Template,
                CallError::Invalid(format!("not a part of a change: {}", other.subject())),
            )),
        }
    }

    /// A rollback or a release (see [`RestoreWrite`]). The order keeps the transient state
    /// over-provisioned, as for a coordinated change: a falling target (requests grow back) goes
    /// before the template.
    async fn restore(&mut self, r: &RestoreWrite) -> Result<usize, CallError> {
        let kept_hpa = r.keep.as_ref().and_then(|k| k.hpa.as_ref());
        let hpa_first = r.hpa.as_ref().is_some_and(HpaTarget::goes_first)
            || kept_hpa.is_some_and(HpaTarget::goes_first);
        let mut made = 0;
        if hpa_first {
            made += self.restore_hpa(r).await?;
        }
        made += match r.kind {
            RestoreKind::Release => self.release_workload(r).await?,
            // Both put the values from before kerf back as kerf's own.
            RestoreKind::Rollback | RestoreKind::HalfPair => self.rollback_workload(r).await?,
        };
        if !hpa_first {
            made += self.restore_hpa(r).await?;
        }
        if r.kind == RestoreKind::Rollback
            && r.observed.annotations.contains_key(ANNOTATION_ROLLBACK)
        {
            self.remove_rollback_annotation(&r.observed.key).await?;
            made += 1;
        }
        if let Some(rec) = &r.recommendation {
            made += self.recommendation(rec).await?;
        }
        self.event(&r.event).await?;
        tracing::info!(workload = %r.observed.key, "{}", r.event.note);
        Ok(made + 1)
    }

    /// The HPA half of a restore: the target given back (a release by `kerf-release`, a rollback
    /// as `kerf`), or the coordinated target kerf keeps applying.
    async fn restore_hpa(&mut self, r: &RestoreWrite) -> Result<usize, CallError> {
        let kept = r.keep.as_ref().and_then(|k| k.hpa.as_ref());
        Ok(match (&r.hpa, kept) {
            (Some(h), _) if r.kind == RestoreKind::Release => self.release_hpa(h).await?,
            (Some(h), _) => self.hpa(h).await?,
            (None, Some(h)) => self.hpa(h).await?,
            (None, None) => 0,
        })
    }

    /// Rollback: the original requests by server-side apply as `kerf` (kerf keeps owning them,
    /// with the user's values; a request kerf created goes), carrying forward everything else
    /// kerf owns on the workload.
    async fn rollback_workload(&mut self, r: &RestoreWrite) -> Result<usize, CallError> {
        let key = &r.observed.template_write_key();
        if requests_match(&r.observed.template, &r.requests)
            && !has_any(&r.observed.template, &r.removed)
        {
            return Ok(0);
        }
        let api = self.workload_api(key);
        let live = self
            .call(None, &format!("read {key}"), || api.get_opt(&key.name))
            .await?;
        let Some(live) = live else {
            return Err(CallError::Gone(key.clone()));
        };
        let limits = restored_limits(key, live_of(&live), &r.requests);
        if r.method == WriteMethod::JsonPatch {
            let none = BTreeMap::new();
            let values = (&r.requests, &limits);
            return Ok(1 + self
                .json_patch(key, &live, FIELD_MANAGER, &none, values, &r.removed)
                .await?);
        }
        let released = Released {
            restored: &ContainerRequests::new(),
            removed: &r.removed,
        };
        let body = applied_body(
            key,
            kerf_apply(key, live_of(&live), None, &r.requests, &limits, released),
        );
        let params = apply_params();
        let patch = Patch::Apply(&body);
        self.call(Some("template"), &format!("rollback {key}"), || {
            api.patch(&key.name, &params, &patch)
        })
        .await?;
        self.last_applied.insert(key.clone(), body);
        Ok(2)
    }

    /// Release: the original requests as a strategic merge patch by `kerf-release` (the changed
    /// fields move to it), then kerf's apply without them and without the requests kerf created,
    /// carrying what kerf keeps (`RestoreWrite::keep`). A restored field that only kerf owns (its
    /// value did not change, so the patch did not move it) stays in kerf's apply: leaving it out
    /// would make server-side apply delete the user's value.
    async fn release_workload(&mut self, r: &RestoreWrite) -> Result<usize, CallError> {
        let key = &r.observed.template_write_key();
        let empty = ContainerRequests::new();
        let set = r.keep.as_ref().map_or(&empty, |k| &k.requests);
        let set_limits = r.keep.as_ref().map_or(&empty, |k| &k.limits);
        let template = &r.observed.template;
        if r.requests.is_empty() && !has_any(template, &r.removed) && requests_match(template, set)
        {
            return Ok(0);
        }
        let api = self.workload_api(key);
        if r.method == WriteMethod::JsonPatch || !WorkloadKind::BUILT_IN.contains(&key.kind) {
            return self.release_by_json_patch(r, (set, set_limits)).await;
        }
        // The limits kerf scaled go back with their requests: read them where there are any.
        let limited = r.requests.keys().any(|c| {
            template_limits(template, c)
                .is_some_and(|l| l.cpu_millis.is_some() || l.memory_bytes.is_some())
        });
        let limits = match limited {
            true => {
                let live = self
                    .call(None, &format!("read {key}"), || api.get_opt(&key.name))
                    .await?
                    .ok_or_else(|| CallError::Gone(key.clone()))?;
                restored_limits(key, live_of(&live), &r.requests)
            }
            false => ContainerRequests::new(),
        };
        let restore = release_patch(key, &r.requests, &limits, template);
        let live = match &restore {
            Some(body) => {
                let (params, patch) = release_request(body);
                self.call(Some("template"), &format!("restore {key}"), || {
                    api.patch(&key.name, &params, &patch)
                })
                .await?
            }
            None => self
                .call(None, &format!("read {key}"), || api.get_opt(&key.name))
                .await?
                .ok_or_else(|| CallError::Gone(key.clone()))?,
        };
        let released = Released {
            restored: &r.requests,
            removed: &r.removed,
        };
        self.apply_after_release(key, &live, (set, set_limits), released)
            .await?;
        Ok(2)
    }

    /// kerf's apply after a release gave values back: what it keeps, without them.
    async fn apply_after_release(
        &mut self,
        key: &WorkloadKey,
        live: &DynamicObject,
        (keep, keep_limits): (&ContainerRequests, &ContainerRequests),
        released: Released<'_>,
    ) -> Result<(), CallError> {
        let apply = kerf_apply(key, live_of(live), None, keep, keep_limits, released);
        for field in &apply.still_kerfs {
            tracing::warn!(workload = %key, request = %field, "only kerf owns a restored request: kerf keeps owning it");
        }
        let body = applied_body(key, apply);
        let api = self.workload_api(key);
        let params = apply_params();
        let patch = Patch::Apply(&body);
        self.call(Some("template"), &format!("release {key}"), || {
            api.patch(&key.name, &params, &patch)
        })
        .await?;
        self.last_applied.insert(key.clone(), body);
        Ok(())
    }

    /// Release on a custom kind: the restored and removed requests as a JSON Patch by
    /// `kerf-release` (an Update, which never prunes: a second release keeps what the first gave
    /// back), then, where kerf applies, its apply without them; where kerf patches, what it
    /// keeps as its own JSON Patch.
    async fn release_by_json_patch(
        &mut self,
        r: &RestoreWrite,
        (keep, keep_limits): (&ContainerRequests, &ContainerRequests),
    ) -> Result<usize, CallError> {
        let key = &r.observed.template_write_key();
        let api = self.workload_api(key);
        let read = |api: Api<DynamicObject>| async move { api.get_opt(&key.name).await };
        let live = self
            .call(None, &format!("read {key}"), || read(api.clone()))
            .await?
            .ok_or_else(|| CallError::Gone(key.clone()))?;
        let none = BTreeMap::new();
        let limits = restored_limits(key, live_of(&live), &r.requests);
        let restored = (&r.requests, &limits);
        let mut made = 1 + self
            .json_patch(
                key,
                &live,
                RELEASE_FIELD_MANAGER,
                &none,
                restored,
                &r.removed,
            )
            .await?;
        if r.method == WriteMethod::JsonPatch {
            if !keep.is_empty() {
                let kept = (keep, keep_limits);
                made += self
                    .json_patch(key, &live, FIELD_MANAGER, &none, kept, &BTreeMap::new())
                    .await?;
            }
            return Ok(made);
        }
        let live = self
            .call(None, &format!("read {key}"), || read(api.clone()))
            .await?
            .ok_or_else(|| CallError::Gone(key.clone()))?;
        let released = Released {
            restored: &r.requests,
            removed: &r.removed,
        };
        self.apply_after_release(key, &live, (keep, keep_limits), released)
            .await?;
        Ok(made + 2)
    }

    /// Release of the HPA target: a merge patch by `kerf-release` (the metric list is atomic,
    /// so it is written whole), then kerf's apply without `spec.metrics` — unless kerf is still
    /// its only owner, in which case the apply keeps it (leaving it out would delete the
    /// metrics and the HPA would fall back to its default).
    async fn release_hpa(&self, h: &HpaTarget) -> Result<usize, CallError> {
        let api: Api<HorizontalPodAutoscaler> = Api::namespaced(self.client.clone(), &h.namespace);
        let what = format!("HPA {}/{}", h.namespace, h.name);
        let body =
            json!({"spec": {"metrics": utilization_metrics(&h.resource, h.average_utilization)}});
        let params = PatchParams {
            field_manager: Some(RELEASE_FIELD_MANAGER.into()),
            ..Default::default()
        };
        let patch = Patch::Merge(&body);
        let live = self
            .call(Some("hpa"), &format!("restore {what}"), || {
                api.patch(&h.name, &params, &patch)
            })
            .await?;
        let (kerf, others) = hpa_metrics_owners(&live);
        let mut body = json!({
            "apiVersion": "autoscaling/v2",
            "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": h.name, "namespace": h.namespace},
        });
        if kerf && !others {
            tracing::warn!(hpa = %what, "only kerf owns spec.metrics: kerf keeps owning it");
            body["spec"] =
                json!({"metrics": utilization_metrics(&h.resource, h.average_utilization)});
        }
        let params = apply_params();
        let patch = Patch::Apply(&body);
        self.call(Some("hpa"), &format!("release {what}"), || {
            api.patch(&h.name, &params, &patch)
        })
        .await?;
        Ok(2)
    }

    /// The user set the rollback annotation; kerf does not own it, so it is removed with a merge
    /// patch.
    async fn remove_rollback_annotation(&self, key: &WorkloadKey) -> Result<(), CallError> {
        let body = json!({"metadata": {"annotations": {ANNOTATION_ROLLBACK: null}}});
        let api = self.workload_api(key);
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..Default::default()
        };
        let patch = Patch::Merge(&body);
        self.call(
            Some("annotations"),
            &format!("remove the rollback annotation of {key}"),
            || api.patch(&key.name, &params, &patch),
        )
        .await?;
        Ok(())
    }

    async fn policy_status(&self, s: &PolicyStatusWrite) -> Result<usize, CallError> {
        let Some((ar, namespaced)) = policy_resource(&s.policy.kind) else {
            return Err(CallError::Invalid(format!(
                "{} is not a policy kind",
                s.policy.kind
            )));
        };
        let observed = s.observed.clone().unwrap_or_default();
        let generation = s.generation.or(observed.observed_generation);
        let status = PolicyStatus {
            conditions: merge_conditions(
                &observed.conditions,
                &s.conditions,
                generation,
                Timestamp::now(),
            ),
            observed_generation: generation,
            matched_workloads: s.matched_workloads.or(observed.matched_workloads),
        };
        if status == observed {
            return Ok(0);
        }
        let api: Api<DynamicObject> = match (&s.policy.namespace, namespaced) {
            (Some(ns), true) => Api::namespaced_with(self.client.clone(), ns, &ar),
            (None, false) => Api::all_with(self.client.clone(), &ar),
            _ => {
                return Err(CallError::Invalid(format!(
                    "{}: namespace does not match the kind's scope",
                    s.policy
                )));
            }
        };
        let body = json!({"apiVersion": ar.api_version, "kind": ar.kind, "status": status});
        let params = apply_params();
        let patch = Patch::Apply(&body);
        self.call(Some("status"), &format!("status of {}", s.policy), || {
            api.patch_status(&s.policy.name, &params, &patch)
        })
        .await?;
        Ok(1)
    }

    async fn recommendation(&self, r: &RecommendationWrite) -> Result<usize, CallError> {
        let api: Api<RightsizingRecommendation> =
            Api::namespaced(self.client.clone(), &r.namespace);
        let params = apply_params();
        let what = format!("RightsizingRecommendation {}/{}", r.namespace, r.name);
        let mut made = 0;
        let spec_same = r.observed.as_ref().is_some_and(|o| {
            o.spec == r.spec && r.owner.as_ref().is_none_or(|own| o.owned_by(&own.uid))
        });
        if !spec_same {
            let mut metadata = json!({"name": r.name, "namespace": r.namespace});
            if let Some(o) = &r.owner {
                metadata["ownerReferences"] = json!([o]);
            }
            let body = json!({
                "apiVersion": "rightsizing.kubex.ai/v1alpha1",
                "kind": "RightsizingRecommendation",
                "metadata": metadata,
                "spec": r.spec,
            });
            let patch = Patch::Apply(&body);
            self.call(Some("recommendation"), &what, || {
                api.patch(&r.name, &params, &patch)
            })
            .await?;
            made += 1;
        }
        if let Some(status) = &r.status {
            let status_same = r.observed.as_ref().and_then(|o| o.status.as_deref()) == Some(status);
            if !status_same {
                let body = json!({
                    "apiVersion": "rightsizing.kubex.ai/v1alpha1",
                    "kind": "RightsizingRecommendation",
                    "status": status,
                });
                let patch = Patch::Apply(&body);
                self.call(Some("recommendation"), &format!("status of {what}"), || {
                    api.patch_status(&r.name, &params, &patch)
                })
                .await?;
                made += 1;
                let before = r.observed.as_ref().and_then(|o| o.status.as_ref());
                for t in crate::core::writes::conflict::newly_recorded(
                    status.conflict.as_deref(),
                    before.and_then(|b| b.conflict.as_deref()),
                ) {
                    self.cfg
                        .metrics
                        .field_takebacks
                        .get_or_create(&crate::telemetry::ManagerLabel {
                            manager: t.manager.clone(),
                        })
                        .inc();
                }
            }
        }
        Ok(made)
    }

    async fn event(&self, e: &EventWrite) -> Result<(), CallError> {
        let now = Timestamp::now();
        let ar = workload_resource(e.regarding.kind);
        let mut note = e.note.clone();
        if note.len() > 1024 {
            let mut cut = 1021;
            while !note.is_char_boundary(cut) {
                cut -= 1;
            }
            note.truncate(cut);
            note.push_str("...");
        }
        let event = Event {
            metadata: ObjectMeta {
                name: Some(format!("{}.{:x}", e.regarding.name, now.as_nanosecond())),
                namespace: Some(e.regarding.namespace.to_string()),
                annotations: (!e.details.is_empty()).then(|| e.details.clone()),
                ..Default::default()
            },
            event_time: Some(MicroTime(
                k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now).0,
            )),
            type_: Some(if e.warning { "Warning" } else { "Normal" }.into()),
            reason: Some(e.reason.clone()),
            action: Some(e.action.clone()),
            note: Some(note),
            regarding: Some(ObjectReference {
                api_version: Some(ar.api_version.clone()),
                kind: Some(ar.kind.clone()),
                name: Some(e.regarding.name.to_string()),
                namespace: Some(e.regarding.namespace.to_string()),
                uid: e.uid.clone(),
                ..Default::default()
            }),
            reporting_controller: Some("kerf".into()),
            reporting_instance: Some(self.cfg.identity.chars().take(128).collect()),
            ..Default::default()
        };
        let api: Api<Event> = Api::namespaced(self.client.clone(), &e.regarding.namespace);
        let pp = PostParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..Default::default()
        };
        match self
            .call(
                Some("event"),
                &format!("{} event on {}", e.reason, e.regarding),
                || api.create(&pp, &event),
            )
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if e.already_exists() => Ok(()),
            Err(err) => Err(err),
        }
    }
}

/// The planning's view of a workload read from the API server.
/// Whether the Eviction API refused for a PodDisruptionBudget (kubernetes
/// `pkg/registry/core/pod/storage/eviction.go`): 429 when the budget allows no disruption now,
/// 500 when more than one budget covers the pod, 403 when a budget's `disruptionsAllowed` is
/// negative or its unconfirmed evictions are too many. Each is the budget speaking: paced like
/// a 429, not a failure retried every turn.
pub fn budget_refusal(code: u16, message: &str) -> bool {
    match code {
        429 => true,
        500 => message.contains("more than one PodDisruptionBudget"),
        403 => {
            message.contains("disruptions allowed is negative")
                || message.contains("DisruptedPods map too big")
        }
        _ => false,
    }
}

fn live_of(live: &DynamicObject) -> Live<'_> {
    Live {
        metadata: &live.metadata,
        data: &live.data,
    }
}

/// The body of kerf's apply, the containers it left out logged.
fn applied_body(key: &WorkloadKey, apply: KerfApply) -> Value {
    for c in &apply.not_in_template {
        tracing::warn!(workload = %key, container = %c, "template has no such container: requests not written");
    }
    apply.body
}

#[cfg(test)]
mod tests {
    #[test]
    fn budget_refusal() {
        assert!(super::budget_refusal(
            429,
            "Cannot evict pod as it would violate the pod's disruption budget."
        ));
        assert!(super::budget_refusal(
            500,
            "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
        ));
        assert!(super::budget_refusal(
            403,
            "poddisruptionbudgets.policy \"llm\" is forbidden: pdb disruptions allowed is negative"
        ));
        assert!(!super::budget_refusal(500, "etcdserver: request timed out"));
        assert!(!super::budget_refusal(
            403,
            "pods \"x\" is forbidden: User cannot create"
        ));
    }
}
