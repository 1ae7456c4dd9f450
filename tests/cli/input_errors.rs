//! Bad input as a user meets it: unknown fields of kerf's kinds are errors with their path and
//! the nearest declared name (as `kubectl apply`'s strict field validation reports them), every
//! error of every file comes out in one run, each once; a bad URL or a format given to `--output`
//! says what is wrong and the fix.

use std::path::Path;
use std::process::Command;

use crate::kerf_cli::{AT, root, stderr};

/// The shipped example copied to `dir`, with `edit` applied to its policies file.
fn example_with(dir: &Path, edit: impl Fn(String) -> String) {
    for f in ["policies.yaml", "workloads.yaml", "pods.yaml"] {
        let text = std::fs::read_to_string(root().join("examples/manifests").join(f)).unwrap();
        let text = if f == "policies.yaml" {
            edit(text)
        } else {
            text
        };
        std::fs::write(dir.join(f), text).unwrap();
    }
}

fn recommend(dir: &Path) -> std::process::Output {
    recommend_with(dir, &[])
}

fn recommend_with(dir: &Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_kerf"))
        .args(["recommend", "--manifests"])
        .arg(dir)
        .args(["--metrics", "examples/metrics.om", "--at", AT, "-o", "json"])
        .args(args)
        .current_dir(root())
        .env_remove("RUST_LOG")
        .output()
        .unwrap()
}

#[test]
fn a_typo_fails_with_its_path_and_the_field_it_meant() {
    let tmp = tempfile::tempdir().unwrap();
    example_with(tmp.path(), |t| {
        t.replacen(
            "upsize: {thresholdPercent: 125",
            "upsize: {thresholdPercnt: 150",
            1,
        )
    });
    let out = recommend(tmp.path());
    assert!(!out.status.success());
    let err = stderr(&out);
    let line = "spec.metrics.compute.upsize.thresholdPercnt: unknown field; did you mean thresholdPercent?";
    assert_eq!(err.matches(line).count(), 1, "{err}");
    assert!(
        err.contains("policies.yaml: document 1 (GpuReactivePolicy gpu-reactive)"),
        "{err}"
    );
    assert!(!err.contains("WARN"), "printed once, not logged too: {err}");
    assert!(out.stdout.is_empty(), "no recommendation from bad input");
}

#[test]
fn every_error_of_every_file_is_reported_once_in_one_run() {
    let tmp = tempfile::tempdir().unwrap();
    example_with(tmp.path(), |t| {
        t.replacen("  metrics:\n    compute:", "  metrcs:\n    compute:", 1)
            .replacen("  kai:\n    queue:", "  kai:\n    queu:", 1)
    });
    // A second file with a problem of its own, and a Kubernetes kind kerf does not read (skipped,
    // not an error).
    std::fs::write(
        tmp.path().join("zz-more.yaml"),
        "apiVersion: rightsizing.kubex.ai/v1alpha1\nkind: ClusterAutomationStrategy\n\
         metadata: {name: c}\nspec: {enablemnt: {}}\n---\n\
         apiVersion: v1\nkind: Secret\nmetadata: {name: s}\n",
    )
    .unwrap();
    let out = recommend(tmp.path());
    assert!(!out.status.success());
    let err = stderr(&out);
    let expected = [
        "spec.metrcs: unknown field; did you mean metrics?",
        "spec.kai.queu: unknown field; did you mean queue?",
        "spec.enablemnt: unknown field; did you mean enablement?",
    ];
    for e in expected {
        assert_eq!(err.matches(e).count(), 1, "{e:?} once in:\n{err}");
    }
    assert!(err.starts_with("error: 3 errors:\n"), "{err}");
    assert!(!err.contains("Secret"), "{err}");
    assert!(!err.contains("WARN"), "{err}");
}

fn kerf(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_kerf"))
        .args(args)
        .current_dir(root())
        .output()
        .unwrap()
}

