//! Fuzzes the admission review handler (bytes → response) with a store that has a
//! recommendation for the workloads the seed corpus (tests/fixtures/admission) refers to.
//! Run: `cargo +nightly fuzz run admission_review fuzz/corpus/admission_review ../tests/fixtures/admission`
#![no_main]

use std::sync::{Arc, OnceLock};

use kerf::api::WorkloadKind;
use kerf::core::model::{CoordinatedHpa, GpuRecommendation, WorkloadKey, WorkloadState};
use kerf::state::Store;
use libfuzzer_sys::fuzz_target;

fn store() -> &'static Arc<Store> {
    static STORE: OnceLock<Arc<Store>> = OnceLock::new();
    STORE.get_or_init(|| {
        let s = Store::new();
        let gpu = |pairs: &[(&str, f64)]| WorkloadState {
            gpu: Some(GpuRecommendation {
                containers: pairs.iter().map(|(c, v)| (c.to_string(), *v)).collect(),
                driving_metric: None,
                policy: None,
                updated_at: None,
                by_policy: Default::default(),
            }),
            ..Default::default()
        };
        s.put(
            WorkloadKey::new("ml", WorkloadKind::Deployment, "llm-serve"),
            gpu(&[("server", 0.84)]),
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
    })
}

fuzz_target!(|data: &[u8]| {
    let reply = kerf::server::handle_review(data, store());
    assert!(reply.status == 200 || reply.status == 400);
    // The handler's catch_unwind would hide a builder panic; surface it to the fuzzer.
    assert!(!reply.caught_panic, "{:?}", reply.detail);
    if reply.status == 200 {
        let _: serde_json::Value = serde_json::from_slice(&reply.body).expect("response is JSON");
    }
});
