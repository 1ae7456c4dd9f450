//! Reaching a Prometheus that is not plain HTTP without credentials — every connection setting
//! against a real server, no mocks: a Prometheus started with `--web.config.file` (TLS from a
//! test CA, basic auth, client certificates), a small authenticating proxy in front of one
//! (bearer tokens, headers, query parameters), a Prometheus holding two clusters' series (the
//! cluster label), the real `kerf` binary for the flags and their environment variables.
//! Needs `prometheus` and `promtool` (`scripts/test` installs them).

use crate::auth_proxy;
use crate::kerf_cli;
use crate::pki;
use crate::prometheus_support;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use auth_proxy::AuthProxy;
use base64::Engine as _;
use jiff::Timestamp;
use kerf::api::{
    OptionNames, PrometheusBasicAuth, PrometheusSettings, PrometheusTls, WorkloadKind,
};
use kerf::core::model::WorkloadKey;
use kerf::metrics::file::FileSource;
use kerf::metrics::prometheus::PrometheusSource;
use kerf::metrics::{MetricError, MetricSource, RangeQuery};
use kerf::reconcile::standalone::{DirLoop, Evaluated};
use kerf_cli::{AT, kerf_recommend, recommend, root, stderr};
use pki::TestPki;
use prometheus_support::{TestPrometheus, WebConfig};
use serde_json::Value;

const PASSWORD: &str = "basic-pw-7Hq2";
const WRONG_PASSWORD: &str = "wrong-pw-Zx81";
/// The two shipped examples: GPU (examples/manifests) and CPU/memory with an HPA.
const EXAMPLES: [(&str, &str); 2] = [
    ("examples/manifests", "examples/metrics.om"),
    ("examples/hpa/manifests", "examples/hpa/metrics.om"),
];

fn at() -> Timestamp {
    AT.parse().unwrap()
}

fn read(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap()
}

