//! Shared by the webhook integration tests: a throwaway PKI (rcgen), the in-process server on
//! loopback ports, a reqwest client (rustls, ring) that trusts the test CA, fixture loading and
//! patch application with json-patch.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use kerf::server::{BoundServer, ServeConfig};
use kerf::state::Store;
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use serde_json::Value;
use tokio::sync::oneshot;

pub fn install_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// A test CA that signs serving certificates for `localhost`.
pub struct Pki {
    ca: CertifiedIssuer<'static, KeyPair>,
}

/// One serving pair.
pub struct Leaf {
    pub cert_pem: String,
    pub key_pem: String,
    pub der: Vec<u8>,
}

impl Pki {
    pub fn new() -> Self {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "kerf test CA");
        let ca = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        Self { ca }
    }

    pub fn ca_pem(&self) -> String {
        self.ca.pem()
    }

    pub fn leaf(&self, common_name: &str) -> Leaf {
        self.leaf_valid_for(common_name, None)
    }

    /// A serving pair valid until `days` from today (UTC midnight), or rcgen's default (the year
    /// 4096) with `None`.
    pub fn leaf_valid_for(&self, common_name: &str, days: Option<i64>) -> Leaf {
        let mut params = CertificateParams::new(vec!["localhost".to_string()]).unwrap();
        if let Some(days) = days {
            let until = jiff::Timestamp::now()
                .to_zoned(jiff::tz::TimeZone::UTC)
                .date()
                .checked_add(jiff::Span::new().days(days))
                .unwrap();
            params.not_after = rcgen::date_time_ymd(
                i32::from(until.year()),
                until.month() as u8,
                until.day() as u8,
            );
        }
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, common_name);
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.ca).unwrap();
        Leaf {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            der: cert.der().to_vec(),
        }
    }
}

pub fn write_pair(dir: &Path, leaf: &Leaf) -> (PathBuf, PathBuf) {
    let cert = dir.join("tls.crt");
    let key = dir.join("tls.key");
    std::fs::write(&cert, &leaf.cert_pem).unwrap();
    std::fs::write(&key, &leaf.key_pem).unwrap();
    (cert, key)
}

/// A server running in this process.
pub struct Running {
    pub webhook: SocketAddr,
    pub health: SocketAddr,
    pub store: Arc<Store>,
    stop: Option<oneshot::Sender<()>>,
    pub handle: tokio::task::JoinHandle<Result<(), kerf::server::ServeError>>,
}

