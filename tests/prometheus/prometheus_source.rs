//! Metric sources against a real Prometheus (loaded from OpenMetrics with promtool) and against
//! small local HTTP endpoints for faults. Needs `prometheus` and `promtool`
//! (`scripts/test` installs them: Debian package `prometheus`).

use crate::process_metrics;
use crate::prometheus_support;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::http::StatusCode;
use axum::routing::any;
use jiff::Timestamp;
use kerf::metrics::file::FileSource;
use kerf::metrics::openmetrics;
use kerf::metrics::prometheus::PrometheusSource;
use kerf::metrics::promql::range_rate_window_seconds;
use kerf::metrics::{MetricError, MetricSource, RangeQuery, SeriesKey, SeriesSet};
use kerf::telemetry::{Metrics, QueryFailureLabels};
use prometheus_support::{EPOCH, Lcg, TestPrometheus, promtool_load};

const T0: i64 = EPOCH;

fn query(
    metric: &str,
    namespaces: &[&str],
    pods: &[&str],
    start: i64,
    end: i64,
    step: i64,
) -> RangeQuery {
    RangeQuery {
        metric: metric.into(),
        namespace_label: "namespace".into(),
        pod_label: "pod".into(),
        container_label: "container".into(),
        namespaces: namespaces.iter().map(|s| s.to_string()).collect(),
        pods: pods.iter().map(|s| s.to_string()).collect(),
        start: Timestamp::from_second(start).unwrap(),
        end: Timestamp::from_second(end).unwrap(),
        step_seconds: step,
        counter: None,
        aggregation: Default::default(),
        matchers: Vec::new(),
    }
}

fn key(ns: &str, pod: &str, container: &str) -> SeriesKey {
    SeriesKey {
        namespace: ns.into(),
        pod: pod.into(),
        container: container.into(),
    }
}

fn sample(
    metric: &str,
    ns: &str,
    pod: &str,
    container: Option<&str>,
    value: &str,
    ts: f64,
) -> String {
    let c = container
        .map(|c| format!(",container=\"{c}\""))
        .unwrap_or_default();
    format!("{metric}{{namespace=\"{ns}\",pod=\"{pod}\"{c}}} {value} {ts}\n")
}

fn prom_source(p: &TestPrometheus) -> PrometheusSource {
    PrometheusSource::new(&p.url(), Duration::from_secs(10)).expect("source")
}

/// Both sources on the same text: (file source with this Prometheus's rules, Prometheus source, server).
fn both(text: &str) -> (FileSource, PrometheusSource, TestPrometheus) {
    let prom = TestPrometheus::start_with_openmetrics(text);
    let file = FileSource::from_str(text)
        .expect("valid OpenMetrics")
        .with_semantics(prom.file_semantics());
    (file, prom_source(&prom), prom)
}

fn assert_same(q: &RangeQuery, file: &SeriesSet, prom: &SeriesSet) {
    let keys = |s: &SeriesSet| s.series.keys().cloned().collect::<Vec<_>>();
    assert_eq!(keys(file), keys(prom), "series keys differ for {q:?}");
    for (k, fv) in &file.series {
        let pv = &prom.series[k];
        let ft: Vec<i64> = fv.iter().map(|p| p.0).collect();
        let pt: Vec<i64> = pv.iter().map(|p| p.0).collect();
        assert_eq!(ft, pt, "timestamps differ for {k:?} in {q:?}");
        for ((t, a), (_, b)) in fv.iter().zip(pv) {
            let tol = 1e-9 * a.abs().max(b.abs()).max(1e-300);
            assert!(
                (a - b).abs() <= tol,
                "{k:?} at {t}: file {a} vs prometheus {b} ({q:?})"
            );
        }
    }
    let sorted = |w: &[String]| {
        let mut w = w.to_vec();
        w.sort();
        w
    };
    assert_eq!(
        sorted(&file.warnings),
        sorted(&prom.warnings),
        "warnings differ for {q:?}"
    );
}

