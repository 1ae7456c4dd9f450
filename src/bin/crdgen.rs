//! Writes the CRD YAML generated from `kerf::api` into a directory (default `manifests/crds`).
#![forbid(unsafe_code)]

use std::path::PathBuf;

fn main() -> std::io::Result<()> {
    let dir = PathBuf::from(
        std::env::args()
            .nth(1)
            .unwrap_or_else(|| "manifests/crds".into()),
    );
    std::fs::create_dir_all(&dir)?;
    for (file, crd) in kerf::api::crds() {
        let path = dir.join(format!("{file}.yaml"));
        std::fs::write(&path, kerf::api::crd_yaml(&crd))?;
        println!("wrote {}", path.display());
    }
    let path = dir.join("kustomization.yaml");
    std::fs::write(&path, kerf::api::crds_kustomization())?;
    println!("wrote {}", path.display());
    Ok(())
}
