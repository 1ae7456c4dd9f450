//! Every Prometheus metric kerf exports, in one registry (served on `/metrics`).
//! `docs/metrics.md` lists them; keep the two in step.
//!
//! The registry is a value, not a global: `kerf serve` makes one [`Metrics`] and hands it to every
//! task (the store the webhook and health listener read carries it; the reader, writer, Lease and
//! Prometheus source get it at construction). Each test makes its own, so tests never share
//! counters.

use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AdmissionLabels {
    /// `Pod`, `HorizontalPodAutoscaler`, or `unknown`.
    pub kind: &'static str,
    /// `CREATE`, `UPDATE`, …
    pub operation: &'static str,
    /// `patched`, `unchanged`, `skipped`, `error`, `bad_request`.
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    pub kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueryLabels {
    /// `gpu_compute`, `gpu_memory`, `cpu`, `memory`, …
    pub signal: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueryFailureLabels {
    /// As [`QueryLabels::signal`].
    pub signal: String,
    /// `unavailable`, `timeout`, `bad_response`, `unauthorized`, `refused`, `other`: the
    /// metric source's error ([`crate::metrics::MetricError::label`]).
    pub reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WriteLabels {
    /// `annotations`, `template`, `hpa`, `resize`, `eviction`, `status`, `recommendation`, `event`,
    /// `lease`.
    pub target: String,
    /// `ok`, `error`.
    pub outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RecommendationLabels {
    /// `applied`, `blocked`, `audit-only`, `pending`.
    pub phase: String,
    /// The status' reason (`HPACoupled`, `InsufficientHistory`, …), empty when it has none.
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HistoryLabels {
    /// `kept` or `reading`.
    pub state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResizeLabels {
    /// `accepted`, `refused` (by the API server), `infeasible`, `timed_out` (deferred or in
    /// progress beyond its bound), `fallback` (any other reason to roll out instead).
    pub outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EvictionLabels {
    /// `evicted`, `disruption_budget` (a PodDisruptionBudget refused it: next turn), `gone`
    /// (the pod no longer exists), `failed`.
    pub outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ManagerLabel {
    /// The field manager that took a field kerf set back (`argocd-controller`, …).
    pub manager: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WatchErrorLabels {
    /// The watched kind: `Pod`, `GpuReactivePolicy`, …
    pub resource: String,
    /// `forbidden`, `unauthorized`, `crd_missing`, `not_found`, `expired`, `connection`,
    /// `api_error`, `other`.
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ConnectionCloseLabels {
    /// `webhook` (TLS, `/mutate`) or `health`.
    pub listener: &'static str,
    /// `handshake`, `first_request`, `headers`, `body`, `idle`.
    pub phase: &'static str,
    /// `timeout`, `too_large`, `memory_limit`.
    pub reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ListenerLabel {
    /// `webhook` or `health`.
    pub listener: &'static str,
}

pub struct Metrics {
    registry: Registry,
    pub admission_requests: Family<AdmissionLabels, Counter>,
    pub admission_duration_seconds: Histogram,
    pub admission_patches: Family<KindLabel, Counter>,
    pub admission_internal_errors: Counter,
    pub store_workloads: Gauge,
    pub reconcile_cycles: Counter,
    pub reconcile_errors: Counter,
    pub reconcile_duration_seconds: Histogram,
    pub prometheus_query_duration_seconds: Family<QueryLabels, Histogram>,
    pub prometheus_query_failures: Family<QueryFailureLabels, Counter>,
    pub prometheus_query_splits: Counter,
    pub prometheus_samples_loaded: Family<QueryLabels, Counter>,
    pub cluster_writes: Family<WriteLabels, Counter>,
    pub resizes: Family<ResizeLabels, Counter>,
    pub evictions: Family<EvictionLabels, Counter>,
    pub is_leader: Gauge,
    pub lease_held_not_writing: Gauge,
    pub tls_reloads: Family<KindLabel, Counter>,
    /// The serving certificate's `notAfter`, Unix seconds; read again on every reload.
    pub tls_certificate_expiration: Gauge,
    pub watch_errors: Family<WatchErrorLabels, Counter>,
    pub field_takebacks: Family<ManagerLabel, Counter>,
    pub conflict_blocked_workloads: Gauge,
    /// RightsizingRecommendations by phase and reason, from the persisted state.
    pub recommendations: Family<RecommendationLabels, Gauge>,
    /// The usage history: workloads kept, and still reading their window.
    pub history_workloads: Family<HistoryLabels, Gauge>,
    pub connections_closed: Family<ConnectionCloseLabels, Counter>,
    pub connections_open: Family<ListenerLabel, Gauge>,
    pub connections_max: Family<ListenerLabel, Gauge>,
    pub request_body_bytes_buffered: Gauge,
}

fn query_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.005, 2.0, 14))
}

impl Metrics {
    /// One reconcile cycle ended (started at `started`): counted and timed together, so
    /// `kerf_reconcile_cycles_total` and `kerf_reconcile_duration_seconds_count` always agree, in
    /// every mode.
    pub fn cycle_done(&self, started: std::time::Instant) {
        self.reconcile_cycles.inc();
        self.reconcile_duration_seconds
            .observe(started.elapsed().as_secs_f64());
    }
}

impl Metrics {
    /// A fresh registry with every kerf metric at zero, to share between the tasks of one process.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// The OpenMetrics 1.0 exposition of every metric.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("writing to a String cannot fail");
        out
    }

    /// The Prometheus text exposition (format 0.0.4) of every metric.
    pub fn encode_prometheus_text(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::prometheus_text::encode(&mut out, &self.registry)
            .expect("writing to a String cannot fail");
        out
    }

    fn unregistered() -> Self {
        Self {
            registry: Registry::default(),
            admission_requests: Family::default(),
            admission_duration_seconds: Histogram::new(exponential_buckets(0.000_05, 2.0, 16)),
            admission_patches: Family::default(),
            admission_internal_errors: Counter::default(),
            store_workloads: Gauge::default(),
            reconcile_cycles: Counter::default(),
            reconcile_errors: Counter::default(),
            reconcile_duration_seconds: Histogram::new(exponential_buckets(0.001, 2.0, 16)),
            prometheus_query_duration_seconds: Family::new_with_constructor(query_histogram),
            prometheus_query_failures: Family::default(),
            prometheus_query_splits: Counter::default(),
            prometheus_samples_loaded: Family::default(),
            cluster_writes: Family::default(),
            resizes: Family::default(),
            evictions: Family::default(),
            is_leader: Gauge::default(),
            lease_held_not_writing: Gauge::default(),
            tls_reloads: Family::default(),
            tls_certificate_expiration: Gauge::default(),
            watch_errors: Family::default(),
            field_takebacks: Family::default(),
            conflict_blocked_workloads: Gauge::default(),
            recommendations: Family::default(),
            history_workloads: Family::default(),
            connections_closed: Family::default(),
            connections_open: Family::default(),
            connections_max: Family::default(),
            request_body_bytes_buffered: Gauge::default(),
        }
    }

    fn register(&self, r: &mut Registry) {
        r.register(
            "kerf_admission_requests",
            "Admission reviews by kind, operation and outcome",
            self.admission_requests.clone(),
        );
        r.register(
            "kerf_admission_duration_seconds",
            "Time to answer one admission review",
            self.admission_duration_seconds.clone(),
        );
        r.register(
            "kerf_admission_patches",
            "Admission responses that carried a non-empty patch, by kind",
            self.admission_patches.clone(),
        );
        r.register(
            "kerf_admission_internal_errors",
            "Reviews answered allowed without a patch because of an internal problem",
            self.admission_internal_errors.clone(),
        );
        r.register(
            "kerf_store_workloads",
            "Workloads with a recommendation in the in-memory store",
            self.store_workloads.clone(),
        );
        r.register(
            "kerf_reconcile_cycles",
            "Reconcile cycles run",
            self.reconcile_cycles.clone(),
        );
        r.register(
            "kerf_reconcile_errors",
            "Reconcile cycles that hit an error",
            self.reconcile_errors.clone(),
        );
        r.register(
            "kerf_reconcile_duration_seconds",
            "Wall time of one reconcile cycle",
            self.reconcile_duration_seconds.clone(),
        );
        r.register(
            "kerf_prometheus_query_duration_seconds",
            "Prometheus range query latency by signal",
            self.prometheus_query_duration_seconds.clone(),
        );
        r.register(
            "kerf_prometheus_query_failures",
            "Prometheus range queries that failed, by signal",
            self.prometheus_query_failures.clone(),
        );
        r.register(
            "kerf_prometheus_query_splits",
            "Batched window queries the metric source refused as too big (too many samples, \
             timeout) and kerf split in two to retry",
            self.prometheus_query_splits.clone(),
        );
        r.register(
            "kerf_prometheus_samples_loaded",
            "Samples Prometheus loaded to answer kerf's window and step queries (stats=all), by \
             signal",
            self.prometheus_samples_loaded.clone(),
        );
        r.register(
            "kerf_cluster_writes",
            "Writes to the API server by target and outcome",
            self.cluster_writes.clone(),
        );
        r.register(
            "kerf_resizes",
            "In-place pod resizes: requests the API server accepted or refused, and changes that \
             fell back to a rollout, by outcome",
            self.resizes.clone(),
        );
        self.register_operation(r);
    }

    /// The metrics of running kerf in a cluster: evictions, the Lease, TLS, watches, take-backs,
    /// the usage history, recommendations and connections.
    fn register_operation(&self, r: &mut Registry) {
        r.register(
            "kerf_evictions",
            "Pods evicted so that their replacements are admitted with kerf's requests, for \
             workloads whose template another controller owns, by outcome",
            self.evictions.clone(),
        );
        r.register(
            "kerf_is_leader",
            "1 when this replica holds the writer Lease",
            self.is_leader.clone(),
        );
        r.register(
            "kerf_lease_held_not_writing",
            "1 when the API server shows this replica as the writer Lease holder but its renewals \
             are not confirmed in time, so it writes nothing until the Lease expires",
            self.lease_held_not_writing.clone(),
        );
        r.register(
            "kerf_tls_reloads",
            "Serving certificate reload attempts by outcome (kind label = ok|error)",
            self.tls_reloads.clone(),
        );
        r.register(
            "kerf_tls_certificate_expiration_timestamp_seconds",
            "When the serving certificate in use expires (its notAfter), in Unix seconds",
            self.tls_certificate_expiration.clone(),
        );
        r.register(
            "kerf_watch_errors",
            "List and watch errors from the API server, by watched resource and reason",
            self.watch_errors.clone(),
        );
        r.register(
            "kerf_field_takebacks",
            "Fields kerf set that another field manager took back, counted by the Lease holder, by manager",
            self.field_takebacks.clone(),
        );
        r.register(
            "kerf_usage_history_workloads",
            "Workloads whose CPU/memory usage history the Lease holder keeps (state=kept), or that \
             still read their whole window once (state=reading)",
            self.history_workloads.clone(),
        );
        r.register(
            "kerf_conflict_blocked_workloads",
            "Workloads kerf does not write because another field manager keeps taking its fields back",
            self.conflict_blocked_workloads.clone(),
        );
        r.register(
            "kerf_recommendations",
            "RightsizingRecommendations by phase and reason, from the persisted state on every \
             replica",
            self.recommendations.clone(),
        );
        r.register(
            "kerf_connections_closed",
            "Connections closed or requests refused because a limit was reached, by listener, \
             phase (handshake, first_request, headers, body, idle) and reason (timeout, \
             too_large, memory_limit)",
            self.connections_closed.clone(),
        );
        r.register(
            "kerf_connections_open",
            "Connections open on a listener",
            self.connections_open.clone(),
        );
        r.register(
            "kerf_connections_max",
            "Connections a listener serves at once; beyond it new connections wait",
            self.connections_max.clone(),
        );
        r.register(
            "kerf_request_body_bytes_buffered",
            "Bytes of request bodies held in memory, both listeners together",
            self.request_body_bytes_buffered.clone(),
        );
    }
}

impl Default for Metrics {
    fn default() -> Self {
        let mut metrics = Self::unregistered();
        let mut registry = Registry::default();
        metrics.register(&mut registry);
        metrics.registry = registry;
        metrics
    }
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}
