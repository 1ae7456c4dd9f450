//! Just enough Kubernetes quantity handling to compare and render CPU/memory requests.

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// The quantity as a plain number (`500m` → 0.5, `1Gi` → 1073741824), `None` when unreadable.
pub fn value(q: &str) -> Option<f64> {
    let q = q.trim();
    let split = q
        .find(|c: char| c.is_ascii_alphabetic() && c != 'e' && c != 'E')
        .unwrap_or(q.len());
    let (num, suffix) = q.split_at(split);
    let mult = match suffix {
        "" => 1.0,
        "m" => 1e-3,
        "u" => 1e-6,
        "n" => 1e-9,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024.0,
        "Mi" => 1024.0_f64.powi(2),
        "Gi" => 1024.0_f64.powi(3),
        "Ti" => 1024.0_f64.powi(4),
        "Pi" => 1024.0_f64.powi(5),
        "Ei" => 1024.0_f64.powi(6),
        _ => return None,
    };
    let v: f64 = num.parse().ok()?;
    (v.is_finite() && v >= 0.0).then_some(v * mult)
}

pub fn cpu_millis(q: &Quantity) -> Option<i64> {
    value(&q.0).map(|v| (v * 1000.0).round() as i64)
}

pub fn memory_bytes(q: &Quantity) -> Option<i64> {
    value(&q.0).map(|v| v.round() as i64)
}

pub fn render_cpu(millis: i64) -> Quantity {
    if millis % 1000 == 0 {
        Quantity((millis / 1000).to_string())
    } else {
        Quantity(format!("{millis}m"))
    }
}

pub fn render_memory(bytes: i64) -> Quantity {
    for (suffix, unit) in [("Gi", 1i64 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)] {
        if bytes != 0 && bytes % unit == 0 {
            return Quantity(format!("{}{suffix}", bytes / unit));
        }
    }
    Quantity(bytes.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_renders() {
        assert_eq!(cpu_millis(&Quantity("500m".into())), Some(500));
        assert_eq!(cpu_millis(&Quantity("1.5".into())), Some(1500));
        assert_eq!(memory_bytes(&Quantity("512Mi".into())), Some(512 << 20));
        assert_eq!(memory_bytes(&Quantity("1G".into())), Some(1_000_000_000));
        assert_eq!(memory_bytes(&Quantity("1e3".into())), Some(1000));
        assert_eq!(value("12x"), None);
        assert_eq!(render_cpu(2000).0, "2");
        assert_eq!(render_cpu(700).0, "700m");
        assert_eq!(render_memory(512 << 20).0, "512Mi");
        assert_eq!(render_memory(1000).0, "1000");
    }
}
