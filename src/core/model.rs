//! Plain data shared by the pure core and the IO edges: workload identity, the persisted
//! annotation formats, and what the admission path needs to know about one workload.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::api::{Signal, StrategyView, WorkloadKind};

pub const ANNOTATION_GPU_BASELINE: &str = "rightsizing.kubex.ai/gpu-baseline";
pub const ANNOTATION_GPU_RECOMMENDATION: &str = "rightsizing.kubex.ai/gpu-recommendation";
pub const ANNOTATION_RESTARTED_AT: &str = "rightsizing.kubex.ai/restartedAt";
pub const ANNOTATION_MUTATED: &str = "rightsizing.kubex.ai/mutated";
pub const ANNOTATION_ROLLBACK: &str = "rightsizing.kubex.ai/rollback";

/// A workload: the pod's top owner.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct WorkloadKey {
    pub namespace: String,
    pub kind: WorkloadKind,
    pub name: String,
}

impl WorkloadKey {
    pub fn new(namespace: impl Into<String>, kind: WorkloadKind, name: impl Into<String>) -> Self {
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
    pub kind: String,
    #[serde(default)]
    pub namespace: Option<String>,
    pub name: String,
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
        let kind = parts.next()?.to_string();
        let ns = parts.next()?;
        let name = parts.next()?.to_string();
        (!kind.is_empty() && !name.is_empty()).then(|| PolicyId {
            kind,
            namespace: (!ns.is_empty()).then(|| ns.to_string()),
            name,
        })
    }
}

/// GPU units per container.
pub type GpuMap = BTreeMap<String, f64>;

/// `rightsizing.kubex.ai/gpu-baseline`: `{"<container>": "<gpu units>"}`.
pub fn parse_baseline(text: &str) -> Result<GpuMap, String> {
    let raw: BTreeMap<String, serde_json::Value> =
        serde_json::from_str(text).map_err(|e| format!("not a JSON object: {e}"))?;
    raw.into_iter()
        .map(|(c, v)| {
            Ok((
                c.clone(),
                gpu_value(&v).map_err(|e| format!("container {c:?}: {e}"))?,
            ))
        })
        .collect()
}

pub fn render_baseline(b: &GpuMap) -> String {
    let m: BTreeMap<&str, String> = b
        .iter()
        .map(|(k, v)| (k.as_str(), format_gpu(*v)))
        .collect();
    serde_json::to_string(&m).expect("map serializes")
}

fn gpu_value(v: &serde_json::Value) -> Result<f64, String> {
    let x = match v {
        serde_json::Value::String(s) => s
            .trim()
            .parse::<f64>()
            .map_err(|_| format!("{s:?} is not a number"))?,
        serde_json::Value::Number(n) => n.as_f64().ok_or("not a number")?,
        other => return Err(format!("{other} is not a number")),
    };
    if x.is_finite() && x >= 0.0 {
        Ok(x)
    } else {
        Err(format!("{x} is not a non-negative number"))
    }
}

/// GPU units as text without float noise (at most 6 decimals, trailing zeros trimmed).
pub fn format_gpu(v: f64) -> String {
    let s = format!("{:.6}", v);
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s.is_empty() || s == "-0" {
        "0".into()
    } else {
        s.into()
    }
}

/// `rightsizing.kubex.ai/gpu-recommendation`.
#[derive(Clone, Debug, PartialEq)]
pub struct GpuRecommendation {
    pub containers: GpuMap,
    /// `None` = legacy recommendation without driver metadata.
    pub driving_metric: Option<Signal>,
    pub policy: Option<PolicyId>,
    pub updated_at: Option<chrono::DateTime<chrono::Utc>>,
}

impl GpuRecommendation {
    pub fn total(&self) -> f64 {
        self.containers.values().sum()
    }

    pub fn parse(text: &str) -> Result<Self, String> {
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
        }
        let raw: Raw = serde_json::from_str(text).map_err(|e| format!("invalid JSON: {e}"))?;
        let containers = raw
            .containers
            .into_iter()
            .map(|(c, v)| {
                Ok((
                    c.clone(),
                    gpu_value(&v).map_err(|e| format!("containers.{c}: {e}"))?,
                ))
            })
            .collect::<Result<GpuMap, String>>()?;
        let driving_metric = match raw.driving_metric.as_deref() {
            None | Some("") => None,
            Some(s) => Some(
                Signal::parse(s)
                    .ok_or_else(|| format!("drivingMetric {s:?} is not compute|memory"))?,
            ),
        };
        let policy = match raw.policy.as_deref() {
            None | Some("") => None,
            Some(p) => Some(
                PolicyId::parse(p)
                    .ok_or_else(|| format!("policy {p:?} is not <kind>/<namespace>/<name>"))?,
            ),
        };
        let updated_at = match raw.updated_at.as_deref() {
            None | Some("") => None,
            Some(t) => Some(
                chrono::DateTime::parse_from_rfc3339(t)
                    .map_err(|e| format!("updatedAt {t:?}: {e}"))?
                    .with_timezone(&chrono::Utc),
            ),
        };
        Ok(Self {
            containers,
            driving_metric,
            policy,
            updated_at,
        })
    }

    pub fn render(&self) -> String {
        let mut m = serde_json::Map::new();
        let containers: serde_json::Map<String, serde_json::Value> = self
            .containers
            .iter()
            .map(|(k, v)| (k.clone(), serde_json::Value::String(format_gpu(*v))))
            .collect();
        m.insert("containers".into(), containers.into());
        if let Some(d) = self.driving_metric {
            m.insert("drivingMetric".into(), d.as_str().into());
        }
        if let Some(p) = &self.policy {
            m.insert("policy".into(), p.to_string().into());
        }
        if let Some(t) = self.updated_at {
            m.insert(
                "updatedAt".into(),
                t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true).into(),
            );
        }
        serde_json::Value::Object(m).to_string()
    }
}

/// CPU/memory requests kerf wants a container to have (auto-patch resources only).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ResourceRequests {
    /// Millicores.
    pub cpu_millis: Option<i64>,
    /// Bytes.
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

/// A coordinated HPA utilization target for the workload's HPA.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CoordinatedHpa {
    pub hpa_name: String,
    /// `cpu` or `memory`.
    pub resource: String,
    pub target_before: i32,
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
    pub resources: BTreeMap<String, ResourceRequests>,
    /// Coordinated HPA target to enforce on HPA admission.
    pub hpa: Option<CoordinatedHpa>,
    /// The policy that produced the state (shown in the `mutated` annotation).
    pub policy: Option<PolicyId>,
    /// What the agent may do.
    pub strategy: StrategyView,
}

/// k8s-openapi's `Time` (a jiff timestamp) as chrono, which the rest of kerf uses.
pub fn k8s_time(
    t: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
) -> chrono::DateTime<chrono::Utc> {
    chrono::DateTime::from_timestamp(t.0.as_second(), t.0.subsec_nanosecond().max(0) as u32)
        .unwrap_or_default()
}

/// chrono → k8s-openapi `Time`.
pub fn to_k8s_time(
    t: chrono::DateTime<chrono::Utc>,
) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::Time {
    let ts = k8s_openapi::jiff::Timestamp::new(t.timestamp(), t.timestamp_subsec_nanos() as i32)
        .unwrap_or_default();
    k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(ts)
}
