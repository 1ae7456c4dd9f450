//! Engine decision 11: which policy wins a workload (or each container of it).

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use crate::api::{PolicyEvaluationSpec, PolicyType, Scope};
use crate::core::model::{PolicyId, WorkloadKey};

/// What selection needs to know about one policy of any kind.
#[derive(Clone, Debug)]
pub struct Candidate<'a> {
    pub id: &'a PolicyId,
    pub policy_type: PolicyType,
    pub scope: &'a Scope,
    pub weight: i32,
    pub creation: Option<DateTime<Utc>>,
}

/// Does a label selector match these labels? (`matchLabels` and `matchExpressions` with
/// In, NotIn, Exists, DoesNotExist.) An invalid operator matches nothing.
pub fn selector_matches(sel: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    let labels_ok = sel
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    let exprs_ok = sel.match_expressions.iter().flatten().all(|e| {
        let values = e.values.as_deref().unwrap_or(&[]);
        let value = labels.get(&e.key);
        match e.operator.as_str() {
            "In" => value.is_some_and(|v| values.contains(v)),
            "NotIn" => value.is_none_or(|v| !values.contains(v)),
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
    workload_labels: &BTreeMap<String, String>,
    template_labels: &BTreeMap<String, String>,
) -> bool {
    let ns_ok = if c.policy_type.is_cluster() {
        c.scope
            .namespace_selector
            .as_ref()
            .is_none_or(|s| s.matches(&workload.namespace))
    } else {
        c.id.namespace.as_deref() == Some(workload.namespace.as_str())
    };
    let kind_ok = c.scope.workload_types.is_empty() || c.scope.workload_types.contains(&workload.kind);
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
            out.entry(w.id.clone()).or_default().insert(container.clone());
        }
    }
    out
}