fn arg(p: &Path) -> String {
    p.display().to_string()
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// A run whose queries all failed: the recommendations are printed (the last ones stay),
/// stderr says why, and the exit code is not 0 (nothing was read at all).
fn failed_queries(manifests: &str, args: &[&str], env: &[(&str, &str)]) -> String {
    let out = kerf_recommend(manifests, args, env);
    let err = stderr(&out);
    assert!(!out.status.success(), "{args:?}: {err}");
    assert!(err.contains("every metric query failed"), "{args:?}: {err}");
    assert!(err.contains("query failed"), "{args:?}: {err}");
    assert!(
        !out.stdout.is_empty(),
        "{args:?}: the output is still printed"
    );
    err
}

fn secured(pki: &TestPki, metrics: &str, client_ca: bool) -> TestPrometheus {
    TestPrometheus::start_secured(
        &read(metrics),
        &WebConfig {
            tls: Some((pki.server_cert.clone(), pki.server_key.clone())),
            client_ca: client_ca.then(|| pki.ca.clone()),
            users: vec![("kerf".into(), PASSWORD.into())],
        },
    )
}

#[test]
fn tls_and_basic_auth_give_the_file_sources_answers_on_the_shipped_examples() {
    let pki = TestPki::new();
    let password = write(pki.dir(), "password", &format!("{PASSWORD}\n"));
    let (ca, password) = (arg(&pki.ca), arg(&password));
    for (manifests, metrics) in EXAMPLES {
        let prom = secured(&pki, metrics, false);
        let url = prom.url();
        assert!(url.starts_with("https://"), "{url}");
        let from_file = recommend(manifests, &["--metrics", metrics], &[]);
        let flags = [
            "--prometheus",
            &url,
            "--prometheus-ca-file",
            &ca,
            "--prometheus-basic-auth-user",
            "kerf",
            "--prometheus-basic-auth-password-file",
            &password,
        ];
        assert_eq!(recommend(manifests, &flags, &[]), from_file, "{manifests}");
        let env = [
            ("KERF_PROMETHEUS", url.as_str()),
            ("KERF_PROMETHEUS_CA_FILE", ca.as_str()),
            ("KERF_PROMETHEUS_BASIC_AUTH_USER", "kerf"),
            (
                "KERF_PROMETHEUS_BASIC_AUTH_PASSWORD_FILE",
                password.as_str(),
            ),
        ];
        assert_eq!(recommend(manifests, &[], &env), from_file, "{manifests}");
    }
}

#[test]
fn the_secured_prometheus_refuses_what_lacks_the_ca_or_the_credentials() {
    let pki = TestPki::new();
    let password = arg(&write(pki.dir(), "password", PASSWORD));
    let prom = secured(&pki, "examples/metrics.om", false);
    let url = prom.url();
    let (manifests, ca, other) = ("examples/manifests", arg(&pki.ca), arg(&pki.other_ca));

    // The system roots, or a CA that signed nothing here, do not trust the test CA.
    for trust in [vec![], vec!["--prometheus-ca-file", other.as_str()]] {
        let mut args = vec!["--prometheus", url.as_str()];
        args.extend(trust);
        let err = failed_queries(manifests, &args, &[]);
        assert!(err.contains("UnknownIssuer"), "{err}");
    }
    // Trusted, but no credentials: a clear "unauthorized" that says none were sent.
    let err = failed_queries(
        manifests,
        &["--prometheus", &url, "--prometheus-ca-file", &ca],
        &[],
    );
    assert!(
        err.contains("unauthorized: HTTP 401 Unauthorized")
            && err.contains("kerf sent no credentials"),
        "{err}"
    );
    // The wrong password: unauthorized, naming the file, never the password.
    let wrong = arg(&write(pki.dir(), "wrong", WRONG_PASSWORD));
    let err = failed_queries(
        manifests,
        &[
            "--prometheus",
            &url,
            "--prometheus-ca-file",
            &ca,
            "--prometheus-basic-auth-user",
            "kerf",
            "--prometheus-basic-auth-password-file",
            &wrong,
        ],
        &[],
    );
    assert!(
        err.contains("unauthorized")
            && err.contains(&format!("--prometheus-basic-auth-password-file {wrong}")),
        "{err}"
    );
    assert!(
        !err.contains(WRONG_PASSWORD) && !err.contains(PASSWORD),
        "{err}"
    );
    // The right one works (and the password file may lack a final newline).
    recommend(
        manifests,
        &[
            "--prometheus",
            &url,
            "--prometheus-ca-file",
            &ca,
            "--prometheus-basic-auth-user",
            "kerf",
            "--prometheus-basic-auth-password-file",
            &password,
        ],
        &[],
    );
}

#[test]
fn mutual_tls_sends_the_client_certificate() {
    let pki = TestPki::new();
    let password = arg(&write(pki.dir(), "password", PASSWORD));
    let (ca, cert, key) = (arg(&pki.ca), arg(&pki.client_cert), arg(&pki.client_key));
    let (manifests, metrics) = EXAMPLES[1];
    let prom = secured(&pki, metrics, true);
    let url = prom.url();
    let base = [
        "--prometheus",
        url.as_str(),
        "--prometheus-ca-file",
        &ca,
        "--prometheus-basic-auth-user",
        "kerf",
        "--prometheus-basic-auth-password-file",
        &password,
    ];
    // Without a client certificate the handshake is refused.
    let err = failed_queries(manifests, &base, &[]);
    assert!(err.contains("metric source unavailable"), "{err}");
    assert!(!err.contains(PASSWORD), "{err}");

    let from_file = recommend(manifests, &["--metrics", metrics], &[]);
    let mut flags = base.to_vec();
    flags.extend([
        "--prometheus-client-cert",
        &cert,
        "--prometheus-client-key",
        &key,
    ]);
    assert_eq!(recommend(manifests, &flags, &[]), from_file);
    let env = [
        ("KERF_PROMETHEUS_CLIENT_CERT", cert.as_str()),
        ("KERF_PROMETHEUS_CLIENT_KEY", key.as_str()),
    ];
    assert_eq!(recommend(manifests, &base, &env), from_file);
}

#[test]
fn insecure_skip_verify_accepts_an_unknown_ca_and_warns_at_start() {
    let pki = TestPki::new();
    let password = arg(&write(pki.dir(), "password", PASSWORD));
    let (manifests, metrics) = EXAMPLES[0];
    let prom = secured(&pki, metrics, false);
    let url = prom.url();
    let auth = [
        "--prometheus",
        url.as_str(),
        "--prometheus-basic-auth-user",
        "kerf",
        "--prometheus-basic-auth-password-file",
        &password,
    ];
    let err = failed_queries(manifests, &auth, &[]);
    assert!(err.contains("UnknownIssuer"), "{err}");

    let from_file = recommend(manifests, &["--metrics", metrics], &[]);
    let mut flags = auth.to_vec();
    flags.push("--prometheus-insecure-skip-verify");
    for (args, env) in [
        (flags.as_slice(), vec![]),
        (
            &auth[..],
            vec![("KERF_PROMETHEUS_INSECURE_SKIP_VERIFY", "true")],
        ),
    ] {
        let out = kerf_recommend(manifests, args, &env);
        let err = stderr(&out);
        assert!(
            out.status.success() && !err.contains("query failed"),
            "{err}"
        );
        let warning = err
            .lines()
            .find(|l| {
                l.contains(" WARN ") && l.contains("--prometheus-insecure-skip-verify is set")
            })
            .unwrap_or_else(|| panic!("no start-up warning:\n{err}"));
        assert!(warning.contains("is not verified"), "{warning}");
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v, from_file);
    }
}

