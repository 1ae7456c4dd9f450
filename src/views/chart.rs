//! The one chart renderer: an inline SVG time chart (no script, no external resource), used by
//! the `kerf simulate` HTML report and the live `/debug` page.
//!
//! A chart holds lines (usage per signal, allocations, thresholds) and markers (changes) whose
//! reason shows on hover through SVG `<title>`, which browsers display without JavaScript.

use std::fmt::Write as _;

/// How a line is drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LineStyle {
    /// Straight segments between samples (recorded usage).
    Samples,
    /// A step function: each value holds until the next point (allocations, thresholds).
    Steps,
    /// A dashed step function (thresholds).
    Dashed,
}

#[derive(Clone, Debug)]
pub struct Line {
    pub label: String,
    pub color: &'static str,
    pub style: LineStyle,
    /// (unix seconds, value), ascending.
    pub points: Vec<(i64, f64)>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MarkerKind {
    Upsize,
    ScaleBack,
    /// CPU/memory requests (and the HPA target with them) changed.
    Requests,
}

impl MarkerKind {
    pub fn as_str(self) -> &'static str {
        match self {
            MarkerKind::Upsize => "upsize",
            MarkerKind::ScaleBack => "scaleBack",
            MarkerKind::Requests => "requests",
        }
    }
}

#[derive(Clone, Debug)]
pub struct Marker {
    pub t: i64,
    pub value: f64,
    pub kind: MarkerKind,
    /// Shown on hover.
    pub title: String,
}

#[derive(Clone, Debug, Default)]
pub struct Chart {
    /// Identifies the chart in the page (`data-workload`).
    pub id: String,
    /// What it shows (`data-resource`): `gpu`, `cpu` or `memory`.
    pub resource: &'static str,
    pub unit: String,
    pub from: i64,
    pub to: i64,
    pub lines: Vec<Line>,
    pub markers: Vec<Marker>,
    /// The span the recorded data covers (from, to, what to say on hover), shaded.
    pub covered: Option<(i64, i64, String)>,
}

pub const USAGE_COLORS: [&str; 2] = ["#1f77b4", "#9467bd"];
pub const REAL_COLOR: &str = "#7f7f7f";
pub const TEMPLATE_COLOR: &str = "#c7c7c7";
pub const SIMULATED_COLOR: &str = "#2ca02c";
pub const UPSIZE_COLOR: &str = "#d62728";
pub const SCALE_BACK_COLOR: &str = "#ff7f0e";
pub const REQUESTS_COLOR: &str = "#8c564b";

const WIDTH: f64 = 1120.0;
const HEIGHT: f64 = 260.0;
const LEFT: f64 = 60.0;
const RIGHT: f64 = 12.0;
const TOP: f64 = 12.0;
const BOTTOM: f64 = 56.0;

/// Escapes text for HTML and SVG.
pub fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// At most `max` points: consecutive samples are grouped into buckets and each bucket keeps its
/// highest sample, so peaks (what triggers an upsize) survive downsampling.
pub fn downsample(points: &[(i64, f64)], max: usize) -> Vec<(i64, f64)> {
    if points.len() <= max || max == 0 {
        return points.to_vec();
    }
    let per = points.len().div_ceil(max);
    points
        .chunks(per)
        .filter_map(|c| {
            c.iter()
                .copied()
                .fold(None, |best: Option<(i64, f64)>, p| match best {
                    Some(b) if b.1 >= p.1 => Some(b),
                    _ => Some(p),
                })
        })
        .collect()
}

fn format_time(t: i64, span: i64) -> String {
    let ts = jiff::Timestamp::from_second(t).unwrap_or_default();
    if span > 2 * 86_400 {
        ts.strftime("%m-%d %H:%M").to_string()
    } else {
        ts.strftime("%H:%M").to_string()
    }
}

