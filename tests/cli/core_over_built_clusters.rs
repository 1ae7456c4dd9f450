//! The core's rules over clusters the IO edge builds: manifests read from text (the directory
//! source's parser) and the bench's synthetic fleet. The core crate cannot reach either, so these
//! tests live on this side of it.

mod grouping {
    use kerf::core::grouping::*;
    use kerf::core::snapshot::Snapshot;

    /// A Rollout that references a Deployment takes that Deployment's template and is written
    /// there; the Deployment is never written as a workload of its own. Without the Deployment
    /// the Rollout's template stays empty.
    #[test]
    fn resolve_workload_refs() {
        let rollout = "apiVersion: argoproj.io/v1alpha1\nkind: Rollout\nmetadata: {name: web, namespace: shop}\n\
             spec:\n  replicas: 3\n  workloadRef: {apiVersion: apps/v1, kind: Deployment, name: web-base}\n---\n";
        let deployment = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web-base, namespace: shop}\n\
             spec:\n  replicas: 0\n  selector: {matchLabels: {app: web}}\n  template:\n    metadata: {labels: {app: web}}\n\
             \x20   spec: {containers: [{name: app, image: x, resources: {requests: {cpu: 500m}}}]}\n";
        let mut m = kerf::sources::dir::Manifests::default();
        kerf::sources::dir::load_text(&format!("{rollout}{deployment}"), "t", &mut m).unwrap();
        group_under_topmost_owners(&mut m.snapshot);
        let find = |s: &Snapshot, name: &str| {
            s.workloads
                .iter()
                .find(|w| w.key.name.as_str() == name)
                .cloned()
                .unwrap()
        };
        let r = find(&m.snapshot, "web");
        assert!(r.ownership.template_ref_found);
        let names: Vec<&str> = r
            .template
            .pod_spec()
            .containers
            .iter()
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(names, ["app"]);
        assert_eq!(
            r.template_write_key().to_string(),
            "shop/Deployment/web-base"
        );
        assert!(r.template_writable());
        let d = find(&m.snapshot, "web-base");
        assert!(d.ownership.owned && !d.template_writable());

        let mut alone = kerf::sources::dir::Manifests::default();
        kerf::sources::dir::load_text(rollout, "t", &mut alone).unwrap();
        group_under_topmost_owners(&mut alone.snapshot);
        let r = find(&alone.snapshot, "web");
        assert!(!r.ownership.template_ref_found);
        assert!(r.template.pod_spec().containers.is_empty());
    }

    /// KServe labels each component's Deployment (`component: predictor|transformer|explainer`)
    /// and makes the InferenceService its controller: the predictor folds into the
    /// InferenceService, a transformer stays a workload of its own, never written.
    #[test]
    fn a_kserve_transformer_is_a_workload_apart_from_its_inference_service() {
        let deployment = |name: &str, component: &str| {
            format!(
                "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}\n  namespace: ml\n\
                 \x20 labels: {{component: {component}, serving.kserve.io/inferenceservice: llm}}\n\
                 \x20 ownerReferences:\n  - {{apiVersion: serving.kserve.io/v1beta1, kind: InferenceService, name: llm, uid: u, controller: true}}\n\
                 spec:\n  selector: {{matchLabels: {{app: {name}}}}}\n  template:\n    metadata: {{labels: {{app: {name}}}}}\n\
                 \x20   spec: {{containers: [{{name: kserve-container, image: x}}]}}\n---\n"
            )
        };
        let text = format!(
            "apiVersion: serving.kserve.io/v1beta1\nkind: InferenceService\nmetadata: {{name: llm, namespace: ml}}\nspec: {{}}\n---\n{}{}",
            deployment("llm-predictor", "predictor"),
            deployment("llm-transformer", "transformer"),
        );
        let mut m = kerf::sources::dir::Manifests::default();
        kerf::sources::dir::load_text(&text, "t", &mut m).unwrap();
        group_under_topmost_owners(&mut m.snapshot);
        let s = &m.snapshot;
        let mut keys: Vec<String> = s.workloads.iter().map(|w| w.key.to_string()).collect();
        keys.sort();
        assert_eq!(
            keys,
            ["ml/Deployment/llm-transformer", "ml/InferenceService/llm"]
        );
        let transformer = s
            .workloads
            .iter()
            .find(|w| w.key.name.as_str() == "llm-transformer");
        assert!(
            !transformer.unwrap().template_writable(),
            "its InferenceService owns it"
        );
        assert!(
            s.controller_of("ml", "Deployment", "llm-transformer")
                .is_none()
        );
        assert!(
            s.controller_of("ml", "Deployment", "llm-predictor")
                .is_some()
        );
    }
}

