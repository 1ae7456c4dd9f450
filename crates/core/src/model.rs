//! Plain data shared by the pure core and the IO edges: workload identity, the persisted
//! annotation formats, and what the admission path needs to know about one workload.

use std::collections::BTreeMap;

use jiff::Timestamp;
use std::fmt;

use serde::{Deserialize, Serialize};

use kerf_api::{Signal, StrategyView, WorkloadKind};

use crate::quantity::format_gpu;

pub const ANNOTATION_GPU_BASELINE: &str = "rightsizing.kubex.ai/gpu-baseline";
pub const ANNOTATION_GPU_RECOMMENDATION: &str = "rightsizing.kubex.ai/gpu-recommendation";
pub const ANNOTATION_RESTARTED_AT: &str = "rightsizing.kubex.ai/restartedAt";
pub const ANNOTATION_MUTATED: &str = "rightsizing.kubex.ai/mutated";
pub const ANNOTATION_ROLLBACK: &str = "rightsizing.kubex.ai/rollback";
/// Set by the user on a workload kerf stopped writing for a field conflict: any new value
/// resumes writing at once and forgets the count (docs/gitops.md).
pub const ANNOTATION_CONFLICT_ACKNOWLEDGED: &str = "rightsizing.kubex.ai/conflict-acknowledged";

/// A name kerf holds many times over (namespaces, object, owner and container names, policy
/// ids): stored inline up to 23 bytes, so holding or copying one allocates nothing, where a
/// `String` allocated for each, and a large cycle holds millions of such copies
/// (docs/performance.md). Compares, hashes, prints and serializes as the string it holds.
pub type Name = smol_str::SmolStr;

/// A workload: the pod's top owner.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct WorkloadKey {
    pub namespace: Name,
    pub kind: WorkloadKind,
    pub name: Name,
}

impl WorkloadKey {
    pub fn new(namespace: impl Into<Name>, kind: WorkloadKind, name: impl Into<Name>) -> Self {
        Self {
            namespace: namespace.into(),
            kind,
            name: name.into(),
        }
    }
}

impl fmt::Display for WorkloadKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.namespace, self.kind, self.name)
    }
}

/// A policy's identity, rendered `<kind>/<namespace>/<name>` (namespace empty for cluster kinds).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct PolicyId {
    pub kind: Name,
    #[serde(default)]
    pub namespace: Option<Name>,
    pub name: Name,
}

impl fmt::Display for PolicyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}/{}/{}",
            self.kind,
            self.namespace.as_deref().unwrap_or(""),
            self.name
        )
    }
}

impl PolicyId {
    pub fn parse(s: &str) -> Option<Self> {
        let mut parts = s.splitn(3, '/');
        let kind = parts.next()?;
        let ns = parts.next()?;
        let name = parts.next()?;
        (!kind.is_empty() && !name.is_empty()).then(|| PolicyId {
            kind: kind.into(),
            namespace: (!ns.is_empty()).then(|| ns.into()),
            name: name.into(),
        })
    }
}

/// GPU units per container.
pub type GpuMap = kerf_support::small_map::SmallMap<String, f64>;

/// `rightsizing.kubex.ai/gpu-baseline`: `{"<container>": "<gpu units>"}`.
pub fn parse_baseline(text: &str) -> Result<GpuMap, AnnotationError> {
    let raw: BTreeMap<String, serde_json::Value> =
        serde_json::from_str(text).map_err(|e| AnnotationError::NotAJsonObject(e.to_string()))?;
    raw.into_iter()
        .map(|(c, v)| {
            let value = gpu_value(&v).map_err(|problem| AnnotationError::BaselineContainer {
                container: c.clone(),
                problem,
            })?;
            Ok((c, value))
        })
        .collect()
}

