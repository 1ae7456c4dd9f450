//! Watch-fed in-memory indexes of everything evaluation reads, and the [`Snapshot`] built from
//! them.
//!
//! kerf's own kinds are watched as [`DynamicObject`] and decoded one object at a time: a typed
//! watch would fail the whole list on one malformed object and stall every policy. An object that
//! does not decode, or whose spec fails `validate()`, is logged and left out of the snapshot; the
//! policy kinds among them are reported as [`InvalidPolicy`] so the writer can set `Ready=False`.
//! Kubernetes kinds are watched typed and projected as they arrive to what evaluation reads
//! (`core::pod` for pods and workload templates; owner names for ReplicaSets and CronJob Jobs), so
//! the caches never hold whole objects.
//!
//! A list or watch that fails is retried with a growing backoff ([`relist`]); each failure is counted
//! (`kerf_watch_errors_total`), logged at `warn` with the resource and the API server's message
//! (once a minute per resource while it repeats), and kept as the resource's last error for
//! `/readyz` until the resource works again (`docs/design/runtime.md#r14`). A watch task that
//! ends or panics is reported by [`Reader::stopped`].

pub mod list;
pub mod relist;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use ::kube::api::{Api, ApiResource, DynamicObject, ObjectMeta, PartialObjectMeta};
use ::kube::runtime::{WatchStreamExt, watcher};
use ::kube::{Client, Resource, ResourceExt};
use futures::{FutureExt, Stream, StreamExt};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use relist::{not_served, refused_with};
use serde::de::DeserializeOwned;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::api::WorkloadKind;
use crate::api::listed_kinds::ListedKind;
use crate::api::{
    AutomationStrategy, ClusterAutomationStrategy, ClusterGpuReactivePolicy,
    ClusterRightsizingPolicy, GLOBAL_CONFIGURATION_NAME, GlobalConfiguration,
    GlobalConfigurationSpec, GpuReactivePolicy, POLICY_EVALUATION_NAME, PolicyEvaluation,
    PolicyEvaluationSpec, PolicyStatus, PolicyType, RightsizingPolicy, RightsizingRecommendation,
};
use crate::core::model::{Name, PolicyId};
use crate::core::owner;
use crate::core::persisted::PersistedRecommendation;
use crate::core::snapshot::{Policy, ResizeSupport, Snapshot, StrategyKey, Workload};
use crate::core::vpa::Vpa;
use crate::health::{Health, LogLimit, error_chain, panic_message};
use crate::state::{ObjectName, Store};
use crate::support::redact::redact;
use crate::telemetry::{Metrics, WatchErrorLabels};

const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// A kerf kind as the reader decodes it.
pub trait KerfKind:
    Resource<DynamicType = ()> + DeserializeOwned + Clone + Debug + Send + Sync + 'static
{
    /// Set for the four policy kinds (their problems are reported in their status).
    const POLICY: Option<PolicyType>;
    /// The kind's name, as listed in [`crate::api::KERF_KINDS`].
    const KIND: &'static str;
    /// The same checks as the CRD, with field-named messages.
    fn check(&self) -> Result<(), String>;
}

macro_rules! kerf_kind {
    ($t:ty, $policy:expr) => {
        impl KerfKind for $t {
            const POLICY: Option<PolicyType> = $policy;
            const KIND: &'static str = stringify!($t);
            fn check(&self) -> Result<(), String> {
                self.spec.validate().map_err(|e| e.to_string())
            }
        }
    };
}

kerf_kind!(GpuReactivePolicy, Some(PolicyType::GpuReactivePolicy));
kerf_kind!(
    ClusterGpuReactivePolicy,
    Some(PolicyType::ClusterGpuReactivePolicy)
);
kerf_kind!(RightsizingPolicy, Some(PolicyType::RightsizingPolicy));
kerf_kind!(
    ClusterRightsizingPolicy,
    Some(PolicyType::ClusterRightsizingPolicy)
);
kerf_kind!(GlobalConfiguration, None);
kerf_kind!(PolicyEvaluation, None);
kerf_kind!(AutomationStrategy, None);
kerf_kind!(ClusterAutomationStrategy, None);

impl KerfKind for RightsizingRecommendation {
    const POLICY: Option<PolicyType> = None;
    const KIND: &'static str = "RightsizingRecommendation";
    fn check(&self) -> Result<(), String> {
        Ok(())
    }
}

/// An object the reader could not use, with why.
#[derive(Clone, Debug, PartialEq)]
pub struct Rejected {
    pub kind: String,
    pub namespace: Option<String>,
    pub name: String,
    pub generation: Option<i64>,
    pub error: String,
    /// The object as received (only kept for rejected objects).
    pub raw: serde_json::Value,
}

/// The result of decoding one watched object.
#[derive(Clone, Debug)]
pub enum Decoded<K> {
    Valid(Arc<K>),
    Invalid(Rejected),
}

/// Decodes one object into its typed kind and validates it. Never fails: problems come back as
/// [`Decoded::Invalid`] naming the object and the reason.
pub fn decode<K: KerfKind>(obj: DynamicObject) -> Decoded<K> {
    let kind = K::kind(&()).to_string();
    let namespace = obj.metadata.namespace.clone();
    let name = obj.metadata.name.clone().unwrap_or_default();
    let generation = obj.metadata.generation;
    let raw = serde_json::to_value(&obj).unwrap_or(serde_json::Value::Null);
    let error = match serde_json::from_value::<K>(raw.clone()) {
        Ok(k) => match k.check() {
            Ok(()) => return Decoded::Valid(Arc::new(k)),
            Err(e) => format!("invalid spec: {e}"),
        },
        Err(e) => format!("cannot decode: {e}"),
    };
    tracing::warn!(
        kind = %kind,
        namespace = namespace.as_deref().unwrap_or(""),
        name = %name,
        error = %error,
        "skipping invalid object"
    );
    Decoded::Invalid(Rejected {
        kind,
        namespace,
        name,
        generation,
        error,
        raw,
    })
}

type ObjKey = (Option<String>, String);

/// The decoded objects of one kerf kind, maintained from watcher events.
type KerfIndex<K> = Projected<Decoded<K>>;

impl<K> KerfIndex<K> {
    fn valid(&self) -> Vec<Arc<K>> {
        let st = self.state.read().unwrap_or_else(|e| e.into_inner());
        st.live
            .values()
            .filter_map(|d| match d {
                Decoded::Valid(k) => Some(k.clone()),
                Decoded::Invalid(_) => None,
            })
            .collect()
    }

    fn rejected(&self) -> Vec<Rejected> {
        let st = self.state.read().unwrap_or_else(|e| e.into_inner());
        st.live
            .values()
            .filter_map(|d| match d {
                Decoded::Invalid(r) => Some(r.clone()),
                Decoded::Valid(_) => None,
            })
            .collect()
    }
}

pub use crate::core::snapshot::InvalidPolicy;

/// A policy the API server holds but kerf rejected, as its status reports it.
fn invalid_policy(r: Rejected, policy_type: PolicyType) -> InvalidPolicy {
    let status = r
        .raw
        .get("status")
        .and_then(|s| serde_json::from_value::<PolicyStatus>(s.clone()).ok());
    InvalidPolicy {
        id: PolicyId {
            kind: policy_type.as_str().into(),
            namespace: r.namespace.map(Into::into),
            name: r.name.into(),
        },
        policy_type,
        generation: r.generation,
        error: r.error,
        status,
    }
}

struct Indexes {
    gpu: KerfIndex<GpuReactivePolicy>,
    cluster_gpu: KerfIndex<ClusterGpuReactivePolicy>,
    global: KerfIndex<GlobalConfiguration>,
    evaluation: KerfIndex<PolicyEvaluation>,
    strategies: KerfIndex<AutomationStrategy>,
    cluster_strategies: KerfIndex<ClusterAutomationStrategy>,
    rightsizing: KerfIndex<RightsizingPolicy>,
    cluster_rightsizing: KerfIndex<ClusterRightsizingPolicy>,
    recommendations: KerfIndex<PersistedRecommendation>,
}

struct Inner {
    kerf: Arc<Indexes>,
    deployments: Arc<Projected<Arc<Workload>>>,
    statefulsets: Arc<Projected<Arc<Workload>>>,
    daemonsets: Arc<Projected<Arc<Workload>>>,
    jobs: Arc<Projected<ListedJob>>,
    cronjobs: Arc<Projected<Arc<Workload>>>,
    /// ReplicaSet → the Deployment (or another controller, an Argo Rollout) that controls it.
    replicasets: Arc<Projected<Option<ReplicaSetOwner>>>,
    pods: Arc<Projected<Arc<crate::core::pod::Pod>>>,
    hpas: Arc<Projected<HorizontalPodAutoscaler>>,
    vpas: Arc<Projected<Option<Vpa>>>,
    /// The CRDs of the custom kinds kerf writes (their schema decides how it writes them).
    crds: Arc<Projected<Option<Arc<serde_json::Value>>>>,
    /// The namespaces' LimitRanges, their Container bounds.
    limit_ranges: Arc<Projected<Option<crate::core::limits::ContainerLimitRange>>>,
    /// The namespaces' ResourceQuotas.
    quotas: Arc<Projected<Option<crate::core::limits::QuotaView>>>,
    /// The controllers GPU inference runs under and the objects their chains pass through.
    owners: Vec<Arc<Projected<OwnerObject>>>,
    /// The kinds GlobalConfiguration `workloadKinds` lists, watched as it lists them.
    listed: std::sync::Mutex<Vec<ListedWatch>>,
    client: Client,
    sync: SyncTracker,
    /// Whether the API server serves `pods/resize`, from its discovery.
    resize: watch::Receiver<ResizeSupport>,
    unsynced: watch::Receiver<BTreeSet<&'static str>>,
    /// Set when a watch task ended or panicked.
    stopped: watch::Receiver<Option<String>>,
    health: Arc<Health>,
    tasks: Vec<JoinHandle<()>>,
}

