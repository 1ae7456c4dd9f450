//! Property tests over the review handler (the same function the cargo-fuzz target drives):
//! arbitrary bytes and structural mutations of real AdmissionReview fixtures never panic, never
//! hit the internal-error safety net, and every patch returned applies to the object.

#[path = "webhook_support/mod.rs"]
mod support;

use std::sync::Arc;

use kerf::api::WorkloadKind;
use kerf::core::model::{
    CoordinatedHpa, GpuRecommendation, ResourceRequests, WorkloadKey, WorkloadState,
};
use kerf::server::handle_review;
use kerf::server::review::Outcome;
use kerf::state::Store;
use proptest::prelude::*;
use serde_json::Value;

fn store() -> Arc<Store> {
    let s = Store::new();
    let gpu = |pairs: &[(&str, f64)]| {
        let mut st = WorkloadState {
            gpu: Some(GpuRecommendation {
                containers: pairs.iter().map(|(c, v)| (c.to_string(), *v)).collect(),
                driving_metric: None,
                policy: None,
                updated_at: None,
                by_policy: Default::default(),
            }),
            ..Default::default()
        };
        for (c, _) in pairs {
            st.resources.insert(
                c.to_string(),
                ResourceRequests {
                    cpu_millis: Some(300),
                    memory_bytes: Some(300 << 20),
                },
            );
        }
        st
    };
    s.put(
        WorkloadKey::new("ml", WorkloadKind::Deployment, "llm-serve"),
        gpu(&[("server", 0.84), ("metrics-exporter", 1.5)]),
    );
    s.put(
        WorkloadKey::new("ml", WorkloadKind::StatefulSet, "trainer"),
        gpu(&[("trainer", 2.7)]),
    );
    s.put(
        WorkloadKey::new("ml", WorkloadKind::Job, "nightly-eval-29034720"),
        gpu(&[("evaluator", 0.2)]),
    );
    s.put(
        WorkloadKey::new("ops", WorkloadKind::DaemonSet, "gpu-probe"),
        gpu(&[("probe", 0.5)]),
    );
    s.put(
        WorkloadKey::new("search", WorkloadKind::Deployment, "embedder"),
        gpu(&[("embedder", 3.0)]),
    );
    s.put(
        WorkloadKey::new("shop", WorkloadKind::Deployment, "web"),
        WorkloadState {
            hpa: Some(CoordinatedHpa {
                hpa_name: "web".into(),
                resource: "cpu".into(),
                target_before: 60,
                target_after: 70,
            }),
            ..Default::default()
        },
    );
    s
}

const FIXTURES: [&str; 7] = [
    "pod-kai-fraction.json",
    "pod-nvidia-gpu.json",
    "pod-sidecar-init.json",
    "pod-no-maps.json",
    "pod-escaped-keys.json",
    "hpa-cpu.json",
    "pod-large.json",
];

fn check(body: &[u8], store: &Store) {
    let reply = handle_review(body, store);
    assert!(
        reply.status == 200 || reply.status == 400,
        "status {}",
        reply.status
    );
    if reply.status == 400 {
        return;
    }
    assert!(
        !reply.caught_panic,
        "the builder panicked: {:?}",
        reply.detail
    );
    let resp: Value = serde_json::from_slice(&reply.body).expect("response is JSON");
    assert_eq!(resp["response"]["allowed"], true);
    let review: Value = serde_json::from_slice(body).expect("a 200 came from JSON");
    assert_eq!(resp["response"]["uid"], review["request"]["uid"]);
    if resp["response"].get("patch").is_some() {
        assert_eq!(reply.outcome, Outcome::Patched);
        let _ = support::apply(&review["request"]["object"], &resp);
    }
}

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        "[a-z~/.0-9-]{0,12}".prop_map(Value::String),
        prop_oneof![
            Just("0.5"),
            Just("1"),
            Just("2"),
            Just("nvidia.com/gpu"),
            Just("gpu-fraction"),
            Just("-1"),
            Just("1e400")
        ]
        .prop_map(|s| Value::String(s.into())),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-z~/.-]{0,10}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Every JSON pointer inside `v`.
fn pointers(v: &Value, at: String, out: &mut Vec<String>) {
    out.push(at.clone());
    match v {
        Value::Object(m) => {
            for (k, c) in m {
                pointers(
                    c,
                    format!("{at}/{}", k.replace('~', "~0").replace('/', "~1")),
                    out,
                );
            }
        }
        Value::Array(a) => {
            for (i, c) in a.iter().enumerate() {
                pointers(c, format!("{at}/{i}"), out);
            }
        }
        _ => {}
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        check(&bytes, &store());
    }

    #[test]
    fn mutated_fixtures_never_panic(
        which in 0..FIXTURES.len(),
        picks in prop::collection::vec((any::<prop::sample::Index>(), arb_json(), any::<bool>()), 1..4),
    ) {
        let store = store();
        let mut review = support::fixture(FIXTURES[which]);
        for (idx, value, delete) in picks {
            let mut ptrs = Vec::new();
            pointers(&review, String::new(), &mut ptrs);
            // Never touch the envelope itself, only what is inside `request`.
            ptrs.retain(|p| p.starts_with("/request/") && p != "/request/uid");
            if ptrs.is_empty() { break; }
            let p = idx.get(&ptrs).clone();
            let (parent, last) = p.rsplit_once('/').unwrap();
            if delete {
                match review.pointer_mut(parent) {
                    Some(Value::Object(m)) => { m.remove(&last.replace("~1", "/").replace("~0", "~")); }
                    Some(Value::Array(a)) => { if let Ok(i) = last.parse::<usize>() { if i < a.len() { a.remove(i); } } }
                    _ => {}
                }
            } else if let Some(slot) = review.pointer_mut(&p) {
                *slot = value;
            }
        }
        check(&serde_json::to_vec(&review).unwrap(), &store);
    }
}

#[test]
fn fixtures_themselves_pass_the_check() {
    let store = store();
    for f in FIXTURES {
        check(&serde_json::to_vec(&support::fixture(f)).unwrap(), &store);
    }
}

/// Found by cargo-fuzz: a kind named like the safety net's message must not look like a panic.
#[test]
fn fuzz_regressions_pass_the_check() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/regressions");
    let store = store();
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).expect("fuzz/regressions exists") {
        let bytes = std::fs::read(entry.unwrap().path()).unwrap();
        check(&bytes, &store);
        let reply = handle_review(&bytes, &store);
        assert!(!reply.caught_panic);
        n += 1;
    }
    assert!(n > 0, "no regression inputs found in {}", dir.display());
}

/// Found by `mutated_fixtures_never_panic`: serde accepts an array for a struct, so `"spec": []`
/// once produced a patch for `/spec/schedulerName` that does not apply. Now a decode error.
#[test]
fn array_in_place_of_an_object_is_not_patched() {
    let store = store();
    for f in FIXTURES {
        for pointer in [
            "/request/object/spec",
            "/request/object/metadata",
            "/request/object/spec/containers/0",
        ] {
            let mut review = support::fixture(f);
            if let Some(slot) = review.pointer_mut(pointer) {
                *slot = serde_json::json!([]);
                check(&serde_json::to_vec(&review).unwrap(), &store);
            }
        }
    }
}