fn settings(url: &str) -> PrometheusSettings {
    PrometheusSettings {
        url: url.to_string(),
        ..PrometheusSettings::default()
    }
}

fn basic_auth(pki: &TestPki, url: &str, password_file: &Path) -> PrometheusSettings {
    PrometheusSettings {
        basic_auth: Some(PrometheusBasicAuth {
            user: "kerf".into(),
            password_file: arg(password_file),
        }),
        tls: Some(PrometheusTls {
            ca_file: Some(arg(&pki.ca)),
            ..PrometheusTls::default()
        }),
        ..settings(url)
    }
}

fn condition(dir_loop: &DirLoop, e: &Evaluated, type_: &str) -> (String, String) {
    let id = e
        .snapshot
        .gpu_policies
        .first()
        .map(|p| &p.id)
        .or_else(|| e.snapshot.rightsizing_policies.first().map(|p| &p.id))
        .unwrap();
    let status = dir_loop.writer().policy_status(id).cloned().unwrap();
    let c = status
        .conditions
        .into_iter()
        .find(|c| c.type_ == type_)
        .unwrap();
    (c.status, c.message)
}

/// Good credentials, then wrong ones, through one reconcile loop over the shipped examples
/// (as `dir_loop_feeds_its_own_writes_to_the_next_cycle` does with a dead source): the policy
/// says "unauthorized", the recommendations written by the first cycle stay in force.
#[tokio::test]
async fn wrong_credentials_say_unauthorized_and_keep_the_last_recommendations() {
    let pki = TestPki::new();
    let good = write(pki.dir(), "good", PASSWORD);
    let wrong = write(pki.dir(), "wrong", WRONG_PASSWORD);
    let store = kerf::state::Store::new();

    // GPU
    let prom = secured(&pki, EXAMPLES[0].1, false);
    let with_good =
        PrometheusSource::connect(&basic_auth(&pki, &prom.url(), &good), OptionNames::Fields)
            .unwrap();
    let with_wrong =
        PrometheusSource::connect(&basic_auth(&pki, &prom.url(), &wrong), OptionNames::Fields)
            .unwrap();
    let mut dir_loop = DirLoop::new(root().join(EXAMPLES[0].0));
    let llm = WorkloadKey::new("ml", WorkloadKind::Deployment, "llm");
    let result = |e: &Evaluated| {
        e.cycle
            .gpu_results()
            .find(|r| r.key == llm)
            .cloned()
            .unwrap()
    };

    let first = dir_loop
        .run_once(&with_good, at(), 15, &store)
        .await
        .unwrap();
    assert_eq!(result(&first).action.as_str(), "upsize");
    assert_eq!(
        condition(&dir_loop, &first, "PrometheusAvailable").0,
        "True"
    );

    let refused = dir_loop
        .run_once(&with_wrong, at(), 15, &store)
        .await
        .unwrap();
    let r = result(&refused);
    assert!(r.metrics_unavailable);
    assert_eq!(
        r.action.as_str(),
        "reuse",
        "the first cycle's recommendation is read back"
    );
    assert!((r.recommendation.as_ref().unwrap().containers["inference"] - 0.84).abs() < 1e-9);
    let (status, message) = condition(&dir_loop, &refused, "PrometheusAvailable");
    assert_eq!(status, "False");
    assert!(
        message.contains("query failed: unauthorized: HTTP 401 Unauthorized")
            && message.contains(&format!(
                "spec.prometheus.basicAuth.passwordFile {}",
                wrong.display()
            ))
            && message.ends_with("the last recommendations stay in force"),
        "{message}"
    );
    assert!(
        !message.contains(WRONG_PASSWORD) && !message.contains(PASSWORD),
        "{message}"
    );
    let served = store.get(&llm).unwrap();
    assert!((served.gpu.as_ref().unwrap().containers["inference"] - 0.84).abs() < 1e-9);

    // CPU/memory and the coordinated HPA target
    let prom = secured(&pki, EXAMPLES[1].1, false);
    let with_good =
        PrometheusSource::connect(&basic_auth(&pki, &prom.url(), &good), OptionNames::Fields)
            .unwrap();
    let with_wrong =
        PrometheusSource::connect(&basic_auth(&pki, &prom.url(), &wrong), OptionNames::Fields)
            .unwrap();
    let mut dir_loop = DirLoop::new(root().join(EXAMPLES[1].0));
    let web = WorkloadKey::new("shop", WorkloadKind::Deployment, "web");
    dir_loop
        .run_once(&with_good, at(), 15, &store)
        .await
        .unwrap();
    let before = store.get(&web).expect("web served");
    assert_eq!(before.resources["app"].cpu_millis, Some(700));
    let refused = dir_loop
        .run_once(&with_wrong, at(), 15, &store)
        .await
        .unwrap();
    assert!(
        refused
            .cycle
            .resource_results()
            .all(|r| r.metrics_unavailable)
    );
    let (status, message) = condition(&dir_loop, &refused, "PrometheusAvailable");
    assert_eq!(status, "False");
    assert!(message.contains("unauthorized"), "{message}");
    assert_eq!(
        *store.get(&web).unwrap(),
        *before,
        "still served: 700m and HPA target 71"
    );
}