/// A Job run by a CronJob is part of that CronJob, not a workload of its own.
#[derive(Clone, Debug)]
enum ListedJob {
    OfCronJob(String),
    Workload(Arc<Workload>),
}

/// A snapshot's map keyed by (namespace, name).
type ByName<V> = BTreeMap<(Name, Name), V>;

/// A ReplicaSet's controller: a Deployment (the webhook store's map too), or another kind's
/// object (an Argo Rollout), a link of the owner chains.
#[derive(Clone, Debug)]
enum ReplicaSetOwner {
    Deployment(String),
    Other(owner::Link),
}

fn replicaset_owner(meta: &ObjectMeta) -> Option<ReplicaSetOwner> {
    if let Some(d) = owner::deployment_of(meta) {
        return Some(ReplicaSetOwner::Deployment(d.to_string()));
    }
    let c = meta
        .owner_references
        .as_deref()
        .and_then(owner::controller)?;
    Some(ReplicaSetOwner::Other(owner::Link::new(
        &c.api_version,
        &c.kind,
        &c.name,
    )))
}

/// An object of [`owner_resources`] as the index keeps it.
#[derive(Clone, Debug)]
enum OwnerObject {
    /// A topmost owner: its metadata (a Rollout's template and replicas too).
    Workload(Arc<Workload>),
    /// An object a chain passes through: its kind and controller reference.
    Link {
        kind: &'static str,
        controller: owner::Link,
    },
    /// Neither (an object without a controller reference, or one that cannot be read).
    Nothing,
}

/// A resource of the controllers GPU inference runs under (docs/workloads.md), or of an object
/// their owner chains pass through. Each is optional: where its CRD is not installed there are
/// none of its objects.
#[derive(Clone, Copy, Debug)]
pub(crate) struct OwnerResource {
    /// How kerf names the kind (readiness, logs; a Knative Service is `KnativeService`).
    pub label: &'static str,
    pub api_version: &'static str,
    pub kind: &'static str,
    pub plural: &'static str,
    /// The workload kind of its objects; `None` for an object chains pass through.
    pub workload: Option<WorkloadKind>,
}

impl OwnerResource {
    pub fn api_resource(&self) -> ApiResource {
        let (group, version) = self
            .api_version
            .split_once('/')
            .unwrap_or(("", self.api_version));
        ApiResource::from_gvk_with_plural(
            &::kube::api::GroupVersionKind::gvk(group, version, self.kind),
            self.plural,
        )
    }
}

/// The extra workload kinds and the objects an owner chain passes through
/// ([`owner::passes_through`]) that are not built-in kinds.
pub(crate) fn owner_resources() -> Vec<OwnerResource> {
    let mut out: Vec<OwnerResource> = WorkloadKind::ALL
        .into_iter()
        .filter(|k| !WorkloadKind::BUILT_IN.contains(k))
        .map(|k| OwnerResource {
            label: k.as_str(),
            api_version: k.api_version(),
            kind: k.kind_name(),
            plural: k.plural(),
            workload: Some(k),
        })
        .collect();
    let through = |api_version, kind, plural| OwnerResource {
        label: kind,
        api_version,
        kind,
        plural,
        workload: None,
    };
    out.push(through(
        "serving.knative.dev/v1",
        "Configuration",
        "configurations",
    ));
    out.push(through("serving.knative.dev/v1", "Revision", "revisions"));
    out.push(through("grove.io/v1alpha1", "PodClique", "podcliques"));
    out.push(through(
        "grove.io/v1alpha1",
        "PodCliqueScalingGroup",
        "podcliquescalinggroups",
    ));
    out
}

/// An object of `resource` from its metadata and `spec` (read only for a Rollout).
fn owner_object(
    resource: &OwnerResource,
    mut meta: ObjectMeta,
    object: Option<&serde_json::Value>,
) -> OwnerObject {
    match resource.workload {
        Some(kind) => {
            strip_last_applied(&mut meta);
            let (namespace, name) = (meta.namespace.clone(), meta.name.clone());
            match Workload::of_controller(meta, kind, object) {
                Ok(w) => OwnerObject::Workload(Arc::new(w)),
                Err(e) => {
                    tracing::warn!(
                        namespace = namespace.as_deref().unwrap_or(""),
                        name = name.as_deref().unwrap_or(""),
                        "{} left out: {e}",
                        resource.label
                    );
                    OwnerObject::Nothing
                }
            }
        }
        None => match meta.owner_references.as_deref().and_then(owner::controller) {
            Some(c) => OwnerObject::Link {
                kind: resource.kind,
                controller: owner::Link::new(&c.api_version, &c.kind, &c.name),
            },
            None => OwnerObject::Nothing,
        },
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
        for w in self
            .listed
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            w.task.abort();
        }
    }
}

/// The watch-fed reader. Cheap to clone; the watches stop when the last clone is dropped.
#[derive(Clone)]
pub struct Reader {
    inner: Arc<Inner>,
    /// kerf's own namespace, protected in every snapshot (docs/design/runtime.md#r12).
    own_namespace: Option<Arc<str>>,
}

/// Shared by the watch tasks: which kinds have completed their initial listing (mirrored in
/// [`Health`] for `/readyz`), and which task stopped first.
#[derive(Clone)]
struct SyncTracker {
    tx: Arc<watch::Sender<BTreeSet<&'static str>>>,
    stopped: Arc<watch::Sender<Option<String>>>,
    health: Arc<Health>,
    metrics: Arc<Metrics>,
    total: usize,
}

impl SyncTracker {
    fn done(&self, kind: &'static str) {
        self.tx.send_if_modified(|s| {
            if !s.remove(kind) {
                return false;
            }
            tracing::debug!(kind, "initial list complete");
            self.health.caches_pending(s, self.total);
            true
        });
    }

    fn stop(&self, kind: &'static str, why: String) {
        self.stopped.send_if_modified(|s| {
            if s.is_some() {
                return false;
            }
            *s = Some(format!("the {kind} watch stopped: {why}"));
            true
        });
    }

    /// Spawns one watch task; its end (the stream ended, or it panicked) is reported.
    fn spawn(
        &self,
        kind: &'static str,
        run: impl Future<Output = ()> + Send + 'static,
    ) -> JoinHandle<()> {
        let sync = self.clone();
        tokio::spawn(async move {
            let why = match AssertUnwindSafe(run).catch_unwind().await {
                Ok(()) => "its stream ended".to_string(),
                Err(p) => format!("panicked: {}", panic_message(&*p)),
            };
            tracing::error!(kind, "watch task stopped: {why}");
            sync.stop(kind, why);
        })
    }

    fn errors(&self, kind: &'static str, resource: String, crd: bool) -> WatchErrors {
        WatchErrors {
            kind,
            resource,
            crd,
            health: self.health.clone(),
            metrics: self.metrics.clone(),
            limit: LogLimit::new(WATCH_ERROR_LOG_EVERY),
            failing: false,
        }
    }
}

/// A repeated list/watch error of one resource is logged at most this often.
const WATCH_ERROR_LOG_EVERY: Duration = Duration::from_secs(60);

/// Why a list or watch failed, said for an operator.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchProblem {
    /// The `reason` label of `kerf_watch_errors_total`: `forbidden`, `unauthorized`,
    /// `crd_missing`, `not_found`, `expired` (a routine relist), `connection`, `api_error`,
    /// `other`.
    pub reason: &'static str,
    /// What failed, the API server's message, and the fix when kerf knows it.
    pub message: String,
}

/// Describes a list or watch error on `resource` (`pods`, `gpureactivepolicies.rightsizing.kubex.ai`;
/// `crd`: one of kerf's own kinds, whose absence means the CRDs are not installed).
pub fn describe_watch_error(resource: &str, crd: bool, e: &watcher::Error) -> WatchProblem {
    let (what, err) = match e {
        watcher::Error::InitialListFailed(e) => ("list failed", e),
        watcher::Error::WatchStartFailed(e) | watcher::Error::WatchFailed(e) => ("watch failed", e),
        watcher::Error::WatchError(status) => {
            return from_status("watch failed", status, resource, crd);
        }
        watcher::Error::NoResourceVersion => {
            return WatchProblem {
                reason: "other",
                message: "list failed: the list had no metadata.resourceVersion (does the resource support watch?)".into(),
            };
        }
    };
    match err {
        ::kube::Error::Api(status) => from_status(what, status, resource, crd),
        ::kube::Error::HyperError(_) | ::kube::Error::Service(_) => WatchProblem {
            reason: "connection",
            message: format!("{what}: cannot reach the API server: {}", error_chain(err)),
        },
        other => WatchProblem {
            reason: "other",
            message: format!("{what}: {}", error_chain(other)),
        },
    }
}

