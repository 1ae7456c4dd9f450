//! Reading any kerf object from YAML/JSON with errors that name the offending field, whether the
//! problem is the shape (wrong type, unknown enum value, bad duration) or a validation rule.

use serde::de::DeserializeOwned;
use serde_json::Value;

use super::*;

/// Any kerf custom resource, typed.
#[derive(Clone, Debug, PartialEq)]
#[allow(clippy::large_enum_variant)]
pub enum KerfObject {
    GpuReactivePolicy(GpuReactivePolicy),
    ClusterGpuReactivePolicy(ClusterGpuReactivePolicy),
    GlobalConfiguration(GlobalConfiguration),
    AutomationStrategy(AutomationStrategy),
    ClusterAutomationStrategy(ClusterAutomationStrategy),
    PolicyEvaluation(PolicyEvaluation),
    RightsizingPolicy(RightsizingPolicy),
    ClusterRightsizingPolicy(ClusterRightsizingPolicy),
    RightsizingRecommendation(RightsizingRecommendation),
}

/// The kinds [`KerfObject`] reads.
pub const KERF_KINDS: [&str; 9] = [
    "GpuReactivePolicy",
    "ClusterGpuReactivePolicy",
    "GlobalConfiguration",
    "AutomationStrategy",
    "ClusterAutomationStrategy",
    "PolicyEvaluation",
    "RightsizingPolicy",
    "ClusterRightsizingPolicy",
    "RightsizingRecommendation",
];

fn typed<T: DeserializeOwned>(value: &Value) -> Result<T, ValidationError> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let path = if path == "." { String::new() } else { path };
        let message = e.into_inner().to_string();
        // serde reports a missing field at its parent; name the field itself.
        let missing = message
            .strip_prefix("missing field `")
            .and_then(|rest| rest.split_once('`'))
            .map(|(name, _)| name.to_string());
        let field = match missing {
            Some(name) if path.is_empty() => name,
            Some(name) => format!("{path}.{name}"),
            None => path,
        };
        ValidationError(vec![FieldError { field, message }])
    })
}

impl KerfObject {
    /// Whether `apiVersion`/`kind` is a kerf kind (of any served version).
    pub fn is_kerf(value: &Value) -> bool {
        let api_version = value
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let kind = value
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or_default();
        api_version.starts_with(&format!("{GROUP}/")) && KERF_KINDS.contains(&kind)
    }

    /// Deserializes without validating. Errors name the field (`spec.metrics.compute…`).
    pub fn from_value(value: &Value) -> Result<Self, ValidationError> {
        let api_version = value
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if api_version != format!("{GROUP}/{VERSION}") {
            return Err(ValidationError(vec![FieldError {
                field: "apiVersion".into(),
                message: format!("must be {GROUP}/{VERSION} (got {api_version:?})"),
            }]));
        }
        let kind = value
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or_default();
        Ok(match kind {
            "GpuReactivePolicy" => Self::GpuReactivePolicy(typed(value)?),
            "ClusterGpuReactivePolicy" => Self::ClusterGpuReactivePolicy(typed(value)?),
            "GlobalConfiguration" => Self::GlobalConfiguration(typed(value)?),
            "AutomationStrategy" => Self::AutomationStrategy(typed(value)?),
            "ClusterAutomationStrategy" => Self::ClusterAutomationStrategy(typed(value)?),
            "PolicyEvaluation" => Self::PolicyEvaluation(typed(value)?),
            "RightsizingPolicy" => Self::RightsizingPolicy(typed(value)?),
            "ClusterRightsizingPolicy" => Self::ClusterRightsizingPolicy(typed(value)?),
            "RightsizingRecommendation" => Self::RightsizingRecommendation(typed(value)?),
            other => {
                return Err(ValidationError(vec![FieldError {
                    field: "kind".into(),
                    message: format!(
                        "{other:?} is not a kerf kind (one of {})",
                        KERF_KINDS.join(", ")
                    ),
                }]));
            }
        })
    }

    /// Like [`from_value`](Self::from_value), but also rejects fields the schema does not
    /// declare (as `kubectl apply`'s strict field validation does), naming each with the nearest
    /// declared name ([`super::strict`]).
    pub fn from_value_strict(value: &Value) -> Result<Self, ValidationError> {
        let unknown = super::strict::unknown_fields(value);
        if !unknown.is_empty() {
            return Err(ValidationError(unknown));
        }
        Self::from_value(value)
    }

