//! What `/readyz` and `/healthz` say (`docs/design/runtime.md#r14`).
//!
//! [`Health`] is shared by the background tasks and the health listener (it lives in the
//! [`Store`](crate::state::Store)): the tasks say what readiness waits for (the caches not
//! synced yet, whether the annotations were read back, the first standalone cycle) and record the
//! last error of each dependency (a watched resource, Prometheus, the manifest directory); a
//! required task that ends records why, which fails `/healthz` and stops `kerf serve`.
//! Messages are stripped of credentials before they are kept.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::support::redact::redact;

/// Readiness details and the liveness verdict of one process.
pub struct Health {
    state: Mutex<State>,
    /// Set once, by the first required task that stops.
    stopped: watch::Sender<Option<String>>,
}

#[derive(Default)]
struct State {
    /// What readiness waits for when it is not the caches (standalone: the first cycle).
    waiting_for: Option<String>,
    /// Kinds whose initial list has not completed, out of how many (in-cluster only).
    caches: Option<(BTreeSet<&'static str>, usize)>,
    /// Workloads whose state was read back from their annotations (in-cluster only).
    read_back: Option<usize>,
    /// The usage history's progress: (workloads kept, workloads still to read their window).
    history: Option<(usize, usize)>,
    /// Dependency → its last error and when it happened; cleared when it works again.
    errors: BTreeMap<String, (String, Instant)>,
}

impl Default for Health {
    fn default() -> Self {
        Self {
            state: Mutex::default(),
            stopped: watch::Sender::new(None),
        }
    }
}

impl Health {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// How far the usage history is (docs/metrics.md#incremental-history): `kept` workloads
    /// read, `reading` still to read their window (shown on `/readyz`; it holds no readiness).
    pub fn history_progress(&self, kept: usize, reading: usize) {
        self.state().history = Some((kept, reading));
    }

    /// Readiness waits for `what` (shown on `/readyz` while not ready).
    pub fn waiting_for(&self, what: impl Into<String>) {
        self.state().waiting_for = Some(what.into());
    }

    /// The kinds whose initial list has not completed yet, out of `total` watched kinds.
    pub fn caches_pending(&self, unsynced: &BTreeSet<&'static str>, total: usize) {
        self.state().caches = Some((unsynced.clone(), total));
    }

    /// The store was loaded from the workloads' annotations (`workloads` entries).
    pub fn annotations_read_back(&self, workloads: usize) {
        self.state().read_back = Some(workloads);
    }

    /// Records the last error of `dependency` (credentials are stripped from `message`).
    pub fn record_error(&self, dependency: &str, message: &str) {
        self.state()
            .errors
            .insert(dependency.to_string(), (redact(message), Instant::now()));
    }

    /// `dependency` works again.
    pub fn clear_error(&self, dependency: &str) {
        self.state().errors.remove(dependency);
    }

    /// The last error recorded for `dependency`, if it has not worked since.
    pub fn last_error(&self, dependency: &str) -> Option<String> {
        self.state().errors.get(dependency).map(|(m, _)| m.clone())
    }

    /// A required background task ended: `/healthz` fails from now on and `kerf serve` stops.
    /// Only the first call counts (what came after is a consequence).
    pub fn task_stopped(&self, task: &str, why: &str) {
        let why = redact(why);
        self.stopped.send_if_modified(|s| {
            if s.is_some() {
                return false;
            }
            *s = Some(format!("{task} stopped: {why}"));
            true
        });
    }

    /// Why a required task stopped (`<task> stopped: <why>`), if one did.
    pub fn stopped(&self) -> Option<String> {
        self.stopped.borrow().clone()
    }

    /// Resolves once a required task stopped, with [`Health::stopped`]'s message.
    pub async fn wait_stopped(&self) -> String {
        let mut rx = self.stopped.subscribe();
        let why = rx.wait_for(Option::is_some).await.map(|s| s.clone());
        match why {
            Ok(s) => s.unwrap_or_default(),
            // The sender lives in `self`: it cannot be dropped while we borrow it.
            Err(_) => std::future::pending().await,
        }
    }

    /// `/healthz`: healthy unless a required task stopped.
    pub fn liveness(&self) -> (bool, String) {
        match self.stopped() {
            None => (true, "ok\n".into()),
            Some(why) => (false, format!("unhealthy: {why}\n")),
        }
    }