fn from_status(what: &str, s: &::kube::core::Status, resource: &str, crd: bool) -> WatchProblem {
    // A reason is one CamelCase word (`Forbidden`); kube puts a sentence there when the body was
    // not a Status (`404 page not found` from a path no API serves).
    let head = if s.reason.is_empty() || s.reason.contains(' ') {
        format!("HTTP {}", s.code)
    } else {
        format!("{} {}", s.code, s.reason)
    };
    let base = match s.message.trim() {
        "" => format!("{what}: {head}"),
        m => format!("{what}: {head}: {m}"),
    };
    let (reason, message) = match s.code {
        401 => (
            "unauthorized",
            format!(
                "{base} (the API server rejected kerf's credentials: check the service account token or the kubeconfig)"
            ),
        ),
        403 => (
            "forbidden",
            format!(
                "{base} (kerf's ClusterRole must allow get, list and watch on {resource}: manifests/install/rbac.yaml)"
            ),
        ),
        404 if crd => (
            "crd_missing",
            format!(
                "{base} (the CustomResourceDefinition {resource} is not installed: kubectl apply -f manifests/crds/)"
            ),
        ),
        404 => ("not_found", base),
        410 => ("expired", base),
        _ => ("api_error", base),
    };
    WatchProblem { reason, message }
}

/// What one watch task does with its stream's errors: count every one, log it at `warn`
/// (rate-limited), keep it as the resource's last error until an event arrives again.
struct WatchErrors {
    kind: &'static str,
    resource: String,
    crd: bool,
    health: Arc<Health>,
    metrics: Arc<Metrics>,
    limit: LogLimit,
    failing: bool,
}

impl WatchErrors {
    /// An event arrived. `Init` only announces a (re)list, which may fail again: anything else
    /// means the list or the watch works.
    fn ok<K>(&mut self, ev: &watcher::Event<K>) {
        if self.failing && !matches!(ev, watcher::Event::Init) {
            self.failing = false;
            self.limit.reset();
            self.health.clear_error(self.kind);
            tracing::info!(resource = %self.kind, "{}: list/watch works again", self.kind);
        }
    }

    /// Counts a failure in `kerf_watch_errors_total`.
    fn count(&self, reason: &'static str) {
        self.metrics
            .watch_errors
            .get_or_create(&WatchErrorLabels {
                resource: self.kind.into(),
                reason: reason.into(),
            })
            .inc();
    }

    fn error(&mut self, e: &watcher::Error) {
        let p = describe_watch_error(&self.resource, self.crd, e);
        self.count(p.reason);
        if p.reason == "expired" {
            tracing::debug!(resource = %self.kind, "{} (relisting)", p.message);
            return;
        }
        self.failing = true;
        self.health.record_error(self.kind, &p.message);
        if let Some(left_out) = self.limit.admit(&p.message, Instant::now()) {
            let message = redact(&p.message);
            if left_out == 0 {
                tracing::warn!(
                    resource = %self.kind,
                    reason = %p.reason,
                    "{}: {message}; retrying",
                    self.kind
                );
            } else {
                tracing::warn!(
                    resource = %self.kind,
                    reason = %p.reason,
                    suppressed = left_out,
                    "{}: {message}; retrying",
                    self.kind
                );
            }
        }
    }
}

fn strip_meta(meta: &mut ObjectMeta) {
    meta.managed_fields = None;
    strip_last_applied(meta);
}

/// A workload keeps its `managedFields` until [`Workload::from`] has projected the fields kerf
/// tracks for conflicts (docs/gitops.md); the rest goes with the object.
fn strip_last_applied(meta: &mut ObjectMeta) {
    if let Some(a) = meta.annotations.as_mut() {
        a.remove(LAST_APPLIED);
    }
}

fn spawn_kerf<K: KerfKind>(
    client: &Client,
    get: fn(&Indexes) -> &KerfIndex<K>,
    indexes: &Arc<Indexes>,
    sync: &SyncTracker,
) -> JoinHandle<()> {
    spawn_kerf_as(client, get, std::convert::identity, indexes, sync)
}

/// A kerf RightsizingRecommendation as kept: its [`PersistedRecommendation`] projection.
fn persisted(d: Decoded<RightsizingRecommendation>) -> Decoded<PersistedRecommendation> {
    match d {
        Decoded::Valid(rec) => {
            let (namespace, name) = (rec.metadata.namespace.clone(), rec.name_any());
            match PersistedRecommendation::of(Arc::unwrap_or_clone(rec)) {
                Some(p) => Decoded::Valid(Arc::new(p)),
                None => Decoded::Invalid(Rejected {
                    kind: RightsizingRecommendation::KIND.into(),
                    namespace,
                    name,
                    generation: None,
                    error: "a RightsizingRecommendation needs a namespace and a name".into(),
                    raw: serde_json::Value::Null,
                }),
            }
        }
        Decoded::Invalid(r) => Decoded::Invalid(r),
    }
}

/// Watches one kerf kind, keeping each object as `project` turns its decoded form.
fn spawn_kerf_as<K: KerfKind, T: Clone + Send + Sync + 'static>(
    client: &Client,
    get: fn(&Indexes) -> &KerfIndex<T>,
    project: fn(Decoded<K>) -> Decoded<T>,
    indexes: &Arc<Indexes>,
    sync: &SyncTracker,
) -> JoinHandle<()> {
    let index = K::KIND;
    let (indexes, tracker) = (indexes.clone(), sync.clone());
    let ar = ApiResource::erase::<K>(&());
    let mut errors = sync.errors(index, format!("{}.{}", ar.plural, ar.group), true);
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
    let stream = relist::watch(api, watcher::Config::default())
        .modify(|o: &mut DynamicObject| strip_meta(&mut o.metadata));
    sync.spawn(index, async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            match event {
                Ok(ev) => {
                    errors.ok(&ev);
                    let done = matches!(ev, watcher::Event::InitDone);
                    get(&indexes).apply(ev, |o| project(decode::<K>(o)));
                    if done {
                        tracker.done(index);
                    }
                }
                Err(e) => errors.error(&e),
            }
        }
    })
}

/// One Kubernetes kind as kerf keeps it: each object is projected to what evaluation reads as it
/// arrives, so the cache never holds whole objects (a full `Pod` or `Deployment` is kilobytes of
/// fields kerf never reads, and pods are the bulk of a cluster).
struct Projected<T> {
    state: RwLock<ProjectedState<T>>,
}

struct ProjectedState<T> {
    live: BTreeMap<ObjKey, T>,
    /// Keys seen by the relist in progress, if any.
    relisted: Option<BTreeSet<ObjKey>>,
}

impl<T: Clone> Projected<T> {
    fn new() -> Self {
        Self {
            state: RwLock::new(ProjectedState {
                live: BTreeMap::new(),
                relisted: None,
            }),
        }
    }

    /// Applies one event. A relist replaces objects one by one as they arrive and, once it has
    /// completed, drops those it did not list (deleted meanwhile). It never holds a second copy
    /// of the kind: at 33,000 pods that copy would double the cache during every relist.
    fn apply<K: Resource>(&self, event: watcher::Event<K>, project: impl Fn(K) -> T) {
        let key = |o: &K| (o.meta().namespace.clone(), o.name_any());
        let mut st = self.state.write().unwrap_or_else(|e| e.into_inner());
        match event {
            watcher::Event::Apply(o) => {
                let k = key(&o);
                st.live.insert(k, project(o));
            }
            watcher::Event::Delete(o) => {
                st.live.remove(&key(&o));
            }
            watcher::Event::Init => st.relisted = Some(BTreeSet::new()),
            watcher::Event::InitApply(o) => {
                let k = key(&o);
                st.relisted.get_or_insert_default().insert(k.clone());
                st.live.insert(k, project(o));
            }
            watcher::Event::InitDone => {
                let listed = st.relisted.take().unwrap_or_default();
                st.live.retain(|k, _| listed.contains(k));
            }
        }
    }

    /// Drops every object (the resource is no longer served).
    fn clear(&self) {
        let mut st = self.state.write().unwrap_or_else(|e| e.into_inner());
        st.live.clear();
        st.relisted = None;
    }

