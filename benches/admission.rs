//! Admission benchmark servers (not a test; driven by `scripts/bench-admission.sh`).
//!
//! `cargo bench --bench admission -- certs DIR` writes a throwaway CA-less self-signed pair.
//! `cargo bench --bench admission -- floor ADDR CERT KEY` serves the floor: axum + rustls
//! (axum-server), parsing the body into a typed `AdmissionReview<Pod>` and answering a fixed
//! one-operation patch — the least any Rust webhook must do.
//! `cargo bench --bench admission -- null ADDR CERT KEY` serves the null server: kerf's own TLS
//! and HTTP stack (`kerf::server::serve_app`) with a handler that reads the body and answers a
//! fixed AdmissionReview without parsing anything — the floor of the stack itself. With
//! `NULL_ANSWER_FILE=FILE` it answers that file's bytes instead (kerf's own answer, say).
//! `cargo bench --bench admission -- kerf ADDR CERT KEY FIXTURE` serves kerf's real server with a
//! store holding a GPU and CPU/memory recommendation for the fixture pod's workload, so every
//! request goes through owner resolution, the patch builder and the diff.
//! `cargo bench --bench admission -- handler FIXTURE N` runs kerf's handler alone N times (for
//! `perf record`) and prints its time per review.
//! `cargo bench --bench admission -- openloop URL RATE SECONDS CONNECTIONS BODY` is the load
//! generator for latency at a fixed offered rate (see [`open_loop`]).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use axum::Router;
use axum::body::Bytes;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::post;
use base64::Engine as _;
use k8s_openapi::api::core::v1::Pod;
use kerf::api::WorkloadKind;
use kerf::core::model::{
    GpuRecommendation, PolicyId, ResourceRequests, WorkloadKey, WorkloadState,
};
use kube::core::admission::{AdmissionRequest, AdmissionReview};

/// The allocator the kerf binary ships with (src/main.rs), so the servers here allocate as the
/// deployed webhook does; all three servers share it.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> anyhow::Result<()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    // `cargo bench` appends `--bench`; ignore flags.
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["certs", dir] => certs(Path::new(dir)),
        ["floor", addr, cert, key] => rt.block_on(floor(addr.parse()?, cert.into(), key.into())),
        ["null", addr, cert, key] => rt.block_on(null(addr.parse()?, cert.into(), key.into())),
        ["profile", fixture] => profile(fixture),
        ["handler", fixture, n] => handler(fixture, n.parse()?),
        ["openloop", url, rate, secs, conns, body] => open_loop(
            url.parse()?,
            rate.parse()?,
            secs.parse()?,
            conns.parse()?,
            Path::new(body),
        ),
        ["kerf", addr, cert, key, fixture] => {
            rt.block_on(kerf_server(addr.parse()?, cert.into(), key.into(), fixture))
        }
        _ => {
            eprintln!(
                "usage: admission certs DIR | floor ADDR CERT KEY | null ADDR CERT KEY | kerf ADDR CERT KEY FIXTURE | profile FIXTURE | handler FIXTURE N | openloop URL RATE SECONDS CONNECTIONS BODY"
            );
            std::process::exit(2)
        }
    }
}

fn certs(dir: &Path) -> anyhow::Result<()> {
    let key = rcgen::KeyPair::generate()?;
    let cert = rcgen::CertificateParams::new(vec!["localhost".to_string()])?.self_signed(&key)?;
    std::fs::write(dir.join("tls.crt"), cert.pem())?;
    std::fs::write(dir.join("tls.key"), key.serialize_pem())?;
    Ok(())
}

async fn floor_mutate(body: Bytes) -> impl IntoResponse {
    let review: AdmissionReview<Pod> = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => return (StatusCode::BAD_REQUEST, e.to_string()).into_response(),
    };
    let req: AdmissionRequest<Pod> = match review.try_into() {
        Ok(r) => r,
        Err(e) => return (StatusCode::BAD_REQUEST, e.to_string()).into_response(),
    };
    if req.object.is_none() {
        return (StatusCode::BAD_REQUEST, "no object").into_response();
    }
    let patch = br#"[{"op":"add","path":"/metadata/annotations/floor","value":"1"}]"#;
    let out = serde_json::json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {
            "uid": req.uid,
            "allowed": true,
            "patchType": "JSONPatch",
            "patch": base64::engine::general_purpose::STANDARD.encode(patch),
        }
    });
    (
        [(header::CONTENT_TYPE, "application/json")],
        serde_json::to_vec(&out).unwrap_or_default(),
    )
        .into_response()
}

