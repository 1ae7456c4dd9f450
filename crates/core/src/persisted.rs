//! kerf's RightsizingRecommendations as it reads them back, from the in-memory writer or from the
//! cluster's watch. Write planning, the conflict record and the admission store read their name,
//! owners, spec and status; the rest of a Kubernetes object's metadata is never read, and holding
//! it cost ≈290 bytes per recommendation (≈30 MB at 110,000 workloads).

use crate::model::{Name, WorkloadKey};
use kerf_api::WorkloadKind;
use kerf_api::{RecommendationStatus, RightsizingRecommendation, RightsizingRecommendationSpec};

/// One RightsizingRecommendation as persisted: what kerf reads of it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PersistedRecommendation {
    pub namespace: Name,
    pub name: Name,
    /// The uids of its owner references (usually the workload's).
    pub owner_uids: Vec<String>,
    pub spec: RightsizingRecommendationSpec,
    /// Boxed: held per workload, and the recommendation then fits an allocation class a fifth
    /// smaller.
    pub status: Option<Box<RecommendationStatus>>,
}

impl PersistedRecommendation {
    /// The projection of an object read from the cluster (or a manifest); `None` without a
    /// namespace or name, which no workload's recommendation lacks.
    pub fn of(rec: RightsizingRecommendation) -> Option<Self> {
        let meta = rec.metadata;
        Some(Self {
            namespace: meta.namespace?.into(),
            name: meta.name?.into(),
            owner_uids: meta
                .owner_references
                .into_iter()
                .flatten()
                .map(|o| o.uid)
                .collect(),
            spec: rec.spec,
            status: rec.status.map(Box::new),
        })
    }

    /// An owner reference of the recommendation has this uid.
    pub fn owned_by(&self, uid: &str) -> bool {
        self.owner_uids.iter().any(|u| u == uid)
    }

    /// The workload the recommendation is about.
    pub fn workload(&self) -> Option<WorkloadKey> {
        Some(WorkloadKey::new(
            self.namespace.clone(),
            WorkloadKind::parse(&self.spec.workload.kind)?,
            self.spec.workload.name.clone(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    #[test]
    fn the_projection_keeps_name_namespace_owner_uids_spec_and_status() {
        let mut rec = RightsizingRecommendation::new("deployment-web", Default::default());
        rec.metadata.namespace = Some("shop".into());
        rec.metadata.owner_references = Some(vec![OwnerReference {
            uid: "u-1".into(),
            name: "web".into(),
            kind: "Deployment".into(),
            api_version: "apps/v1".into(),
            ..Default::default()
        }]);
        rec.spec.workload.kind = "Deployment".into();
        rec.spec.workload.name = "web".into();
        rec.status = Some(RecommendationStatus {
            reason: Some("why".into()),
            ..Default::default()
        });
        let p = PersistedRecommendation::of(rec.clone()).unwrap();
        assert_eq!(
            (p.namespace.as_str(), p.name.as_str()),
            ("shop", "deployment-web")
        );
        assert!(p.owned_by("u-1") && !p.owned_by("u-2"));
        assert_eq!(p.spec, rec.spec);
        assert_eq!(p.status.as_deref(), rec.status.as_ref());
        assert_eq!(
            p.workload(),
            Some(WorkloadKey::new("shop", WorkloadKind::Deployment, "web"))
        );
        rec.metadata.namespace = None;
        assert_eq!(PersistedRecommendation::of(rec), None);
    }
}