/// Runs `q` on both sources, asserts they agree, returns the Prometheus answer.
async fn agree(file: &FileSource, prom: &PrometheusSource, q: &RangeQuery) -> SeriesSet {
    let f = file.range_query(q).await.expect("file source");
    let p = prom.range_query(q).await.expect("prometheus source");
    assert_same(q, &f, &p);
    p
}

#[test]
fn parser_accepts_exactly_what_promtool_accepts() {
    let dir = tempfile::tempdir().unwrap();
    let ts = T0;
    let cases: Vec<String> = vec![
        format!(
            "# HELP m help\n# TYPE m gauge\nm{{a=\"x\\\"y\\\\z\\nw\"}} 1 {ts}\nm{{a=\"b\"}} 2 {ts}.5\n# EOF\n"
        ),
        format!(
            "# TYPE c counter\nc_total 1 {ts} # {{trace=\"t\"}} 1 {ts}\nc_total NaN {}\n# EOF",
            ts + 1
        ),
        format!(
            "# TYPE m_seconds gauge\n# UNIT m_seconds seconds\nm_seconds{{}} -Inf {ts}\n# EOF\n"
        ),
        format!("m 1e3 {ts}\nm +Inf {}\n# EOF\n", ts + 1),
        format!("m 1 {ts}\n\nm 2 {}\n# EOF\n", ts + 1),
        format!("# plain comment\nm 1 {ts}\n# EOF\n"),
        format!("m 1\n# EOF\n"),
        format!("m 1 {ts}\n"),
        format!("m 1 {ts}\n# EOF\nm 2 {}\n", ts + 1),
        format!("m{{a=\"1\",a=\"2\"}} 1 {ts}\n# EOF\n"),
        format!("m{{a=\"1\",}} 1 {ts}\n# EOF\n"),
        format!("m  1 {ts}\n# EOF\n"),
        format!("m 1 {ts} \n# EOF\n"),
        format!("m 0x10 {ts}\n# EOF\n"),
        format!("# TYPE m bogus\nm 1 {ts}\n# EOF\n"),
        format!("# UNIT m seconds\nm 1 {ts}\n# EOF\n"),
        format!("m{{a = \"1\"}} 1 {ts}\n# EOF\n"),
        format!("m 1 {ts}\r\n# EOF\n"),
    ];
    for (i, text) in cases.iter().enumerate() {
        let file = dir.path().join(format!("{i}.om"));
        std::fs::write(&file, text).unwrap();
        let promtool = promtool_load(&file, &dir.path().join(format!("d{i}")));
        let ours = openmetrics::parse(text);
        assert_eq!(
            promtool.is_ok(),
            ours.is_ok(),
            "case {i} {text:?}: promtool {promtool:?}, kerf {ours:?}"
        );
    }
}

#[tokio::test]
async fn window_boundaries_and_lookback_match_prometheus() {
    let mut text = String::new();
    for (off, v) in [(0, 1), (60, 2), (120, 3), (600, 4)] {
        text += &sample(
            "gpu_util",
            "a",
            "p",
            Some("c"),
            &v.to_string(),
            (T0 + off) as f64,
        );
    }
    text += "# EOF\n";
    let (file, prom_src, prom) = both(&text);
    let v3 = prom.major_version() >= 3;

    // Samples exactly at start and at end are part of the answer.
    let set = agree(
        &file,
        &prom_src,
        &query("gpu_util", &["a"], &[], T0, T0 + 600, 60),
    )
    .await;
    let pts = &set.series[&key("a", "p", "c")];
    assert_eq!(pts.first(), Some(&(T0, 1.0)));
    assert_eq!(pts.last(), Some(&(T0 + 600, 4.0)));
    // The T0+120 sample is visible for the 5 minute lookback; exactly 5 minutes later only on
    // Prometheus 2 (closed window), never after.
    let value_at = |t: i64| pts.iter().find(|p| p.0 == t).map(|p| p.1);
    assert_eq!(value_at(T0 + 360), Some(3.0));
    assert_eq!(value_at(T0 + 420), if v3 { None } else { Some(3.0) });
    assert_eq!(value_at(T0 + 480), None);

    // Lookback after the last sample, ending exactly 5 minutes after it.
    let set = agree(
        &file,
        &prom_src,
        &query("gpu_util", &["a"], &[], T0 + 840, T0 + 960, 60),
    )
    .await;
    let times: Vec<i64> = set.series[&key("a", "p", "c")]
        .iter()
        .map(|p| p.0 - T0)
        .collect();
    assert_eq!(times, if v3 { vec![840] } else { vec![840, 900] });
}

