//! In-cluster, the Prometheus connection comes from GlobalConfiguration `spec.prometheus`: the
//! Lease holder's cycle reaches a real Prometheus behind an authenticating proxy with the
//! bearer token file, headers and query parameters it names, and rebuilds its source when the
//! GlobalConfiguration changes (mock API server, real Prometheus, real proxy).
//! Needs `prometheus` and `promtool` (`scripts/test` installs them).

use crate::auth_proxy;
use crate::kube_support;
use crate::prometheus_support;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use auth_proxy::AuthProxy;
use kerf::reconcile::cluster::prime_store;
use kerf::reconcile::cluster::{Cycle, ReconcileCycle};
use kerf::sources::kube::Reader;
use kerf::state::Store;
use kerf::writers::kube::Writer;
use kube_support::{Recorded, Reply, mock};
use prometheus_support::TestPrometheus;
use serde_json::{Value, json};
use tokio::sync::watch;

const GLOBAL: &str = "/apis/rightsizing.kubex.ai/v1alpha1/globalconfigurations";

fn list(items: Vec<Value>) -> Reply {
    Reply::Json(
        200,
        json!({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": "1"}, "items": items}),
    )
}

fn global(version: usize, prometheus: Value) -> Value {
    json!({"apiVersion": "rightsizing.kubex.ai/v1alpha1", "kind": "GlobalConfiguration",
           "metadata": {"name": "global-config", "resourceVersion": (version + 1).to_string()},
           "spec": {"prometheus": prometheus}})
}

fn signal(metric: &str) -> Value {
    json!({"prometheus": {"metric": metric, "interpretation": "fullGPU"}})
}

/// One GPU policy over one Deployment and its pod; the GlobalConfiguration is `globals[0]`,
/// and each later entry up to `published` arrives on its watch.
fn cluster(r: &Recorded, globals: &[Value], published: &AtomicUsize, sent: &mut usize) -> Reply {
    if r.query_has("watch=true") {
        if r.path != GLOBAL {
            return Reply::Hang;
        }
        // An open watch is never answered later, so the GlobalConfiguration's watch fails
        // until there is news: the watcher retries (with backoff) and gets it.
        let upto = published.load(Ordering::SeqCst);
        if *sent == upto {
            return kube_support::status(500, "InternalError");
        }
        let events = globals[*sent + 1..=upto]
            .iter()
            .map(|g| json!({"type": "MODIFIED", "object": g}))
            .collect();
        *sent = upto;
        return Reply::Events(events);
    }
    match r.path.as_str() {
        GLOBAL => list(vec![globals[0].clone()]),
        "/apis/rightsizing.kubex.ai/v1alpha1/gpureactivepolicies" => list(vec![json!({
            "metadata": {"name": "gpu", "namespace": "ml"},
            "spec": {"experimental": {"gpuKaiContract": "v1alpha1-2026-07"},
                     "automationStrategyRef": {"name": "s"},
                     "scope": {"labelSelector": {"matchLabels": {"app": "llm"}}},
                     "metrics": {"compute": signal("kubex_gpu_container_sm_utilization_percent"),
                                 "memory": signal("kubex_gpu_container_memory_footprint_percent")}}})]),
        "/apis/rightsizing.kubex.ai/v1alpha1/automationstrategies" => list(vec![json!({
            "metadata": {"name": "s", "namespace": "ml"},
            "spec": {"experimental": {"gpuKaiContract": "v1alpha1-2026-07"}}})]),
        "/apis/apps/v1/deployments" => list(vec![json!({
            "metadata": {"name": "llm", "namespace": "ml", "labels": {"app": "llm"}},
            "spec": {"selector": {"matchLabels": {"app": "llm"}},
                     "template": {"metadata": {"labels": {"app": "llm"},
                                               "annotations": {"gpu-fraction": "0.5"}},
                                  "spec": {"containers": [{"name": "inference", "image": "i"}]}}}})]),
        "/api/v1/pods" => list(vec![json!({
            "metadata": {"name": "llm-5f7c9d8b6-x2k4p", "namespace": "ml", "labels": {"app": "llm"},
                         "annotations": {"gpu-fraction": "0.5"},
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                              "name": "llm-5f7c9d8b6", "uid": "u2", "controller": true}]},
            "spec": {"containers": [{"name": "inference", "image": "i"}]},
            "status": {"phase": "Running", "startTime": "2026-01-01T00:00:00Z"}})]),
        "/apis/apps/v1/replicasets" => list(vec![json!({
            "metadata": {"name": "llm-5f7c9d8b6", "namespace": "ml", "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "Deployment", "name": "llm", "uid": "u1",
                 "controller": true}]}})]),
        _ => list(vec![]),
    }
}

