//! A list or watch that failed, classified for an operator (the `reason` of
//! `kerf_watch_errors_total`), counted, logged rate-limited and kept for `/readyz`.

use super::*;

/// A repeated list/watch error of one resource is logged at most this often.
pub(super) const WATCH_ERROR_LOG_EVERY: Duration = Duration::from_secs(60);

/// Why a list or watch failed, said for an operator.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchProblem {
    /// The `reason` label of `kerf_watch_errors_total`: `forbidden`, `unauthorized`,
    /// `crd_missing`, `not_found`, `expired` (a routine relist), `connection`, `api_error`,
    /// `other`.
    pub reason: &'static str,
    /// What failed, the API server's message, and the fix when kerf knows it.
    pub message: String,
}

/// Describes a list or watch error on `resource` (`pods`, `gpureactivepolicies.rightsizing.kubex.ai`;
/// `crd`: one of kerf's own kinds, whose absence means the CRDs are not installed).
pub fn describe_watch_error(resource: &str, crd: bool, e: &watcher::Error) -> WatchProblem {
    let (what, err) = match e {
        watcher::Error::InitialListFailed(e) => ("list failed", e),
        watcher::Error::WatchStartFailed(e) | watcher::Error::WatchFailed(e) => ("watch failed", e),
        watcher::Error::WatchError(status) => {
            return from_status("watch failed", status, resource, crd);
        }
        watcher::Error::NoResourceVersion => {
            return WatchProblem {
                reason: "other",
                message: "list failed: the list had no metadata.resourceVersion (does the resource support watch?)".into(),
            };
        }
    };
    match err {
        ::kube::Error::Api(status) => from_status(what, status, resource, crd),
        ::kube::Error::HyperError(_) | ::kube::Error::Service(_) => WatchProblem {
            reason: "connection",
            message: format!("{what}: cannot reach the API server: {}", error_chain(err)),
        },
        other => WatchProblem {
            reason: "other",
            message: format!("{what}: {}", error_chain(other)),
        },
    }
}

pub(super) fn from_status(
    what: &str,
    s: &::kube::core::Status,
    resource: &str,
    crd: bool,
) -> WatchProblem {
    // A reason is one CamelCase word (`Forbidden`); kube puts a sentence there when the body was
    // not a Status (`404 page not found` from a path no API serves).
    let head = if s.reason.is_empty() || s.reason.contains(' ') {
        format!("HTTP {}", s.code)
    } else {
        format!("{} {}", s.code, s.reason)
    };
    let base = match s.message.trim() {
        "" => format!("{what}: {head}"),
        m => format!("{what}: {head}: {m}"),
    };
    let (reason, message) = match s.code {
        401 => (
            "unauthorized",
            format!(
                "{base} (the API server rejected kerf's credentials: check the service account token or the kubeconfig)"
            ),
        ),
        403 => (
            "forbidden",
            format!(
                "{base} (kerf's ClusterRole must allow get, list and watch on {resource}: manifests/install/rbac.yaml)"
            ),
        ),
        404 if crd => (
            "crd_missing",
            format!(
                "{base} (the CustomResourceDefinition {resource} is not installed: kubectl apply -f manifests/crds/)"
            ),
        ),
        404 => ("not_found", base),
        410 => ("expired", base),
        _ => ("api_error", base),
    };
    WatchProblem { reason, message }
}

/// What one watch task does with its stream's errors: count every one, log it at `warn`
/// (rate-limited), keep it as the resource's last error until an event arrives again.
pub(super) struct WatchErrors {
    pub(super) kind: &'static str,
    pub(super) resource: String,
    pub(super) crd: bool,
    pub(super) health: Arc<Health>,
    pub(super) metrics: Arc<Metrics>,
    pub(super) limit: LogLimit,
    pub(super) failing: bool,
}

impl WatchErrors {
    /// An event arrived. `Init` only announces a (re)list, which may fail again: anything else
    /// means the list or the watch works.
    pub(super) fn ok<K>(&mut self, ev: &watcher::Event<K>) {
        if self.failing && !matches!(ev, watcher::Event::Init) {
            self.failing = false;
            self.limit.reset();
            self.health.clear_error(self.kind);
            tracing::info!(resource = %self.kind, "{}: list/watch works again", self.kind);
        }
    }

    /// Counts a failure in `kerf_watch_errors_total`.
    pub(super) fn count(&self, reason: &'static str) {
        self.metrics
            .watch_errors
            .get_or_create(&WatchErrorLabels {
                resource: self.kind.into(),
                reason: reason.into(),
            })
            .inc();
    }

    pub(super) fn error(&mut self, e: &watcher::Error) {
        let p = describe_watch_error(&self.resource, self.crd, e);
        self.count(p.reason);
        if p.reason == "expired" {
            tracing::debug!(resource = %self.kind, "{} (relisting)", p.message);
            return;
        }
        self.failing = true;
        self.health.record_error(self.kind, &p.message);
        if let Some(left_out) = self.limit.admit(&p.message, Instant::now()) {
            let message = redact(&p.message);
            if left_out == 0 {
                tracing::warn!(
                    resource = %self.kind,
                    reason = %p.reason,
                    "{}: {message}; retrying",
                    self.kind
                );
            } else {
                tracing::warn!(
                    resource = %self.kind,
                    reason = %p.reason,
                    suppressed = left_out,
                    "{}: {message}; retrying",
                    self.kind
                );
            }
        }
    }
}
