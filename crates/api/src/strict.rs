//! Strict field validation of kerf's own objects: a field the kind's schema does not declare is
//! an error naming its path and the nearest declared name, as the API server's strict field
//! validation reports it to `kubectl apply` (the default since Kubernetes 1.27): the API server
//! reports every field its pruning would drop as `unknown field "spec.…"`.
//!
//! The rule is the pruning algorithm's (kubernetes/kubernetes
//! `staging/src/k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning/algorithm.go`,
//! commit 5e813c7ced0ff1902d8fe09a80cba36888740015): at the root `apiVersion`, `kind` and
//! `metadata` are the server's; a key is kept when its object's schema declares it in
//! `properties`, else when the schema has `additionalProperties`, else it is dropped — an object
//! schema with neither drops every key; `x-kubernetes-preserve-unknown-fields` keeps unknown keys
//! and still walks the declared ones.
//!
//! The schema is the one the CRDs are generated from (`crds()`). `metadata` is checked against
//! `ObjectMeta`'s own schema (the server decodes it as `ObjectMeta`), where a property schema
//! without properties is raw JSON (`managedFields[].fieldsV1`) and holds anything.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use serde_json::Value;

use super::FieldError;

/// Similarity above which a declared name is suggested for an unknown one: clap's rule for
/// "did you mean" (`clap_builder/src/parser/features/suggestions.rs`, Jaro similarity > 0.7).
const SUGGESTION_CONFIDENCE: f64 = 0.7;

/// Each kerf kind's `openAPIV3Schema`, from the types.
fn kind_schemas() -> &'static HashMap<String, Value> {
    static SCHEMAS: OnceLock<HashMap<String, Value>> = OnceLock::new();
    SCHEMAS.get_or_init(|| {
        super::crds()
            .into_iter()
            .filter_map(|(_, crd)| {
                let version = crd.spec.versions.iter().find(|v| v.served)?;
                let schema = version.schema.as_ref()?.open_api_v3_schema.as_ref()?;
                Some((
                    crd.spec.names.kind.clone(),
                    serde_json::to_value(schema).ok()?,
                ))
            })
            .collect()
    })
}

/// `T`'s schema as k8s-openapi declares it, subschemas inlined (the form a CRD's schema has).
fn schema_of<T: schemars::JsonSchema>() -> Value {
    let generator = schemars::generate::SchemaSettings::openapi3()
        .with(|s| s.inline_subschemas = true)
        .into_generator();
    serde_json::to_value(generator.into_root_schema_for::<T>()).unwrap_or(Value::Null)
}

/// `ObjectMeta`'s schema.
fn metadata_schema() -> &'static Value {
    static SCHEMA: OnceLock<Value> = OnceLock::new();
    SCHEMA.get_or_init(schema_of::<k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta>)
}

