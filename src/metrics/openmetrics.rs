//! OpenMetrics text parser for exactly the input `promtool tsdb create-blocks-from openmetrics`
//! accepts, so a file that loads here also loads into Prometheus (and vice versa).
//!
//! Deliberate differences from promtool, each turning a silent data loss into an error:
//! samples of one series must be in strictly ascending time order (promtool silently drops the
//! others), and timestamps that look like milliseconds are rejected (promtool reads them as
//! seconds, placing the data thousands of years in the future).

use crate::support::metric_name::{is_label_name, is_metric_name};
use std::collections::{BTreeMap, HashMap};

/// Timestamps above this many seconds (year 5138) are almost certainly milliseconds.
const MAX_PLAUSIBLE_SECONDS: f64 = 1e11;

/// Metric family types of the OpenMetrics `# TYPE` line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetricType {
    Counter,
    Gauge,
    Histogram,
    GaugeHistogram,
    Summary,
    Info,
    StateSet,
    Unknown,
}

impl MetricType {
    fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "counter" => Self::Counter,
            "gauge" => Self::Gauge,
            "histogram" => Self::Histogram,
            "gaugehistogram" => Self::GaugeHistogram,
            "summary" => Self::Summary,
            "info" => Self::Info,
            "stateset" => Self::StateSet,
            "unknown" => Self::Unknown,
            _ => return None,
        })
    }
}

/// One series: metric name, labels (empty values dropped: Prometheus treats them as absent)
/// and samples as (milliseconds, value), strictly ascending. Milliseconds are derived exactly as
/// Prometheus does (`int64(seconds * 1000)`), so both hold identical timestamps.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub samples: Vec<(i64, f64)>,
}

/// A parsed file: series in order of first appearance plus the declared type per family name.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct OpenMetrics {
    pub series: Vec<Series>,
    pub families: BTreeMap<String, MetricType>,
}