#[tokio::test]
async fn grid_is_start_plus_multiples_of_step() {
    let mut text = String::new();
    for i in 0..40 {
        text += &sample(
            "mem",
            "a",
            "p",
            Some("c"),
            &(i * 10).to_string(),
            (T0 + 30 * i) as f64,
        );
    }
    text += "# EOF\n";
    let (file, prom_src, _prom) = both(&text);
    let set = agree(
        &file,
        &prom_src,
        &query("mem", &["a"], &[], T0 + 17, T0 + 600, 45),
    )
    .await;
    let pts = &set.series[&key("a", "p", "c")];
    let expected: Vec<(i64, f64)> = (0..)
        .map(|k| T0 + 17 + 45 * k)
        .take_while(|t| *t <= T0 + 600)
        .map(|t| (t, ((t - T0) / 30 * 10) as f64))
        .collect();
    assert_eq!(pts, &expected);
}

#[tokio::test]
async fn counters_become_rates_across_a_reset() {
    let mut text = String::from("# TYPE gpu_seconds counter\n");
    // +3 per 15 s, reset to 0 after the 20th sample.
    let mut v = 0.0;
    for i in 0..41 {
        if i == 20 {
            v = 0.0;
        } else if i > 0 {
            v += 3.0;
        }
        text += &sample(
            "gpu_seconds_total",
            "a",
            "p",
            Some("c"),
            &v.to_string(),
            (T0 + 15 * i) as f64,
        );
    }
    text += "# EOF\n";
    let (file, prom_src, _prom) = both(&text);
    // From T0+240 every range window (240 s at a 15 s step) lies inside the data.
    let q = query("gpu_seconds_total", &["a"], &[], T0 + 240, T0 + 600, 15);
    assert_eq!(range_rate_window_seconds(15), 240);
    let set = agree(&file, &prom_src, &q).await;
    let pts = &set.series[&key("a", "p", "c")];
    assert_eq!(pts.len(), 25);
    // A steady 3 per 15 s is 0.2/s; across the reset at T0+300 the rate must not go negative.
    for (t, r) in pts {
        assert!(*r >= 0.0, "negative rate {r} at {t}");
        if !(T0 + 300..=T0 + 540).contains(t) {
            assert!((r - 0.2).abs() < 1e-9, "rate {r} at {t}");
        }
    }

    // counter: Some(false) gives the raw counter values instead.
    let mut raw = q.clone();
    raw.counter = Some(false);
    let set = agree(&file, &prom_src, &raw).await;
    assert_eq!(set.series[&key("a", "p", "c")][0], (T0 + 240, 48.0));
}