    /// Deserializes and validates: what the CRD (OpenAPI + CEL) would accept.
    pub fn parse(value: &Value) -> Result<Self, ValidationError> {
        let object = Self::from_value_strict(value)?;
        object.validate()?;
        Ok(object)
    }

    /// Parses one YAML document.
    pub fn parse_yaml(text: &str) -> Result<Self, ValidationError> {
        let value: Value = serde_saphyr::from_str(text).map_err(|e| {
            ValidationError(vec![FieldError {
                field: String::new(),
                message: format!("not valid YAML: {e}"),
            }])
        })?;
        Self::parse(&value)
    }

    pub fn kind(&self) -> &'static str {
        match self {
            Self::GpuReactivePolicy(_) => "GpuReactivePolicy",
            Self::ClusterGpuReactivePolicy(_) => "ClusterGpuReactivePolicy",
            Self::GlobalConfiguration(_) => "GlobalConfiguration",
            Self::AutomationStrategy(_) => "AutomationStrategy",
            Self::ClusterAutomationStrategy(_) => "ClusterAutomationStrategy",
            Self::PolicyEvaluation(_) => "PolicyEvaluation",
            Self::RightsizingPolicy(_) => "RightsizingPolicy",
            Self::ClusterRightsizingPolicy(_) => "ClusterRightsizingPolicy",
            Self::RightsizingRecommendation(_) => "RightsizingRecommendation",
        }
    }

    /// The same rules as the CRD, with field-named messages.
    pub fn validate(&self) -> Result<(), ValidationError> {
        let mut v = Validator::default();
        let name = match self {
            Self::GpuReactivePolicy(o) => o.metadata.name.as_deref(),
            Self::ClusterGpuReactivePolicy(o) => o.metadata.name.as_deref(),
            Self::GlobalConfiguration(o) => o.metadata.name.as_deref(),
            Self::AutomationStrategy(o) => o.metadata.name.as_deref(),
            Self::ClusterAutomationStrategy(o) => o.metadata.name.as_deref(),
            Self::PolicyEvaluation(o) => o.metadata.name.as_deref(),
            Self::RightsizingPolicy(o) => o.metadata.name.as_deref(),
            Self::ClusterRightsizingPolicy(o) => o.metadata.name.as_deref(),
            Self::RightsizingRecommendation(o) => o.metadata.name.as_deref(),
        };
        v.check(
            name.is_some_and(|n| !n.is_empty()),
            "metadata.name",
            "is required",
        );
        v.merge(match self {
            Self::GpuReactivePolicy(o) => o.spec.validate(),
            Self::ClusterGpuReactivePolicy(o) => o.spec.validate(),
            Self::GlobalConfiguration(o) => o.validate(),
            Self::AutomationStrategy(o) => o.spec.validate(),
            Self::ClusterAutomationStrategy(o) => o.spec.validate(),
            Self::PolicyEvaluation(o) => o.validate(),
            Self::RightsizingPolicy(o) => o.spec.validate(),
            Self::ClusterRightsizingPolicy(o) => o.spec.validate(),
            Self::RightsizingRecommendation(_) => Ok(()),
        });
        v.finish()
    }

    /// Back to a JSON value (what `kubectl get -o json` would show, minus server fields).
    pub fn to_value(&self) -> Value {
        let v = match self {
            Self::GpuReactivePolicy(o) => serde_json::to_value(o),
            Self::ClusterGpuReactivePolicy(o) => serde_json::to_value(o),
            Self::GlobalConfiguration(o) => serde_json::to_value(o),
            Self::AutomationStrategy(o) => serde_json::to_value(o),
            Self::ClusterAutomationStrategy(o) => serde_json::to_value(o),
            Self::PolicyEvaluation(o) => serde_json::to_value(o),
            Self::RightsizingPolicy(o) => serde_json::to_value(o),
            Self::ClusterRightsizingPolicy(o) => serde_json::to_value(o),
            Self::RightsizingRecommendation(o) => serde_json::to_value(o),
        };
        v.unwrap_or(Value::Null)
    }
}
