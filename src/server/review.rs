//! The admission review handler as a plain function (bytes in, status and bytes out), so the
//! HTTP layer, the fuzz target and property tests all drive exactly the same code.
//!
//! It reads the in-memory store only: no Prometheus, no API server. Any problem with the object
//! or inside kerf answers `allowed: true` without a patch, plus a warning; only a body that is
//! not an `admission.k8s.io/v1` AdmissionReview is a 400.

use std::panic::{AssertUnwindSafe, catch_unwind};

use base64::Engine as _;
use json_patch::PatchOperation;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::api::WorkloadKind;
use crate::core::admission::{PodSkeleton, mutate_hpa, mutate_skeleton};
use crate::core::model::WorkloadKey;
use crate::core::owner::cronjob_named_in;
use crate::state::{ObjectName, Store};

pub const ADMISSION_API_VERSION: &str = "admission.k8s.io/v1";
const REVIEW_KIND: &str = "AdmissionReview";

/// Outcome label values (metric `kerf_admission_requests{outcome}`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Patched,
    Unchanged,
    Skipped,
    Error,
    BadRequest,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Patched => "patched",
            Outcome::Unchanged => "unchanged",
            Outcome::Skipped => "skipped",
            Outcome::Error => "error",
            Outcome::BadRequest => "bad_request",
        }
    }
}

/// What the HTTP layer sends back, plus labels for metrics.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub content_type: &'static str,
    pub body: Vec<u8>,
    /// Metric label values, from a fixed set.
    pub kind: &'static str,
    pub operation: &'static str,
    pub outcome: Outcome,
    /// Why a review was skipped or failed (for the log line).
    pub detail: Option<String>,
    /// The patch builder panicked and the safety net answered (a bug; fuzzing looks for it).
    pub caught_panic: bool,
}

impl Reply {
    fn bad_request(msg: String) -> Self {
        Self {
            status: 400,
            content_type: "text/plain; charset=utf-8",
            body: format!("{msg}\n").into_bytes(),
            kind: "unknown",
            operation: "unknown",
            outcome: Outcome::BadRequest,
            detail: Some(msg),
            caught_panic: false,
        }
    }
}

/// The envelope kerf reads, with `request.object` as `O`: a pod's skeleton (the usual review,
/// read in one pass), or the object's raw text, decoded once the kind is known.
#[derive(Deserialize)]
struct Review<O> {
    #[serde(rename = "apiVersion")]
    api_version: Option<String>,
    kind: Option<String>,
    request: Option<Request<O>>,
}

#[derive(Deserialize)]
struct Gvk {
    #[serde(default)]
    group: String,
    #[serde(default)]
    version: String,
    #[serde(default)]
    kind: String,
}

#[derive(Deserialize)]
struct Request<O> {
    uid: String,
    kind: Gvk,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    operation: String,
    #[serde(default = "Option::default")]
    object: Option<O>,
}

impl<O> Request<O> {
    fn is_pod_creation(&self) -> bool {
        self.kind.group.is_empty() && self.kind.kind == "Pod" && self.operation == "CREATE"
    }

    fn with_object<P>(self, object: impl FnOnce(Option<O>) -> P) -> Request<P> {
        Request {
            uid: self.uid,
            kind: self.kind,
            namespace: self.namespace,
            operation: self.operation,
            object: Some(object(self.object)),
        }
    }
}

/// `request.object` as read: a pod's skeleton, or raw text to decode by kind.
enum Object<'a> {
    Pod(Option<Box<PodSkeleton>>),
    Raw(Option<&'a RawValue>),
}

impl Object<'_> {
    /// The object decoded as `T`.
    fn decode<T: serde::de::DeserializeOwned>(&self, what: &str) -> Result<T, String> {
        let raw = match self {
            Object::Raw(raw) => raw.filter(|o| o.get() != "null"),
            Object::Pod(_) => None,
        }
        .ok_or("request.object is missing")?;
        serde_json::from_str(raw.get()).map_err(|e| format!("{what} could not be decoded: {e}"))
    }
}

