//! Serving certificate with reload: the cert/key files are polled (content hash) and a new valid
//! pair is swapped in for the next handshake. Polling content rather than watching paths also
//! catches Kubernetes' Secret-volume `..data` symlink swap, which inotify on the file paths misses.
//! A bad new pair keeps the old one serving.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use rustls::ServerConfig;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use crate::telemetry::KindLabel;

/// Builds a certified key from PEM text; the error says what is wrong with which file.
pub fn certified_key(cert_pem: &[u8], key_pem: &[u8]) -> Result<CertifiedKey, String> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("certificate file: {e}"))?;
    if certs.is_empty() {
        return Err("certificate file: no CERTIFICATE block".into());
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| format!("key file: {e}"))?;
    let signer = rustls::crypto::ring::sign::any_supported_type(&key)
        .map_err(|e| format!("key file: {e}"))?;
    let ck = CertifiedKey::new(certs, signer);
    ck.keys_match()
        .map_err(|e| format!("certificate and key do not belong together: {e}"))?;
    Ok(ck)
}

fn hash_pair(cert: &[u8], key: &[u8]) -> u64 {
    let mut h = DefaultHasher::new();
    cert.hash(&mut h);
    key.hash(&mut h);
    h.finish()
}

/// What one poll found.
#[derive(Debug, PartialEq, Eq)]
pub enum Reload {
    Unchanged,
    Reloaded,
    /// The files changed but the new pair is unusable; the old pair keeps serving.
    Rejected(String),
}

/// The current serving certificate, reloaded from files.
#[derive(Debug)]
pub struct CertReloader {
    cert_path: PathBuf,
    key_path: PathBuf,
    current: ArcSwap<CertifiedKey>,
    /// Hash of the last file contents seen (valid or not), so a bad pair is reported once.
    seen: Mutex<u64>,
}

impl CertReloader {
    /// Loads the initial pair; fails (naming the file) when it is unusable.
    pub fn load(cert_path: &Path, key_path: &Path) -> Result<Arc<Self>, TlsError> {
        let cert = std::fs::read(cert_path).map_err(|error| TlsError::Certificate {
            path: cert_path.display().to_string(),
            error,
        })?;
        let key = std::fs::read(key_path).map_err(|error| TlsError::Key {
            path: key_path.display().to_string(),
            error,
        })?;
        let ck = certified_key(&cert, &key).map_err(|e| TlsError::Pair {
            cert: cert_path.display().to_string(),
            key: key_path.display().to_string(),
            problem: e.to_string(),
        })?;
        Ok(Arc::new(Self {
            cert_path: cert_path.to_path_buf(),
            key_path: key_path.to_path_buf(),
            current: ArcSwap::from_pointee(ck),
            seen: Mutex::new(hash_pair(&cert, &key)),
        }))
    }

    /// Re-reads both files; swaps in the new pair when the contents changed and are valid.
    pub async fn poll(&self) -> Reload {
        let (cert, key) = match (
            tokio::fs::read(&self.cert_path).await,
            tokio::fs::read(&self.key_path).await,
        ) {
            (Ok(c), Ok(k)) => (c, k),
            // Mid-swap or temporarily missing: try again next poll; the old pair keeps serving.
            (Err(e), _) => {
                return self.reject_once(format!("cannot read {}: {e}", self.cert_path.display()));
            }
            (_, Err(e)) => {
                return self.reject_once(format!("cannot read {}: {e}", self.key_path.display()));
            }
        };
        let h = hash_pair(&cert, &key);
        {
            let seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
            if *seen == h {
                return Reload::Unchanged;
            }
        }
        let outcome = match certified_key(&cert, &key) {
            Ok(ck) => {
                self.current.store(Arc::new(ck));
                Reload::Reloaded
            }
            Err(e) => Reload::Rejected(e),
        };
        *self.seen.lock().unwrap_or_else(|p| p.into_inner()) = h;
        outcome
    }

    /// Reports a read failure once per distinct message rather than every poll.
    fn reject_once(&self, why: String) -> Reload {
        let marker = hash_pair(why.as_bytes(), b"read-error");
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        if *seen == marker {
            return Reload::Unchanged;
        }
        *seen = marker;
        Reload::Rejected(why)
    }

