use super::*;

use crate::core::admission::Node;
use crate::core::model::{GpuRecommendation, ResourceRequests, WorkloadState};

fn store() -> std::sync::Arc<Store> {
    let s = Store::new();
    let mut st = WorkloadState {
        gpu: Some(GpuRecommendation {
            containers: [("server".to_string(), 0.6), ("trainer".to_string(), 1.5)].into(),
            driving_metric: None,
            policy: None,
            updated_at: None,
            by_policy: Default::default(),
        }),
        ..Default::default()
    };
    st.resources.insert(
        "metrics-exporter".into(),
        ResourceRequests {
            cpu_millis: Some(30),
            memory_bytes: Some(48 << 20),
        },
    );
    for (kind, name) in [
        (WorkloadKind::Deployment, "llm-serve"),
        (WorkloadKind::StatefulSet, "trainer"),
    ] {
        s.put(WorkloadKey::new("ml", kind, name), st.clone());
    }
    s
}

fn fixtures() -> Vec<Vec<u8>> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/admission");
    let mut paths: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    paths.sort();
    paths.iter().map(|p| std::fs::read(p).unwrap()).collect()
}

/// The one pass answers exactly as the two passes do: same status, body, labels and detail.
fn assert_same(body: &[u8], store: &Store) {
    let (one, two) = (
        handle_review(body, store),
        handle_in_two_passes(body, store),
    );
    let what = String::from_utf8_lossy(body);
    assert_eq!(one.status, two.status, "{what}");
    assert_eq!(one.body, two.body, "{what}");
    assert_eq!(
        (
            one.kind,
            one.operation,
            one.outcome,
            one.detail,
            one.caught_panic
        ),
        (
            two.kind,
            two.operation,
            two.outcome,
            two.detail,
            two.caught_panic
        ),
        "{what}"
    );
}

/// The fixtures as sent, with `request.object` moved before `request.kind` (read by the second
/// pass), with the object or the kind duplicated, as sequences instead of maps, and with byte
/// edits all over the body: the one pass gives the two passes' answer every time.
#[test]
fn one_pass_answers_as_the_two_passes() {
    let store = store();
    let mut next = random_below(0x2545_f491_4f6c_dd1d);
    for raw in fixtures() {
        let mut review: Value = serde_json::from_slice(&raw).unwrap();
        let compact = serde_json::to_vec(&review).unwrap();
        let text = String::from_utf8(compact.clone()).unwrap();
        assert_same(&raw, &store);
        assert_same(&compact, &store);
        for (from, to) in [
            ("\"object\":", "\"object\":{},\"object\":"),
            ("\"kind\":{", "\"kind\":{},\"kind\":{"),
            ("\"request\":", "\"request\":{},\"request\":"),
        ] {
            assert_same(text.replacen(from, to, 1).as_bytes(), &store);
        }
        assert_same(format!("[{text}]").as_bytes(), &store);
        let request = review["request"].as_object_mut().unwrap();
        let object = request.shift_remove("object").unwrap();
        let mut first = serde_json::Map::new();
        first.insert("object".into(), object);
        first.extend(std::mem::take(request));
        *request = first;
        assert_same(&serde_json::to_vec(&review).unwrap(), &store);
        review["request"] = Value::Array(request_values(&review["request"]));
        assert_same(&serde_json::to_vec(&review).unwrap(), &store);
        for _ in 0..200 {
            let mut b = compact.clone();
            let edits = 1 + next(3);
            damage(&mut b, edits, &mut next);
            assert_same(&b, &store);
        }
    }
}

