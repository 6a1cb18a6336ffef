//! Reading workspaces: JSON text → `serde_json::Value` → typed [`Workspace`], validated.

use ns_core::{Error, Result};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::path::Path;

use crate::spec::{ModifierKind, Workspace, f64_of};

/// Parse JSON text, naming the line and column of a syntax error. Python's `json` accepts
/// `NaN`/`Infinity`; a workspace must be finite, so those are reported as such.
pub fn parse_json(text: &str, origin: &str) -> Result<Value> {
    if let Some((line, column, literal)) = integer_beyond_64_bits(text) {
        // serde_json would read it as a double and change the digest pyhf (arbitrary-precision
        // Python integers) computes: refuse rather than silently differ.
        return Err(Error::Json {
            path: origin.to_string(),
            message: format!(
                "the integer {literal} at line {line} column {column} does not fit in 64 bits, so it \
                 cannot be kept exact: a seed or a count must be below 2^64 \
                 (18446744073709551616); a measured value may be written as a decimal number \
                 (e.g. {literal}.0)"
            ),
        });
    }
    serde_json::from_str(text).map_err(|e| {
        let (line, column) = (e.line(), e.column());
        let rest = text.lines().nth(line.saturating_sub(1)).map(|l| l.get(column.saturating_sub(1)..).unwrap_or(""));
        let non_finite = rest.is_some_and(|r| {
            let r = r.trim_start_matches(['-', '+']);
            r.starts_with("NaN") || r.starts_with("Infinity") || r.starts_with("inf")
        });
        let text_of_error = e.to_string();
        let message = if non_finite {
            format!("non-finite number (NaN or Infinity) at line {line} column {column}: workspace numbers must be finite")
        } else if text_of_error.contains("surrogate") || text_of_error.contains("hex escape") {
            format!(
                "a \\u escape near line {line} column {column} is a lone UTF-16 surrogate, which is \
                 not a character; names must be valid Unicode"
            )
        } else {
            text_of_error
        };
        Error::Json { path: origin.to_string(), message }
    })
}

/// Whether all eight bytes of `word` are ASCII digits (0x30–0x39): every high nibble is 3, and
/// adding 6 to the low nibbles carries out of none (the high nibbles cap the sum below 0x46).
fn eight_digits(word: u64) -> bool {
    const HIGH: u64 = 0xF0F0_F0F0_F0F0_F0F0;
    const THREES: u64 = 0x3030_3030_3030_3030;
    word & HIGH == THREES && word.wrapping_add(0x0606_0606_0606_0606) & HIGH == THREES
}

