//! `kerf bench scale` as documented: it runs, and its cycles give the answers a direct
//! evaluation gives (the bench itself fails otherwise; this checks what it reports too).

use std::process::Command;

use serde_json::Value;

fn bench_scale(args: &[&str]) -> (bool, Value, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_kerf"))
        .args(["bench", "scale"])
        .args(args)
        .output()
        .expect("kerf runs");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let report = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (out.status.success(), report, stderr)
}

#[test]
fn bench_scale_matches_a_direct_evaluation_in_its_steady_cycle() {
    let (ok, v, stderr) =
        bench_scale(&["--workloads", "300", "--pods", "400", "--namespaces", "3"]);
    assert!(ok, "kerf bench scale failed: {stderr}");
    assert_eq!(v["workloadsEvaluated"], 300, "{v}");
    assert_eq!(v["policies"], 3, "{v}");
    assert_eq!(v["queries"], 6, "one query per policy and signal: {v}");
    let with = v["workloadsWithRecommendation"].as_u64().unwrap();
    assert!(
        with > 0 && with < 300,
        "some workloads are hot, not all: {v}"
    );
    assert_eq!(
        v["recommendationsDigest"], v["directEvaluationDigest"],
        "the loop and the direct evaluation agree: {v}"
    );
    // The second cycle finds its own writes in place: only the policies' statuses are written.
    assert_eq!(v["writesPlanned"], 3, "{v}");
}

#[test]
fn bench_scale_checks_a_single_first_cycle_too() {
    let (ok, v, stderr) = bench_scale(&[
        "--workloads",
        "120",
        "--pods",
        "150",
        "--namespaces",
        "2",
        "--cycles",
        "1",
    ]);
    assert!(ok, "kerf bench scale failed: {stderr}");
    assert_eq!(
        v["recommendationsDigest"], v["directEvaluationDigest"],
        "{v}"
    );
    // A first cycle writes every workload it recommends for, plus the policies' statuses.
    assert!(v["writesPlanned"].as_u64().unwrap() > 2, "{v}");
}
