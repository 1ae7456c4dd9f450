//! kerf's own kinds as the reader decodes them: one object at a time, an object that does not
//! decode or validate left out (a policy reported as [`InvalidPolicy`]).

use super::*;

/// A kerf kind as the reader decodes it.
pub trait KerfKind:
    Resource<DynamicType = ()> + DeserializeOwned + Clone + Debug + Send + Sync + 'static
{
    /// Set for the four policy kinds (their problems are reported in their status).
    const POLICY: Option<PolicyType>;
    /// The kind's name, as listed in [`crate::api::KERF_KINDS`].
    const KIND: &'static str;
    /// The same checks as the CRD, with field-named messages.
    fn check(&self) -> Result<(), String>;
}

macro_rules! kerf_kind {
    ($t:ty, $policy:expr) => {
        impl KerfKind for $t {
            const POLICY: Option<PolicyType> = $policy;
            const KIND: &'static str = stringify!($t);
            fn check(&self) -> Result<(), String> {
                self.spec.validate().map_err(|e| e.to_string())
            }
        }
    };
}

kerf_kind!(GpuReactivePolicy, Some(PolicyType::GpuReactivePolicy));
kerf_kind!(
    ClusterGpuReactivePolicy,
    Some(PolicyType::ClusterGpuReactivePolicy)
);
kerf_kind!(RightsizingPolicy, Some(PolicyType::RightsizingPolicy));
kerf_kind!(
    ClusterRightsizingPolicy,
    Some(PolicyType::ClusterRightsizingPolicy)
);
kerf_kind!(GlobalConfiguration, None);
kerf_kind!(PolicyEvaluation, None);
kerf_kind!(AutomationStrategy, None);
kerf_kind!(ClusterAutomationStrategy, None);

impl KerfKind for RightsizingRecommendation {
    const POLICY: Option<PolicyType> = None;
    const KIND: &'static str = "RightsizingRecommendation";
    fn check(&self) -> Result<(), String> {
        Ok(())
    }
}

/// An object the reader could not use, with why.
#[derive(Clone, Debug, PartialEq)]
pub struct Rejected {
    pub kind: String,
    pub namespace: Option<String>,
    pub name: String,
    pub generation: Option<i64>,
    pub error: String,
    /// The object as received (only kept for rejected objects).
    pub raw: serde_json::Value,
}

/// The result of decoding one watched object.
#[derive(Clone, Debug)]
pub enum Decoded<K> {
    Valid(Arc<K>),
    Invalid(Rejected),
}

/// Decodes one object into its typed kind and validates it. Never fails: problems come back as
/// [`Decoded::Invalid`] naming the object and the reason.
pub fn decode<K: KerfKind>(obj: DynamicObject) -> Decoded<K> {
    let kind = K::kind(&()).to_string();
    let namespace = obj.metadata.namespace.clone();
    let name = obj.metadata.name.clone().unwrap_or_default();
    let generation = obj.metadata.generation;
    let raw = serde_json::to_value(&obj).unwrap_or(serde_json::Value::Null);
    let error = match serde_json::from_value::<K>(raw.clone()) {
        Ok(k) => match k.check() {
            Ok(()) => return Decoded::Valid(Arc::new(k)),
            Err(e) => format!("invalid spec: {e}"),
        },
        Err(e) => format!("cannot decode: {e}"),
    };
    tracing::warn!(
        kind = %kind,
        namespace = namespace.as_deref().unwrap_or(""),
        name = %name,
        error = %error,
        "skipping invalid object"
    );
    Decoded::Invalid(Rejected {
        kind,
        namespace,
        name,
        generation,
        error,
        raw,
    })
}

pub(super) type ObjKey = (Option<String>, String);

/// The decoded objects of one kerf kind, maintained from watcher events.
pub(super) type KerfIndex<K> = Projected<Decoded<K>>;

impl<K> KerfIndex<K> {
    pub(super) fn valid(&self) -> Vec<Arc<K>> {
        let st = self.state.read().unwrap_or_else(|e| e.into_inner());
        st.live
            .values()
            .filter_map(|d| match d {
                Decoded::Valid(k) => Some(k.clone()),
                Decoded::Invalid(_) => None,
            })
            .collect()
    }

    pub(super) fn rejected(&self) -> Vec<Rejected> {
        let st = self.state.read().unwrap_or_else(|e| e.into_inner());
        st.live
            .values()
            .filter_map(|d| match d {
                Decoded::Invalid(r) => Some(r.clone()),
                Decoded::Valid(_) => None,
            })
            .collect()
    }
}

pub use crate::core::snapshot::InvalidPolicy;

/// A policy the API server holds but kerf rejected, as its status reports it.
pub(super) fn invalid_policy(r: Rejected, policy_type: PolicyType) -> InvalidPolicy {
    let status = r
        .raw
        .get("status")
        .and_then(|s| serde_json::from_value::<PolicyStatus>(s.clone()).ok());
    InvalidPolicy {
        id: PolicyId {
            kind: policy_type.as_str().into(),
            namespace: r.namespace.map(Into::into),
            name: r.name.into(),
        },
        policy_type,
        generation: r.generation,
        error: r.error,
        status,
    }
}