/// Every field of a Kubernetes object that `T`, the Kubernetes type kerf reads it as, does not
/// declare: what kerf's reading drops without a word, by the same walk as kerf's own kinds. Not
/// an error: a newer cluster's objects carry fields kerf's Kubernetes types do not know yet.
pub fn unknown_fields_of<T: schemars::JsonSchema>(object: &Value) -> Vec<FieldError> {
    type Schemas = Mutex<HashMap<&'static str, Arc<Value>>>;
    // A static in a generic function is one for every `T`: the schemas are keyed by type.
    static SCHEMAS: OnceLock<Schemas> = OnceLock::new();
    let schema = SCHEMAS
        .get_or_init(Schemas::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .entry(std::any::type_name::<T>())
        .or_insert_with(|| Arc::new(schema_of::<T>()))
        .clone();
    let mut out = Vec::new();
    walk(&schema, object, "", Bare::RawJson, &mut out);
    out
}

/// Every field of `object` (a kerf kind, by its `kind`) that its schema does not declare, in
/// document order. An unknown kind has no schema here: nothing is reported (the caller rejects
/// the kind itself).
pub fn unknown_fields(object: &Value) -> Vec<FieldError> {
    let mut out = Vec::new();
    let kind = object.get("kind").and_then(Value::as_str).unwrap_or("");
    let (Some(schema), Some(map)) = (kind_schemas().get(kind), object.as_object()) else {
        return out;
    };
    for (key, value) in map {
        match key.as_str() {
            "apiVersion" | "kind" => {}
            "metadata" => walk(
                metadata_schema(),
                value,
                "metadata",
                Bare::RawJson,
                &mut out,
            ),
            _ => match schema.pointer(&format!("/properties/{}", escape(key))) {
                Some(child) => walk(child, value, key, Bare::DropsEverything, &mut out),
                None => {
                    let mut known: Vec<&str> = vec!["apiVersion", "kind", "metadata"];
                    known.extend(property_names(schema));
                    out.push(unknown(key, key, &known));
                }
            },
        }
    }
    out
}

/// A JSON pointer token for `key` (RFC 6901).
fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

fn property_names(schema: &Value) -> Vec<&str> {
    schema
        .get("properties")
        .and_then(Value::as_object)
        .map(|p| p.keys().map(String::as_str).collect())
        .unwrap_or_default()
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// How an object schema with neither `properties` nor `additionalProperties` is read: as the
/// pruning algorithm does (every key unknown), or as raw JSON (`ObjectMeta`'s `fieldsV1`).
#[derive(Clone, Copy, PartialEq)]
enum Bare {
    DropsEverything,
    RawJson,
}

fn walk(schema: &Value, value: &Value, path: &str, bare: Bare, out: &mut Vec<FieldError>) {
    let preserve = schema.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
    match value {
        Value::Object(map) => {
            let props = schema.get("properties").and_then(Value::as_object);
            let additional = schema
                .get("additionalProperties")
                .filter(|a| **a != Value::Bool(false));
            if props.is_none() && additional.is_none() && bare == Bare::RawJson {
                return;
            }
            for (key, child) in map {
                let child_path = join(path, key);
                if let Some(s) = props.and_then(|p| p.get(key)) {
                    walk(s, child, &child_path, bare, out);
                } else if let Some(extra) = additional {
                    walk(extra, child, &child_path, bare, out);
                } else if !preserve {
                    out.push(unknown(&child_path, key, &property_names(schema)));
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter().enumerate() {
                    walk(item_schema, item, &format!("{path}[{i}]"), bare, out);
                }
            }
        }
        _ => {}
    }
}

/// The error for the unknown field `key` at `path`, suggesting the nearest of `known`.
fn unknown(path: &str, key: &str, known: &[&str]) -> FieldError {
    FieldError {
        field: path.to_string(),
        message: unknown_field_message(key, known),
    }
}

/// `unknown field; did you mean thresholdPercent?`, or the declared names when none is close.
pub fn unknown_field_message(key: &str, known: &[&str]) -> String {
    match nearest(key, known) {
        Some(name) => format!("unknown field; did you mean {name}?"),
        None if known.is_empty() => "unknown field".to_string(),
        None => format!("unknown field (known here: {})", known.join(", ")),
    }
}

/// The declared name most similar to `key`, if similar enough.
pub fn nearest<'a>(key: &str, known: &[&'a str]) -> Option<&'a str> {
    known
        .iter()
        .map(|k| (strsim::jaro(key, k), *k))
        .filter(|(confidence, _)| *confidence > SUGGESTION_CONFIDENCE)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, k)| k)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errors(yaml: &str) -> Vec<String> {
        let v: Value = serde_saphyr::from_str(yaml).unwrap();
        unknown_fields(&v).iter().map(ToString::to_string).collect()
    }

    /// The typo of the report, a misspelled section and a top-level key: each named by its path
    /// with the nearest declared name, all of them at once.
    #[test]
    fn unknown_fields_are_named_with_the_nearest_declared_name() {
        let got = errors(
            r#"
apiVersion: rightsizing.kubex.ai/v1alpha1
kind: GpuReactivePolicy
metadata: {name: p, namespace: a, labelz: {x: y}}
spec:
  experimental: {gpuKaiContract: v1alpha1-2026-07}
  automationStrategyRef: {name: s}
  metrcs: {}
  scope: {labelSelector: {matchLabels: {any-key: v}}}
specc: {}
"#,
        );
        assert_eq!(
            got,
            [
                "metadata.labelz: unknown field; did you mean labels?",
                "spec.metrcs: unknown field; did you mean metrics?",
                "specc: unknown field; did you mean spec?",
            ]
        );
        let got = errors(
            r#"
apiVersion: rightsizing.kubex.ai/v1alpha1
kind: GpuReactivePolicy
metadata: {name: p}
spec:
  metrics:
    compute:
      upsize: {thresholdPercnt: 150}
"#,
        );
        assert_eq!(
            got,
            [
                "spec.metrics.compute.upsize.thresholdPercnt: unknown field; did you mean thresholdPercent?"
            ]
        );
    }

    /// What the API server adds and keeps (status, managedFields with their free-form
    /// fieldsV1, resourceVersion, …) is known: `kubectl get -o yaml` output passes.
    #[test]
    fn server_fields_are_known() {
        let got = errors(
            r#"
apiVersion: rightsizing.kubex.ai/v1alpha1
kind: AutomationStrategy
metadata:
  name: s
  namespace: a
  uid: 0b2f
  resourceVersion: "12"
  generation: 3
  creationTimestamp: "2026-01-01T00:00:00Z"
  annotations: {kubectl.kubernetes.io/last-applied-configuration: "{}"}
  managedFields:
  - manager: kubectl
    operation: Apply
    apiVersion: rightsizing.kubex.ai/v1alpha1
    fieldsType: FieldsV1
    fieldsV1: {"f:spec": {"f:kai": {}}}
spec: {kai: {queue: q}}
"#,
        );
        assert_eq!(got, Vec::<String>::new());
    }

    /// The pruning algorithm's rule, encoded apart from the walk: a key is kept when declared,
    /// else when the object has `additionalProperties` (a `true` there is a schema), else
    /// dropped; preserve-unknown keeps undeclared keys but still walks the declared ones.
    #[test]
    fn fields_are_unknown_exactly_where_the_api_server_prunes_them() {
        let schema = serde_json::json!({
            "type": "object",
            "properties": {
                "declared": {"type": "object", "properties": {"a": {"type": "string"}}},
                "map": {"type": "object", "additionalProperties": {"type": "string"}},
                "bare": {"type": "object"},
                "kept": {"type": "object", "x-kubernetes-preserve-unknown-fields": true,
                         "properties": {"inner": {"type": "object", "properties": {}}}},
                "list": {"type": "array", "items": {"type": "object", "properties": {"b": {}}}}
            }
        });
        let value = serde_json::json!({
            "declared": {"a": "x", "z": 1},
            "map": {"any": "v"},
            "bare": {"k": 1},
            "kept": {"free": 1, "inner": {"gone": 2}},
            "list": [{"b": 1}, {"c": 2}],
            "top": 3
        });
        let mut out = Vec::new();
        walk(&schema, &value, "", Bare::DropsEverything, &mut out);
        let mut fields: Vec<String> = out.into_iter().map(|e| e.field).collect();
        fields.sort();
        assert_eq!(
            fields,
            [
                "bare.k",
                "declared.z",
                "kept.inner.gone",
                "list[1].c",
                "top"
            ]
        );
    }

    #[test]
    fn a_name_far_from_every_declared_one_lists_them() {
        assert_eq!(
            unknown_field_message("zzz", &["cpu", "memory"]),
            "unknown field (known here: cpu, memory)"
        );
        assert_eq!(nearest("memroy", &["cpu", "memory"]), Some("memory"));
    }
}
