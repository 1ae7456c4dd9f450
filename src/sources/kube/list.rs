//! A live cluster read once, read-only, for `kerf recommend` and `kerf simulate`: the kinds the
//! in-cluster [`Reader`](super::Reader) watches, each listed (list calls only, paged), and every
//! object read by the manifests reader ([`ManifestReader`]) — so a cluster gives the same
//! snapshot, and the same recommendations, as a directory holding the same objects. The objects
//! are read in the order they were created (`creationTimestamp`; the API's order among equals),
//! which is the order of the files they were applied from: the same order as reading those files.

use std::any::TypeId;

use ::kube::api::{Api, ApiResource, DynamicObject, ListParams, TypeMeta};
use ::kube::core::NamespaceResourceScope;
use ::kube::{Client, Resource};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::Pod;

use crate::api::{
    AutomationStrategy, ClusterAutomationStrategy, ClusterGpuReactivePolicy,
    ClusterRightsizingPolicy, GlobalConfiguration, GpuReactivePolicy, PolicyEvaluation,
    RightsizingPolicy, RightsizingRecommendation,
};
use crate::health::error_chain;
use crate::sources::dir::{ManifestReader, Manifests};

/// Objects per list page (the API server's own default page for `kubectl get` is 500).
const PAGE: u32 = 500;

/// What was listed, and the kerf kinds the cluster does not serve (CRDs not installed).
#[derive(Debug)]
pub struct Listed {
    pub manifests: Manifests,
    pub missing_crds: Vec<&'static str>,
}

/// Lists every kind kerf reads (namespaced kinds in `namespace` only, when given; cluster-scoped
/// ones always). A kerf kind whose CRD is not installed has no objects; any other failure is an
/// error naming the resource and the fix.
pub async fn list_cluster(client: &Client, namespace: Option<&str>) -> Result<Listed, ListError> {
    let mut l = Lister {
        client,
        namespace,
        listed: Vec::new(),
        missing_crds: Vec::new(),
    };
    l.kerf::<GlobalConfiguration>().await?;
    l.kerf::<PolicyEvaluation>().await?;
    l.kerf::<AutomationStrategy>().await?;
    l.kerf::<ClusterAutomationStrategy>().await?;
    l.kerf::<GpuReactivePolicy>().await?;
    l.kerf::<ClusterGpuReactivePolicy>().await?;
    l.kerf::<RightsizingPolicy>().await?;
    l.kerf::<ClusterRightsizingPolicy>().await?;
    l.kerf::<RightsizingRecommendation>().await?;
    l.builtin::<Deployment>().await?;
    l.builtin::<StatefulSet>().await?;
    l.builtin::<DaemonSet>().await?;
    l.builtin::<Job>().await?;
    l.builtin::<CronJob>().await?;
    l.builtin::<ReplicaSet>().await?;
    l.builtin::<Pod>().await?;
    l.builtin::<HorizontalPodAutoscaler>().await?;
    // A cluster without the VPA CRD has no VPA (not an error: kerf does not need it).
    l.list_resource(&super::vpa_resource(), true, IfNotServed::NoObjects)
        .await?;
    // The controllers GPU inference runs under and the objects their owner chains pass
    // through (docs/workloads.md): where their CRD is not installed, none.
    for r in super::owner_resources() {
        l.list_resource(&r.api_resource(), true, IfNotServed::NoObjects)
            .await?;
    }
    // The kinds the configuration lists (its objects are read as the in-cluster reader reads
    // them); a listed kind the cluster does not serve has no objects.
    for k in listed_kinds(&l.listed) {
        let d = k.data();
        let r = super::OwnerResource {
            label: d.kind,
            api_version: d.api_version,
            kind: d.kind,
            plural: d.plural,
            workload: Some(crate::api::WorkloadKind::Listed(k)),
        };
        l.list_resource(&r.api_resource(), true, IfNotServed::NoObjects)
            .await?;
    }
    let Lister {
        mut listed,
        missing_crds,
        ..
    } = l;
    crate::sources::dir::in_creation_order(&mut listed);
    let mut reader = ManifestReader::default();
    for (doc, at) in listed {
        reader.object(doc, &at);
    }
    let mut manifests = reader.finish()?;
    // Asked, as the in-cluster reader asks: a cluster that does not serve it rolls out.
    manifests.snapshot.resize = super::resize_support(client)
        .await
        .unwrap_or(crate::core::snapshot::ResizeSupport::Unknown);
    Ok(Listed {
        manifests,
        missing_crds,
    })
}

/// The kinds the listed `global-config` names in `spec.workloadKinds` (none when it cannot be
/// read: the reader then reports why).
fn listed_kinds(
    listed: &[(serde_json::Value, String)],
) -> Vec<crate::api::listed_kinds::ListedKind> {
    let specs: Vec<crate::api::listed_kinds::WorkloadKindSpec> = listed
        .iter()
        .find(|(doc, _)| {
            doc["kind"] == "GlobalConfiguration"
                && doc.pointer("/metadata/name").and_then(|n| n.as_str())
                    == Some(crate::api::GLOBAL_CONFIGURATION_NAME)
        })
        .and_then(|(doc, _)| doc.pointer("/spec/workloadKinds"))
        .and_then(|v| serde_json::from_value(v.clone()).ok())
        .unwrap_or_default();
    crate::api::listed_kinds::set_listed(&specs)
}