fn nice_max(v: f64) -> f64 {
    if v <= 0.0 || !v.is_finite() {
        return 1.0;
    }
    let magnitude = 10f64.powf(v.log10().floor());
    for m in [1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0] {
        if m * magnitude >= v {
            return m * magnitude;
        }
    }
    10.0 * magnitude
}

/// The chart as an inline `<svg class="chart">` with a legend below the plot.
/// Where a value and a time fall on the plot.
struct Frame {
    from: i64,
    span: i64,
    max: f64,
    plot_w: f64,
    plot_h: f64,
}

impl Frame {
    fn of(chart: &Chart) -> Self {
        let max = chart
            .lines
            .iter()
            .flat_map(|l| l.points.iter().map(|p| p.1))
            .chain(chart.markers.iter().map(|m| m.value))
            .filter(|v| v.is_finite())
            .fold(0.0, f64::max);
        Self {
            from: chart.from,
            span: (chart.to - chart.from).max(1),
            max: nice_max(max * 1.05),
            plot_w: WIDTH - LEFT - RIGHT,
            plot_h: HEIGHT - TOP - BOTTOM,
        }
    }

    fn x(&self, t: i64) -> f64 {
        LEFT + (t - self.from).clamp(0, self.span) as f64 / self.span as f64 * self.plot_w
    }

    fn y(&self, v: f64) -> f64 {
        TOP + self.plot_h - (v / self.max).clamp(0.0, 1.0) * self.plot_h
    }
}

pub fn render(chart: &Chart) -> String {
    let f = Frame::of(chart);
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg class="chart" data-workload="{}" data-resource="{}" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" width="100%" role="img" aria-label="{}" font-family="sans-serif" font-size="11">"#,
        esc(&chart.id),
        chart.resource,
        esc(&format!("{} over time, {}", chart.id, chart.unit))
    );
    write_axes(&mut s, chart, &f);
    for line in chart.lines.iter().filter(|l| !l.points.is_empty()) {
        write_line(&mut s, line, &f, chart.to);
    }
    for m in &chart.markers {
        write_marker(&mut s, m, &f);
    }
    write_legend(&mut s, chart);
    s.push_str("</svg>");
    s
}

/// The plot's frame, the covered span, the value grid and the time axis.
fn write_axes(s: &mut String, chart: &Chart, f: &Frame) {
    let (plot_w, plot_h, span, max) = (f.plot_w, f.plot_h, f.span, f.max);
    let x = |t: i64| f.x(t);
    let y = |v: f64| f.y(v);
    let _ = write!(
        s,
        r##"<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" fill="#fafafa" stroke="#ccc"/>"##
    );
    if let Some((a, b, title)) = &chart.covered {
        let _ = write!(
            s,
            r##"<rect class="covered" x="{:.1}" y="{TOP}" width="{:.1}" height="{plot_h}" fill="#e8f0fb"><title>{}</title></rect>"##,
            x(*a),
            (x(*b) - x(*a)).max(0.0),
            esc(title)
        );
    }
    // Horizontal grid with values.
    for i in 0..=4 {
        let v = max * f64::from(i) / 4.0;
        let yy = y(v);
        let _ = write!(
            s,
            r##"<line x1="{LEFT}" x2="{}" y1="{yy:.1}" y2="{yy:.1}" stroke="#e4e4e4"/><text x="{}" y="{:.1}" text-anchor="end" fill="#555">{}</text>"##,
            LEFT + plot_w,
            LEFT - 6.0,
            yy + 4.0,
            trim(v)
        );
    }
    // Time axis: five labels.
    for i in 0..=4 {
        let t = chart.from + span * i / 4;
        let anchor = match i {
            0 => "start",
            4 => "end",
            _ => "middle",
        };
        let _ = write!(
            s,
            r##"<text x="{:.1}" y="{:.1}" text-anchor="{anchor}" fill="#555">{}</text>"##,
            x(t),
            TOP + plot_h + 14.0,
            format_time(t, span)
        );
    }
    let _ = write!(
        s,
        r##"<text x="12" y="{:.1}" fill="#555" transform="rotate(-90 12 {:.1})" text-anchor="middle">{}</text>"##,
        TOP + plot_h / 2.0,
        TOP + plot_h / 2.0,
        esc(&chart.unit)
    );
}

