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
mod objects;
mod owners;
mod projected;
pub mod relist;
mod watch_errors;
mod watches;

pub use objects::*;
use owners::*;
use projected::*;
pub use watch_errors::*;
pub use watches::*;

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
        let mut job_owners = crate::core::hash::HashMap::default();
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
    ) -> (
        crate::core::hash::HashMap<(Name, Name), Name>,
        ByName<owner::Link>,
    ) {
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
        let mut replicaset_owners = crate::core::hash::HashMap::default();
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
            (p.label(), p.to_string())
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