/// What a resource the API server does not serve (404) means.
#[derive(Clone, Copy)]
enum IfNotServed {
    /// A kerf kind whose CRD is not installed: listed as missing.
    MissingCrd(&'static str),
    /// An optional kind (VerticalPodAutoscaler): no objects.
    NoObjects,
    Error,
}

struct Lister<'a> {
    client: &'a Client,
    namespace: Option<&'a str>,
    /// Every object listed, with where it is (for errors).
    listed: Vec<(serde_json::Value, String)>,
    missing_crds: Vec<&'static str>,
}

impl Lister<'_> {
    async fn kerf<K: Resource<DynamicType = ()> + crate::sources::kube::KerfKind>(
        &mut self,
    ) -> Result<(), ListError>
    where
        K::Scope: 'static,
    {
        self.list::<K>(Some(K::KIND)).await
    }

    async fn builtin<K: Resource<DynamicType = ()>>(&mut self) -> Result<(), ListError>
    where
        K::Scope: 'static,
    {
        self.list::<K>(None).await
    }

    /// Lists `K` page by page; `crd` names a kerf kind (absent when its CRD is
    /// not installed).
    async fn list<K: Resource<DynamicType = ()>>(
        &mut self,
        crd: Option<&'static str>,
    ) -> Result<(), ListError>
    where
        K::Scope: 'static,
    {
        let namespaced = TypeId::of::<K::Scope>() == TypeId::of::<NamespaceResourceScope>();
        let if_not_served = match crd {
            Some(kind) => IfNotServed::MissingCrd(kind),
            None => IfNotServed::Error,
        };
        self.list_resource(&ApiResource::erase::<K>(&()), namespaced, if_not_served)
            .await
    }

    /// Lists one resource page by page.
    async fn list_resource(
        &mut self,
        ar: &ApiResource,
        namespaced: bool,
        if_not_served: IfNotServed,
    ) -> Result<(), ListError> {
        let api: Api<DynamicObject> = match self.namespace {
            Some(ns) if namespaced => Api::namespaced_with(self.client.clone(), ns, ar),
            _ => Api::all_with(self.client.clone(), ar),
        };
        let resource = match ar.group.as_str() {
            "" => ar.plural.clone(),
            group => format!("{}.{group}", ar.plural),
        };
        let mut params = ListParams::default().limit(PAGE);
        loop {
            let page = match api.list(&params).await {
                Ok(page) => page,
                Err(::kube::Error::Api(s)) if s.code == 404 => match if_not_served {
                    IfNotServed::MissingCrd(kind) => {
                        self.missing_crds.push(kind);
                        return Ok(());
                    }
                    IfNotServed::NoObjects => return Ok(()),
                    IfNotServed::Error => {
                        return Err(list_error(
                            &resource,
                            self.namespace,
                            &::kube::Error::Api(s),
                        ));
                    }
                },
                Err(e) => return Err(list_error(&resource, self.namespace, &e)),
            };
            for mut obj in page.items {
                // List items carry no type of their own: the list's.
                obj.types = Some(TypeMeta {
                    api_version: ar.api_version.clone(),
                    kind: ar.kind.clone(),
                });
                let at = match &obj.metadata.namespace {
                    Some(ns) => format!("cluster, namespace {ns}"),
                    None => "cluster".to_string(),
                };
                match serde_json::to_value(&obj) {
                    Ok(doc) => self.listed.push((doc, at)),
                    Err(error) => return Err(ListError::Unreadable { resource, error }),
                }
            }
            match page.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(token) => params = params.continue_token(&token),
                None => return Ok(()),
            }
        }
    }
}

/// A failed list, said for the user whose kubeconfig kerf uses.
fn list_error(resource: &str, namespace: Option<&str>, e: &::kube::Error) -> ListError {
    let scope = namespace.map_or_else(
        || "in every namespace".to_string(),
        |ns| format!("in namespace {ns}"),
    );
    let fix = match e {
        ::kube::Error::Api(s) if s.code == 401 => {
            " (the API server rejected the kubeconfig's credentials)".to_string()
        }
        ::kube::Error::Api(s) if s.code == 403 => format!(
            " (the kubeconfig's user needs list on {resource}{}; --namespace lists one namespace)",
            if namespace.is_some() {
                " there"
            } else {
                " cluster-wide"
            }
        ),
        _ => String::new(),
    };
    ListError::List(format!(
        "listing {resource} {scope}: {}{fix}",
        crate::support::redact::redact(&error_chain(e))
    ))
}

/// Why a cluster could not be read once: every message names the resource and the fix.
#[derive(Debug, thiserror::Error)]
pub enum ListError {
    /// A list the API server refused or did not answer: the resource, the scope, its answer
    /// (credentials redacted) and the fix.
    #[error("{0}")]
    List(String),
    #[error("{resource}: an object kerf cannot read back: {error}")]
    Unreadable {
        resource: String,
        error: serde_json::Error,
    },
    #[error(transparent)]
    Manifests(#[from] crate::sources::dir::ManifestError),
}
