//! The writer Lease (`coordination.k8s.io/v1`, `kerf-writer` in kerf's namespace): only its
//! holder writes to the cluster. Acquired when absent or expired, renewed periodically, and
//! always replaced with the `resourceVersion` that was read, so two replicas racing for it cannot
//! both win (the loser gets 409 Conflict). Any failed or slow renewal drops leadership at once:
//! a replica that is not sure it holds the Lease must not write.

use std::sync::Arc;
use std::time::Duration;

use ::kube::api::{Api, ObjectMeta, PostParams};
use ::kube::{Client, Error as KubeError};
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::coordination::v1::{Lease as CoordLease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use tokio::sync::watch;

use crate::telemetry::{Metrics, WriteLabels};

#[derive(Clone, Debug)]
pub struct LeaseConfig {
    pub name: String,
    /// `leaseDurationSeconds`: how long a holder that stopped renewing keeps the Lease.
    pub duration: Duration,
    /// How often the holder renews (and a follower retries).
    pub renew_every: Duration,
    /// Where the Lease writes and `kerf_is_leader` are reported: the process's registry.
    pub metrics: Arc<Metrics>,
}

impl Default for LeaseConfig {
    fn default() -> Self {
        Self {
            name: LEASE_NAME.into(),
            duration: Duration::from_secs(15),
            renew_every: Duration::from_secs(5),
            metrics: Metrics::new(),
        }
    }
}

pub struct Lease {
    api: Api<CoordLease>,
    identity: String,
    cfg: LeaseConfig,
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

/// The outcome of a create or replace of the Lease, counted: written = held; a conflict means
/// another replica got there first (not an error).
fn held_after_write(
    metrics: &Metrics,
    written: Result<CoordLease, KubeError>,
) -> Result<bool, KubeError> {
    match written {
        Ok(_) => {
            count(metrics, "ok");
            Ok(true)
        }
        Err(e) if is_conflict(&e) => Ok(false),
        Err(e) => {
            count(metrics, "error");
            Err(e)
        }
    }
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
        }
    }

    /// Runs the acquire/renew loop with the default timings; the receiver says whether this
    /// replica holds the Lease right now.
    pub fn spawn(
        client: Client,
        namespace: &str,
        identity: impl Into<String>,
        metrics: Arc<Metrics>,
    ) -> watch::Receiver<bool> {
        let cfg = LeaseConfig {
            metrics,
            ..LeaseConfig::default()
        };
        Self::new(client, namespace, identity, cfg).run()
    }

    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// Spawns the loop; it ends when every receiver is dropped.
    pub fn run(self) -> watch::Receiver<bool> {
        let (tx, rx) = watch::channel(false);
        tokio::spawn(async move {
            loop {
                let now = Timestamp::now();
                let leader = match tokio::time::timeout(
                    self.cfg.renew_every,
                    self.try_acquire_or_renew(now),
                )
                .await
                {
                    Ok(Ok(held)) => held,
                    Ok(Err(e)) => {
                        tracing::warn!(error = %e, lease = %self.cfg.name, "lease acquire/renew failed");
                        false
                    }
                    Err(_) => {
                        tracing::warn!(lease = %self.cfg.name, "lease acquire/renew timed out");
                        false
                    }
                };
                let changed = tx.send_if_modified(|v| std::mem::replace(v, leader) != leader);
                if changed {
                    tracing::info!(identity = %self.identity, leader, "writer lease leadership changed");
                }
                self.cfg.metrics.is_leader.set(i64::from(leader));
                if tx.is_closed() {
                    break;
                }
                tokio::time::sleep(self.cfg.renew_every).await;
            }
        });
        rx
    }

    /// One round: create the Lease when absent, take it over when expired, renew it when held.
    /// `Ok(true)` = this replica holds it now; `Ok(false)` = another replica does (or won a race).
    pub async fn try_acquire_or_renew(&self, now: Timestamp) -> Result<bool, KubeError> {
        let duration_s = i32::try_from(self.cfg.duration.as_secs()).unwrap_or(i32::MAX);
        let Some(mut lease) = self.api.get_opt(&self.cfg.name).await? else {
            let lease = CoordLease {
                metadata: ObjectMeta {
                    name: Some(self.cfg.name.clone()),
                    ..Default::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(self.identity.clone()),
                    lease_duration_seconds: Some(duration_s),
                    acquire_time: Some(micro(now)),
                    renew_time: Some(micro(now)),
                    lease_transitions: Some(0),
                    ..Default::default()
                }),
            };
            return held_after_write(
                &self.cfg.metrics,
                self.api.create(&PostParams::default(), &lease).await,
            );
        };
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
        if holder.as_deref() != Some(self.identity.as_str()) {
            let expired = holder.is_none()
                || match (&spec.renew_time, spec.lease_duration_seconds) {
                    (Some(t), Some(d)) => {
                        from_micro(t) + SignedDuration::from_secs(i64::from(d)) < now
                    }
                    _ => true,
                };
            if !expired {
                return Ok(false);
            }
            tracing::info!(previous = holder.as_deref().unwrap_or(""), identity = %self.identity, "taking over expired writer lease");
            spec.holder_identity = Some(self.identity.clone());
            spec.acquire_time = Some(micro(now));
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
        }
        spec.renew_time = Some(micro(now));
        spec.lease_duration_seconds = Some(duration_s);
        // `lease.metadata.resourceVersion` is the one read above: a concurrent change → 409.
        held_after_write(
            &self.cfg.metrics,
            self.api
                .replace(&self.cfg.name, &PostParams::default(), &lease)
                .await,
        )
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
