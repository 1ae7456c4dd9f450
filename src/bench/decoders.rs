//! The decoders `kerf bench decode` compares on the same body; each returns the number of
//! samples it decoded (so none can skip the work).
//! Kept only for the comparison: kerf itself decodes with `metrics::decode`.

use std::collections::HashMap;

use serde::Deserialize;

use crate::metrics::decode::{KeyLabels, decode};

pub const LABELS: KeyLabels<'static> = KeyLabels {
    namespace: "namespace",
    pod: "pod",
    container: "container",
};

/// kerf's decoder (`metrics::decode`), as the Prometheus source runs it.
pub fn kerf(body: &[u8]) -> usize {
    let a = decode(LABELS, body).expect("bench body decodes");
    a.data
        .map_or(0, |d| d.result.iter().map(|g| g.points.len()).sum())
}

/// A whole JSON tree (`serde_json::from_slice::<Value>`).
pub fn value_tree(body: &[u8]) -> usize {
    let v: serde_json::Value = serde_json::from_slice(body).expect("bench body parses");
    v["data"]["result"].as_array().map_or(0, |r| {
        r.iter()
            .map(|s| s["values"].as_array().map_or(0, Vec::len))
            .sum()
    })
}

#[derive(Deserialize)]
struct Response {
    data: Data,
}
#[derive(Deserialize)]
struct Data {
    result: Vec<Series>,
}
#[derive(Deserialize)]
struct Series {
    #[serde(default)]
    metric: HashMap<String, String>,
    #[serde(default)]
    values: Vec<(f64, String)>,
}

fn samples(r: Response) -> usize {
    r.data
        .result
        .iter()
        .map(|s| {
            std::hint::black_box(&s.metric);
            s.values
                .iter()
                .filter(|(_, v)| v.parse::<f64>().is_ok())
                .count()
        })
        .sum()
}

/// Typed serde structs with owned strings, from a slice (kerf's decoder before this one).
pub fn typed(body: &[u8]) -> usize {
    samples(serde_json::from_slice(body).expect("bench body decodes"))
}

/// The same typed structs decoded by serde_json's streaming decoder, reading the body as a
/// byte stream (`from_reader`) instead of a buffered slice.
pub fn streaming(body: &[u8]) -> usize {
    samples(serde_json::from_reader(body).expect("bench body decodes"))
}
