//! The writer Lease (`coordination.k8s.io/v1`, `kerf-writer` in kerf's namespace): only its
//! holder writes to the cluster. Acquired when absent or expired, renewed while held, and always
//! replaced with the `resourceVersion` that was read, so two replicas racing for it cannot both
//! win (the loser gets 409 Conflict).
//!
//! Timings as client-go's leader election (`tools/leaderelection/leaderelection.go`): a Lease of
//! 15 s, a renew deadline of 10 s, a retry period of 2 s. Every request has its own timeout (the
//! renew deadline), so a slow API server delays a round without voiding it. This replica leads
//! while the API server has shown it as the holder — an answer carrying a renewal it sent —
//! until the earlier of that renewal plus the Lease duration (when others may take over) and the
//! start of the current renewal plus the renew deadline. Once it stops leading it stops
//! renewing: it only reads the Lease until it expires, so a replica whose renewals land but whose
//! answers do not come back in time lets another take over (docs/design/runtime.md#r8).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use ::kube::api::{Api, ObjectMeta, PostParams};
use ::kube::{Client, Error as KubeError};
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::coordination::v1::{Lease as CoordLease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::health::Health;
use crate::telemetry::{Metrics, WriteLabels};

#[derive(Clone)]
pub struct LeaseConfig {
    pub name: String,
    /// `leaseDurationSeconds`: how long a holder that stopped renewing keeps the Lease.
    pub duration: Duration,
    /// How long a renewal may take before this replica stops leading; also each request's
    /// timeout.
    pub renew_deadline: Duration,
    /// The pause between two rounds (renewals of the holder, reads of a follower).
    pub retry_period: Duration,
    /// Where the Lease writes, `kerf_is_leader` and `kerf_lease_held_not_writing` are reported:
    /// the process's registry.
    pub metrics: Arc<Metrics>,
    /// Where `/readyz` reads that this replica holds the Lease but cannot write.
    pub health: Option<Arc<Health>>,
}

impl Default for LeaseConfig {
    fn default() -> Self {
        Self {
            name: LEASE_NAME.into(),
            duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
            metrics: Metrics::new(),
            health: None,
        }
    }
}

/// Why a round did not say who holds the Lease.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    #[error(transparent)]
    Api(#[from] KubeError),
    #[error("the Lease {0} timed out after {1:?}")]
    TimedOut(&'static str, Duration),
}

/// The `/readyz` dependency name of the Lease.
pub const HEALTH_DEPENDENCY: &str = "lease";

/// How many sent renewals are remembered (to recognise one the API server shows later).
const SENT_KEPT: usize = 16;

pub struct Lease {
    api: Api<CoordLease>,
    identity: String,
    cfg: LeaseConfig,
    /// The Lease as last read or written: a holder renews it without reading it first.
    last: Option<CoordLease>,
    /// The `resourceVersion` last read and when it was first seen: a Lease unchanged for its
    /// duration has expired, whatever the clocks say (client-go's observed time).
    observed: Option<(String, Instant)>,
    /// Renewals sent (renewTime, when sent), newest last.
    sent: VecDeque<(Timestamp, Instant)>,
    /// When the newest renewal the API server has shown was sent; `None` once leadership ended.
    confirmed: Option<Instant>,
    /// When the holder's first round since its last confirmed renewal started: the renew
    /// deadline counts from it, so failing rounds cannot stretch leadership (client-go's
    /// `renew`).
    renewing_since: Option<Instant>,
    /// Until when the API server, as last seen, shows this replica as the holder.
    shown_holder_until: Option<Instant>,
}

fn micro(t: Timestamp) -> MicroTime {
    MicroTime(t)
}

fn from_micro(t: &MicroTime) -> Timestamp {
    t.0
}

fn count(metrics: &Metrics, outcome: &str) {
    metrics
        .cluster_writes
        .get_or_create(&WriteLabels {
            target: "lease".into(),
            outcome: outcome.into(),
        })
        .inc();
}

fn is_conflict(e: &KubeError) -> bool {
    matches!(e, KubeError::Api(s) if s.code == 409)
}

fn holder_of(lease: &CoordLease) -> Option<&str> {
    lease
        .spec
        .as_ref()
        .and_then(|s| s.holder_identity.as_deref())
        .filter(|h| !h.is_empty())
}

fn renew_time_of(lease: &CoordLease) -> Option<Timestamp> {
    lease
        .spec
        .as_ref()
        .and_then(|s| s.renew_time.as_ref())
        .map(from_micro)
}

impl Lease {
    pub fn new(
        client: Client,
        namespace: &str,
        identity: impl Into<String>,
        cfg: LeaseConfig,
    ) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            identity: identity.into(),
            cfg,
            last: None,
            observed: None,
            sent: VecDeque::new(),
            confirmed: None,
            renewing_since: None,
            shown_holder_until: None,
        }
    }

    /// Runs the acquire/renew loop with the default timings; the receiver says whether this
    /// replica may write right now.
    pub fn spawn(
        client: Client,
        namespace: &str,
        identity: impl Into<String>,
        metrics: Arc<Metrics>,
        health: Arc<Health>,
    ) -> watch::Receiver<bool> {
        let cfg = LeaseConfig {
            metrics,
            health: Some(health),
            ..LeaseConfig::default()
        };
        Self::new(client, namespace, identity, cfg).run()
    }

    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// Whether this replica leads at `now`: the API server showed a renewal it sent less than
    /// a Lease duration ago.
    pub fn leading(&self, now: Instant) -> bool {
        self.confirmed
            .is_some_and(|sent| now < sent + self.cfg.duration)
    }

    /// The API server shows this replica as the holder, yet it does not lead (its renewals are
    /// not confirmed in time): it writes nothing until the Lease expires or a renewal is shown.
    pub fn held_not_writing(&self, now: Instant) -> bool {
        !self.leading(now) && self.shown_holder_until.is_some_and(|until| now < until)
    }

    /// Spawns the loop; it ends when every receiver is dropped.
    pub fn run(mut self) -> watch::Receiver<bool> {
        let (tx, rx) = watch::channel(false);
        tokio::spawn(async move {
            loop {
                let now = Instant::now();
                if self.leadership_end().is_some_and(|end| now >= end) {
                    self.stop_leading();
                } else {
                    self.round_within_deadline().await;
                }
                let now = Instant::now();
                let leader = self.leading(now);
                let changed = tx.send_if_modified(|v| std::mem::replace(v, leader) != leader);
                if changed {
                    tracing::info_span!("lease_change", lease = %self.cfg.name, identity = %self.identity, leader)
                        .in_scope(|| tracing::info!("writer lease leadership changed"));
                }
                self.report(now);
                if tx.is_closed() {
                    break;
                }
                tokio::time::sleep(self.pause(now)).await;
            }
        });
        rx
    }

    /// Until when this replica may lead without another confirmed renewal: the renew deadline
    /// from its first round since the last one, and never past that renewal's expiry.
    fn leadership_end(&self) -> Option<Instant> {
        let sent = self.confirmed?;
        let expiry = sent + self.cfg.duration;
        Some(self.renewing_since.map_or(expiry, |since| {
            (since + self.cfg.renew_deadline).min(expiry)
        }))
    }

    /// This replica stops leading (and renewing) until the API server shows a renewal again.
    fn stop_leading(&mut self) {
        self.confirmed = None;
        self.renewing_since = None;
        self.last = None; // its resourceVersion may be stale: read the Lease again
    }

    /// One round; while leading, bounded by the leadership's end: past it this replica stops
    /// leading and renewing.
    async fn round_within_deadline(&mut self) {
        let start = Instant::now();
        let outcome = if self.leading(start) {
            self.renewing_since.get_or_insert(start);
            let end = self.leadership_end().unwrap_or(start);
            let round = self.try_acquire_or_renew(Timestamp::now());
            match tokio::time::timeout_at(end, round).await {
                Ok(r) => r,
                Err(_) => {
                    self.stop_leading();
                    Err(LeaseError::TimedOut("renewal", self.cfg.renew_deadline))
                }
            }
        } else {
            self.try_acquire_or_renew(Timestamp::now()).await
        };
        if let Err(e) = outcome {
            tracing::warn!(error = %e, lease = %self.cfg.name, "lease acquire/renew failed");
        }
    }

    /// The pause before the next round: the retry period, cut short by the leadership's end
    /// (so that losing it is reported when it happens).
    fn pause(&self, now: Instant) -> Duration {
        let to_end = self
            .leadership_end()
            .filter(|_| self.leading(now))
            .map_or(self.cfg.retry_period, |end| {
                end.saturating_duration_since(now)
            });
        self.cfg.retry_period.min(to_end)
    }

    /// `kerf_is_leader`, `kerf_lease_held_not_writing` and the `/readyz` line.
    fn report(&self, now: Instant) {
        let metrics = &self.cfg.metrics;
        metrics.is_leader.set(i64::from(self.leading(now)));
        let stuck = self.held_not_writing(now);
        metrics.lease_held_not_writing.set(i64::from(stuck));
        if let Some(health) = &self.cfg.health {
            if stuck {
                health.record_error(
                    HEALTH_DEPENDENCY,
                    &format!(
                        "the API server shows this replica as the holder of the writer Lease {}, \
                         but its renewals are not confirmed within {:?}: it writes nothing and \
                         lets the Lease expire",
                        self.cfg.name, self.cfg.renew_deadline
                    ),
                );
            } else {
                health.clear_error(HEALTH_DEPENDENCY);
            }
        }
    }

    /// A request under its own timeout.
    async fn timed<T>(
        &self,
        what: &'static str,
        f: impl Future<Output = Result<T, KubeError>>,
    ) -> Result<T, LeaseError> {
        match tokio::time::timeout(self.cfg.renew_deadline, f).await {
            Ok(r) => Ok(r?),
            Err(_) => Err(LeaseError::TimedOut(what, self.cfg.renew_deadline)),
        }
    }

    /// What an answer of the API server says: who holds the Lease, and — when it is this
    /// replica with a renewal it sent — since when it may lead.
    fn observe(&mut self, lease: &CoordLease, now: Instant) {
        let version = lease.metadata.resource_version.clone().unwrap_or_default();
        if self.observed.as_ref().is_none_or(|(v, _)| *v != version) {
            self.observed = Some((version, now));
        }
        if holder_of(lease) == Some(self.identity.as_str()) {
            let sent = renew_time_of(lease)
                .and_then(|t| self.sent.iter().find(|(s, _)| *s == t).map(|(_, at)| *at));
            if let Some(at) = sent {
                if self.confirmed.is_none_or(|c| c < at) {
                    self.confirmed = Some(at);
                    self.renewing_since = None;
                }
            }
            let since = sent.unwrap_or(now);
            self.shown_holder_until = Some(since + self.cfg.duration);
        } else {
            // Another holder (or none): whatever this replica sent before is void.
            self.confirmed = None;
            self.renewing_since = None;
            self.shown_holder_until = None;
        }
        self.last = Some(lease.clone());
    }

    /// The renewTime of a new renewal: `now`, later than every earlier one (a renewal is
    /// recognised by it).
    fn next_renew_time(&mut self, now: Timestamp) -> Timestamp {
        // The API server keeps microseconds: a finer time would never be recognised.
        let now = Timestamp::from_microsecond(now.as_microsecond()).unwrap_or(now);
        let t = match self.sent.back() {
            Some((last, _)) if *last >= now => *last + SignedDuration::from_micros(1),
            _ => now,
        };
        if self.sent.len() == SENT_KEPT {
            self.sent.pop_front();
        }
        self.sent.push_back((t, Instant::now()));
        t
    }

    /// The outcome of a create or replace of the Lease, counted: written = held; a conflict
    /// means another replica got there first (not an error).
    fn held_after_write(
        &mut self,
        written: Result<CoordLease, LeaseError>,
    ) -> Result<bool, LeaseError> {
        match written {
            Ok(lease) => {
                count(&self.cfg.metrics, "ok");
                self.observe(&lease, Instant::now());
                Ok(holder_of(&lease) == Some(self.identity.as_str()))
            }
            Err(LeaseError::Api(e)) if is_conflict(&e) => {
                self.last = None;
                Ok(false)
            }
            Err(e) => {
                count(&self.cfg.metrics, "error");
                self.last = None;
                Err(e)
            }
        }
    }

    /// Whether `lease`, held by another (or by nobody), may be taken over at `now`.
    fn expired(&self, lease: &CoordLease, now: Timestamp) -> bool {
        let Some(spec) = &lease.spec else { return true };
        if holder_of(lease).is_none() {
            return true;
        }
        let unchanged_for_a_duration = self
            .observed
            .as_ref()
            .is_some_and(|(_, at)| at.elapsed() >= self.cfg.duration);
        unchanged_for_a_duration
            || match (&spec.renew_time, spec.lease_duration_seconds) {
                (Some(t), Some(d)) => from_micro(t) + SignedDuration::from_secs(i64::from(d)) < now,
                _ => true,
            }
    }

    /// One round: a holder replaces the Lease it last saw; otherwise the Lease is read, created
    /// when absent, taken over when expired, renewed when it shows a renewal this replica sent
    /// less than a Lease duration ago (or one of an earlier process of the same identity).
    /// `Ok(true)` = the API server shows this replica as the holder now.
    #[tracing::instrument(name = "lease_round", level = "debug", skip_all, fields(lease = %self.cfg.name, identity = %self.identity))]
    pub async fn try_acquire_or_renew(&mut self, now: Timestamp) -> Result<bool, LeaseError> {
        let identity = self.identity.clone();
        let ours = |l: &CoordLease| holder_of(l) == Some(identity.as_str());
        if let Some(lease) = self.last.clone().filter(|l| ours(l)) {
            if self.leading(Instant::now()) {
                return self.replace(lease, now, false).await;
            }
        }
        let got = self.timed("read", self.api.get_opt(&self.cfg.name)).await;
        let Some(lease) = got? else {
            return self.create(now).await;
        };
        self.observe(&lease, Instant::now());
        if ours(&lease) {
            let sent_by_this_process =
                renew_time_of(&lease).is_some_and(|t| self.sent.iter().any(|(s, _)| *s == t));
            if !sent_by_this_process || self.leading(Instant::now()) {
                return self.replace(lease, now, false).await;
            }
        }
        if !self.expired(&lease, now) {
            return Ok(false);
        }
        tracing::info!(previous = holder_of(&lease).unwrap_or(""), identity = %self.identity, "taking over expired writer lease");
        self.replace(lease, now, true).await
    }

    async fn create(&mut self, now: Timestamp) -> Result<bool, LeaseError> {
        let duration_s = i32::try_from(self.cfg.duration.as_secs()).unwrap_or(i32::MAX);
        let t = self.next_renew_time(now);
        let lease = CoordLease {
            metadata: ObjectMeta {
                name: Some(self.cfg.name.clone()),
                ..Default::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(self.identity.clone()),
                lease_duration_seconds: Some(duration_s),
                acquire_time: Some(micro(now)),
                renew_time: Some(micro(t)),
                lease_transitions: Some(0),
                ..Default::default()
            }),
        };
        let written = self
            .timed("create", self.api.create(&PostParams::default(), &lease))
            .await;
        self.held_after_write(written)
    }

    /// Renews `lease` (`take_over`: acquires it, one transition more). The replace carries the
    /// `resourceVersion` read: a concurrent change → 409.
    async fn replace(
        &mut self,
        mut lease: CoordLease,
        now: Timestamp,
        take_over: bool,
    ) -> Result<bool, LeaseError> {
        let duration_s = i32::try_from(self.cfg.duration.as_secs()).unwrap_or(i32::MAX);
        let t = self.next_renew_time(now);
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        if take_over {
            spec.holder_identity = Some(self.identity.clone());
            spec.acquire_time = Some(micro(now));
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
        }
        spec.renew_time = Some(micro(t));
        spec.lease_duration_seconds = Some(duration_s);
        let written = self
            .timed(
                "renewal",
                self.api
                    .replace(&self.cfg.name, &PostParams::default(), &lease),
            )
            .await;
        self.held_after_write(written)
    }
}
/// Name of the writer Lease in kerf's namespace.
pub const LEASE_NAME: &str = "kerf-writer";