async fn floor(addr: SocketAddr, cert: PathBuf, key: PathBuf) -> anyhow::Result<()> {
    let tls = axum_server::tls_rustls::RustlsConfig::from_pem_file(cert, key).await?;
    let app = Router::new().route("/mutate", post(floor_mutate));
    eprintln!("floor serving on {addr}");
    axum_server::bind_rustls(addr, tls)
        .serve(app.into_make_service())
        .await?;
    Ok(())
}

/// The null server's fixed answer: an AdmissionReview response with a one-operation patch
/// (`[{"op":"add","path":"/metadata/annotations/null","value":"1"}]`).
const NULL_RESPONSE: &[u8] = br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"00000000-0000-0000-0000-000000000000","allowed":true,"patchType":"JSONPatch","patch":"W3sib3AiOiJhZGQiLCJwYXRoIjoiL21ldGFkYXRhL2Fubm90YXRpb25zL251bGwiLCJ2YWx1ZSI6IjEifV0="}}"#;

/// The null server's answer: [`NULL_RESPONSE`], or the bytes of the file `NULL_ANSWER_FILE`
/// names (to see what the size of kerf's own answer costs the stack).
static NULL_ANSWER: std::sync::LazyLock<Bytes> =
    std::sync::LazyLock::new(|| match std::env::var_os("NULL_ANSWER_FILE") {
        Some(file) => Bytes::from(std::fs::read(file).expect("NULL_ANSWER_FILE is readable")),
        None => Bytes::from_static(NULL_RESPONSE),
    });

/// The null server's answer to a body read whole (as kerf's handler gets it), then ignored.
fn null_answer(body: &[u8]) -> impl IntoResponse + use<> {
    std::hint::black_box(body.len());
    (
        [(header::CONTENT_TYPE, "application/json")],
        NULL_ANSWER.clone(),
    )
}

async fn null_mutate(body: Bytes) -> impl IntoResponse {
    null_answer(&body)
}

async fn null(addr: SocketAddr, cert: PathBuf, key: PathBuf) -> anyhow::Result<()> {
    serve_on_kerfs_stack("null", post(null_mutate), addr, cert, key).await
}

/// `mutate` as `POST /mutate` on kerf's own TLS/HTTP stack, with the webhook's body limit.
async fn serve_on_kerfs_stack(
    name: &str,
    mutate: axum::routing::MethodRouter,
    addr: SocketAddr,
    cert: PathBuf,
    key: PathBuf,
) -> anyhow::Result<()> {
    let app = Router::new()
        .route("/mutate", mutate)
        .layer(axum::extract::DefaultBodyLimit::max(
            kerf::server::MAX_BODY_BYTES,
        ));
    eprintln!("{name} serving on {addr}");
    Ok(kerf::server::serve_app(addr, &cert, &key, app).await?)
}

/// kerf's handler alone, `n` reviews in a loop (to time it or to run it under `perf record`).
fn handler(fixture: &str, n: u32) -> anyhow::Result<()> {
    let review: serde_json::Value = serde_json::from_slice(&std::fs::read(fixture)?)?;
    let body = serde_json::to_vec(&review)?;
    let store = bench_store(&review);
    let t = std::time::Instant::now();
    for _ in 0..n {
        let r = kerf::server::handle_review(std::hint::black_box(&body), &store);
        assert_eq!(r.status, 200);
    }
    let us = t.elapsed().as_secs_f64() * 1e6 / f64::from(n);
    println!("kerf handle_review {us:.1} us/review");
    Ok(())
}

