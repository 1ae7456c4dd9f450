//! Which exposition format `/metrics` answers in, from the request's `Accept` header, as
//! Prometheus's own libraries decide it: `expfmt.NegotiateIncludingOpenMetrics` in
//! prometheus/common (`expfmt/encode.go`, commit d2417e2cbb82c4c81e4d28d55f354058169a9f08) over
//! the formats kerf can write (OpenMetrics 1.0.0 and 0.0.1, Prometheus text 0.0.4; no protobuf),
//! with the clauses parsed and ordered as `goautoneg.ParseAccept` does (munnerz/goautoneg
//! `autoneg.go`, commit a7dc8b61c822528f973a5e4e7b272055c6fdb43e).
//!
//! The first clause, by quality, that one of kerf's formats matches wins; a `*/*` clause matches
//! the first of them (OpenMetrics 1.0.0); nothing matched, or no `Accept` at all, is Prometheus
//! text 0.0.4. Prometheus itself asks for OpenMetrics first.

/// A format `/metrics` can answer in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    OpenMetrics1,
    OpenMetrics001,
    PrometheusText,
}

impl Format {
    /// In expfmt's order of preference.
    const OFFERED: [Format; 3] = [
        Format::OpenMetrics1,
        Format::OpenMetrics001,
        Format::PrometheusText,
    ];

    pub fn content_type(self) -> &'static str {
        match self {
            Format::OpenMetrics1 => "application/openmetrics-text; version=1.0.0; charset=utf-8",
            Format::OpenMetrics001 => "application/openmetrics-text; version=0.0.1; charset=utf-8",
            Format::PrometheusText => prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
        }
    }

    pub fn is_openmetrics(self) -> bool {
        self != Format::PrometheusText
    }

    fn media(self) -> (&'static str, &'static str, &'static str) {
        match self {
            Format::OpenMetrics1 => ("application", "openmetrics-text", "1.0.0"),
            Format::OpenMetrics001 => ("application", "openmetrics-text", "0.0.1"),
            Format::PrometheusText => ("text", "plain", "0.0.4"),
        }
    }

    /// expfmt's `matchFormat`: type and subtype equal or `*`; a missing version is OpenMetrics
    /// 0.0.1 or text 0.0.4; every other parameter of the format (only `version`, `charset`
    /// being skipped) must be equal.
    fn matches(self, clause: &Clause<'_>) -> bool {
        let (ty, sub, version) = self.media();
        if clause.ty != "*" && clause.ty != ty {
            return false;
        }
        if clause.sub != "*" && clause.sub != sub {
            return false;
        }
        if clause.ty == "*" && clause.sub == "*" {
            return true;
        }
        let asked = clause.param("version").unwrap_or(
            if clause.ty == "application" && clause.sub == "openmetrics-text" {
                "0.0.1"
            } else if clause.ty == "text" && clause.sub == "plain" {
                "0.0.4"
            } else {
                ""
            },
        );
        asked == version
    }
}

/// The format for a request with this `Accept` header (`None`: no header).
pub fn negotiate(accept: Option<&str>) -> Format {
    for clause in parse_accept(accept.unwrap_or("")) {
        if let Some(f) = Format::OFFERED.into_iter().find(|f| f.matches(&clause)) {
            return f;
        }
    }
    Format::PrometheusText
}

#[derive(Debug)]
struct Clause<'a> {
    ty: &'a str,
    sub: &'a str,
    q: f64,
    params: Vec<(&'a str, &'a str)>,
}

impl Clause<'_> {
    fn param(&self, key: &str) -> Option<&str> {
        self.params.iter().find(|(k, _)| *k == key).map(|(_, v)| *v)
    }
}

/// goautoneg's `ParseAccept`: comma-separated clauses `type/subtype;k=v;q=…`, a bare `*` read
/// as `*/*`, malformed clauses and parameters skipped, sorted by quality, then concrete types
/// before `*` (stable, so equal clauses keep the client's order).
fn parse_accept(header: &str) -> Vec<Clause<'_>> {
    let mut out = Vec::new();
    for part in header.split(',') {
        let part = part.trim_matches(' ');
        if part.is_empty() {
            continue;
        }
        let mut pieces = part.split(';');
        let media = pieces.next().unwrap_or("");
        let mut ts = media.split('/');
        let ty = ts.next().unwrap_or("").trim_matches(' ');
        let (sub, extra) = (ts.next(), ts.next());
        let sub = match (sub, extra) {
            (None, _) if ty == "*" => "*",
            (Some(s), None) => s.trim_matches(' '),
            _ => continue,
        };
        let mut clause = Clause {
            ty,
            sub,
            q: 1.0,
            params: Vec::new(),
        };
        for p in pieces {
            let mut kv = p.split('=');
            let (Some(k), Some(v), None) = (kv.next(), kv.next(), kv.next()) else {
                continue;
            };
            let k = k.trim_matches(' ');
            if k == "q" {
                // Go's ParseFloat error leaves 0.
                clause.q = v.parse().unwrap_or(0.0);
            } else {
                clause.params.push((k, v.trim_matches(' ')));
            }
        }
        out.push(clause);
    }
    out.sort_by(|a, b| {
        b.q.total_cmp(&a.q)
            .then((a.ty == "*").cmp(&(b.ty == "*")))
            .then((a.sub == "*").cmp(&(b.sub == "*")))
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The cases of prometheus/common `expfmt/encode_test.go` (`TestNegotiateIncludingOpenMetrics`
    /// and the wildcard cases of `TestNegotiateAccept`) whose answer is a format kerf writes;
    /// the protobuf ones fall through to kerf's next match.
    #[test]
    fn negotiation_follows_prometheus_common() {
        let cases = [
            ("application/openmetrics-text", Format::OpenMetrics001),
            (
                "application/openmetrics-text;version=0.0.1; escaping=underscores",
                Format::OpenMetrics001,
            ),
            (
                "application/openmetrics-text;version=1.0.0",
                Format::OpenMetrics1,
            ),
            (
                "application/openmetrics-text;version=2.0.0",
                Format::PrometheusText,
            ),
            (
                "application/openmetrics-text;version=0.0.4",
                Format::PrometheusText,
            ),
            ("text/plain;version=0.0.4", Format::PrometheusText),
            ("text/plain", Format::PrometheusText),
            ("*/*", Format::OpenMetrics1),
            ("", Format::PrometheusText),
            // Prometheus 2.42's scrape request.
            (
                "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
                Format::OpenMetrics1,
            ),
            // Prometheus with native histograms asks for protobuf first: kerf has none.
            (
                "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0.7,text/plain;version=0.0.4;q=0.3",
                Format::PrometheusText,
            ),
            // Quality orders the clauses, not their place in the header.
            (
                "application/openmetrics-text;version=1.0.0;q=0.2,text/plain;version=0.0.4;q=0.9",
                Format::PrometheusText,
            ),
            ("text/*", Format::PrometheusText),
            ("application/json", Format::PrometheusText),
        ];
        for (accept, want) in cases {
            assert_eq!(negotiate(Some(accept)), want, "Accept: {accept}");
        }
        assert_eq!(negotiate(None), Format::PrometheusText);
    }

    #[test]
    fn content_types_are_the_ones_expfmt_writes() {
        assert_eq!(
            Format::PrometheusText.content_type(),
            "text/plain; version=0.0.4; charset=utf-8"
        );
        assert_eq!(
            Format::OpenMetrics1.content_type(),
            "application/openmetrics-text; version=1.0.0; charset=utf-8"
        );
    }
}
