//! Validation parity: the generated CRDs (OpenAPI structure + CEL rules, evaluated offline with
//! kube's CEL engine) reject exactly what the Rust types and `validate()` reject, and both name the
//! offending field. Fixtures: `tests/fixtures/invalid/*.yaml` (one rule each, expected field in an
//! `# expect-field:` header), `tests/fixtures/valid/*.yaml` and the seed's own YAML.

use std::path::{Path, PathBuf};

use kerf::api::KerfObject;
use kerf::api::crd_check::{CrdChecker, CrdViolation, check_against, kerf_checkers};
use kube::CustomResourceExt;
use proptest::prelude::*;
use serde_json::Value;

fn fixtures(dir: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(dir);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no fixtures in {}", dir.display());
    files
}

fn load(path: &Path) -> (String, Value) {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let value = serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    (text, value)
}

fn checkers() -> Vec<CrdChecker> {
    kerf_checkers().expect("every kerf CRD compiles for the offline checker")
}

/// A reported field "names" the expected one when it is that field or lies inside it.
fn names_field(reported: &str, expected: &str) -> bool {
    let reported = reported.trim_start_matches('.');
    reported == expected
        || reported.starts_with(&format!("{expected}."))
        || reported.starts_with(&format!("{expected}["))
}

fn crd_fields(errors: &[CrdViolation]) -> Vec<String> {
    errors
        .iter()
        .map(|e| e.field.trim_start_matches('.').to_string())
        .collect()
}