fn gpu_query() -> RangeQuery {
    RangeQuery {
        metric: "kubex_gpu_container_sm_utilization_percent".into(),
        namespace_label: "namespace".into(),
        pod_label: "pod".into(),
        container_label: "container".into(),
        namespaces: vec!["ml".into()],
        pods: Default::default(),
        start: Timestamp::from_second(1_767_268_800 - 3600).unwrap(),
        end: Timestamp::from_second(1_767_268_800).unwrap(),
        step_seconds: 15,
        counter: None,
        aggregation: Default::default(),
        matchers: Vec::new(),
    }
}

#[tokio::test]
async fn the_bearer_token_is_sent_and_a_rewritten_token_file_is_picked_up() {
    let text = read("examples/metrics.om");
    let prom = TestPrometheus::start_with_openmetrics(&text);
    let proxy = AuthProxy::start(&prom.url(), Some("token-one"));
    let dir = tempfile::tempdir().unwrap();
    let token = write(dir.path(), "token", "token-one\n");
    let source = PrometheusSource::connect(
        &PrometheusSettings {
            bearer_token_file: Some(arg(&token)),
            ..settings(&proxy.url())
        },
        OptionNames::Flags,
    )
    .unwrap();
    let file = FileSource::from_str(&text)
        .unwrap()
        .with_semantics(prom.file_semantics());
    let expected = file.range_query(&gpu_query()).await.unwrap();
    assert!(!expected.series.is_empty());

    assert_eq!(source.range_query(&gpu_query()).await.unwrap(), expected);
    let seen = proxy.seen();
    let paths: Vec<&str> = seen.iter().map(|s| s.path.as_str()).collect();
    assert_eq!(
        paths,
        ["/api/v1/metadata", "/api/v1/query_range"],
        "both carry the token"
    );
    for s in &seen {
        assert!(s.accepted, "{s:?}");
        assert_eq!(s.headers["authorization"], "Bearer token-one");
    }

    // The token rotates: the file is rewritten and the server accepts only the new one.
    write(dir.path(), "token", "token-two\n");
    proxy.accept_only("token-two");
    proxy.clear();
    assert_eq!(source.range_query(&gpu_query()).await.unwrap(), expected);
    let seen = proxy.seen();
    assert_eq!(seen.len(), 1, "metadata is cached: {seen:?}");
    assert!(seen[0].accepted);
    assert_eq!(seen[0].headers["authorization"], "Bearer token-two");

    // A token the server no longer accepts: unauthorized, naming the file, not the token.
    proxy.accept_only("token-three");
    match source.range_query(&gpu_query()).await {
        Err(e @ MetricError::Unauthorized(_)) => {
            let m = e.to_string();
            assert!(
                m.starts_with("unauthorized: HTTP 401 Unauthorized from http://127.0.0.1:")
                    && m.contains(&format!(
                        "the bearer token read from --prometheus-bearer-token-file {}",
                        token.display()
                    )),
                "{m}"
            );
            assert!(!m.contains("token-two"), "{m}");
        }
        other => panic!("expected Unauthorized, got {other:?}"),
    }
    // A token file that went away is an error naming the flag, not a request without it.
    std::fs::remove_file(&token).unwrap();
    proxy.clear();
    let e = source.range_query(&gpu_query()).await.unwrap_err();
    assert!(
        e.to_string().starts_with(&format!(
            "--prometheus-bearer-token-file {}: cannot read",
            token.display()
        )),
        "{e}"
    );
    assert!(proxy.seen().is_empty(), "nothing sent without the token");
}

