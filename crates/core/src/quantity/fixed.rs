//! Numbers as kerf prints them: GPU units without float noise, and fixed decimals as `{:.N}`
//! prints them, fast (annotations, recommendation specs and the engine's reasons print GPU
//! values for every workload each cycle).

use std::fmt;

/// GPU units as text without float noise (at most 6 decimals, trailing zeros trimmed).
pub fn format_gpu(v: f64) -> String {
    let s = Fixed(v, 6).to_string();
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s.is_empty() || s == "-0" {
        "0".into()
    } else {
        s.into()
    }
}

/// `v` with `.1` decimals, exactly as `format!("{:.N}", v)` prints it, mostly from the shortest
/// round-trip text instead of the exact (big-number) conversion: annotations, recommendation
/// specs and the engine's reasons print GPU values for every workload each cycle.
///
/// Below 1e9 an f64's spacing is at most 2^-23 ≈ 1.2e-7, far under the 1e-6 the six decimals
/// need, so the shortest text `s` rounds as `v` does: a
/// rounding boundary strictly between them would itself round-trip and be shorter (or as short
/// and closer), which the shortest text is not. When `s` is the boundary itself (its digits past
/// the precision are exactly `5`), which way `v` rounds needs its exact value: the exact
/// conversion then, as for larger or non-finite values and precisions above 6.
#[derive(Clone, Copy, Debug)]
pub struct Fixed(pub f64, pub usize);

impl fmt::Display for Fixed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Fixed(v, prec) = *self;
        match (1..=6).contains(&prec) && v.is_finite() && v.abs() < 1e9 {
            true => match fixed_from_shortest(v, prec) {
                // Digits, a sign and a dot: ASCII, taken from `{v}`'s own text.
                Some((text, len)) => f.write_str(
                    std::str::from_utf8(&text[..len]).expect("a number's text is ASCII"),
                ),
                None => write!(f, "{v:.prec$}"),
            },
            false => write!(f, "{v:.prec$}"),
        }
    }
}

/// See [`Fixed`]: the text in a stack buffer, `None` where the exact conversion must decide.
fn fixed_from_shortest(v: f64, prec: usize) -> Option<([u8; 48], usize)> {
    /// The shortest text, in a stack buffer (`Err` when it does not fit: tiny values).
    struct Buf([u8; 48], usize);
    impl fmt::Write for Buf {
        fn write_str(&mut self, s: &str) -> fmt::Result {
            let end = self.1 + s.len();
            self.0
                .get_mut(self.1..end)
                .ok_or(fmt::Error)?
                .copy_from_slice(s.as_bytes());
            self.1 = end;
            Ok(())
        }
    }
    let mut short = Buf([0; 48], 0);
    fmt::Write::write_fmt(&mut short, format_args!("{v}")).ok()?;
    let text = &short.0[..short.1];
    let (negative, text) = match text.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, text),
    };
    let (int, frac) = match text.iter().position(|&b| b == b'.') {
        Some(dot) => (&text[..dot], &text[dot + 1..]),
        None => (text, &[][..]),
    };
    // Digits kept (integer then `prec` decimals), rounded half up on the shortest text.
    let mut digits = [b'0'; 24];
    let n = int.len() + prec;
    digits[..int.len()].copy_from_slice(int);
    let kept = frac.len().min(prec);
    digits[int.len()..int.len() + kept].copy_from_slice(&frac[..kept]);
    let mut carry = false;
    if frac.len() > prec {
        let tail = &frac[prec..];
        if tail == b"5" {
            return None;
        }
        carry = tail[0] >= b'5';
    }
    let mut i = n;
    while carry && i > 0 {
        i -= 1;
        if digits[i] == b'9' {
            digits[i] = b'0';
        } else {
            digits[i] += 1;
            carry = false;
        }
    }
    let mut out = [0u8; 48];
    let mut len = 0;
    let mut put = |b: u8| {
        out[len] = b;
        len += 1;
    };
    if negative {
        put(b'-');
    }
    if carry {
        put(b'1');
    }
    for (k, &d) in digits[..n].iter().enumerate() {
        if k == int.len() {
            put(b'.');
        }
        put(d);
    }
    Some((out, len))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `Fixed` prints what `{:.N}` prints: random bit patterns, GPU-like values (multiples and
    /// ratios of small fractions), rounding ties and carries.
    #[test]
    fn fixed_prints_as_the_exact_conversion() {
        let mut values = vec![
            0.0,
            -0.0,
            0.5,
            1.0,
            2.0,
            100.0,
            0.1 + 0.2,
            1e-7,
            -1e-7,
            0.0078125,
            0.00005,
            9.99996,
            -9.99996,
            0.99999949,
            0.9999995,
            999_999_999.999_999,
            123_456.5,
            1e-30,
            f64::NAN,
            f64::INFINITY,
            f64::MIN_POSITIVE,
            5e8 + 0.25,
        ];
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for i in 0..20_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            values.push(f64::from_bits(x));
            values.push((x % 100_000_000) as f64 / 1e7);
            values.push((x % 1_000_000) as f64 / 1e6 * (1.0 + (i % 50) as f64 / 100.0));
            values.push((i % 4096) as f64 / 4096.0 * 1.25);
            values.push(-((x % 20_000) as f64) / 2e4 / 3.0);
        }
        for v in values {
            for prec in 1..=6 {
                assert_eq!(
                    Fixed(v, prec).to_string(),
                    format!("{v:.prec$}"),
                    "{v:e} .{prec}"
                );
            }
        }
    }
}
