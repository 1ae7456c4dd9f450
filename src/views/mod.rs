//! What `/debug` and `kerf simulate` both draw, below both: the SVG chart renderer, a pod's
//! allocation, the usage totals (computed with the engine's own functions), the threshold
//! lines, and the last cycle's live view the webhook's store holds.

pub mod chart;
pub mod labels;
pub mod live;
pub mod pods;
pub mod usage;

/// A time series: (Unix seconds, value).
pub type Points = Vec<(i64, f64)>;
