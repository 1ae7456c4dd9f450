//! Kubernetes resource quantities for CPU, memory and GPUs: the one place kerf parses a quantity.
//!
//! `k8s-openapi`'s `Quantity` is only a string newtype (no parsing, no arithmetic), so this module
//! implements the Kubernetes grammar (`<signedNumber><suffix>`, suffix one of the binary SI
//! `Ki Mi Gi Ti Pi Ei`, decimal SI `n u m "" k M G T P E`, or a decimal exponent `e<n>` / `E<n>`)
//! in exact integer arithmetic — never through a float, as Kubernetes itself does.
//!
//! CPU is handled in millicores and memory in bytes. A value finer than the unit is rounded UP
//! (Kubernetes does the same: `0.1m` is `1m`, `0.5` bytes is `1`). Surrounding white space is
//! ignored, as Kubernetes ignores it when it decodes an object (`Quantity.UnmarshalJSON`).
//!
//! GPUs (`nvidia.com/gpu`) are read in GPU units by [`parse_gpus`]: the same grammar, then the
//! nearest `f64` to the exact value (GPU math is in `f64` GPU units everywhere). See there why a
//! fraction is read rather than rejected.
//!
//! Canonical output:
//! - CPU: whole cores as a plain integer (`"2"`), anything else in millicores (`"700m"`, `"1500m"`).
//! - memory: the largest binary suffix that divides the value exactly (`"512Mi"`, `"1Gi"`,
//!   `"1536Mi"`), else plain bytes (`"1000000000"`).

mod fixed;
pub use fixed::{Fixed, format_gpu};

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// Why a quantity string was rejected; the message names the offending text.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid quantity {text:?}: {problem}")]
pub struct QuantityError {
    pub text: String,
    pub problem: String,
}

fn err(text: &str, problem: impl Into<String>) -> QuantityError {
    QuantityError {
        text: text.to_string(),
        problem: problem.into(),
    }
}

const MAX_DIGITS: usize = 36;

/// A quantity as written: ±`mantissa` × 10^`exp10` × 2^`exp2`, exactly.
struct Exact<'a> {
    /// The text without surrounding white space, for error messages.
    text: &'a str,
    negative: bool,
    mantissa: u128,
    exp10: i32,
    exp2: u32,
}

/// Parse `text` and return its value × 10^`scale`, rounded up (toward +∞) to an integer.
/// `scale` = 3 gives milli-units (CPU millicores), 0 gives units (bytes).
pub fn parse_scaled(text: &str, scale: i32) -> Result<i64, QuantityError> {
    named(text, parse_exact(text.trim()).and_then(|q| q.scaled(scale)))
}

/// Errors name the text as written (white space included).
fn named<T>(text: &str, r: Result<T, QuantityError>) -> Result<T, QuantityError> {
    r.map_err(|e| QuantityError {
        text: text.to_string(),
        ..e
    })
}

/// The power of ten and of two a quantity's suffix stands for: Kubernetes' decimal SI, binary
/// and `e<n>` exponent suffixes (`apimachinery/pkg/api/resource`).
fn suffix_exponents(text: &str, suffix: &str) -> Result<(i32, u32), QuantityError> {
    Ok(match suffix {
        "" => (0, 0),
        "n" => (-9, 0),
        "u" => (-6, 0),
        "m" => (-3, 0),
        "k" => (3, 0),
        "M" => (6, 0),
        "G" => (9, 0),
        "T" => (12, 0),
        "P" => (15, 0),
        "E" => (18, 0),
        "Ki" => (0, 10),
        "Mi" => (0, 20),
        "Gi" => (0, 30),
        "Ti" => (0, 40),
        "Pi" => (0, 50),
        "Ei" => (0, 60),
        s if (s.starts_with('e') || s.starts_with('E')) && s.len() > 1 => {
            let exp = &s[1..];
            let digits = exp.strip_prefix(['+', '-']).unwrap_or(exp);
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return Err(err(text, format!("bad exponent {s:?}")));
            }
            let e: i32 = exp
                .parse()
                .ok()
                .filter(|e: &i32| e.abs() <= 60)
                .ok_or_else(|| err(text, format!("exponent {s:?} out of range")))?;
            (e, 0)
        }
        s => {
            return Err(err(
                text,
                format!(
                    "unknown suffix {s:?} (expected one of n u m k M G T P E Ki Mi Gi Ti Pi Ei or e<n>)"
                ),
            ));
        }
    })
}