#[test]
fn headers_and_query_parameters_reach_the_server_on_every_request() {
    let (manifests, metrics) = EXAMPLES[0];
    let prom = TestPrometheus::start_with_openmetrics(&read(metrics));
    // With a bearer token too: the headers go with the credentials, not instead of them.
    let proxy = AuthProxy::start(&prom.url(), Some("hdr-token"));
    let dir = tempfile::tempdir().unwrap();
    let token = arg(&write(dir.path(), "token", "hdr-token"));
    let from_file = recommend(manifests, &["--metrics", metrics], &[]);
    let url = proxy.url();
    let by_flags = [
        "--prometheus",
        url.as_str(),
        "--prometheus-bearer-token-file",
        &token,
        "--prometheus-header",
        "X-Scope-OrgID: team-a",
        "--prometheus-header",
        "X-Kerf-Test:  two words ",
        "--prometheus-query-param",
        "dedup=true",
        "--prometheus-query-param",
        "partial_response=false",
    ];
    let by_env = [
        ("KERF_PROMETHEUS", url.as_str()),
        ("KERF_PROMETHEUS_BEARER_TOKEN_FILE", &token),
        (
            "KERF_PROMETHEUS_HEADER",
            "X-Scope-OrgID: team-a\nX-Kerf-Test: two words",
        ),
        (
            "KERF_PROMETHEUS_QUERY_PARAM",
            "dedup=true&partial_response=false",
        ),
    ];
    for (args, env) in [(&by_flags[..], &[][..]), (&[][..], &by_env[..])] {
        proxy.clear();
        assert_eq!(recommend(manifests, args, env), from_file);
        let seen = proxy.seen();
        assert!(
            seen.iter().any(|s| s.path == "/api/v1/metadata")
                && seen.iter().any(|s| s.path == "/api/v1/query_range"),
            "{seen:?}"
        );
        for s in &seen {
            assert!(s.accepted, "{s:?}");
            assert_eq!(s.headers["x-scope-orgid"], "team-a", "{s:?}");
            assert_eq!(s.headers["x-kerf-test"], "two words", "{s:?}");
            let query = s.query_pairs();
            for (k, v) in [("dedup", "true"), ("partial_response", "false")] {
                assert!(query.contains(&(k.into(), v.into())), "{s:?}");
            }
            if s.path == "/api/v1/query_range" {
                let form: Vec<String> = s.form_pairs().into_iter().map(|(k, _)| k).collect();
                assert_eq!(form, ["query", "start", "end", "step", "timeout"], "{s:?}");
            }
        }
    }
}

/// The example's series twice: cluster "a" as shipped, cluster "b" with every value halved.
fn two_clusters(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        if line.starts_with('#') || line.is_empty() {
            if line != "# EOF" {
                out += line;
                out.push('\n');
            }
            continue;
        }
        let (series, rest) = line.split_once("} ").expect("a sample with labels");
        let (value, ts) = rest.split_once(' ').expect("a timestamp");
        let (name, labels) = series.split_once('{').unwrap();
        let halved: f64 = value.parse::<f64>().unwrap() / 2.0;
        out += &format!("{name}{{cluster=\"a\",{labels}}} {value} {ts}\n");
        out += &format!("{name}{{cluster=\"b\",{labels}}} {halved} {ts}\n");
    }
    out + "# EOF\n"
}

#[test]
fn the_cluster_label_selects_one_cluster_of_a_shared_prometheus() {
    for (manifests, metrics) in EXAMPLES {
        let prom = TestPrometheus::start_with_openmetrics(&two_clusters(&read(metrics)));
        let url = prom.url();
        let from_file = recommend(manifests, &["--metrics", metrics], &[]);
        let cluster = |label: &str| {
            recommend(
                manifests,
                &["--prometheus", &url, "--prometheus-cluster-label", label],
                &[],
            )
        };
        assert_eq!(cluster("cluster=a"), from_file, "{manifests}");
        assert_ne!(
            cluster("cluster=b"),
            from_file,
            "{manifests}: b is another cluster"
        );
        let env = [("KERF_PROMETHEUS_CLUSTER_LABEL", "cluster=a")];
        assert_eq!(
            recommend(manifests, &["--prometheus", &url], &env),
            from_file
        );
        // Without the label both clusters' series are summed: not this cluster's answer.
        assert_ne!(
            recommend(manifests, &["--prometheus", &url], &[]),
            from_file,
            "{manifests}"
        );
    }
}