type Reading<'a> = Request<Object<'a>>;

/// Result of the decision for one well-formed review.
struct Decision {
    patch: Vec<PatchOperation>,
    outcome: Outcome,
    warnings: Vec<String>,
    detail: Option<String>,
}

impl Decision {
    fn skip(why: impl Into<String>) -> Self {
        Self {
            patch: Vec::new(),
            outcome: Outcome::Skipped,
            warnings: Vec::new(),
            detail: Some(why.into()),
        }
    }
    fn error(why: String) -> Self {
        Self {
            patch: Vec::new(),
            outcome: Outcome::Error,
            warnings: vec![format!("kerf: {why}; admitted unchanged")],
            detail: Some(why),
        }
    }
}

/// Handles one AdmissionReview body.
pub fn handle_review(body: &[u8], store: &Store) -> Reply {
    // The usual review, a pod's creation, in one pass: the object read straight into its
    // skeleton (the raw reading below scans the object twice: about a quarter of a review).
    // The body's UTF-8 is checked once, instead of each string the skeleton keeps on its own;
    // a body that is not UTF-8 is read as before.
    let one_pass = match std::str::from_utf8(body) {
        Ok(text) => serde_json::from_str::<Review<PodSkeleton>>(text),
        Err(_) => serde_json::from_slice::<Review<PodSkeleton>>(body),
    };
    if let Ok(review) = one_pass {
        if review
            .request
            .as_ref()
            .is_some_and(Request::is_pod_creation)
        {
            return respond(
                Review {
                    api_version: review.api_version,
                    kind: review.kind,
                    request: review
                        .request
                        .map(|r| r.with_object(|o| Object::Pod(o.map(Box::new)))),
                },
                store,
            );
        }
    }
    let review: Review<&RawValue> = match serde_json::from_slice(body) {
        Ok(r) => r,
        Err(e) if e.is_syntax() || e.is_eof() => {
            return Reply::bad_request(format!("request body is not JSON: {e}"));
        }
        Err(e) => {
            return Reply::bad_request(format!("request body is not an AdmissionReview: {e}"));
        }
    };
    respond(
        Review {
            api_version: review.api_version,
            kind: review.kind,
            request: review.request.map(|r| r.with_object(Object::Raw)),
        },
        store,
    )
}

/// The AdmissionReview answer, compact: `{"apiVersion":…,"kind":…,"response":{"uid":…,
/// "allowed":true,"patchType":"JSONPatch","patch":…,"warnings":[…]}}`, the patch fields only
/// with a patch and `warnings` only when there are some. The patch is a base64 string, as the
/// API documents (kube-core's own `AdmissionResponse` would write an array of numbers).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Answer<'a> {
    api_version: &'static str,
    kind: &'static str,
    response: AnswerResponse<'a>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct AnswerResponse<'a> {
    uid: &'a str,
    allowed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    patch_type: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    patch: Option<Box<RawValue>>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    warnings: &'a [String],
}

fn answer(uid: &str, patch: &[PatchOperation], warnings: &[String]) -> Vec<u8> {
    // Base64 needs no escaping: the patch goes in as the JSON string it already is, instead
    // of being scanned for escapes byte by byte (a tenth of a review's answer).
    let patch = (!patch.is_empty())
        .then(|| {
            // Sized for a pod's usual patch, so the text is not copied as it grows.
            let mut ops = Vec::with_capacity(1024);
            if serde_json::to_writer(&mut ops, patch).is_err() {
                ops.clear();
            }
            let mut quoted = String::with_capacity(ops.len() * 4 / 3 + 8);
            quoted.push('"');
            base64::engine::general_purpose::STANDARD.encode_string(ops, &mut quoted);
            quoted.push('"');
            RawValue::from_string(quoted).ok()
        })
        .flatten();
    let answer = Answer {
        api_version: ADMISSION_API_VERSION,
        kind: REVIEW_KIND,
        response: AnswerResponse {
            uid,
            allowed: true,
            patch_type: patch.is_some().then_some("JSONPatch"),
            patch,
            warnings,
        },
    };
    let mut body =
        Vec::with_capacity(answer.response.patch.as_ref().map_or(0, |p| p.get().len()) + 256);
    // Strings, numbers and a bool: serializing cannot fail (an empty body if it did).
    if serde_json::to_writer(&mut body, &answer).is_err() {
        body.clear();
    }
    body
}

