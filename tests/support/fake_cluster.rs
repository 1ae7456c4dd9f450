//! A fake API server holding a fixed set of objects, for the read-only modes: discovery (enough
//! for `kubectl get`), list endpoints (cluster-wide and per namespace, paged one object per page
//! so clients must follow `continue`), and nothing else. A write or a watch is refused (405) and
//! recorded, so a test can assert none was attempted.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use axum::extract::Request;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// Where a kind is served: its group/version, plural, and whether it is namespaced.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Served {
    group_version: String,
    plural: String,
    kind: String,
    namespaced: bool,
}

/// The kinds the fake serves: the Kubernetes ones by their documented plural and scope, kerf's
/// from its CRDs.
fn served_kinds() -> Vec<Served> {
    let builtin = |gv: &str, plural: &str, kind: &str, namespaced: bool| Served {
        group_version: gv.into(),
        plural: plural.into(),
        kind: kind.into(),
        namespaced,
    };
    let mut out = vec![
        builtin("v1", "pods", "Pod", true),
        builtin("v1", "namespaces", "Namespace", false),
        builtin("apps/v1", "deployments", "Deployment", true),
        builtin("apps/v1", "statefulsets", "StatefulSet", true),
        builtin("apps/v1", "daemonsets", "DaemonSet", true),
        builtin("apps/v1", "replicasets", "ReplicaSet", true),
        builtin("batch/v1", "jobs", "Job", true),
        builtin("batch/v1", "cronjobs", "CronJob", true),
        builtin(
            "autoscaling/v2",
            "horizontalpodautoscalers",
            "HorizontalPodAutoscaler",
            true,
        ),
    ];
    // The controllers GPU inference runs under, as their CRDs serve them (docs/workloads.md).
    for (gv, plural, kind) in [
        (
            "serving.kserve.io/v1beta1",
            "inferenceservices",
            "InferenceService",
        ),
        ("serving.knative.dev/v1", "services", "Service"),
        ("serving.knative.dev/v1", "configurations", "Configuration"),
        ("serving.knative.dev/v1", "revisions", "Revision"),
        (
            "leaderworkerset.x-k8s.io/v1",
            "leaderworkersets",
            "LeaderWorkerSet",
        ),
        ("argoproj.io/v1alpha1", "rollouts", "Rollout"),
        ("ray.io/v1", "rayclusters", "RayCluster"),
        ("ray.io/v1", "rayservices", "RayService"),
        ("grove.io/v1alpha1", "podcliquesets", "PodCliqueSet"),
        ("grove.io/v1alpha1", "podcliques", "PodClique"),
    ] {
        out.push(builtin(gv, plural, kind, true));
    }
    for (_, crd) in kerf::api::crds() {
        out.push(Served {
            group_version: format!("{}/{}", crd.spec.group, crd.spec.versions[0].name),
            plural: crd.spec.names.plural.clone(),
            kind: crd.spec.names.kind.clone(),
            namespaced: crd.spec.scope == "Namespaced",
        });
    }
    out
}

/// A request the fake refused (anything but a list or discovery GET).
#[derive(Clone, Debug)]
pub struct Refused {
    pub method: String,
    pub path: String,
    pub query: String,
}

pub struct FakeCluster {
    pub addr: std::net::SocketAddr,
    refused: Arc<Mutex<Vec<Refused>>>,
    lists: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FakeCluster {
    fn drop(&mut self) {
        self.task.abort();
    }
}

struct State {
    kinds: Vec<Served>,
    /// Objects per (group/version, plural), ordered by (namespace, name) as etcd keys are.
    objects: BTreeMap<(String, String), Vec<Value>>,
    refused: Arc<Mutex<Vec<Refused>>>,
    lists: Arc<Mutex<Vec<String>>>,
}

impl FakeCluster {
    /// A fake serving `objects` (each with apiVersion, kind and metadata.name).
    pub async fn start(objects: Vec<Value>) -> Self {
        Self::serving(objects, served_kinds()).await
    }

    /// A cluster that also serves VerticalPodAutoscalers (the VPA CRD is installed; `start`'s
    /// cluster has none, as a cluster without VPA answers 404).
    pub async fn with_vpa_crd(objects: Vec<Value>) -> Self {
        let mut kinds = served_kinds();
        kinds.push(Served {
            group_version: "autoscaling.k8s.io/v1".into(),
            plural: "verticalpodautoscalers".into(),
            kind: "VerticalPodAutoscaler".into(),
            namespaced: true,
        });
        Self::serving(objects, kinds).await
    }

