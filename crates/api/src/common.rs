//! Types shared by several kerf kinds: durations, scopes, references, status.

use std::borrow::Cow;
use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use kube::KubeSchema;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

pub const GROUP: &str = "rightsizing.kubex.ai";
pub const VERSION: &str = "v1alpha1";
/// The only KAI contract this build implements.
pub const GPU_KAI_CONTRACT: &str = "v1alpha1-2026-07";

/// A duration written as `<days>d<hours>h<minutes>m<seconds>s` (each part optional, at least one),
/// e.g. `10m`, `1h30m`, `7d`, `0s`. Kept as its text so manifests round-trip unchanged.
#[derive(Clone, PartialEq, Eq)]
pub struct DurationStr {
    text: String,
    seconds: u64,
}

/// Pattern the CRD enforces; `DurationStr::parse` accepts exactly the same language.
pub const DURATION_PATTERN: &str = "^([1-9][0-9]*d)?([0-9]+h)?([0-9]+m)?([0-9]+s)?$";
/// Longest duration text (CRD `maxLength`): the longest length at which every text matching the
/// pattern still fits in `u64` seconds, so the CRD and `DurationStr::parse` accept the same set.
pub const DURATION_MAX_LENGTH: usize = 15;

impl DurationStr {
    pub fn parse(text: &str) -> Result<Self, String> {
        let bad = || {
            format!(
                "invalid duration {text:?}: expected e.g. 30s, 10m, 1h30m or 7d (units d, h, m, s in that order)"
            )
        };
        if text.is_empty() {
            return Err(bad());
        }
        if text.len() > DURATION_MAX_LENGTH {
            return Err(format!(
                "invalid duration {text:?}: at most {DURATION_MAX_LENGTH} characters"
            ));
        }
        let mut seconds: u64 = 0;
        let mut digits = String::new();
        let mut last_unit = 0usize;
        for ch in text.chars() {
            if ch.is_ascii_digit() {
                digits.push(ch);
                continue;
            }
            let (rank, mult) = match ch {
                'd' => (1, 86_400),
                'h' => (2, 3_600),
                'm' => (3, 60),
                's' => (4, 1),
                _ => return Err(bad()),
            };
            // A day part is never zero or zero-padded, so the CEL rule can treat `d` as ≥ 1 day.
            if digits.is_empty() || rank <= last_unit || (rank == 1 && digits.starts_with('0')) {
                return Err(bad());
            }
            let n: u64 = digits.parse().map_err(|_| bad())?;
            seconds = n
                .checked_mul(mult)
                .and_then(|v| seconds.checked_add(v))
                .ok_or_else(bad)?;
            digits.clear();
            last_unit = rank;
        }
        if !digits.is_empty() {
            return Err(bad());
        }
        Ok(Self {
            text: text.to_string(),
            seconds,
        })
    }

    pub fn from_secs(seconds: u64) -> Self {
        Self {
            text: format!("{seconds}s"),
            seconds,
        }
    }

    pub fn seconds(&self) -> u64 {
        self.seconds
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Saturates instead of panicking on absurdly long durations.
    pub fn signed(&self) -> jiff::SignedDuration {
        jiff::SignedDuration::from_secs(i64::try_from(self.seconds).unwrap_or(i64::MAX))
    }
}

impl fmt::Debug for DurationStr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.text)
    }
}

impl fmt::Display for DurationStr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl Serialize for DurationStr {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text)
    }
}

impl<'de> Deserialize<'de> for DurationStr {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        DurationStr::parse(&text).map_err(serde::de::Error::custom)
    }
}

impl JsonSchema for DurationStr {
    fn schema_name() -> Cow<'static, str> {
        "Duration".into()
    }
    fn inline_schema() -> bool {
        true
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "string",
            "pattern": DURATION_PATTERN,
            "minLength": 2,
            "maxLength": DURATION_MAX_LENGTH,
        })
    }
}

