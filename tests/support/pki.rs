//! A throwaway PKI on disk (rcgen): a test CA, a serving certificate for `localhost` and
//! 127.0.0.1, a client certificate (mutual TLS), and a second CA that signed none of them.
//!
//! Declared once in each test binary that uses it (`tests/<edge>/main.rs`) as `mod pki`.
#![allow(dead_code)] // each test binary uses a different part

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair,
};

pub struct TestPki {
    dir: tempfile::TempDir,
    /// PEM of the CA that signed the server and client certificates.
    pub ca: PathBuf,
    /// PEM of a CA that signed nothing here: trusting it alone must fail.
    pub other_ca: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
}

fn ca(name: &str) -> CertifiedIssuer<'static, KeyPair> {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap()
}

fn leaf(
    issuer: &CertifiedIssuer<'static, KeyPair>,
    names: &[&str],
    usage: ExtendedKeyUsagePurpose,
    dir: &Path,
    stem: &str,
) -> (PathBuf, PathBuf) {
    let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
    let mut params = CertificateParams::new(names).unwrap();
    params.distinguished_name.push(DnType::CommonName, stem);
    params.extended_key_usages = vec![usage];
    let key = KeyPair::generate().unwrap();
    let cert = params.signed_by(&key, issuer).unwrap();
    let (c, k) = (
        dir.join(format!("{stem}.crt")),
        dir.join(format!("{stem}.key")),
    );
    std::fs::write(&c, cert.pem()).unwrap();
    std::fs::write(&k, key.serialize_pem()).unwrap();
    (c, k)
}

impl TestPki {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = ca("kerf test CA");
        let other = ca("a CA kerf must not trust");
        let ca_path = dir.path().join("ca.crt");
        let other_path = dir.path().join("other-ca.crt");
        std::fs::write(&ca_path, root.pem()).unwrap();
        std::fs::write(&other_path, other.pem()).unwrap();
        let (server_cert, server_key) = leaf(
            &root,
            &["localhost", "127.0.0.1"],
            ExtendedKeyUsagePurpose::ServerAuth,
            dir.path(),
            "server",
        );
        let (client_cert, client_key) = leaf(
            &root,
            &["kerf"],
            ExtendedKeyUsagePurpose::ClientAuth,
            dir.path(),
            "client",
        );
        Self {
            dir,
            ca: ca_path,
            other_ca: other_path,
            server_cert,
            server_key,
            client_cert,
            client_key,
        }
    }

    /// A directory for the test's own files (password and token files), removed with the PKI.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}