impl OpenMetrics {
    /// Declared type of the family a sample name belongs to (`foo_total` → family `foo`).
    pub fn type_of(&self, sample_name: &str) -> Option<MetricType> {
        if let Some(t) = self.families.get(sample_name) {
            return Some(*t);
        }
        [
            "_total", "_created", "_count", "_sum", "_bucket", "_gcount", "_gsum", "_info",
        ]
        .iter()
        .filter_map(|suffix| sample_name.strip_suffix(suffix))
        .find_map(|family| self.families.get(family).copied())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct ParseError {
    /// 1-based line number (the line after the last one for "missing # EOF").
    pub line: usize,
    pub message: String,
}

fn err<T>(line: usize, message: impl Into<String>) -> Result<T, ParseError> {
    Err(ParseError {
        line,
        message: message.into(),
    })
}

/// Parses OpenMetrics text. The first problem found is returned with its line number.
pub fn parse(text: &str) -> Result<OpenMetrics, ParseError> {
    let mut out = OpenMetrics::default();
    let mut index: HashMap<(String, BTreeMap<String, String>), usize> = HashMap::new();
    let mut lines = text.split('\n').enumerate().peekable();
    let mut saw_eof = false;
    while let Some((i, line)) = lines.next() {
        let lineno = i + 1;
        if line == "# EOF" {
            // Only an optional final newline may follow.
            let rest: Vec<_> = lines.by_ref().collect();
            if !(rest.is_empty() || (rest.len() == 1 && rest[0].1.is_empty())) {
                return err(lineno + 1, "unexpected data after # EOF");
            }
            saw_eof = true;
            break;
        }
        if line.is_empty() && lines.peek().is_none() {
            break; // text ended with a newline but without # EOF
        }
        if let Some(rest) = line.strip_prefix("# ") {
            parse_metadata(rest, lineno, &mut out)?;
            continue;
        }
        if line.starts_with('#') {
            return err(
                lineno,
                format!(
                    "invalid comment {line:?}: only # TYPE, # HELP, # UNIT and # EOF are allowed"
                ),
            );
        }
        if line.is_empty() {
            return err(lineno, "empty line (OpenMetrics allows none before # EOF)");
        }
        let (name, labels, ts_ms, value) = parse_sample(line, lineno)?;
        let key = (name, labels);
        let idx = match index.get(&key) {
            Some(&idx) => idx,
            None => {
                out.series.push(Series {
                    name: key.0.clone(),
                    labels: key.1.clone(),
                    samples: Vec::new(),
                });
                index.insert(key, out.series.len() - 1);
                out.series.len() - 1
            }
        };
        let series = &mut out.series[idx];
        if let Some(&(last, _)) = series.samples.last()
            && ts_ms <= last
        {
            return err(
                lineno,
                format!(
                    "samples of series {} not in ascending time order ({} s is not after {} s)",
                    display_series(&series.name, &series.labels),
                    ts_ms as f64 / 1000.0,
                    last as f64 / 1000.0
                ),
            );
        }
        series.samples.push((ts_ms, value));
    }
    if !saw_eof {
        let lines_total = text.split('\n').count();
        return err(lines_total, "missing # EOF (it must be the last line)");
    }
    Ok(out)
}

/// `name{a="b"}` for messages.
pub fn display_series(name: &str, labels: &BTreeMap<String, String>) -> String {
    if labels.is_empty() {
        return name.to_string();
    }
    let inner: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v:?}")).collect();
    format!("{name}{{{}}}", inner.join(","))
}

fn parse_metadata(rest: &str, lineno: usize, out: &mut OpenMetrics) -> Result<(), ParseError> {
    let (keyword, rest) = rest.split_once(' ').unwrap_or((rest, ""));
    if !matches!(keyword, "TYPE" | "HELP" | "UNIT") {
        return err(
            lineno,
            format!(
                "invalid comment \"# {keyword}\": only # TYPE, # HELP, # UNIT and # EOF are allowed"
            ),
        );
    }
    let (name, text) = match rest.split_once(' ') {
        Some((n, t)) => (n, Some(t)),
        None => (rest, None),
    };
    if !is_metric_name(name) {
        return err(lineno, format!("# {keyword}: invalid metric name {name:?}"));
    }
    match keyword {
        "TYPE" => {
            let Some(t) = text.filter(|t| !t.is_empty()) else {
                return err(lineno, format!("# TYPE {name}: missing type"));
            };
            let Some(mt) = MetricType::parse(t) else {
                return err(
                    lineno,
                    format!(
                        "# TYPE {name}: invalid metric type {t:?} (counter, gauge, histogram, gaugehistogram, summary, info, stateset or unknown)"
                    ),
                );
            };
            out.families.insert(name.to_string(), mt);
        }
        "HELP" => {
            if text.is_none() {
                return err(lineno, format!("# HELP {name}: missing help text"));
            }
        }
        _ => {
            let Some(unit) = text else {
                return err(lineno, format!("# UNIT {name}: missing unit"));
            };
            if !unit.is_empty() && !name.ends_with(&format!("_{unit}")) {
                return err(
                    lineno,
                    format!("# UNIT {name}: unit {unit:?} is not a suffix of the metric name"),
                );
            }
        }
    }
    Ok(())
}

type Sample = (String, BTreeMap<String, String>, i64, f64);

fn parse_sample(line: &str, lineno: usize) -> Result<Sample, ParseError> {
    let name_end = line.find(['{', ' ']).unwrap_or(line.len());
    let name = &line[..name_end];
    if !is_metric_name(name) {
        return err(lineno, format!("invalid metric name {name:?}"));
    }
    let mut rest = &line[name_end..];
    let mut labels = BTreeMap::new();
    if let Some(after) = rest.strip_prefix('{') {
        rest = parse_labels(after, lineno, name, &mut labels)?;
    }
    let Some(rest) = rest.strip_prefix(' ') else {
        return err(
            lineno,
            format!("{name}: expected a single space and a value after the metric"),
        );
    };
    let (value_text, rest) = rest.split_once(' ').unwrap_or((rest, ""));
    let value = parse_float(value_text).ok_or_else(|| ParseError {
        line: lineno,
        message: format!("{name}: invalid value {value_text:?}"),
    })?;
    if rest.is_empty() {
        return err(
            lineno,
            format!("{name}: sample without timestamp (promtool needs one, in seconds)"),
        );
    }
    let (ts_text, exemplar) = match rest.split_once(' ') {
        Some((t, e)) => (t, Some(e)),
        None => (rest, None),
    };
    let ts = parse_float(ts_text)
        .filter(|t| t.is_finite())
        .ok_or_else(|| ParseError {
            line: lineno,
            message: format!("{name}: invalid timestamp {ts_text:?}"),
        })?;
    if ts.abs() > MAX_PLAUSIBLE_SECONDS {
        return err(
            lineno,
            format!(
                "{name}: timestamp {ts_text} looks like milliseconds; OpenMetrics timestamps are seconds"
            ),
        );
    }
    if let Some(ex) = exemplar
        && !(ex.starts_with("# {") && ex.contains('}'))
    {
        return err(
            lineno,
            format!("{name}: unexpected text after the timestamp: {ex:?}"),
        );
    }
    labels.retain(|_, v: &mut String| !v.is_empty());
    // Exactly Prometheus's conversion (Go `int64(ts * 1000)` truncates toward zero).
    Ok((name.to_string(), labels, (ts * 1000.0) as i64, value))
}

/// Parses `a="b",c="d"}` (after the `{`); returns the text after `}`.
fn parse_labels<'a>(
    mut s: &'a str,
    lineno: usize,
    name: &str,
    labels: &mut BTreeMap<String, String>,
) -> Result<&'a str, ParseError> {
    if let Some(rest) = s.strip_prefix('}') {
        return Ok(rest);
    }
    loop {
        let eq = s.find('=').ok_or_else(|| ParseError {
            line: lineno,
            message: format!("{name}: expected label name and '=' in the label set"),
        })?;
        let lname = &s[..eq];
        if !is_label_name(lname) {
            return err(lineno, format!("{name}: invalid label name {lname:?}"));
        }
        let Some(after) = s[eq + 1..].strip_prefix('"') else {
            return err(
                lineno,
                format!("{name}: label {lname}: expected '\"' after '='"),
            );
        };
        let mut value = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next() {
                None => {
                    return err(
                        lineno,
                        format!("{name}: label {lname}: unterminated label value"),
                    );
                }
                Some((i, '"')) => break i,
                Some((_, '\\')) => match chars.next() {
                    Some((_, '\\')) => value.push('\\'),
                    Some((_, '"')) => value.push('"'),
                    Some((_, 'n')) => value.push('\n'),
                    // Prometheus keeps unknown escapes verbatim.
                    Some((_, c)) => {
                        value.push('\\');
                        value.push(c);
                    }
                    None => {
                        return err(
                            lineno,
                            format!("{name}: label {lname}: unterminated label value"),
                        );
                    }
                },
                Some((_, c)) => value.push(c),
            }
        };
        if labels.insert(lname.to_string(), value).is_some() {
            return err(
                lineno,
                format!("{name}: label name {lname:?} is not unique"),
            );
        }
        s = &after[end + 1..];
        if let Some(rest) = s.strip_prefix('}') {
            return Ok(rest);
        }
        match s.strip_prefix(',') {
            Some(rest) if !rest.starts_with('}') => s = rest,
            _ => {
                return err(
                    lineno,
                    format!("{name}: expected ',' and another label or '}}' after label {lname}"),
                );
            }
        }
    }
}

