//! The writer Lease against a mock API server: create, takeover, refusal, races, and the writer
//! going silent once the Lease is lost.

use crate::kube_support;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jiff::Timestamp;
use kerf::api::WorkloadKind;
use kerf::core::model::WorkloadKey;
use kerf::core::writes::WriteOp;
use kerf::telemetry::Metrics;
use kerf::writers::kube::lease::LeaseError;
use kerf::writers::kube::{Lease, LeaseConfig, WriteOutcome, Writer, WriterConfig};
use kube_support::{Recorded, Reply, calls, eventually, mock, requests, status};
use serde_json::{Value, json};

const LEASE_PATH: &str = "/apis/coordination.k8s.io/v1/namespaces/kerf-system/leases/kerf-writer";
const LEASES_PATH: &str = "/apis/coordination.k8s.io/v1/namespaces/kerf-system/leases";

fn cfg() -> LeaseConfig {
    LeaseConfig {
        name: "kerf-writer".into(),
        duration: Duration::from_secs(15),
        renew_deadline: Duration::from_millis(200),
        retry_period: Duration::from_millis(50),
        metrics: Metrics::new(),
        health: None,
    }
}

fn lease_json(holder: &str, renew: &str, transitions: i32) -> Value {
    json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "kerf-writer", "namespace": "kerf-system", "resourceVersion": "41"},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15,
                 "acquireTime": "2026-07-01T11:00:00.000000Z", "renewTime": renew,
                 "leaseTransitions": transitions}
    })
}

fn now() -> Timestamp {
    "2026-07-01T12:00:00Z".parse::<Timestamp>().unwrap()
}

#[tokio::test]
async fn creates_the_lease_when_absent() {
    let (client, log) = mock(|r: &Recorded| match r.method.as_str() {
        "GET" => status(404, "NotFound"),
        _ => Reply::Json(201, r.body.clone()),
    });
    let mut lease = Lease::new(client, "kerf-system", "kerf-0", cfg());
    assert!(lease.try_acquire_or_renew(now()).await.unwrap());
    let seen = requests(&log);
    assert_eq!(seen.len(), 2);
    assert_eq!(
        (seen[0].method.as_str(), seen[0].path.as_str()),
        ("GET", LEASE_PATH)
    );
    assert_eq!(
        (seen[1].method.as_str(), seen[1].path.as_str()),
        ("POST", LEASES_PATH)
    );
    let spec = &seen[1].body["spec"];
    assert_eq!(seen[1].body["metadata"]["name"], "kerf-writer");
    assert_eq!(spec["holderIdentity"], "kerf-0");
    assert_eq!(spec["leaseDurationSeconds"], 15);
    assert_eq!(spec["leaseTransitions"], 0);
    assert!(
        spec["renewTime"]
            .as_str()
            .unwrap()
            .starts_with("2026-07-01T12:00:00")
    );
}

/// One round against a mock whose GETs answer `get()` and whose write (create or replace) answers
/// `write` (the request body back for a 2xx, else a Status with `reason`): the round's result and
/// the requests sent.
async fn one_round(
    get: impl Fn() -> Reply + Send + 'static,
    write: u16,
    reason: &'static str,
) -> (Result<bool, LeaseError>, Vec<Recorded>) {
    let (client, log) = mock(move |r: &Recorded| match r.method.as_str() {
        "GET" => get(),
        _ if write < 300 => Reply::Json(write, r.body.clone()),
        _ => status(write, reason),
    });
    let mut lease = Lease::new(client, "kerf-system", "kerf-0", cfg());
    let held = lease.try_acquire_or_renew(now()).await;
    (held, requests(&log))
}

/// A round against a Lease API whose GETs answer `get()`: the write `sent` (method, path) answered
/// 409 `reason` loses (not an error); the same write answered `won` (2xx) holds the Lease, and
/// answered 500 is an error: the 409 is what lost. Returns the write request.
async fn loses_only_to_a_conflict(
    get: impl Fn() -> Reply + Clone + Send + 'static,
    reason: &'static str,
    sent: (&str, &str),
    won: u16,
) -> Recorded {
    let (held, seen) = one_round(get.clone(), 409, reason).await;
    assert!(!held.unwrap(), "another replica wrote the Lease first");
    assert_eq!(
        calls(&seen),
        [("GET", LEASE_PATH), sent],
        "the write was sent"
    );
    let (held, _) = one_round(get.clone(), won, "").await;
    assert!(
        held.unwrap(),
        "the same write answered {won} holds the Lease"
    );
    let (held, _) = one_round(get, 500, "InternalError").await;
    assert!(
        held.is_err(),
        "a 500 is an error, not a lost race: {held:?}"
    );
    seen[1].clone()
}

