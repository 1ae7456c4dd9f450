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
