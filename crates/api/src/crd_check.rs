//! Offline admission check of a custom resource against a kerf CRD, as the API server would do it:
//! the OpenAPI structural part (the subset of keywords kerf's CRDs use) and the CEL rules
//! (`x-kubernetes-validations`, evaluated with kube's client-side CEL engine).
//!
//! Used by tests and CI to prove the CRDs reject exactly what `validate()` rejects, and to check
//! example manifests without a cluster. Supported OpenAPI keywords: `type`, `nullable`, `enum`,
//! `pattern`, `required`, `minLength`, `maxLength`, `minimum`, `maximum`, `maxItems`, `properties`
//! (unknown fields are errors, like `kubectl apply --validate=strict`), `additionalProperties`,
//! `items`, `default`, `x-kubernetes-int-or-string`, `x-kubernetes-preserve-unknown-fields`.
//! `format` is not checked. [`CrdChecker::new`] refuses a schema using any other keyword, so the
//! check cannot silently skip a constraint added later.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Mutex, OnceLock};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::core::cel::{CompiledSchema, Validator, apply_defaults, compile_schema};
use serde_json::Value;

/// One reason the object would be rejected, with the field path (`spec.metrics.compute…`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CrdViolation {
    pub field: String,
    pub message: String,
}

impl fmt::Display for CrdViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.field.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.field, self.message)
        }
    }
}

/// Keywords the structural check understands (or knowingly ignores).
const KNOWN_KEYWORDS: &[&str] = &[
    "type",
    "nullable",
    "enum",
    "pattern",
    "required",
    "minLength",
    "maxLength",
    "minimum",
    "maximum",
    "maxItems",
    "properties",
    "additionalProperties",
    "items",
    "default",
    "description",
    "title",
    "format",
    "x-kubernetes-int-or-string",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-validations",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-map-type",
];

/// A compiled kerf CRD, ready to check objects.
pub struct CrdChecker {
    group: String,
    kind: String,
    versions: Vec<String>,
    schema: Value,
    compiled: CompiledSchema,
    // Built once: registering the Kubernetes CEL functions dominates a single check.
    validator: Validator,
}

impl fmt::Debug for CrdChecker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CrdChecker({}/{})", self.group, self.kind)
    }
}

impl CrdChecker {
    /// Compiles the CRD's first served version's schema. Errors when the schema is missing, uses a
    /// keyword this checker does not implement, or has a CEL rule that does not compile.
    pub fn new(crd: &CustomResourceDefinition) -> Result<Self, String> {
        let kind = crd.spec.names.kind.clone();
        let version = crd
            .spec
            .versions
            .iter()
            .find(|v| v.served)
            .ok_or_else(|| format!("CRD {kind} has no served version"))?;
        let schema = version
            .schema
            .as_ref()
            .and_then(|s| s.open_api_v3_schema.as_ref())
            .ok_or_else(|| format!("CRD {kind} has no openAPIV3Schema"))?;
        let schema = serde_json::to_value(schema).map_err(|e| format!("CRD {kind}: {e}"))?;
        let mut unknown = Vec::new();
        unsupported_keywords(&schema, "", &mut unknown);
        if !unknown.is_empty() {
            return Err(format!(
                "CRD {kind} uses schema keywords the offline checker does not implement: {}",
                unknown.join(", ")
            ));
        }
        let compiled = compile_schema(&schema);
        let mut broken = Vec::new();
        compilation_errors(&compiled, "", &mut broken);
        if !broken.is_empty() {
            return Err(format!(
                "CRD {kind} has CEL rules that do not compile: {}",
                broken.join("; ")
            ));
        }
        Ok(Self {
            group: crd.spec.group.clone(),
            kind,
            versions: crd
                .spec
                .versions
                .iter()
                .filter(|v| v.served)
                .map(|v| v.name.clone())
                .collect(),
            schema,
            compiled,
            validator: Validator::new(),
        })
    }

    pub fn kind(&self) -> &str {
        &self.kind
    }

    /// Whether this CRD serves `apiVersion`/`kind`.
    pub fn serves(&self, api_version: &str, kind: &str) -> bool {
        kind == self.kind
            && api_version
                .split_once('/')
                .is_some_and(|(g, v)| g == self.group && self.versions.iter().any(|s| s == v))
    }