impl Running {
    /// Requests shutdown (like SIGTERM) without waiting.
    pub fn stop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

pub async fn start(
    store: Arc<Store>,
    cert: &Path,
    key: &Path,
    tweak: impl FnOnce(&mut ServeConfig),
) -> Running {
    let mut cfg = ServeConfig::new(
        "127.0.0.1:0".parse().unwrap(),
        "127.0.0.1:0".parse().unwrap(),
        cert.to_path_buf(),
        key.to_path_buf(),
    );
    tweak(&mut cfg);
    let bound = BoundServer::bind(cfg).await.expect("server binds");
    let (webhook, health) = (bound.webhook_addr(), bound.health_addr());
    let (tx, rx) = oneshot::channel();
    let s = store.clone();
    let handle = tokio::spawn(async move {
        bound
            .run(s, async {
                let _ = rx.await;
            })
            .await
    });
    Running {
        webhook,
        health,
        store,
        stop: Some(tx),
        handle,
    }
}

/// A rustls client configuration trusting only the test CA.
pub fn client_tls(ca_pem: &str, alpn: &[&[u8]], tls12_only: bool) -> rustls::ClientConfig {
    use rustls_pki_types::CertificateDer;
    use rustls_pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let versions: &[&rustls::SupportedProtocolVersion] = if tls12_only {
        &[&rustls::version::TLS12]
    } else {
        &[&rustls::version::TLS13, &rustls::version::TLS12]
    };
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(versions)
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    cfg
}

/// A reqwest client (HTTP/1.1 keep-alive unless `h2`) trusting the test CA, resolving
/// `localhost` to the server.
pub fn client(ca_pem: &str, addr: SocketAddr, h2: bool) -> reqwest::Client {
    let alpn: &[&[u8]] = if h2 { &[b"h2"] } else { &[b"http/1.1"] };
    let mut b = reqwest::Client::builder()
        .tls_backend_preconfigured(client_tls(ca_pem, alpn, false))
        .tls_info(true)
        .resolve("localhost", addr)
        .timeout(Duration::from_secs(20));
    b = if h2 {
        b.http2_prior_knowledge()
    } else {
        b.http1_only()
    };
    b.build().unwrap()
}

pub fn url(addr: SocketAddr, path: &str) -> String {
    format!("https://localhost:{}{path}", addr.port())
}

pub fn fixture(name: &str) -> Value {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/admission")
        .join(name);
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[path = "kai_oracle.rs"]
pub mod kai_oracle;

/// POSTs a review and returns the decoded AdmissionReview response (asserting HTTP 200). A
/// patched Pod is checked against KAI's own admission rule ([`kai_oracle`]): kerf must never
/// turn a pod KAI accepts into one it refuses.
pub async fn review(client: &reqwest::Client, addr: SocketAddr, body: &Value) -> Value {
    let resp = post_review(client, addr, body).await;
    let object = &body["request"]["object"];
    if object["kind"] == "Pod" && patch_of(&resp).is_some() {
        kai_oracle::assert_kai_accepts_patched(object, &apply(object, &resp));
    }
    resp
}

async fn post_review(client: &reqwest::Client, addr: SocketAddr, body: &Value) -> Value {
    let resp = client
        .post(url(addr, "/mutate"))
        .header("content-type", "application/json")
        .body(serde_json::to_vec(body).unwrap())
        .send()
        .await
        .expect("request succeeds");
    let status = resp.status();
    let text = resp.text().await.unwrap();
    assert_eq!(status, 200, "body: {text}");
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("response is JSON ({e}): {text}"))
}

/// The JSON Patch a response carries: `patch` must be a base64 string with `patchType: JSONPatch`.
pub fn patch_of(resp: &Value) -> Option<json_patch::Patch> {
    let r = &resp["response"];
    let p = r.get("patch")?;
    let s = p
        .as_str()
        .unwrap_or_else(|| panic!("patch must be a base64 string, got {p}"));
    assert_eq!(r["patchType"], "JSONPatch");
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(s)
        .expect("patch is base64");
    Some(serde_json::from_slice(&bytes).expect("patch is an RFC 6902 JSON array"))
}

/// Applies the response's patch to `object` (panics if it does not apply).
pub fn apply(object: &Value, resp: &Value) -> Value {
    let mut doc = object.clone();
    if let Some(p) = patch_of(resp) {
        json_patch::patch(&mut doc, &p).expect("patch applies to the original object");
    }
    doc
}

/// The same review with `object` replaced (and a new uid), as the API server sends on reinvocation.
pub fn with_object(review: &Value, object: Value, uid: &str) -> Value {
    let mut r = review.clone();
    r["request"]["object"] = object;
    r["request"]["uid"] = Value::String(uid.to_string());
    r
}

pub async fn get_text(addr: SocketAddr, path: &str) -> (u16, String) {
    let resp = reqwest::Client::new()
        .get(format!("http://{addr}{path}"))
        .send()
        .await
        .expect("health request");
    let status = resp.status().as_u16();
    (status, resp.text().await.unwrap())
}

/// The leaf certificate the server presents on a fresh connection.
pub async fn presented_cert(ca_pem: &str, addr: SocketAddr) -> Vec<u8> {
    let c = client(ca_pem, addr, false);
    let resp = c
        .get(url(addr, "/nothing"))
        .send()
        .await
        .expect("TLS request");
    resp.extensions()
        .get::<reqwest::tls::TlsInfo>()
        .expect("tls info")
        .peer_certificate()
        .expect("peer certificate")
        .to_vec()
}

/// One TLS connection (HTTP/1.1 by ALPN) to the webhook listener, trusting the test CA: unlike
/// a pooled client it never reconnects, so what it sees is what that one connection does.
pub async fn tls_connection(
    ca_pem: &str,
    addr: SocketAddr,
) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    let connector =
        tokio_rustls::TlsConnector::from(Arc::new(client_tls(ca_pem, &[b"http/1.1"], false)));
    let tcp = tokio::net::TcpStream::connect(addr)
        .await
        .expect("TCP connect");
    let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
    connector.connect(name, tcp).await.expect("TLS handshake")
}

/// The leaf certificate the server presented on `conn`.
pub fn connection_cert(conn: &tokio_rustls::client::TlsStream<tokio::net::TcpStream>) -> Vec<u8> {
    conn.get_ref()
        .1
        .peer_certificates()
        .expect("peer certificate")[0]
        .to_vec()
}