    /// Every object, ordered by (namespace, name).
    fn entries(&self) -> Vec<(ObjKey, T)> {
        let st = self.state.read().unwrap_or_else(|e| e.into_inner());
        st.live
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    fn values(&self) -> Vec<T> {
        let st = self.state.read().unwrap_or_else(|e| e.into_inner());
        st.live.values().cloned().collect()
    }
}

type Hook<K> = Box<dyn FnMut(&watcher::Event<K>) + Send>;

/// The kinds whose initial listing is still under way.
type Unsynced = watch::Receiver<BTreeSet<&'static str>>;

/// The tracker of the watches' initial listings, with what readiness and the reader wait on.
fn sync_tracker(
    store: Option<&Arc<Store>>,
) -> (SyncTracker, Unsynced, watch::Receiver<Option<String>>) {
    let all: BTreeSet<&'static str> = crate::api::KERF_KINDS
        .iter()
        .chain(BUILTIN_KINDS.iter())
        .chain([&VPA_KIND])
        .copied()
        .chain(owner_resources().into_iter().map(|r| r.label))
        .collect();
    let health = store.map(|s| s.health().clone()).unwrap_or_default();
    let metrics = store.map(|s| s.metrics().clone()).unwrap_or_default();
    health.caches_pending(&all, all.len());
    let total = all.len();
    let (tx, unsynced) = watch::channel(all);
    let (stop_tx, stopped) = watch::channel(None);
    let sync = SyncTracker {
        tx: Arc::new(tx),
        stopped: Arc::new(stop_tx),
        health: health.clone(),
        metrics,
        total,
    };
    (sync, unsynced, stopped)
}

/// The watches of kerf's own kinds.
fn spawn_kerf_watches(client: &Client, sync: &SyncTracker) -> (Arc<Indexes>, Vec<JoinHandle<()>>) {
    let kerf = Arc::new(Indexes {
        gpu: KerfIndex::new(),
        cluster_gpu: KerfIndex::new(),
        global: KerfIndex::new(),
        evaluation: KerfIndex::new(),
        strategies: KerfIndex::new(),
        cluster_strategies: KerfIndex::new(),
        rightsizing: KerfIndex::new(),
        cluster_rightsizing: KerfIndex::new(),
        recommendations: KerfIndex::new(),
    });
    let tasks = vec![
        spawn_kerf(client, |i| &i.gpu, &kerf, sync),
        spawn_kerf(client, |i| &i.cluster_gpu, &kerf, sync),
        spawn_kerf(client, |i| &i.global, &kerf, sync),
        spawn_kerf(client, |i| &i.evaluation, &kerf, sync),
        spawn_kerf(client, |i| &i.strategies, &kerf, sync),
        spawn_kerf(client, |i| &i.cluster_strategies, &kerf, sync),
        spawn_kerf(client, |i| &i.rightsizing, &kerf, sync),
        spawn_kerf(client, |i| &i.cluster_rightsizing, &kerf, sync),
        spawn_kerf_as(client, |i| &i.recommendations, persisted, &kerf, sync),
    ];
    (kerf, tasks)
}

/// The workload kinds' indexes.
struct WorkloadWatches {
    deployments: Arc<Projected<Arc<Workload>>>,
    statefulsets: Arc<Projected<Arc<Workload>>>,
    daemonsets: Arc<Projected<Arc<Workload>>>,
    jobs: Arc<Projected<ListedJob>>,
    cronjobs: Arc<Projected<Arc<Workload>>>,
}

/// A workload object as the index keeps it (without the last-applied annotation).
fn workload_of<K: Resource + Into<Workload>>(mut object: K) -> Arc<Workload> {
    strip_last_applied(object.meta_mut());
    Arc::new(object.into())
}

/// The watches of the workload kinds (a Job run by a CronJob is recorded as the CronJob's).
fn spawn_workload_watches(
    client: &Client,
    sync: &SyncTracker,
    store: Option<&Arc<Store>>,
    tasks: &mut Vec<JoinHandle<()>>,
) -> WorkloadWatches {
    let cfg = watcher::Config::default;
    let (deployments, t) = spawn_builtin(
        "Deployment",
        relist::watch(Api::<Deployment>::all(client.clone()), cfg()),
        workload_of::<Deployment>,
        sync.clone(),
        None,
    );
    tasks.push(t);
    let (statefulsets, t) = spawn_builtin(
        "StatefulSet",
        relist::watch(Api::<StatefulSet>::all(client.clone()), cfg()),
        workload_of::<StatefulSet>,
        sync.clone(),
        None,
    );
    tasks.push(t);
    let (daemonsets, t) = spawn_builtin(
        "DaemonSet",
        relist::watch(Api::<DaemonSet>::all(client.clone()), cfg()),
        workload_of::<DaemonSet>,
        sync.clone(),
        None,
    );
    tasks.push(t);
    let (jobs, t) = spawn_builtin(
        "Job",
        relist::watch(Api::<Job>::all(client.clone()), cfg()),
        |mut j: Job| {
            if let Some(cron) = owner::cronjob_of(&j.metadata) {
                return ListedJob::OfCronJob(cron.to_string());
            }
            strip_last_applied(&mut j.metadata);
            ListedJob::Workload(Arc::new(Workload::from(j)))
        },
        sync.clone(),
        store
            .cloned()
            .map(|s| owner_hook::<Job>(owner::cronjob_of, |s| &s.job_owners, s)),
    );
    tasks.push(t);
    let (cronjobs, t) = spawn_builtin(
        "CronJob",
        relist::watch(Api::<CronJob>::all(client.clone()), cfg()),
        workload_of::<CronJob>,
        sync.clone(),
        None,
    );
    tasks.push(t);
    WorkloadWatches {
        deployments,
        statefulsets,
        daemonsets,
        jobs,
        cronjobs,
    }
}

/// The pods', ReplicaSets' and HPAs' indexes.
struct PodWatches {
    /// ReplicaSet → the Deployment (or other controller) that controls it.
    replicasets: Arc<Projected<Option<ReplicaSetOwner>>>,
    pods: Arc<Projected<Arc<crate::core::pod::Pod>>>,
    hpas: Arc<Projected<HorizontalPodAutoscaler>>,
}

/// The watches of pods, ReplicaSets (owner references only) and HPAs.
fn spawn_pod_watches(
    client: Client,
    sync: SyncTracker,
    store: Option<&Arc<Store>>,
    tasks: &mut Vec<JoinHandle<()>>,
) -> PodWatches {
    let cfg = watcher::Config::default;
    // Only owner references are needed: metadata-only requests.
    let (replicasets, t) = spawn_builtin(
        "ReplicaSet",
        relist::watch(
            Api::<PartialObjectMeta<ReplicaSet>>::all(client.clone()),
            cfg(),
        ),
        |rs: PartialObjectMeta<ReplicaSet>| replicaset_owner(&rs.metadata),
        sync.clone(),
        store.cloned().map(|s| {
            owner_hook::<PartialObjectMeta<ReplicaSet>>(
                owner::deployment_of,
                |s| &s.replicaset_owners,
                s,
            )
        }),
    );
    tasks.push(t);
    let (pods, t) = spawn_builtin(
        "Pod",
        relist::watch(Api::<Pod>::all(client.clone()), cfg()),
        |mut p: Pod| {
            strip_meta(&mut p.metadata);
            Arc::new(crate::core::pod::Pod::from(p))
        },
        sync.clone(),
        None,
    );
    tasks.push(t);
    let (hpas, t) = spawn_builtin(
        "HorizontalPodAutoscaler",
        relist::watch(Api::<HorizontalPodAutoscaler>::all(client), cfg()),
        |mut h: HorizontalPodAutoscaler| {
            // Only who owns `spec.metrics`, for conflicts (docs/gitops.md).
            strip_last_applied(&mut h.metadata);
            crate::core::managed_fields::prune_hpa_managed_fields(&mut h.metadata);
            h
        },
        sync,
        None,
    );
    tasks.push(t);

    PodWatches {
        replicasets,
        pods,
        hpas,
    }
}

/// The VerticalPodAutoscaler kind, as kerf reads it (upstream: kubernetes/autoscaler
/// `vertical-pod-autoscaler/deploy/vpa-v1-crd-gen.yaml`).
/// The CRDs watch's name in readiness and errors.
pub const CRD_KIND: &str = "CustomResourceDefinition";
/// The LimitRanges watch's name in readiness and errors.
pub const LIMIT_RANGE_KIND: &str = "LimitRange";
/// The ResourceQuotas watch's name in readiness and errors.
pub const QUOTA_KIND: &str = "ResourceQuota";
pub const VPA_KIND: &str = "VerticalPodAutoscaler";

pub fn vpa_resource() -> ApiResource {
    ApiResource {
        group: crate::core::vpa::VPA_API_GROUP.into(),
        version: "v1".into(),
        api_version: format!("{}/v1", crate::core::vpa::VPA_API_GROUP),
        kind: VPA_KIND.into(),
        plural: "verticalpodautoscalers".into(),
    }
}

/// What kerf keeps of a VPA: the fields that say which requests it sets. One it cannot read is
/// left out with a warning (the API server's validation makes that rare).
fn vpa_of(object: DynamicObject) -> Option<Vpa> {
    let (namespace, name) = (object.metadata.namespace.clone(), object.name_any());
    let read = serde_json::to_value(object)
        .map_err(|e| e.to_string())
        .and_then(|v| Vpa::from_object(v).map_err(|e| e.to_string()));
    match read {
        Ok(v) => Some(v),
        Err(e) => {
            tracing::warn!(
                namespace = namespace.as_deref().unwrap_or(""),
                name,
                "VerticalPodAutoscaler left out: {e}"
            );
            None
        }
    }
}

/// The VerticalPodAutoscalers, where their CRD is installed. A cluster without the CRD has no
/// VPA: the 404 completes the initial listing, empty, so readiness does not wait on a CRD kerf
/// does not need; the watch keeps retrying (backing off) and reads VPAs once it is installed.
/// How often the API server's discovery is asked again whether it serves `pods/resize` (a
/// control plane upgraded to 1.33 starts resizing in place without a restart of kerf).
const RESIZE_DISCOVERY_INTERVAL: Duration = Duration::from_secs(600);

/// Whether the API server serves the `pods/resize` subresource: its `/api/v1` discovery lists
/// it where in-place resize is on (`InPlacePodVerticalScaling`, beta and on by default from
/// Kubernetes 1.33; pkg/registry/core/pod/rest). Until the first answer it is
/// [`ResizeSupport::Unknown`]: no pod is resized and nothing rolls out for it.
pub async fn resize_support(client: &Client) -> Result<ResizeSupport, ::kube::Error> {
    let list = client.list_core_api_resources("v1").await?;
    Ok(if list.resources.iter().any(|r| r.name == "pods/resize") {
        ResizeSupport::Served
    } else {
        ResizeSupport::NotServed
    })
}

fn spawn_resize_discovery(
    client: &Client,
    tasks: &mut Vec<JoinHandle<()>>,
) -> watch::Receiver<ResizeSupport> {
    let (tx, rx) = watch::channel(ResizeSupport::Unknown);
    let client = client.clone();
    // Not a required task: without an answer kerf resizes nothing in place, which is safe.
    tasks.push(tokio::spawn(async move {
        loop {
            let wait = match resize_support(&client).await {
                Ok(support) => {
                    tx.send_if_modified(|s| std::mem::replace(s, support) != support);
                    RESIZE_DISCOVERY_INTERVAL
                }
                Err(e) => {
                    tracing::warn!(error = %e, "API discovery of pods/resize failed: retrying");
                    Duration::from_secs(30)
                }
            };
            tokio::time::sleep(wait).await;
        }
    }));
    rx
}

fn spawn_vpa_watch(
    client: &Client,
    sync: &SyncTracker,
    tasks: &mut Vec<JoinHandle<()>>,
) -> Arc<Projected<Option<Vpa>>> {
    let ar = vpa_resource();
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
    let stream = relist::watch(api, watcher::Config::default()).modify(|o: &mut DynamicObject| {
        strip_meta(&mut o.metadata);
    });
    spawn_optional(
        VPA_KIND,
        format!("{}.{}", ar.plural, ar.group),
        "the VerticalPodAutoscaler CRD is not installed: no VPA to respect",
        // A VPA kerf cannot read could be one it must not write against: readiness waits.
        false,
        stream,
        vpa_of,
        sync,
        tasks,
    )
}

/// A CRD kept only where it is a custom kind kerf writes the template of (a Rollout, a listed
/// kind), reduced to what decides how: its group, kind and versions' schemas.
fn writable_crd(crd: CustomResourceDefinition) -> Option<Arc<serde_json::Value>> {
    let group = crd.spec.group.clone();
    let kind = crd.spec.names.kind.clone();
    let writable = crd.spec.versions.iter().any(|v| {
        WorkloadKind::of_object(&format!("{group}/{}", v.name), &kind)
            .is_some_and(|k| k.template_writable() && !WorkloadKind::BUILT_IN.contains(&k))
    });
    if !writable {
        return None;
    }
    let versions: Vec<serde_json::Value> = crd
        .spec
        .versions
        .iter()
        .map(|v| serde_json::json!({"name": v.name, "schema": v.schema}))
        .collect();
    Some(Arc::new(serde_json::json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "spec": {"group": group, "names": {"kind": kind}, "versions": versions},
    })))
}

