//! Workload kinds an operator lists in GlobalConfiguration `spec.workloadKinds` (docs/workloads.md):
//! a controller kerf does not know by name, its pods grouped under it as under the known ones.
//!
//! A listed kind is a [`ListedKind`], a `Copy` handle to its interned description, so that
//! [`super::WorkloadKind`] stays `Copy` and comparable like the built-in kinds. The kinds the
//! current configuration lists are kept for the process ([`set_listed`]): names are resolved
//! against them ([`listed_by_name`], [`listed_of_object`]) wherever a kind is read from text.

use std::sync::{Mutex, RwLock};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::api_group;

/// One entry of `spec.workloadKinds`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadKindSpec {
    /// The API group (`example.com`).
    #[schemars(length(min = 1))]
    pub group: String,
    /// The version kerf reads (`v1`).
    #[schemars(length(min = 1))]
    pub version: String,
    /// The kind (`InferenceGraph`).
    #[schemars(length(min = 1))]
    pub kind: String,
    /// The resource name in the API; default the kind lower-cased with an `s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plural: Option<String>,
    /// Where its pod template is, dot-separated (`spec.template`): kerf writes it as a
    /// Deployment's. Absent: kerf never writes the object; a change reaches pods at admission
    /// and by eviction.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template_path: Option<String>,
}

impl WorkloadKindSpec {
    /// What is wrong with the entry at `at` (`spec.workloadKinds[0]`), each problem with its
    /// field.
    pub fn problems(&self, at: &str) -> Vec<(String, String)> {
        let mut out = Vec::new();
        let mut bad = |field: &str, why: String| out.push((format!("{at}.{field}"), why));
        if !is_dns_subdomain(&self.group) {
            bad(
                "group",
                "must be an API group such as example.com (the core group has no workload kinds)"
                    .into(),
            );
        }
        if self.version.is_empty() || !self.version.chars().all(|c| c.is_ascii_alphanumeric()) {
            bad("version", "must be a version such as v1".into());
        }
        let kind_ok = self
            .kind
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_uppercase())
            && self.kind.chars().all(|c| c.is_ascii_alphanumeric());
        if !kind_ok {
            bad("kind", "must be a kind such as InferenceGraph".into());
        } else if super::WorkloadKind::ALL
            .iter()
            .any(|k| k.as_str() == self.kind || k.kind_name() == self.kind)
        {
            bad(
                "kind",
                format!(
                    "{} is a kind kerf knows already: list only other kinds",
                    self.kind
                ),
            );
        }
        if let Some(p) = &self.plural
            && !is_dns_label(p)
        {
            bad("plural", "must be a lower-case resource name".into());
        }
        if let Some(t) = &self.template_path
            && (t.is_empty() || t.split('.').any(str::is_empty))
        {
            bad(
                "templatePath",
                "must be a dot-separated path such as spec.template".into(),
            );
        }
        out
    }
}

fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_dns_label)
}

/// A listed kind's description, interned for the process (a few per configuration).
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ListedKindData {
    pub kind: &'static str,
    pub api_version: &'static str,
    pub plural: &'static str,
    /// Where its pod template is; `None`: kerf never writes it.
    pub template_path: Option<&'static [&'static str]>,
}

/// A kind listed in `spec.workloadKinds`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ListedKind(&'static ListedKindData);