#[tokio::test]
async fn missing_labels_and_multiple_namespaces_and_pods() {
    let mut text = String::new();
    for i in 0..5 {
        let ts = (T0 + 60 * i) as f64;
        text += &sample("cpu", "a", "p.1", Some("c"), "1", ts);
        text += &sample("cpu", "a", "px1", Some("c"), "2", ts);
        text += &sample("cpu", "b", "q", Some("c"), "3", ts);
        text += &sample("cpu", "b", "q", Some("d"), "4", ts);
        text += &sample("cpu", "b", "q", None, "5", ts);
        text += &sample("cpu", "z", "q", Some("c"), "6", ts);
    }
    text += "# EOF\n";
    let (file, prom_src, _prom) = both(&text);

    let set = agree(
        &file,
        &prom_src,
        &query("cpu", &["a", "b"], &[], T0, T0 + 240, 60),
    )
    .await;
    let keys: Vec<_> = set.series.keys().cloned().collect();
    assert_eq!(
        keys,
        vec![
            key("a", "p.1", "c"),
            key("a", "px1", "c"),
            key("b", "q", "c"),
            key("b", "q", "d")
        ]
    );
    assert_eq!(set.warnings.len(), 1, "{:?}", set.warnings);
    assert!(
        set.warnings[0].contains("no container label"),
        "{:?}",
        set.warnings
    );

    // A regex-special pod name matches only itself.
    let set = agree(
        &file,
        &prom_src,
        &query("cpu", &["a", "b"], &["p.1", "q"], T0, T0 + 240, 60),
    )
    .await;
    let keys: Vec<_> = set.series.keys().cloned().collect();
    assert_eq!(
        keys,
        vec![key("a", "p.1", "c"), key("b", "q", "c"), key("b", "q", "d")]
    );
}

#[tokio::test]
async fn nan_and_inf_samples_are_dropped_with_a_warning() {
    let mut text = String::new();
    for (i, v) in ["1", "NaN", "2", "+Inf", "3"].iter().enumerate() {
        text += &sample(
            "gpu_util",
            "a",
            "p",
            Some("c"),
            v,
            (T0 + 60 * i as i64) as f64,
        );
    }
    text += "# EOF\n";
    let (file, prom_src, _prom) = both(&text);
    let set = agree(
        &file,
        &prom_src,
        &query("gpu_util", &["a"], &[], T0, T0 + 240, 60),
    )
    .await;
    assert_eq!(
        set.series[&key("a", "p", "c")],
        vec![(T0, 1.0), (T0 + 120, 2.0), (T0 + 240, 3.0)]
    );
    assert_eq!(set.warnings.len(), 1);
    assert!(
        set.warnings[0].contains("dropped 2 NaN/Inf"),
        "{:?}",
        set.warnings
    );
}

fn irregular_data() -> String {
    let mut rng = Lcg(42);
    let mut text = String::from("# TYPE gpu_util gauge\n# TYPE gpu_seconds counter\n");
    let targets = [
        ("a", "p1", "main"),
        ("a", "p1", "side"),
        ("a", "p2", "main"),
        ("b", "p.1", "main"),
        ("b", "px1", "main"),
    ];
    for (si, (ns, pod, c)) in targets.iter().enumerate() {
        for gpu in 0..2 {
            // Jittered ~30 s scrapes with fractional timestamps and a 12 minute gap.
            let mut t = T0 as f64 + rng.next() * 20.0;
            while t < (T0 + 7200) as f64 {
                if !(si == 2 && (T0 + 1800) as f64 <= t && t < (T0 + 2520) as f64) {
                    let v = format!("{:.4}", rng.next() * 100.0);
                    text += &format!(
                        "gpu_util{{namespace=\"{ns}\",pod=\"{pod}\",container=\"{c}\",gpu=\"{gpu}\"}} {v} {t:.3}\n"
                    );
                }
                t += 25.0 + rng.next() * 10.0;
            }
        }
        // Counter with irregular ~15 s scrapes and a reset.
        let (mut t, mut v) = (T0 as f64 + rng.next() * 10.0, rng.next() * 50.0);
        let mut n = 0;
        while t < (T0 + 7200) as f64 {
            text += &format!(
                "gpu_seconds_total{{namespace=\"{ns}\",pod=\"{pod}\",container=\"{c}\"}} {v:.6} {t:.3}\n"
            );
            n += 1;
            v = if n == 200 + 37 * si {
                rng.next() * 5.0
            } else {
                v + rng.next() * 30.0
            };
            t += 10.0 + rng.next() * 10.0;
        }
    }
    for i in 0..60 {
        text += &sample("gpu_util", "a", "p1", None, "7", (T0 + 60 * i) as f64);
    }
    text + "# EOF\n"
}