#[test]
fn a_prometheus_url_says_what_is_wrong_with_it() {
    for (url, expected) in [
        (
            "localhost:9090",
            "no scheme: did you mean http://localhost:9090?",
        ),
        ("http://", "empty host"),
        ("http://prom host:9090", "contains a space"),
    ] {
        for command in [
            vec![
                "recommend",
                "--manifests",
                "examples/manifests",
                "--prometheus",
                url,
            ],
            vec![
                "simulate",
                "--manifests",
                "examples/manifests",
                "--prometheus",
                url,
                "--from",
                AT,
                "--to",
                "2026-01-01T12:10:00Z",
            ],
        ] {
            let out = kerf(&command);
            assert!(!out.status.success(), "{command:?}");
            let err = stderr(&out);
            assert!(
                err.contains(&format!("--prometheus: {expected}")),
                "{command:?}: {err}"
            );
        }
    }
}

#[test]
fn output_given_a_format_suggests_o_and_writes_no_file() {
    let tmp = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_kerf"))
        .args([
            "simulate",
            "--manifests",
            "examples/manifests",
            "--metrics",
            "examples/metrics.om",
            "--from",
            "2026-01-01T11:40:00Z",
            "--to",
            "2026-01-01T12:00:00Z",
            "--output",
            "json",
        ])
        .env("KERF_MANIFESTS", root().join("examples/manifests"))
        .current_dir(tmp.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(stderr(&out).contains("use -o json"), "{}", stderr(&out));
    assert!(!tmp.path().join("json").exists());
    // -o json --output FILE writes the JSON report to the file (recommend as simulate).
    let file = tmp.path().join("report.json");
    let out = kerf(&[
        "recommend",
        "--manifests",
        "examples/manifests",
        "--metrics",
        "examples/metrics.om",
        "--at",
        AT,
        "-o",
        "json",
        "--output",
        file.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(out.stdout.is_empty());
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(v["recommendations"].as_array().unwrap().len(), 2);
}

/// A `kubectl get all,limitranges,resourcequotas,pdb,hpa -A -o yaml` dump next to the example:
/// read whole, it changes no recommendation; the typos in its Deployments and StatefulSet (fields
/// Kubernetes' types do not know) are warnings naming the path and the nearest known name, each
/// once per field and file; the kinds kerf does not read are one line. `--strict` turns the
/// warnings into errors, all in one run.
#[test]
fn a_cluster_dump_is_read_with_warnings_for_unknown_fields_and_one_skipped_line() {
    let tmp = tempfile::tempdir().unwrap();
    example_with(tmp.path(), |t| t);
    let alone = recommend(tmp.path());
    assert!(alone.status.success(), "{}", stderr(&alone));
    assert_eq!(stderr(&alone), "", "the example alone reads without a word");
    std::fs::copy(
        root().join("tests/fixtures/dump/cluster-dump.yaml"),
        tmp.path().join("dump.yaml"),
    )
    .unwrap();
    let out = recommend(tmp.path());
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert_eq!(
        out.stdout, alone.stdout,
        "the dump's objects change nothing here"
    );
    let warnings: Vec<&str> = err.lines().filter(|l| l.starts_with("warning: ")).collect();
    assert_eq!(warnings.len(), 2, "{err}");
    assert!(
        warnings[0].ends_with(
            "(Deployment worker): spec.template.spec.schedulerNme: unknown field; did you mean \
             schedulerName? (ignored, also in 1 more object of this file)"
        ),
        "{err}"
    );
    assert!(
        warnings[1].ends_with(
            "(StatefulSet db): spec.template.spec.containers[0].resoures: unknown field; did you \
             mean resources? (ignored)"
        ),
        "{err}"
    );
    assert!(
        warnings
            .iter()
            .all(|w| w.contains("dump.yaml: document 1 item ")),
        "{err}"
    );
    let skipped: Vec<&str> = err.lines().filter(|l| l.starts_with("skipped ")).collect();
    assert_eq!(
        skipped,
        [
            "skipped 5 objects of 2 kinds kerf does not read: Service, PodDisruptionBudget (a \
          kind whose objects own pods is read once GlobalConfiguration spec.workloadKinds lists \
          it)"
        ],
        "{err}"
    );

    let strict = recommend_with(tmp.path(), &["--strict"]);
    let err = stderr(&strict);
    assert!(!strict.status.success());
    assert!(strict.stdout.is_empty(), "no recommendation under --strict");
    assert!(err.starts_with("error: 2 errors:\n"), "{err}");
    assert!(
        err.contains("spec.template.spec.schedulerNme: unknown field; did you mean schedulerName?"),
        "{err}"
    );
    assert!(
        err.contains("spec.template.spec.containers[0].resoures: unknown field"),
        "{err}"
    );
}
