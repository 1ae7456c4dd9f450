//! docs/policies.md documents every field of every kind: each property name in the generated
//! CRD schemas appears in it (as `name` or inside a backticked path), and so does each kind.

use std::collections::BTreeSet;

fn collect(schema: &serde_json::Value, path: &str, out: &mut BTreeSet<(String, String)>) {
    let Some(props) = schema.get("properties").and_then(|p| p.as_object()) else {
        return;
    };
    for (name, child) in props {
        let full = if path.is_empty() {
            name.clone()
        } else {
            format!("{path}.{name}")
        };
        // Leaves only: an object is documented through its fields' paths.
        let container = child.get("properties").is_some()
            || child
                .get("items")
                .is_some_and(|i| i.get("properties").is_some())
            || child
                .get("additionalProperties")
                .is_some_and(|a| a.get("properties").is_some());
        if !container || name == "labelSelector" || name == "conditions" {
            out.insert((name.clone(), full.clone()));
        }
        // Kubernetes' own types (LabelSelector, Condition) are documented upstream.
        if name == "labelSelector" || name == "conditions" {
            continue;
        }
        collect(child, &full, out);
        if let Some(items) = child.get("items") {
            collect(items, &format!("{full}[]"), out);
        }
        if let Some(extra) = child.get("additionalProperties").filter(|a| a.is_object()) {
            collect(extra, &format!("{full}.*"), out);
        }
    }
}

#[test]
fn policies_doc_names_every_field_of_every_kind() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/policies.md"))
        .expect("docs/policies.md");
    let mut missing = Vec::new();
    for (_, crd) in kerf::api::crds() {
        let kind = crd.spec.names.kind.clone();
        if !doc.contains(&format!("## {kind}"))
            && !doc.contains(&format!(" {kind} "))
            && !doc.contains(&format!("/ {kind}"))
        {
            missing.push(format!("kind {kind}"));
        }
        let schema = serde_json::to_value(
            crd.spec.versions[0]
                .schema
                .as_ref()
                .unwrap()
                .open_api_v3_schema
                .as_ref()
                .unwrap(),
        )
        .unwrap();
        let mut fields = BTreeSet::new();
        collect(&schema, "", &mut fields);
        for (name, full) in fields {
            let named = doc.contains(&format!("`{name}`"))
                || doc.contains(&format!(".{name}`"))
                || doc.contains(&format!(".{name},"))
                || doc.contains(&format!("`.{name}"))
                || doc.contains(&format!(".{name} "));
            if !named {
                missing.push(format!("{kind}: {full}"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "docs/policies.md does not mention:\n  {}",
        missing.join("\n  ")
    );
}

/// The "Webhook limits" table of docs/install.md: each row's flag, environment variable and
/// default are what `kerf serve` has, and the defaults are the server's own.
#[test]
fn install_doc_lists_every_webhook_limit_with_its_default() {
    use clap::{CommandFactory, Parser};
    #[derive(Parser)]
    struct Serve {
        #[command(flatten)]
        limits: kerf::cli::serve::LimitArgs,
    }
    let parsed = Serve::parse_from(["kerf"]).limits.limits().unwrap();
    assert_eq!(parsed, kerf::server::limits::Limits::default());
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/install.md"))
        .expect("docs/install.md");
    let section = doc
        .split_once("## Webhook limits\n")
        .expect("a Webhook limits section")
        .1;
    let rows: BTreeSet<(String, String, String)> = section
        .lines()
        .take_while(|l| !l.starts_with("## "))
        .filter(|l| l.starts_with("| `--"))
        .map(|l| {
            let cells: Vec<&str> = l.split('|').map(|c| c.trim().trim_matches('`')).collect();
            (cells[1].into(), cells[2].into(), cells[3].into())
        })
        .collect();
    let cmd = Serve::command();
    let flags: BTreeSet<(String, String, String)> = cmd
        .get_arguments()
        .filter(|a| a.get_long().is_some())
        .map(|a| {
            (
                format!("--{}", a.get_long().unwrap()),
                a.get_env().unwrap().to_string_lossy().into_owned(),
                a.get_default_values()[0].to_string_lossy().into_owned(),
            )
        })
        .collect();
    assert_eq!(rows, flags);
}

/// The Deployment's memory limit holds the worst case of the default limits (docs/install.md,
/// "Memory") over the cached state at 1,000 GPU workloads, with headroom.
#[test]
fn deployment_memory_limit_holds_the_worst_case_of_the_default_limits() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/manifests/install/deployment.yaml"
    ))
    .unwrap();
    let deployment: serde_json::Value = serde_saphyr::from_str(&text).unwrap();
    let limit =
        deployment["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["memory"]
            .as_str()
            .expect("a memory limit");
    let limit = kerf::core::quantity::parse_memory_bytes(limit).unwrap() as usize;
    let l = kerf::server::limits::Limits::default();
    let mib = 1024 * 1024;
    // Measured: ~39 KiB per open TLS connection; a review's decoded objects a few times its
    // 3 MiB body, one review per CPU (the Deployment's limit is 1).
    let worst = 28 * mib
        + l.max_buffered_body_bytes
        + (l.max_connections + l.health_max_connections) * 40 * 1024
        + 4 * kerf::server::MAX_BODY_BYTES;
    assert!(
        limit >= worst + 64 * mib,
        "limit {limit} B, worst case {worst} B: less than 64 MiB of headroom"
    );
}