/// The first integer literal outside strings whose value does not fit in i64/u64, as (line,
/// column, literal).
fn integer_beyond_64_bits(text: &str) -> Option<(usize, usize, String)> {
    let bytes = text.as_bytes();
    // Such an integer is a run of 19 digits or more that is not a fraction (after '.'), an
    // exponent or the integral part of a decimal number (before '.', 'e'): most documents have
    // none (full-precision decimals have long fractions), and finding runs is a fraction of
    // the cost of the string-aware token scan below. A run of 15 digits or more covers a whole
    // 8-byte block at an offset divisible by 8, so only blocks of eight digits are looked at.
    let decimal = |b: Option<&u8>| matches!(b, Some(b'.' | b'e' | b'E' | b'+'));
    let digit_at = |k: usize| bytes.get(k).is_some_and(u8::is_ascii_digit);
    let mut candidate = false;
    let mut block = 0;
    while block + 8 <= bytes.len() {
        let word = u64::from_le_bytes(bytes[block..block + 8].try_into().unwrap_or([0; 8]));
        if !eight_digits(word) {
            block += 8;
            continue;
        }
        let start = (0..block)
            .rev()
            .find(|&k| !digit_at(k))
            .map_or(0, |k| k + 1);
        let end = (block + 8..bytes.len())
            .find(|&k| !digit_at(k))
            .unwrap_or(bytes.len());
        if end - start >= 19
            && !decimal(start.checked_sub(1).and_then(|k| bytes.get(k)))
            && !decimal(bytes.get(end))
        {
            candidate = true;
            break;
        }
        block = end.next_multiple_of(8);
    }
    if !candidate {
        return None;
    }
    let (mut i, mut in_string, mut escaped) = (0, false, false);
    while i < bytes.len() {
        let b = bytes[i];
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            i += 1;
            continue;
        }
        if b == b'"' {
            in_string = true;
            i += 1;
            continue;
        }
        if b == b'-' || b.is_ascii_digit() {
            let start = i;
            i += 1;
            let mut integral = true;
            while i < bytes.len() {
                match bytes[i] {
                    b'0'..=b'9' | b'+' | b'-' => {}
                    b'.' | b'e' | b'E' => integral = false,
                    _ => break,
                }
                i += 1;
            }
            let token = &text[start..i];
            // Only 19 or more digits can leave 64 bits: shorter tokens are not parsed.
            if integral
                && token.len() >= 19
                && token.bytes().any(|b| b.is_ascii_digit())
                && token.parse::<i64>().is_err()
                && token.parse::<u64>().is_err()
            {
                let line = text[..start].matches('\n').count() + 1;
                let column = start - text[..start].rfind('\n').map_or(0, |p| p + 1) + 1;
                return Some((line, column, token.to_string()));
            }
            continue;
        }
        i += 1;
    }
    None
}

/// Read a JSON file.
///
/// `-` reads standard input. A UTF-8 byte-order mark is skipped. Input larger than
/// [`max_input_bytes`] (or endless, like `/dev/zero`) stops with an error instead of exhausting
/// memory.
pub fn read_json(path: &Path) -> Result<Value> {
    parse_json(&read_text(path)?, &origin_of(path))
}

/// How errors name the file at `path`.
pub fn origin_of(path: &Path) -> String {
    if path.as_os_str() == "-" {
        "standard input".to_string()
    } else {
        path.display().to_string()
    }
}

/// The text of a JSON file, with the checks of [`read_json`] that come before parsing (size,
/// encoding).
pub fn read_text(path: &Path) -> Result<String> {
    let origin = origin_of(path);
    let io = |e| Error::io(&origin, e);
    let limit = max_input_bytes();
    let mut bytes = Vec::new();
    if path.as_os_str() == "-" {
        std::io::Read::read_to_end(
            &mut std::io::Read::take(std::io::stdin().lock(), limit + 1),
            &mut bytes,
        )
    } else {
        std::fs::File::open(path).and_then(|f| {
            std::io::Read::read_to_end(&mut std::io::Read::take(f, limit + 1), &mut bytes)
        })
    }
    .map_err(io)?;
    if bytes.len() as u64 > limit {
        return Err(Error::InvalidInput(format!(
            "{origin}: larger than the input limit of {} MB (set NEXTSTAT_MAX_INPUT_MB to raise it)",
            limit >> 20
        )));
    }
    if looks_like_utf16(&bytes) {
        return Err(Error::Json {
            path: origin,
            message: "UTF-16 text (JSON files are read as UTF-8): convert it, e.g. with \
                      `iconv -f UTF-16 -t UTF-8`"
                .into(),
        });
    }
    if bytes.starts_with(b"\xEF\xBB\xBF") {
        bytes.drain(..3);
    }
    String::from_utf8(bytes).map_err(|e| Error::Json {
        path: origin,
        message: format!("not UTF-8 text (byte {})", e.utf8_error().valid_up_to()),
    })
}