/// CPU per review without the network: kerf's handler vs the floor's typed parse.
fn profile(fixture: &str) -> anyhow::Result<()> {
    let review: serde_json::Value = serde_json::from_slice(&std::fs::read(fixture)?)?;
    let body = serde_json::to_vec(&review)?;
    let store = bench_store(&review);
    let n = 5000;
    let t = std::time::Instant::now();
    for _ in 0..n {
        let r = kerf::server::handle_review(&body, &store);
        assert_eq!(r.status, 200);
    }
    let kerf_us = t.elapsed().as_secs_f64() * 1e6 / f64::from(n);
    let t = std::time::Instant::now();
    for _ in 0..n {
        let r: AdmissionReview<Pod> = serde_json::from_slice(&body)?;
        std::hint::black_box(r);
    }
    let floor_us = t.elapsed().as_secs_f64() * 1e6 / f64::from(n);
    println!(
        "kerf handle_review {kerf_us:.1} us/review; floor typed parse {floor_us:.1} us/review"
    );
    let obj = review["request"]["object"].clone();
    let time = |name: &str, f: &dyn Fn()| {
        let t = std::time::Instant::now();
        for _ in 0..n {
            f();
        }
        println!(
            "  {name}: {:.1} us",
            t.elapsed().as_secs_f64() * 1e6 / f64::from(n)
        );
    };
    time("parse Value", &|| {
        std::hint::black_box(serde_json::from_slice::<serde_json::Value>(&body).unwrap());
    });
    time("Pod from &Value", &|| {
        std::hint::black_box(<Pod as serde::Deserialize>::deserialize(&obj).unwrap());
    });
    // The patch builder's own costs: a copy of the pod, and the diff of two equal pods (the
    // diff passes over every field), as the builder walks it and as json-patch's own walk does.
    time("clone Value", &|| {
        std::hint::black_box(obj.clone());
    });
    let copy = obj.clone();
    time("patch_between", &|| {
        std::hint::black_box(kerf::core::admission::patch_between(&obj, &copy));
    });
    time("json_patch::diff", &|| {
        std::hint::black_box(json_patch::diff(&obj, &copy));
    });
    Ok(())
}

fn bench_store(review: &serde_json::Value) -> std::sync::Arc<kerf::state::Store> {
    let pod = &review["request"]["object"];
    let ns = pod["metadata"]["namespace"].as_str().unwrap_or("default");
    let store = kerf::state::Store::new();
    let policy = PolicyId::parse("GpuReactivePolicy/ml/bench");
    let mut state = WorkloadState {
        gpu: Some(GpuRecommendation {
            containers: [("server".to_string(), 0.6)].into(),
            driving_metric: None,
            policy: policy.clone(),
            updated_at: None,
            by_policy: Default::default(),
        }),
        policy,
        ..Default::default()
    };
    state.template_gpu.insert("server".into(), 1.0);
    state.resources.insert(
        "metrics-exporter".into(),
        ResourceRequests {
            cpu_millis: Some(30),
            memory_bytes: Some(48 << 20),
        },
    );
    store.put(
        WorkloadKey::new(ns, WorkloadKind::Deployment, "llm-serve"),
        state,
    );
    store.set_ready(true);
    store
}

async fn kerf_server(
    addr: SocketAddr,
    cert: PathBuf,
    key: PathBuf,
    fixture: &str,
) -> anyhow::Result<()> {
    let review: serde_json::Value = serde_json::from_slice(&std::fs::read(fixture)?)?;
    let store = bench_store(&review);
    let cfg = kerf::server::ServeConfig::new(addr, "127.0.0.1:0".parse()?, cert, key);
    eprintln!("kerf serving on {addr}");
    Ok(kerf::server::serve(cfg, store, kerf::server::shutdown_signal()).await?)
}