    /// Every reason the API server would reject `object` at creation: structure first, then CEL
    /// (CEL runs on the defaulted object, as in admission).
    pub fn check(&self, object: &Value) -> Result<(), Vec<CrdViolation>> {
        let mut errors = Vec::new();
        let (api_version, kind) = type_of(object);
        if !self.serves(api_version, kind) {
            errors.push(violation(
                "",
                format!(
                    "apiVersion/kind {api_version}/{kind} is not served by the {} CRD",
                    self.kind
                ),
            ));
        }
        let name = object
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if name.is_empty() {
            errors.push(violation("metadata.name", "is required"));
        }
        // The root schema describes spec/status; apiVersion, kind and metadata are the server's.
        let mut body = object.clone();
        if let Some(map) = body.as_object_mut() {
            for key in ["apiVersion", "kind", "metadata"] {
                map.remove(key);
            }
        }
        structural(&self.schema, &body, "", &mut errors);
        if errors.is_empty() {
            // Defaults are applied before CEL in admission; kube-cel does it itself too, the
            // explicit call keeps that visible.
            let defaulted = apply_defaults(&self.schema, object);
            if let Err(cel) = self
                .validator
                .validate_compiled(&self.compiled, &defaulted, None)
            {
                errors.extend(
                    cel.into_vec()
                        .into_iter()
                        .map(|e| violation(&e.field_path, e.message)),
                );
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors)
        }
    }
}

/// An object's `apiVersion` and `kind` (empty when absent).
fn type_of(object: &Value) -> (&str, &str) {
    let field = |name: &str| object.get(name).and_then(Value::as_str).unwrap_or_default();
    (field("apiVersion"), field("kind"))
}

/// Finds the checker for `object` among `checkers` and runs it.
pub fn check_against(checkers: &[CrdChecker], object: &Value) -> Result<(), Vec<CrdViolation>> {
    let (api_version, kind) = type_of(object);
    match checkers.iter().find(|c| c.serves(api_version, kind)) {
        Some(c) => c.check(object),
        None => Err(vec![violation(
            "",
            format!("no kerf CRD serves {api_version}/{kind}"),
        )]),
    }
}

/// Checkers for every CRD kerf generates.
pub fn kerf_checkers() -> Result<Vec<CrdChecker>, String> {
    super::crds()
        .iter()
        .map(|(_, crd)| CrdChecker::new(crd))
        .collect()
}

fn violation(field: &str, message: impl Into<String>) -> CrdViolation {
    CrdViolation {
        field: field.to_string(),
        message: message.into(),
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

fn unsupported_keywords(schema: &Value, path: &str, out: &mut Vec<String>) {
    let Some(map) = schema.as_object() else {
        return;
    };
    for (key, sub) in map {
        if !KNOWN_KEYWORDS.contains(&key.as_str()) {
            // anyOf/oneOf only appear beside x-kubernetes-int-or-string, which is checked itself.
            let int_or_string = map.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true));
            if !(int_or_string && (key == "anyOf" || key == "oneOf")) {
                out.push(format!(
                    "{key} at {}",
                    if path.is_empty() { "<root>" } else { path }
                ));
            }
        }
        match key.as_str() {
            "properties" => {
                if let Some(props) = sub.as_object() {
                    for (name, child) in props {
                        unsupported_keywords(child, &join(path, name), out);
                    }
                }
            }
            "items" => unsupported_keywords(sub, &format!("{path}[]"), out),
            "additionalProperties" => unsupported_keywords(sub, &format!("{path}.*"), out),
            _ => {}
        }
    }
}