mod resources_plan {
    use jiff::{SignedDuration, Timestamp};
    use kerf::core::hash::{HashMap, HashMapExt};
    use kerf::core::query::promql::LabelMatcher;
    use kerf::core::query::{RangeQuery, WindowAggregate, WindowKey};
    use kerf::core::recommenders::Answer;
    use kerf::core::recommenders::resources::*;
    use kerf::core::snapshot::Snapshot;
    use kerf::sources::dir::{load_dir, load_text};

    /// A Deployment the HPA example's policy covers (`app: web`), with an HPA of its own.
    fn another_web_app(name: &str, hpa: &str) -> String {
        format!(
            r#"apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}, namespace: shop, labels: {{app: web}}}}
spec:
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec: {{containers: [{{name: app, image: w, resources: {{requests: {{cpu: "1"}}}}}}]}}
---
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {{name: {hpa}, namespace: shop}}
spec:
  scaleTargetRef: {{apiVersion: apps/v1, kind: Deployment, name: {name}}}
  maxReplicas: 4
"#
        )
    }

    /// A Deployment `web` (one `app` container requesting 1 CPU and 1Gi) under a policy with
    /// both resources in auto-patch (CPU over 2 days, memory over 1), and today's pod, whose `app` container's last
    /// termination was `last_reason` (none: never terminated) an hour ago.
    fn one_web_pod(last_reason: Option<&str>) -> Snapshot {
        let last_state = last_reason.map_or(String::new(), |r| {
            format!(
                ", lastState: {{terminated: {{exitCode: 137, reason: {r}, finishedAt: \"2026-01-01T11:00:00Z\"}}}}"
            )
        });
        let yaml = format!(
            r#"apiVersion: rightsizing.kubex.ai/v1alpha1
kind: RightsizingPolicy
metadata: {{name: rs, namespace: shop}}
spec:
  scope: {{labelSelector: {{matchLabels: {{tier: web}}}}}}
  automationStrategyRef: {{name: s}}
  resources:
    cpu: {{mode: auto-patch, window: 2d}}
    memory: {{mode: auto-patch, headroomPercent: 20, window: 1d}}
---
apiVersion: rightsizing.kubex.ai/v1alpha1
kind: AutomationStrategy
metadata: {{name: s, namespace: shop}}
spec: {{}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: web, namespace: shop, labels: {{tier: web}}}}
spec:
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web}}}}
    spec: {{containers: [{{name: app, image: x, resources: {{requests: {{cpu: "1", memory: 1Gi}}}}}}]}}
---
apiVersion: apps/v1
kind: ReplicaSet
metadata:
  name: web-7d9c8b5f6d
  namespace: shop
  ownerReferences: [{{apiVersion: apps/v1, kind: Deployment, name: web, uid: u0, controller: true}}]
---
apiVersion: v1
kind: Pod
metadata:
  name: web-7d9c8b5f6d-x2x4z
  namespace: shop
  labels: {{app: web}}
  ownerReferences: [{{apiVersion: apps/v1, kind: ReplicaSet, name: web-7d9c8b5f6d, uid: u1, controller: true}}]
spec: {{containers: [{{name: app, image: x, resources: {{requests: {{cpu: "1", memory: 1Gi}}}}}}]}}
status:
  phase: Running
  startTime: "2026-01-01T00:00:00Z"
  containerStatuses: [{{name: app, image: x, imageID: "", ready: true, restartCount: 1{last_state}}}]
