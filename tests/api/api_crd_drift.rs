//! The CRD YAML in `manifests/crds/` must be exactly what `cargo run --bin crdgen` writes from the
//! Rust types: no stale file, no missing file, no extra file.

use std::collections::BTreeSet;
use std::path::Path;

#[test]
fn generated_crds_match_committed_manifests() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests/crds");
    let mut problems = Vec::new();
    let mut expected = BTreeSet::new();
    for (name, crd) in kerf::api::crds() {
        let file = format!("{name}.yaml");
        expected.insert(file.clone());
        let want = kerf::api::crd_yaml(&crd);
        match std::fs::read_to_string(dir.join(&file)) {
            Ok(have) if have == want => {}
            Ok(have) => {
                let line = have
                    .lines()
                    .zip(want.lines())
                    .position(|(a, b)| a != b)
                    .unwrap_or_else(|| have.lines().count().min(want.lines().count()))
                    + 1;
                problems.push(format!(
                    "manifests/crds/{file} is stale (first difference at line {line})"
                ));
            }
            Err(e) => problems.push(format!("manifests/crds/{file} is missing ({e})")),
        }
    }
    expected.insert("kustomization.yaml".into());
    match std::fs::read_to_string(dir.join("kustomization.yaml")) {
        Ok(have) if have == kerf::api::crds_kustomization() => {}
        Ok(_) => problems.push("manifests/crds/kustomization.yaml is stale".into()),
        Err(e) => problems.push(format!(
            "manifests/crds/kustomization.yaml is missing ({e})"
        )),
    }
    let present: BTreeSet<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .map(|entry| {
            entry
                .expect("directory entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    for extra in present.difference(&expected) {
        problems.push(format!(
            "manifests/crds/{extra} is not generated from crates/api/src (remove it)"
        ));
    }
    assert!(
        problems.is_empty(),
        "CRDs out of date with crates/api/src — run `cargo run --bin crdgen` and commit the result:\n  {}",
        problems.join("\n  ")
    );
}