#[tokio::test]
async fn file_source_and_prometheus_agree_on_the_same_file() {
    let text = irregular_data();
    let (file, prom_src, _prom) = both(&text);
    let queries = [
        query("gpu_util", &["a", "b"], &[], T0, T0 + 7200, 60),
        query("gpu_util", &["a"], &["p2"], T0 + 17, T0 + 7000, 45),
        query(
            "gpu_util",
            &["b"],
            &["p.1", "px1"],
            T0 + 300,
            T0 + 7500,
            300,
        ),
        query("gpu_seconds_total", &["a", "b"], &[], T0, T0 + 7200, 15),
        query("gpu_seconds_total", &["a", "b"], &[], T0 + 7, T0 + 7300, 60),
        query(
            "gpu_seconds_total",
            &["b"],
            &["px1"],
            T0 + 600,
            T0 + 6000,
            120,
        ),
        RangeQuery {
            counter: Some(true),
            ..query("gpu_util", &["a"], &[], T0, T0 + 3600, 30)
        },
        RangeQuery {
            counter: Some(false),
            ..query("gpu_seconds_total", &["a"], &[], T0, T0 + 3600, 30)
        },
    ];
    let mut points = 0;
    for q in &queries {
        let set = agree(&file, &prom_src, q).await;
        points += set.series.values().map(Vec::len).sum::<usize>();
    }
    assert!(points > 4000, "the comparison covered only {points} points");
}

#[tokio::test]
async fn one_http_query_per_range_query_and_metadata_is_cached() {
    let text = format!(
        "{}{}# EOF\n",
        sample("gpu_util", "a", "p", Some("c"), "1", T0 as f64),
        sample("x_total", "a", "p", Some("c"), "1", T0 as f64)
    );
    let prom = TestPrometheus::start_with_openmetrics(&text);
    let src = prom_source(&prom);
    let (q0, m0) = (
        prom.requests_served("/api/v1/query_range"),
        prom.requests_served("/api/v1/metadata"),
    );
    for _ in 0..3 {
        src.range_query(&query("gpu_util", &["a"], &[], T0, T0 + 60, 60))
            .await
            .unwrap();
        src.range_query(&query("x_total", &["a"], &[], T0, T0 + 60, 60))
            .await
            .unwrap();
    }
    assert_eq!(prom.requests_served("/api/v1/query_range") - q0, 6);
    // gpu_util needs metadata once (then cached); x_total is a counter by name.
    assert_eq!(prom.requests_served("/api/v1/metadata") - m0, 1);
}

#[tokio::test]
async fn stopped_prometheus_is_unavailable_and_recovers_after_restart() {
    // The source reports to a registry of this test's own: exact counts, no other test moves them.
    let metrics = Metrics::new();
    let metric = "outage_mem";
    let failures = || {
        metrics
            .prometheus_query_failures
            .get_or_create(&QueryFailureLabels {
                signal: metric.into(),
                // A stopped server refuses the connection: the source is unavailable.
                reason: "unavailable",
            })
            .get()
    };
    let queries = || {
        process_metrics::value(
            &metrics.encode(),
            &format!("kerf_prometheus_query_duration_seconds_count{{signal=\"{metric}\"}}"),
        )
    };
    let text = format!(
        "{}# EOF\n",
        sample(metric, "a", "p", Some("c"), "5", T0 as f64)
    );
    let mut prom = TestPrometheus::start_with_openmetrics(&text);
    let src = prom_source(&prom).reporting_to(metrics.clone());
    let q = query(metric, &["a"], &[], T0, T0 + 60, 60);
    let before = src.range_query(&q).await.unwrap();
    assert_eq!(
        before.series[&key("a", "p", "c")],
        vec![(T0, 5.0), (T0 + 60, 5.0)]
    );

    prom.stop();
    // The first attempt may hit the pooled connection the dying server dropped; the next one
    // finds the port closed.
    for attempt in 0..2 {
        match src.range_query(&q).await {
            Err(MetricError::Unavailable(m)) => {
                assert!(attempt == 0 || m.to_lowercase().contains("refused"), "{m}")
            }
            other => panic!("expected Unavailable, got {other:?}"),
        }
    }
    assert_eq!(failures(), 2);

    prom.restart();
    assert_eq!(src.range_query(&q).await.unwrap(), before);
    assert_eq!(failures(), 2);
    assert_eq!(queries(), 4.0);
}

