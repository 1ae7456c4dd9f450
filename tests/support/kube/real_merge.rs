//! The API server's field management, computed by the real thing: `tests/ssa-merge` (Go) runs
//! sigs.k8s.io/structured-merge-diff, the library the kube-apiserver's field manager uses, over
//! the Kubernetes schema kube-openapi's converter makes (built-in kinds) or a CRD's
//! `openAPIV3Schema` (custom kinds). One helper process per test process, JSON lines in and out.
//!
//! [`Store`] is a mock API server holding objects by path whose every write goes through it:
//! server-side apply (`application/apply-patch+yaml`), JSON Patch, JSON merge patch and
//! strategic merge patch (applied here, then an Update), each recorded in `managedFields` as
//! the API server records it.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::{Mutex, OnceLock};

use serde_json::{Value, json};

use super::{Recorded, Reply, status};

pub const APPLY: &str = "application/apply-patch+yaml";
pub const MERGE: &str = "application/merge-patch+json";
pub const STRATEGIC: &str = "application/strategic-merge-patch+json";
pub const JSON_PATCH: &str = "application/json-patch+json";

struct Helper {
    _child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

/// The helper binary: built by `scripts/build-ssa-merge` (which `scripts/test` runs), or here
/// when a test runs without it.
fn binary() -> PathBuf {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    let bin = target.join("ssa-merge").join("ssa-merge");
    if !bin.exists() {
        let out = Command::new(root.join("scripts/build-ssa-merge"))
            .arg(&bin)
            .output()
            .expect("scripts/build-ssa-merge runs");
        assert!(
            out.status.success(),
            "building the structured-merge-diff helper failed (run scripts/test --setup-only): {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    bin
}

fn helper() -> &'static Mutex<Helper> {
    static HELPER: OnceLock<Mutex<Helper>> = OnceLock::new();
    HELPER.get_or_init(|| {
        let mut child = Command::new(binary())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("the structured-merge-diff helper starts");
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Mutex::new(Helper {
            _child: child,
            stdin,
            stdout,
        })
    })
}

/// What the library refused: the message and, for a conflict, (manager, field) pairs.
#[derive(Clone, Debug, PartialEq)]
pub struct Refused {
    pub message: String,
    pub conflicts: Vec<(String, String)>,
}

fn call(request: Value) -> Result<Value, Refused> {
    let mut h = helper().lock().unwrap_or_else(|e| e.into_inner());
    let mut line = serde_json::to_vec(&request).unwrap();
    line.push(b'\n');
    h.stdin.write_all(&line).expect("write to the helper");
    h.stdin.flush().unwrap();
    let mut answer = String::new();
    h.stdout.read_line(&mut answer).expect("read the helper");
    let v: Value = serde_json::from_str(&answer)
        .unwrap_or_else(|e| panic!("the helper answered {answer:?}: {e}"));
    if let Some(o) = v.get("object") {
        return Ok(o.clone());
    }
    Err(Refused {
        message: v["error"].as_str().unwrap_or_default().to_string(),
        conflicts: v["conflicts"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| {
                (
                    c["manager"].as_str().unwrap_or_default().to_string(),
                    c["field"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect(),
    })
}

/// Server-side apply of `config` by `manager` onto `live` (`None`: a create).
pub fn apply(
    live: Option<&Value>,
    config: &Value,
    manager: &str,
    force: bool,
    time: &str,
    crd: Option<&Value>,
) -> Result<Value, Refused> {
    call(
        json!({"op": "apply", "manager": manager, "force": force, "time": time,
                "live": live, "object": config, "crd": crd}),
    )
}

/// An Update (PUT, or any non-apply PATCH once applied) of `live` to `new` by `manager`.
pub fn update(
    live: Option<&Value>,
    new: &Value,
    manager: &str,
    time: &str,
    crd: Option<&Value>,
) -> Result<Value, Refused> {
    call(json!({"op": "update", "manager": manager, "time": time,
                "live": live, "object": new, "crd": crd}))
}

/// A strategic merge patch as the API server applies it to the kinds kerf writes: maps merge
/// (`null` deletes), the lists with a patch merge key (containers by `name`) merge by it, other
/// lists are replaced.
pub fn strategic_merge(target: &mut Value, patch: &Value) {
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                    continue;
                }
                let merge_key = match k.as_str() {
                    "containers" | "initContainers" | "ephemeralContainers" | "env" => Some("name"),
                    _ => None,
                };
                match (t.get_mut(k), v, merge_key) {
                    (Some(Value::Array(have)), Value::Array(items), Some(key)) => {
                        for item in items {
                            match have.iter_mut().find(|h| h.get(key) == item.get(key)) {
                                Some(h) => strategic_merge(h, item),
                                None => have.push(item.clone()),
                            }
                        }
                    }
                    (Some(existing @ Value::Object(_)), Value::Object(_), _) => {
                        strategic_merge(existing, v)
                    }
                    _ => {
                        t.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (t, p) => *t = p.clone(),
    }
}

/// The manager of a request (`?fieldManager=`), and whether it forces.
fn manager_of(r: &Recorded) -> (String, bool) {
    let mut manager = String::new();
    let mut force = false;
    for p in r.query.split('&') {
        if let Some(m) = p.strip_prefix("fieldManager=") {
            manager = m.to_string();
        }
        force |= p == "force=true";
    }
    (manager, force)
}

/// The API server's validation of the fields these tests break: a container needs an image.
fn invalid(obj: &Value, template_path: &[&str]) -> Option<String> {
    let mut t = Some(obj);
    for step in template_path {
        t = t.and_then(|v| v.get(*step));
    }
    let spec = t?.get("spec")?;
    for list in ["containers", "initContainers"] {
        for (i, c) in spec[list].as_array().into_iter().flatten().enumerate() {
            if c.get("image")
                .is_none_or(|i| i.as_str().is_none_or(str::is_empty))
            {
                return Some(format!(
                    "spec.template.spec.{list}[{i}].image: Required value"
                ));
            }
        }
    }
    None
}

/// A mock API server whose objects live here and change only through the real merge.
#[derive(Default)]
pub struct Store {
    /// path → the object as the API server returns it (managedFields included).
    pub objects: BTreeMap<String, Value>,
    /// A path prefix (a custom resource's collection) → its CRD's `openAPIV3Schema`.
    pub schemas: BTreeMap<String, Value>,
    /// Template paths of the objects whose containers the API server validates.
    pub validated: BTreeMap<String, Vec<&'static str>>,
    /// The server's clock (RFC 3339): `time` of the managedFields entries a write changes.
    pub clock: String,
    pub events: Vec<Value>,
    /// Every write the merge library refused (conflicts, invalid objects): (path, message).
    pub refused: Vec<(String, String)>,
    pub resource_version: u64,
}

impl Store {
    pub fn new(clock: &str) -> Self {
        Self {
            clock: clock.to_string(),
            ..Self::default()
        }
    }

    fn schema_for(&self, path: &str) -> Option<&Value> {
        self.schemas
            .iter()
            .find(|(prefix, _)| path.starts_with(prefix.as_str()))
            .map(|(_, s)| s)
    }

    /// Writes `body` at `path` as `manager` would through the API (create when absent).
    pub fn write(
        &mut self,
        path: &str,
        content_type: &str,
        body: &Value,
        manager: &str,
        force: bool,
    ) -> Result<Value, Refused> {
        let crd = self.schema_for(path).cloned();
        let live = self.objects.get(path).cloned();
        let time = self.clock.clone();
        let result = match content_type {
            APPLY => apply(live.as_ref(), body, manager, force, &time, crd.as_ref()),
            _ => {
                let mut new = live.clone().unwrap_or_else(|| json!({}));
                if let Some(m) = new.get_mut("metadata").and_then(Value::as_object_mut) {
                    m.remove("managedFields");
                }
                match content_type {
                    MERGE => json_patch::merge(&mut new, body),
                    STRATEGIC => strategic_merge(&mut new, body),
                    JSON_PATCH => {
                        let ops: json_patch::Patch =
                            serde_json::from_value(body.clone()).map_err(|e| Refused {
                                message: format!("bad JSON Patch: {e}"),
                                conflicts: vec![],
                            })?;
                        json_patch::patch(&mut new, &ops).map_err(|e| Refused {
                            message: format!("the JSON Patch failed: {e}"),
                            conflicts: vec![],
                        })?;
                    }
                    _ => new = body.clone(),
                }
                update(live.as_ref(), &new, manager, &time, crd.as_ref())
            }
        };
        let mut obj = result?;
        if let Some(p) = self.validated.get(path)
            && let Some(message) = invalid(&obj, p)
        {
            return Err(Refused {
                message,
                conflicts: vec![],
            });
        }
        self.resource_version += 1;
        obj["metadata"]["resourceVersion"] = json!(self.resource_version.to_string());
        self.objects.insert(path.to_string(), obj.clone());
        Ok(obj)
    }

    /// The answer to one request: GET, PATCH (any type) and PUT of a stored object, POST of an
    /// Event. `None` for a path the store does not hold.
    pub fn answer(&mut self, r: &Recorded) -> Option<Reply> {
        let (manager, force) = manager_of(r);
        match r.method.as_str() {
            "GET" => self
                .objects
                .get(&r.path)
                .map(|o| Reply::Json(200, o.clone())),
            "PATCH" | "PUT" if self.objects.contains_key(&r.path) => {
                let ct = if r.method == "PUT" {
                    "put"
                } else {
                    r.content_type.as_str()
                };
                Some(match self.write(&r.path, ct, &r.body, &manager, force) {
                    Ok(o) => Reply::Json(200, o),
                    Err(e) => {
                        self.refused.push((r.path.clone(), e.message.clone()));
                        if e.conflicts.is_empty() {
                            status(422, "Invalid")
                        } else {
                            status(409, "Conflict")
                        }
                    }
                })
            }
            "POST" if r.path.ends_with("/events") => {
                self.events.push(r.body.clone());
                Some(Reply::Json(201, r.body.clone()))
            }
            _ => None,
        }
    }

    /// The object at `path`.
    pub fn get(&self, path: &str) -> &Value {
        self.objects
            .get(path)
            .unwrap_or_else(|| panic!("no object at {path}"))
    }

    /// The managers (name, operation) whose entry owns `fields` (a fieldsV1 path, e.g.
    /// `["f:spec", "f:template", …]`) on the object at `path`.
    pub fn owners(&self, path: &str, fields: &[&str]) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for e in self.get(path)["metadata"]["managedFields"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let mut v = Some(&e["fieldsV1"]);
            for f in fields {
                v = v.and_then(|x| x.get(*f));
            }
            if v.is_some() {
                out.push((
                    e["manager"].as_str().unwrap_or_default().to_string(),
                    e["operation"].as_str().unwrap_or_default().to_string(),
                ));
            }
        }
        out
    }
}
