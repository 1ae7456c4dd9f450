//! The real `kerf recommend` on the shipped examples at their fixed evaluation time.
//!
//! Declared once in each test binary that uses it (`tests/<edge>/main.rs`) as `mod kerf_cli`.
#![allow(dead_code)] // each test binary uses a different part

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;

/// The end of every example's data: recommendations are asked for at this time, never "now".
pub const AT: &str = "2026-01-01T12:00:00Z";

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `kerf recommend --manifests DIR --at AT -o json ARGS…` (from the repository root) with `env`
/// added.
pub fn kerf_recommend(manifests: &str, args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kerf"))
        .args([
            "recommend",
            "--manifests",
            manifests,
            "--at",
            AT,
            "-o",
            "json",
        ])
        .args(args)
        .envs(env.iter().copied())
        .current_dir(root())
        .output()
        .unwrap()
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The JSON answer of a successful run whose queries all succeeded.
pub fn recommend(manifests: &str, args: &[&str], env: &[(&str, &str)]) -> Value {
    let out = kerf_recommend(manifests, args, env);
    let err = stderr(&out);
    assert!(out.status.success(), "{args:?}: {err}");
    assert!(!err.contains("query failed"), "{args:?}: {err}");
    serde_json::from_slice(&out.stdout).unwrap()
}