/// Sends `GET path` on `conn` (HTTP/1.1, keep-alive) and reads the whole response; returns its
/// status code, or why there was no complete response (e.g. the server closed the connection).
pub async fn get_on<S>(conn: &mut S, path: &str) -> Result<u16, String>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let request = format!("GET {path} HTTP/1.1\r\nhost: localhost\r\n\r\n");
    conn.write_all(request.as_bytes())
        .await
        .map_err(|e| format!("write: {e}"))?;
    let mut bytes = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        if let Some(end) = bytes.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&bytes[..end]).to_string();
            let length: usize = head
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse().ok())?
                })
                .ok_or_else(|| format!("no content-length: {head}"))?;
            if bytes.len() >= end + 4 + length {
                let status = head
                    .split_whitespace()
                    .nth(1)
                    .and_then(|s| s.parse().ok())
                    .ok_or_else(|| format!("no status: {head}"))?;
                return Ok(status);
            }
        }
        match conn.read(&mut buf).await {
            Ok(0) => return Err(format!("connection closed after {} bytes", bytes.len())),
            Ok(n) => bytes.extend_from_slice(&buf[..n]),
            Err(e) => return Err(format!("read: {e}")),
        }
    }
}

/// Takes a `kerf serve` child's stderr and reads it until the "kerf serving" line, passing every
/// line on to this process's stderr (also after); returns the bound (webhook, health) addresses
/// that line names. The child listens on port 0, so no port is picked before it binds. Kills
/// the child when the line does not come.
pub fn serving_addresses(child: &mut std::process::Child) -> (SocketAddr, SocketAddr) {
    use std::io::BufRead;
    let stderr = child.stderr.take().expect("the child's stderr is piped");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            eprintln!("{line}");
            if line.contains("kerf serving") {
                let addr = |key: &str| -> Option<SocketAddr> {
                    line.split_whitespace()
                        .find_map(|w| w.strip_prefix(key))?
                        .parse()
                        .ok()
                };
                let _ = tx.send(addr("webhook=").zip(addr("health=")));
            }
        }
    });
    let failed = match rx.recv_timeout(Duration::from_secs(30)) {
        Ok(Some((webhook, health))) if webhook.port() != 0 && health.port() != 0 => {
            return (webhook, health);
        }
        Ok(Some(addrs)) => format!("\"kerf serving\" names {addrs:?}, not the bound ports"),
        Ok(None) => "the \"kerf serving\" line names no webhook= and health= address".to_string(),
        Err(e) => format!("kerf serve did not log \"kerf serving\" ({e}); its stderr is above"),
    };
    let _ = child.kill();
    let _ = child.wait();
    panic!("{failed}");
}

/// A `kerf serve --standalone` child with `args` (`--manifests`, the metric source…) from the
/// repository root, listening on loopback ports it picks, its serving certificate from a test CA
/// (valid for `cert_days`, else for ever); killed when dropped. kerf's own namespace comes from
/// `env` only: the test's `POD_NAMESPACE` is not passed on, and the service-account namespace
/// file is a path that does not exist unless `env` names another.
pub struct Serve {
    pub child: std::process::Child,
    pub webhook: SocketAddr,
    pub health: SocketAddr,
    _dir: tempfile::TempDir,
    pub pki: Pki,
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts [`Serve`] and waits until `/readyz` answers 200.
pub async fn serve_standalone(
    args: &[&str],
    env: &[(&str, &str)],
    cert_days: Option<i64>,
) -> Serve {
    use std::process::{Command, Stdio};
    install_provider();
    let dir = tempfile::tempdir().unwrap();
    let no_namespace_file = dir.path().join("no-namespace-file");
    let pki = Pki::new();
    let (cert, key) = write_pair(dir.path(), &pki.leaf_valid_for("kerf", cert_days));
    let mut child = Command::new(env!("CARGO_BIN_EXE_kerf"))
        .args(["serve", "--standalone"])
        .args(args)
        // Port 0: kerf binds and logs the ports it got (no port picked here and freed first).
        .args(["--listen", "127.0.0.1:0", "--health-listen", "127.0.0.1:0"])
        .arg("--tls-cert")
        .arg(&cert)
        .arg("--tls-key")
        .arg(&key)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env_remove("POD_NAMESPACE")
        .env("KERF_NAMESPACE_FILE", &no_namespace_file)
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (webhook, health) = serving_addresses(&mut child);
    let s = Serve {
        child,
        webhook,
        health,
        _dir: dir,
        pki,
    };
    let start = std::time::Instant::now();
    loop {
        if let Ok(r) = reqwest::get(format!("http://{}/readyz", s.health)).await
            && r.status() == 200
        {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "kerf serve never became ready"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    s
}
