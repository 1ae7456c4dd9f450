//! The usage history's checkpoint against the mock API server: each part a ConfigMap
//! `kerf-history-<index>` in kerf's namespace (server-side apply as `kerf`), parts left from a
//! larger checkpoint removed; and read back by the reader, in index order.

use std::time::Duration;

use kerf::core::writes::{CheckpointWrite, WriteOp};
use kerf::writers::kube::{Writer, WriterConfig};
use serde_json::json;
use tokio::sync::watch;

use crate::kube_support::{Recorded, Reply, calls, mock, requests};

const CONFIGMAPS: &str = "/api/v1/namespaces/kerf-system/configmaps";

fn configmap(name: &str, part: &str) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": name, "namespace": "kerf-system",
                        "labels": {"app.kubernetes.io/component": "kerf-history"}},
           "data": {"history.json": part}})
}

#[tokio::test]
async fn a_checkpoint_is_applied_part_by_part_and_the_parts_beyond_it_removed() {
    let (client, log) = mock(|r: &Recorded| {
        if r.method == "GET" && r.path == CONFIGMAPS {
            return Reply::Json(
                200,
                json!({"apiVersion": "v1", "kind": "ConfigMapList", "metadata": {},
                       "items": [configmap("kerf-history-0", "{}"), configmap("kerf-history-1", "{}"),
                                 configmap("kerf-history-2", "{}")]}),
            );
        }
        Reply::Json(200, r.body.clone())
    });
    let (_lease, lease_rx) = watch::channel(true);
    let mut cfg = WriterConfig::new("kerf-system");
    cfg.backoff = Duration::from_millis(10);
    cfg.read_only = true;
    let writer = Writer::spawn_with(client, lease_rx, cfg);
    let parts = vec![
        "{\"version\":1,\"workloads\":[]}".to_string(),
        "{\"version\":1,\"workloads\":[]}".into(),
    ];
    writer
        .apply(WriteOp::Checkpoint(Box::new(CheckpointWrite {
            parts: parts.clone(),
        })))
        .await;
    let seen = requests(&log);
    let paths: Vec<(&str, &str)> = calls(&seen);
    assert_eq!(
        paths,
        [
            (
                "PATCH",
                "/api/v1/namespaces/kerf-system/configmaps/kerf-history-0"
            ),
            (
                "PATCH",
                "/api/v1/namespaces/kerf-system/configmaps/kerf-history-1"
            ),
            ("GET", CONFIGMAPS),
            (
                "DELETE",
                "/api/v1/namespaces/kerf-system/configmaps/kerf-history-2"
            ),
        ],
        "written under readOnly too: it is kerf's own state"
    );
    assert_eq!(seen[0].content_type, "application/apply-patch+yaml");
    assert!(seen[0].query_has("fieldManager=kerf"), "{}", seen[0].query);
    assert_eq!(seen[1].body["data"]["history.json"], parts[1].as_str());
    assert_eq!(
        seen[0].body["metadata"]["labels"]["app.kubernetes.io/component"],
        "kerf-history"
    );
}
