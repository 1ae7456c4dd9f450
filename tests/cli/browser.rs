//! The two pages in a real browser: headless Chromium loads the `kerf simulate` HTML report and
//! the live `/debug` page of `kerf serve --standalone`; the tests assert on the rendered DOM
//! (`--dump-dom`) and that a screenshot is not blank.
//!
//! Chromium is required (Debian package `chromium`, installed by `scripts/test`): without it
//! these tests fail and say how to install it. `KERF_UPDATE_SCREENSHOTS=1` also writes the
//! screenshots to `docs/img/` (the pictures the README shows).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::*;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn chromium() -> PathBuf {
    for name in ["chromium", "chromium-browser", "google-chrome"] {
        if let Some(dir) = std::env::var_os("PATH")
            .iter()
            .flat_map(std::env::split_paths)
            .find(|d| d.join(name).is_file())
        {
            return dir.join(name);
        }
    }
    panic!(
        "headless Chromium is required for the browser tests and is not on PATH: \
         install it with `scripts/test --setup-only` (Debian: apt-get install -y chromium)"
    );
}

/// Chromium with a fresh profile, headless, nothing fetched but `url`.
fn browser(profile: &Path, args: &[&str], url: &str) -> std::process::Output {
    let out = Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(url)
        .stdin(Stdio::null())
        .output()
        .expect("chromium runs");
    assert!(
        out.status.success(),
        "chromium {args:?} {url}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn dump_dom(profile: &Path, url: &str) -> String {
    String::from_utf8(browser(profile, &["--dump-dom"], url).stdout).unwrap()
}

/// Takes a 1280×1000 screenshot, checks it is not blank and returns its path.
fn screenshot(profile: &Path, url: &str, name: &str) -> PathBuf {
    let path = profile.join(name);
    let arg = format!("--screenshot={}", path.display());
    browser(profile, &[&arg, "--window-size=1280,1000"], url);
    assert_not_blank(&path);
    if std::env::var_os("KERF_UPDATE_SCREENSHOTS").is_some() {
        let dest = root().join("docs/img").join(name);
        std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
        std::fs::copy(&path, dest).unwrap();
    }
    path
}

/// Decodes the PNG: 1280 px wide, a light page with a real share of drawn (non-background)
/// pixels and a luminance spread that a blank or single-colour page does not have.
fn assert_not_blank(path: &Path) {
    let decoder = png::Decoder::new(std::fs::File::open(path).unwrap());
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).unwrap();
    assert_eq!(info.width, 1280, "{}", path.display());
    let channels = info.color_type.samples();
    let pixels = &buf[..info.buffer_size()];
    let luma: Vec<f64> = pixels
        .chunks(channels)
        .map(|p| {
            let (r, g, b) = (f64::from(p[0]), f64::from(p[1]), f64::from(p[2]));
            0.299 * r + 0.587 * g + 0.114 * b
        })
        .collect();
    let n = luma.len() as f64;
    let mean = luma.iter().sum::<f64>() / n;
    let variance = luma.iter().map(|l| (l - mean).powi(2)).sum::<f64>() / n;
    let drawn = luma.iter().filter(|l| **l < 200.0).count() as f64 / n;
    let coloured = pixels
        .chunks(channels)
        .filter(|p| {
            let (max, min) = (p[..3].iter().max().unwrap(), p[..3].iter().min().unwrap());
            max - min > 60
        })
        .count();
    assert!(
        variance > 200.0,
        "{}: luminance variance {variance}",
        path.display()
    );
    assert!(
        drawn > 0.01,
        "{}: only {drawn} of the pixels drawn",
        path.display()
    );
    assert!(
        coloured > 500,
        "{}: {coloured} coloured pixels: no chart drawn",
        path.display()
    );
}

fn count(dom: &str, needle: &str) -> usize {
    dom.matches(needle).count()
}

/// Writes `kerf simulate`'s HTML report of `manifests` over `metrics` into `dir`; its URL.
fn simulate_report(dir: &Path, manifests: &str, metrics: &str, from: &str, to: &str) -> String {
    let report = dir.join("simulate.html");
    let out = Command::new(env!("CARGO_BIN_EXE_kerf"))
        .args([
            "simulate",
            "--manifests",
            manifests,
            "--metrics",
            metrics,
            "--from",
            from,
            "--to",
            to,
            "-o",
            "html",
            "--output",
        ])
        .arg(&report)
        .current_dir(root())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    format!("file://{}", report.display())
}