#[tokio::test]
async fn losing_a_create_race_is_not_leadership() {
    let absent = || status(404, "NotFound");
    let create =
        loses_only_to_a_conflict(absent, "AlreadyExists", ("POST", LEASES_PATH), 201).await;
    assert_eq!(create.body["spec"]["holderIdentity"], "kerf-0");
}

#[tokio::test]
async fn takes_over_an_expired_lease_with_optimistic_concurrency() {
    // Renewed 20 s ago with a 15 s duration: expired.
    let (client, log) = mock(|r: &Recorded| match r.method.as_str() {
        "GET" => Reply::Json(200, lease_json("kerf-1", "2026-07-01T11:59:40.000000Z", 3)),
        _ => Reply::Json(200, r.body.clone()),
    });
    let mut lease = Lease::new(client, "kerf-system", "kerf-0", cfg());
    assert!(lease.try_acquire_or_renew(now()).await.unwrap());
    let seen = requests(&log);
    assert_eq!(
        (seen[1].method.as_str(), seen[1].path.as_str()),
        ("PUT", LEASE_PATH)
    );
    let body = &seen[1].body;
    assert_eq!(
        body["metadata"]["resourceVersion"], "41",
        "replace carries the version read"
    );
    assert_eq!(body["spec"]["holderIdentity"], "kerf-0");
    assert_eq!(body["spec"]["leaseTransitions"], 4);
    assert!(
        body["spec"]["acquireTime"]
            .as_str()
            .unwrap()
            .starts_with("2026-07-01T12:00:00")
    );
}

#[tokio::test]
async fn refuses_a_fresh_lease_held_by_another_replica() {
    let (client, log) = mock(|_: &Recorded| {
        Reply::Json(200, lease_json("kerf-1", "2026-07-01T11:59:55.000000Z", 3))
    });
    let mut lease = Lease::new(client, "kerf-system", "kerf-0", cfg());
    assert!(!lease.try_acquire_or_renew(now()).await.unwrap());
    assert_eq!(
        calls(&requests(&log)),
        [("GET", LEASE_PATH)],
        "only the GET: no write to a lease held by another"
    );
}

#[tokio::test]
async fn a_conflicting_takeover_loses() {
    // Renewed an hour ago: expired, so kerf-0 replaces it with the version it read.
    let expired = || Reply::Json(200, lease_json("kerf-1", "2026-07-01T11:00:00.000000Z", 3));
    let replace = loses_only_to_a_conflict(expired, "Conflict", ("PUT", LEASE_PATH), 200).await;
    assert_eq!(replace.body["metadata"]["resourceVersion"], "41");
    assert_eq!(replace.body["spec"]["holderIdentity"], "kerf-0");
}

#[tokio::test]
async fn renews_its_own_lease_without_a_transition() {
    let (client, log) = mock(|r: &Recorded| match r.method.as_str() {
        "GET" => Reply::Json(200, lease_json("kerf-0", "2026-07-01T11:59:57.000000Z", 2)),
        _ => Reply::Json(200, r.body.clone()),
    });
    let mut lease = Lease::new(client, "kerf-system", "kerf-0", cfg());
    assert!(lease.try_acquire_or_renew(now()).await.unwrap());
    let body = &requests(&log)[1].body;
    assert_eq!(body["spec"]["leaseTransitions"], 2);
    assert!(
        body["spec"]["acquireTime"]
            .as_str()
            .unwrap()
            .starts_with("2026-07-01T11:00:00")
    );
    assert!(
        body["spec"]["renewTime"]
            .as_str()
            .unwrap()
            .starts_with("2026-07-01T12:00:00")
    );
}

/// The scripted cluster for the end-to-end scenario: what the Lease looks like next.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Phase {
    /// No Lease yet: create succeeds.
    Absent,
    /// Held by kerf-0, renewals succeed.
    Held,
    /// Renewals fail with 500.
    RenewFails,
    /// Another replica holds a fresh Lease.
    Stolen,
}

