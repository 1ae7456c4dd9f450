//! Property tests over the review handler (the same function the cargo-fuzz target drives):
//! arbitrary bytes and structural mutations of real AdmissionReview fixtures never panic, never
//! hit the internal-error safety net, and every patch returned applies to the object.

use crate::support;
use std::sync::Arc;

use kerf::api::WorkloadKind;
use kerf::core::model::{
    CoordinatedHpa, GpuRecommendation, ResourceRequests, WorkloadKey, WorkloadState,
};
use kerf::server::handle_review;
use kerf::server::review::Outcome;
use kerf::state::Store;
use proptest::prelude::*;
use proptest::strategy::ValueTree;
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

/// The review handler's answer to `body`, checked: no panic, a 200 (allowed, the request's uid,
/// a patch only with outcome `patched`, and one that applies to the object) or a 400. Returns
/// the outcome and the AdmissionReview response of a 200; `None` for a 400 (the body never
/// reached the decision: not an AdmissionReview).
fn check(body: &[u8], store: &Store) -> Option<(Outcome, Value)> {
    let reply = handle_review(body, store);
    assert!(
        reply.status == 200 || reply.status == 400,
        "status {}",
        reply.status
    );
    if reply.status == 400 {
        assert_eq!(reply.outcome, Outcome::BadRequest);
        return None;
    }
    assert!(
        !reply.caught_panic,
        "the builder panicked: {:?}",
        reply.detail
    );
    let resp: Value = serde_json::from_slice(&reply.body).expect("response is JSON");
    assert_eq!(resp["response"]["allowed"], true);
    let review: Value = serde_json::from_slice(body).unwrap_or_else(|e| {
        // serde skips the fields kerf does not read without checking their UTF-8, so invalid
        // UTF-8 inside such a string still gets an answer (the API server only sends valid
        // JSON). Nothing else may: the body must be JSON once those bytes are replaced.
        assert!(
            std::str::from_utf8(body).is_err(),
            "a 200 for a body that is not JSON: {e}"
        );
        serde_json::from_str(&String::from_utf8_lossy(body))
            .unwrap_or_else(|e| panic!("a 200 for a body that is not JSON: {e}"))
    });
    assert_eq!(resp["response"]["uid"], review["request"]["uid"]);
    if resp["response"].get("patch").is_some() {
        assert_eq!(reply.outcome, Outcome::Patched);
        let _ = support::apply(&review["request"]["object"], &resp);
    }
    Some((reply.outcome, resp))
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

/// One byte-level edit of a body.
#[derive(Clone, Debug)]
enum Edit {
    Overwrite(prop::sample::Index, u8),
    Insert(prop::sample::Index, u8),
    Delete(prop::sample::Index),
}

fn arb_edit() -> impl Strategy<Value = Edit> {
    // Mostly printable ASCII: inside a string it keeps the JSON valid, so the edited review
    // still gets past the envelope and exercises the decoder and the patch builder.
    let byte = prop_oneof![4 => 0x20u8..0x7f, 1 => any::<u8>()];
    prop_oneof![
        (any::<prop::sample::Index>(), byte.clone()).prop_map(|(i, b)| Edit::Overwrite(i, b)),
        (any::<prop::sample::Index>(), byte).prop_map(|(i, b)| Edit::Insert(i, b)),
        any::<prop::sample::Index>().prop_map(Edit::Delete),
    ]
}

/// Request bodies: arbitrary bytes, and (three times as often) a fixture, compact, with a few
/// byte edits, so that a good share of the inputs are AdmissionReviews that reach the decoder.
fn arb_body() -> impl Strategy<Value = Vec<u8>> {
    let edited =
        (0..FIXTURES.len(), prop::collection::vec(arb_edit(), 0..4)).prop_map(|(which, edits)| {
            let mut body = serde_json::to_vec(&support::fixture(FIXTURES[which])).unwrap();
            for edit in edits {
                match edit {
                    Edit::Overwrite(i, b) if !body.is_empty() => *i.get_mut(&mut body) = b,
                    Edit::Insert(i, b) => {
                        let at = i.index(body.len() + 1);
                        body.insert(at, b);
                    }
                    Edit::Delete(i) if !body.is_empty() => {
                        let at = i.index(body.len());
                        body.remove(at);
                    }
                    _ => {}
                }
            }
            body
        });
    prop_oneof![
        1 => prop::collection::vec(any::<u8>(), 0..512),
        3 => edited,
    ]
}

/// Any request body: never a panic, never the safety net, a 200 or a 400 (see `check`). Counts
/// how many inputs got past the envelope to the decoder (a 200), by outcome, and reports it; too
/// few would mean the property mostly exercised the 400 path.
#[test]
fn arbitrary_bytes_never_panic() {
    const CASES: u32 = 512;
    let store = store();
    let reached: std::cell::RefCell<std::collections::BTreeMap<&str, u32>> = Default::default();
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: CASES,
        source_file: Some(file!()),
        ..ProptestConfig::default()
    });
    let result = runner.run(&arb_body(), |body| {
        let outcome = check(&body, &store).map_or("bad request (400)", |(o, _)| o.as_str());
        *reached.borrow_mut().entry(outcome).or_default() += 1;
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    let reached = reached.into_inner();
    let total: u32 = reached.values().sum();
    let decoded = total - reached.get("bad request (400)").copied().unwrap_or(0);
    eprintln!(
        "arbitrary_bytes_never_panic: {decoded} of {total} inputs reached the decoder; by outcome: {reached:?}"
    );
    assert!(
        decoded >= total / 4,
        "only {decoded} of {total} inputs reached the decoder (by outcome: {reached:?})"
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

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
        check(&serde_json::to_vec(&support::fixture(f)).unwrap(), &store)
            .unwrap_or_else(|| panic!("{f} is not an AdmissionReview"));
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
/// once produced a patch for `/spec/schedulerName` that does not apply. Now a decode error:
/// allowed, no patch, a warning.
#[test]
fn array_in_place_of_an_object_is_not_patched() {
    let store = store();
    let mut replaced = Vec::new();
    for f in FIXTURES {
        for pointer in [
            "/request/object/spec",
            "/request/object/metadata",
            "/request/object/spec/containers/0",
        ] {
            let mut review = support::fixture(f);
            if let Some(slot) = review.pointer_mut(pointer) {
                *slot = serde_json::json!([]);
                let (outcome, resp) = check(&serde_json::to_vec(&review).unwrap(), &store)
                    .unwrap_or_else(|| panic!("{f} {pointer}: a 400"));
                assert_eq!(outcome, Outcome::Error, "{f} {pointer}: {resp}");
                assert!(
                    resp["response"].get("patch").is_none(),
                    "{f} {pointer}: patched: {resp}"
                );
                assert!(
                    resp["response"]["warnings"][0]
                        .as_str()
                        .is_some_and(|w| w.contains("could not be decoded")),
                    "{f} {pointer}: {resp}"
                );
                replaced.push(format!("{f} {pointer}"));
            }
        }
    }
    // Every fixture has a spec and metadata; every pod fixture a first container.
    assert_eq!(
        replaced.len(),
        2 * FIXTURES.len() + FIXTURES.iter().filter(|f| f.starts_with("pod-")).count(),
        "{replaced:#?}"
    );
}

/// `v` with every object's keys in sorted order: objects equal as JSON compare equal as text.
fn canonical(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            Value::Object(
                keys.into_iter()
                    .map(|k| (k.clone(), canonical(&m[k])))
                    .collect(),
            )
        }
        Value::Array(a) => Value::Array(a.iter().map(canonical).collect()),
        other => other.clone(),
    }
}

/// What a review body comes to: `400`, or the outcome and the object with the patch applied
/// (as a 64-bit FNV-1a digest of its compact JSON, so the record stays small).
fn admitted_digest(body: &[u8], store: &Store) -> String {
    let reply = handle_review(body, store);
    if reply.status != 200 {
        return format!("{}", reply.status);
    }
    let resp: Value = serde_json::from_slice(&reply.body).unwrap();
    let review: Value = serde_json::from_slice(body).unwrap();
    let object = &review["request"]["object"];
    let applied = canonical(&support::apply(object, &resp));
    let text = serde_json::to_string(&applied).unwrap();
    let digest = text.bytes().fold(0xcbf29ce484222325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100000001b3)
    });
    format!("{} {digest:016x}", reply.outcome.as_str())
}