#[test]
fn the_simulate_report_renders_a_chart_per_workload_with_its_changes_and_totals() {
    let dir = tempfile::tempdir().unwrap();
    let url = simulate_report(
        dir.path(),
        "examples/manifests",
        "examples/metrics.om",
        "2026-01-01T11:30:00Z",
        "2026-01-01T12:30:00Z",
    );
    let dom = dump_dom(&dir.path().join("profile"), &url);
    // One chart per workload, in the rendered DOM (not only in the file).
    assert_eq!(count(&dom, "<svg class=\"chart\""), 2, "{dom}");
    assert!(dom.contains("data-workload=\"ml/Deployment/llm\""));
    assert!(dom.contains("data-workload=\"ml/Deployment/embedder\""));
    // The llm's upsize and the embedder's scale-back, each a marker whose title is its reason.
    assert_eq!(count(&dom, "class=\"marker upsize\""), 1, "{dom}");
    assert_eq!(count(&dom, "class=\"marker scaleBack\""), 1, "{dom}");
    assert!(dom.contains("upsize candidate 0.8400</title>"), "{dom}");
    // Which part of the range the data covers: shaded in each chart, and above the table.
    assert_eq!(count(&dom, "<rect class=\"covered\""), 2, "{dom}");
    assert!(
        dom.contains("recorded usage 2026-01-01T11:40:00Z → 2026-01-01T12:06:00Z (26 cycles)"),
        "{dom}"
    );
    assert!(
        dom.contains("11:40–12:06 of 11:30–12:30 (26 of 60 cycles)"),
        "{dom}"
    );
    // The totals over the covered cycles: 2 changes, 2 rollouts, 0.82 → 0.92 GPU-hours.
    let total = dom
        .split("<tr class=\"total\">")
        .nth(1)
        .and_then(|s| s.split("</tr>").next())
        .expect("a total row");
    for cell in [
        "<td>2</td><td>2</td>",
        "<td>0.82</td>",
        "<td>0.92</td>",
        "+0.10",
    ] {
        assert!(total.contains(cell), "{cell} not in {total}");
    }
    screenshot(&dir.path().join("shot"), &url, "simulate.png");
}

/// The HPA example's report: a CPU and a memory chart, each with the requests as is and with
/// kerf, the usage the recommendation rests on and a marker at the rollout; the CPU chart
/// with the HPA's scale-out point; no GPU chart and no GPU figures.
#[test]
fn the_simulate_report_of_a_cpu_workload_renders_its_cpu_and_memory_charts() {
    let dir = tempfile::tempdir().unwrap();
    let url = simulate_report(
        dir.path(),
        "examples/hpa/manifests",
        "examples/hpa/metrics.om",
        "2026-01-01T11:00:00Z",
        "2026-01-01T12:30:00Z",
    );
    let dom = dump_dom(&dir.path().join("profile"), &url);
    assert_eq!(count(&dom, "<svg class=\"chart\""), 2, "{dom}");
    assert_eq!(count(&dom, "data-resource=\"cpu\""), 1, "{dom}");
    assert_eq!(count(&dom, "data-resource=\"memory\""), 1, "{dom}");
    assert_eq!(count(&dom, "data-resource=\"gpu\""), 0, "{dom}");
    for line in [
        "request as is</title>",
        "request with kerf</title>",
        "used (hottest pod)</title>",
        "p95 over 1h (recommendation's basis)</title>",
        "peak over 1h (recommendation's basis)</title>",
        "HPA target × request, with kerf</title>",
    ] {
        assert!(dom.contains(line), "{line} not drawn: {dom}");
    }
    assert_eq!(count(&dom, "class=\"marker requests\""), 2, "{dom}");
    assert!(
        dom.contains("CPU requests app 700m; HPA target 71%</title>"),
        "{dom}"
    );
    // The data (10:55–12:00 and the lookback) covers 11:00–12:06 of the range.
    assert!(dom.contains("11:00–12:06 of 11:00–12:30"), "{dom}");
    let row = dom
        .split("<tbody>")
        .nth(1)
        .and_then(|s| s.split("</tr>").next())
        .expect("a workload row");
    assert!(
        row.contains("<td>-</td><td>-</td><td>-</td><td>-</td>"),
        "no GPU figures: {row}"
    );
    screenshot(&dir.path().join("shot"), &url, "simulate-hpa.png");
}