/// One line: samples joined, or steps held to the end of the chart.
fn write_line(s: &mut String, line: &Line, f: &Frame, to: i64) {
    let x = |t: i64| f.x(t);
    let y = |v: f64| f.y(v);
    let mut d = String::new();
    let mut last_y = None;
    for (i, &(t, v)) in line.points.iter().enumerate() {
        let (px, py) = (x(t), y(v));
        if i == 0 {
            let _ = write!(d, "M{px:.1},{py:.1}");
        } else {
            match line.style {
                LineStyle::Samples => {
                    let _ = write!(d, " L{px:.1},{py:.1}");
                }
                LineStyle::Steps | LineStyle::Dashed => {
                    let _ = write!(d, " H{px:.1} V{py:.1}");
                }
            }
        }
        last_y = Some(py);
    }
    // A step function holds its last value to the end of the chart.
    if line.style != LineStyle::Samples && last_y.is_some() {
        let _ = write!(d, " H{:.1}", x(to));
    }
    let dash = if line.style == LineStyle::Dashed {
        r#" stroke-dasharray="6 4""#
    } else {
        ""
    };
    let width = if line.style == LineStyle::Samples {
        1.2
    } else {
        2.0
    };
    let _ = write!(
        s,
        r#"<path class="line" d="{d}" fill="none" stroke="{}" stroke-width="{width}"{dash}><title>{}</title></path>"#,
        line.color,
        esc(&line.label)
    );
}

/// A change marker (upsize, scale-back, requests) with its guide line and title.
fn write_marker(s: &mut String, m: &Marker, f: &Frame) {
    let plot_h = f.plot_h;
    let (px, py) = (f.x(m.t), f.y(m.value));
    let (color, shape) = match m.kind {
        MarkerKind::Upsize => (
            UPSIZE_COLOR,
            format!(
                "M{:.1},{:.1} L{:.1},{:.1} L{:.1},{:.1} Z",
                px,
                py - 7.0,
                px - 6.0,
                py + 4.0,
                px + 6.0,
                py + 4.0
            ),
        ),
        MarkerKind::ScaleBack => (
            SCALE_BACK_COLOR,
            format!(
                "M{:.1},{:.1} L{:.1},{:.1} L{:.1},{:.1} Z",
                px,
                py + 7.0,
                px - 6.0,
                py - 4.0,
                px + 6.0,
                py - 4.0
            ),
        ),
        MarkerKind::Requests => (
            REQUESTS_COLOR,
            format!(
                "M{:.1},{:.1} L{:.1},{:.1} L{:.1},{:.1} L{:.1},{:.1} Z",
                px,
                py - 6.0,
                px + 6.0,
                py,
                px,
                py + 6.0,
                px - 6.0,
                py
            ),
        ),
    };
    let _ = write!(
        s,
        r##"<g class="marker {}"><line x1="{px:.1}" x2="{px:.1}" y1="{TOP}" y2="{:.1}" stroke="{color}" stroke-opacity="0.35"/><path d="{shape}" fill="{color}" stroke="#fff"/><title>{}</title></g>"##,
        m.kind.as_str(),
        TOP + plot_h,
        esc(&m.title)
    );
}