// The duration rules are regular expressions over the pattern-valid text instead of CEL
// `duration()`: Go's `duration()` has no day unit and fails past ~292 years, and client-side
// engines differ on overflow, so `duration()` could not agree with `DurationStr::parse` on every
// input. A text is under one minute iff it has no day part, only zero hours and minutes, and fewer
// than 60 seconds: `^(0+h)?(0+m)?(0*[0-5]?[0-9]s)?$`. It is zero iff `^(0+h)?(0+m)?(0+s)?$`.

/// CEL for "this duration string is at least one minute".
pub const CEL_AT_LEAST_1M: &str = "!self.matches('^(0+h)?(0+m)?(0*[0-5]?[0-9]s)?$')";
/// CEL for `minPodMetricsAge`: `0s` or at least one minute.
pub const CEL_ZERO_OR_AT_LEAST_1M: &str =
    "self.matches('^(0+h)?(0+m)?(0+s)?$') || !self.matches('^(0+h)?(0+m)?(0*[0-5]?[0-9]s)?$')";
/// CEL for "this duration is not zero".
pub const CEL_NOT_ZERO: &str = "!self.matches('^(0+h)?(0+m)?(0+s)?$')";

/// Kinds of workloads kerf can own (the pod's topmost owner): the five built-in kinds, and the
/// controllers GPU inference runs under (docs/workloads.md). Only the built-in kinds and a
/// Rollout have a pod template kerf writes; the others' changes reach pods at admission and by
/// eviction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum WorkloadKind {
    Deployment,
    StatefulSet,
    DaemonSet,
    Job,
    CronJob,
    /// Argo Rollouts `argoproj.io/v1alpha1` Rollout (its `spec.template` is written).
    Rollout,
    /// KServe `serving.kserve.io/v1beta1` InferenceService.
    InferenceService,
    /// Knative Serving `serving.knative.dev/v1` Service (its Kubernetes kind is `Service`).
    KnativeService,
    /// `leaderworkerset.x-k8s.io/v1` LeaderWorkerSet.
    LeaderWorkerSet,
    /// KubeRay `ray.io/v1` RayCluster.
    RayCluster,
    /// KubeRay `ray.io/v1` RayService.
    RayService,
    /// KubeRay `ray.io/v1` RayJob (its RayCluster runs one job).
    RayJob,
    /// NVIDIA Grove `grove.io/v1alpha1` PodCliqueSet.
    PodCliqueSet,
    /// A kind listed in GlobalConfiguration `spec.workloadKinds`.
    Listed(super::listed_kinds::ListedKind),
}

/// Kinds that are never a pod's topmost owner (what a chain passes through, a pod itself; a
/// Knative Service is named `KnativeService`): refused in `scope.workloadTypes`.
pub const NOT_WORKLOAD_KINDS: [&str; 7] = [
    "Pod",
    "ReplicaSet",
    "Service",
    "Revision",
    "Configuration",
    "PodClique",
    "PodCliqueScalingGroup",
];

const NOT_A_WORKLOAD_MESSAGE: &str = "not a workload kind: a pod's topmost owner is named (Deployment, …, KnativeService for a Knative Service), never what its chain passes through";

impl Scope {
    /// `workloadTypes` names no kind that cannot be a workload.
    pub fn check_workload_types(&self, v: &mut Validator) {
        for (i, t) in self.workload_types.iter().enumerate() {
            v.check(
                !NOT_WORKLOAD_KINDS.contains(&t.as_str()),
                format!("spec.scope.workloadTypes[{i}]"),
                format!("{}: {NOT_A_WORKLOAD_MESSAGE}", t.as_str()),
            );
        }
    }
}