#[tokio::test]
async fn the_writer_goes_silent_once_the_lease_is_lost() {
    let phase = Arc::new(Mutex::new(Phase::Absent));
    let p = phase.clone();
    let (client, log) = mock(move |r: &Recorded| {
        let phase = *p.lock().unwrap();
        if r.path.starts_with(LEASES_PATH) {
            let fresh = Timestamp::now()
                .strftime("%Y-%m-%dT%H:%M:%S%.6fZ")
                .to_string();
            return match (phase, r.method.as_str()) {
                (Phase::Absent, "GET") => status(404, "NotFound"),
                (Phase::Absent, _) => Reply::Json(201, r.body.clone()),
                (Phase::Held, "GET") | (Phase::RenewFails, "GET") => {
                    Reply::Json(200, lease_json("kerf-0", &fresh, 0))
                }
                (Phase::Held, _) => Reply::Json(200, r.body.clone()),
                (Phase::RenewFails, _) => status(500, "InternalError"),
                (Phase::Stolen, _) => Reply::Json(200, lease_json("kerf-1", &fresh, 1)),
            };
        }
        Reply::Json(200, r.body.clone())
    });
    let metrics = Metrics::new();
    let lease_cfg = LeaseConfig {
        metrics: metrics.clone(),
        ..cfg()
    };
    let leader = Lease::new(client.clone(), "kerf-system", "kerf-0", lease_cfg).run();
    let mut wcfg = WriterConfig::new("kerf-system");
    wcfg.read_only = false;
    wcfg.backoff = Duration::from_millis(5);
    let writer = Writer::spawn_with(client, leader.clone(), wcfg);
    let restart = WriteOp::Restart(WorkloadKey::new("shop", WorkloadKind::Deployment, "web"));
    let workload_writes = || {
        requests(&log)
            .iter()
            .filter(|r| r.path.contains("/deployments/"))
            .count()
    };

    {
        let l = leader.clone();
        eventually(5, "leadership after create", move || *l.borrow()).await;
    }
    *phase.lock().unwrap() = Phase::Held;
    assert_eq!(
        writer.apply(restart.clone()).await,
        WriteOutcome::Written { requests: 1 }
    );
    assert_eq!(workload_writes(), 1);

    // Renewals failing past the renew deadline drop leadership; queued writes are dropped,
    // nothing is sent.
    *phase.lock().unwrap() = Phase::RenewFails;
    {
        let l = leader.clone();
        eventually(5, "leadership lost after a failed renew", move || {
            !*l.borrow()
        })
        .await;
    }
    for _ in 0..3 {
        assert_eq!(writer.apply(restart.clone()).await, WriteOutcome::NotLeader);
    }
    assert_eq!(workload_writes(), 1);

    // Renewals work again: leadership comes back; then another replica takes the Lease.
    *phase.lock().unwrap() = Phase::Held;
    {
        let l = leader.clone();
        eventually(5, "leadership regained", move || *l.borrow()).await;
    }
    assert_eq!(
        writer.apply(restart.clone()).await,
        WriteOutcome::Written { requests: 1 }
    );
    *phase.lock().unwrap() = Phase::Stolen;
    let stolen_at = requests(&log).len();
    {
        let l = leader.clone();
        eventually(5, "leadership lost to another holder", move || !*l.borrow()).await;
    }
    // A few more rounds of the follower (it retries every 50 ms).
    {
        let log = log.clone();
        eventually(5, "three more Lease rounds", move || {
            requests(&log).len() >= stolen_at + 4
        })
        .await;
    }
    assert_eq!(writer.apply(restart).await, WriteOutcome::NotLeader);
    assert_eq!(
        workload_writes(),
        2,
        "no workload write after the Lease went to kerf-1"
    );
    let after: Vec<_> = requests(&log).into_iter().skip(stolen_at + 1).collect();
    assert!(!after.is_empty());
    assert!(
        after
            .iter()
            .all(|r| r.method == "GET" && r.path == LEASE_PATH),
        "a follower only reads the Lease: {after:#?}"
    );
    assert_eq!(
        metrics.is_leader.get(),
        0,
        "kerf_is_leader after the Lease was lost"
    );
}