/// Runs `kerf serve --standalone` on `manifests` at 12:00 until ready; the child and the
/// health listener's address.
async fn standalone(
    dir: &Path,
    manifests: &str,
    metrics: &str,
) -> (std::process::Child, std::net::SocketAddr) {
    let pki = Pki::new();
    let (cert, key) = write_pair(dir, &pki.leaf("kerf"));
    let mut child = Command::new(env!("CARGO_BIN_EXE_kerf"))
        .args([
            "serve",
            "--standalone",
            "--manifests",
            manifests,
            "--metrics",
            metrics,
            "--at",
            "2026-01-01T12:00:00Z",
            "--listen",
            "127.0.0.1:0",
            "--health-listen",
            "127.0.0.1:0",
        ])
        .arg("--tls-cert")
        .arg(&cert)
        .arg("--tls-key")
        .arg(&key)
        .current_dir(root())
        .env_remove("POD_NAMESPACE")
        .env("KERF_NAMESPACE_FILE", dir.join("no-namespace-file"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (_, health) = serving_addresses(&mut child);
    let start = Instant::now();
    while get_text(health, "/readyz").await.0 != 200 {
        assert!(start.elapsed() < Duration::from_secs(30), "never ready");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    (child, health)
}

#[tokio::test]
async fn the_live_debug_page_of_a_standalone_server_renders_each_workloads_window() {
    install_provider();
    let dir = tempfile::tempdir().unwrap();
    let (mut child, health) =
        standalone(dir.path(), "examples/manifests", "examples/metrics.om").await;
    let url = format!("http://{health}/debug");
    let profile = dir.path().join("profile");
    let dom = tokio::task::spawn_blocking({
        let (profile, url) = (profile.clone(), url.clone());
        move || dump_dom(&profile, &url)
    })
    .await
    .unwrap();
    assert_eq!(count(&dom, "<svg class=\"chart\""), 2, "{dom}");
    // At 12:00 the llm is upsized (0.84) and the embedder scaled back to its baseline.
    assert_eq!(count(&dom, "class=\"marker upsize\""), 1, "{dom}");
    assert_eq!(count(&dom, "class=\"marker scaleBack\""), 1, "{dom}");
    assert!(dom.contains("upsize candidate 0.8400"), "{dom}");
    assert!(
        dom.contains("Ready=True (Evaluated)"),
        "policy status shown: {dom}"
    );
    assert_eq!(count(&dom, "<b class=\"decision\">"), 2);
    // The window's recorded usage is drawn: each chart has its two usage lines.
    assert!(count(&dom, "used (hottest pod)</title>") >= 4, "{dom}");
    // The embedder's pods run at 0.9 (the template says 0.5, kerf's admission sized them):
    // the bars show the running pods next to the template and the recommendation.
    let embedder = dom
        .split("<h2>ml/Deployment/embedder</h2>")
        .nth(1)
        .and_then(|s| s.split("</section>").next())
        .expect("the embedder's section");
    for bar in [
        "template: 0.5</title>",
        "running pods: 0.9</title>",
        "recommended: 0.5</title>",
    ] {
        assert!(embedder.contains(bar), "{bar} not in {embedder}");
    }
    tokio::task::spawn_blocking(move || screenshot(&profile, &url, "debug.png"))
        .await
        .unwrap();
    let _ = child.kill();
    let _ = child.wait();
}

/// The HPA example's /debug (with a CPU limit of 2): CPU and memory bars per container (the p95
/// or peak the recommendation rests on, the request now, the recommendation), the HPA's
/// scale-out point per pod now and with kerf, and the requests beside their limits (`-` where
/// none); no GPU picture.
#[tokio::test]
async fn the_live_debug_page_of_a_cpu_workload_renders_its_cpu_and_memory_bars() {
    install_provider();
    let dir = tempfile::tempdir().unwrap();
    let manifests = crate::recommend_cli::hpa_example_edited(|t| {
        t.replace(
            "requests: {cpu: 1000m, memory: 512Mi}",
            "requests: {cpu: 1000m, memory: 512Mi}\n            limits: {cpu: 2000m}",
        )
    });
    let (mut child, health) = standalone(
        dir.path(),
        manifests.path().to_str().unwrap(),
        "examples/hpa/metrics.om",
    )
    .await;
    let url = format!("http://{health}/debug");
    let profile = dir.path().join("profile");
    let dom = tokio::task::spawn_blocking({
        let (profile, url) = (profile.clone(), url.clone());
        move || dump_dom(&profile, &url)
    })
    .await
    .unwrap();
    assert_eq!(count(&dom, "<svg class=\"bars\""), 2, "{dom}");
    assert_eq!(count(&dom, "data-resource=\"cpu\""), 1, "{dom}");
    assert_eq!(count(&dom, "data-resource=\"memory\""), 1, "{dom}");
    assert_eq!(count(&dom, "data-resource=\"gpu\""), 0, "{dom}");
    assert!(!dom.contains("no GPU data"), "{dom}");
    for bar in [
        "p95 over 1h: 700m</title>",
        "request now: 1</title>",
        "recommended: 700m</title>",
        "peak over 1h: 300Mi</title>",
        "request now: 512Mi</title>",
        "recommended: 360Mi</title>",
        "scales out at (now): 50% of 1 = 500m</title>",
        "scales out at (with kerf): 71% of 700m = 497m</title>",
    ] {
        assert!(dom.contains(bar), "{bar} not drawn: {dom}");
    }
    assert!(
        dom.contains("<caption>request/limit (- where none)</caption>"),
        "{dom}"
    );
    assert!(
        dom.contains("<td>app</td><td>1/2</td><td>700m/1400m</td><td>512Mi/-</td><td>360Mi/-</td>"),
        "limits beside requests: {dom}"
    );
    tokio::task::spawn_blocking(move || screenshot(&profile, &url, "debug-hpa.png"))
        .await
        .unwrap();
    let _ = child.kill();
    let _ = child.wait();
}