/// The answer to a decoded review.
fn respond(review: Review<Object<'_>>, store: &Store) -> Reply {
    let api_version = review.api_version.unwrap_or_default();
    let kind = review.kind.unwrap_or_default();
    if api_version != ADMISSION_API_VERSION || kind != REVIEW_KIND {
        return Reply::bad_request(format!(
            "expected apiVersion {ADMISSION_API_VERSION} kind {REVIEW_KIND}, got apiVersion {api_version:?} kind {kind:?}"
        ));
    }
    let Some(mut req) = review.request else {
        return Reply::bad_request("AdmissionReview has no request".into());
    };
    let object = req.object.take().unwrap_or(Object::Raw(None));
    if req.uid.is_empty() {
        return Reply::bad_request("AdmissionReview request.uid is empty".into());
    }
    let span = tracing::Span::current();
    span.record("uid", req.uid.as_str());
    if let Some(ns) = &req.namespace {
        span.record("namespace", ns.as_str());
    }
    // Last line of defence: a bug in the builder must not take the webhook down.
    let (decision, caught_panic) =
        match catch_unwind(AssertUnwindSafe(|| decide(&req, object, store))) {
            Ok(d) => (d, false),
            Err(_) => (
                Decision::error("internal error while building the patch".into()),
                true,
            ),
        };

    Reply {
        status: 200,
        content_type: "application/json",
        body: answer(&req.uid, &decision.patch, &decision.warnings),
        kind: label_kind(&req.kind.kind),
        operation: label_operation(&req.operation),
        outcome: decision.outcome,
        detail: decision.detail,
        caught_panic,
    }
}

/// Metric label values come from a fixed set so a client cannot blow up label cardinality.
fn label_kind(kind: &str) -> &'static str {
    match kind {
        "Pod" => "Pod",
        "HorizontalPodAutoscaler" => "HorizontalPodAutoscaler",
        _ => "unknown",
    }
}

fn label_operation(op: &str) -> &'static str {
    match op {
        "CREATE" => "CREATE",
        "UPDATE" => "UPDATE",
        "DELETE" => "DELETE",
        "CONNECT" => "CONNECT",
        _ => "unknown",
    }
}

fn decide(req: &Reading<'_>, object: Object<'_>, store: &Store) -> Decision {
    match (req.kind.group.as_str(), req.kind.kind.as_str()) {
        _ if req.is_pod_creation() => {
            let skel = match object {
                Object::Pod(Some(skel)) => Ok(*skel),
                Object::Pod(None) => Err("request.object is missing".into()),
                raw => raw.decode::<PodSkeleton>("the pod"),
            };
            decide_pod(req, skel, store)
        }
        ("autoscaling", "HorizontalPodAutoscaler")
            if req.kind.version == "v2"
                && matches!(req.operation.as_str(), "CREATE" | "UPDATE") =>
        {
            decide_hpa(req, &object, store)
        }
        (g, k) => Decision::skip(format!("{} {g}/{k} is not mutated", req.operation)),
    }
}

fn object_namespace(obj: &Value, req: &Reading<'_>) -> String {
    obj.pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .or(req.namespace.as_deref())
        .unwrap_or("")
        .to_string()
}

fn finish(
    m: Result<crate::core::admission::Mutation, crate::core::admission::ShapeError>,
    what: &str,
) -> Decision {
    match m {
        Ok(m) if m.patch.is_empty() => Decision {
            patch: Vec::new(),
            outcome: Outcome::Unchanged,
            warnings: Vec::new(),
            detail: (!m.notes.is_empty()).then(|| m.notes.join("; ")),
        },
        Ok(m) => Decision {
            patch: m.patch,
            outcome: Outcome::Patched,
            warnings: Vec::new(),
            detail: (!m.notes.is_empty()).then(|| m.notes.join("; ")),
        },
        Err(e) => Decision::error(format!("{what} could not be mutated: {e}")),
    }
}