/// Why an annotation kerf reads back (`gpu-baseline`, `gpu-recommendation`) is not usable: the
/// field and what is wrong with it, said in the warning that names the workload.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum AnnotationError {
    #[error("not a JSON object: {0}")]
    NotAJsonObject(String),
    #[error("invalid JSON: {0}")]
    InvalidJson(String),
    #[error("container {container:?}: {problem}")]
    BaselineContainer {
        container: String,
        problem: GpuValueError,
    },
    #[error("containers.{container}: {problem}")]
    RecommendationContainer {
        container: String,
        problem: GpuValueError,
    },
    #[error("policy {0:?} is not <kind>/<namespace>/<name>")]
    PolicyId(String),
    #[error("drivingMetric {0:?} is not compute|memory")]
    DrivingMetric(String),
    #[error("updatedAt {value:?}: {reason}")]
    UpdatedAt { value: String, reason: String },
    #[error("byPolicy.{policy}: {error}")]
    Part {
        policy: String,
        error: Box<AnnotationError>,
    },
}

/// Why a JSON value is not a number of GPU units.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum GpuValueError {
    /// A string, or a JSON value of another type, as JSON (`"x"`, `true`).
    #[error("{0} is not a number")]
    NotANumber(String),
    #[error("not a number")]
    OutOfRange,
    #[error("{0} is not a non-negative number")]
    Negative(f64),
}

pub fn render_baseline(b: &GpuMap) -> String {
    let m: BTreeMap<&str, String> = b
        .iter()
        .map(|(k, v)| (k.as_str(), format_gpu(*v)))
        .collect();
    held(serde_json::to_string(&m).expect("map serializes"))
}

/// An annotation value kept for as long as the workload is: without the writer's growth slack
/// (memory: docs/performance.md).
fn held(mut s: String) -> String {
    s.shrink_to_fit();
    s
}

fn gpu_value(v: &serde_json::Value) -> Result<f64, GpuValueError> {
    let x = match v {
        serde_json::Value::String(s) => s
            .trim()
            .parse::<f64>()
            .map_err(|_| GpuValueError::NotANumber(format!("{s:?}")))?,
        serde_json::Value::Number(n) => n.as_f64().ok_or(GpuValueError::OutOfRange)?,
        other => return Err(GpuValueError::NotANumber(other.to_string())),
    };
    if x.is_finite() && x >= 0.0 {
        Ok(x)
    } else {
        Err(GpuValueError::Negative(x))
    }
}

/// `rightsizing.kubex.ai/gpu-recommendation`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GpuRecommendation {
    pub containers: GpuMap,
    /// `None` = legacy recommendation without driver metadata.
    pub driving_metric: Option<Signal>,
    pub policy: Option<PolicyId>,
    pub updated_at: Option<Timestamp>,
    /// Multi-policy container rightsizing: each contributing policy's part — its containers,
    /// driving metric and time — when more than one policy contributed (JSON `byPolicy`; empty
    /// otherwise, and then not written). `driving_metric`, `policy` and `updated_at` above are
    /// the largest contributor's.
    pub by_policy: BTreeMap<PolicyId, PolicyPart>,
}

/// One policy's part of a recommendation several policies share
/// (docs/design/gpu-engine.md#g8 with #g11).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PolicyPart {
    pub containers: std::collections::BTreeSet<String>,
    pub driving_metric: Option<Signal>,
    pub updated_at: Option<Timestamp>,
}

/// A time as kerf writes it (annotations, statuses, output): RFC 3339 in UTC, whole seconds
/// (`2026-01-01T12:00:00Z`).
pub fn rfc3339_secs(t: Timestamp) -> String {
    Timestamp::from_second(t.as_second())
        .unwrap_or(t)
        .to_string()
}

fn parse_time(t: Option<&str>) -> Result<Option<Timestamp>, AnnotationError> {
    match t {
        None | Some("") => Ok(None),
        Some(t) => Ok(Some(t.parse::<Timestamp>().map_err(|e| {
            AnnotationError::UpdatedAt {
                value: t.to_string(),
                reason: e.to_string(),
            }
        })?)),
    }
}

fn parse_signal(s: Option<&str>) -> Result<Option<Signal>, AnnotationError> {
    match s {
        None | Some("") => Ok(None),
        Some(s) => Signal::parse(s)
            .map(Some)
            .ok_or_else(|| AnnotationError::DrivingMetric(s.to_string())),
    }
}