impl ListedKind {
    pub fn data(self) -> &'static ListedKindData {
        self.0
    }

    /// The handle of `spec`, the same one for the same description.
    pub fn of(spec: &WorkloadKindSpec) -> ListedKind {
        let plural = spec
            .plural
            .clone()
            .unwrap_or_else(|| format!("{}s", spec.kind.to_ascii_lowercase()));
        let path: Option<Vec<String>> = spec
            .template_path
            .as_ref()
            .map(|t| t.split('.').map(str::to_string).collect());
        let api_version = format!("{}/{}", spec.group, spec.version);
        let mut interned = INTERNED.lock().unwrap_or_else(|e| e.into_inner());
        let same = |d: &ListedKindData| {
            d.kind == spec.kind
                && d.api_version == api_version
                && d.plural == plural
                && d.template_path.map(|p| p.to_vec())
                    == path
                        .as_ref()
                        .map(|p| p.iter().map(String::as_str).collect::<Vec<_>>())
        };
        if let Some(k) = interned.iter().find(|k| same(k.0)) {
            return *k;
        }
        // Leaked once per distinct description the configuration ever lists.
        let leak = |s: String| -> &'static str { Box::leak(s.into_boxed_str()) };
        let data = ListedKindData {
            kind: leak(spec.kind.clone()),
            api_version: leak(api_version),
            plural: leak(plural),
            template_path: path.map(|p| {
                let segments: Vec<&'static str> = p.into_iter().map(leak).collect();
                &*Box::leak(segments.into_boxed_slice())
            }),
        };
        let k = ListedKind(Box::leak(Box::new(data)));
        interned.push(k);
        k
    }
}

static INTERNED: Mutex<Vec<ListedKind>> = Mutex::new(Vec::new());
static CURRENT: RwLock<Vec<ListedKind>> = RwLock::new(Vec::new());

/// Makes the kinds of `specs` (the configuration's `workloadKinds`, valid entries only) the ones
/// names resolve to; returns them.
pub fn set_listed(specs: &[WorkloadKindSpec]) -> Vec<ListedKind> {
    let kinds: Vec<ListedKind> = specs
        .iter()
        .filter(|s| s.problems("").is_empty())
        .map(ListedKind::of)
        .collect();
    *CURRENT.write().unwrap_or_else(|e| e.into_inner()) = kinds.clone();
    kinds
}

/// The kinds the configuration lists now.
pub fn listed() -> Vec<ListedKind> {
    CURRENT.read().unwrap_or_else(|e| e.into_inner()).clone()
}

/// The listed kind named `name` (its kind, case-insensitive).
pub fn listed_by_name(name: &str) -> Option<ListedKind> {
    listed()
        .into_iter()
        .find(|k| k.0.kind.eq_ignore_ascii_case(name))
}

/// The listed kind of an object of `api_version` and `kind` (its group checked).
pub fn listed_of_object(api_version: &str, kind: &str) -> Option<ListedKind> {
    listed()
        .into_iter()
        .find(|k| k.0.kind == kind && api_group(k.0.api_version) == api_group(api_version))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(kind: &str, template: Option<&str>) -> WorkloadKindSpec {
        WorkloadKindSpec {
            group: "example.com".into(),
            version: "v1".into(),
            kind: kind.into(),
            plural: None,
            template_path: template.map(str::to_string),
        }
    }

    #[test]
    fn a_listed_kind_is_interned_once_and_named_by_its_plural_and_template_path() {
        let a = ListedKind::of(&spec("InferenceGraph", Some("spec.template")));
        let b = ListedKind::of(&spec("InferenceGraph", Some("spec.template")));
        assert_eq!(a, b);
        assert!(std::ptr::eq(a.data(), b.data()));
        assert_eq!(a.data().plural, "inferencegraphs");
        assert_eq!(a.data().api_version, "example.com/v1");
        assert_eq!(a.data().template_path, Some(&["spec", "template"][..]));
        assert_ne!(a, ListedKind::of(&spec("InferenceGraph", None)));
    }

    #[test]
    fn workload_kind_spec_problems_name_the_field() {
        let fields = |s: WorkloadKindSpec| -> Vec<String> {
            s.problems("spec.workloadKinds[0]")
                .into_iter()
                .map(|(f, _)| f)
                .collect()
        };
        assert!(fields(spec("InferenceGraph", Some("spec.template"))).is_empty());
        assert_eq!(
            fields(spec("Deployment", None)),
            ["spec.workloadKinds[0].kind"]
        );
        assert_eq!(
            fields(spec("inferenceGraph", Some("spec..template"))),
            [
                "spec.workloadKinds[0].kind",
                "spec.workloadKinds[0].templatePath"
            ]
        );
        let mut s = spec("Graph", None);
        s.group = "Example_Com".into();
        assert_eq!(fields(s), ["spec.workloadKinds[0].group"]);
    }
}
