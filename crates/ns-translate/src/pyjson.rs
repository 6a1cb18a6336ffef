//! JSON text exactly as Python's `json.dumps` writes it, and pyhf's digest built on it.
//!
//! pyhf's `utils.digest` is `sha256(json.dumps(obj, sort_keys=True, ensure_ascii=False))`, and
//! `pyhf` CLI outputs are `json.dumps(obj, indent=4, sort_keys=True)`. Reproducing the digest
//! needs Python's separators, Python's float `repr` (`1e-05`, `100000.0`) and integers kept as
//! integers.

use serde_json::{Number, Value};
use sha2::{Digest, Sha256};
use std::fmt::Write;

/// Options of Python's `json.dumps` that pyhf uses.
#[derive(Clone, Copy, Debug)]
pub struct DumpOptions {
    /// `indent=N`; `None` writes one line with `", "` and `": "` separators.
    pub indent: Option<usize>,
    pub sort_keys: bool,
    pub ensure_ascii: bool,
}

impl DumpOptions {
    /// What `pyhf.utils.digest` hashes.
    pub const DIGEST: DumpOptions = DumpOptions {
        indent: None,
        sort_keys: true,
        ensure_ascii: false,
    };
    /// What the `pyhf` CLI writes (`indent=4, sort_keys=True`).
    pub const PYHF_CLI: DumpOptions = DumpOptions {
        indent: Some(4),
        sort_keys: true,
        ensure_ascii: true,
    };
}

/// Where serialised text goes: a string, or straight into a hash (a digest of a 200 MB workspace
/// then never holds its text).
trait Sink {
    fn push_str(&mut self, s: &str);
    fn push(&mut self, c: char) {
        self.push_str(c.encode_utf8(&mut [0; 4]));
    }
}

impl Sink for String {
    fn push_str(&mut self, s: &str) {
        String::push_str(self, s);
    }
    fn push(&mut self, c: char) {
        String::push(self, c);
    }
}

impl Sink for Sha256 {
    fn push_str(&mut self, s: &str) {
        self.update(s.as_bytes());
    }
}

/// Serialise `value` as Python's `json.dumps` would.
pub fn dumps(value: &Value, options: DumpOptions) -> String {
    let mut out = String::new();
    write_value(&mut out, value, options, 0);
    out
}

/// pyhf's digest of a JSON document: hex sha256 of its canonical `json.dumps` text.
pub fn digest(value: &Value) -> String {
    let mut hasher = Sha256::new();
    write_value(&mut hasher, value, DumpOptions::DIGEST, 0);
    let hash = hasher.finalize();
    hash.iter().fold(String::with_capacity(64), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

fn newline(out: &mut impl Sink, options: DumpOptions, level: usize) {
    if let Some(width) = options.indent {
        out.push('\n');
        out.push_str(&" ".repeat(width * level));
    }
}

fn write_value(out: &mut impl Sink, value: &Value, options: DumpOptions, level: usize) {
    let item_separator = if options.indent.is_some() { "," } else { ", " };
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&python_number(n)),
        Value::String(s) => write_string(out, s, options.ensure_ascii),
        Value::Array(items) => {
            if items.is_empty() {
                out.push_str("[]");
                return;
            }
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(item_separator);
                }
                newline(out, options, level + 1);
                write_value(out, item, options, level + 1);
            }
            newline(out, options, level);
            out.push(']');
        }
        Value::Object(map) => {
            if map.is_empty() {
                out.push_str("{}");
                return;
            }
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            if options.sort_keys {
                entries.sort_by(|a, b| a.0.cmp(b.0));
            }
            out.push('{');
            for (i, (key, item)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push_str(item_separator);
                }
                newline(out, options, level + 1);
                write_string(out, key, options.ensure_ascii);
                out.push_str(": ");
                write_value(out, item, options, level + 1);
            }
            newline(out, options, level);
            out.push('}');
        }
    }
}

fn write_string(out: &mut impl Sink, s: &str, ensure_ascii: bool) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 || (ensure_ascii && !(' '..='~').contains(&c)) => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// A JSON number as Python writes it: integers as integers, floats as `repr(float)`.
pub fn python_number(n: &Number) -> String {
    if n.is_f64() {
        python_float_repr(n.as_f64().unwrap_or(f64::NAN))
    } else {
        n.to_string()
    }
}