    /// A cluster where kerf's CRDs are not installed: its kinds are not served (404).
    pub async fn without_kerf_crds(objects: Vec<Value>) -> Self {
        let kinds = served_kinds()
            .into_iter()
            .filter(|k| !k.group_version.starts_with("rightsizing.kubex.ai/"))
            .collect();
        Self::serving(objects, kinds).await
    }

    async fn serving(objects: Vec<Value>, kinds: Vec<Served>) -> Self {
        let mut by_kind: BTreeMap<(String, String), Vec<Value>> = BTreeMap::new();
        for o in objects {
            let (gv, kind) = (
                o["apiVersion"].as_str().unwrap(),
                o["kind"].as_str().unwrap(),
            );
            let served = kinds
                .iter()
                .find(|s| s.group_version == gv && s.kind == kind)
                .unwrap_or_else(|| panic!("the fake does not serve {gv} {kind}"));
            by_kind
                .entry((served.group_version.clone(), served.plural.clone()))
                .or_default()
                .push(o);
        }
        for list in by_kind.values_mut() {
            let key = |o: &Value| {
                (
                    o["metadata"]["namespace"]
                        .as_str()
                        .unwrap_or("")
                        .to_string(),
                    o["metadata"]["name"].as_str().unwrap_or("").to_string(),
                )
            };
            list.sort_by_key(key);
        }
        let refused = Arc::new(Mutex::new(Vec::new()));
        let lists = Arc::new(Mutex::new(Vec::new()));
        let state = Arc::new(State {
            kinds,
            objects: by_kind,
            refused: refused.clone(),
            lists: lists.clone(),
        });
        let app = axum::Router::new().fallback(move |req: Request| {
            let state = state.clone();
            async move { state.answer(&req) }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self {
            addr,
            refused,
            lists,
            task,
        }
    }

    /// A kubeconfig for this fake (context `fake`, a bearer token).
    pub fn kubeconfig(&self, dir: &Path) -> PathBuf {
        let path = dir.join("kubeconfig");
        std::fs::write(
            &path,
            format!(
                "apiVersion: v1\nkind: Config\n\
                 clusters:\n- name: fake\n  cluster:\n    server: http://{}\n\
                 users:\n- name: reader\n  user:\n    token: fake-token\n\
                 contexts:\n- name: fake\n  context:\n    cluster: fake\n    user: reader\n\
                 current-context: fake\n",
                self.addr
            ),
        )
        .unwrap();
        path
    }

    /// Every request refused (a write, a watch, an unknown path).
    pub fn refused(&self) -> Vec<Refused> {
        self.refused.lock().unwrap().clone()
    }

    /// The list requests answered (paths with their query).
    pub fn lists(&self) -> Vec<String> {
        self.lists.lock().unwrap().clone()
    }
}

fn json_answer(code: u16, v: Value) -> Response {
    (
        StatusCode::from_u16(code).unwrap(),
        [(header::CONTENT_TYPE, "application/json")],
        serde_json::to_vec(&v).unwrap(),
    )
        .into_response()
}

fn status(code: u16, reason: &str, message: &str) -> Response {
    json_answer(
        code,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": message, "reason": reason, "code": code}),
    )
}

fn param<'a>(query: &'a str, name: &str) -> Option<&'a str> {
    query
        .split('&')
        .find_map(|p| p.strip_prefix(name)?.strip_prefix('='))
}

impl State {
    fn answer(&self, req: &Request) -> Response {
        let (method, path) = (req.method().as_str(), req.uri().path());
        let query = req.uri().query().unwrap_or("");
        let refuse = |why: &str| {
            self.refused.lock().unwrap().push(Refused {
                method: method.into(),
                path: path.into(),
                query: query.into(),
            });
            status(405, "MethodNotAllowed", why)
        };
        if method != "GET" {
            return refuse("the fake cluster is read-only");
        }
        if param(query, "watch").is_some_and(|w| w == "true" || w == "1") {
            return refuse("the fake cluster serves no watches");
        }
        if let Some(d) = self.discovery(path) {
            return json_answer(200, d);
        }
        match self.list(path, query) {
            Some(r) => r,
            // As the API server answers a path nothing serves (a CRD not installed).
            None => (
                StatusCode::NOT_FOUND,
                [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
                "404 page not found",
            )
                .into_response(),
        }
    }

    fn group_versions(&self) -> Vec<String> {
        let mut gvs: Vec<String> = self.kinds.iter().map(|k| k.group_version.clone()).collect();
        gvs.sort();
        gvs.dedup();
        gvs
    }

    fn discovery(&self, path: &str) -> Option<Value> {
        let resources = |gv: &str| {
            let list: Vec<Value> = self
                .kinds
                .iter()
                .filter(|k| k.group_version == gv)
                .map(|k| {
                    json!({"name": k.plural, "singularName": "", "namespaced": k.namespaced,
                           "kind": k.kind, "verbs": ["get", "list"]})
                })
                .collect();
            json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv,
                   "resources": list})
        };
        match path {
            "/version" => Some(json!({"major": "1", "minor": "32", "gitVersion": "v1.32.0"})),
            "/api" => Some(json!({"kind": "APIVersions", "versions": ["v1"],
                                  "serverAddressByClientCIDRs": []})),
            "/apis" => {
                let groups: Vec<Value> = self
                    .group_versions()
                    .into_iter()
                    .filter_map(|gv| {
                        let (g, v) = gv.split_once('/')?;
                        let version = json!({"groupVersion": gv, "version": v});
                        Some(json!({"name": g, "versions": [version],
                                    "preferredVersion": version}))
                    })
                    .collect();
                Some(json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}))
            }
            "/api/v1" => Some(resources("v1")),
            p => {
                let gv = p.strip_prefix("/apis/")?;
                self.group_versions()
                    .contains(&gv.to_string())
                    .then(|| resources(gv))
            }
        }
    }

    /// `/api/v1[/namespaces/NS]/PLURAL` or `/apis/G/V[/namespaces/NS]/PLURAL`, one object per
    /// page.
    fn list(&self, path: &str, query: &str) -> Option<Response> {
        let rest = path
            .strip_prefix("/api/")
            .map(|r| r.to_string())
            .or_else(|| path.strip_prefix("/apis/").map(|r| r.to_string()))?;
        let parts: Vec<&str> = rest.split('/').collect();
        let (gv, namespace, plural) = match (path.starts_with("/api/"), parts.as_slice()) {
            (true, [v, plural]) => (v.to_string(), None, *plural),
            (true, [v, "namespaces", ns, plural]) => (v.to_string(), Some(*ns), *plural),
            (false, [g, v, plural]) => (format!("{g}/{v}"), None, *plural),
            (false, [g, v, "namespaces", ns, plural]) => (format!("{g}/{v}"), Some(*ns), *plural),
            _ => return None,
        };
        let served = self
            .kinds
            .iter()
            .find(|k| k.group_version == gv && k.plural == plural)?;
        if namespace.is_some() && !served.namespaced {
            return None;
        }
        self.lists.lock().unwrap().push(format!("{path}?{query}"));
        let all: Vec<&Value> = self
            .objects
            .get(&(gv.clone(), plural.to_string()))
            .map(|v| v.iter().collect())
            .unwrap_or_default();
        let matching: Vec<&Value> = all
            .into_iter()
            .filter(|o| namespace.is_none_or(|ns| o["metadata"]["namespace"] == ns))
            .collect();
        let start: usize = param(query, "continue").map_or(0, |c| c.parse().unwrap());
        let page: Vec<Value> = matching
            .iter()
            .skip(start)
            .take(1)
            .map(|o| {
                // As the API server lists them: without their type (the list has it).
                let mut o = (*o).clone();
                let map = o.as_object_mut().unwrap();
                map.remove("apiVersion");
                map.remove("kind");
                o
            })
            .collect();
        let next = start + page.len();
        let mut metadata = json!({"resourceVersion": "7"});
        if next < matching.len() {
            metadata["continue"] = json!(next.to_string());
        }
        Some(json_answer(
            200,
            json!({"kind": format!("{}List", served.kind), "apiVersion": gv,
                   "metadata": metadata, "items": page}),
        ))
    }
}

/// Every object of the YAML files under `dir` (the shipped examples' form), in file order.
pub fn objects_of(dir: &Path) -> Vec<Value> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    let mut out = Vec::new();
    for f in files {
        let docs: Vec<Value> =
            serde_saphyr::from_multiple(&std::fs::read_to_string(&f).unwrap()).unwrap();
        out.extend(docs.into_iter().filter(|d| !d.is_null()));
    }
    out
}
