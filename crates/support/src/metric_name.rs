//! Prometheus's rules for metric names (`[a-zA-Z_:][a-zA-Z0-9_:]*`) and label names
//! (`[a-zA-Z_][a-zA-Z0-9_]*`).

/// Whether `s` is a valid Prometheus metric name.
pub fn is_metric_name(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

/// Whether `s` is a valid Prometheus label name.
pub fn is_label_name(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}