impl GpuRecommendation {
    pub fn total(&self) -> f64 {
        self.containers.values().sum()
    }

    /// The policy the pods follow, among the policies `in_force`: the recommendation's own (the
    /// largest contributor's) when it is in force, else, of a shared recommendation, the part
    /// in force whose containers get the most GPUs. The cycle and recovery both read it here.
    pub fn main_policy_among(&self, in_force: impl Fn(&PolicyId) -> bool) -> Option<&PolicyId> {
        let total = |part: &PolicyPart| -> f64 {
            part.containers
                .iter()
                .filter_map(|c| self.containers.get(c))
                .sum()
        };
        self.policy.as_ref().filter(|p| in_force(p)).or_else(|| {
            self.by_policy
                .iter()
                .filter(|(id, _)| in_force(id))
                .max_by(|a, b| total(a.1).total_cmp(&total(b.1)))
                .map(|(id, _)| id)
        })
    }

    /// The recommendation as `policy`'s engine last made it: in multi-policy mode its own part
    /// of the shared one — its containers, its driving metric, its time — so each policy is
    /// compared with the driver of the containers it owns (docs/design/gpu-engine.md#g8);
    /// otherwise (one contributor, or a policy without a part) the whole of it.
    pub fn part_of(&self, policy: &PolicyId) -> GpuRecommendation {
        match self.by_policy.get(policy) {
            Some(part) => GpuRecommendation {
                containers: self
                    .containers
                    .iter()
                    .filter(|(c, _)| part.containers.contains(*c))
                    .map(|(c, v)| (c.clone(), *v))
                    .collect(),
                driving_metric: part.driving_metric,
                policy: Some(policy.clone()),
                updated_at: part.updated_at,
                by_policy: BTreeMap::new(),
            },
            None => GpuRecommendation {
                by_policy: BTreeMap::new(),
                ..self.clone()
            },
        }
    }

    pub fn parse(text: &str) -> Result<Self, AnnotationError> {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct RawPart {
            #[serde(default)]
            containers: Vec<String>,
            #[serde(default)]
            driving_metric: Option<String>,
            #[serde(default)]
            updated_at: Option<String>,
        }
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Raw {
            containers: BTreeMap<String, serde_json::Value>,
            #[serde(default)]
            driving_metric: Option<String>,
            #[serde(default)]
            policy: Option<String>,
            #[serde(default)]
            updated_at: Option<String>,
            #[serde(default)]
            by_policy: BTreeMap<String, RawPart>,
        }
        let raw: Raw =
            serde_json::from_str(text).map_err(|e| AnnotationError::InvalidJson(e.to_string()))?;
        let containers = raw
            .containers
            .into_iter()
            .map(|(c, v)| {
                let value =
                    gpu_value(&v).map_err(|problem| AnnotationError::RecommendationContainer {
                        container: c.clone(),
                        problem,
                    })?;
                Ok((c, value))
            })
            .collect::<Result<GpuMap, AnnotationError>>()?;
        let policy_id =
            |p: &str| PolicyId::parse(p).ok_or_else(|| AnnotationError::PolicyId(p.to_string()));
        let policy = match raw.policy.as_deref() {
            None | Some("") => None,
            Some(p) => Some(policy_id(p)?),
        };
        let by_policy = raw
            .by_policy
            .into_iter()
            .map(|(p, part)| {
                let at = |e: AnnotationError| AnnotationError::Part {
                    policy: p.clone(),
                    error: Box::new(e),
                };
                Ok((
                    policy_id(&p).map_err(at)?,
                    PolicyPart {
                        containers: part.containers.into_iter().collect(),
                        driving_metric: parse_signal(part.driving_metric.as_deref()).map_err(at)?,
                        updated_at: parse_time(part.updated_at.as_deref()).map_err(at)?,
                    },
                ))
            })
            .collect::<Result<_, AnnotationError>>()?;
        Ok(Self {
            containers,
            driving_metric: parse_signal(raw.driving_metric.as_deref())?,
            policy,
            updated_at: parse_time(raw.updated_at.as_deref())?,
            by_policy,
        })
    }