/// Written as its name (`Deployment`, a listed kind's `kind`).
impl Serialize for WorkloadKind {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// A name kerf knows, or one GlobalConfiguration `spec.workloadKinds` lists. A name neither
/// knows is kept as it is written (`scope.workloadTypes` may name a kind listed later): it
/// selects the kind of that name once it is listed.
impl<'de> Deserialize<'de> for WorkloadKind {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        if let Some(k) = WorkloadKind::parse(&name) {
            return Ok(k);
        }
        let valid = name.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
            && name.chars().all(|c| c.is_ascii_alphanumeric());
        if !valid {
            return Err(serde::de::Error::custom(format!(
                "{name:?} is not a workload kind: one of {}, or a kind listed in GlobalConfiguration spec.workloadKinds",
                WorkloadKind::ALL.map(WorkloadKind::as_str).join(", ")
            )));
        }
        Ok(WorkloadKind::Listed(super::listed_kinds::ListedKind::of(
            &super::listed_kinds::WorkloadKindSpec {
                group: String::new(),
                version: String::new(),
                kind: name,
                plural: None,
                template_path: None,
            },
        )))
    }
}

impl JsonSchema for WorkloadKind {
    fn schema_name() -> Cow<'static, str> {
        "WorkloadKind".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        let refused = NOT_WORKLOAD_KINDS
            .iter()
            .map(|k| format!("'{k}'"))
            .collect::<Vec<_>>()
            .join(", ");
        json_schema!({
            "type": "string",
            "pattern": "^[A-Za-z][A-Za-z0-9]*$",
            "x-kubernetes-validations": [{
                "rule": format!("!(self in [{refused}])"),
                "message": NOT_A_WORKLOAD_MESSAGE,
            }],
            "description": format!(
                "A workload kind: {}, or a kind listed in GlobalConfiguration spec.workloadKinds.",
                WorkloadKind::ALL.map(WorkloadKind::as_str).join(", ")
            )
        })
    }
}

/// The API group of an `apiVersion` (`apps/v1` → `apps`; the core group's `v1` → empty).
pub fn api_group(api_version: &str) -> &str {
    api_version.split_once('/').map_or("", |(group, _)| group)
}

