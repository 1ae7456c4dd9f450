//! Admission benchmark servers (not a test; driven by `scripts/bench-admission.sh`).
//!
//! `cargo bench --bench admission -- certs DIR` writes a throwaway CA-less self-signed pair.
//! `cargo bench --bench admission -- floor ADDR CERT KEY` serves the floor: axum + rustls
//! (axum-server), parsing the body into a typed `AdmissionReview<Pod>` and answering a fixed
//! one-operation patch — the least any Rust webhook must do.
//! `cargo bench --bench admission -- null ADDR CERT KEY` serves the null server: kerf's own TLS
//! and HTTP stack (`kerf::server::serve_app`) with a handler that reads the body and answers a
//! fixed AdmissionReview without parsing anything — the floor of the stack itself.
//! `cargo bench --bench admission -- kerf ADDR CERT KEY FIXTURE` serves kerf's real server with a
//! store holding a GPU and CPU/memory recommendation for the fixture pod's workload, so every
//! request goes through owner resolution, the patch builder and the diff.

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
        ["kerf", addr, cert, key, fixture] => {
            rt.block_on(kerf_server(addr.parse()?, cert.into(), key.into(), fixture))
        }
        _ => {
            eprintln!(
                "usage: admission certs DIR | floor ADDR CERT KEY | null ADDR CERT KEY | kerf ADDR CERT KEY FIXTURE | profile FIXTURE"
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

async fn null_mutate(body: Bytes) -> impl IntoResponse {
    // The body is read whole (as kerf's handler gets it), then ignored.
    std::hint::black_box(body.len());
    ([(header::CONTENT_TYPE, "application/json")], NULL_RESPONSE)
}

async fn null(addr: SocketAddr, cert: PathBuf, key: PathBuf) -> anyhow::Result<()> {
    let app = Router::new().route("/mutate", post(null_mutate)).layer(
        axum::extract::DefaultBodyLimit::max(kerf::server::MAX_BODY_BYTES),
    );
    eprintln!("null serving on {addr}");
    kerf::server::serve_app(addr, &cert, &key, app).await
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
    time("clone", &|| {
        std::hint::black_box(obj.clone());
    });
    time("eq", &|| {
        std::hint::black_box(obj == std::hint::black_box(&obj).clone());
    });
    time("diff", &|| {
        std::hint::black_box(kerf::core::admission::diff(&obj, &obj));
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
    kerf::server::serve(cfg, store, kerf::server::shutdown_signal()).await
}
