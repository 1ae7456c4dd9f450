//! docs/design/gpu-engine.md#g11: which policy wins a workload (or each container of it).

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use crate::model::{PolicyId, WorkloadKey};
use crate::pod::StrMap;
use kerf_api::{PolicyEvaluationSpec, PolicyType, Scope};

/// What selection needs to know about one policy of any kind.
#[derive(Clone, Debug)]
pub struct Candidate<'a> {
    pub id: &'a PolicyId,
    pub policy_type: PolicyType,
    pub scope: &'a Scope,
    pub weight: i32,
    pub creation: Option<Timestamp>,
}

/// Does a label selector match these labels? (`matchLabels` and `matchExpressions` with
/// In, NotIn, Exists, DoesNotExist.) An invalid operator matches nothing.
pub fn selector_matches(sel: &LabelSelector, labels: &impl StrMap) -> bool {
    let labels_ok = sel
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get_str(k) == Some(v.as_str()));
    let exprs_ok = sel.match_expressions.iter().flatten().all(|e| {
        let values = e.values.as_deref().unwrap_or(&[]);
        let value = labels.get_str(&e.key);
        let listed = |v: &str| values.iter().any(|x| x == v);
        match e.operator.as_str() {
            "In" => value.is_some_and(listed),
            "NotIn" => value.is_none_or(|v| !listed(v)),
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            _ => false,
        }
    });
    labels_ok && exprs_ok
}

/// Does the policy's scope cover the workload? Namespaced policies cover their own namespace;
/// cluster policies use `namespaceSelector` (absent = every namespace). The label selector is
/// matched against the workload's labels or its pod template's labels (absent = everything).
pub fn covers(
    c: &Candidate<'_>,
    workload: &WorkloadKey,
    workload_labels: &impl StrMap,
    template_labels: &impl StrMap,
) -> bool {
    let ns_ok = if c.policy_type.is_cluster() {
        c.scope
            .namespace_selector
            .as_ref()
            .is_none_or(|s| s.matches(&workload.namespace))
    } else {
        c.id.namespace.as_deref() == Some(workload.namespace.as_str())
    };
    let kind_ok = c.scope.workload_types.is_empty()
        || c.scope
            .workload_types
            .iter()
            .any(|t| t.as_str() == workload.kind.as_str());
    let labels_ok = c.scope.label_selector.as_ref().is_none_or(|s| {
        selector_matches(s, workload_labels) || selector_matches(s, template_labels)
    });
    ns_ok && kind_ok && labels_ok
}

/// Ranking: higher type priority, higher weight, older, then name (and namespace).
pub fn rank(a: &Candidate<'_>, b: &Candidate<'_>, eval: &PolicyEvaluationSpec) -> Ordering {
    eval.priority(b.policy_type)
        .cmp(&eval.priority(a.policy_type))
        .then(b.weight.cmp(&a.weight))
        .then_with(|| match (a.creation, b.creation) {
            (Some(x), Some(y)) => x.cmp(&y),
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (None, None) => Ordering::Equal,
        })
        .then_with(|| a.id.name.cmp(&b.id.name))
        .then_with(|| a.id.namespace.cmp(&b.id.namespace))
        .then_with(|| a.id.kind.cmp(&b.id.kind))
}

/// The single winner among the candidates covering a workload.
pub fn single_winner<'a>(
    candidates: &[Candidate<'a>],
    eval: &PolicyEvaluationSpec,
) -> Option<Candidate<'a>> {
    candidates.iter().min_by(|a, b| rank(a, b, eval)).cloned()
}

/// Multi-policy container rightsizing: the winner per container. A policy naming the container
/// exactly beats one with an empty `scope.containers`; ties are ranked as above.
/// `containers` are the workload's containers an empty scope covers; exact names may also
/// reach init containers present in `all_containers`.
pub fn per_container_winners<'a>(
    candidates: &[Candidate<'a>],
    default_containers: &[String],
    all_containers: &[String],
    eval: &PolicyEvaluationSpec,
) -> BTreeMap<PolicyId, BTreeSet<String>> {
    let mut out: BTreeMap<PolicyId, BTreeSet<String>> = BTreeMap::new();
    for container in all_containers {
        let exact: Vec<Candidate<'a>> = candidates
            .iter()
            .filter(|c| c.scope.containers.iter().any(|n| n == container))
            .cloned()
            .collect();
        let pool = if !exact.is_empty() {
            exact
        } else if default_containers.contains(container) {
            candidates
                .iter()
                .filter(|c| c.scope.containers.is_empty())
                .cloned()
                .collect()
        } else {
            Vec::new()
        };
        if let Some(w) = single_winner(&pool, eval) {
            out.entry(w.id.clone())
                .or_default()
                .insert(container.clone());
        }
    }
    out
}