/// A Lease API server as the real one behaves: each write takes effect when it arrives, a
/// replace must carry the current `resourceVersion` (else 409), and it records who held the
/// Lease after each write, when.
#[derive(Default)]
struct LeaseServer {
    lease: Option<Value>,
    version: u64,
    writes: Vec<(String, tokio::time::Instant)>,
}

impl LeaseServer {
    fn answer(&mut self, r: &Recorded) -> Reply {
        let current = self
            .lease
            .as_ref()
            .map(|l| l["metadata"]["resourceVersion"].clone());
        match (r.method.as_str(), current) {
            ("GET", Some(_)) => Reply::Json(200, self.lease.clone().unwrap()),
            ("GET", None) => status(404, "NotFound"),
            ("POST", None) => self.store(r.body.clone(), 201),
            ("POST", Some(_)) => status(409, "AlreadyExists"),
            ("PUT", Some(v)) if r.body["metadata"]["resourceVersion"] == v => {
                self.store(r.body.clone(), 200)
            }
            _ => status(409, "Conflict"),
        }
    }

    fn store(&mut self, mut body: Value, code: u16) -> Reply {
        self.version += 1;
        body["metadata"]["resourceVersion"] = json!(self.version.to_string());
        let holder = body["spec"]["holderIdentity"].as_str().unwrap_or("");
        self.writes
            .push((holder.to_string(), tokio::time::Instant::now()));
        self.lease = Some(body.clone());
        Reply::Json(code, body)
    }

    fn holder(&self) -> Option<String> {
        let l = self.lease.as_ref()?;
        l["spec"]["holderIdentity"].as_str().map(str::to_string)
    }
}

/// A client of `server` whose requests take effect at once and are answered after
/// `latency(n)` for the n-th request; other paths echo the request body.
fn slow_client(
    server: Arc<Mutex<LeaseServer>>,
    latency: impl Fn(u64) -> Duration + Send + 'static,
) -> (kube::Client, kube_support::Log) {
    let mut n = 0;
    mock(move |r: &Recorded| {
        n += 1;
        let reply = if r.path.starts_with(LEASES_PATH) {
            server.lock().unwrap().answer(r)
        } else {
            Reply::Json(200, r.body.clone())
        };
        Reply::Late(latency(n), Box::new(reply))
    })
}

/// 2–5 s per request, spread over the range.
fn two_to_five_seconds(n: u64) -> Duration {
    Duration::from_millis(2000 + (n * 7919) % 3001)
}

/// Every request answered 2–5 s late (time simulated): with the default timings the holder
/// renews without a pause in its leadership, every write goes through, and the Lease never
/// changes hands.
#[tokio::test(start_paused = true)]
async fn leads_and_writes_under_two_to_five_seconds_of_api_latency() {
    let server = Arc::new(Mutex::new(LeaseServer::default()));
    let (client, log) = slow_client(server.clone(), two_to_five_seconds);
    let metrics = Metrics::new();
    let lease_cfg = LeaseConfig {
        metrics: metrics.clone(),
        ..LeaseConfig::default()
    };
    let leader = Lease::new(client.clone(), "kerf-system", "kerf-0", lease_cfg).run();
    let mut wcfg = WriterConfig::new("kerf-system");
    wcfg.read_only = false;
    let writer = Writer::spawn_with(client, leader.clone(), wcfg);
    let restart = WriteOp::Restart(WorkloadKey::new("shop", WorkloadKind::Deployment, "web"));
    {
        let l = leader.clone();
        eventually(30, "leadership after create", move || *l.borrow()).await;
    }
    let acquired = requests(&log).len();
    let start = tokio::time::Instant::now();
    let (mut samples, mut leading, mut outcomes) = (0, 0, Vec::new());
    while start.elapsed() < Duration::from_secs(240) {
        outcomes.push(writer.apply(restart.clone()).await);
        for _ in 0..10 {
            tokio::time::sleep(Duration::from_secs(1)).await;
            samples += 1;
            leading += i32::from(*leader.borrow());
            assert_eq!(metrics.lease_held_not_writing.get(), 0);
        }
    }
    assert_eq!(leading, samples, "leader in every sample after acquiring");
    assert!(outcomes.len() >= 15, "{outcomes:?}");
    assert!(
        outcomes
            .iter()
            .all(|o| *o == WriteOutcome::Written { requests: 1 }),
        "every write went through: {outcomes:?}"
    );
    let server = server.lock().unwrap();
    assert!(server.writes.iter().all(|(h, _)| h == "kerf-0"));
    // Renewed every retry period after the previous answer: 240 s / (2 s + 2–5 s).
    assert!(
        server.writes.len() >= 35,
        "{} renewals",
        server.writes.len()
    );
    let lease_calls: Vec<_> = requests(&log)
        .into_iter()
        .skip(acquired)
        .filter(|r| r.path.starts_with(LEASES_PATH))
        .collect();
    assert!(
        lease_calls
            .iter()
            .all(|r| r.method == "PUT" && r.path == LEASE_PATH),
        "the holder renews what it last wrote, without reading the Lease first"
    );
    assert_eq!(
        server.lease.as_ref().unwrap()["spec"]["leaseTransitions"],
        0
    );
}