"#
        );
        let mut m = kerf::sources::dir::Manifests::default();
        load_text(&yaml, "test", &mut m).unwrap();
        m.snapshot
    }

    /// docs/design/hpa-coordination.md#h5, the OOM-killed floor, over #h15's history: an OOM
    /// kill only the window's history records (kube-state-metrics; the pod was replaced, today's
    /// pod's status shows none) gives exactly the decision an OOM kill in today's pod's status
    /// gives. A 0 (older kube-state-metrics' "not this reason") and no series are no OOM kill.
    #[test]
    fn oom_killed_floor_holds_for_an_oom_kill_in_the_window_history_as_in_a_pod_status() {
        let now = "2026-01-01T12:00:00Z".parse::<Timestamp>().unwrap();
        let mib = kerf::core::quantity::MIB;
        let outcome = |snapshot: &Snapshot, oom_history: Option<f64>| {
            let plan = plan(snapshot, now, 15, None);
            let key = WindowKey {
                namespace: "shop".into(),
                workload: "Deployment/web".into(),
                container: "app".into(),
            };
            let mut answers = RsAnswers::default();
            for (i, (_, signal, _)) in plan.queries.iter().enumerate() {
                let value = match signal {
                    RsSignal::Cpu => Some(0.2),
                    RsSignal::Memory => Some(100.0 * mib as f64),
                    // The whole (longer, CPU) window of history.
                    RsSignal::History => Some((now.as_second() - 2 * 86_400) as f64),
                    RsSignal::OomKilled => oom_history,
                    _ => None,
                };
                let set = kerf::core::query::WindowSet {
                    values: value.map(|v| (key.clone(), v)).into_iter().collect(),
                    ..Default::default()
                };
                answers.answer(&plan, i, Ok(Answer::Window(set)));
            }
            let results = evaluate(snapshot, &plan, &answers, &HashMap::new(), now, 15);
            assert_eq!(results.len(), 1);
            results[0].outcome.clone().unwrap()
        };
        let memory = |o: &workload::RightsizingOutcome| o.containers[0].recommended.memory_bytes;
        let (no_oom, oom_in_status) = (
            one_web_pod(Some("Completed")),
            one_web_pod(Some("OOMKilled")),
        );

        let neither = outcome(&no_oom, None);
        assert_eq!(
            memory(&neither),
            Some(120 * mib),
            "the peak + 20 %: down from 1Gi"
        );
        let from_status = outcome(&oom_in_status, None);
        assert_eq!(
            memory(&from_status),
            Some(1024 * mib),
            "never below the request"
        );
        assert!(from_status.containers[0].oom_killed);
        assert_eq!(from_status.risk_flags, ["oom-killed"], "the floor is said");

        // The history's answer: the last step an OOM kill showed.
        let shown = Some((now.as_second() - 3600) as f64);
        let floor = |o: &workload::RightsizingOutcome| {
            (memory(o), o.containers[0].oom_killed, o.risk_flags.clone())
        };
        assert_eq!(floor(&outcome(&no_oom, shown)), floor(&from_status));
        assert!(
            outcome(&no_oom, shown).risk_reasons[0]
                .contains("showed it as a pod's last termination until 2026-01-01 11:00 UTC"),
            "{:?}",
            outcome(&no_oom, shown).risk_reasons
        );
        assert_eq!(
            outcome(&oom_in_status, shown),
            from_status,
            "either one; a pod's own termination says when"
        );
        assert_eq!(outcome(&no_oom, None), neither);
        assert_eq!(outcome(&one_web_pod(None), None), neither);
    }

    /// docs/metrics.md#history-by-workload: per batch one window query per signal, the last
    /// the OOM kills kube-state-metrics recorded (when last shown), selected by
    /// `reason="OOMKilled"` over the memory window.
    #[test]
    fn each_batch_asks_seven_window_queries_the_oom_kills_by_reason_over_the_memory_window() {
        let now = "2026-01-01T12:00:00Z".parse::<Timestamp>().unwrap();
        let plan = plan(&one_web_pod(None), now, 15, None);
        let signals: Vec<RsSignal> = plan.queries.iter().map(|(_, s, _)| *s).collect();
        assert_eq!(signals, RsSignal::WINDOW);
        let Some((_, _, RsQuery::Window { batch: 0, query })) = plan.queries.last() else {
            panic!("{:#?}", plan.queries);
        };
        assert_eq!(
            query.metric,
            "kube_pod_container_status_last_terminated_reason"
        );
        assert_eq!(
            query.matchers,
            [LabelMatcher {
                name: "reason".into(),
                value: "OOMKilled".into()
            }]
        );
        assert_eq!(query.aggregate, WindowAggregate::LastPositive);
        assert_eq!(query.window_seconds, 86_400, "the memory window");
    }

    /// docs/design/hpa-coordination.md#h7, batched like every query (gpu-engine.md#g12): the
    /// HPAs' replica history (kube-state-metrics) is read with one range query per policy and
    /// series, selecting every HPA of the policy's workloads, over the policy's longer window.
    #[test]
    fn replica_history_is_queried_once_per_policy_for_all_its_hpas() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/hpa/manifests");
        let mut m = load_dir(&dir).unwrap();
        load_text(&another_web_app("api", "api-hpa"), "test", &mut m).unwrap();
        let now = "2026-01-01T12:00:00Z".parse::<Timestamp>().unwrap();
        let plan = plan(&m.snapshot, now, 15, None);
        let ranges: Vec<&RangeQuery> = plan
            .queries
            .iter()
            .filter_map(|(_, _, q)| match q {
                RsQuery::Range(q) => Some(q),
                RsQuery::Window { .. } | RsQuery::Steps { .. } => None,
            })
            .collect();
        for metric in [
            "kube_horizontalpodautoscaler_status_current_replicas",
            "kube_horizontalpodautoscaler_spec_max_replicas",
        ] {
            let queries: Vec<&RangeQuery> = ranges
                .iter()
                .filter(|q| q.metric == metric)
                .copied()
                .collect();
            assert_eq!(queries.len(), 1, "{metric}: {:#?}", plan.queries);
            let q = queries[0];
            assert_eq!(q.namespace_label, "namespace");
            assert_eq!(q.pod_label, "horizontalpodautoscaler");
            assert_eq!(q.namespaces, ["shop"]);
            assert_eq!(*q.pods, ["api-hpa", "web"]);
            assert_eq!(
                q.start,
                now - SignedDuration::from_hours(1),
                "the 1h windows"
            );
            assert_eq!(q.counter, Some(false));
        }
    }
}