/// The legend below the plot, one entry per line and per kind of marker shown.
fn write_legend(s: &mut String, chart: &Chart) {
    // Legend below the plot, one entry per line style used.
    let mut lx = LEFT;
    let ly = HEIGHT - 14.0;
    let mut legend: Vec<(&str, &'static str, LineStyle)> = chart
        .lines
        .iter()
        .map(|l| (l.label.as_str(), l.color, l.style))
        .collect();
    if chart.markers.iter().any(|m| m.kind == MarkerKind::Upsize) {
        legend.push(("▲ upsize", UPSIZE_COLOR, LineStyle::Steps));
    }
    if chart
        .markers
        .iter()
        .any(|m| m.kind == MarkerKind::ScaleBack)
    {
        legend.push(("▼ scale-back", SCALE_BACK_COLOR, LineStyle::Steps));
    }
    if chart.markers.iter().any(|m| m.kind == MarkerKind::Requests) {
        legend.push(("◆ requests change", REQUESTS_COLOR, LineStyle::Steps));
    }
    for (label, color, style) in legend {
        let dash = if style == LineStyle::Dashed {
            r#" stroke-dasharray="6 4""#
        } else {
            ""
        };
        let _ = write!(
            s,
            r#"<line x1="{lx:.1}" x2="{:.1}" y1="{:.1}" y2="{:.1}" stroke="{color}" stroke-width="2"{dash}/><text x="{:.1}" y="{ly:.1}" fill="{color}">{}</text>"#,
            lx + 18.0,
            ly - 4.0,
            ly - 4.0,
            lx + 22.0,
            esc(label)
        );
        lx += 30.0 + 6.6 * label.chars().count() as f64;
    }
}

/// One bar of a [`Bars`] chart.
#[derive(Clone, Debug)]
pub struct Bar {
    pub label: String,
    pub value: f64,
    pub color: &'static str,
    /// The value as the page prints it (`700m`, `0.84`).
    pub text: String,
}

/// A horizontal bar chart: per row (a container, or the pod for an HPA) its bars side by side
/// — for figures with no time series behind them (the last cycle's requests and usage).
#[derive(Clone, Debug, Default)]
pub struct Bars {
    /// `data-workload`.
    pub id: String,
    /// `data-resource`: `gpu`, `cpu` or `memory`.
    pub resource: &'static str,
    pub rows: Vec<(String, Vec<Bar>)>,
}

/// The bars as an inline `<svg class="bars">`, every bar titled with its label and value.
pub fn render_bars(b: &Bars) -> String {
    let max = b
        .rows
        .iter()
        .flat_map(|(_, bars)| bars.iter().map(|x| x.value))
        .filter(|v| v.is_finite())
        .fold(0.0, f64::max);
    let max = if max > 0.0 { max } else { 1.0 };
    let (label_w, bar_w, bar_h, text_w) = (150.0, 560.0, 13.0, 260.0);
    let row_h = |n: usize| n as f64 * (bar_h + 3.0) + 10.0;
    let height: f64 = b
        .rows
        .iter()
        .map(|(_, bars)| row_h(bars.len()))
        .sum::<f64>()
        + 4.0;
    let mut s = format!(
        r#"<svg class="bars" data-workload="{}" data-resource="{}" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {w} {height}" width="{w}" role="img" font-family="sans-serif" font-size="11">"#,
        esc(&b.id),
        b.resource,
        w = label_w + bar_w + text_w,
    );
    let mut y = 4.0;
    for (row, bars) in &b.rows {
        let _ = write!(
            s,
            r##"<text x="0" y="{:.1}" fill="#222">{}</text>"##,
            y + bar_h,
            esc(row)
        );
        for bar in bars {
            let w = (bar.value / max).clamp(0.0, 1.0) * bar_w;
            let _ = write!(
                s,
                r##"<rect class="bar" x="{label_w}" y="{y:.1}" width="{w:.1}" height="{bar_h}" fill="{}"><title>{}: {}</title></rect><text x="{:.1}" y="{:.1}" fill="#333">{} {}</text>"##,
                bar.color,
                esc(&bar.label),
                esc(&bar.text),
                label_w + w + 4.0,
                y + bar_h - 2.0,
                esc(&bar.label),
                esc(&bar.text)
            );
            y += bar_h + 3.0;
        }
        y += 10.0;
    }
    s.push_str("</svg>");
    s
}

fn trim(v: f64) -> String {
    let s = format!("{v:.3}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s.is_empty() { "0".into() } else { s.into() }
}

/// Upsize and scale-back thresholds over an allocation: one line per distinct percent.
pub fn threshold_lines(
    thresholds: &[(crate::api::Signal, f64, f64)],
    allocation: &[(i64, f64)],
) -> Vec<Line> {
    let mut out = Vec::new();
    let mut seen: Vec<(bool, f64)> = Vec::new();
    for (signal, up, back) in thresholds {
        for (is_up, pct) in [(true, *up), (false, *back)] {
            if seen
                .iter()
                .any(|(u, p)| *u == is_up && (p - pct).abs() < 1e-9)
            {
                continue;
            }
            seen.push((is_up, pct));
            let others_differ = thresholds.iter().any(|(_, u, b)| {
                let other = if is_up { *u } else { *b };
                (other - pct).abs() > 1e-9
            });
            let which = if others_differ {
                format!(" ({})", signal.as_str())
            } else {
                String::new()
            };
            out.push(Line {
                label: format!(
                    "{} {}%{which}",
                    if is_up {
                        "upsize at"
                    } else {
                        "scale back below"
                    },
                    pct
                ),
                color: if is_up {
                    UPSIZE_COLOR
                } else {
                    SCALE_BACK_COLOR
                },
                style: LineStyle::Dashed,
                points: allocation
                    .iter()
                    .map(|(t, v)| (*t, v * pct / 100.0))
                    .collect(),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn downsampling_keeps_the_peaks_and_the_bound() {
        let points: Vec<(i64, f64)> = (0..1000).map(|i| (i, (i % 100) as f64)).collect();
        let d = downsample(&points, 50);
        assert!(d.len() <= 50, "{}", d.len());
        assert_eq!(d.iter().map(|p| p.1).fold(0.0, f64::max), 99.0);
        assert_eq!(downsample(&points[..10], 50), points[..10].to_vec());
    }

    #[test]
    fn a_chart_is_one_svg_with_a_titled_marker_per_change_and_escaped_text() {
        let chart = Chart {
            id: "ml/Deployment/llm".into(),
            resource: "gpu",
            unit: "GPUs per pod".into(),
            from: 0,
            to: 600,
            lines: vec![Line {
                label: "compute <used>".into(),
                color: USAGE_COLORS[0],
                style: LineStyle::Samples,
                points: vec![(0, 0.4), (300, 0.7), (600, 0.5)],
            }],
            markers: vec![
                Marker {
                    t: 300,
                    value: 0.84,
                    kind: MarkerKind::Upsize,
                    title: "upsize to 0.84 & more".into(),
                },
                Marker {
                    t: 500,
                    value: 0.5,
                    kind: MarkerKind::ScaleBack,
                    title: "scale back".into(),
                },
            ],
            covered: Some((150, 450, "data <here>".into())),
        };
        let svg = render(&chart);
        // The covered span is shaded from x(150) to x(450): a quarter to three quarters of the
        // plot's width (1048 px from x = 60).
        assert!(
            svg.contains(
                r##"<rect class="covered" x="322.0" y="12" width="524.0" height="192" fill="#e8f0fb"><title>data &lt;here&gt;</title></rect>"##
            ),
            "{svg}"
        );
        assert_eq!(svg.matches("<svg").count(), 1);
        assert_eq!(svg.matches(r#"class="marker upsize""#).count(), 1);
        assert_eq!(svg.matches(r#"class="marker scaleBack""#).count(), 1);
        assert!(
            svg.contains("<title>upsize to 0.84 &amp; more</title>"),
            "{svg}"
        );
        assert!(svg.contains("compute &lt;used&gt;"));
        assert!(!svg.contains("<script"));
    }
}