/// Go `strconv.ParseFloat` accepts the same spellings as Rust for decimal floats, including
/// `NaN`, `+Inf`, `-Inf` (case-insensitive). Hex and `_` separators are rejected by both here.
fn parse_float(s: &str) -> Option<f64> {
    if s.is_empty() || s.contains('_') {
        return None;
    }
    s.parse::<f64>().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line_of(text: &str) -> (usize, String) {
        let e = parse(text).expect_err("should fail");
        (e.line, e.message)
    }

    #[test]
    fn parses_families_labels_escapes_and_float_timestamps() {
        let text = "# HELP gpu_util GPU use\n# TYPE gpu_util gauge\n# UNIT gpu_util_seconds seconds\n\
gpu_util{namespace=\"a\",pod=\"p\\\"q\\\\r\\ns\",empty=\"\"} 1.5 1767225600.25\n\
# TYPE req counter\nreq_total{pod=\"x\"} NaN 1767225600 # {trace=\"t\"} 1 1767225600\n\
req_total{pod=\"x\"} +Inf 1767225601\n# EOF\n";
        let om = parse(text).unwrap();
        assert_eq!(om.series.len(), 2);
        let s = &om.series[0];
        assert_eq!(s.name, "gpu_util");
        assert_eq!(s.labels.get("pod").unwrap(), "p\"q\\r\ns");
        assert!(
            !s.labels.contains_key("empty"),
            "empty label values are absent labels"
        );
        assert_eq!(s.samples, vec![(1_767_225_600_250, 1.5)]);
        assert_eq!(om.type_of("gpu_util"), Some(MetricType::Gauge));
        assert_eq!(om.type_of("req_total"), Some(MetricType::Counter));
        assert_eq!(om.type_of("other"), None);
        let r = &om.series[1].samples;
        assert!(r[0].1.is_nan());
        assert_eq!(r[1].1, f64::INFINITY);
    }

    #[test]
    fn eof_without_trailing_newline_is_fine() {
        assert_eq!(
            parse("m 1 10\n# EOF").unwrap().series[0].samples,
            vec![(10_000, 1.0)]
        );
    }

    #[test]
    fn errors_name_the_line_and_the_problem() {
        let cases: &[(&str, usize, &str)] = &[
            ("m 1 10\n", 2, "missing # EOF"),
            ("m 1 10", 1, "missing # EOF"),
            ("m 1 10\n# EOF\nm 2 20\n", 3, "after # EOF"),
            ("m 1 10\n\nm 2 20\n# EOF\n", 2, "empty line"),
            ("# just a comment\nm 1 10\n# EOF\n", 1, "invalid comment"),
            (
                "m{a=\"b\"} 1 20\nm{a=\"c\"} 1 5\nm{a=\"b\"} 2 10\n# EOF\n",
                3,
                "samples of series m{a=\"b\"} not in ascending time order",
            ),
            ("m 1 10\nm 2 10\n# EOF\n", 2, "not in ascending time order"),
            ("m 1\n# EOF\n", 1, "without timestamp"),
            ("m 1 1767225600000\n# EOF\n", 1, "looks like milliseconds"),
            ("m abc 10\n# EOF\n", 1, "invalid value \"abc\""),
            ("m 1 inf\n# EOF\n", 1, "invalid timestamp"),
            ("m  1 10\n# EOF\n", 1, "invalid value"),
            ("m 1 10 \n# EOF\n", 1, "unexpected text after the timestamp"),
            ("m{a=\"1\",a=\"2\"} 1 10\n# EOF\n", 1, "not unique"),
            ("m{a=\"1\",} 1 10\n# EOF\n", 1, "expected ','"),
            ("m{a = \"1\"} 1 10\n# EOF\n", 1, "invalid label name"),
            ("m{a=\"1} 1 10\n# EOF\n", 1, "unterminated"),
            ("9m 1 10\n# EOF\n", 1, "invalid metric name"),
            ("# TYPE m bogus\n# EOF\n", 1, "invalid metric type"),
            ("# TYPE m\n# EOF\n", 1, "missing type"),
            ("# HELP m\n# EOF\n", 1, "missing help"),
            ("# UNIT m seconds\n# EOF\n", 1, "not a suffix"),
            ("m 1 10\r\n# EOF\n", 1, "invalid timestamp"),
        ];
        for (text, line, msg) in cases {
            let (l, m) = line_of(text);
            assert_eq!(l, *line, "{text:?}: {m}");
            assert!(m.contains(msg), "{text:?}: got {m:?}, want {msg:?}");
        }
        let e = parse("m 1 10\nm 2 5\n# EOF\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "line 2: samples of series m not in ascending time order (5 s is not after 10 s)"
        );
    }
}