mod gpu_streaming {
    use kerf::bench::scale::{ScaleSpec, SynthSource, synth_snapshot};
    use std::collections::{BTreeMap, BTreeSet};
    use std::sync::Arc;

    use jiff::Timestamp;
    use kerf::api::{Signal, StrategyView};
    use kerf::core::grouping::pods_by_owner;
    use kerf::core::hash::HashMap;
    use kerf::core::model::{GpuMap, GpuRecommendation, PolicyId, PolicyPart, WorkloadKey};
    use kerf::core::pod::Pod;
    use kerf::core::query::SeriesSet;
    use kerf::core::recommenders::gpu::engine::Action;
    use kerf::core::recommenders::gpu::*;
    use kerf::core::snapshot::{GpuPolicy, Snapshot};
    use kerf::metrics::MetricSource;
    use kerf::support::small_map::SmallMap;

    fn cluster() -> (Snapshot, Timestamp, ScaleSpec) {
        let spec = ScaleSpec {
            workloads: 60,
            pods: 80,
            namespaces: 4,
            step_seconds: 15,
        };
        let now = "2026-01-01T12:00:00Z".parse::<Timestamp>().unwrap();
        (synth_snapshot(&spec, now), now, spec)
    }

    fn answers(plan: &Plan, spec: ScaleSpec) -> Vec<(usize, Signal, SeriesSet)> {
        let source = SynthSource {
            spec,
            queries: Default::default(),
        };
        plan.queries
            .iter()
            .map(|(p, s, q)| {
                let set = futures::executor::block_on(source.range_query(q)).unwrap();
                (*p, *s, set)
            })
            .collect()
    }

    fn batch(
        s: &Snapshot,
        plan: &Plan,
        answers: &[(usize, Signal, SeriesSet)],
        now: Timestamp,
    ) -> String {
        let results = answers
            .iter()
            .map(|(p, sig, set)| ((*p, *sig), set.clone()))
            .collect();
        format!("{:?}", evaluate(s, plan, results, &BTreeSet::new(), now))
    }