/// The CRDs of the custom kinds kerf writes: a change to one is seen as it is made.
fn spawn_crd_watch(
    client: &Client,
    sync: &SyncTracker,
    tasks: &mut Vec<JoinHandle<()>>,
) -> Arc<Projected<Option<Arc<serde_json::Value>>>> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let stream = relist::watch(api, watcher::Config::default()).modify(|o| {
        strip_meta(&mut o.metadata);
    });
    spawn_optional(
        CRD_KIND,
        "customresourcedefinitions.apiextensions.k8s.io".into(),
        "CustomResourceDefinitions are not served: custom kinds are written by JSON Patch",
        // Not readable (a ClusterRole from before kerf read CRDs): written the safe way.
        true,
        stream,
        writable_crd,
        sync,
        tasks,
    )
}

/// The namespaces' LimitRanges: kerf keeps requests and limits within them.
fn spawn_limit_range_watch(
    client: &Client,
    sync: &SyncTracker,
    tasks: &mut Vec<JoinHandle<()>>,
) -> Arc<Projected<Option<crate::core::limits::ContainerLimitRange>>> {
    let absent = "LimitRanges are not served: none to keep to";
    let project = |v: &serde_json::Value| crate::core::limits::ContainerLimitRange::from_object(v);
    spawn_bounds_watch::<k8s_openapi::api::core::v1::LimitRange, _>(
        client,
        (LIMIT_RANGE_KIND, "limitranges", absent),
        project,
        sync,
        tasks,
    )
}

/// The namespaces' ResourceQuotas: an upsize past one is held.
fn spawn_quota_watch(
    client: &Client,
    sync: &SyncTracker,
    tasks: &mut Vec<JoinHandle<()>>,
) -> Arc<Projected<Option<crate::core::limits::QuotaView>>> {
    let absent = "ResourceQuotas are not served: none to keep to";
    let project = |v: &serde_json::Value| crate::core::limits::QuotaView::from_object(v);
    spawn_bounds_watch::<k8s_openapi::api::core::v1::ResourceQuota, _>(
        client,
        (QUOTA_KIND, "resourcequotas", absent),
        project,
        sync,
        tasks,
    )
}

/// A watch of a namespace-wide bound kerf keeps to (LimitRanges, ResourceQuotas), each object
/// projected from its JSON. Not readable (a ClusterRole from before kerf read them): none, the
/// watch retrying.
fn spawn_bounds_watch<K, T>(
    client: &Client,
    (kind, resource, absent): (&'static str, &str, &'static str),
    project: fn(&serde_json::Value) -> Option<T>,
    sync: &SyncTracker,
    tasks: &mut Vec<JoinHandle<()>>,
) -> Arc<Projected<Option<T>>>
where
    K: Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned + serde::Serialize,
    K: Send + Sync + 'static,
    T: Clone + Send + Sync + 'static,
{
    let api: Api<K> = Api::all(client.clone());
    let stream = relist::watch(api, watcher::Config::default()).modify(|o| {
        strip_meta(o.meta_mut());
    });
    spawn_optional(
        kind,
        resource.into(),
        absent,
        true,
        stream,
        move |o: K| serde_json::to_value(&o).ok().and_then(|v| project(&v)),
        sync,
        tasks,
    )
}

/// The watches of [`owner_resources`]: metadata only, but a Rollout's whole object (its
/// template is the one kerf writes).
fn spawn_owner_watches(
    client: &Client,
    sync: &SyncTracker,
    tasks: &mut Vec<JoinHandle<()>>,
) -> Vec<Arc<Projected<OwnerObject>>> {
    owner_resources()
        .into_iter()
        .map(|r| spawn_owner_resource_watch(client, r, sync, tasks))
        .collect()
}

/// The watch of one of [`owner_resources`] or of a listed kind.
fn spawn_owner_resource_watch(
    client: &Client,
    r: OwnerResource,
    sync: &SyncTracker,
    tasks: &mut Vec<JoinHandle<()>>,
) -> Arc<Projected<OwnerObject>> {
    let ar = r.api_resource();
    // Read whole: a kind whose template kerf writes, and a RayService (whether KubeRay rolls
    // its changes to a new cluster is in its spec).
    let whole = |k: WorkloadKind| k.template_writable() || k == WorkloadKind::RayService;
    if r.workload.is_some_and(whole) {
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
        let project = move |o: DynamicObject| owner_object(&r, o.metadata, Some(&o.data));
        spawn_owner_watch(r, &ar, api, project, sync, tasks)
    } else {
        let api: Api<PartialObjectMeta<DynamicObject>> = Api::all_with(client.clone(), &ar);
        let project = move |o: PartialObjectMeta<DynamicObject>| owner_object(&r, o.metadata, None);
        spawn_owner_watch(r, &ar, api, project, sync, tasks)
    }
}

/// The watch of a kind GlobalConfiguration `workloadKinds` lists: started when the
/// configuration lists it, stopped when it no longer does. It holds no readiness (kerf is
/// ready without it: until it has listed, that kind's pods stop at the objects it owns, whose
/// templates kerf does not write).
struct ListedWatch {
    kind: ListedKind,
    index: Arc<Projected<OwnerObject>>,
    task: JoinHandle<()>,
}