/// The bench's validate server checks bodies with the reader's scanner: it accepts a body
/// exactly when serde_json reads it as one JSON value, on every fixture and on bytes changed,
/// inserted and removed at random in them.
#[test]
fn body_is_json_accepts_what_serde_json_accepts() {
    let mut next = random_below(0x9e37_79b9_7f4a_7c15);
    let (mut accepted, mut refused) = (0, 0);
    for raw in fixtures() {
        let compact = serde_json::to_vec(&serde_json::from_slice::<Value>(&raw).unwrap()).unwrap();
        for round in 0..300 {
            let mut b = if round % 2 == 0 {
                compact.clone()
            } else {
                raw.clone()
            };
            let edits = next(3);
            damage(&mut b, edits, &mut next);
            let serde_accepts = serde_json::from_slice::<serde::de::IgnoredAny>(&b).is_ok();
            assert_eq!(
                super::body_is_json(&b),
                serde_accepts,
                "{}",
                String::from_utf8_lossy(&b)
            );
            if serde_accepts {
                accepted += 1
            } else {
                refused += 1
            }
        }
    }
    // Both answers were exercised, not only one.
    assert!(
        accepted > 100 && refused > 100,
        "{accepted} accepted, {refused} refused"
    );
}

/// Owner references in the shapes `OwnerReference`'s serde impl accepts (fields missing or
/// `null`, flags `null` or `false`, unknown fields, any order) are taken by the one pass, and
/// every shape, accepted or not, gets the answer the two passes give.
#[test]
fn one_pass_reads_owner_references_as_serde_does() {
    let store = store();
    let raw = std::fs::read(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/admission/pod-large.json"),
    )
    .unwrap();
    let review: Value = serde_json::from_slice(&raw).unwrap();
    let with = |refs: &str| {
        let mut r = review.clone();
        r["request"]["object"]["metadata"]["ownerReferences"] = serde_json::from_str(refs).unwrap();
        serde_json::to_vec(&r).unwrap()
    };
    let rs = r#""apiVersion":"apps/v1","kind":"ReplicaSet","name":"llm-serve-5c7d9b8f6d""#;
    let taken = [
        format!(r#"[{{{rs},"uid":"u","controller":true,"blockOwnerDeletion":true}}]"#),
        format!(r#"[{{"controller":true,{rs}}}]"#),
        format!(r#"[{{{rs},"uid":null,"controller":true,"blockOwnerDeletion":null}}]"#),
        format!(r#"[{{{rs},"controller":false}},{{{rs},"controller":null,"extra":[1,{{}}]}}]"#),
        format!(r#"[{{"kind":null,"name":"x","controller":true}},{{{rs}}}]"#),
        "[]".to_string(),
        "null".to_string(),
    ];
    for refs in &taken {
        let body = with(refs);
        assert!(
            read::review(&body).is_some(),
            "not taken in one pass: {refs}"
        );
        assert_same(&body, &store);
    }
    // Patched when the controller reference is readable, as the two passes answer.
    let first = handle_review(&with(&taken[0]), &store);
    assert_eq!(first.outcome, Outcome::Patched);
    let text = String::from_utf8(with(&taken[0])).unwrap();
    let flag = r#""controller":true"#;
    let at = text.find(flag).unwrap();
    for changed in [
        // A repeated field: the impl takes the last; the one pass leaves it to the two.
        text.replacen(
            r#""controller":true"#,
            r#""controller":false,"controller":true"#,
            1,
        ),
        // Not a flag, not a string, not a list of maps.
        text.replacen(r#""controller":true"#, r#""controller":1"#, 1),
        text.replacen(r#""uid":"u""#, r#""uid":7"#, 1),
        text.replacen(r#""ownerReferences":["#, r#""ownerReferences":[1,"#, 1),
        format!(
            "{}\"controller\":tru{}",
            &text[..at],
            &text[at + flag.len()..]
        ),
    ] {
        assert_same(changed.as_bytes(), &store);
    }
}

/// A seeded xorshift: each call gives a number below its argument (repeatable cases).
fn random_below(mut seed: u64) -> impl FnMut(usize) -> usize {
    move |n| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % n as u64) as usize
    }
}

/// `edits` random one-byte changes to `b`: a byte replaced, inserted or removed (printable
/// ASCII), so the text stays UTF-8 and mostly near JSON.
fn damage(b: &mut Vec<u8>, edits: usize, next: &mut impl FnMut(usize) -> usize) {
    for _ in 0..edits {
        let at = next(b.len());
        match next(3) {
            0 => b[at] = 0x20 + next(0x5f) as u8,
            1 => b.insert(at, 0x20 + next(0x5f) as u8),
            _ => {
                b.remove(at);
            }
        }
    }
}

fn request_values(request: &Value) -> Vec<Value> {
    ["uid", "kind", "namespace", "operation"]
        .iter()
        .map(|k| request[*k].clone())
        .collect()
}

/// The hand-written answer is the compact JSON of the AdmissionReview it stands for, the patch
/// being the base64 of the operations' JSON array, with and without patch and warnings.
#[test]
fn answer_is_the_compact_json_of_the_review() {
    let patch = crate::core::admission::diff(
        &Node::from(&serde_json::json!({"gone": 1, "a": {"x": "1"}})),
        &Node::from(&serde_json::json!({"a": {"x": "2/~\"\u{7f}"}, "new": [null, {"n": 1.5}]})),
    );
    let warnings = ["kerf: w \"1\"; admitted unchanged".to_string()];
    for uid in ["705ab4f5-6393-11e8-b7cc-42010a800002", "u\"\\\n\u{1}é"] {
        for (patch, warnings) in [
            (&patch[..], &[][..]),
            (&[][..], &warnings[..]),
            (&patch[..], &warnings[..]),
            (&[][..], &[][..]),
        ] {
            let mut response = serde_json::json!({"uid": uid, "allowed": true});
            if !patch.is_empty() {
                let ops = Value::Array(patch.iter().map(PatchOp::to_value).collect());
                response["patchType"] = "JSONPatch".into();
                response["patch"] = base64::engine::general_purpose::STANDARD
                    .encode(serde_json::to_vec(&ops).unwrap())
                    .into();
            }
            if !warnings.is_empty() {
                response["warnings"] = serde_json::json!(warnings);
            }
            let review = serde_json::json!({
                "apiVersion": ADMISSION_API_VERSION,
                "kind": "AdmissionReview",
                "response": response,
            });
            assert_eq!(
                String::from_utf8(answer(uid, patch, warnings)).unwrap(),
                serde_json::to_string(&review).unwrap()
            );
        }
    }
}

/// The one pass's own scanner ([`read`]) against serde_json on grammar edge cases: each snippet
/// put where the reader skips a value (an env entry), where it hands a value to serde (a
/// container's resources, the namespace), as a key, and with whitespace around it. Whatever the
/// snippet, the answer is the two passes' (a body serde refuses stays a 400).
#[test]
fn one_pass_takes_no_body_serde_refuses() {
    let store = store();
    let snippets = [
        "0",
        "-0",
        "01",
        "-",
        "-01",
        "1.",
        "1.5",
        ".5",
        "1e",
        "1e+",
        "1E-7",
        "1e5x",
        "2.5e+3",
        "tru",
        "true",
        "nul",
        "null",
        "fals",
        "false",
        "nan",
        "+1",
        "\"\"",
        "\"a\\u00e9\"",
        "\"\\u12\"",
        "\"\\u12G4\"",
        "\"\\x\"",
        "\"\\/\\b\\f\\n\\r\\t\\\"\\\\\"",
        "\"a\tb\"",
        "\"a\u{1}b\"",
        "\"é\"",
        "\"\\ud800\"",
        "[]",
        "[1,]",
        "[,1]",
        "[1 2]",
        "{}",
        "{\"a\":1,}",
        "{\"a\"}",
        "{\"a\":}",
        "{1:2}",
        "{\"a\":1 \"b\":2}",
        "[[[[]]]]",
        "{\"k\":[{\"x\":null}]}",
        "\"unterminated",
        "[",
        "{",
        "]",
        "}",
        ":",
        ",",
        // Maps as a `Node` reads them: a repeated key, and serde_json's raw-value key (first
        // or not, with a string or another value after it).
        r#"{"a":1,"a":{"b":[2,"c"]}}"#,
        r#"{"$serde_json::private::RawValue":"[1,{\"x\":2}]"}"#,
        r#"{"$serde_json::private::RawValue":"[1"}"#,
        r#"{"$serde_json::private::RawValue":3}"#,
        r#"{"a":1,"$serde_json::private::RawValue":"2"}"#,
    ];
    let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
    let mut snippets: Vec<String> = snippets.iter().map(|s| s.to_string()).collect();
    for n in [90, 99, 100, 101, 120, 127, 128, 129, 200] {
        snippets.push(deep(n));
        snippets.push(format!("{{\"a\":{}}}", deep(n)));
    }
    for raw in fixtures() {
        let review: Value = serde_json::from_slice(&raw).unwrap();
        let text = serde_json::to_string(&review).unwrap();
        // The usual bodies take the one pass (else it would be no faster).
        assert!(read::review(&raw).is_some() && read::review(text.as_bytes()).is_some());
        for s in &snippets {
            for s in [s.clone(), format!(" \n{s}\t\r ")] {
                for (from, to) in [
                    ("\"env\":", format!("\"env\":{s},\"env2\":")),
                    ("\"resources\":", format!("\"resources\":{s},\"x\":")),
                    ("\"namespace\":", format!("\"namespace\":{s},\"x\":")),
                    ("\"name\":", format!("\"name\":{s},\"x\":")),
                    ("\"request\":{", format!("\"request\":{{\"k\":{s},")),
                    ("\"uid\":", format!("{s}:1,\"uid\":")),
                    (
                        "\"schedulerName\":",
                        format!("\"schedulerName\":{s},\"x\":"),
                    ),
                    ("\"metadata\":", format!("\"metadata\":{s},\"x\":")),
                    // The envelope's strings and the request's kind, read by the reader.
                    ("\"uid\":", format!("\"uid\":{s},\"x\":")),
                    ("\"operation\":", format!("\"operation\":{s},\"x\":")),
                    ("\"apiVersion\":", format!("\"apiVersion\":{s},\"x\":")),
                    ("\"group\":", format!("\"group\":{s},\"x\":")),
                    ("\"kind\":{", format!("\"kind\":{{\"x\":{s},")),
                    // Values inside the maps the reader decodes itself.
                    ("\"labels\":{", format!("\"labels\":{{\"x\":{s},")),
                    ("\"annotations\":{", format!("\"annotations\":{{\"x\":{s},")),
                    ("\"requests\":{", format!("\"requests\":{{\"x\":{s},")),
                    ("\"containers\":[", format!("\"containers\":[{s},")),
                ] {
                    assert_same(text.replacen(from, &to, 1).as_bytes(), &store);
                }
            }
            assert_same(format!("{text}{s}").as_bytes(), &store);
        }
        // Escaped and non-ASCII keys are read by serde alone; a key the reader does not know
        // but serde does (written with an escape) must not be skipped as unknown.
        for (from, to) in [
            ("\"kind\":\"Pod\"", "\"\\u006bind\":\"Pod\""),
            ("\"resources\":", "\"r\\u0065sources\":"),
            ("\"namespace\":", "\"namésp\":\"x\",\"namespace\":"),
            ("\"apiVersion\":", "\"apiVersion\":null,\"apiVersion\":"),
            // Repeated keys in the maps that decide the answer (the last value counts), and
            // values serde reads for the reader (escapes, bare numbers).
            (
                "\"labels\":{",
                r#""labels":{"pod-template-hash":"0","pod-template-hash":"1","#,
            ),
            (
                r#""pod-template-hash":"5c7d9b8f6d""#,
                r#""pod-template-hash":"5c7d9b8f6d","pod-template-hash":"0""#,
            ),
            (
                r#""gpu-fraction":"0.5""#,
                r#""gpu-fraction":"0.5","gpu-fraction":"0.3""#,
            ),
            ("\"labels\":{", r#""labels":{"kai.scheduler/queue":"q","#),
            (
                "\"annotations\":{",
                r#""annotations":{"gpu-fraction":"0.3","gpu-fraction":"0.5","#,
            ),
            (
                "\"annotations\":{",
                r#""annotations":{"gpu-fraction":"0.6","#,
            ),
            ("\"labels\":{", r#""labels":{"a":"\u0041","#),
            ("\"limits\":{", r#""limits":{"cpu":2,"memory":1e9,"#),
            ("\"requests\":{", r#""requests":{"cpu":"1\u0030m","#),
        ] {
            assert_same(text.replacen(from, to, 1).as_bytes(), &store);
        }
    }
}