/// Every review body of the record: the fixtures, the fuzz regressions, and 600 structural
/// variants of the fixtures from a fixed seed — only bodies that are JSON (what the API server
/// sends).
fn recorded_bodies() -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for f in FIXTURES.iter().chain(&["pod-web.json"]) {
        out.push((
            f.to_string(),
            serde_json::to_vec(&support::fixture(f)).unwrap(),
        ));
    }
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/regressions");
    let mut regressions: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    regressions.sort();
    for p in regressions {
        let name = p.file_name().unwrap().to_string_lossy().to_string();
        out.push((name, std::fs::read(p).unwrap()));
    }
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let bodies = arb_body();
    let mut i = 0;
    while out.len() < 600 + 9 {
        let body = bodies.new_tree(&mut runner).unwrap().current();
        i += 1;
        if serde_json::from_slice::<Value>(&body).is_ok() {
            out.push((format!("variant-{i}"), body));
        }
    }
    out
}

/// The patched objects are those the previous admission builder made (recorded in
/// `tests/fixtures/admission-record.txt` with `KERF_RECORD_ADMISSION=1`): a change of how the
/// patch is computed may change its operations, never the pod or HPA they produce.
#[test]
fn patched_objects_are_those_on_record() {
    let store = store();
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/admission-record.txt");
    let now: Vec<String> = recorded_bodies()
        .iter()
        .map(|(name, body)| format!("{name} {}", admitted_digest(body, &store)))
        .collect();
    if std::env::var_os("KERF_RECORD_ADMISSION").is_some() {
        std::fs::write(&path, now.join("\n") + "\n").unwrap();
        return;
    }
    let record = std::fs::read_to_string(&path).expect("the record exists");
    let record: Vec<&str> = record.lines().collect();
    assert_eq!(record.len(), now.len());
    let patched = record.iter().filter(|l| l.contains(" patched ")).count();
    assert!(patched >= 100, "only {patched} patched objects on record");
    for (want, got) in record.iter().zip(&now) {
        assert_eq!(*want, got, "the admitted object differs from the record");
    }
}
