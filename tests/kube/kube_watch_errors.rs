//! List and watch errors against a mock API server: a 403 on one resource and a CRD that is not
//! installed are logged at `warn` with the resource and the API server's message (once while
//! they repeat), counted in `kerf_watch_errors_total`, shown on `/readyz` until the resource
//! works again, and make the reconciler give up once the cache sync timeout has passed.

use crate::kube_support;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kerf::reconcile::cluster::ReconcilerConfig;
use kerf::sources::kube::Reader;
use kerf::state::Store;
use kube_support::{Recorded, Reply, eventually, mock, requests};
use serde_json::json;

const PODS_FORBIDDEN: &str = r#"pods is forbidden: User "system:serviceaccount:kerf-system:kerf" cannot list resource "pods" in API group "" at the cluster scope"#;
const GPU_POLICIES: &str = "/apis/rightsizing.kubex.ai/v1alpha1/gpureactivepolicies";

/// What kerf shows for the 403 (log line, `/readyz`, the reconciler's error).
fn pods_forbidden_message() -> String {
    format!(
        "list failed: 403 Forbidden: {PODS_FORBIDDEN} (kerf's ClusterRole must allow get, list \
         and watch on pods: manifests/install/rbac.yaml)"
    )
}

/// What kerf shows for the missing CRD.
const CRD_MISSING_MESSAGE: &str = "list failed: HTTP 404: 404 page not found (the \
    CustomResourceDefinition gpureactivepolicies.rightsizing.kubex.ai is not installed: \
    kubectl apply -f manifests/crds/)";

/// The log lines written while the guard lives (this thread: the test's current-thread
/// runtime polls every spawned task on it).
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Logs {
    type Writer = Logs;
    fn make_writer(&'a self) -> Logs {
        self.clone()
    }
}

impl Logs {
    fn capture() -> (Logs, tracing::subscriber::DefaultGuard) {
        let logs = Logs::default();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(logs.clone())
            .with_ansi(false)
            .with_max_level(tracing::Level::INFO)
            .finish();
        (logs, tracing::subscriber::set_default(subscriber))
    }

    fn lines(&self, level: &str, containing: &str) -> Vec<String> {
        String::from_utf8_lossy(&self.0.lock().unwrap())
            .lines()
            .filter(|l| l.contains(level) && l.contains(containing))
            .map(str::to_string)
            .collect()
    }
}

