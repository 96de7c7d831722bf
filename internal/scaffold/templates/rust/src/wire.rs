//! The protocol buffers wire format, as much of it as the plugin needs
//! (docs/abi.md, "Messages"): a reader that skips unknown fields, a writer,
//! and config values.

use std::fmt;

/// One field's payload, by wire type.
pub enum Field<'a> {
    Varint(u64),
    Fixed64(u64),
    Bytes(&'a [u8]),
    Fixed32,
}

impl<'a> Field<'a> {
    pub fn uint(&self) -> Option<u64> {
        match self {
            Field::Varint(v) => Some(*v),
            _ => None,
        }
    }

    /// A zigzag-encoded sint64.
    pub fn sint(&self) -> Option<i64> {
        self.uint().map(|v| (v >> 1) as i64 ^ -((v & 1) as i64))
    }

    pub fn bytes(&self) -> Option<&'a [u8]> {
        match self {
            Field::Bytes(b) => Some(b),
            _ => None,
        }
    }
}

/// Reads a message's fields in order.
pub struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf }
    }

    fn varint(&mut self) -> Option<u64> {
        let mut v = 0u64;
        for i in 0..10 {
            let b = *self.buf.get(i)?;
            v |= u64::from(b & 0x7f) << (7 * i);
            if b < 0x80 {
                self.buf = &self.buf[i + 1..];
                return Some(v);
            }
        }
        None
    }

    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if n > self.buf.len() {
            return None;
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Some(head)
    }

    /// The next field: `Some(None)` at the end, `None` when the message
    /// is malformed.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Option<Option<(u32, Field<'a>)>> {
        if self.buf.is_empty() {
            return Some(None);
        }
        let tag = self.varint()?;
        let field = u32::try_from(tag >> 3).ok()?;
        let value = match tag & 7 {
            0 => Field::Varint(self.varint()?),
            1 => Field::Fixed64(u64::from_le_bytes(self.take(8)?.try_into().ok()?)),
            2 => {
                let n = usize::try_from(self.varint()?).ok()?;
                Field::Bytes(self.take(n)?)
            }
            5 => {
                self.take(4)?;
                Field::Fixed32
            }
            _ => return None,
        };
        if field == 0 {
            return None;
        }
        Some(Some((field, value)))
    }
}

/// Writes a message. Every call writes its field, zero or not: callers
/// leave out proto3 zero values themselves, and write oneof members.
#[derive(Default)]
pub struct Writer {
    buf: Vec<u8>,
}

impl Writer {
    pub fn new() -> Self {
        Writer::default()
    }

    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.buf.push(v as u8 | 0x80);
            v >>= 7;
        }
        self.buf.push(v as u8);
    }

    fn tag(&mut self, field: u32, wire_type: u64) {
        self.varint(u64::from(field) << 3 | wire_type);
    }

    pub fn bytes(&mut self, field: u32, b: &[u8]) {
        self.tag(field, 2);
        self.varint(b.len() as u64);
        self.buf.extend_from_slice(b);
    }

    pub fn string(&mut self, field: u32, s: &str) {
        self.bytes(field, s.as_bytes());
    }

    pub fn message(&mut self, field: u32, m: &Writer) {
        self.bytes(field, &m.buf);
    }

    pub fn boolean(&mut self, field: u32, b: bool) {
        self.tag(field, 0);
        self.varint(u64::from(b));
    }

    pub fn uint(&mut self, field: u32, v: u64) {
        self.tag(field, 0);
        self.varint(v);
    }

    pub fn sint(&mut self, field: u32, v: i64) {
        self.tag(field, 0);
        self.varint(((v << 1) ^ (v >> 63)) as u64);
    }

    pub fn into_bytes(self) -> Vec<u8> {
        self.buf
    }
}

/// A config value: what the rule file's YAML decoded to.
pub enum Value {
    Null,
    Int(i64),
    Uint(u64),
    Float(f64),
    Str(String),
    Bool(bool),
    List,
    Map,
    Duration(i64),
}

/// How deep values may nest (docs/abi.md, "Nesting").
const MAX_DEPTH: usize = 64;

/// Decodes a `ValueMap`'s fields.
pub fn value_map(buf: &[u8]) -> Option<Vec<(String, Value)>> {
    map_entries(buf, 0)
}

fn map_entries(buf: &[u8], depth: usize) -> Option<Vec<(String, Value)>> {
    let mut out = Vec::new();
    let mut r = Reader::new(buf);
    while let Some((field, f)) = r.next()? {
        if field != 1 {
            continue;
        }
        let (mut key, mut value) = (String::new(), Value::Null);
        let mut e = Reader::new(f.bytes()?);
        while let Some((field, f)) = e.next()? {
            match field {
                1 => key = String::from_utf8(f.bytes()?.to_vec()).ok()?,
                2 => value = decode_value(f.bytes()?, depth + 1)?,
                _ => {}
            }
        }
        out.push((key, value));
    }
    Some(out)
}