    /// The annotation text: `containers`, then `drivingMetric`, `policy`, `updatedAt` and
    /// `byPolicy` when set, compact JSON. Serialized from borrowed fields (no JSON value tree:
    /// every workload's annotation is rendered each cycle to compare with the observed one).
    pub fn render(&self) -> String {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Part<'a> {
            containers: &'a std::collections::BTreeSet<String>,
            #[serde(skip_serializing_if = "Option::is_none")]
            driving_metric: Option<&'static str>,
            #[serde(skip_serializing_if = "Option::is_none")]
            updated_at: Option<String>,
        }
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Text<'a> {
            #[serde(serialize_with = "gpu_values")]
            containers: &'a GpuMap,
            #[serde(skip_serializing_if = "Option::is_none")]
            driving_metric: Option<&'static str>,
            #[serde(skip_serializing_if = "Option::is_none")]
            policy: Option<String>,
            #[serde(skip_serializing_if = "Option::is_none")]
            updated_at: Option<String>,
            #[serde(skip_serializing_if = "Vec::is_empty")]
            #[serde(serialize_with = "entries")]
            by_policy: Vec<(String, Part<'a>)>,
        }
        fn gpu_values<S: serde::Serializer>(m: &&GpuMap, s: S) -> Result<S::Ok, S::Error> {
            s.collect_map(m.iter().map(|(k, v)| (k, format_gpu(*v))))
        }
        fn entries<S: serde::Serializer>(
            parts: &[(String, Part<'_>)],
            s: S,
        ) -> Result<S::Ok, S::Error> {
            s.collect_map(parts.iter().map(|(k, v)| (k, v)))
        }
        let text = Text {
            containers: &self.containers,
            driving_metric: self.driving_metric.map(Signal::as_str),
            policy: self.policy.as_ref().map(PolicyId::to_string),
            updated_at: self.updated_at.map(rfc3339_secs),
            by_policy: self
                .by_policy
                .iter()
                .map(|(p, part)| {
                    let part = Part {
                        containers: &part.containers,
                        driving_metric: part.driving_metric.map(Signal::as_str),
                        updated_at: part.updated_at.map(rfc3339_secs),
                    };
                    (p.to_string(), part)
                })
                .collect(),
        };
        held(serde_json::to_string(&text).expect("annotation serializes"))
    }
}

/// CPU/memory requests per container name (a few containers per workload: one sorted vector).
pub type ContainerRequests = kerf_support::small_map::SmallMap<String, ResourceRequests>;

/// CPU/memory requests kerf wants a container to have (auto-patch resources only). Keys in
/// camelCase, as the CRDs' (`/debug/recommendations`); the snake_case ones are still read.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceRequests {
    /// Millicores.
    #[serde(alias = "cpu_millis")]
    pub cpu_millis: Option<i64>,
    /// Bytes.
    #[serde(alias = "memory_bytes")]
    pub memory_bytes: Option<i64>,
}

/// Which of a container's requests: `cpu`, `memory`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RequestSet {
    pub cpu: bool,
    pub memory: bool,
}

impl RequestSet {
    /// The requests `r` has a value for.
    pub fn of(r: &ResourceRequests) -> Self {
        Self {
            cpu: r.cpu_millis.is_some(),
            memory: r.memory_bytes.is_some(),
        }
    }

    pub fn any(self) -> bool {
        self.cpu || self.memory
    }

    /// The resource names, as `status.createdRequests` lists them.
    pub fn names(self) -> Vec<String> {
        [("cpu", self.cpu), ("memory", self.memory)]
            .into_iter()
            .filter(|(_, on)| *on)
            .map(|(n, _)| n.to_string())
            .collect()
    }

    /// Read back from [`RequestSet::names`] (other names are ignored).
    pub fn from_names(names: &[String]) -> Self {
        Self {
            cpu: names.iter().any(|n| n == "cpu"),
            memory: names.iter().any(|n| n == "memory"),
        }
    }
}