/// Serves `router` on a free loopback port; returns its base URL.
async fn serve(router: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    url
}

async fn fake_answer(
    status: StatusCode,
    content_type: &'static str,
    body: &'static str,
) -> MetricError {
    let url = serve(Router::new().route(
        "/api/v1/query_range",
        any(move || async move { (status, [("content-type", content_type)], body) }),
    ))
    .await;
    let src = PrometheusSource::new(&url, Duration::from_secs(5)).unwrap();
    src.range_query(&query("mem", &["a"], &[], T0, T0 + 60, 60))
        .await
        .expect_err("must fail")
}

#[tokio::test]
async fn bad_answers_are_bad_responses() {
    let cases = [
        (
            StatusCode::OK,
            "application/json",
            "this is not json",
            "malformed JSON",
        ),
        (StatusCode::OK, "text/plain", "", "malformed JSON"),
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            "text/html",
            "<h1>proxy exploded</h1>",
            "HTTP 500 Internal Server Error: <h1>proxy exploded</h1>",
        ),
        (
            StatusCode::BAD_REQUEST,
            "application/json",
            r#"{"status":"error","errorType":"bad_data","error":"1:14: parse error: unexpected"}"#,
            "HTTP 400 Bad Request: bad_data: 1:14: parse error: unexpected",
        ),
    ];
    for (status, ct, body, want) in cases {
        match fake_answer(status, ct, body).await {
            MetricError::BadResponse(m) => assert!(m.contains(want), "{status}: {m}"),
            other => panic!("{status}: expected BadResponse, got {other:?}"),
        }
    }
}