fn decode_value(buf: &[u8], depth: usize) -> Option<Value> {
    if depth > MAX_DEPTH {
        return None;
    }
    let mut value = Value::Null;
    let mut r = Reader::new(buf);
    while let Some((field, f)) = r.next()? {
        value = match field {
            1 => Value::Null,
            2 => Value::Int(f.sint()?),
            3 => Value::Uint(f.uint()?),
            4 => match f {
                Field::Fixed64(bits) => Value::Float(f64::from_bits(bits)),
                _ => return None,
            },
            5 | 6 => Value::Str(String::from_utf8_lossy(f.bytes()?).into_owned()),
            7 => Value::Bool(f.uint()? != 0),
            8 => {
                let mut l = Reader::new(f.bytes()?);
                while let Some((_, item)) = l.next()? {
                    decode_value(item.bytes()?, depth + 1)?;
                }
                Value::List
            }
            9 => {
                map_entries(f.bytes()?, depth + 1)?;
                Value::Map
            }
            10 => Value::Duration(f.sint()?),
            _ => continue,
        };
    }
    Some(value)
}

impl Value {
    /// The value as a whole number, as ruled's SDK reads one: an integer,
    /// a float without a fraction, or a string of digits.
    pub fn whole_number(&self) -> Option<i64> {
        match self {
            Value::Int(n) => Some(*n),
            Value::Uint(n) => i64::try_from(*n).ok(),
            Value::Float(f) if f.fract() == 0.0 && f.abs() < (1u64 << 53) as f64 => Some(*f as i64),
            Value::Str(s) => s.trim().parse().ok(),
            _ => None,
        }
    }

    /// The value as a duration in nanoseconds: a duration, a string such
    /// as "1m30s" (Go's time.ParseDuration syntax), or 0.
    pub fn duration_ns(&self) -> Option<i64> {
        match self {
            Value::Duration(ns) => Some(*ns),
            Value::Str(s) => parse_duration(s.trim()),
            Value::Int(0) | Value::Uint(0) => Some(0),
            Value::Float(f) if *f == 0.0 => Some(0),
            _ => None,
        }
    }
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Null => write!(f, "<nil>"),
            Value::Int(n) => write!(f, "{}", n),
            Value::Uint(n) => write!(f, "{}", n),
            Value::Float(x) => write!(f, "{}", x),
            Value::Str(s) => write!(f, "{}", s),
            Value::Bool(b) => write!(f, "{}", b),
            Value::List => write!(f, "a list"),
            Value::Map => write!(f, "a mapping"),
            Value::Duration(ns) => write!(f, "{}ns", ns),
        }
    }
}

/// Parses a duration as Go's time.ParseDuration does: an optional sign,
/// then numbers with an optional fraction, each with a unit (ns, us, µs,
/// ms, s, m, h); "0" alone needs none.
pub fn parse_duration(s: &str) -> Option<i64> {
    let (negative, mut rest) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    if rest == "0" {
        return Some(0);
    }
    if rest.is_empty() {
        return None;
    }
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(rest.len());
        let (number, after) = rest.split_at(digits);
        let (whole, fraction) = match number.find('.') {
            Some(i) => (&number[..i], &number[i + 1..]),
            None => (number, ""),
        };
        if (whole.is_empty() && fraction.is_empty()) || fraction.contains('.') {
            return None;
        }
        let unit_len = after.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(after.len());
        let (unit, next) = after.split_at(unit_len);
        let scale: u128 = match unit {
            "ns" => 1,
            "us" | "\u{b5}s" | "\u{3bc}s" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            _ => return None,
        };
        let whole: u128 = if whole.is_empty() { 0 } else { whole.parse().ok()? };
        let mut part = whole.checked_mul(scale)?;
        if !fraction.is_empty() {
            let digits = &fraction[..fraction.len().min(30)];
            let f: u128 = digits.parse().ok()?;
            part += f * scale / 10u128.pow(digits.len() as u32);
        }
        total = total.checked_add(part)?;
        if total > i64::MAX as u128 {
            return None;
        }
        rest = next;
    }
    let total = total as i64;
    Some(if negative { -total } else { total })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        for (s, ns) in [("1s", 1_000_000_000), ("250ms", 250_000_000), ("1.5s", 1_500_000_000), ("1m30s", 90_000_000_000),
            ("0", 0), ("2h", 7_200_000_000_000), ("1us", 1_000), ("-3ms", -3_000_000), (".5s", 500_000_000)] {
            assert_eq!(parse_duration(s), Some(ns), "{}", s);
        }
        for s in ["", "1", "s", "1x", "1..5s", "9999999999999h", "."] {
            assert_eq!(parse_duration(s), None, "{}", s);
        }
    }

    #[test]
    fn round_trip() {
        let mut w = Writer::new();
        w.sint(3, -5);
        w.string(2, "abc");
        let buf = w.into_bytes();
        let mut r = Reader::new(&buf);
        let (f, v) = r.next().unwrap().unwrap();
        assert_eq!((f, v.sint()), (3, Some(-5)));
        let (f, v) = r.next().unwrap().unwrap();
        assert_eq!((f, v.bytes()), (2, Some(&b"abc"[..])));
        assert!(r.next().unwrap().is_none());
        assert!(Reader::new(&[0x80]).next().is_none(), "a truncated varint is malformed");
    }
}
