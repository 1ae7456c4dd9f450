//! A list or watch that failed, classified for an operator (the `reason` of
//! `kerf_watch_errors_total`), counted, logged rate-limited and kept for `/readyz`.

use super::*;

/// A repeated list/watch error of one resource is logged at most this often.
pub(super) const WATCH_ERROR_LOG_EVERY: Duration = Duration::from_secs(60);

/// Why a list or watch of the cluster reader failed, said for an operator: each variant holds
/// what failed, the API server's message and the fix when kerf knows it, and is counted in
/// `kerf_watch_errors_total` under its [`ReaderError::label`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReaderError {
    /// 401: the API server rejected kerf's credentials.
    #[error("{0}")]
    Unauthorized(String),
    /// 403: kerf's ClusterRole does not allow it.
    #[error("{0}")]
    Forbidden(String),
    /// 404 on one of kerf's own kinds: its CRD is not installed.
    #[error("{0}")]
    CrdMissing(String),
    #[error("{0}")]
    NotFound(String),
    /// 410: a routine relist.
    #[error("{0}")]
    Expired(String),
    /// The API server cannot be reached.
    #[error("{0}")]
    Connection(String),
    /// Another answer of the API server.
    #[error("{0}")]
    Api(String),
    #[error("{0}")]
    Other(String),
}

impl ReaderError {
    /// The `reason` label of `kerf_watch_errors_total`.
    pub fn label(&self) -> &'static str {
        match self {
            ReaderError::Unauthorized(_) => "unauthorized",
            ReaderError::Forbidden(_) => "forbidden",
            ReaderError::CrdMissing(_) => "crd_missing",
            ReaderError::NotFound(_) => "not_found",
            ReaderError::Expired(_) => "expired",
            ReaderError::Connection(_) => "connection",
            ReaderError::Api(_) => "api_error",
            ReaderError::Other(_) => "other",
        }
    }
}

/// Describes a list or watch error on `resource` (`pods`, `gpureactivepolicies.rightsizing.kubex.ai`;
/// `crd`: one of kerf's own kinds, whose absence means the CRDs are not installed).
pub fn describe_watch_error(resource: &str, crd: bool, e: &watcher::Error) -> ReaderError {
    let (what, err) = match e {
        watcher::Error::InitialListFailed(e) => ("list failed", e),
        watcher::Error::WatchStartFailed(e) | watcher::Error::WatchFailed(e) => ("watch failed", e),
        watcher::Error::WatchError(status) => {
            return from_status("watch failed", status, resource, crd);
        }
        watcher::Error::NoResourceVersion => {
            return ReaderError::Other(
                "list failed: the list had no metadata.resourceVersion (does the resource support watch?)".into(),
            );
        }
    };
    match err {
        ::kube::Error::Api(status) => from_status(what, status, resource, crd),
        ::kube::Error::HyperError(_) | ::kube::Error::Service(_) => ReaderError::Connection(
            format!("{what}: cannot reach the API server: {}", error_chain(err)),
        ),
        other => ReaderError::Other(format!("{what}: {}", error_chain(other))),
    }
}

pub(super) fn from_status(
    what: &str,
    s: &::kube::core::Status,
    resource: &str,
    crd: bool,
) -> ReaderError {
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
    match s.code {
        401 => ReaderError::Unauthorized(format!(
            "{base} (the API server rejected kerf's credentials: check the service account token or the kubeconfig)"
        )),
        403 => ReaderError::Forbidden(format!(
            "{base} (kerf's ClusterRole must allow get, list and watch on {resource}: manifests/install/rbac.yaml)"
        )),
        404 if crd => ReaderError::CrdMissing(format!(
            "{base} (the CustomResourceDefinition {resource} is not installed: kubectl apply -f manifests/crds/)"
        )),
        404 => ReaderError::NotFound(base),
        410 => ReaderError::Expired(base),
        _ => ReaderError::Api(base),
    }
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
        self.count(p.label());
        if matches!(p, ReaderError::Expired(_)) {
            tracing::debug!(resource = %self.kind, "{p} (relisting)");
            return;
        }
        self.failing = true;
        let text = p.to_string();
        self.health.record_error(self.kind, &text);
        if let Some(left_out) = self.limit.admit(&text, Instant::now()) {
            let message = redact(&text);
            if left_out == 0 {
                tracing::warn!(
                    resource = %self.kind,
                    reason = %p.label(),
                    "{}: {message}; retrying",
                    self.kind
                );
            } else {
                tracing::warn!(
                    resource = %self.kind,
                    reason = %p.label(),
                    suppressed = left_out,
                    "{}: {message}; retrying",
                    self.kind
                );
            }
        }
    }
}