    /// Polls every `interval` until the task is dropped, logging and counting outcomes.
    pub async fn watch(
        self: Arc<Self>,
        interval: std::time::Duration,
        metrics: Arc<crate::telemetry::Metrics>,
    ) {
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        self.report_expiry(&metrics);
        loop {
            tick.tick().await;
            match self.poll().await {
                Reload::Unchanged => {}
                Reload::Reloaded => {
                    tracing::info!(cert = %self.cert_path.display(), "TLS certificate reloaded");
                    self.report_expiry(&metrics);
                    metrics
                        .tls_reloads
                        .get_or_create(&KindLabel { kind: "ok" })
                        .inc();
                }
                Reload::Rejected(why) => {
                    tracing::warn!(cert = %self.cert_path.display(), "TLS certificate not reloaded, keeping the previous one: {why}");
                    metrics
                        .tls_reloads
                        .get_or_create(&KindLabel { kind: "error" })
                        .inc();
                }
            }
        }
    }

    /// `kerf_tls_certificate_expiration_timestamp_seconds` from the pair serving now: the alert on
    /// an expiring certificate must follow a rotation, so it is read again after every reload.
    fn report_expiry(&self, metrics: &crate::telemetry::Metrics) {
        let current = self.current.load();
        match current.cert.first().and_then(|leaf| not_after(leaf)) {
            Some(at) => {
                metrics.tls_certificate_expiration.set(at);
            }
            None => {
                tracing::warn!(cert = %self.cert_path.display(), "cannot read the serving certificate's notAfter")
            }
        }
    }

    /// rustls server configuration: ring provider, TLS 1.2 and 1.3, ALPN h2 and http/1.1,
    /// certificate resolved per handshake from this reloader.
    pub fn server_config(self: &Arc<Self>) -> Result<Arc<ServerConfig>, TlsError> {
        let mut cfg =
            ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
                .map_err(TlsError::Config)?
                .with_no_client_auth()
                .with_cert_resolver(self.clone());
        cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Arc::new(cfg))
    }
}

/// Why the webhook's TLS cannot be set up: the file and what is wrong with it.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read TLS certificate {path}: {error}")]
    Certificate { path: String, error: std::io::Error },
    #[error("cannot read TLS key {path}: {error}")]
    Key { path: String, error: std::io::Error },
    #[error("invalid TLS pair ({cert}, {key}): {problem}")]
    Pair {
        cert: String,
        key: String,
        problem: String,
    },
    #[error("TLS configuration: {0}")]
    Config(rustls::Error),
}

impl ResolvesServerCert for CertReloader {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.load_full())
    }
}

/// The end of a certificate's validity (`notAfter`) in Unix seconds, read from its DER (RFC 5280
/// section 4.1: Certificate, tbsCertificate, validity): the one field kerf needs, without an
/// X.509 library in the binary.
pub fn not_after(der: &[u8]) -> Option<i64> {
    let (_, certificate, _) = der_element(der)?;
    let (_, mut tbs, _) = der_element(certificate)?;
    if tbs.first() == Some(&0xa0) {
        tbs = der_element(tbs)?.2; // the explicit version
    }
    for _ in ["serialNumber", "signature", "issuer"] {
        tbs = der_element(tbs)?.2;
    }
    let (_, validity, _) = der_element(tbs)?;
    let (_, _, after_not_before) = der_element(validity)?;
    let (tag, time, _) = der_element(after_not_before)?;
    der_time(tag, time)
}

/// One DER element: (tag, contents, the bytes after it).
fn der_element(bytes: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = bytes.split_first()?;
    let (&first, mut rest) = rest.split_first()?;
    let len = if first < 0x80 {
        usize::from(first)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |len, b| (len << 8) | usize::from(*b));
        rest = &rest[n..];
        len
    };
    (rest.len() >= len).then(|| (tag, &rest[..len], &rest[len..]))
}

/// UTCTime (`YYMMDDHHMMSSZ`, years 1950–2049) or GeneralizedTime (`YYYYMMDDHHMMSSZ`), the two
/// forms RFC 5280 allows, in Unix seconds.
fn der_time(tag: u8, contents: &[u8]) -> Option<i64> {
    let text = std::str::from_utf8(contents).ok()?.strip_suffix('Z')?;
    let full = match (tag, text.len()) {
        (0x17, 12) => {
            let century = if text[..2].parse::<u8>().ok()? >= 50 {
                "19"
            } else {
                "20"
            };
            format!("{century}{text}")
        }
        (0x18, 14) => text.to_string(),
        _ => return None,
    };
    let field = |range: std::ops::Range<usize>| full.get(range)?.parse::<i16>().ok();
    let at = jiff::civil::DateTime::new(
        field(0..4)?,
        i8::try_from(field(4..6)?).ok()?,
        i8::try_from(field(6..8)?).ok()?,
        i8::try_from(field(8..10)?).ok()?,
        i8::try_from(field(10..12)?).ok()?,
        i8::try_from(field(12..14)?).ok()?,
        0,
    )
    .ok()?;
    Some(
        at.to_zoned(jiff::tz::TimeZone::UTC)
            .ok()?
            .timestamp()
            .as_second(),
    )
}