impl WorkloadKind {
    /// Where the pod template lives in this kind (a kind kerf does not write has none it uses).
    pub fn template_path(self) -> &'static [&'static str] {
        match self {
            WorkloadKind::CronJob => &["spec", "jobTemplate", "spec", "template"],
            WorkloadKind::Listed(k) => k.data().template_path.unwrap_or(&[]),
            _ => &["spec", "template"],
        }
    }

    /// Whether kerf writes this kind's pod template (else it never writes the object).
    pub fn template_writable(self) -> bool {
        if let WorkloadKind::Listed(k) = self {
            return k.data().template_path.is_some();
        }
        matches!(
            self,
            WorkloadKind::Deployment
                | WorkloadKind::StatefulSet
                | WorkloadKind::DaemonSet
                | WorkloadKind::Job
                | WorkloadKind::CronJob
                | WorkloadKind::Rollout
        )
    }

    pub const ALL: [WorkloadKind; 13] = [
        WorkloadKind::Deployment,
        WorkloadKind::StatefulSet,
        WorkloadKind::DaemonSet,
        WorkloadKind::Job,
        WorkloadKind::CronJob,
        WorkloadKind::Rollout,
        WorkloadKind::InferenceService,
        WorkloadKind::KnativeService,
        WorkloadKind::LeaderWorkerSet,
        WorkloadKind::RayCluster,
        WorkloadKind::RayService,
        WorkloadKind::RayJob,
        WorkloadKind::PodCliqueSet,
    ];

    /// The kinds Kubernetes itself serves (apps, batch).
    pub const BUILT_IN: [WorkloadKind; 5] = [
        WorkloadKind::Deployment,
        WorkloadKind::StatefulSet,
        WorkloadKind::DaemonSet,
        WorkloadKind::Job,
        WorkloadKind::CronJob,
    ];

    /// The name kerf uses (`scope.workloadTypes`, `spec.workload.kind`, recommendation names).
    pub fn as_str(self) -> &'static str {
        match self {
            WorkloadKind::Deployment => "Deployment",
            WorkloadKind::StatefulSet => "StatefulSet",
            WorkloadKind::DaemonSet => "DaemonSet",
            WorkloadKind::Job => "Job",
            WorkloadKind::CronJob => "CronJob",
            WorkloadKind::Rollout => "Rollout",
            WorkloadKind::InferenceService => "InferenceService",
            WorkloadKind::KnativeService => "KnativeService",
            WorkloadKind::LeaderWorkerSet => "LeaderWorkerSet",
            WorkloadKind::RayCluster => "RayCluster",
            WorkloadKind::RayService => "RayService",
            WorkloadKind::RayJob => "RayJob",
            WorkloadKind::PodCliqueSet => "PodCliqueSet",
            WorkloadKind::Listed(k) => k.data().kind,
        }
    }

    /// The object's Kubernetes `kind` (a Knative Service is a `Service`).
    pub fn kind_name(self) -> &'static str {
        match self {
            WorkloadKind::KnativeService => "Service",
            k => k.as_str(),
        }
    }

    /// The resource name in the API (`deployments`, `inferenceservices`, …).
    pub fn plural(self) -> &'static str {
        match self {
            WorkloadKind::Deployment => "deployments",
            WorkloadKind::StatefulSet => "statefulsets",
            WorkloadKind::DaemonSet => "daemonsets",
            WorkloadKind::Job => "jobs",
            WorkloadKind::CronJob => "cronjobs",
            WorkloadKind::Rollout => "rollouts",
            WorkloadKind::InferenceService => "inferenceservices",
            WorkloadKind::KnativeService => "services",
            WorkloadKind::LeaderWorkerSet => "leaderworkersets",
            WorkloadKind::RayCluster => "rayclusters",
            WorkloadKind::RayService => "rayservices",
            WorkloadKind::RayJob => "rayjobs",
            WorkloadKind::PodCliqueSet => "podcliquesets",
            WorkloadKind::Listed(k) => k.data().plural,
        }
    }

    /// The kind named `s` (case-insensitive): a known one, or one the configuration lists.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|k| k.as_str().eq_ignore_ascii_case(s))
            .or_else(|| super::listed_kinds::listed_by_name(s).map(WorkloadKind::Listed))
    }

    /// The kind an object of `api_version` and `kind` is, its API group checked (a `Service`
    /// is a Knative Service only in `serving.knative.dev`).
    pub fn of_object(api_version: &str, kind: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|k| k.kind_name() == kind && api_group(k.api_version()) == api_group(api_version))
            .or_else(|| {
                super::listed_kinds::listed_of_object(api_version, kind).map(WorkloadKind::Listed)
            })
    }

    /// The kind's `apiVersion`.
    pub fn api_version(self) -> &'static str {
        match self {
            WorkloadKind::Deployment | WorkloadKind::StatefulSet | WorkloadKind::DaemonSet => {
                "apps/v1"
            }
            WorkloadKind::Job | WorkloadKind::CronJob => "batch/v1",
            WorkloadKind::Rollout => "argoproj.io/v1alpha1",
            WorkloadKind::InferenceService => "serving.kserve.io/v1beta1",
            WorkloadKind::KnativeService => "serving.knative.dev/v1",
            WorkloadKind::LeaderWorkerSet => "leaderworkerset.x-k8s.io/v1",
            WorkloadKind::RayCluster | WorkloadKind::RayService | WorkloadKind::RayJob => {
                "ray.io/v1"
            }
            WorkloadKind::PodCliqueSet => "grove.io/v1alpha1",
            WorkloadKind::Listed(k) => k.data().api_version,
        }
    }
}

impl fmt::Display for WorkloadKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum NamespaceOperator {
    In,
    NotIn,
}

/// Namespace selection of cluster-scoped policies; `"*"` matches every namespace.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NamespaceSelector {
    pub operator: NamespaceOperator,
    pub values: Vec<String>,
}