    /// Evaluation finds a workload's pods through the one resolver ([`kerf::core::owner::pod_chain`]).
    #[test]
    fn a_non_controller_owner_reference_is_not_the_owner() {
        let pod = |name: &str, owner: serde_json::Value| -> std::sync::Arc<Pod> {
            std::sync::Arc::new(
                serde_json::from_value(serde_json::json!({"metadata": {
                    "name": name, "namespace": "ml",
                    "labels": {"pod-template-hash": "abc"},
                    "ownerReferences": [owner]}}))
                .unwrap(),
            )
        };
        let mut s = Snapshot::default();
        s.replicaset_owners
            .insert(("ml".into(), "llm-abc".into()), "llm".into());
        s.pods = vec![
            pod(
                "controlled",
                serde_json::json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "llm-abc", "uid": "u", "controller": true}),
            ),
            pod(
                "referenced",
                serde_json::json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "llm-abc", "uid": "u"}),
            ),
            pod(
                "foreign",
                serde_json::json!({"apiVersion": "example.com/v1", "kind": "ReplicaSet", "name": "llm-abc", "uid": "u", "controller": true}),
            ),
        ];
        assert_eq!(
            pods_by_owner(&s),
            HashMap::from_iter([(
                WorkloadKey::new("ml", kerf_api::WorkloadKind::Deployment, "llm"),
                vec![0]
            )])
        );
    }

    #[test]
    fn streaming_evaluation_equals_batch_evaluation_in_any_answer_order() {
        let (s, now, spec) = cluster();
        let plan = plan(&s, now, 15);
        let expected = assert_streaming_equals_batch(&s, &plan, spec, now);
        assert!(expected.contains("Upsize"), "the scenario has upsizes");
    }

    #[test]
    fn streaming_evaluation_releases_a_policys_samples_once_its_workloads_are_evaluated() {
        let (s, now, spec) = cluster();
        let plan = plan(&s, now, 15);
        let answers = answers(&plan, spec);
        let mut streaming = StreamingEvaluation::new(&s, &plan, now);
        let mut held_at_most = 0;
        for (p, sig, set) in answers {
            streaming.answer(p, sig, Some(set));
            let held = streaming.held_policies();
            held_at_most = held_at_most.max(held.len());
            // After a policy's second signal, its workloads are evaluated and its samples gone.
            if sig == Signal::Memory {
                assert!(!held.contains(&p), "policy {p} still held: {held:?}");
            }
        }
        assert_eq!(held_at_most, 1, "one policy's samples at a time");
    }

    #[test]
    fn streaming_evaluation_of_a_failed_query_keeps_state_like_batch_evaluation() {
        let (s, now, spec) = cluster();
        let plan = plan(&s, now, 15);
        let answers = answers(&plan, spec);
        let mut streaming = StreamingEvaluation::new(&s, &plan, now);
        let mut results = BTreeMap::new();
        for (p, sig, set) in answers {
            if p == 1 && sig == Signal::Compute {
                streaming.answer(p, sig, None);
            } else {
                results.insert((p, sig), set.clone());
                streaming.answer(p, sig, Some(set));
            }
        }
        let got = streaming.finish();
        let unavailable = got.iter().filter(|r| r.metrics_unavailable).count();
        assert_eq!(unavailable, 15, "policy 1 covers a quarter of 60 workloads");
        let expected = evaluate(&s, &plan, results, &BTreeSet::from([1]), now);
        assert_eq!(format!("{got:?}"), format!("{expected:?}"));
    }

    /// Streaming and batch evaluation of the same answers agree whatever the answers' order: plan
    /// order, reversed, and every policy's compute answer before any memory one. Returns the
    /// batch results (Debug).
    fn assert_streaming_equals_batch(
        s: &Snapshot,
        plan: &Plan,
        spec: ScaleSpec,
        now: Timestamp,
    ) -> String {
        let answers = answers(plan, spec);
        let expected = batch(s, plan, &answers, now);
        let mut by_signal = answers.clone();
        by_signal.sort_by_key(|(p, sig, _)| (*sig == Signal::Memory, *p));
        let reversed = answers.iter().rev().cloned().collect();
        for order in [answers, reversed, by_signal] {
            let mut streaming = StreamingEvaluation::new(s, plan, now);
            for (p, sig, set) in order {
                streaming.answer(p, sig, Some(set));
            }
            assert!(streaming.held_policies().is_empty());
            assert_eq!(format!("{:?}", streaming.finish()), expected);
        }
        expected
    }

    #[test]
    fn streaming_evaluation_of_workloads_shared_by_two_policies_waits_for_both() {
        let (mut s, now, spec) = cluster();
        s.global.multi_policy_container_rightsizing_enabled = true;
        // A second policy per namespace takes the sidecar.
        let proxies: Vec<GpuPolicy> = s
            .gpu_policies
            .iter()
            .map(|p| {
                let mut q = p.clone();
                q.id.name = "gpu-proxy".into();
                q.spec.scope.containers = vec!["proxy".into()];
                q
            })
            .collect();
        s.gpu_policies.extend(proxies);
        let plan = plan(&s, now, 15);
        assert!(plan.workloads.iter().all(|w| w.assignments.len() == 2));
        assert_eq!(plan.queries.len(), 16, "8 policies × 2 signals");
        assert_streaming_equals_batch(&s, &plan, spec, now);

        // Answering one of a workload's two policies evaluates nothing yet.
        let answers = answers(&plan, spec);
        let mut streaming = StreamingEvaluation::new(&s, &plan, now);
        for (p, sig, set) in answers.iter().filter(|(p, _, _)| *p < 4).cloned() {
            streaming.answer(p, sig, Some(set));
        }
        assert_eq!(streaming.held_policies(), BTreeSet::from([0, 1, 2, 3]));
        assert!(streaming.evaluated() == 0);
    }

    #[test]
    fn streaming_evaluation_of_a_policy_without_queries_evaluates_its_workloads_at_once() {
        let (mut s, now, spec) = cluster();
        // Every pod of namespace 0 is younger than the policy's minimum age: nothing to query.
        s.gpu_policies[0].spec.min_pod_metrics_age =
            serde_json::from_value(serde_json::json!("3h")).unwrap();
        let plan = plan(&s, now, 15);
        assert_eq!(plan.queries.len(), 6);
        let streaming = StreamingEvaluation::new(&s, &plan, now);
        let done = streaming.evaluated();
        assert_eq!(done, 15, "policy 0's workloads need no answer");
        assert_streaming_equals_batch(&s, &plan, spec, now);
    }

    #[test]
    fn streaming_evaluation_finishes_workloads_whose_answers_never_came_as_unavailable() {
        let (s, now, _) = cluster();
        let plan = plan(&s, now, 15);
        let got = StreamingEvaluation::new(&s, &plan, now).finish();
        assert_eq!(got.len(), 60);
        assert!(got.iter().all(|r| r.metrics_unavailable));
    }

    /// docs/design/gpu-engine.md#g11 with runtime.md#r8: when a cycle reuses a shared
    /// recommendation (its queries failed), a part whose policy is no longer planned is not
    /// served, as after a restart; the other parts are, each under its own strategy.
    #[test]
    fn a_reused_part_whose_policy_is_no_longer_planned_is_not_served() {
        let (a, b) = (
            PolicyId::parse("GpuReactivePolicy/ml/a").unwrap(),
            PolicyId::parse("GpuReactivePolicy/ml/b").unwrap(),
        );
        let part = |c: &str| PolicyPart {
            containers: [c.to_string()].into(),
            ..Default::default()
        };
        let rec = GpuRecommendation {
            containers: [("a".to_string(), 0.6), ("b".to_string(), 2.0)].into(),
            policy: Some(b.clone()),
            by_policy: [(a.clone(), part("a")), (b, part("b"))].into(),
            ..Default::default()
        };
        let result = WorkloadResult {
            key: WorkloadKey::new("ml", kerf_api::WorkloadKind::Deployment, "w"),
            policies: [a.clone()].into(),
            action: Action::Reuse,
            driving_metric: None,
            containers: SmallMap::new(),
            recommendation: Some(Box::new(rec)),
            baseline: None,
            template_gpu: GpuMap::new(),
            strategy: Default::default(),
            gpu_strategies: Some(Box::new(
                [(a.clone(), Arc::new(StrategyView::default()))].into(),
            )),
            reasons: Vec::new(),
            metrics_unavailable: true,
            owner_queue: None,
            missing_samples: Box::default(),
        };
        let state = result.to_state();
        let served = &state.gpu.as_ref().unwrap().containers;
        assert_eq!(served.keys().collect::<Vec<_>>(), ["a"], "{served:?}");
        assert_eq!(
            state.policy,
            Some(a),
            "b is no longer planned: a is the main policy"
        );
    }
}
