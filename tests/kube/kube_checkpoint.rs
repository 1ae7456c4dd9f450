//! The usage history's checkpoint against the mock API server: each part a ConfigMap
//! `kerf-history-<index>` in kerf's namespace (server-side apply as `kerf`, the part
//! gzip-compressed in `binaryData`), parts left from a larger checkpoint removed; and read back
//! by the reader, in index order, into the history it was made of.

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
           "binaryData": {"history.json.gz": part}})
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
    let parts = vec![b"first part".to_vec(), b"second part".to_vec()];
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
    use base64::Engine as _;
    assert_eq!(
        seen[1].body["binaryData"]["history.json.gz"],
        base64::engine::general_purpose::STANDARD.encode(&parts[1])
    );
    assert_eq!(
        seen[0].body["metadata"]["labels"]["app.kubernetes.io/component"],
        "kerf-history"
    );
}

/// What the writer applied, the reader lists back (in index order, whatever order the API
/// server lists them in), and it restores the history the parts were made of.
#[tokio::test]
async fn a_checkpoint_the_writer_applied_is_read_back_into_its_history() {
    use kerf::core::recommenders::resources::summary::{
        ContainerHistory, Coverage, Covered, HistoryStore, KeptWorkload, Series,
    };
    let mut history = HistoryStore::default();
    history.keep_source("{}");
    for w in 0..200 {
        let c = Coverage {
            window_seconds: 3600,
            step_seconds: 60,
            since: 0,
            through: 3600,
        };
        let mut ch = ContainerHistory::default();
        // Values that vary as usage does: the parts compress as a real history's do.
        let mut x: u64 = 0x9e37_79b9 + w as u64;
        for i in 0..600 {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            let pod = format!("web-{w}-{}", i % 3);
            ch.add(&pod, Series::Cpu, i * 60, 0.1 + (x >> 40) as f64 * 1e-8);
            ch.add(
                &pod,
                Series::Memory,
                i * 60,
                1e8 + (x >> 20 & 0xffff) as f64 * 1e3,
            );
        }
        history.workloads.insert(
            ("shop".into(), format!("Deployment/web-{w:03}")),
            KeptWorkload {
                covered: Some(Covered { cpu: c, memory: c }),
                containers: [("app".to_string(), ch)].into(),
            },
        );
    }
    let parts = kerf::checkpoint::checkpoints(&history, 280_000);
    assert!(
        parts.len() > 2,
        "{:?}",
        parts.iter().map(Vec::len).collect::<Vec<_>>()
    );
    assert!(parts.iter().all(|p| p.len() <= 280_000));

    // The writer's applies, kept by name.
    let kept = std::sync::Arc::new(std::sync::Mutex::new(Vec::<serde_json::Value>::new()));
    let applied = kept.clone();
    let (client, _log) = mock(move |r: &Recorded| {
        if r.method == "PATCH" {
            applied.lock().unwrap().push(r.body.clone());
        }
        if r.method == "GET" && r.path == CONFIGMAPS {
            return Reply::Json(
                200,
                json!({"apiVersion": "v1", "kind": "ConfigMapList", "metadata": {}, "items": []}),
            );
        }
        Reply::Json(200, r.body.clone())
    });
    let (_lease, lease_rx) = watch::channel(true);
    let mut cfg = WriterConfig::new("kerf-system");
    cfg.backoff = Duration::from_millis(10);
    let writer = Writer::spawn_with(client, lease_rx, cfg);
    writer
        .apply(WriteOp::Checkpoint(Box::new(CheckpointWrite {
            parts: parts.clone(),
        })))
        .await;
    let mut items = kept.lock().unwrap().clone();
    assert_eq!(items.len(), parts.len());
    items.reverse();

    let (client, _log) = mock(move |r: &Recorded| {
        if r.method == "GET" && r.path == CONFIGMAPS {
            return Reply::Json(
                200,
                json!({"apiVersion": "v1", "kind": "ConfigMapList", "metadata": {}, "items": items}),
            );
        }
        Reply::Hang
    });
    let reader = kerf::sources::kube::Reader::start(client).protecting("kerf-system");
    let read = reader.history_checkpoints().await.unwrap();
    assert_eq!(read, parts, "in index order");
    let mut back = HistoryStore::default();
    for p in &read {
        back.restore(kerf::checkpoint::read_checkpoint(p).unwrap());
    }
    assert_eq!(back.workload_histories(), history.workload_histories());
}