fn compilation_errors(compiled: &CompiledSchema, path: &str, out: &mut Vec<String>) {
    for e in compiled.compilation_errors() {
        out.push(format!(
            "{}: {e}",
            if path.is_empty() { "<root>" } else { path }
        ));
    }
    for (name, child) in &compiled.properties {
        compilation_errors(child, &join(path, name), out);
    }
    if let Some(items) = &compiled.items {
        compilation_errors(items, &format!("{path}[]"), out);
    }
    if let Some(extra) = &compiled.additional_properties {
        compilation_errors(extra, &format!("{path}.*"), out);
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn structural(schema: &Value, value: &Value, path: &str, errors: &mut Vec<CrdViolation>) {
    let flag = |key: &str| schema.get(key).and_then(Value::as_bool).unwrap_or(false);
    if value.is_null() {
        // Allowed when nullable; otherwise the server prunes it and `required` (checked at the
        // parent) reports it if the field was needed.
        return;
    }
    if flag("x-kubernetes-int-or-string") {
        if !(value.is_string() || value.is_i64() || value.is_u64()) {
            errors.push(violation(
                path,
                format!("must be an integer or a string, got {}", type_name(value)),
            ));
        }
        return;
    }
    let actual = type_name(value);
    if let Some(want) = schema.get("type").and_then(Value::as_str) {
        let ok = match want {
            "number" => matches!(actual, "number" | "integer"),
            "integer" => actual == "integer" || value.as_f64().is_some_and(|f| f.fract() == 0.0),
            other => other == actual,
        };
        if !ok {
            errors.push(violation(
                path,
                format!("must be of type {want}, got {actual}"),
            ));
            return;
        }
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
        && !allowed.contains(value)
    {
        let list: Vec<String> = allowed.iter().map(Value::to_string).collect();
        errors.push(violation(
            path,
            format!(
                "unsupported value {value}: must be one of {}",
                list.join(", ")
            ),
        ));
    }
    match value {
        Value::String(s) => {
            let len = s.chars().count() as u64;
            if let Some(min) = schema.get("minLength").and_then(Value::as_u64)
                && len < min
            {
                errors.push(violation(
                    path,
                    format!("must be at least {min} characters long"),
                ));
            }
            if let Some(max) = schema.get("maxLength").and_then(Value::as_u64)
                && len > max
            {
                errors.push(violation(
                    path,
                    format!("must be at most {max} characters long"),
                ));
            }
            if let Some(pattern) = schema.get("pattern").and_then(Value::as_str) {
                match pattern_matches(pattern, s) {
                    Ok(true) => {}
                    Ok(false) => errors.push(violation(
                        path,
                        format!("{s:?} does not match pattern {pattern}"),
                    )),
                    Err(e) => errors.push(violation(
                        path,
                        format!("schema pattern {pattern} is invalid: {e}"),
                    )),
                }
            }
        }
        Value::Number(n) => {
            let x = n.as_f64().unwrap_or(f64::NAN);
            if let Some(min) = schema.get("minimum").and_then(Value::as_f64)
                && x < min
            {
                errors.push(violation(path, format!("must be >= {min}")));
            }
            if let Some(max) = schema.get("maximum").and_then(Value::as_f64)
                && x > max
            {
                errors.push(violation(path, format!("must be <= {max}")));
            }
        }
        Value::Array(items) => {
            if let Some(max) = schema.get("maxItems").and_then(Value::as_u64)
                && items.len() as u64 > max
            {
                errors.push(violation(path, format!("must have at most {max} items")));
            }
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter().enumerate() {
                    structural(item_schema, item, &format!("{path}[{i}]"), errors);
                }
            }
        }
        Value::Object(map) => {
            let props = schema.get("properties").and_then(Value::as_object);
            if let Some(required) = schema.get("required").and_then(Value::as_array) {
                for name in required.iter().filter_map(Value::as_str) {
                    let present = map.get(name).is_some_and(|v| !v.is_null());
                    // A defaulted field is filled in before validation.
                    let defaulted = props
                        .and_then(|p| p.get(name))
                        .is_some_and(|s| s.get("default").is_some());
                    if !present && !defaulted {
                        errors.push(violation(&join(path, name), "is required"));
                    }
                }
            }
            let additional = schema.get("additionalProperties");
            for (key, child) in map {
                let child_path = join(path, key);
                if let Some(child_schema) = props.and_then(|p| p.get(key)) {
                    structural(child_schema, child, &child_path, errors);
                } else if let Some(extra) = additional.filter(|a| a.is_object()) {
                    structural(extra, child, &child_path, errors);
                } else if additional != Some(&Value::Bool(true))
                    && !flag("x-kubernetes-preserve-unknown-fields")
                {
                    let known: Vec<&str> = props
                        .map(|p| p.keys().map(String::as_str).collect())
                        .unwrap_or_default();
                    errors.push(violation(
                        &child_path,
                        super::strict::unknown_field_message(key, &known),
                    ));
                }
            }
        }
        Value::Null | Value::Bool(_) => {}
    }
}

/// Compiled schema patterns, shared by every check.
fn pattern_matches(pattern: &str, text: &str) -> Result<bool, regex::Error> {
    static CACHE: OnceLock<Mutex<HashMap<String, regex::Regex>>> = OnceLock::new();
    let mut cache = CACHE
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(re) = cache.get(pattern) {
        return Ok(re.is_match(text));
    }
    let re = regex::Regex::new(pattern)?;
    let matched = re.is_match(text);
    cache.insert(pattern.to_string(), re);
    Ok(matched)
}