/// UTF-16 text: a UTF-16 byte-order mark, or (without one) a NUL byte beside each of the first
/// ASCII characters, which no UTF-8 JSON has.
fn looks_like_utf16(bytes: &[u8]) -> bool {
    if bytes.starts_with(&[0xFF, 0xFE]) || bytes.starts_with(&[0xFE, 0xFF]) {
        return true;
    }
    let head = &bytes[..bytes.len().min(64) & !1];
    !head.is_empty()
        && (head.chunks(2).all(|pair| pair[1] == 0 && pair[0] != 0)
            || head.chunks(2).all(|pair| pair[0] == 0 && pair[1] != 0))
}

/// The largest JSON input read (`ns_core::settings::Settings::max_input_bytes`).
pub fn max_input_bytes() -> u64 {
    ns_core::settings::settings().max_input_bytes
}

/// Convert a JSON value into a typed struct, naming the JSON path of the first problem.
pub fn from_value<T: DeserializeOwned>(value: Value, what: &str) -> Result<T> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        Error::Json {
            path: format!("{what} {path}"),
            message: e.into_inner().to_string(),
        }
    })
}

impl Workspace {
    /// Typed, validated workspace from a JSON value.
    pub fn from_value(value: Value) -> Result<Workspace> {
        if !value.is_object() {
            let found = match &value {
                Value::Array(_) => "an array",
                Value::String(_) => "a string",
                Value::Number(_) => "a number",
                Value::Bool(_) => "a boolean",
                _ => "null",
            };
            return Err(Error::InvalidWorkspace(format!(
                "a workspace is a JSON object with 'channels', 'measurements', 'observations' and \
                 'version'; this is {found}"
            )));
        }
        // The plain deserializer reads the tree in place; only a document it refuses is read
        // again with the path-tracking one, for a message that says where.
        let ws: Workspace = match Workspace::deserialize(&value) {
            Ok(ws) => ws,
            Err(_) => from_value(value, "workspace")?,
        };
        ws.validate()?;
        Ok(ws)
    }

    /// Typed, validated workspace from JSON text.
    pub fn from_json_str(text: &str) -> Result<Workspace> {
        Self::from_value(parse_json(text, "workspace")?)
    }

    /// Typed, validated workspace parsed straight from JSON text, without a JSON tree; `None`
    /// where that does not give one (not a workspace, or a problem to report): the caller then
    /// takes the way through [`parse_json`] and [`Workspace::from_value`], which names it.
    pub fn from_json_text_direct(text: &str) -> Option<Workspace> {
        // The same refusal of integers beyond 64 bits as `parse_json`.
        if integer_beyond_64_bits(text).is_some() {
            return None;
        }
        let ws: Workspace = serde_json::from_str(text).ok()?;
        ws.validate().ok()?;
        Some(ws)
    }

    /// Typed, validated workspace from a file.
    pub fn from_path(path: &Path) -> Result<Workspace> {
        let value = read_json(path)?;
        Self::from_value(value).map_err(|e| match e {
            Error::InvalidWorkspace(m) => {
                Error::InvalidWorkspace(format!("{}: {m}", path.display()))
            }
            other => other,
        })
    }

