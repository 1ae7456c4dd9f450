//! The watch tasks: kerf's own kinds, the workload kinds, pods, ReplicaSets and HPAs, the
//! optional kinds (VPAs, CRDs, LimitRanges, ResourceQuotas, owner resources, listed kinds).

use super::*;

pub(super) const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

pub(super) fn strip_meta(meta: &mut ObjectMeta) {
    meta.managed_fields = None;
    strip_last_applied(meta);
}

/// A workload keeps its `managedFields` until [`Workload::from`] has projected the fields kerf
/// tracks for conflicts (docs/gitops.md); the rest goes with the object.
pub(super) fn strip_last_applied(meta: &mut ObjectMeta) {
    if let Some(a) = meta.annotations.as_mut() {
        a.remove(LAST_APPLIED);
    }
}

pub(super) fn spawn_kerf<K: KerfKind>(
    client: &Client,
    get: fn(&Indexes) -> &KerfIndex<K>,
    indexes: &Arc<Indexes>,
    sync: &SyncTracker,
) -> JoinHandle<()> {
    spawn_kerf_as(client, get, std::convert::identity, indexes, sync)
}

/// A kerf RightsizingRecommendation as kept: its [`PersistedRecommendation`] projection.
pub(super) fn persisted(d: Decoded<RightsizingRecommendation>) -> Decoded<PersistedRecommendation> {
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
pub(super) fn spawn_kerf_as<K: KerfKind, T: Clone + Send + Sync + 'static>(
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

pub(super) type Hook<K> = Box<dyn FnMut(&watcher::Event<K>) + Send>;

/// The kinds whose initial listing is still under way.
pub(super) type Unsynced = watch::Receiver<BTreeSet<&'static str>>;

/// The tracker of the watches' initial listings, with what readiness and the reader wait on.
pub(super) fn sync_tracker(
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
pub(super) fn spawn_kerf_watches(
    client: &Client,
    sync: &SyncTracker,
) -> (Arc<Indexes>, Vec<JoinHandle<()>>) {
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
pub(super) struct WorkloadWatches {
    pub(super) deployments: Arc<Projected<Arc<Workload>>>,
    pub(super) statefulsets: Arc<Projected<Arc<Workload>>>,
    pub(super) daemonsets: Arc<Projected<Arc<Workload>>>,
    pub(super) jobs: Arc<Projected<ListedJob>>,
    pub(super) cronjobs: Arc<Projected<Arc<Workload>>>,
}

/// A workload object as the index keeps it (without the last-applied annotation).
pub(super) fn workload_of<K: Resource + Into<Workload>>(mut object: K) -> Arc<Workload> {
    strip_last_applied(object.meta_mut());
    Arc::new(object.into())
}

/// The watches of the workload kinds (a Job run by a CronJob is recorded as the CronJob's).
pub(super) fn spawn_workload_watches(
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
pub(super) struct PodWatches {
    /// ReplicaSet → the Deployment (or other controller) that controls it.
    pub(super) replicasets: Arc<Projected<Option<ReplicaSetOwner>>>,
    pub(super) pods: Arc<Projected<Arc<crate::core::pod::Pod>>>,
    pub(super) hpas: Arc<Projected<HorizontalPodAutoscaler>>,
}

/// The watches of pods, ReplicaSets (owner references only) and HPAs.
pub(super) fn spawn_pod_watches(
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
pub(super) fn vpa_of(object: DynamicObject) -> Option<Vpa> {
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
pub(super) const RESIZE_DISCOVERY_INTERVAL: Duration = Duration::from_secs(600);

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

pub(super) fn spawn_resize_discovery(
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

pub(super) fn spawn_vpa_watch(
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
pub(super) fn writable_crd(crd: CustomResourceDefinition) -> Option<Arc<serde_json::Value>> {
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
pub(super) fn spawn_crd_watch(
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
pub(super) fn spawn_limit_range_watch(
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
pub(super) fn spawn_quota_watch(
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
pub(super) fn spawn_bounds_watch<K, T>(
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
pub(super) fn spawn_owner_watches(
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
pub(super) fn spawn_owner_resource_watch(
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
pub(super) struct ListedWatch {
    pub(super) kind: ListedKind,
    pub(super) index: Arc<Projected<OwnerObject>>,
    pub(super) task: JoinHandle<()>,
}

impl ListedWatch {
    pub(super) fn start(client: &Client, kind: ListedKind, sync: &SyncTracker) -> ListedWatch {
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

pub(super) fn spawn_owner_watch<K>(
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
pub(super) fn spawn_optional<K, T>(
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

pub(super) fn spawn_builtin<K, T>(
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
pub(super) fn owner_hook<K>(
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

pub(super) const BUILTIN_KINDS: [&str; 8] = [
    "Deployment",
    "StatefulSet",
    "DaemonSet",
    "Job",
    "CronJob",
    "ReplicaSet",
    "Pod",
    "HorizontalPodAutoscaler",
];