fn decide_pod(req: &Reading<'_>, skel: Result<PodSkeleton, String>, store: &Store) -> Decision {
    let global = store.global();
    // A pod kerf cannot read in a protected namespace is none of its business: skipped, not
    // reported as kerf's problem.
    let unreadable = |why: String| {
        if req
            .namespace
            .as_ref()
            .is_some_and(|ns| global.is_protected(ns))
        {
            Decision::skip("namespace is protected")
        } else {
            Decision::error(why)
        }
    };
    let skel = match skel {
        Ok(s) => s,
        Err(e) => return unreadable(e),
    };
    let Some(meta) = skel.metadata.as_ref() else {
        return unreadable("the pod has no metadata".into());
    };
    let ns = meta
        .namespace
        .clone()
        .filter(|s| !s.is_empty())
        .or_else(|| req.namespace.clone())
        .unwrap_or_default();
    if global.is_protected(&ns) {
        return Decision::skip(format!("namespace {ns:?} is protected"));
    }
    if global.read_only {
        return Decision::skip("GlobalConfiguration readOnly");
    }
    let Some(key) = crate::core::owner::pod_chain(
        &ns,
        meta.owner_references.as_deref().unwrap_or_default(),
        meta.labels.as_ref(),
        |rs| {
            store
                .replicaset_owners
                .get(&ObjectName::new(&ns, rs))
                .map(|e| e.value().clone())
        },
        |job| {
            store
                .job_owners
                .get(&ObjectName::new(&ns, job))
                .map(|e| e.value().clone())
        },
        |kind, name| {
            store
                .controllers
                .get(&ObjectName::new(
                    &ns,
                    crate::core::owner::link_key(kind, name),
                ))
                .map(|e| e.value().clone())
        },
    )
    .map(|chain| chain.key) else {
        return Decision::skip("pod has no workload owner");
    };
    tracing::Span::current().record("owner", tracing::field::display(&key));
    let state = store.get(&key).or_else(|| {
        // The Job's link to its CronJob may not have arrived yet (see `core::owner`).
        let cronjob = cronjob_named_in(&key.name).filter(|_| key.kind == WorkloadKind::Job)?;
        store.get(&WorkloadKey::new(&ns, WorkloadKind::CronJob, cronjob))
    });
    let Some(state) = state else {
        return Decision::skip(format!("no recommendation for {key}"));
    };
    finish(
        mutate_skeleton(&skel.into_value(), &state, &global.kai),
        "the pod",
    )
}

fn decide_hpa(req: &Reading<'_>, object: &Object<'_>, store: &Store) -> Decision {
    let obj = match object.decode::<Value>("the HorizontalPodAutoscaler") {
        Ok(o) => o,
        Err(e) => return Decision::error(e),
    };
    let obj = &obj;
    let global = store.global();
    let ns = object_namespace(obj, req);
    if global.is_protected(&ns) {
        return Decision::skip(format!("namespace {ns:?} is protected"));
    }
    if global.read_only {
        return Decision::skip("GlobalConfiguration readOnly");
    }
    let hpa = match HorizontalPodAutoscaler::deserialize(obj) {
        Ok(h) => h,
        Err(e) => {
            return Decision::error(format!(
                "the HorizontalPodAutoscaler could not be decoded: {e}"
            ));
        }
    };
    let target = &hpa.spec.scale_target_ref;
    let Some(kind) = WorkloadKind::parse(&target.kind) else {
        return Decision::skip(format!(
            "HPA target kind {:?} is not a workload kind",
            target.kind
        ));
    };
    let key = WorkloadKey::new(&ns, kind, &target.name);
    let Some(coordinated) = store.get(&key).and_then(|s| s.hpa.clone()) else {
        return Decision::skip(format!("no coordinated HPA target for {key}"));
    };
    finish(mutate_hpa(obj, &coordinated), "the HorizontalPodAutoscaler")
}
