//! No churn: a recommendation that moves by less than the recipe's rounding writes nothing.
//! The Lease holder's cycles over usage that holds still but for noise below the rounding, with
//! the usage history kept between them and without: each cycle reads the Deployment and the
//! RightsizingRecommendations back from the mock API server that keeps them as the API server
//! does (server-side apply, managedFields), its writes go to the real cluster writer, and the
//! policy status it wrote is laid over the next cycle's (the in-memory writer; the mock does not
//! keep it). The first cycle writes the change, the next records that the template carries it; two
//! hours of sliding after that send no request.

use std::sync::{Arc, Mutex};

use kerf::core::persisted::PersistedRecommendation;
use kerf::core::snapshot::Workload;

use kerf::writers::memory::MemoryWriter;

use crate::kube_support::ssa::{self, State};
use crate::kube_support::{calls, leading_writer, mock, requests};
use crate::usage_history::{POLICY, SCRAPE, T0, recommended, still_openmetrics};

#[tokio::test]
async fn usage_that_moves_less_than_the_rounding_writes_nothing_after_the_first_change() {
    let (m, source) = auto_patch_over_still_usage();
    for kept in [true, false] {
        let state = web_on_the_server();
        let (client, log) = mock(ssa::server(state.clone()));
        let (_lease, cluster_writer) = leading_writer(client);
        let history: kerf::reconcile::History = Default::default();
        let mut memory = MemoryWriter::new();
        let store = kerf::state::Store::new();
        let (mut sent, mut values) = (Vec::new(), std::collections::BTreeSet::new());
        let mut t = T0 + 3600;
        while t <= T0 + 3 * 3600 {
            let now = jiff::Timestamp::from_second(t).unwrap();
            let (mut snapshot, recommendations) = read_back(&m.snapshot, &state.lock().unwrap());
            memory.overlay(&mut snapshot);
            let cycle = kerf::reconcile::Cycle {
                snapshot: &snapshot,
                invalid: &[],
                recommendations: &recommendations,
                now,
                step_seconds: SCRAPE,
                history: kept.then_some(&history),
            };
            let (out, ops) =
                kerf::reconcile::reconcile_cycle(&cycle, &source, store.metrics()).await;
            values.insert(recommended(&out));
            let before = requests(&log).len();
            for op in ops.clone() {
                cluster_writer.apply(op).await;
            }
            let seen = requests(&log);
            let writes: Vec<(String, String)> = calls(&seen[before..])
                .into_iter()
                .filter(|(method, _)| *method != "GET")
                .map(|(m, p)| (m.to_string(), p.to_string()))
                .collect();
            sent.push(writes);
            memory.apply_all(ops, false, now);
            t += 60;
        }
        assert_eq!(
            values.len(),
            1,
            "one recommendation throughout (kept history: {kept}): {values:?}"
        );
        assert!(
            sent[0]
                .iter()
                .any(|(m, p)| m == "PATCH" && p == "/apis/apps/v1/namespaces/shop/deployments/web"),
            "the first cycle writes the template: {:?}",
            sent[0]
        );
        // The next cycle reads the template it wrote: the recommendation's `current` is now
        // the recommended value.
        assert_eq!(
            sent[1],
            [(
                "PATCH".to_string(),
                "/apis/rightsizing.kubex.ai/v1alpha1/namespaces/shop/rightsizingrecommendations/deployment-web".to_string()
            )],
            "kept history: {kept}"
        );
        let later: Vec<_> = sent[2..].iter().flatten().collect();
        assert!(
            later.is_empty(),
            "nothing sent once the change is read back (kept history: {kept}): {later:?}"
        );
        assert!(sent.len() > 100);
    }
}

/// The usage history's policy in auto-patch, and usage that holds still but for noise below the
/// rounding.
pub(crate) fn auto_patch_over_still_usage() -> (
    kerf::sources::dir::Manifests,
    kerf::metrics::file::FileSource,
) {
    let mut m = kerf::sources::dir::Manifests::default();
    let text = POLICY.replace("mode: audit-only", "mode: auto-patch");
    kerf::sources::dir::load_text(&text, "test", &mut m).unwrap();
    let source = kerf::metrics::file::FileSource::from_str(&still_openmetrics()).unwrap();
    (m, source)
}

/// The mock API server's `shop/web` Deployment: one container at 2 cores and 2Gi.
pub(crate) fn web_on_the_server() -> Arc<Mutex<State>> {
    Arc::new(Mutex::new(State::new(
        "shop",
        "web",
        &[("app", &[("cpu", "2"), ("memory", "2Gi")])],
        None,
    )))
}

/// The snapshot with the Deployment as the server holds it, and the RightsizingRecommendations.
pub(crate) fn read_back(
    manifests: &kerf::core::snapshot::Snapshot,
    state: &State,
) -> (
    kerf::core::snapshot::Snapshot,
    Vec<Arc<PersistedRecommendation>>,
) {
    let mut s = manifests.clone();
    let d: k8s_openapi::api::apps::v1::Deployment =
        serde_json::from_value(state.deployment()).unwrap();
    let mut w = Workload::from(d);
    w.labels.insert("team".into(), "shop".into());
    s.workloads.push(Arc::new(w));
    let recommendations = state
        .recommendations
        .values()
        .filter(|r| r.get("spec").is_some())
        .map(|r| {
            Arc::new(
                PersistedRecommendation::of(serde_json::from_value(r.clone()).unwrap()).unwrap(),
            )
        })
        .collect();
    (s, recommendations)
}