/// `kerf_watch_errors_total{resource, reason}` as `store`'s registry exposes it on `/metrics`.
fn watch_errors(store: &Store, resource: &str, reason: &str) -> u64 {
    let prefix = format!(r#"kerf_watch_errors_total{{resource="{resource}",reason="{reason}"}} "#);
    store
        .metrics()
        .encode()
        .lines()
        .find_map(|l| l.strip_prefix(&prefix)?.trim().parse().ok())
        .unwrap_or(0)
}

/// A cluster where watches stay open and lists are empty, except: pods answer 403 until
/// `pods_allowed`, and kerf's GpuReactivePolicy CRD is missing unless `crd_installed`.
fn cluster(pods_allowed: Arc<AtomicBool>, crd_installed: bool) -> impl FnMut(&Recorded) -> Reply {
    move |r: &Recorded| {
        if r.query_has("watch=true") {
            return Reply::Hang;
        }
        if r.path.contains("/leases") {
            return match r.method.as_str() {
                "GET" => kube_support::status(404, "NotFound"),
                _ => {
                    let mut lease = r.body.clone();
                    lease["metadata"]["resourceVersion"] = json!("1");
                    Reply::Json(201, lease)
                }
            };
        }
        if r.path == "/api/v1/pods" && !pods_allowed.load(Ordering::SeqCst) {
            return Reply::Json(
                403,
                json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                       "message": PODS_FORBIDDEN, "reason": "Forbidden",
                       "details": {"kind": "pods"}, "code": 403}),
            );
        }
        if r.path == GPU_POLICIES && !crd_installed {
            // What the API server answers for a group/resource nothing serves: not a Status.
            return Reply::Text(404, "404 page not found".into());
        }
        Reply::Json(
            200,
            json!({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": "1"}, "items": []}),
        )
    }
}

fn lists_of(log: &kube_support::Log, path: &str) -> usize {
    requests(log)
        .iter()
        .filter(|r| r.path == path && !r.query_has("watch=true"))
        .count()
}

#[tokio::test]
async fn a_forbidden_list_is_logged_once_counted_and_shown_on_readyz_until_it_works() {
    let (logs, _guard) = Logs::capture();
    let pods_allowed = Arc::new(AtomicBool::new(false));
    let (client, log) = mock(cluster(pods_allowed.clone(), true));
    let store = Store::new();
    let reader = Reader::start_with_store(client, store.clone());

    // The first list and at least one retry (after the watcher's 0.8–1.6 s backoff) refused.
    eventually(20, "two refused lists of pods", || {
        watch_errors(&store, "Pod", "forbidden") >= 2
    })
    .await;
    eventually(20, "every other cache synced", || {
        reader.unsynced_kinds() == ["Pod"]
    })
    .await;
    assert!(lists_of(&log, "/api/v1/pods") >= 2);

    let (ready, body) = store.health().readiness(store.is_ready());
    assert!(!ready);
    let (head, errors) = body.split_once("last errors:\n").expect(&body);
    assert_eq!(
        head,
        "not ready: waiting for the caches to sync\n\
         caches not synced (1 of 30): Pod\n\
         annotations read back: not yet (they are read once every cache has synced)\n"
    );
    let (dependency, message) = errors.trim_end().split_once("): ").expect(errors);
    assert!(dependency.starts_with("  Pod ("), "{errors}");
    assert_eq!(message, pods_forbidden_message());

    // Logged at warn with the resource and the API server's message, once for every refusal.
    let warned = logs.lines("WARN", "403 Forbidden");
    assert_eq!(warned.len(), 1, "rate-limited to one line: {warned:#?}");
    assert!(
        warned[0].ends_with(&format!(
            "kerf::sources::kube::watch_errors: Pod: {}; retrying resource=Pod reason=forbidden",
            pods_forbidden_message()
        )),
        "{}",
        warned[0]
    );

    // RBAC fixed: the next retry lists pods, the cache syncs and the error is gone.
    pods_allowed.store(true, Ordering::SeqCst);
    tokio::time::timeout(Duration::from_secs(30), reader.wait_synced())
        .await
        .expect("the pods cache syncs once the list is allowed");
    assert_eq!(store.health().last_error("Pod"), None);
    assert_eq!(
        store.health().readiness(false).1,
        "not ready: reading the annotations back\ncaches: all 30 synced\n\
         annotations read back: not yet (they are read once every cache has synced)\n"
    );
    assert_eq!(logs.lines("INFO", "Pod: list/watch works again").len(), 1);
}

#[tokio::test]
async fn a_missing_crd_names_the_kubectl_apply_fix() {
    let (logs, _guard) = Logs::capture();
    let (client, _log) = mock(cluster(Arc::new(AtomicBool::new(true)), false));
    let store = Store::new();
    let reader = Reader::start_with_store(client, store.clone());
    eventually(20, "the GpuReactivePolicy list failed", || {
        reader.health().last_error("GpuReactivePolicy").is_some()
    })
    .await;
    eventually(20, "every other cache synced", || {
        reader.unsynced_kinds() == ["GpuReactivePolicy"]
    })
    .await;
    assert_eq!(
        reader.health().last_error("GpuReactivePolicy").as_deref(),
        Some(CRD_MISSING_MESSAGE)
    );
    assert_eq!(
        reader.failing_unsynced(),
        [("GpuReactivePolicy", CRD_MISSING_MESSAGE.to_string())]
    );
    assert!(watch_errors(&store, "GpuReactivePolicy", "crd_missing") >= 1);
    let warned = logs.lines("WARN", "GpuReactivePolicy");
    assert_eq!(warned.len(), 1, "{warned:#?}");
    assert!(
        warned[0].ends_with(&format!(
            "GpuReactivePolicy: {CRD_MISSING_MESSAGE}; retrying resource=GpuReactivePolicy reason=crd_missing"
        )),
        "{}",
        warned[0]
    );
}

#[tokio::test]
async fn the_reconciler_gives_up_when_watches_keep_failing_past_the_sync_timeout() {
    let (client, _log) = mock(cluster(Arc::new(AtomicBool::new(false)), false));
    let store = Store::new();
    let run = kerf::reconcile::cluster::run(
        client,
        store.clone(),
        ReconcilerConfig {
            namespace: "kerf-system".into(),
            step_seconds: 15,
            cache_sync_timeout: Duration::from_secs(1),
        },
    );
    let err = tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .expect("the reconciler gives up")
        .expect_err("and says why");
    assert_eq!(
        format!("{err:#}"),
        format!(
            "the caches did not sync within 1s; still failing: GpuReactivePolicy: \
             {CRD_MISSING_MESSAGE}; Pod: {}",
            pods_forbidden_message()
        )
    );
    assert!(!store.is_ready());
}

const ROLLOUTS: &str = "/apis/argoproj.io/v1alpha1/rollouts";

/// Samples the number of LISTs of `path` every minute for `minutes` minutes (time simulated).
async fn lists_per_minute(log: &kube_support::Log, path: &str, minutes: usize) -> Vec<usize> {
    let mut per_minute = Vec::new();
    let mut before = lists_of(log, path);
    for _ in 0..minutes {
        tokio::time::sleep(Duration::from_secs(60)).await;
        let now = lists_of(log, path);
        per_minute.push(now - before);
        before = now;
    }
    per_minute
}

/// A kind whose CRD is not installed (Argo Rollouts here): asked again with a growing backoff,
/// to one list every few minutes, each 404 counted (30 minutes, time simulated). kube-runtime's
/// own backoff, reset by the `Init` before every list, asked about once a second.
#[tokio::test(start_paused = true)]
async fn a_missing_crd_is_listed_again_every_few_minutes_and_counted() {
    let (client, log) = mock(|r: &Recorded| {
        if r.path == ROLLOUTS {
            return Reply::Text(404, "404 page not found".into());
        }
        cluster(Arc::new(AtomicBool::new(true)), true)(r)
    });
    let store = Store::new();
    let reader = Reader::start_with_store(client, store.clone());
    tokio::time::timeout(Duration::from_secs(60), reader.wait_synced())
        .await
        .expect("a kind kerf can do without holds no readiness");
    let per_minute = lists_per_minute(&log, ROLLOUTS, 30).await;
    let total = lists_of(&log, ROLLOUTS);
    assert!(
        (10..=18).contains(&total),
        "{total} lists in 30 minutes: {per_minute:?}"
    );
    assert!(
        per_minute[10..].iter().all(|&n| n <= 1),
        "at most one list a minute once backed off: {per_minute:?}"
    );
    assert!(
        per_minute[20..].iter().sum::<usize>() <= 3,
        "about one list every five minutes: {per_minute:?}"
    );
    assert_eq!(
        watch_errors(&store, "Rollout", "crd_missing"),
        total as u64,
        "every 404 counted"
    );
    assert_eq!(reader.health().last_error("Rollout"), None, "not an error");
}

/// Any failing list backs off too: pods answered 500 for 10 minutes are listed about every
/// 30 s once backed off (not every second), each failure counted; then they list again.
#[tokio::test(start_paused = true)]
async fn a_failing_list_backs_off_exponentially_and_every_failure_is_counted() {
    let failing = Arc::new(AtomicBool::new(true));
    let f = failing.clone();
    let (client, log) = mock(move |r: &Recorded| {
        if r.path == "/api/v1/pods" && f.load(Ordering::SeqCst) && !r.query_has("watch=true") {
            return kube_support::status(500, "InternalError");
        }
        cluster(Arc::new(AtomicBool::new(true)), true)(r)
    });
    let store = Store::new();
    let reader = Reader::start_with_store(client, store.clone());
    let per_minute = lists_per_minute(&log, "/api/v1/pods", 10).await;
    let total = lists_of(&log, "/api/v1/pods");
    assert!(
        (20..=30).contains(&total),
        "{total} lists in 10 minutes: {per_minute:?}"
    );
    assert!(
        per_minute[2..].iter().all(|&n| (1..=3).contains(&n)),
        "two a minute once backed off (30 s ± 20 %): {per_minute:?}"
    );
    assert_eq!(watch_errors(&store, "Pod", "api_error"), total as u64);
    assert!(!reader.is_synced());
    failing.store(false, Ordering::SeqCst);
    tokio::time::timeout(Duration::from_secs(60), reader.wait_synced())
        .await
        .expect("pods list again within the longest delay");
    assert_eq!(reader.health().last_error("Pod"), None);
}

/// A watch the API server answers with a plain HTTP 410 (not a watch ERROR event, as a proxy
/// or an aggregated server does): kerf lists again and sees what changed, instead of retrying
/// the expired resourceVersion.
#[tokio::test(start_paused = true)]
async fn a_watch_answered_410_lists_again() {
    let pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web-1", "namespace": "shop", "uid": "u1", "resourceVersion": "7"},
        "spec": {"containers": [{"name": "app", "image": "x"}]}});
    let mut pod_lists = 0;
    let (client, log) = mock(move |r: &Recorded| {
        if r.path == "/api/v1/pods" {
            if r.query_has("watch=true") {
                return match r.query_has("resourceVersion=1") {
                    true => kube_support::status(410, "Expired"),
                    false => Reply::Hang,
                };
            }
            // The first list is at version 1; the pod came after.
            pod_lists += 1;
            let (version, items) = match pod_lists {
                1 => ("1", vec![]),
                _ => ("7", vec![pod.clone()]),
            };
            return Reply::Json(
                200,
                json!({"apiVersion": "v1", "kind": "PodList",
                       "metadata": {"resourceVersion": version}, "items": items}),
            );
        }
        cluster(Arc::new(AtomicBool::new(true)), true)(r)
    });
    let store = Store::new();
    let reader = Reader::start_with_store(client, store.clone());
    tokio::time::timeout(Duration::from_secs(60), reader.wait_synced())
        .await
        .unwrap();
    eventually(60, "a second list of pods", || {
        lists_of(&log, "/api/v1/pods") >= 2
    })
    .await;
    let watches: Vec<String> = requests(&log)
        .iter()
        .filter(|r| r.path == "/api/v1/pods" && r.query_has("watch=true"))
        .map(|r| r.query.clone())
        .collect();
    let expired = watches
        .iter()
        .filter(|q| q.split('&').any(|p| p == "resourceVersion=1"))
        .count();
    assert_eq!(
        expired, 1,
        "the expired resourceVersion was asked for once: {watches:#?}"
    );
    assert!(watch_errors(&store, "Pod", "expired") >= 1);
    let (snapshot, _) = reader.snapshot();
    assert!(
        snapshot
            .pods
            .iter()
            .any(|p| p.metadata.name.as_deref() == Some("web-1")),
        "the relist's pod is read"
    );
}
