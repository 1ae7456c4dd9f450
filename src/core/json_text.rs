//! JSON text, byte by byte: the bytes a JSON string cannot hold as they are, found eight at a
//! time, and strings written with serde_json's escapes. Shared by the webhook's body scanner
//! (which skips strings) and the answer writer (which writes them).

/// The bytes of `x` (little-endian) that are a quote, a backslash or below 0x20 have their high
/// bit set in the result: zero when there is none, and the lowest set bit is exact (bytes
/// above it may be flagged wrongly; the caller only looks at the lowest).
#[inline(always)]
pub fn special(x: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let below = |v: u64, n: u64| v.wrapping_sub(ONES * n) & !v;
    (below(x, 0x20)
        | below(x ^ (ONES * u64::from(b'"')), 1)
        | below(x ^ (ONES * u64::from(b'\\')), 1))
        & HIGH
}

/// The index of the first byte of `b` from `i` on that a JSON string must escape (or that ends
/// one), or `b.len()`.
#[inline(always)]
pub fn next_special(b: &[u8], mut i: usize) -> usize {
    while let Some(chunk) = b.get(i..i + 8) {
        let found = special(u64::from_le_bytes(
            chunk.try_into().expect("a slice of eight bytes"),
        ));
        if found != 0 {
            // The lowest flagged byte is the first one.
            return i + (found.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    while let Some(&c) = b.get(i) {
        if c == b'"' || c == b'\\' || c < 0x20 {
            return i;
        }
        i += 1;
    }
    i
}

/// Appends `s` as a JSON string, quoted and escaped byte for byte as serde_json writes it:
/// `\"`, `\\`, `\b \t \n \f \r`, other control bytes as `\u00xx`; everything else as is.
pub fn push_str(out: &mut Vec<u8>, s: &str) {
    let b = s.as_bytes();
    out.reserve(b.len() + 2);
    out.push(b'"');
    let mut start = 0;
    loop {
        let i = next_special(b, start);
        out.extend_from_slice(&b[start..i]);
        let Some(&c) = b.get(i) else { break };
        match c {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            0x08 => out.extend_from_slice(b"\\b"),
            b'\t' => out.extend_from_slice(b"\\t"),
            b'\n' => out.extend_from_slice(b"\\n"),
            0x0c => out.extend_from_slice(b"\\f"),
            b'\r' => out.extend_from_slice(b"\\r"),
            _ => {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                out.extend_from_slice(b"\\u00");
                out.push(HEX[usize::from(c >> 4)]);
                out.push(HEX[usize::from(c & 0xf)]);
            }
        }
        start = i + 1;
    }
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every byte value in every position of short and long strings, and mixed text: written
    /// exactly as serde_json writes the same string.
    #[test]
    fn strings_are_written_as_serde_json_writes_them() {
        let mut cases: Vec<String> = vec![
            String::new(),
            "plain".into(),
            "kerf: w \"1\"; admitted unchanged".into(),
            r#"{"policy":"GpuReactivePolicy/ml/bench","containers":{"a":{"gpu":"0.6"}}}"#.into(),
            "é ü 日本 \u{7f} \u{2028} end".into(),
        ];
        for c in 0u8..0x80 {
            let c = char::from(c);
            for at in [0, 3, 7, 8, 9, 15, 16, 17] {
                let mut s: String = "abcdefghijklmnopqrstuvwxyz".chars().take(at).collect();
                s.push(c);
                s.push_str("tail");
                cases.push(s);
            }
        }
        for s in cases {
            let mut out = Vec::new();
            push_str(&mut out, &s);
            assert_eq!(
                String::from_utf8(out).unwrap(),
                serde_json::to_string(&s).unwrap(),
                "{s:?}"
            );
        }
    }
}