    /// `/readyz`: `ready` is the store's flag. Not ready says what it waits for: the caches not
    /// synced, whether the annotations were read back (or the standalone cycle), then the last
    /// error of each dependency that has not worked since. A stopped task is never ready.
    pub fn readiness(&self, ready: bool) -> (bool, String) {
        if let Some(why) = self.stopped() {
            return (false, format!("not ready: {why}\n"));
        }
        let st = self.state();
        let mut out = String::new();
        if ready {
            out.push_str("ready\n");
        } else {
            match (&st.caches, &st.waiting_for) {
                (Some((unsynced, total)), _) => {
                    if unsynced.is_empty() {
                        out.push_str("not ready: reading the annotations back\n");
                        let _ = writeln!(out, "caches: all {total} synced");
                    } else {
                        out.push_str("not ready: waiting for the caches to sync\n");
                        let names: Vec<&str> = unsynced.iter().copied().collect();
                        let _ = writeln!(
                            out,
                            "caches not synced ({} of {total}): {}",
                            unsynced.len(),
                            names.join(", ")
                        );
                    }
                    match st.read_back {
                        Some(n) => {
                            let _ = writeln!(out, "annotations read back: yes ({n} workloads)");
                        }
                        None => out.push_str(
                            "annotations read back: not yet (they are read once every cache has synced)\n",
                        ),
                    }
                }
                (None, Some(what)) => {
                    let _ = writeln!(out, "not ready: waiting for {what}");
                }
                (None, None) => out.push_str("not ready: recommendations not loaded yet\n"),
            }
        }
        if let Some((kept, reading)) = st.history {
            let _ = match reading {
                0 => writeln!(out, "usage history: {kept} workloads kept"),
                n => writeln!(
                    out,
                    "usage history: {kept} workloads kept, {n} reading their window (the window queries answer them meanwhile)"
                ),
            };
        }
        if !st.errors.is_empty() {
            out.push_str("last errors:\n");
            // Dependencies failing the same way (the API server unreachable) share one line.
            let mut same: Vec<(Vec<&str>, &str, Instant)> = Vec::new();
            for (dependency, (message, at)) in &st.errors {
                match same.iter_mut().find(|(_, m, _)| m == message) {
                    Some((deps, _, last)) => {
                        deps.push(dependency);
                        *last = (*last).max(*at);
                    }
                    None => same.push((vec![dependency], message, *at)),
                }
            }
            for (dependencies, message, at) in same {
                let _ = writeln!(
                    out,
                    "  {} ({} ago): {message}",
                    dependencies.join(", "),
                    age(at.elapsed())
                );
            }
        }
        (ready, out)
    }
}

fn age(d: Duration) -> String {
    let s = d.as_secs();
    if s < 120 {
        format!("{s}s")
    } else if s < 7200 {
        format!("{}m", s / 60)
    } else {
        format!("{}h", s / 3600)
    }
}

/// The text of a panic payload (`panic!("…")` carries a `&str` or a `String`).
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into())
}

/// `e` and its sources, `: `-separated, leaving out a source whose text the previous one
/// already carries (many errors repeat their source in their own message).
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !text.is_empty() && !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}

/// Rate limit for a repeated log line: the first occurrence of a message is logged, the same
/// message again only once `every` has passed, saying how many were left out meanwhile.
#[derive(Debug)]
pub struct LogLimit {
    every: Duration,
    last: Option<(String, Instant)>,
    suppressed: u64,
}

impl LogLimit {
    pub fn new(every: Duration) -> Self {
        Self {
            every,
            last: None,
            suppressed: 0,
        }
    }

    /// Whether to log `key` at `now`: `Some(n)` with the number of lines left out since the last
    /// one logged, `None` to leave this one out.
    pub fn admit(&mut self, key: &str, now: Instant) -> Option<u64> {
        let due = match &self.last {
            None => true,
            Some((last, at)) => last != key || now.saturating_duration_since(*at) >= self.every,
        };
        if due {
            self.last = Some((key.to_string(), now));
            Some(std::mem::take(&mut self.suppressed))
        } else {
            self.suppressed += 1;
            None
        }
    }