/// The policies (index, selection view) whose scope covers the workload.
pub fn covering<'a, P>(
    policies: &'a [P],
    w: &crate::snapshot::Workload,
    view: impl Fn(&'a P) -> Candidate<'a>,
) -> Vec<(usize, Candidate<'a>)> {
    policies
        .iter()
        .enumerate()
        .map(|(i, p)| (i, view(p)))
        .filter(|(_, c)| covers(c, &w.key, &w.labels, w.template.labels()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use kerf_api::{NamespaceOperator, NamespaceSelector, WorkloadKind};

    fn id(kind: &str, ns: Option<&str>, name: &str) -> PolicyId {
        PolicyId {
            kind: kind.into(),
            namespace: ns.map(Into::into),
            name: name.into(),
        }
    }

    fn cand<'a>(
        id: &'a PolicyId,
        t: PolicyType,
        scope: &'a Scope,
        weight: i32,
        day: u32,
    ) -> Candidate<'a> {
        Candidate {
            id,
            policy_type: t,
            scope,
            weight,
            creation: Some(format!("2026-01-{day:02}T00:00:00Z").parse().unwrap()),
        }
    }

    #[test]
    fn type_priority_wins_first() {
        let eval = PolicyEvaluationSpec::default();
        let (a, b) = (
            id("ClusterGpuReactivePolicy", None, "a"),
            id("GpuReactivePolicy", Some("ns"), "b"),
        );
        let s = Scope::default();
        let c = [
            cand(&a, PolicyType::ClusterGpuReactivePolicy, &s, 100, 1),
            cand(&b, PolicyType::GpuReactivePolicy, &s, 0, 2),
        ];
        assert_eq!(
            single_winner(&c, &eval).unwrap().id,
            &b,
            "120 beats 110 regardless of weight"
        );
        let custom = PolicyEvaluationSpec {
            precedence: vec![kerf_api::Precedence {
                policy_type: PolicyType::ClusterGpuReactivePolicy,
                priority: 200,
            }],
        };
        assert_eq!(
            single_winner(&c, &custom).unwrap().id,
            &a,
            "PolicyEvaluation overrides defaults"
        );
    }

    #[test]
    fn then_weight_then_oldest_then_name() {
        let eval = PolicyEvaluationSpec::default();
        let (a, b, c) = (
            id("GpuReactivePolicy", Some("ns"), "a"),
            id("GpuReactivePolicy", Some("ns"), "b"),
            id("GpuReactivePolicy", Some("ns"), "c"),
        );
        let s = Scope::default();
        let t = PolicyType::GpuReactivePolicy;
        assert_eq!(
            single_winner(&[cand(&a, t, &s, 0, 1), cand(&b, t, &s, 5, 2)], &eval)
                .unwrap()
                .id,
            &b
        );
        assert_eq!(
            single_winner(&[cand(&a, t, &s, 0, 3), cand(&b, t, &s, 0, 2)], &eval)
                .unwrap()
                .id,
            &b
        );
        assert_eq!(
            single_winner(&[cand(&c, t, &s, 0, 2), cand(&b, t, &s, 0, 2)], &eval)
                .unwrap()
                .id,
            &b
        );
    }

    #[test]
    fn multi_policy_exact_container_name_beats_empty_scope() {
        let eval = PolicyEvaluationSpec::default();
        let (a, b) = (
            id("GpuReactivePolicy", Some("ns"), "all"),
            id("ClusterGpuReactivePolicy", None, "named"),
        );
        let all = Scope::default();
        let named = Scope {
            containers: vec!["sidecar".into()],
            ..Default::default()
        };
        let c = [
            cand(&a, PolicyType::GpuReactivePolicy, &all, 0, 1),
            cand(&b, PolicyType::ClusterGpuReactivePolicy, &named, 0, 1),
        ];
        let containers = vec!["inference".to_string(), "sidecar".to_string()];
        let w = per_container_winners(&c, &containers, &containers, &eval);
        assert_eq!(w[&a], BTreeSet::from(["inference".to_string()]));
        assert_eq!(w[&b], BTreeSet::from(["sidecar".to_string()]));
    }

    #[test]
    fn cluster_namespace_selector_in_not_in_and_star() {
        let pid = id("ClusterGpuReactivePolicy", None, "c");
        let mut scope = Scope {
            namespace_selector: Some(NamespaceSelector {
                operator: NamespaceOperator::In,
                values: vec!["*".into()],
            }),
            ..Default::default()
        };
        let labels = BTreeMap::new();
        let w = WorkloadKey::new("team-a", WorkloadKind::Deployment, "x");
        assert!(covers(
            &cand(&pid, PolicyType::ClusterGpuReactivePolicy, &scope, 0, 1),
            &w,
            &labels,
            &labels
        ));
        scope.namespace_selector = Some(NamespaceSelector {
            operator: NamespaceOperator::NotIn,
            values: vec!["team-a".into()],
        });
        assert!(!covers(
            &cand(&pid, PolicyType::ClusterGpuReactivePolicy, &scope, 0, 1),
            &w,
            &labels,
            &labels
        ));
    }

    #[test]
    fn namespaced_policy_covers_only_its_namespace_kind_and_labels() {
        let pid = id("GpuReactivePolicy", Some("ns"), "p");
        let scope = Scope {
            label_selector: Some(LabelSelector {
                match_labels: Some(BTreeMap::from([("app".to_string(), "gpu".to_string())])),
                ..Default::default()
            }),
            workload_types: vec![WorkloadKind::Deployment],
            ..Default::default()
        };
        let c = cand(&pid, PolicyType::GpuReactivePolicy, &scope, 0, 1);
        let app = BTreeMap::from([("app".to_string(), "gpu".to_string())]);
        let none = BTreeMap::new();
        assert!(covers(
            &c,
            &WorkloadKey::new("ns", WorkloadKind::Deployment, "d"),
            &none,
            &app
        ));
        assert!(!covers(
            &c,
            &WorkloadKey::new("other", WorkloadKind::Deployment, "d"),
            &none,
            &app
        ));
        assert!(!covers(
            &c,
            &WorkloadKey::new("ns", WorkloadKind::StatefulSet, "d"),
            &none,
            &app
        ));
        assert!(!covers(
            &c,
            &WorkloadKey::new("ns", WorkloadKind::Deployment, "d"),
            &none,
            &none
        ));
    }
}