/// A coordinated HPA utilization target for the workload's HPA. Keys in camelCase, as the
/// CRDs' (`/debug/recommendations`); the snake_case ones are still read.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CoordinatedHpa {
    #[serde(alias = "hpa_name")]
    pub hpa_name: String,
    /// `cpu` or `memory`.
    pub resource: String,
    #[serde(alias = "target_before")]
    pub target_before: i32,
    #[serde(alias = "target_after")]
    pub target_after: i32,
}

/// Everything the admission path knows about one workload. Built by the reconciler (or
/// standalone evaluation) and read, never computed, by the webhook.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct WorkloadState {
    /// Active GPU recommendation (per container), if any.
    pub gpu: Option<GpuRecommendation>,
    /// The GPU allocation the workload's template asks for (per container), used to honour
    /// `enablement.gpu.requests.upsize/downsize`.
    pub template_gpu: GpuMap,
    /// CPU/memory requests to set at admission, per container (auto-patch only).
    pub resources: ContainerRequests,
    /// The limits that go with them (docs/policies.md#limits), per container.
    pub limits: ContainerRequests,
    /// Coordinated HPA target to enforce on HPA admission.
    pub hpa: Option<CoordinatedHpa>,
    /// The policy that produced the state (shown in the `mutated` annotation).
    pub policy: Option<PolicyId>,
    /// What the agent may do (shared with the snapshot's strategy): the strategy of the policy
    /// that produced the state, the largest contributor's when several did.
    pub strategy: std::sync::Arc<StrategyView>,
    /// Multi-policy container rightsizing: each contributing policy's strategy (empty
    /// otherwise). A container's GPU upsize/downsize follow the strategy of the policy whose
    /// part it is ([`Self::gpu_strategy_of`]).
    pub gpu_strategies: BTreeMap<PolicyId, std::sync::Arc<StrategyView>>,
    /// The workload's (top owner's) own KAI queue label, under GlobalConfiguration
    /// `kai.queueLabelKey`: KAI reads it before the pod's, so kerf sets none on the pod.
    pub owner_queue: Option<String>,
}

impl WorkloadState {
    /// The strategy that governs `container`'s GPU size: its policy's when several policies
    /// share the recommendation, else the state's.
    pub fn gpu_strategy_of(&self, container: &str) -> &StrategyView {
        self.gpu
            .iter()
            .flat_map(|g| &g.by_policy)
            .find(|(_, part)| part.containers.contains(container))
            .and_then(|(policy, _)| self.gpu_strategies.get(policy))
            .unwrap_or(&self.strategy)
    }
}

/// (unix seconds, value), as the metric edge returns them.
pub type Sample = (i64, f64);

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/design/gpu-engine.md#g10: the annotation's `byPolicy` (several policies'
    /// parts) is read back as written, and a single-policy recommendation is written without it.
    #[test]
    fn gpu_recommendation_parts_round_trip_and_are_absent_for_one_policy() {
        let text = r#"{"containers":{"a":"0.6","b":"2"},"drivingMetric":"compute","policy":"GpuReactivePolicy/ml/b","updatedAt":"2026-01-01T12:00:00Z","byPolicy":{"GpuReactivePolicy/ml/a":{"containers":["a"],"drivingMetric":"memory","updatedAt":"2026-01-01T11:00:00Z"},"GpuReactivePolicy/ml/b":{"containers":["b"],"drivingMetric":"compute","updatedAt":"2026-01-01T12:00:00Z"}}}"#;
        let r = GpuRecommendation::parse(text).unwrap();
        assert_eq!(r.render(), text);
        let a = PolicyId::parse("GpuReactivePolicy/ml/a").unwrap();
        let own = r.part_of(&a);
        assert_eq!(own.containers, GpuMap::from([("a".to_string(), 0.6)]));
        assert_eq!(own.driving_metric, Some(Signal::Memory));
        assert_eq!(own.policy, Some(a));
        let single = GpuRecommendation {
            by_policy: BTreeMap::new(),
            ..r.clone()
        };
        assert!(!single.render().contains("byPolicy"));
        let other = PolicyId::parse("GpuReactivePolicy/ml/c").unwrap();
        assert_eq!(
            r.part_of(&other).containers,
            r.containers,
            "no part: the whole"
        );
    }
}
