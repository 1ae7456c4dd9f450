//! The usage history's checkpoint in the cluster: gzip-compressed JSON in ConfigMaps (a
//! ConfigMap holds 1 MiB). The history and its [`Checkpoint`] shape are the core's; the codec
//! and the ConfigMaps' names are this IO edge's.

use crate::core::recommenders::resources::summary::{CHECKPOINT_VERSION, Checkpoint, HistoryStore};

/// The usage history's checkpoint ConfigMaps: `kerf-history-<index>` in kerf's namespace, the
/// label that finds them, the `binaryData` key of each part (gzip-compressed JSON).
pub const HISTORY_CONFIGMAP_PREFIX: &str = "kerf-history-";
pub const HISTORY_LABEL: &str = "app.kubernetes.io/component";
pub const HISTORY_LABEL_VALUE: &str = "kerf-history";
pub const HISTORY_KEY: &str = "history.json.gz";

/// What a part's compressor may hold back before it is finished: a part is closed before its
/// next workload could take it past its bound.
const COMPRESSOR_SLACK: usize = 256 * 1024;

/// The history in checkpoint parts of at most about `max_bytes` each (a ConfigMap holds
/// 1 MiB), a workload never split: each part is a [`Checkpoint`] as gzip-compressed JSON, the
/// workloads streamed into it one by one (JSON of numbers compresses about 5 times, so the
/// cluster stores a fifth, and no part's JSON is held whole).
pub fn checkpoints(history: &HistoryStore, max_bytes: usize) -> Vec<Vec<u8>> {
    use std::io::Write as _;
    let source = serde_json::to_string(&history.source).expect("a string serializes");
    let head = format!("{{\"version\":{CHECKPOINT_VERSION},\"source\":{source},\"workloads\":[");
    let new_part = || {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(head.as_bytes()).expect("writes to memory");
        e
    };
    let finish = |mut e: flate2::write::GzEncoder<Vec<u8>>| {
        e.write_all(b"]}").expect("writes to memory");
        e.finish().expect("writes to memory")
    };
    let mut out = Vec::new();
    let mut part: Option<(flate2::write::GzEncoder<Vec<u8>>, usize)> = None;
    for w in history.workload_histories() {
        let json = serde_json::to_vec(&w).expect("a history serializes");
        if let Some((e, n)) = &part
            && *n > 0
            && e.get_ref().len() + json.len() + COMPRESSOR_SLACK > max_bytes
        {
            let (e, _) = part.take().expect("just matched");
            out.push(finish(e));
        }
        let (e, n) = part.get_or_insert_with(|| (new_part(), 0));
        if *n > 0 {
            e.write_all(b",").expect("writes to memory");
        }
        e.write_all(&json).expect("writes to memory");
        *n += 1;
    }
    if let Some((e, _)) = part {
        out.push(finish(e));
    }
    out
}

/// A checkpoint part as [`checkpoints`] wrote it.
pub fn read_checkpoint(part: &[u8]) -> Result<Checkpoint, CheckpointError> {
    serde_json::from_reader(std::io::BufReader::new(flate2::read::GzDecoder::new(part)))
        .map_err(CheckpointError::NotACheckpoint)
}

/// A checkpoint part kerf cannot read back (the history then starts empty for its workloads).
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("not a gzip-compressed checkpoint: {0}")]
    NotACheckpoint(serde_json::Error),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::recommenders::resources::summary::{
        ContainerHistory, Coverage, Covered, KeptWorkload, Series,
    };

    #[test]
    fn checkpoints_restore_the_history_they_were_made_of() {
        let mut h = HistoryStore::default();
        h.keep_source("{\"cpu\":\"container_cpu_usage_seconds_total\"}");
        for (w, n) in [("Deployment/web", 3), ("Deployment/api", 1)] {
            let key = ("shop".to_string(), w.to_string());
            let c = Coverage {
                window_seconds: 3600,
                step_seconds: 60,
                since: 2400,
                through: 6000,
            };
            let mut ch = ContainerHistory::default();
            for i in 0..n * 100 {
                ch.add(
                    &format!("pod-{}", i % n),
                    Series::Cpu,
                    i * 60,
                    0.1 + i as f64 * 0.01,
                );
                ch.add(&format!("pod-{}", i % n), Series::Memory, i * 60, 1e8);
            }
            ch.oom_at(1200);
            h.workloads.insert(
                key,
                KeptWorkload {
                    covered: Some(Covered { cpu: c, memory: c }),
                    containers: [("app".to_string(), ch)].into(),
                },
            );
        }
        let parts = checkpoints(&h, 1);
        assert_eq!(
            parts.len(),
            2,
            "one workload per part at this size, none split"
        );
        let mut back = HistoryStore::default();
        for p in parts {
            back.restore(read_checkpoint(&p).unwrap());
        }
        assert_eq!(back.workload_histories(), h.workload_histories());
        assert_eq!(back.source, h.source);
        back.keep_source("{\"cpu\":\"other\"}");
        assert!(back.workloads.is_empty(), "other metrics: another history");
        let stale = Checkpoint {
            source: None,
            version: CHECKPOINT_VERSION + 1,
            workloads: read_checkpoint(&checkpoints(&h, 1 << 20)[0])
                .unwrap()
                .workloads,
        };
        let mut other = HistoryStore::default();
        other.restore(stale);
        assert!(other.workloads.is_empty(), "another format is not read");
    }
}