    /// The workspace as a JSON value (numbers keep their integer/float identity).
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    /// Structural checks of pyhf's schema and workspace rules that serde's types do not express.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::InvalidWorkspace(m));
        if self.version != "1.0.0" {
            return bad(format!(
                "version is '{}', only pyhf workspace version '1.0.0' is supported",
                self.version
            ));
        }
        for (list, name) in [
            (self.channels.is_empty(), "channels"),
            (self.measurements.is_empty(), "measurements"),
            (self.observations.is_empty(), "observations"),
        ] {
            if list {
                return bad(format!("'{name}' must contain at least one entry"));
            }
        }
        let channel_bins = self.validate_channels()?;
        self.validate_observations(&channel_bins)?;
        self.validate_measurements()
    }

    /// Unique channel and sample names, equal bin counts within a channel, modifier data of the
    /// sample's length. Returns each channel's bin count.
    fn validate_channels(&self) -> Result<HashMap<&str, usize>> {
        let bad = |m: String| Err(Error::InvalidWorkspace(m));
        let mut channel_bins = HashMap::new();
        for (ci, channel) in self.channels.iter().enumerate() {
            // Locations are formatted only for an error: a published workspace has thousands.
            let at = || format!("channels[{ci}] '{}'", channel.name);
            if channel_bins.contains_key(channel.name.as_str()) {
                return bad(format!("{}: duplicate channel name", at()));
            }
            let Some(first) = channel.samples.first() else {
                return bad(format!("{}: a channel needs at least one sample", at()));
            };
            let n_bins = first.data.len();
            channel_bins.insert(channel.name.as_str(), n_bins);
            let mut sample_names = HashSet::new();
            for (si, sample) in channel.samples.iter().enumerate() {
                let at = || format!("{}, samples[{si}] '{}'", at(), sample.name);
                if !sample_names.insert(sample.name.as_str()) {
                    return bad(format!("{}: duplicate sample name in the channel", at()));
                }
                if sample.data.is_empty() {
                    return bad(format!(
                        "{}: data is empty; a sample needs at least one bin",
                        at()
                    ));
                }
                if sample.data.len() != n_bins {
                    // Name both samples: either may be the wrong one.
                    return bad(format!(
                        "{}: data has {} bins but sample '{}' of the same channel has {n_bins}",
                        at(),
                        sample.data.len(),
                        first.name
                    ));
                }
                for (mi, modifier) in sample.modifiers.iter().enumerate() {
                    let lengths: &[(&str, usize)] = match &modifier.kind {
                        ModifierKind::HistoSys { hi_data, lo_data } => &[
                            ("data.hi_data", hi_data.len()),
                            ("data.lo_data", lo_data.len()),
                        ],
                        ModifierKind::ShapeSys(v) | ModifierKind::StatError(v) => {
                            &[("data", v.len())]
                        }
                        _ => &[],
                    };
                    if let Some((key, len)) = lengths.iter().find(|(_, len)| *len != n_bins) {
                        return bad(format!(
                            "{}, modifiers[{mi}] {} '{}': {key} has {len} entries but the sample has {n_bins} bins",
                            at(),
                            modifier.kind.type_name(),
                            modifier.name
                        ));
                    }
                }
            }
        }
        Ok(channel_bins)
    }

    /// One observation per channel, of the channel's length.
    fn validate_observations(&self, channel_bins: &HashMap<&str, usize>) -> Result<()> {
        let bad = |m: String| Err(Error::InvalidWorkspace(m));
        let mut observed = HashSet::new();
        for (oi, obs) in self.observations.iter().enumerate() {
            let at = || format!("observations[{oi}] '{}'", obs.name);
            if !observed.insert(obs.name.as_str()) {
                return bad(format!("{}: duplicate observation name", at()));
            }
            // An observation of a channel the workspace lacks is ignored, as pyhf does: HEPData
            // signal patches often remove a channel and leave its observation behind.
            match channel_bins.get(obs.name.as_str()) {
                Some(&n) if n != obs.data.len() => {
                    return bad(format!(
                        "{}: data has {} bins but the channel has {n}",
                        at(),
                        obs.data.len()
                    ));
                }
                _ => {}
            }
        }
        if let Some(channel) = self
            .channels
            .iter()
            .find(|c| !observed.contains(c.name.as_str()))
        {
            return bad(format!("channel '{}' has no observation", channel.name));
        }
        Ok(())
    }

    /// Unique measurement names, one configuration per parameter, well-formed bounds.
    fn validate_measurements(&self) -> Result<()> {
        let bad = |m: String| Err(Error::InvalidWorkspace(m));
        let mut measurement_names = HashSet::new();
        for (mi, m) in self.measurements.iter().enumerate() {
            if !measurement_names.insert(m.name.as_str()) {
                return bad(format!(
                    "measurements[{mi}] '{}': duplicate measurement name",
                    m.name
                ));
            }
            let mut configured = HashSet::new();
            for (pi, p) in m.config.parameters.iter().enumerate() {
                let at = || {
                    format!(
                        "measurements[{mi}] '{}', config.parameters[{pi}] '{}'",
                        m.name, p.name
                    )
                };
                if !configured.insert(p.name.as_str()) {
                    return bad(format!(
                        "{}: multiple parameter configurations for '{}'",
                        at(),
                        p.name
                    ));
                }
                if let Some(bounds) = &p.bounds {
                    if let Some(i) = bounds.iter().position(|b| b.len() != 2) {
                        return bad(format!("{}: bounds[{i}] must be a [low, high] pair", at()));
                    }
                    if let Some(i) = bounds.iter().position(|b| f64_of(&b[0]) > f64_of(&b[1])) {
                        return bad(format!("{}: bounds[{i}] has low > high", at()));
                    }
                }
            }
        }
        Ok(())
    }

    /// Observations of channels the workspace does not have (ignored by every model, as in pyhf).
    pub fn orphaned_observations(&self) -> Vec<&str> {
        self.observations
            .iter()
            .filter(|o| !self.channels.iter().any(|c| c.name == o.name))
            .map(|o| o.name.as_str())
            .collect()
    }

    /// The measurement named `name`, or the first one.
    pub fn measurement(&self, name: Option<&str>) -> Result<&crate::spec::Measurement> {
        match name {
            None => self
                .measurements
                .first()
                .ok_or_else(|| Error::InvalidWorkspace("no measurements".into())),
            Some(name) => self
                .measurements
                .iter()
                .find(|m| m.name == name)
                .ok_or_else(|| {
                    let known: Vec<&str> =
                        self.measurements.iter().map(|m| m.name.as_str()).collect();
                    Error::InvalidInput(format!(
                        "no measurement named '{name}' (the workspace has: {})",
                        known.join(", ")
                    ))
                }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::integer_beyond_64_bits;

    #[test]
    fn only_integers_beyond_64_bits_outside_strings_are_found() {
        let found = integer_beyond_64_bits;
        assert_eq!(
            found("{\"a\": [1,\n  123456789012345678901]}"),
            Some((2, 3, "123456789012345678901".into()))
        );
        assert_eq!(
            found("[-98765432109876543210]"),
            Some((1, 2, "-98765432109876543210".into()))
        );
        // Fractions, integral parts of decimals, exponents, strings, and integers that fit.
        assert_eq!(found("[0.12345678901234567890123]"), None);
        assert_eq!(found("[12345678901234567890123.5]"), None);
        assert_eq!(found("[12345678901234567890123e2]"), None);
        assert_eq!(found("[1e+1234567890123456789]"), None);
        assert_eq!(found("{\"name\": \"run_1234567890123456789012\"}"), None);
        assert_eq!(found("[18446744073709551615, -9223372036854775808]"), None);
    }

    #[test]
    fn runs_are_found_at_every_alignment_and_at_both_ends() {
        let found = integer_beyond_64_bits;
        let big = "123456789012345678901";
        for pad in 0..17 {
            let spaces = " ".repeat(pad);
            assert_eq!(
                found(&format!("{spaces}[{big}]")),
                Some((1, pad + 2, big.into())),
                "pad {pad}"
            );
            // The document ends with the run, or starts with it.
            assert_eq!(
                found(&format!("{spaces}{big}")),
                Some((1, pad + 1, big.into()))
            );
            assert_eq!(found(&format!("{big}{spaces}")), Some((1, 1, big.into())));
            assert_eq!(found(&format!("{spaces}[0.{big}]")), None, "pad {pad}");
            assert_eq!(found(&format!("{spaces}[{big}.5]")), None, "pad {pad}");
            // 18 and 19 digits that fit, beside text of eight digits.
            assert_eq!(
                found(&format!(
                    "{spaces}[123456789012345678, 12345678, 1234567890123456789]"
                )),
                None
            );
        }
    }
}