/// The holder's answers start coming back after 12 s (its renewals still land): it stops
/// leading within the renew deadline, sends no renewal after that, and says so on `/readyz`
/// and in `kerf_lease_held_not_writing`; the Lease expires and a replica with a fast API
/// connection takes over. The two never lead at once.
#[tokio::test(start_paused = true)]
async fn a_holder_whose_answers_come_too_late_stops_renewing_and_another_takes_over() {
    let server = Arc::new(Mutex::new(LeaseServer::default()));
    let slow = Arc::new(Mutex::new(false));
    let s = slow.clone();
    let (client0, log0) = slow_client(server.clone(), move |_| {
        Duration::from_millis(if *s.lock().unwrap() { 12_000 } else { 100 })
    });
    let (client1, _) = slow_client(server.clone(), |_| Duration::from_millis(100));
    let (metrics0, health0) = (Metrics::new(), kerf::health::Health::new());
    let cfg0 = LeaseConfig {
        metrics: metrics0.clone(),
        health: Some(health0.clone()),
        ..LeaseConfig::default()
    };
    let leader0 = Lease::new(client0, "kerf-system", "kerf-0", cfg0).run();
    {
        let l = leader0.clone();
        eventually(5, "kerf-0 leads", move || *l.borrow()).await;
    }
    let leader1 = Lease::new(client1, "kerf-system", "kerf-1", LeaseConfig::default()).run();
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert!(*leader0.borrow() && !*leader1.borrow());

    *slow.lock().unwrap() = true;
    let slowed = tokio::time::Instant::now();
    let (mut lost_at, mut stuck_seen, mut readyz) = (None, false, String::new());
    while !*leader1.borrow() {
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!(*leader0.borrow() && *leader1.borrow()), "two leaders");
        if !*leader0.borrow() && lost_at.is_none() {
            lost_at = Some(tokio::time::Instant::now());
        }
        if metrics0.lease_held_not_writing.get() == 1 && !stuck_seen {
            stuck_seen = true;
            readyz = health0.readiness(true).1;
        }
        assert!(slowed.elapsed() < Duration::from_secs(60), "no takeover");
    }
    let lost_at = lost_at.expect("kerf-0 stopped leading");
    assert!(
        lost_at - slowed <= Duration::from_secs(12),
        "kerf-0 stopped leading within the renew deadline (plus a retry period): {:?}",
        lost_at - slowed
    );
    assert!(stuck_seen, "kerf_lease_held_not_writing said so");
    assert!(readyz.contains("writes nothing"), "{readyz}");
    // kerf-0's renewals: none sent after it stopped leading.
    let last_kerf0 = {
        let server = server.lock().unwrap();
        let kerf0: Vec<_> = server
            .writes
            .iter()
            .filter(|(h, _)| h == "kerf-0")
            .collect();
        kerf0.last().unwrap().1
    };
    assert!(
        last_kerf0 <= lost_at,
        "no renewal landed after kerf-0 stopped leading"
    );
    let puts_when_lost = requests(&log0).iter().filter(|r| r.method == "PUT").count();
    assert_eq!(server.lock().unwrap().holder().as_deref(), Some("kerf-1"));
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert!(!*leader0.borrow(), "kerf-0 follows");
    assert_eq!(
        metrics0.lease_held_not_writing.get(),
        0,
        "the Lease kerf-0 last saw has expired"
    );
    assert_eq!(
        requests(&log0).iter().filter(|r| r.method == "PUT").count(),
        puts_when_lost,
        "kerf-0 renews nothing while it cannot lead"
    );
}