/// `kerf serve --standalone` with `args`; returns its exit status and stderr (it must stop).
fn kerf_serve_exit(args: &[&str], env: &[(&str, &str)], pki: &TestPki) -> (Option<i32>, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_kerf"))
        .args([
            "serve",
            "--standalone",
            "--manifests",
            "examples/manifests",
            "--at",
            AT,
        ])
        .args(["--listen", "127.0.0.1:0", "--health-listen", "127.0.0.1:0"])
        .args([
            "--tls-cert",
            &arg(&pki.server_cert),
            "--tls-key",
            &arg(&pki.server_key),
        ])
        .args(args)
        .envs(env.iter().copied())
        .current_dir(root())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let out = child.wait_with_output().unwrap();
            return (status.code(), stderr(&out));
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!("kerf serve {args:?} did not stop:\n{}", stderr(&out));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// (URL, flags, environment, what the message must contain)
type Case<'a> = (&'a str, Vec<&'a str>, Vec<(&'a str, &'a str)>, String);

#[test]
fn invalid_connection_settings_fail_at_start_naming_the_flag() {
    let pki = TestPki::new();
    let dir = pki.dir();
    let (ca, cert, key) = (arg(&pki.ca), arg(&pki.client_cert), arg(&pki.client_key));
    let token = arg(&write(dir, "token", "a-token-Qv3\n"));
    let password = arg(&write(dir, "password", PASSWORD));
    let empty = arg(&write(dir, "empty", "\n"));
    let not_pem = arg(&write(dir, "not-pem", "hello"));
    let missing = arg(&dir.join("missing"));
    let https = "https://127.0.0.1:1";
    let http = "http://127.0.0.1:1";
    // Flags after `--prometheus https://127.0.0.1:1`, and what the message must contain.
    let pem_error =
        format!("--prometheus-client-key {not_pem}: not a PEM certificate and private key");
    let flag_cases: [(&[&str], &str); 18] = [
        (
            &["--prometheus-client-cert", &cert],
            "--prometheus-client-key: is required with --prometheus-client-cert",
        ),
        (
            &["--prometheus-client-key", &key],
            "--prometheus-client-cert: is required with --prometheus-client-key",
        ),
        (
            &[
                "--prometheus-client-cert",
                &ca,
                "--prometheus-client-key",
                &not_pem,
            ],
            &pem_error,
        ),
        (
            &["--prometheus-ca-file", &missing],
            "--prometheus-ca-file {missing}: cannot read",
        ),
        (
            &["--prometheus-ca-file", &not_pem],
            "--prometheus-ca-file {not_pem}: no PEM certificate",
        ),
        (
            &[
                "--prometheus-ca-file",
                &ca,
                "--prometheus-insecure-skip-verify",
            ],
            "--prometheus-insecure-skip-verify: ignores --prometheus-ca-file",
        ),
        (
            &["--prometheus-bearer-token-file", &missing],
            "--prometheus-bearer-token-file {missing}: cannot read",
        ),
        (
            &["--prometheus-bearer-token-file", &empty],
            "--prometheus-bearer-token-file {empty}: the file is empty",
        ),
        (
            &["--prometheus-basic-auth-user", "kerf"],
            "--prometheus-basic-auth-password-file is required with --prometheus-basic-auth-user",
        ),
        (
            &[
                "--prometheus-basic-auth-user",
                "kerf",
                "--prometheus-basic-auth-password-file",
                &missing,
            ],
            "--prometheus-basic-auth-password-file {missing}: cannot read",
        ),
        (
            &[
                "--prometheus-bearer-token-file",
                &token,
                "--prometheus-basic-auth-user",
                "kerf",
                "--prometheus-basic-auth-password-file",
                &password,
            ],
            "--prometheus-basic-auth-user: excludes --prometheus-bearer-token-file",
        ),
        (
            &["--prometheus-header", "X-Scope-OrgID team-a"],
            "--prometheus-header: expected 'Name: value'",
        ),
        (
            &[
                "--prometheus-header",
                "Authorization: Bearer inline-Secret-9",
            ],
            "--prometheus-header: Authorization is set from --prometheus-bearer-token-file",
        ),
        (
            &["--prometheus-header", "X Bad: v"],
            "--prometheus-header: \"X Bad\" is not an HTTP header name",
        ),
        (
            &["--prometheus-query-param", "dedup"],
            "--prometheus-query-param: expected key=value",
        ),
        (
            &["--prometheus-query-param", "step=60"],
            "--prometheus-query-param: \"step\" is set by kerf itself",
        ),
        (
            &["--prometheus-cluster-label", "k8s-cluster=a"],
            "--prometheus-cluster-label: \"k8s-cluster\" is not a Prometheus label name",
        ),
        (
            &["--prometheus-cluster-label", "cluster"],
            "--prometheus-cluster-label: expected name=value",
        ),
    ];
    let mut cases: Vec<Case> = flag_cases
        .iter()
        .map(|(flags, want)| {
            let want = want
                .replace("{missing}", &missing)
                .replace("{not_pem}", &not_pem)
                .replace("{empty}", &empty);
            (https, flags.to_vec(), vec![], want)
        })
        .collect();
    // …with another URL, or through the environment.
    cases.push((
        https,
        vec![],
        vec![("KERF_PROMETHEUS_CLIENT_CERT", &cert)],
        "--prometheus-client-key: is required".into(),
    ));
    cases.push((
        http,
        vec!["--prometheus-ca-file", &ca],
        vec![],
        "--prometheus-ca-file: needs an https:// URL".into(),
    ));
    cases.push((
        "https://kerf:pw@127.0.0.1:1",
        vec!["--prometheus-bearer-token-file", &token],
        vec![],
        "--prometheus-bearer-token-file: the URL (--prometheus) carries credentials already".into(),
    ));
    for (url, flags, env, want) in &cases {
        let mut args = vec!["--prometheus", url];
        args.extend(flags.iter().copied());
        let out = kerf_recommend("examples/manifests", &args, env);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "recommend {args:?}: {err}");
        let (code, serve_err) = kerf_serve_exit(&args, env, &pki);
        assert_eq!(code, Some(1), "serve {args:?}: {serve_err}");
        for text in [&err, &serve_err] {
            assert!(
                text.contains(want),
                "{args:?} {env:?}: want {want:?} in:\n{text}"
            );
            for secret in [PASSWORD, "a-token-Qv3", "inline-Secret-9", "team-a", "pw@"] {
                assert!(!text.contains(secret), "{args:?}: {secret} shown:\n{text}");
            }
        }
    }
    // Connection flags need --prometheus: refused with --metrics, by flag and by variable.
    for (args, env) in [
        (
            vec![
                "--metrics",
                "examples/metrics.om",
                "--prometheus-ca-file",
                &ca,
            ],
            vec![],
        ),
        (
            vec![
                "--metrics",
                "examples/metrics.om",
                "--prometheus-insecure-skip-verify",
            ],
            vec![],
        ),
        (
            vec!["--metrics", "examples/metrics.om"],
            vec![("KERF_PROMETHEUS_HEADER", "X-Scope-OrgID: a")],
        ),
        (
            vec!["--metrics", "examples/metrics.om"],
            vec![("KERF_PROMETHEUS_INSECURE_SKIP_VERIFY", "true")],
        ),
    ] {
        let out = kerf_recommend("examples/manifests", &args, &env);
        let err = stderr(&out);
        assert!(!out.status.success(), "{args:?} {env:?}: {err}");
        assert!(err.contains("--prometheus-"), "{args:?} {env:?}: {err}");
    }
    // …but the insecure switch set to false in the environment is no switch at all.
    let env = [("KERF_PROMETHEUS_INSECURE_SKIP_VERIFY", "false")];
    recommend(
        "examples/manifests",
        &["--metrics", "examples/metrics.om"],
        &env,
    );
}