#[test]
fn invalid_fixtures_are_rejected_by_both_the_crd_and_validate_naming_the_field() {
    let checkers = checkers();
    let mut failures = Vec::new();
    let files = fixtures("invalid");
    for path in &files {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let (text, value) = load(path);
        let expected = text
            .lines()
            .find_map(|l| l.strip_prefix("# expect-field:"))
            .map(str::trim)
            .unwrap_or_else(|| panic!("{name}: missing `# expect-field:` header"));

        match check_against(&checkers, &value) {
            Ok(()) => failures.push(format!(
                "{name}: the CRD accepts it (expected a rejection at {expected})"
            )),
            Err(errors) => {
                // A rule on the whole object has no field path; its message names the field.
                let named = errors.iter().any(|e| {
                    names_field(&e.field, expected)
                        || (e.field.is_empty() && e.message.contains(expected))
                });
                if !named {
                    failures.push(format!(
                        "{name}: the CRD rejects it but names {:?}, not {expected}",
                        crd_fields(&errors)
                    ));
                }
            }
        }
        match KerfObject::parse(&value) {
            Ok(_) => failures.push(format!(
                "{name}: validate() accepts it (expected a rejection at {expected})"
            )),
            Err(err) => {
                if !err.0.iter().any(|e| names_field(&e.field, expected)) {
                    failures.push(format!(
                        "{name}: validate() rejects it but says {err:?}, not naming {expected}"
                    ));
                }
                // The message a user reads names the field too.
                assert!(
                    err.to_string()
                        .contains(expected.split('[').next().unwrap()),
                    "{name}: {err}"
                );
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} fixtures disagree:\n  {}",
        failures.len(),
        files.len(),
        failures.join("\n  ")
    );
}

#[test]
fn valid_and_seed_fixtures_pass_both_checks() {
    let checkers = checkers();
    let mut files = fixtures("valid");
    files.extend(fixtures("seed"));
    for path in &files {
        let (_, value) = load(path);
        if let Err(errors) = check_against(&checkers, &value) {
            let list: Vec<String> = errors.iter().map(ToString::to_string).collect();
            panic!(
                "{}: the CRD rejects it: {}",
                path.display(),
                list.join("; ")
            );
        }
        if let Err(err) = KerfObject::parse(&value) {
            panic!("{}: validate() rejects it: {err}", path.display());
        }
    }
}

#[test]
fn crd_check_reports_structural_problems_with_paths() {
    let checkers = checkers();
    let (_, mut value) = load(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/seed/gpureactivepolicy.yaml"),
    );
    value["spec"]["metrics"]["compute"]["upsize"]["maxPercent"] = Value::String("lots".into());
    value["spec"]["scope"]["containers"] = serde_json::json!([1]);
    value["spec"]["bogus"] = Value::Bool(true);
    let errors = check_against(&checkers, &value).expect_err("three structural errors");
    let fields = crd_fields(&errors);
    for want in [
        "spec.metrics.compute.upsize.maxPercent",
        "spec.scope.containers[0]",
        "spec.bogus",
    ] {
        assert!(fields.iter().any(|f| f == want), "{want} not in {fields:?}");
    }
    value["apiVersion"] = Value::String("rightsizing.kubex.ai/v2".into());
    let errors = check_against(&checkers, &value).expect_err("unknown version");
    assert!(
        errors[0].message.contains("no kerf CRD serves"),
        "{errors:?}"
    );
}

/// Every CEL rule in every CRD compiled (checked by `CrdChecker::new`) and the checker knows
/// every schema keyword; a rule that fails to evaluate is a rejection, so valid fixtures passing
/// proves the rules evaluate.
#[test]
fn every_crd_compiles_for_the_offline_checker() {
    let names: Vec<String> = checkers().iter().map(|c| c.kind().to_string()).collect();
    assert_eq!(names.len(), kerf::api::crds().len(), "{names:?}");
}

// --- Durations: the CRD (pattern + maxLength + CEL regex rules) and DurationStr agree everywhere.

fn gpu_policy_with(field: &str, duration: &str) -> Value {
    let (_, mut value) = load(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/seed/gpureactivepolicy.yaml"),
    );
    match field {
        "window" => {
            value["spec"]["metrics"]["compute"]["upsize"]["metricsWindow"] =
                Value::String(duration.into())
        }
        _ => value["spec"]["minPodMetricsAge"] = Value::String(duration.into()),
    }
    value
}

#[test]
fn duration_edge_cases_agree() {
    let checkers = checkers();
    let cases = [
        ("0s", false, true),
        ("59s", false, false),
        ("60s", true, true),
        ("059s", false, false),
        ("0060s", true, true),
        ("100s", true, true),
        ("1m", true, true),
        ("0h0m0s", false, true),
        ("00m", false, true),
        ("0m59s", false, false),
        ("1h", true, true),
        ("1d", true, true),
        ("0d", false, false),
        ("01d", false, false),
        ("1d0s", true, true),
        ("7d12h", true, true),
        ("1m1h", false, false),
        ("1.5m", false, false),
        ("-1m", false, false),
        ("m", false, false),
        ("10", false, false),
        ("", false, false),
        ("99999999999999d", true, true),
        ("999999999999999d", false, false),
        ("3000000h", true, true),
    ];
    for (text, window_ok, age_ok) in cases {
        for (field, want) in [("window", window_ok), ("age", age_ok)] {
            let object = gpu_policy_with(field, text);
            let rust = KerfObject::parse(&object);
            assert_eq!(
                rust.is_ok(),
                want,
                "validate() on {field} {text:?}: {rust:?}"
            );
            let crd = check_against(&checkers, &object);
            assert_eq!(crd.is_ok(), want, "CRD on {field} {text:?}: {crd:?}");
        }
    }
}

thread_local! {
    static GPU_CHECKER: CrdChecker = CrdChecker::new(&kerf::api::GpuReactivePolicy::crd()).expect("compiles");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    #[test]
    fn durations_agree_on_generated_text(text in "([0-9]{1,3}d)?([0-9]{1,3}h)?([0-9]{1,3}m)?([0-9]{1,4}s)?|[0-9dhms]{1,6}") {
        for field in ["window", "age"] {
            let object = gpu_policy_with(field, &text);
            let crd = GPU_CHECKER.with(|c| c.check(&object)).is_ok();
            let rust = KerfObject::parse(&object).is_ok();
            prop_assert_eq!(crd, rust, "field {} text {:?}", field, text);
        }
    }
}

/// The GlobalConfigurations docs/install.md shows for each way of reaching Prometheus pass both
/// checks: what a user copies applies.
#[test]
fn install_doc_global_configurations_pass_both_checks() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/install.md"))
        .expect("docs/install.md");
    let checkers = checkers();
    let mut seen = 0;
    for block in doc.split("```yaml\n").skip(1) {
        let text = block.split("```").next().unwrap();
        if !text.contains("kind: GlobalConfiguration") {
            continue;
        }
        seen += 1;
        let value: Value = serde_saphyr::from_str(text).unwrap_or_else(|e| panic!("{e}:\n{text}"));
        if let Err(errors) = check_against(&checkers, &value) {
            let list: Vec<String> = errors.iter().map(ToString::to_string).collect();
            panic!("the CRD rejects:\n{text}\n{}", list.join("; "));
        }
        if let Err(err) = KerfObject::parse(&value) {
            panic!("validate() rejects:\n{text}\n{err}");
        }
    }
    assert!(seen >= 5, "one per setup: found {seen}");
}