fn parse_exact(text: &str) -> Result<Exact<'_>, QuantityError> {
    if text.is_empty() {
        return Err(err(text, "empty"));
    }
    let bytes = text.as_bytes();
    let mut i = 0;
    let negative = match bytes[0] {
        b'-' => {
            i = 1;
            true
        }
        b'+' => {
            i = 1;
            false
        }
        _ => false,
    };
    // Mantissa: digits with at most one '.', at least one digit.
    let mut mantissa: u128 = 0;
    let mut significant = 0usize;
    let mut frac_digits: i32 = 0;
    let mut seen_dot = false;
    let mut any_digit = false;
    while i < bytes.len() {
        match bytes[i] {
            d @ b'0'..=b'9' => {
                any_digit = true;
                if mantissa != 0 || d != b'0' {
                    significant += 1;
                }
                if significant > MAX_DIGITS {
                    return Err(err(
                        text,
                        format!("more than {MAX_DIGITS} significant digits"),
                    ));
                }
                mantissa = mantissa * 10 + u128::from(d - b'0');
                if seen_dot {
                    frac_digits += 1;
                }
            }
            b'.' if !seen_dot => seen_dot = true,
            b'.' => return Err(err(text, "more than one decimal point")),
            _ => break,
        }
        i += 1;
    }
    if !any_digit {
        return Err(err(
            text,
            "expected a number such as 700m, 1.5, 512Mi or 1e3",
        ));
    }
    let (exp10, exp2) = suffix_exponents(text, &text[i..])?;
    Ok(Exact {
        text,
        negative,
        mantissa,
        exp10: exp10 - frac_digits,
        exp2,
    })
}

impl Exact<'_> {
    /// The value × 10^`scale`, rounded up (toward +∞) to an integer.
    fn scaled(&self, scale: i32) -> Result<i64, QuantityError> {
        let (text, negative, mantissa, exp2) = (self.text, self.negative, self.mantissa, self.exp2);
        let too_large = || err(text, "too large (must fit in a 64-bit integer of the unit)");
        let mut value = mantissa
            .checked_shl(exp2)
            .filter(|v| v >> exp2 == mantissa)
            .ok_or_else(too_large)?;
        let k = self.exp10 + scale;
        if k >= 0 {
            let mul = 10u128.checked_pow(k as u32).ok_or_else(too_large)?;
            value = value.checked_mul(mul).ok_or_else(too_large)?;
        } else {
            // Round the magnitude up for positives, toward zero for negatives: both are toward +∞.
            let div = 10u128.checked_pow((-k) as u32);
            value = match div {
                Some(d) => {
                    let q = value / d;
                    if value % d != 0 && !negative {
                        q + 1
                    } else {
                        q
                    }
                }
                // Divisor beyond u128: the value is a positive fraction of one unit (or zero).
                None => u128::from(value != 0 && !negative),
            };
        }
        let magnitude = i64::try_from(value).map_err(|_| too_large())?;
        Ok(if negative { -magnitude } else { magnitude })
    }

    /// The nearest `f64` to the exact value (the decimal part is rounded once, correctly, by
    /// the standard library; the binary suffix is an exact power of two).
    fn to_f64(&self) -> f64 {
        let decimal: f64 = format!("{}e{}", self.mantissa, self.exp10)
            .parse()
            .unwrap_or(f64::NAN);
        let v = decimal * 2f64.powi(self.exp2 as i32);
        if self.negative { -v } else { v }
    }
}

fn non_negative(text: &str, v: i64, what: &str) -> Result<i64, QuantityError> {
    if v < 0 {
        Err(err(text, format!("a {what} request cannot be negative")))
    } else {
        Ok(v)
    }
}

/// CPU quantity → millicores (`"700m"` → 700, `"1.5"` → 1500, `"0.1m"` → 1).
pub fn parse_cpu_millis(text: &str) -> Result<i64, QuantityError> {
    non_negative(text, parse_scaled(text, 3)?, "CPU")
}