impl ListedWatch {
    fn start(client: &Client, kind: ListedKind, sync: &SyncTracker) -> ListedWatch {
        let d = kind.data();
        let r = OwnerResource {
            label: d.kind,
            api_version: d.api_version,
            kind: d.kind,
            plural: d.plural,
            workload: Some(WorkloadKind::Listed(kind)),
        };
        let mut tasks = Vec::new();
        let index = spawn_owner_resource_watch(client, r, sync, &mut tasks);
        ListedWatch {
            kind,
            index,
            task: tasks.pop().expect("one task per watch"),
        }
    }
}

fn spawn_owner_watch<K>(
    r: OwnerResource,
    ar: &ApiResource,
    api: Api<K>,
    project: impl Fn(K) -> OwnerObject + Send + 'static,
    sync: &SyncTracker,
    tasks: &mut Vec<JoinHandle<()>>,
) -> Arc<Projected<OwnerObject>>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    spawn_optional(
        r.label,
        format!("{}.{}", ar.plural, ar.group),
        "its CRD is not installed: none of its objects",
        true,
        relist::watch(api, watcher::Config::default()),
        project,
        sync,
        tasks,
    )
}

/// The watch of a resource that may not be served (a CRD kerf reads but does not need). A
/// cluster without it has none of its objects: the 404 completes the initial listing, empty, so
/// readiness does not wait on it; the watch keeps retrying (every few minutes at most once it
/// failed a few times, [`relist`]; each 404 counted as `crd_missing`) and reads the objects once
/// the CRD is installed. With `forbidden_is_none`, a kind kerf may not read (403) is the
/// same, its error logged and counted.
#[allow(clippy::too_many_arguments)]
fn spawn_optional<K, T>(
    kind: &'static str,
    resource: String,
    absent: &'static str,
    forbidden_is_none: bool,
    stream: impl Stream<Item = watcher::Result<watcher::Event<K>>> + Send + 'static,
    project: impl Fn(K) -> T + Send + 'static,
    sync: &SyncTracker,
    tasks: &mut Vec<JoinHandle<()>>,
) -> Arc<Projected<T>>
where
    K: Resource + Clone + Debug + Send + 'static,
    T: Clone + Send + Sync + 'static,
{
    let index = Arc::new(Projected::new());
    let writer = index.clone();
    let mut errors = sync.errors(kind, resource, false);
    let tracker = sync.clone();
    tasks.push(sync.spawn(kind, async move {
        let mut stream = std::pin::pin!(stream);
        let mut logged_absent = false;
        while let Some(event) = stream.next().await {
            match event {
                Ok(ev) => {
                    errors.ok(&ev);
                    let done = matches!(ev, watcher::Event::InitDone);
                    writer.apply(ev, &project);
                    if done {
                        tracker.done(kind);
                    }
                }
                // Counted, not kept as an error: kerf works without the kind.
                Err(e) if not_served(&e) => {
                    errors.count("crd_missing");
                    if !logged_absent {
                        tracing::info!(kind, "{absent}");
                        logged_absent = true;
                    }
                    writer.clear();
                    tracker.done(kind);
                }
                // Not readable (kerf's ClusterRole from before it read the kind): none of its
                // objects rather than readiness held for good; the error is logged and counted,
                // and the watch keeps retrying.
                Err(e) if forbidden_is_none && refused_with(&e) == Some(403) => {
                    errors.error(&e);
                    writer.clear();
                    tracker.done(kind);
                }
                Err(e) => errors.error(&e),
            }
        }
    }));
    index
}

fn spawn_builtin<K, T>(
    kind: &'static str,
    stream: impl Stream<Item = watcher::Result<watcher::Event<K>>> + Send + 'static,
    project: fn(K) -> T,
    sync: SyncTracker,
    mut hook: Option<Hook<K>>,
) -> (Arc<Projected<T>>, JoinHandle<()>)
where
    K: Resource<DynamicType = ()> + Clone + Debug + Send + Sync + 'static,
    T: Clone + Send + Sync + 'static,
{
    let index = Arc::new(Projected::new());
    let writer = index.clone();
    let resource = match K::group(&()).as_ref() {
        "" => K::plural(&()).to_string(),
        group => format!("{}.{group}", K::plural(&())),
    };
    let mut errors = sync.errors(kind, resource, false);
    let tracker = sync.clone();
    let task = sync.spawn(kind, async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            match event {
                Ok(ev) => {
                    errors.ok(&ev);
                    if let Some(h) = hook.as_mut() {
                        h(&ev);
                    }
                    let done = matches!(ev, watcher::Event::InitDone);
                    writer.apply(ev, project);
                    if done {
                        tracker.done(kind);
                    }
                }
                Err(e) => errors.error(&e),
            }
        }
    });
    (index, task)
}

/// Keeps one of the webhook store's owner maps in step with a watch, so a pod created right after
/// its ReplicaSet (or Job) can be traced to its workload without waiting for a reconcile.
fn owner_hook<K>(
    owner_of: fn(&ObjectMeta) -> Option<&str>,
    map: fn(&Store) -> &dashmap::DashMap<ObjectName, String, crate::core::hash::RandomState>,
    store: Arc<Store>,
) -> Hook<K>
where
    K: Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
{
    // Names seen in the current (re)list: what is not among them at its end is gone.
    let mut listed: BTreeSet<ObjectName> = BTreeSet::new();
    Box::new(move |ev: &watcher::Event<K>| {
        let name_of = |o: &K| ObjectName::new(o.namespace().unwrap_or_default(), o.name_any());
        let upsert = |o: &K| match owner_of(o.meta()) {
            Some(owner) => {
                map(&store).insert(name_of(o), owner.to_string());
            }
            None => {
                map(&store).remove(&name_of(o));
            }
        };
        match ev {
            watcher::Event::Apply(o) => upsert(o),
            watcher::Event::InitApply(o) => {
                listed.insert(name_of(o));
                upsert(o);
            }
            watcher::Event::Delete(o) => {
                map(&store).remove(&name_of(o));
            }
            watcher::Event::Init => listed.clear(),
            watcher::Event::InitDone => {
                let present = std::mem::take(&mut listed);
                map(&store).retain(|k, _| present.contains(k));
            }
        }
    })
}

const BUILTIN_KINDS: [&str; 8] = [
    "Deployment",
    "StatefulSet",
    "DaemonSet",
    "Job",
    "CronJob",
    "ReplicaSet",
    "Pod",
    "HorizontalPodAutoscaler",
];

impl Reader {
    /// Starts one watch per kind (cluster-wide). Call from within a tokio runtime.
    pub fn start(client: Client) -> Reader {
        Self::start_inner(client, None)
    }

    /// Like [`Reader::start`], and keeps `store`'s ReplicaSet→Deployment and Job→CronJob maps
    /// current on every watch event (the admission path reads them).
    pub fn start_with_store(client: Client, store: Arc<Store>) -> Reader {
        Self::start_inner(client, Some(store))
    }

    /// Protects kerf's own namespace in every snapshot this reader (or a clone) takes.
    pub fn protecting(mut self, own_namespace: &str) -> Reader {
        self.own_namespace = Some(Arc::from(own_namespace));
        self
    }

    fn start_inner(client: Client, store: Option<Arc<Store>>) -> Reader {
        let (sync, unsynced, stopped) = sync_tracker(store.as_ref());
        let health = sync.health.clone();
        let (kerf, mut tasks) = spawn_kerf_watches(&client, &sync);
        let w = spawn_workload_watches(&client, &sync, store.as_ref(), &mut tasks);
        let vpas = spawn_vpa_watch(&client, &sync, &mut tasks);
        let crds = spawn_crd_watch(&client, &sync, &mut tasks);
        let limit_ranges = spawn_limit_range_watch(&client, &sync, &mut tasks);
        let quotas = spawn_quota_watch(&client, &sync, &mut tasks);
        let owners = spawn_owner_watches(&client, &sync, &mut tasks);
        let resize = spawn_resize_discovery(&client, &mut tasks);
        let p = spawn_pod_watches(client.clone(), sync.clone(), store.as_ref(), &mut tasks);
        Reader {
            own_namespace: None,
            inner: Arc::new(Inner {
                kerf,
                deployments: w.deployments,
                statefulsets: w.statefulsets,
                daemonsets: w.daemonsets,
                jobs: w.jobs,
                cronjobs: w.cronjobs,
                replicasets: p.replicasets,
                pods: p.pods,
                hpas: p.hpas,
                vpas,
                crds,
                limit_ranges,
                quotas,
                owners,
                listed: Default::default(),
                client,
                sync,
                resize,
                unsynced,
                stopped,
                health,
                tasks,
            }),
        }
    }

    /// Resolves once every watch has completed its initial listing (readiness).
    pub async fn wait_synced(&self) {
        let mut rx = self.inner.unsynced.clone();
        // An error means every watch task ended (runtime shutdown): nothing more to wait for.
        let _ = rx.wait_for(|s| s.is_empty()).await;
    }

    pub fn is_synced(&self) -> bool {
        self.inner.unsynced.borrow().is_empty()
    }