/// A running `kerf serve --standalone` with its stderr in a file.
struct Serve {
    child: std::process::Child,
    health: String,
    log: PathBuf,
}

impl Serve {
    fn start(args: &[&str], pki: &TestPki, log: PathBuf) -> Self {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let health_port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new(env!("CARGO_BIN_EXE_kerf"))
            .args([
                "serve",
                "--standalone",
                "--manifests",
                "examples/manifests",
                "--at",
                AT,
            ])
            .args(["--interval-seconds", "1", "--listen", "127.0.0.1:0"])
            .args(["--health-listen", &format!("127.0.0.1:{health_port}")])
            .args([
                "--tls-cert",
                &arg(&pki.server_cert),
                "--tls-key",
                &arg(&pki.server_key),
            ])
            .args(args)
            // Every log line there is, to look for credentials in.
            .env("RUST_LOG", "trace")
            .current_dir(root())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        Self {
            child,
            health: format!("http://127.0.0.1:{health_port}"),
            log,
        }
    }

    async fn get(&self, path: &str) -> (u16, String) {
        match reqwest::get(format!("{}{path}", self.health)).await {
            Ok(r) => (r.status().as_u16(), r.text().await.unwrap_or_default()),
            Err(_) => (0, String::new()),
        }
    }

    /// Polls `path` until `ok(status, body)`; returns the body.
    async fn until(&self, path: &str, what: &str, ok: impl Fn(u16, &str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let (status, body) = self.get(path).await;
            if ok(status, &body) {
                return body;
            }
            assert!(
                Instant::now() < deadline,
                "{what}: {path} answered {status}:\n{body}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Everything kerf shows: its endpoints' answers now, then (stopped) its whole log.
    async fn everything_shown(mut self) -> String {
        let mut all = String::new();
        for path in [
            "/readyz",
            "/healthz",
            "/metrics",
            "/debug",
            "/debug/recommendations",
        ] {
            all += &self.get(path).await.1;
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        all + &std::fs::read_to_string(&self.log).unwrap()
    }
}

fn assert_never_shown(all: &str, secrets: &[&str]) {
    for secret in secrets {
        assert!(!all.contains(secret), "{secret:?} appears in kerf's output");
    }
}

fn basic(user: &str, password: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_reports_unauthorized_keeps_serving_and_never_shows_the_password() {
    let pki = TestPki::new();
    let password = write(pki.dir(), "password", PASSWORD);
    let prom = secured(&pki, "examples/metrics.om", false);
    let serve = Serve::start(
        &[
            "--prometheus",
            &prom.url(),
            "--prometheus-ca-file",
            &arg(&pki.ca),
            "--prometheus-basic-auth-user",
            "kerf",
            "--prometheus-basic-auth-password-file",
            &arg(&password),
        ],
        &pki,
        pki.dir().join("kerf.log"),
    );
    serve
        .until("/debug/recommendations", "the first cycle", |s, b| {
            s == 200 && b.contains("0.84")
        })
        .await;
    // The password changes on the server's side only: kerf's file now holds a wrong one.
    write(pki.dir(), "password", WRONG_PASSWORD);
    let ready = serve
        .until("/readyz", "the refusal on /readyz", |_, b| {
            b.contains("unauthorized")
        })
        .await;
    assert!(
        ready.contains("unauthorized: HTTP 401 Unauthorized")
            && ready.contains("--prometheus-basic-auth-password-file"),
        "{ready}"
    );
    let (_, recs) = serve.get("/debug/recommendations").await;
    assert!(
        recs.contains("0.84"),
        "the last recommendation is still served: {recs}"
    );
    let all = serve.everything_shown().await;
    assert!(
        all.contains(" WARN ") && all.contains("unauthorized"),
        "the log says it"
    );
    assert_never_shown(
        &all,
        &[
            PASSWORD,
            WRONG_PASSWORD,
            &basic("kerf", PASSWORD),
            &basic("kerf", WRONG_PASSWORD),
        ],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_picks_up_a_rotated_token_and_never_shows_it() {
    let pki = TestPki::new();
    let prom = TestPrometheus::start_with_openmetrics(&read("examples/metrics.om"));
    let proxy = AuthProxy::start(&prom.url(), Some("token-one-Kd8"));
    let token = write(pki.dir(), "token", "token-one-Kd8");
    let serve = Serve::start(
        &[
            "--prometheus",
            &proxy.url(),
            "--prometheus-bearer-token-file",
            &arg(&token),
            "--prometheus-header",
            "X-Scope-OrgID: tenant-1",
        ],
        &pki,
        pki.dir().join("kerf.log"),
    );
    serve
        .until("/debug/recommendations", "the first cycle", |s, b| {
            s == 200 && b.contains("0.84")
        })
        .await;
    // The kubelet rewrites a projected token; the server accepts only the new one from now on.
    write(pki.dir(), "token", "token-two-Lp4\n");
    proxy.accept_only("token-two-Lp4");
    proxy.clear();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !proxy
        .seen()
        .iter()
        .any(|s| s.path == "/api/v1/query_range" && s.accepted)
    {
        assert!(
            Instant::now() < deadline,
            "no accepted query: {:?}",
            proxy.seen()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let seen = proxy.seen();
    assert!(
        seen.iter().all(|s| s.accepted),
        "not one request with the old token: {seen:?}"
    );
    assert!(
        seen.iter()
            .all(|s| s.headers["x-scope-orgid"] == "tenant-1")
    );
    let ready = serve.until("/readyz", "ready", |s, _| s == 200).await;
    assert!(!ready.contains("unauthorized"), "{ready}");
    let all = serve.everything_shown().await;
    assert_never_shown(&all, &["token-one-Kd8", "token-two-Lp4"]);
}