#[tokio::test]
async fn slow_endpoint_times_out() {
    let url = serve(Router::new().route(
        "/api/v1/query_range",
        any(|| async {
            tokio::time::sleep(Duration::from_secs(30)).await;
            "too late"
        }),
    ))
    .await;
    let timeout = Duration::from_millis(300);
    let src = PrometheusSource::new(&url, timeout).unwrap();
    let started = std::time::Instant::now();
    match src
        .range_query(&query("mem", &["a"], &[], T0, T0 + 60, 60))
        .await
    {
        Err(MetricError::Timeout(t)) => assert_eq!(t, timeout),
        other => panic!("expected Timeout, got {other:?}"),
    }
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "took {:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn metadata_typed_counter_is_rated_and_query_is_posted() {
    let bodies = Arc::new(Mutex::new(Vec::<(String, HashMap<String, String>)>::new()));
    let seen = bodies.clone();
    let url = serve(
        Router::new()
            .route(
                "/api/v1/metadata",
                any(|| async {
                    ([("content-type", "application/json")], r#"{"status":"success","data":{"gpu_busy":[{"type":"counter","help":"","unit":""}]}}"#)
                }),
            )
            .route(
                "/api/v1/query_range",
                any(move |method: axum::http::Method, axum::Form(form): axum::Form<HashMap<String, String>>| {
                    let seen = seen.clone();
                    async move {
                        seen.lock().unwrap().push((method.to_string(), form));
                        (
                            [("content-type", "application/json")],
                            r#"{"status":"success","warnings":["too many samples, partial"],"data":{"resultType":"matrix","result":[{"metric":{"namespace":"a","pod":"p","container":"c"},"values":[[1767225600,"0.5"]]}]}}"#,
                        )
                    }
                }),
            ),
    )
    .await;
    let src = PrometheusSource::new(&url, Duration::from_secs(5)).unwrap();
    let set = src
        .range_query(&query("gpu_busy", &["a", "b"], &["p"], T0, T0 + 60, 60))
        .await
        .unwrap();
    assert_eq!(set.series[&key("a", "p", "c")], vec![(T0, 0.5)]);
    assert_eq!(
        set.warnings,
        vec!["prometheus: too many samples, partial".to_string()]
    );
    let bodies = bodies.lock().unwrap();
    assert_eq!(bodies.len(), 1);
    assert_eq!(bodies[0].0, "POST");
    let form = &bodies[0].1;
    assert_eq!(
        form["query"],
        r#"sum by (namespace,pod,container) (rate(gpu_busy{namespace=~"a|b",pod=~"p"}[240s]))"#
    );
    assert_eq!(form["start"], T0.to_string());
    assert_eq!(form["step"], "60");
}

#[tokio::test]
async fn example_testdata_loads_everywhere_and_agrees() {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/metrics/gpu-example.om");
    let text = std::fs::read_to_string(&path).unwrap();
    let (_, prom_src, prom) = both(&text);
    let file = FileSource::from_path(&path)
        .unwrap()
        .with_semantics(prom.file_semantics());
    for (metric, step) in [
        ("kubex_gpu_container_sm_utilization_percent", 60),
        ("kubex_gpu_container_memory_footprint_percent", 30),
        ("container_cpu_usage_seconds_total", 30),
    ] {
        let set = agree(
            &file,
            &prom_src,
            &query(metric, &["ml"], &[], T0, T0 + 3600, step),
        )
        .await;
        assert_eq!(set.series.len(), 2, "{metric}: {:?}", set.series.keys());
        assert!(set.warnings.is_empty(), "{metric}: {:?}", set.warnings);
    }
}

/// docs/design/hpa-coordination.md#h7: the kube-state-metrics replica series (labels `namespace`
/// and `horizontalpodautoscaler`, no container) are read alike from the file and from
/// Prometheus; duplicates from several kube-state-metrics replicas are one value (`max`), never
/// a sum.
#[tokio::test]
async fn kube_state_metrics_replica_history_is_read_alike_from_the_file_and_prometheus() {
    let mut text =
        String::from("# TYPE kube_horizontalpodautoscaler_status_current_replicas gauge\n");
    for i in 0..=10 {
        let ts = T0 + 60 * i;
        for instance in ["ksm-0", "ksm-1"] {
            for (hpa, n) in [("web", if i == 4 { 10 } else { 6 }), ("api", 2)] {
                text += &format!(
                    "kube_horizontalpodautoscaler_status_current_replicas{{namespace=\"shop\",horizontalpodautoscaler=\"{hpa}\",instance=\"{instance}\"}} {n} {ts}\n"
                );
            }
        }
    }
    text += "# EOF\n";
    let (file, prom_src, _prom) = both(&text);
    let mut q = query(
        "kube_horizontalpodautoscaler_status_current_replicas",
        &["shop"],
        &["web"],
        T0,
        T0 + 600,
        60,
    );
    q.pod_label = "horizontalpodautoscaler".into();
    q.container_label = String::new();
    q.aggregation = kerf::metrics::Aggregation::Max;
    q.counter = Some(false);
    let set = agree(&file, &prom_src, &q).await;
    assert!(set.warnings.is_empty(), "{:?}", set.warnings);
    let keys: Vec<_> = set.series.keys().cloned().collect();
    assert_eq!(keys, vec![key("shop", "web", "")]);
    let values: Vec<f64> = set.series[&key("shop", "web", "")]
        .iter()
        .map(|p| p.1)
        .collect();
    assert_eq!(values[4], 10.0, "{values:?}");
    assert!(values.iter().all(|v| *v == 6.0 || *v == 10.0), "{values:?}");
}

/// POSTs `promql` as a range query straight to Prometheus; the number of points of each series.
async fn raw_points(
    prom: &TestPrometheus,
    promql: &str,
    start: i64,
    end: i64,
    step: i64,
) -> Vec<usize> {
    let form = [
        ("query", promql.to_string()),
        ("start", start.to_string()),
        ("end", end.to_string()),
        ("step", step.to_string()),
    ];
    let v: serde_json::Value = reqwest::Client::new()
        .post(format!("{}/api/v1/query_range", prom.url()))
        .form(&form)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    v["data"]["result"]
        .as_array()
        .unwrap_or_else(|| panic!("{v}"))
        .iter()
        .map(|s| s["values"].as_array().unwrap().len())
        .collect()
}

/// docs/design/gpu-engine.md#g2 (kerf's reading) and docs/metrics.md: counters read by range
/// queries are rated over `max(4 × step, 240 s)`, not over one step. Against a real Prometheus:
/// with short scrapes (every 5 s), sparse ones (30 s, twice the 15 s step) and GPU Process
/// Exporter's default 60 s, every grid point at kerf's default 15 s step has the exact rate,
/// where a one-step window holds a single sample and `rate()` gives nothing at all, and the
/// window queries' 60 s floor leaves holes at 60 s scrapes.
#[tokio::test]
async fn the_counter_rate_window_holds_short_and_sparse_scrapes() {
    let mut text = String::from("# TYPE busy_seconds counter\n");
    // A steady 0.5 GPU-seconds per second, scraped every 5 s (pod "short"), 30 s ("sparse") and
    // 60 s ("minute").
    for (pod, every) in [("short", 5), ("sparse", 30), ("minute", 60)] {
        for t in (0..=1800).step_by(every) {
            text += &sample(
                "busy_seconds_total",
                "a",
                pod,
                Some("c"),
                &format!("{}", 0.5 * t as f64),
                (T0 + t) as f64,
            );
        }
    }
    text += "# EOF\n";
    let (file, prom_src, prom) = both(&text);
    let (start, end) = (T0 + 600, T0 + 1800);
    let grid = ((end - start) / 15 + 1) as usize;
    let at_15s = agree(
        &file,
        &prom_src,
        &query("busy_seconds_total", &["a"], &[], start, end, 15),
    )
    .await;
    for pod in ["short", "sparse", "minute"] {
        let points = &at_15s.series[&key("a", pod, "c")];
        assert_eq!(points.len(), grid, "{pod}: a rate at every grid point");
        for (t, r) in points {
            assert!((r - 0.5).abs() < 1e-9, "{pod}: rate {r} at {t}");
        }
    }
    // What "over the sample step" would give: one sample per 15 s window, no rate at all.
    assert_eq!(
        raw_points(
            &prom,
            r#"rate(busy_seconds_total{pod="sparse"}[15s])"#,
            start,
            end,
            15
        )
        .await,
        Vec::<usize>::new()
    );
    // The 60 s floor of the window queries at 60 s scrapes: holes (one sample per window, or
    // two exactly on a scrape).
    let minute_60s = raw_points(
        &prom,
        r#"rate(busy_seconds_total{pod="minute"}[60s])"#,
        start,
        end,
        15,
    )
    .await;
    assert!(
        minute_60s.iter().sum::<usize>() < grid,
        "{minute_60s:?} of {grid}"
    );
    let at_30s = agree(
        &file,
        &prom_src,
        &query("busy_seconds_total", &["a"], &["minute"], start, end, 30),
    )
    .await;
    let points = &at_30s.series[&key("a", "minute", "c")];
    assert_eq!(points.len(), ((end - start) / 30 + 1) as usize);
    assert!(
        points.iter().all(|(_, r)| (r - 0.5).abs() < 1e-9),
        "{points:?}"
    );
}
