//! `patch_between` is held to `json_patch::diff`: the same operations, in the same order.

use proptest::prelude::*;
use serde_json::{Map, Value, json};

use super::patch_between;

fn same_as_json_patch(left: &Value, right: &Value) -> Result<(), TestCaseError> {
    let ours = patch_between(left, right);
    let theirs = json_patch::diff(left, right).0;
    prop_assert_eq!(
        serde_json::to_string(&ours).unwrap(),
        serde_json::to_string(&theirs).unwrap(),
        "left {} right {}",
        left,
        right
    );
    Ok(())
}

/// Keys that need escaping in a pointer (`/`, `~`) and keys that are numbers.
fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("a".to_string()),
        Just("b".to_string()),
        Just("0".to_string()),
        Just("x/y".to_string()),
        Just("m~n".to_string()),
        // Already looks encoded: must be escaped again, not taken as an encoded token.
        Just("~1".to_string()),
        Just("a~0/".to_string()),
        Just("rightsizing.kubex.ai/mutated".to_string()),
        "[a-d~/]{0,3}",
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        (-3i64..3).prop_map(Value::from),
        prop_oneof![Just(0.5), Just(1.0)].prop_map(Value::from),
        "[a-c]{0,2}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::vec((key(), inner), 0..6)
                .prop_map(|kvs| Value::Object(kvs.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// One edit at a place chosen by `at`: what kerf's builder does to its copy of the pod (set a
/// key, remove one — `Map::remove` moves the last key into its place — replace a value, grow or
/// shrink a list).
#[derive(Clone, Debug)]
enum Edit {
    Set(String, Value),
    Remove(String),
    RemoveNth(usize),
    Replace(Value),
    Push(Value),
    Pop,
}

fn edit() -> impl Strategy<Value = (Vec<usize>, Edit)> {
    let what = prop_oneof![
        (key(), json_value()).prop_map(|(k, v)| Edit::Set(k, v)),
        key().prop_map(Edit::Remove),
        (0usize..6).prop_map(Edit::RemoveNth),
        json_value().prop_map(Edit::Replace),
        json_value().prop_map(Edit::Push),
        Just(Edit::Pop),
    ];
    (prop::collection::vec(0usize..6, 0..4), what)
}

fn apply(doc: &mut Value, at: &[usize], edit: &Edit) {
    let next = match (at.first(), &mut *doc) {
        (Some(&i), Value::Object(m)) if !m.is_empty() => {
            let n = i % m.len();
            m.values_mut().nth(n)
        }
        (Some(&i), Value::Array(a)) if !a.is_empty() => {
            let n = i % a.len();
            a.get_mut(n)
        }
        _ => None,
    };
    if let Some(next) = next {
        return apply(next, &at[1..], edit);
    }
    match (doc, edit) {
        (Value::Object(m), Edit::Set(k, v)) => {
            m.insert(k.clone(), v.clone());
        }
        (Value::Object(m), Edit::Remove(k)) => {
            m.remove(k);
        }
        (Value::Object(m), Edit::RemoveNth(n)) if !m.is_empty() => {
            let k = m.keys().nth(n % m.len()).cloned().unwrap();
            m.remove(&k);
        }
        (Value::Array(a), Edit::Push(v)) => a.push(v.clone()),
        (Value::Array(a), Edit::Pop) => {
            a.pop();
        }
        (Value::Array(a), Edit::RemoveNth(n)) if !a.is_empty() => {
            let n = n % a.len();
            a.remove(n);
        }
        (v, Edit::Replace(new)) => *v = new.clone(),
        _ => {}
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn patch_between_is_json_patch_diff_on_an_edited_copy(
        left in json_value(),
        edits in prop::collection::vec(edit(), 0..6),
    ) {
        let mut right = left.clone();
        for (at, e) in &edits {
            apply(&mut right, at, e);
        }
        same_as_json_patch(&left, &right)?;
        same_as_json_patch(&right, &left)?;
    }

    #[test]
    fn patch_between_is_json_patch_diff_on_unrelated_objects(
        left in json_value(),
        right in json_value(),
    ) {
        same_as_json_patch(&left, &right)?;
    }
}

#[test]
fn patch_between_is_json_patch_diff_on_a_pod_kerf_patched() {
    let left = json!({
        "metadata": {"annotations": {"a/b": "1", "c~d": "2"}, "labels": {"app": "x"}},
        "spec": {"schedulerName": "default-scheduler", "containers": [
            {"name": "server", "resources": {"requests": {"cpu": "2", "nvidia.com/gpu": "1"},
                                             "limits": {"nvidia.com/gpu": "1"}}},
            {"name": "sidecar"}
        ]}
    });
    let mut right = left.clone();
    let c0 = &mut right["spec"]["containers"][0]["resources"];
    c0["requests"].as_object_mut().unwrap().remove("cpu");
    c0["requests"]["memory"] = json!("1Gi");
    c0.as_object_mut().unwrap().remove("limits");
    right["spec"]["containers"][1]["resources"] = json!({"requests": {"cpu": "50m"}});
    right["spec"]["schedulerName"] = json!("kai-scheduler");
    let annotations = right["metadata"]["annotations"].as_object_mut().unwrap();
    annotations.remove("a/b");
    annotations.insert("gpu-fraction".into(), json!("0.5"));
    right["metadata"]["labels"]["kai.scheduler/queue"] = json!("q");
    same_as_json_patch(&left, &right).unwrap();
    let ops = patch_between(&left, &right);
    assert_eq!(ops.len(), 8, "{ops:?}");
    assert!(patch_between(&left, &left).is_empty());
}