    /// Kinds whose initial listing has not completed yet (for `/readyz` messages).
    pub fn unsynced_kinds(&self) -> Vec<&'static str> {
        self.inner.unsynced.borrow().iter().copied().collect()
    }

    /// The kinds not synced yet whose last list or watch failed, with the error.
    pub fn failing_unsynced(&self) -> Vec<(&'static str, String)> {
        self.unsynced_kinds()
            .into_iter()
            .filter_map(|k| Some((k, self.inner.health.last_error(k)?)))
            .collect()
    }

    /// Where the reader reports its caches and errors: the store's (with
    /// [`Reader::start_with_store`]) or its own.
    pub fn health(&self) -> &Arc<Health> {
        &self.inner.health
    }

    /// Resolves when a watch task ended or panicked (it should run as long as the reader),
    /// saying which and why. The reader is then incomplete for good.
    pub async fn stopped(&self) -> String {
        let mut rx = self.inner.stopped.clone();
        let why = rx.wait_for(Option::is_some).await.map(|s| s.clone());
        match why {
            Ok(s) => s.unwrap_or_default(),
            // Every task is gone without a word: only at runtime shutdown.
            Err(_) => std::future::pending().await,
        }
    }

    /// The usage history's checkpoint parts in kerf's own namespace (ConfigMaps
    /// `kerf-history-<index>`), in index order; none without an own namespace.
    pub async fn history_checkpoints(&self) -> Result<Vec<Vec<u8>>, ::kube::Error> {
        use crate::checkpoint::{
            HISTORY_CONFIGMAP_PREFIX, HISTORY_KEY, HISTORY_LABEL, HISTORY_LABEL_VALUE,
        };
        let Some(ns) = &self.own_namespace else {
            return Ok(Vec::new());
        };
        let api: Api<k8s_openapi::api::core::v1::ConfigMap> =
            Api::namespaced(self.inner.client.clone(), ns);
        let lp = ::kube::api::ListParams::default()
            .labels(&format!("{HISTORY_LABEL}={HISTORY_LABEL_VALUE}"));
        let mut parts: Vec<(usize, Vec<u8>)> = api
            .list(&lp)
            .await?
            .items
            .into_iter()
            .filter_map(|cm| {
                let index = cm
                    .metadata
                    .name
                    .as_deref()?
                    .strip_prefix(HISTORY_CONFIGMAP_PREFIX)?
                    .parse()
                    .ok()?;
                Some((index, cm.binary_data?.remove(HISTORY_KEY)?.0))
            })
            .collect();
        parts.sort();
        Ok(parts.into_iter().map(|(_, p)| p).collect())
    }

    /// Every RightsizingRecommendation kerf wrote (previous HPA targets, original requests).
    pub fn recommendations(&self) -> Vec<Arc<PersistedRecommendation>> {
        self.inner.kerf.recommendations.valid()
    }

    /// Every kerf object currently skipped, with why (all kinds, not only policies).
    pub fn rejected(&self) -> Vec<Rejected> {
        let k = &self.inner.kerf;
        let mut out = Vec::new();
        out.extend(k.gpu.rejected());
        out.extend(k.cluster_gpu.rejected());
        out.extend(k.global.rejected());
        out.extend(k.evaluation.rejected());
        out.extend(k.strategies.rejected());
        out.extend(k.cluster_strategies.rejected());
        out.extend(k.rightsizing.rejected());
        out.extend(k.cluster_rightsizing.rejected());
        out.extend(k.recommendations.rejected());
        out
    }

    /// The plain snapshot evaluation reads, plus the policies left out because they are invalid.
    pub fn snapshot(&self) -> (Snapshot, Vec<InvalidPolicy>) {
        let i = &self.inner;
        let k = &i.kerf;
        let mut invalid = Vec::new();
        let mut collect_invalid = |rs: Vec<Rejected>, t: PolicyType| {
            invalid.extend(rs.into_iter().map(|r| invalid_policy(r, t)));
        };
        collect_invalid(k.gpu.rejected(), PolicyType::GpuReactivePolicy);
        collect_invalid(
            k.cluster_gpu.rejected(),
            PolicyType::ClusterGpuReactivePolicy,
        );
        collect_invalid(k.rightsizing.rejected(), PolicyType::RightsizingPolicy);
        collect_invalid(
            k.cluster_rightsizing.rejected(),
            PolicyType::ClusterRightsizingPolicy,
        );

        let gpu_policies = k
            .gpu
            .valid()
            .iter()
            .map(|p| {
                Policy::from_object(
                    &p.metadata,
                    PolicyType::GpuReactivePolicy,
                    p.spec.clone(),
                    p.status.clone(),
                )
            })
            .chain(k.cluster_gpu.valid().iter().map(|p| {
                Policy::from_object(
                    &p.metadata,
                    PolicyType::ClusterGpuReactivePolicy,
                    p.spec.clone().into(),
                    p.status.clone(),
                )
            }))
            .collect();
        let rightsizing_policies = k
            .rightsizing
            .valid()
            .iter()
            .map(|p| {
                Policy::from_object(
                    &p.metadata,
                    PolicyType::RightsizingPolicy,
                    p.spec.clone(),
                    p.status.clone(),
                )
            })
            .chain(k.cluster_rightsizing.valid().iter().map(|p| {
                Policy::from_object(
                    &p.metadata,
                    PolicyType::ClusterRightsizingPolicy,
                    p.spec.clone().into(),
                    p.status.clone(),
                )
            }))
            .collect();

        let mut strategies = BTreeMap::new();
        for s in k.strategies.valid() {
            strategies.insert(
                StrategyKey {
                    namespace: s.metadata.namespace.as_deref().map(Into::into),
                    name: s.name_any().into(),
                },
                Arc::new(s.spec.view()),
            );
        }
        for s in k.cluster_strategies.valid() {
            strategies.insert(
                StrategyKey {
                    namespace: None,
                    name: s.name_any().into(),
                },
                Arc::new(s.spec.view()),
            );
        }

        let mut global = self.global();
        let listed = crate::api::listed_kinds::set_listed(&global.workload_kinds);
        let mut workloads = i.deployments.values();
        workloads.extend(i.statefulsets.values());
        workloads.extend(i.daemonsets.values());
        workloads.extend(i.cronjobs.values());
        let mut job_owners = BTreeMap::new();
        for ((ns, name), job) in i.jobs.entries() {
            match job {
                ListedJob::OfCronJob(cron) => {
                    job_owners.insert((ns.unwrap_or_default().into(), name.into()), cron.into());
                }
                ListedJob::Workload(w) => workloads.push(w),
            }
        }
        let (replicaset_owners, controllers) = self.owner_links(&mut workloads, &listed);
        workloads.sort_by(|a, b| a.key.cmp(&b.key));

        // Both ordered by (namespace, name), as the indexes are.
        let pods = i.pods.values();
        let hpas = i.hpas.values();

        if let Some(ns) = &self.own_namespace {
            global.protect(ns);
        }
        let snapshot = Snapshot {
            global,
            precedence: k
                .evaluation
                .valid()
                .iter()
                .find(|p| p.name_any() == POLICY_EVALUATION_NAME)
                .map(|p| p.spec.clone())
                .unwrap_or_else(PolicyEvaluationSpec::default),
            gpu_policies,
            rightsizing_policies,
            strategies,
            workloads,
            pods,
            hpas,
            vpas: i.vpas.values().into_iter().flatten().collect(),
            replicaset_owners,
            job_owners,
            resize: *self.inner.resize.borrow(),
            controllers,
            crds: i.crds.values().into_iter().flatten().collect(),
            limit_ranges: i.limit_ranges.values().into_iter().flatten().collect(),
            resource_quotas: i.quotas.values().into_iter().flatten().collect(),
        };
        let mut snapshot = snapshot;
        // Owned Deployments and StatefulSets under their topmost owner, from the controller
        // references the workloads carry (docs/workloads.md).
        crate::core::grouping::group_under_topmost_owners(&mut snapshot);
        (snapshot, invalid)
    }

    /// The topmost owners of the controllers GPU inference runs under (added to `workloads`),
    /// the ReplicaSets' Deployments, and the controller links of every object a chain passes
    /// through (`Snapshot::controllers`).
    fn owner_links(
        &self,
        workloads: &mut Vec<Arc<Workload>>,
        listed: &[ListedKind],
    ) -> (ByName<Name>, ByName<owner::Link>) {
        let i = &self.inner;
        let listed = self.listed_indexes(listed);
        let mut controllers = BTreeMap::new();
        let mut link = |ns: Option<String>, kind: &str, name: &str, c: owner::Link| {
            let key = owner::link_key(kind, name);
            controllers.insert((ns.unwrap_or_default().into(), key.as_str().into()), c);
        };
        for index in i.owners.iter().chain(&listed) {
            for ((ns, name), o) in index.entries() {
                match o {
                    OwnerObject::Workload(w) => workloads.push(w),
                    OwnerObject::Link { kind, controller } => link(ns, kind, &name, controller),
                    OwnerObject::Nothing => {}
                }
            }
        }
        let mut replicaset_owners = BTreeMap::new();
        for ((ns, name), o) in i.replicasets.entries() {
            match o {
                Some(ReplicaSetOwner::Deployment(d)) => {
                    replicaset_owners
                        .insert((ns.unwrap_or_default().into(), name.into()), d.into());
                }
                Some(ReplicaSetOwner::Other(c)) => link(ns, "ReplicaSet", &name, c),
                None => {}
            }
        }
        (replicaset_owners, controllers)
    }

    /// The indexes of the kinds the configuration lists (`listed`), their watches started and
    /// stopped to match. Outside a tokio runtime none is started.
    fn listed_indexes(&self, listed: &[ListedKind]) -> Vec<Arc<Projected<OwnerObject>>> {
        let i = &self.inner;
        let mut watches = i.listed.lock().unwrap_or_else(|e| e.into_inner());
        watches.retain(|w| {
            let keep = listed.contains(&w.kind);
            if !keep {
                w.task.abort();
            }
            keep
        });
        if tokio::runtime::Handle::try_current().is_ok() {
            for k in listed {
                if !watches.iter().any(|w| w.kind == *k) {
                    watches.push(ListedWatch::start(&i.client, *k, &i.sync));
                }
            }
        }
        watches.iter().map(|w| Arc::clone(&w.index)).collect()
    }

    /// The `global-config` singleton, or defaults. A configuration that cannot be used never
    /// turns writes on: if it asks for `readOnly: true`, that is honoured even when the rest is
    /// invalid.
    fn global(&self) -> GlobalConfigurationSpec {
        let k = &self.inner.kerf;
        if let Some(g) = k
            .global
            .valid()
            .iter()
            .find(|g| g.name_any() == GLOBAL_CONFIGURATION_NAME)
        {
            return g.spec.clone();
        }
        let mut spec = GlobalConfigurationSpec::default();
        if let Some(bad) = k
            .global
            .rejected()
            .into_iter()
            .find(|r| r.name == GLOBAL_CONFIGURATION_NAME)
        {
            spec.read_only =
                bad.raw.pointer("/spec/readOnly") == Some(&serde_json::Value::Bool(true));
        }
        spec
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    use super::*;

    /// One list of kerf kinds: the reader watches exactly `api::KERF_KINDS`, each by its name.
    #[test]
    fn the_reader_watches_every_kerf_kind_by_name() {
        let mut watched = [
            GpuReactivePolicy::KIND,
            ClusterGpuReactivePolicy::KIND,
            GlobalConfiguration::KIND,
            PolicyEvaluation::KIND,
            AutomationStrategy::KIND,
            ClusterAutomationStrategy::KIND,
            RightsizingPolicy::KIND,
            ClusterRightsizingPolicy::KIND,
            RightsizingRecommendation::KIND,
        ];
        for k in watched {
            assert_eq!(
                Some(k),
                crate::api::KERF_KINDS.iter().copied().find(|x| *x == k)
            );
        }
        let mut listed = crate::api::KERF_KINDS;
        watched.sort();
        listed.sort();
        assert_eq!(watched, listed);
    }

    fn job(name: &str, cron: Option<&str>) -> Job {
        Job {
            metadata: ObjectMeta {
                namespace: Some("ns".into()),
                name: Some(name.into()),
                owner_references: cron.map(|c| {
                    vec![OwnerReference {
                        api_version: "batch/v1".into(),
                        kind: "CronJob".into(),
                        name: c.into(),
                        controller: Some(true),
                        ..Default::default()
                    }]
                }),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn names(index: &Projected<String>) -> Vec<String> {
        index.values()
    }

    #[tokio::test]
    async fn a_watch_task_that_panics_or_ends_is_reported_once() {
        let (tx, _unsynced) = watch::channel(BTreeSet::from(["Pod"]));
        let (stop_tx, mut stopped) = watch::channel(None);
        let sync = SyncTracker {
            tx: Arc::new(tx),
            stopped: Arc::new(stop_tx),
            health: Health::new(),
            metrics: Metrics::new(),
            total: 1,
        };
        let panicked = sync.spawn("Pod", async { panic!("projection bug") });
        assert!(panicked.await.is_ok(), "the panic is caught and reported");
        let ended = sync.spawn("Job", async {});
        ended.await.unwrap();
        let why = stopped.wait_for(Option::is_some).await.unwrap().clone();
        assert_eq!(
            why.as_deref(),
            Some("the Pod watch stopped: panicked: projection bug"),
            "the first one counts"
        );
    }

    #[test]
    fn describe_watch_error_gives_the_api_servers_message_and_the_fix() {
        let list = |code: u16, reason: &str, message: &str| {
            watcher::Error::InitialListFailed(::kube::Error::Api(
                ::kube::core::Status::failure(message, reason)
                    .with_code(code)
                    .boxed(),
            ))
        };
        let said = |resource: &str, crd: bool, e: watcher::Error| {
            let p = describe_watch_error(resource, crd, &e);
            (p.reason, p.message)
        };
        assert_eq!(
            said("pods", false, list(401, "Unauthorized", "Unauthorized")),
            (
                "unauthorized",
                "list failed: 401 Unauthorized: Unauthorized (the API server rejected kerf's \
                 credentials: check the service account token or the kubeconfig)"
                    .into()
            )
        );
        assert_eq!(
            said(
                "deployments.apps",
                false,
                list(403, "Forbidden", "deployments.apps is forbidden")
            ),
            (
                "forbidden",
                "list failed: 403 Forbidden: deployments.apps is forbidden (kerf's ClusterRole \
                 must allow get, list and watch on deployments.apps: manifests/install/rbac.yaml)"
                    .into()
            )
        );
        // A path no API serves answers plain text: kube puts a sentence in `reason`.
        let not_served = || list(404, "Failed to parse error data", "404 page not found");
        assert_eq!(
            said(
                "gpureactivepolicies.rightsizing.kubex.ai",
                true,
                not_served()
            ),
            (
                "crd_missing",
                "list failed: HTTP 404: 404 page not found (the CustomResourceDefinition \
                 gpureactivepolicies.rightsizing.kubex.ai is not installed: kubectl apply -f \
                 manifests/crds/)"
                    .into()
            )
        );
        assert_eq!(
            said("pods", false, not_served()),
            (
                "not_found",
                "list failed: HTTP 404: 404 page not found".into()
            )
        );
        let expired = watcher::Error::WatchError(Box::new(
            ::kube::core::Status::failure("too old resource version: 1 (5)", "Expired")
                .with_code(410),
        ));
        assert_eq!(
            said("pods", false, expired),
            (
                "expired",
                "watch failed: 410 Expired: too old resource version: 1 (5)".into()
            )
        );
        assert_eq!(
            said(
                "pods",
                false,
                list(500, "InternalError", "etcdserver: request timed out")
            ),
            (
                "api_error",
                "list failed: 500 InternalError: etcdserver: request timed out".into()
            )
        );
    }

    #[test]
    fn a_relist_drops_what_it_did_not_list_once_it_completed() {
        let index = Projected::<String>::new();
        let project = |j: Job| j.metadata.name.unwrap_or_default();
        index.apply(watcher::Event::Apply(job("a", None)), project);
        index.apply(watcher::Event::Apply(job("b", None)), project);
        index.apply(watcher::Event::Delete(job("a", None)), project);
        assert_eq!(names(&index), ["b"]);
        // During a relist the previous contents stay visible while relisted objects arrive…
        index.apply(watcher::Event::Init, project);
        index.apply(watcher::Event::InitApply(job("c", None)), project);
        assert_eq!(names(&index), ["b", "c"]);
        // …and what it did not list is dropped at its end: "b" is gone from the cluster.
        index.apply(watcher::Event::InitDone, project);
        assert_eq!(names(&index), ["c"]);
        assert_eq!(
            index.entries()[0].0,
            (Some("ns".to_string()), "c".to_string())
        );
    }

    #[test]
    fn owner_hook_keeps_the_store_map_in_step_and_drops_owners_missing_from_a_relist() {
        let store = Store::new();
        let mut hook = owner_hook::<Job>(owner::cronjob_of, |s| &s.job_owners, store.clone());
        let owner = |name: &str| {
            store
                .job_owners
                .get(&ObjectName::new("ns", name))
                .map(|o| o.clone())
        };
        hook(&watcher::Event::Apply(job("nightly-1", Some("nightly"))));
        hook(&watcher::Event::Apply(job("manual", None)));
        assert_eq!(owner("nightly-1").as_deref(), Some("nightly"));
        assert_eq!(owner("manual"), None);
        hook(&watcher::Event::Init);
        hook(&watcher::Event::InitApply(job(
            "nightly-2",
            Some("nightly"),
        )));
        hook(&watcher::Event::InitDone);
        assert_eq!(
            owner("nightly-1"),
            None,
            "not in the relist: deleted meanwhile"
        );
        assert_eq!(owner("nightly-2").as_deref(), Some("nightly"));
        hook(&watcher::Event::Delete(job("nightly-2", Some("nightly"))));
        assert_eq!(owner("nightly-2"), None);
    }
}
