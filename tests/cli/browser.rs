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

#[test]
fn the_simulate_report_renders_a_chart_per_workload_with_its_changes_and_totals() {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("simulate.html");
    let out = Command::new(env!("CARGO_BIN_EXE_kerf"))
        .args([
            "simulate",
            "--manifests",
            "examples/manifests",
            "--metrics",
            "examples/metrics.om",
            "--from",
            "2026-01-01T11:30:00Z",
            "--to",
            "2026-01-01T12:30:00Z",
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
    let url = format!("file://{}", report.display());
    let dom = dump_dom(&dir.path().join("profile"), &url);
    // One chart per workload, in the rendered DOM (not only in the file).
    assert_eq!(count(&dom, "<svg class=\"chart\""), 2, "{dom}");
    assert!(dom.contains("data-workload=\"ml/Deployment/llm\""));
    assert!(dom.contains("data-workload=\"ml/Deployment/embedder\""));
    // The llm's upsize and the embedder's scale-back, each a marker whose title is its reason.
    assert_eq!(count(&dom, "class=\"marker upsize\""), 1, "{dom}");
    assert_eq!(count(&dom, "class=\"marker scaleBack\""), 1, "{dom}");
    assert!(dom.contains("upsize candidate 0.8400</title>"), "{dom}");
    // The totals: 2 changes, 2 rollouts, 1.90 → 2.11 GPU-hours.
    let total = dom
        .split("<tr class=\"total\">")
        .nth(1)
        .and_then(|s| s.split("</tr>").next())
        .expect("a total row");
    for cell in [
        "<td>2</td><td>2</td>",
        "<td>1.90</td>",
        "<td>2.11</td>",
        "+0.21",
    ] {
        assert!(total.contains(cell), "{cell} not in {total}");
    }
    screenshot(&dir.path().join("shot"), &url, "simulate.png");
}

#[tokio::test]
async fn the_live_debug_page_of_a_standalone_server_renders_each_workloads_window() {
    install_provider();
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new();
    let (cert, key) = write_pair(dir.path(), &pki.leaf("kerf"));
    let mut child = Command::new(env!("CARGO_BIN_EXE_kerf"))
        .args([
            "serve",
            "--standalone",
            "--manifests",
            "examples/manifests",
            "--metrics",
            "examples/metrics.om",
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
        .env("KERF_NAMESPACE_FILE", dir.path().join("no-namespace-file"))
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
    tokio::task::spawn_blocking(move || screenshot(&profile, &url, "debug.png"))
        .await
        .unwrap();
    let _ = child.kill();
    let _ = child.wait();
}