/// Open-loop load (as wrk2 does it): requests are due at a fixed rate whatever the server does,
/// and each one's latency runs from the time it was due, not from when it was sent, so a server
/// that falls behind is charged for the queue it builds (no coordinated omission). A closed
/// loop like wrk's only sends when an answer came back: at saturation its p99 is just
/// connections / throughput, a restatement of throughput, not the latency at a given load.
///
/// One client thread (like `wrk -t1`) holds `conns` keep-alive HTTP/1.1 connections over TLS
/// (hyper's client on rustls, the stack the servers run). A pacing thread releases requests at
/// `rate` per second into one queue; a free connection takes the oldest. The first second is
/// warm-up, not counted. Prints one line of `key=value` pairs (latencies in milliseconds);
/// with `OPENLOOP_DUMP=FILE`, also writes every counted request's due time and latency to FILE.
fn open_loop(
    url: http::Uri,
    rate: f64,
    secs: f64,
    conns: usize,
    body: &Path,
) -> anyhow::Result<()> {
    use std::time::{Duration, Instant};
    anyhow::ensure!(
        rate > 0.0 && secs > 0.0 && conns > 0,
        "rate, seconds and connections must be positive"
    );
    let body = Bytes::from(std::fs::read(body)?);
    let host = url.host().unwrap_or("localhost").to_string();
    let port = url.port_u16().unwrap_or(443);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let warm_up = Duration::from_secs(1);
    let total = ((secs + warm_up.as_secs_f64()) * rate) as u64;
    let (due_tx, due_rx) = tokio::sync::mpsc::unbounded_channel::<Instant>();
    let due_rx = std::sync::Arc::new(tokio::sync::Mutex::new(due_rx));
    let tls = std::sync::Arc::new(client_tls());
    let (start, results, mut late) = rt.block_on(async {
        let mut workers = Vec::new();
        for _ in 0..conns {
            let conn = Conn::open(&tls, &host, port).await?;
            let (due_rx, url, body) = (due_rx.clone(), url.clone(), body.clone());
            let (tls, host) = (tls.clone(), host.clone());
            workers.push(tokio::spawn(async move {
                let mut conn = Some(conn);
                let (mut done, mut errors) = (Vec::new(), 0u64);
                loop {
                    let Some(due) = due_rx.lock().await.recv().await else {
                        break;
                    };
                    let c = match conn.take() {
                        Some(c) => c,
                        None => match Conn::open(&tls, &host, port).await {
                            Ok(c) => c,
                            Err(_) => {
                                errors += 1;
                                continue;
                            }
                        },
                    };
                    match c.post(&url, &host, body.clone()).await {
                        Ok(c) => {
                            done.push((due, Instant::now()));
                            conn = Some(c);
                        }
                        Err(_) => errors += 1,
                    }
                }
                (done, errors)
            }));
        }
        // All connections are up: the schedule starts now, paced by its own thread because
        // tokio's timer only has millisecond resolution.
        let start = Instant::now();
        let step = Duration::from_secs_f64(1.0 / rate);
        // The pacer also records how late it released each counted request: the generator's
        // own share of the latencies (a descheduled pacer), printed apart.
        let pacer = std::thread::spawn(move || {
            let mut late = Vec::new();
            for k in 0..total {
                let due = start + step.mul_f64(k as f64);
                if let Some(wait) = due.checked_duration_since(Instant::now()) {
                    std::thread::sleep(wait);
                }
                if due >= start + warm_up {
                    late.push(Instant::now() - due);
                }
                if due_tx.send(due).is_err() {
                    break;
                }
            }
            late
        });
        let mut results = Vec::new();
        for w in workers {
            results.push(w.await?);
        }
        let late = pacer
            .join()
            .map_err(|_| anyhow::anyhow!("the pacing thread panicked"))?;
        anyhow::Ok((start, results, late))
    })?;
    let counted_from = start + warm_up;
    let mut latencies: Vec<Duration> = Vec::new();
    // `due offset (s)  latency (ms)` per counted request, when OPENLOOP_DUMP names a file: shows
    // when the slow requests were due (one stall, a queue draining, or spread out).
    let mut dump = std::env::var_os("OPENLOOP_DUMP")
        .filter(|path| !path.is_empty())
        .map(|path| (path, Vec::new()));
    let (mut errors, mut last) = (0, start);
    for (done, e) in results {
        errors += e;
        for (due, at) in done {
            last = last.max(at);
            if due >= counted_from {
                latencies.push(at - due);
                if let Some((_, rows)) = &mut dump {
                    rows.push((due - start, at - due));
                }
            }
        }
    }
    if let Some((path, mut rows)) = dump {
        rows.sort_unstable();
        let text: String = rows
            .iter()
            .map(|(due, latency)| {
                format!(
                    "{:.6} {:.3}\n",
                    due.as_secs_f64(),
                    latency.as_secs_f64() * 1e3
                )
            })
            .collect();
        std::fs::write(path, text)?;
    }
    anyhow::ensure!(
        !latencies.is_empty(),
        "no request answered ({errors} errors)"
    );
    latencies.sort_unstable();
    late.sort_unstable();
    let answered = latencies.len() as f64 / (last - counted_from).as_secs_f64();
    println!(
        "rate={rate:.0} answered_per_s={answered:.0} ok={} errors={errors} p50={:.3} p90={:.3} p99={:.3} p999={:.3} max={:.3} pacer_late_p99={:.3} pacer_late_max={:.3}",
        latencies.len(),
        quantile_ms(&latencies, 0.50),
        quantile_ms(&latencies, 0.90),
        quantile_ms(&latencies, 0.99),
        quantile_ms(&latencies, 0.999),
        quantile_ms(&latencies, 1.0),
        quantile_ms(&late, 0.99),
        quantile_ms(&late, 1.0),
    );
    Ok(())
}

