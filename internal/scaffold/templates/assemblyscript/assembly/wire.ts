// The protocol buffers wire format, as much of it as the plugin needs (docs/abi.md, "Messages"): a
// reader that skips unknown fields, a writer, and config values.

/** Reads a message's fields in order. */
export class Reader {
  private pos: i32 = 0;
  /** The message is malformed: the fields read so far are all there is. */
  bad: bool = false;
  /** The field last read: its number, wire type and payload. */
  field: u32 = 0;
  wireType: u32 = 0;
  /** The payload of a varint (wire type 0) or fixed64 (1) field. */
  value: u64 = 0;
  private start: i32 = 0;
  private end: i32 = 0;

  constructor(private buf: Uint8Array) {}

  private varint(): u64 {
    let v: u64 = 0;
    for (let i = 0; i < 10; i++) {
      if (this.pos >= this.buf.length) break;
      const b = this.buf[this.pos++];
      v |= (<u64>(b & 0x7f)) << (<u64>(7 * i));
      if (b < 0x80) return v;
    }
    this.bad = true;
    return 0;
  }

  /** Reads the next field: false at the end, or when the message is malformed (then bad is set). */
  next(): bool {
    if (this.bad || this.pos >= this.buf.length) return false;
    const tag = this.varint();
    this.field = <u32>(tag >> 3);
    this.wireType = <u32>(tag & 7);
    if (this.bad || this.field == 0) {
      this.bad = true;
      return false;
    }
    if (this.wireType == 0) {
      this.value = this.varint();
    } else if (this.wireType == 1 || this.wireType == 5) {
      const n = this.wireType == 1 ? 8 : 4;
      if (this.buf.length - this.pos < n) {
        this.bad = true;
      } else {
        this.value = 0;
        for (let i = n - 1; i >= 0; i--) this.value = (this.value << 8) | <u64>this.buf[this.pos + i];
        this.pos += n;
      }
    } else if (this.wireType == 2) {
      const n = this.varint();
      if (this.bad || n > <u64>(this.buf.length - this.pos)) {
        this.bad = true;
      } else {
        this.start = this.pos;
        this.pos += <i32>n;
        this.end = this.pos;
      }
    } else {
      this.bad = true;
    }
    return !this.bad;
  }

  /** The field's payload as a zigzag-encoded sint64. */
  sint(): i64 {
    return <i64>(this.value >> 1) ^ -(<i64>(this.value & 1));
  }

  /** The payload of a length-delimited field (wire type 2). */
  bytes(): Uint8Array {
    return this.buf.subarray(this.start, this.end);
  }
}

/** Writes a message. Every call writes its field, zero or not: callers leave out proto3 zero values. */
export class Writer {
  private buf: Uint8Array = new Uint8Array(64);
  private len: i32 = 0;

  private grow(n: i32): void {
    if (this.len + n <= this.buf.length) return;
    const bigger = new Uint8Array(max(this.buf.length * 2, this.len + n));
    bigger.set(this.buf.subarray(0, this.len));
    this.buf = bigger;
  }

  private varint(v: u64): void {
    this.grow(10);
    while (v >= 0x80) {
      this.buf[this.len++] = <u8>(v | 0x80);
      v >>= 7;
    }
    this.buf[this.len++] = <u8>v;
  }

  private tag(field: u32, wireType: u32): void {
    this.varint((<u64>field << 3) | wireType);
  }

  bytes(field: u32, b: Uint8Array): void {
    this.tag(field, 2);
    this.varint(<u64>b.length);
    this.grow(b.length);
    this.buf.set(b, this.len);
    this.len += b.length;
  }

  string(field: u32, s: string): void {
    this.bytes(field, Uint8Array.wrap(String.UTF8.encode(s)));
  }

  message(field: u32, m: Writer): void {
    this.bytes(field, m.finish());
  }

  boolean(field: u32, b: bool): void {
    this.tag(field, 0);
    this.varint(b ? 1 : 0);
  }

  uint(field: u32, v: u64): void {
    this.tag(field, 0);
    this.varint(v);
  }

  sint(field: u32, v: i64): void {
    this.tag(field, 0);
    this.varint(<u64>((v << 1) ^ (v >> 63)));
  }

  /** The message written so far. */
  finish(): Uint8Array {
    return this.buf.slice(0, this.len);
  }
}

// Value kinds: the field numbers of ruled.abi.v1.Value's oneof.
export const NULL = 1;
export const INT = 2;
export const UINT = 3;
export const FLOAT = 4;
export const STRING = 5;
export const BYTES = 6;
export const BOOL = 7;
export const LIST = 8;
export const MAP = 9;
export const DURATION = 10;

/** How deep values may nest (docs/abi.md, "Nesting"). */
const MAX_DEPTH = 64;

/** A config value: what the rule file's YAML decoded to. Lists and mappings keep no content. */
export class Value {
  kind: i32 = NULL;
  int: i64 = 0;
  float: f64 = 0;
  text: string = "";

  /** The value as a whole number, as ruled's SDK reads one; ok says whether it is one. */
  wholeNumber(): i64 {
    ok = true;
    if (this.kind == INT) {
      return this.int;
    } else if (this.kind == UINT) {
      if (this.int >= 0) return this.int;
    } else if (this.kind == FLOAT) {
      if (this.float == Math.trunc(this.float) && Math.abs(this.float) < 9007199254740992) return <i64>this.float;
    } else if (this.kind == STRING || this.kind == BYTES) {
      const s = this.text.trim();
      let n: i64 = 0;
      let i = s.startsWith("-") || s.startsWith("+") ? 1 : 0;
      let digits = 0;
      for (; i < s.length; i++, digits++) {
        const c = s.charCodeAt(i) - 48;
        if (c < 0 || c > 9 || n > (9223372036854775807 - c) / 10) break;
        n = n * 10 + c;
      }
      if (digits > 0 && i == s.length) return s.startsWith("-") ? -n : n;
    }
    ok = false;
    return 0;
  }