/// Every request was accepted and carried this token, tenant header and `dedup` parameter.
fn all_sent(seen: &[auth_proxy::Seen], authorization: &str, tenant: &str, dedup: &str) {
    for s in seen {
        assert!(s.accepted, "{s:?}");
        assert_eq!(s.headers["authorization"], authorization);
        assert_eq!(s.headers["x-scope-orgid"], tenant);
        let dedup = ("dedup".to_string(), dedup.to_string());
        assert!(s.query_pairs().contains(&dedup), "{s:?}");
    }
}

/// A computation now: the Lease is lost and taken again (a new holder computes at once).
async fn compute_again(cycle: &mut ReconcileCycle, lease: &watch::Sender<bool>) {
    lease.send(false).unwrap();
    cycle.run_once().await.unwrap();
    lease.send(true).unwrap();
    cycle.run_once().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_reaches_prometheus_as_the_global_configuration_says_and_follows_its_changes() {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/metrics.om"))
        .unwrap();
    let prom = TestPrometheus::start_with_openmetrics(&text);
    let proxy = AuthProxy::start(&prom.url(), Some("sa-token-1"));
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "sa-token-1\n").unwrap();
    let token_file = token.display().to_string();
    let connection = |tenant: &str, dedup: &str, token_file: &str| {
        json!({"url": proxy.url(), "requestTimeout": "5s", "bearerTokenFile": token_file,
               "headers": [{"name": "X-Scope-OrgID", "value": tenant}],
               "queryParams": [{"name": "dedup", "value": dedup}]})
    };
    let missing = dir.path().join("missing").display().to_string();
    let globals = vec![
        global(0, connection("team-a", "true", &token_file)),
        global(1, connection("team-b", "false", &token_file)),
        global(2, connection("team-c", "false", &missing)),
    ];
    let published = Arc::new(AtomicUsize::new(0));
    let (client, _log) = {
        let (globals, published) = (globals.clone(), published.clone());
        let mut sent = 0;
        mock(move |r: &Recorded| cluster(r, &globals, &published, &mut sent))
    };
    let store = Store::new();
    let reader = Reader::start_with_store(client.clone(), store.clone());
    let (lease_tx, lease) = watch::channel(true);
    let writer = Writer::spawn(client, "kerf", lease.clone(), store.metrics().clone());
    tokio::time::timeout(Duration::from_secs(10), prime_store(&reader, &store))
        .await
        .expect("caches sync");
    let mut cycle = ReconcileCycle::new(reader.clone(), writer, lease, store.clone(), 15);
    cycle.run_once().await.unwrap();
    let seen = proxy.seen();
    assert!(
        seen.iter()
            .filter(|s| s.path == "/api/v1/query_range")
            .count()
            == 2,
        "one query per signal: {seen:?}"
    );
    all_sent(&seen, "Bearer sa-token-1", "team-a", "true");
    assert_eq!(store.health().last_error("prometheus"), None);

    // The projected token rotates: read again at the next request.
    std::fs::write(&token, "sa-token-2\n").unwrap();
    proxy.accept_only("sa-token-2");
    // The GlobalConfiguration changes: the next computation uses the new settings.
    published.store(1, Ordering::SeqCst);
    kube_support::eventually(10, "the changed GlobalConfiguration", || {
        reader.snapshot().0.global.prometheus.headers[0].value == "team-b"
    })
    .await;
    proxy.clear();
    compute_again(&mut cycle, &lease_tx).await;
    let seen = proxy.seen();
    assert!(
        seen.iter().any(|s| s.path == "/api/v1/query_range"),
        "{seen:?}"
    );
    all_sent(&seen, "Bearer sa-token-2", "team-b", "false");

    // A setting that cannot work is reported on /readyz, naming the field; the last working
    // source keeps serving.
    published.store(2, Ordering::SeqCst);
    kube_support::eventually(10, "the third GlobalConfiguration", || {
        reader.snapshot().0.global.prometheus.headers[0].value == "team-c"
    })
    .await;
    proxy.clear();
    compute_again(&mut cycle, &lease_tx).await;
    let error = store.health().last_error("prometheus").expect("an error");
    assert!(
        error.contains(&format!(
            "spec.prometheus.bearerTokenFile {missing}: cannot read"
        )),
        "{error}"
    );
    assert!(!error.contains("sa-token"), "{error}");
    assert!(
        proxy
            .seen()
            .iter()
            .all(|s| s.accepted && s.headers["x-scope-orgid"] == "team-b"),
        "{:?}",
        proxy.seen()
    );
}