/// The `q` quantile (nearest rank) of sorted durations, in milliseconds; 0 when empty.
fn quantile_ms(sorted: &[std::time::Duration], q: f64) -> f64 {
    let rank = (sorted.len() as f64 * q).ceil() as usize;
    sorted
        .get(rank.clamp(1, sorted.len().max(1)) - 1)
        .map_or(0.0, |d| d.as_secs_f64() * 1e3)
}

/// One keep-alive HTTP/1.1 connection over TLS.
struct Conn(hyper::client::conn::http1::SendRequest<http_body_util::Full<Bytes>>);

impl Conn {
    async fn open(
        tls: &std::sync::Arc<rustls::ClientConfig>,
        host: &str,
        port: u16,
    ) -> anyhow::Result<Self> {
        let tcp = tokio::net::TcpStream::connect((host, port)).await?;
        tcp.set_nodelay(true)?;
        let name = rustls_pki_types::ServerName::try_from(host.to_string())?;
        let stream = tokio_rustls::TlsConnector::from(tls.clone())
            .connect(name, tcp)
            .await?;
        let (send, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
        tokio::spawn(conn);
        Ok(Self(send))
    }

    /// Sends the review and reads the whole answer; any status but 200 is an error.
    async fn post(mut self, url: &http::Uri, host: &str, body: Bytes) -> anyhow::Result<Self> {
        use http_body_util::BodyExt as _;
        self.0.ready().await?;
        let req = http::Request::post(url.path())
            .header(header::HOST, host)
            .header(header::CONTENT_TYPE, "application/json")
            .body(http_body_util::Full::new(body))?;
        let resp = self.0.send_request(req).await?;
        let status = resp.status();
        let answer = resp.into_body().collect().await?.to_bytes();
        anyhow::ensure!(
            status == StatusCode::OK && !answer.is_empty(),
            "status {status}"
        );
        Ok(self)
    }
}

/// TLS for the load generator: it measures the servers, it does not authenticate them, so any
/// certificate is taken (handshake signatures are still checked).
fn client_tls() -> rustls::ClientConfig {
    use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
    use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
    use rustls::{DigitallySignedStruct, SignatureScheme};

    #[derive(Debug)]
    struct AnyCertificate(rustls::crypto::WebPkiSupportedAlgorithms);
    impl ServerCertVerifier for AnyCertificate {
        fn verify_server_cert(
            &self,
            _: &CertificateDer<'_>,
            _: &[CertificateDer<'_>],
            _: &ServerName<'_>,
            _: &[u8],
            _: UnixTime,
        ) -> Result<ServerCertVerified, rustls::Error> {
            Ok(ServerCertVerified::assertion())
        }
        fn verify_tls12_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0)
        }
        fn verify_tls13_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0)
        }
        fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
            self.0.supported_schemes()
        }
    }
    let algorithms = rustls::crypto::ring::default_provider().signature_verification_algorithms;
    let mut config = rustls::ClientConfig::builder()
        .dangerous()
        .with_custom_certificate_verifier(std::sync::Arc::new(AnyCertificate(algorithms)))
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    config
}