/// Memory quantity → bytes (`"512Mi"` → 536870912, `"100M"` → 100000000).
pub fn parse_memory_bytes(text: &str) -> Result<i64, QuantityError> {
    non_negative(text, parse_scaled(text, 0)?, "memory")
}

/// GPU quantity → GPU units (`"1"` → 1.0, `"2000m"` → 2.0, `"0.5"` → 0.5); negative is an error.
///
/// Why fractions are read rather than rejected: Kubernetes accepts `nvidia.com/gpu` (an extended
/// resource) only as a whole number, so a pod in a cluster never has `500m`; the API server is
/// the validator, kerf is a reader. A fractional value can only come from a manifest or a
/// template kerf did not get from the API server, and there it means GPU units, like every GPU
/// number kerf handles (docs/design/gpu-engine.md#g1). Reading it whole-or-nothing would make
/// the engine and admission disagree with what the manifest says.
pub fn parse_gpus(text: &str) -> Result<f64, QuantityError> {
    let gpus = named(text, parse_exact(text.trim()).map(|q| q.to_f64()))?;
    if gpus < 0.0 {
        return Err(err(text, "a GPU count cannot be negative"));
    }
    if !gpus.is_finite() {
        return Err(err(text, "too large for a GPU count"));
    }
    Ok(gpus)
}

pub fn gpus(q: &Quantity) -> Result<f64, QuantityError> {
    parse_gpus(&q.0)
}

pub fn cpu_millis(q: &Quantity) -> Result<i64, QuantityError> {
    parse_cpu_millis(&q.0)
}

pub fn memory_bytes(q: &Quantity) -> Result<i64, QuantityError> {
    parse_memory_bytes(&q.0)
}

/// Canonical CPU text: `"2"` for whole cores, else `"<n>m"`.
pub fn format_cpu_millis(millis: i64) -> String {
    if millis % 1000 == 0 {
        (millis / 1000).to_string()
    } else {
        format!("{millis}m")
    }
}

/// Canonical memory text: largest exact binary suffix, else plain bytes.
pub fn format_memory_bytes(bytes: i64) -> String {
    if bytes == 0 {
        return "0".into();
    }
    const SUFFIXES: [(&str, u32); 6] = [
        ("Ei", 60),
        ("Pi", 50),
        ("Ti", 40),
        ("Gi", 30),
        ("Mi", 20),
        ("Ki", 10),
    ];
    for (suffix, shift) in SUFFIXES {
        let unit = 1i64 << shift;
        if bytes % unit == 0 {
            return format!("{}{suffix}", bytes / unit);
        }
    }
    bytes.to_string()
}

pub fn cpu_quantity(millis: i64) -> Quantity {
    Quantity(format_cpu_millis(millis))
}

pub fn memory_quantity(bytes: i64) -> Quantity {
    Quantity(format_memory_bytes(bytes))
}

/// One mebibyte, the unit memory recommendations are rounded up to.
pub const MIB: i64 = 1 << 20;

/// Ceiling that ignores floating-point noise: a value within 1e-9 (relative) of an integer is that integer.
pub fn ceil_clean(x: f64) -> f64 {
    let r = x.round();
    if (x - r).abs() <= 1e-9 * r.abs().max(1.0) {
        r
    } else {
        x.ceil()
    }
}