  /** The value as a duration in nanoseconds: a duration, a string such as "1m30s", or 0. */
  durationNs(): i64 {
    ok = true;
    if (this.kind == DURATION) return this.int;
    if (this.kind == STRING || this.kind == BYTES) return parseDuration(this.text.trim());
    if ((this.kind == INT || this.kind == UINT) && this.int == 0) return 0;
    if (this.kind == FLOAT && this.float == 0) return 0;
    ok = false;
    return 0;
  }

  toString(): string {
    if (this.kind == INT || this.kind == DURATION) return this.int.toString();
    if (this.kind == UINT) return (<u64>this.int).toString();
    if (this.kind == FLOAT) return this.float.toString();
    if (this.kind == STRING || this.kind == BYTES) return this.text;
    if (this.kind == BOOL) return this.int != 0 ? "true" : "false";
    if (this.kind == LIST) return "a list";
    if (this.kind == MAP) return "a mapping";
    return "<nil>";
  }
}

/** Whether the last wholeNumber, durationNs or parseDuration call succeeded. */
export let ok = true;

/** A config field. */
export class Entry {
  constructor(public key: string, public value: Value) {}
}

/** Decodes a ValueMap's fields; null when it is malformed. */
export function valueMap(buf: Uint8Array, depth: i32 = 0): Entry[] | null {
  const out = new Array<Entry>();
  const r = new Reader(buf);
  while (r.next()) {
    if (r.field != 1 || r.wireType != 2) continue;
    let key = "";
    let value = new Value();
    const e = new Reader(r.bytes());
    while (e.next()) {
      if (e.field == 1 && e.wireType == 2) key = String.UTF8.decode(e.bytes().slice().buffer);
      if (e.field == 2 && e.wireType == 2) {
        const v = decodeValue(e.bytes(), depth + 1);
        if (v == null) return null;
        value = v;
      }
    }
    if (e.bad) return null;
    out.push(new Entry(key, value));
  }
  return r.bad ? null : out;
}

function decodeValue(buf: Uint8Array, depth: i32): Value | null {
  if (depth > MAX_DEPTH) return null;
  const v = new Value();
  const r = new Reader(buf);
  while (r.next()) {
    const f = <i32>r.field;
    if (f < NULL || f > DURATION) continue;
    v.kind = f;
    if (f == INT || f == DURATION) v.int = r.sint();
    else if (f == UINT || f == BOOL) v.int = <i64>r.value;
    else if (f == FLOAT) v.float = reinterpret<f64>(r.value);
    else if (f == STRING || f == BYTES) v.text = String.UTF8.decode(r.bytes().slice().buffer);
    else if (f == LIST) {
      const l = new Reader(r.bytes());
      while (l.next()) if (l.wireType != 2 || decodeValue(l.bytes(), depth + 1) == null) return null;
      if (l.bad) return null;
    } else if (f == MAP && valueMap(r.bytes(), depth + 1) == null) return null;
  }
  return r.bad ? null : v;
}

/**
 * Parses a duration as Go's time.ParseDuration does: an optional sign, then numbers with an
 * optional fraction, each with a unit (ns, us, µs, ms, s, m, h); "0" alone needs none. Sets ok.
 */
export function parseDuration(s: string): i64 {
  ok = false;
  let i = 0;
  const negative = s.startsWith("-");
  if (negative || s.startsWith("+")) i = 1;
  if (s.substring(i) == "0") {
    ok = true;
    return 0;
  }
  if (i == s.length) return 0;
  let total: u64 = 0;
  while (i < s.length) {
    let whole: u64 = 0;
    let digits = 0;
    for (; i < s.length && isDigit(s, i); i++, digits++) {
      if (whole > 1844674407370955161) return 0;
      whole = whole * 10 + <u64>(s.charCodeAt(i) - 48);
    }
    let fracStart = -1;
    let fracEnd = -1;
    if (i < s.length && s.charCodeAt(i) == 46) {
      fracStart = ++i;
      while (i < s.length && isDigit(s, i)) i++;
      fracEnd = i;
    }
    if (digits == 0 && fracEnd - fracStart <= 0) return 0;
    const unitStart = i;
    while (i < s.length && !isDigit(s, i) && s.charCodeAt(i) != 46) i++;
    const unit = s.substring(unitStart, i);
    let scale: u64 = 0;
    if (unit == "ns") scale = 1;
    else if (unit == "us" || unit == "\u00b5s" || unit == "\u03bcs") scale = 1000;
    else if (unit == "ms") scale = 1000000;
    else if (unit == "s") scale = 1000000000;
    else if (unit == "m") scale = 60000000000;
    else if (unit == "h") scale = 3600000000000;
    else return 0;
    if (whole > <u64>9223372036854775807 / scale) return 0;
    let part = whole * scale;
    for (let j = fracStart; j >= 0 && j < fracEnd && scale > 1; j++) {
      scale /= 10;
      part += <u64>(s.charCodeAt(j) - 48) * scale;
    }
    total += part;
    if (total > <u64>9223372036854775807) return 0;
  }
  ok = true;
  return negative ? -(<i64>total) : <i64>total;
}

function isDigit(s: string, i: i32): bool {
  const c = s.charCodeAt(i);
  return c >= 48 && c <= 57;
}