impl NamespaceSelector {
    pub fn matches(&self, namespace: &str) -> bool {
        let listed = self.values.iter().any(|v| v == "*" || v == namespace);
        match self.operator {
            NamespaceOperator::In => listed,
            NamespaceOperator::NotIn => !listed,
        }
    }
}

/// Which workloads and containers a policy covers.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Scope {
    /// Exact container names; empty = every regular container and restartable init container.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub containers: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<LabelSelector>,
    /// Cluster-scoped kinds only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<NamespaceSelector>,
    /// Workload kinds covered; empty = all (docs/workloads.md: the built-in kinds, the
    /// controllers GPU inference runs under, the kinds GlobalConfiguration `workloadKinds` lists).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub workload_types: Vec<WorkloadKind>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ObjectRef {
    #[schemars(length(min = 1))]
    pub name: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct Experimental {
    /// Must be `v1alpha1-2026-07`.
    #[x_kube(validation = Rule::new("self == 'v1alpha1-2026-07'").message("gpuKaiContract must be v1alpha1-2026-07"))]
    pub gpu_kai_contract: String,
}

/// Status shared by every policy kind.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicyStatus {
    /// `Ready`, `AutomationStrategyResolved`, `PrometheusAvailable`; GPU reactive policies
    /// also `MetricsFound`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Workloads this policy currently wins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub matched_workloads: Option<i64>,
}

pub const CONDITION_READY: &str = "Ready";
pub const CONDITION_STRATEGY_RESOLVED: &str = "AutomationStrategyResolved";
pub const CONDITION_PROMETHEUS_AVAILABLE: &str = "PrometheusAvailable";
/// GPU reactive policies: whether every selected pod had samples of both metrics.
pub const CONDITION_METRICS_FOUND: &str = "MetricsFound";

/// A field-named validation problem, shared by every `validate()`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    pub field: String,
    pub message: String,
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// Collects field errors; `finish` turns them into a single readable error.
#[derive(Default)]
pub struct Validator {
    errors: Vec<FieldError>,
}

impl Validator {
    pub fn check(&mut self, ok: bool, field: impl Into<String>, message: impl Into<String>) {
        if !ok {
            self.errors.push(FieldError {
                field: field.into(),
                message: message.into(),
            });
        }
    }

    pub fn positive(&mut self, value: f64, field: &str) {
        self.check(
            value.is_finite() && value > 0.0,
            field,
            format!("must be > 0 (got {value})"),
        );
    }

    pub fn at_least_1m(&mut self, d: &DurationStr, field: &str) {
        self.check(
            d.seconds() >= 60,
            field,
            format!("must be at least 1m (got {d})"),
        );
    }

    pub fn contract(&mut self, experimental: Option<&Experimental>, field: &str) {
        match experimental {
            Some(e) => self.check(
                e.gpu_kai_contract == GPU_KAI_CONTRACT,
                format!("{field}.gpuKaiContract"),
                format!(
                    "must be {GPU_KAI_CONTRACT:?} (got {:?})",
                    e.gpu_kai_contract
                ),
            ),
            None => self.check(
                false,
                format!("{field}.gpuKaiContract"),
                format!("is required and must be {GPU_KAI_CONTRACT:?}"),
            ),
        }
    }

    /// Adds the errors of another validation.
    pub fn merge(&mut self, other: Result<(), ValidationError>) {
        if let Err(e) = other {
            self.errors.extend(e.0);
        }
    }

    pub fn finish(self) -> Result<(), ValidationError> {
        if self.errors.is_empty() {
            Ok(())
        } else {
            Err(ValidationError(self.errors))
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct ValidationError(pub Vec<FieldError>);

impl fmt::Display for ValidationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.0.iter().map(ToString::to_string).collect();
        f.write_str(&parts.join("; "))
    }
}

pub(crate) fn default_true() -> bool {
    true
}