/// A request kerf sets, capped at the container's limit where kerf leaves the limit as it is
/// (`RequestsOnly`, docs/policies.md#limits): the API server refuses a request above its limit.
/// `Some(limit)` when the cap applies.
pub fn capped_at_limit(want: i64, limit: Option<i64>) -> (i64, Option<i64>) {
    match limit {
        Some(l) if l < want => (l, Some(l)),
        _ => (want, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn suffix_exponents() {
        let of = |s| super::suffix_exponents("q", s);
        assert_eq!(of("").unwrap(), (0, 0));
        assert_eq!(of("m").unwrap(), (-3, 0));
        assert_eq!(of("Gi").unwrap(), (0, 30));
        assert_eq!(of("e-3").unwrap(), (-3, 0));
        assert_eq!(of("E").unwrap(), (18, 0), "E alone is exa, not an exponent");
        assert!(of("e61").unwrap_err().to_string().contains("out of range"));
        assert!(of("e+").unwrap_err().to_string().contains("bad exponent"));
        assert!(of("mi").unwrap_err().to_string().contains("unknown suffix"));
    }

    #[test]
    fn cpu_forms_parse_to_millicores() {
        for (text, want) in [
            ("700m", 700),
            ("1", 1000),
            ("1.5", 1500),
            ("0.5", 500),
            (".25", 250),
            ("2.", 2000),
            ("1e3", 1_000_000),
            ("1E3", 1_000_000),
            ("1e-3", 1),
            ("0.1m", 1),
            ("100u", 1),
            ("250000u", 250),
            ("1k", 1_000_000),
            ("+300m", 300),
            ("0", 0),
        ] {
            assert_eq!(parse_cpu_millis(text), Ok(want), "{text}");
        }
    }

    #[test]
    fn memory_forms_parse_to_bytes() {
        for (text, want) in [
            ("512Mi", 512 * MIB),
            ("1Gi", 1 << 30),
            ("1.5Gi", 1536 * MIB),
            ("100M", 100_000_000),
            ("1e3", 1000),
            ("1E", 1_000_000_000_000_000_000),
            ("128974848", 128_974_848),
            ("129e6", 129_000_000),
            ("123Ki", 125_952),
            ("0.5", 1),
            ("1500m", 2),
        ] {
            assert_eq!(parse_memory_bytes(text), Ok(want), "{text}");
        }
    }

    #[test]
    fn bad_quantities_are_rejected_with_the_text_named() {
        for text in [
            "", "m", "abc", "1.2.3", "1Kb", "1 Gi", "1e", "1ex", "--1", "1e999", "9Ei", "-100m",
        ] {
            let e = parse_cpu_millis(text).expect_err(text);
            assert_eq!(e.text, text);
            assert!(e.to_string().contains(&format!("{text:?}")), "{e}");
        }
    }

    #[test]
    fn gpu_quantities_are_gpu_units() {
        for (text, want) in [
            ("1", 1.0),
            ("2", 2.0),
            ("2000m", 2.0),
            ("500m", 0.5),
            ("0.5", 0.5),
            ("1e1", 10.0),
            ("0", 0.0),
            (" 4 ", 4.0),
            ("0.9999496268804882", 0.9999496268804882),
        ] {
            assert_eq!(parse_gpus(text), Ok(want), "{text}");
        }
        for text in ["-1", "1Kb", "abc", "", "1e999"] {
            let e = parse_gpus(text).expect_err(text);
            assert_eq!(e.text, text);
        }
    }

    proptest! {
        #[test]
        fn gpu_units_are_the_nearest_float(x in 0.0f64..1e6) {
            // Exactly what the float reading gave for plain decimals.
            prop_assert_eq!(parse_gpus(&x.to_string()), Ok(x));
        }
    }

    #[test]
    fn surrounding_white_space_is_ignored_as_kubernetes_does() {
        assert_eq!(parse_cpu_millis(" 700m\n"), Ok(700));
        assert_eq!(parse_memory_bytes("\t1Gi "), Ok(1 << 30));
        let e = parse_cpu_millis(" x ").unwrap_err();
        assert_eq!(e.text, " x ", "the error names the text as written");
    }

    #[test]
    fn canonical_formatting() {
        assert_eq!(format_cpu_millis(700), "700m");
        assert_eq!(format_cpu_millis(1000), "1");
        assert_eq!(format_cpu_millis(1500), "1500m");
        assert_eq!(format_cpu_millis(0), "0");
        assert_eq!(format_memory_bytes(512 * MIB), "512Mi");
        assert_eq!(format_memory_bytes(1 << 30), "1Gi");
        assert_eq!(format_memory_bytes(1536 * MIB), "1536Mi");
        assert_eq!(format_memory_bytes(1024), "1Ki");
        assert_eq!(format_memory_bytes(100_000_000), "100000000");
        assert_eq!(format_memory_bytes(0), "0");
    }

    proptest! {
        #[test]
        fn cpu_round_trips(m in 0i64..10_000_000_000) {
            prop_assert_eq!(parse_cpu_millis(&format_cpu_millis(m)), Ok(m));
        }

        #[test]
        fn memory_round_trips(b in 0i64..(1i64 << 50)) {
            prop_assert_eq!(parse_memory_bytes(&format_memory_bytes(b)), Ok(b));
        }
    }
}