    /// The problem is over: the next occurrence is logged at once.
    pub fn reset(&mut self) {
        self.last = None;
        self.suppressed = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readiness_says_how_far_the_usage_history_is() {
        let h = Health::new();
        h.history_progress(120, 30);
        let (_, body) = h.readiness(true);
        assert_eq!(
            body,
            "ready\nusage history: 120 workloads kept, 30 reading their window (the window queries answer them meanwhile)\n"
        );
        h.history_progress(150, 0);
        assert_eq!(
            h.readiness(true).1,
            "ready\nusage history: 150 workloads kept\n"
        );
    }

    #[test]
    fn readiness_names_the_unsynced_caches_the_read_back_and_the_last_errors() {
        let h = Health::new();
        assert_eq!(
            h.readiness(false),
            (false, "not ready: recommendations not loaded yet\n".into())
        );
        let unsynced: BTreeSet<&'static str> = ["Pod", "GpuReactivePolicy"].into();
        h.caches_pending(&unsynced, 17);
        h.record_error("Pod", "list failed: 403 Forbidden: pods is forbidden");
        h.record_error("GpuReactivePolicy", "list failed: 404 page not found");
        let (ready, body) = h.readiness(false);
        assert!(!ready);
        assert_eq!(
            body,
            "not ready: waiting for the caches to sync\n\
             caches not synced (2 of 17): GpuReactivePolicy, Pod\n\
             annotations read back: not yet (they are read once every cache has synced)\n\
             last errors:\n  \
             GpuReactivePolicy (0s ago): list failed: 404 page not found\n  \
             Pod (0s ago): list failed: 403 Forbidden: pods is forbidden\n"
        );
        h.clear_error("Pod");
        h.clear_error("GpuReactivePolicy");
        h.caches_pending(&BTreeSet::new(), 17);
        assert_eq!(
            h.readiness(false).1,
            "not ready: reading the annotations back\ncaches: all 17 synced\n\
             annotations read back: not yet (they are read once every cache has synced)\n"
        );
        h.annotations_read_back(3);
        assert_eq!(h.readiness(true), (true, "ready\n".into()));
        h.record_error("Pod", "cannot reach the API server");
        h.record_error("Deployment", "cannot reach the API server");
        h.record_error("prometheus", "connection refused");
        assert_eq!(
            h.readiness(false).1.split_once("last errors:\n").unwrap().1,
            "  Deployment, Pod (0s ago): cannot reach the API server\n  \
             prometheus (0s ago): connection refused\n",
            "the same error is one line"
        );
        h.clear_error("Pod");
        h.clear_error("Deployment");
        assert_eq!(
            h.readiness(true),
            (
                true,
                "ready\nlast errors:\n  prometheus (0s ago): connection refused\n".into()
            )
        );
    }

    #[test]
    fn standalone_readiness_says_what_it_waits_for() {
        let h = Health::new();
        h.waiting_for("the first cycle over the manifests in examples");
        h.record_error(
            "manifests",
            "reading directory examples: No such file or directory",
        );
        assert_eq!(
            h.readiness(false).1,
            "not ready: waiting for the first cycle over the manifests in examples\n\
             last errors:\n  manifests (0s ago): reading directory examples: No such file or directory\n"
        );
    }

    #[tokio::test]
    async fn a_stopped_task_fails_liveness_and_readiness_and_only_the_first_counts() {
        let h = Health::new();
        assert_eq!(h.liveness(), (true, "ok\n".into()));
        let waiter = tokio::spawn({
            let h = h.clone();
            async move { h.wait_stopped().await }
        });
        h.task_stopped(
            "reconciler",
            "no Kubernetes client configuration: token=abc",
        );
        h.task_stopped("standalone loop", "later");
        let why = "reconciler stopped: no Kubernetes client configuration: token=***";
        assert_eq!(waiter.await.unwrap(), why);
        assert_eq!(h.liveness(), (false, format!("unhealthy: {why}\n")));
        assert_eq!(h.readiness(true), (false, format!("not ready: {why}\n")));
    }

    #[test]
    fn a_repeated_message_is_logged_once_per_interval_with_the_count_left_out() {
        let mut limit = LogLimit::new(Duration::from_secs(60));
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        assert_eq!(limit.admit("403", at(0)), Some(0));
        assert_eq!(limit.admit("403", at(1)), None);
        assert_eq!(limit.admit("403", at(30)), None);
        assert_eq!(limit.admit("403", at(60)), Some(2));
        // Another message is logged at once.
        assert_eq!(limit.admit("404", at(61)), Some(0));
        limit.reset();
        assert_eq!(limit.admit("404", at(62)), Some(0));
    }

    #[test]
    fn error_chain_skips_sources_the_message_already_carries() {
        let e = anyhow::anyhow!("connection refused")
            .context("tcp connect error: connection refused")
            .context("cannot reach the API server");
        let dynerr: &(dyn std::error::Error + 'static) = e.as_ref();
        assert_eq!(
            error_chain(dynerr),
            "cannot reach the API server: tcp connect error: connection refused"
        );
    }
}
