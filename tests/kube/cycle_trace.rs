//! A cycle's trace, as an operator reads it with `--log-format json`: the Lease holder's cycle
//! runs in a `cycle` span with an `id`, its write planning inside it, and every write it planned
//! runs in a `write` span carrying that id, so the log finds a cycle's writes by its id.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

use crate::kube_no_churn::{auto_patch_over_still_usage, read_back, web_on_the_server};
use crate::kube_support::ssa;
use crate::kube_support::{leading_writer, mock, requests};
use crate::usage_history::{SCRAPE, T0};

/// Log lines written as JSON into a buffer the test reads.
#[derive(Clone, Default)]
struct Lines(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Lines {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Lines {
    fn parsed(&self) -> Vec<Value> {
        let text = String::from_utf8(self.0.lock().unwrap().clone()).unwrap();
        text.lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect()
    }
}

/// The spans a JSON line is in, outermost first, as `--log-format json` writes them.
fn spans(line: &Value) -> Vec<&Value> {
    line["spans"]
        .as_array()
        .map(|a| a.iter().collect())
        .unwrap_or_default()
}

fn span_named<'a>(line: &'a Value, name: &str) -> Option<&'a Value> {
    spans(line).into_iter().find(|s| s["name"] == name)
}

#[tokio::test]
async fn every_write_a_cycle_planned_carries_the_cycle_id_in_its_span() {
    let lines = Lines::default();
    let writer_lines = lines.clone();
    let subscriber = tracing_subscriber::fmt()
        .json()
        .with_current_span(true)
        .with_span_list(true)
        .with_env_filter("kerf=debug")
        .with_writer(move || writer_lines.clone())
        .finish();
    // This test's thread only: the writer task runs on it too (a current-thread runtime).
    let _logs = tracing::subscriber::set_default(subscriber);

    let (m, source) = auto_patch_over_still_usage();
    let state = web_on_the_server();
    let (client, log) = mock(ssa::server(state.clone()));
    let (_lease, writer) = leading_writer(client);
    let store = kerf::state::Store::new();

    let (snapshot, _) = read_back(&m.snapshot, &state.lock().unwrap());
    let now = jiff::Timestamp::from_second(T0 + 3600).unwrap();
    let cycle = kerf::reconcile::Cycle {
        snapshot: &snapshot,
        invalid: &[],
        recommendations: &[],
        now,
        step_seconds: SCRAPE,
        history: None,
    };
    let (out, ops) = kerf::reconcile::reconcile_cycle(&cycle, &source, store.metrics()).await;
    assert!(out.id > 0, "the loop numbers its cycles");
    let planned = ops.len();
    assert!(
        planned >= 2,
        "a template change and its recommendation: {ops:?}"
    );
    for op in ops {
        writer.send_planned(op, out.id).await.unwrap();
    }
    // The writer answers in order: once the last op's request is in, every write is done.
    for _ in 0..500 {
        let written = lines
            .parsed()
            .iter()
            .filter(|l| l["fields"]["message"] == "cluster write")
            .count();
        if written == planned {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(!requests(&log).is_empty());

    let logged = lines.parsed();
    let cycle_lines: Vec<&Value> = logged
        .iter()
        .filter(|l| span_named(l, "cycle").is_some_and(|s| s["id"] == out.id))
        .collect();
    assert!(
        cycle_lines
            .iter()
            .any(|l| l["fields"]["message"] == format!("cycle planned {planned} write(s)")),
        "the cycle's own line names how many writes it planned: {cycle_lines:#?}"
    );
    let writes: Vec<&Value> = logged
        .iter()
        .filter(|l| l["fields"]["message"] == "cluster write")
        .collect();
    assert_eq!(writes.len(), planned, "{logged:#?}");
    for w in &writes {
        let span = span_named(w, "write").expect("a write's line is in its write span");
        assert_eq!(span["cycle"], out.id, "{w}");
        assert!(span["subject"].is_string(), "{w}");
    }
    // The recommenders run inside the cycle's span.
    assert!(
        logged.iter().any(|l| {
            let names: Vec<&Value> = spans(l).iter().map(|s| &s["name"]).collect();
            names == ["cycle", "recommenders"]
                && span_named(l, "cycle").is_some_and(|s| s["id"] == out.id)
        }),
        "{logged:#?}"
    );
}