/// Python's `repr(float)`: the shortest round-trip digits, scientific notation when the
/// decimal exponent is below −4 or at least 16, and always a `.0` or an exponent.
pub fn python_float_repr(x: f64) -> String {
    if x.is_nan() {
        return "NaN".into();
    }
    if x.is_infinite() {
        return if x > 0.0 {
            "Infinity".into()
        } else {
            "-Infinity".into()
        };
    }
    if x == 0.0 {
        return if x.is_sign_negative() {
            "-0.0".into()
        } else {
            "0.0".into()
        };
    }
    let (digits, exponent) = shortest_digits(x.abs());
    let sign = if x < 0.0 { "-" } else { "" };
    if !(-4..16).contains(&exponent) {
        let (first, rest) = digits.split_at(1);
        let fraction = if rest.is_empty() {
            String::new()
        } else {
            format!(".{rest}")
        };
        let exp_sign = if exponent < 0 { '-' } else { '+' };
        return format!("{sign}{first}{fraction}e{exp_sign}{:02}", exponent.abs());
    }
    if exponent < 0 {
        let zeros = "0".repeat((-exponent - 1) as usize);
        return format!("{sign}0.{zeros}{digits}");
    }
    let int_len = exponent as usize + 1;
    if digits.len() <= int_len {
        let zeros = "0".repeat(int_len - digits.len());
        format!("{sign}{digits}{zeros}.0")
    } else {
        let (int_part, frac_part) = digits.split_at(int_len);
        format!("{sign}{int_part}.{frac_part}")
    }
}

/// The shortest digits that read back as `x` (> 0, finite), and the decimal exponent of the first,
/// so that x = d.ddd × 10^exponent. Among equally short candidates the one nearest to x, ties to
/// the even digit — what CPython's `repr` (David Gay's dtoa, mode 0) prints. Ryū makes the same
/// choice; Rust's own `{:e}` breaks exact ties the other way (`0.5907363891601562` would become
/// `…563`), which changes pyhf digests of float32-derived histograms.
fn shortest_digits(x: f64) -> (String, i32) {
    let mut buffer = ryu::Buffer::new();
    let text = buffer.format_finite(x);
    let (mantissa, exponent) = text.split_once('e').unwrap_or((text, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    let (int_part, frac_part) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let all: String = format!("{int_part}{frac_part}");
    let leading_zeros = all.len() - all.trim_start_matches('0').len();
    let digits = all.trim_matches('0').to_string();
    (
        digits,
        exponent + int_part.len() as i32 - 1 - leading_zeros as i32,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn float_repr_matches_python() {
        let cases = [
            (1e-5, "1e-05"),
            (100000.0, "100000.0"),
            (0.0001, "0.0001"),
            (1e16, "1e+16"),
            (1e15, "1000000000000000.0"),
            (0.1, "0.1"),
            (-2.5, "-2.5"),
            (123.456, "123.456"),
            (1.2345e-7, "1.2345e-07"),
            (1e100, "1e+100"),
            (5e-324, "5e-324"),
            (0.30000000000000004, "0.30000000000000004"),
            (-0.0, "-0.0"),
            (12345678901234567.0, "1.2345678901234568e+16"),
            // Exact decimal ties between two shortest candidates: CPython rounds to even.
            (0.5907363891601562, "0.5907363891601562"),
            (1113178120592002.2, "1113178120592002.2"),
            (9.5367431640625e-07, "9.5367431640625e-07"),
        ];
        for (x, expected) in cases {
            assert_eq!(python_float_repr(x), expected, "repr of {x:e}");
        }
    }

    #[test]
    fn dumps_matches_python_layout() {
        let v: Value = serde_json::from_str(r#"{"b": [1, 2.0, "é\n"], "a": {}, "c": []}"#).unwrap();
        assert_eq!(
            dumps(&v, DumpOptions::DIGEST),
            "{\"a\": {}, \"b\": [1, 2.0, \"é\\n\"], \"c\": []}"
        );
        assert_eq!(
            dumps(&v, DumpOptions::PYHF_CLI),
            "{\n    \"a\": {},\n    \"b\": [\n        1,\n        2.0,\n        \"\\u00e9\\n\"\n    ],\n    \"c\": []\n}"
        );
    }
}