/// This replica's identity: `POD_NAME` (downward API), else the hostname, else the process id.
pub fn default_identity() -> String {
    let from_env = |k: &str| {
        std::env::var(k)
            .ok()
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
    };
    from_env("POD_NAME")
        .or_else(|| from_env("HOSTNAME"))
        .or_else(|| {
            std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
        })
        .unwrap_or_else(|| format!("kerf-{}", std::process::id()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Lease whose client is never answered: these rules read only its state.
    fn lease() -> Lease {
        let (service, _handle) = tower_test::mock::pair::<
            http::Request<::kube::client::Body>,
            http::Response<::kube::client::Body>,
        >();
        let client = Client::new(service, "default");
        Lease::new(client, "kerf-system", "kerf-0", LeaseConfig::default())
    }

    #[tokio::test(start_paused = true)]
    async fn leadership_end() {
        let mut l = lease();
        let t0 = Instant::now();
        assert_eq!(l.leadership_end(), None, "no confirmed renewal: never led");
        l.confirmed = Some(t0);
        assert_eq!(l.leadership_end(), Some(t0 + Duration::from_secs(15)));
        l.renewing_since = Some(t0 + Duration::from_secs(3));
        assert_eq!(
            l.leadership_end(),
            Some(t0 + Duration::from_secs(13)),
            "the renew deadline from the first round since"
        );
        l.renewing_since = Some(t0 + Duration::from_secs(8));
        assert_eq!(
            l.leadership_end(),
            Some(t0 + Duration::from_secs(15)),
            "never past the confirmed renewal's expiry"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn held_not_writing() {
        let mut l = lease();
        let t0 = Instant::now();
        l.shown_holder_until = Some(t0 + Duration::from_secs(15));
        assert!(l.held_not_writing(t0 + Duration::from_secs(1)));
        assert!(!l.held_not_writing(t0 + Duration::from_secs(15)), "expired");
        l.confirmed = Some(t0);
        assert!(!l.held_not_writing(t0 + Duration::from_secs(1)), "it leads");
    }

    #[tokio::test(start_paused = true)]
    async fn next_renew_time() {
        let mut l = lease();
        let now: Timestamp = "2026-07-01T12:00:00.123456789Z".parse().unwrap();
        let first = l.next_renew_time(now);
        assert_eq!(first.to_string(), "2026-07-01T12:00:00.123456Z");
        let second = l.next_renew_time(now);
        assert_eq!(
            second.to_string(),
            "2026-07-01T12:00:00.123457Z",
            "later than the first"
        );
        for _ in 0..SENT_KEPT {
            l.next_renew_time(now);
        }
        assert_eq!(l.sent.len(), SENT_KEPT);
    }
}
