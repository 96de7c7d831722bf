// The rule config: decoding ValueMap / Value messages, and the checks of plugins/fixedwindow's
// Configure made the way sdk.ConfigReader makes them, with the same messages: typed reads that
// collect every problem, "KEY: required", "KEY: want a whole number, got %v", "KEY: unknown field"
// (sorted), then the plugin's own range checks. Values in messages are printed as Go's %v prints
// what sdk/abi decodes (int, uint64, float64, string, []byte, bool, time.Duration, []any,
// map[string]any). Everything works on the request's bytes; strings are never decoded to UTF-16.
import { Buf, fLen, fNum, fPtr, fTyp, fU, readField, unzigzag, WT_I64, WT_LEN, WT_VARINT } from "./wire";

/** sdk/abi's maxDepth: how deeply config values may nest. */
const MAX_DEPTH: i32 = 64;

// Value kinds: what sdk/abi's DecodeValue makes of a Value message.
const K_NIL: i32 = 0; // no field, or null_value
const K_INT: i32 = 1; // int_value, or uint_value up to MaxInt64 (Go: int)
const K_UINT: i32 = 2; // uint_value above MaxInt64 (Go: uint64)
const K_FLOAT: i32 = 3; // float_value (Go: float64)
const K_STRING: i32 = 4; // string_value (Go: string)
const K_BYTES: i32 = 5; // bytes_value (Go: []byte)
const K_BOOL: i32 = 6; // bool_value
const K_LIST: i32 = 7; // list_value (Go: []any)
const K_MAP: i32 = 8; // map_value (Go: map[string]any)
const K_DURATION: i32 = 9; // duration_ns (Go: time.Duration)

/** The result of the last decodeValue: its kind, and its integer (int, uint64 bits, bool,
 * duration), float, or bytes (string, bytes, list and map bodies). */
let valKind: i32 = K_NIL;
let valI: i64 = 0;
let valF: f64 = 0;
let valPtr: usize = 0;
let valLen: usize = 0;

/** Decodes a Value message as sdk/abi's decodeValue does (the last field of the oneof wins,
 * unknown fields and wrong wire types are skipped), checking nested lists and maps; false when it
 * is malformed or nested too deeply. */
function decodeValue(p: usize, end: usize, depth: i32): bool {
  if (depth > MAX_DEPTH) return false;
  let kind = K_NIL;
  let i: i64 = 0;
  let f: f64 = 0;
  let ptr: usize = 0;
  let len: usize = 0;
  while (p < end) {
    p = readField(p, end);
    if (p == 0) return false;
    const num = fNum;
    const typ = fTyp;
    if (typ == WT_VARINT) {
      if (num == 1) {
        kind = K_NIL;
      } else if (num == 2 || num == 10) {
        kind = num == 2 ? K_INT : K_DURATION;
        i = unzigzag(fU);
      } else if (num == 3) {
        kind = <i64>fU >= 0 ? K_INT : K_UINT;
        i = <i64>fU;
      } else if (num == 7) {
        kind = K_BOOL;
        i = fU != 0 ? 1 : 0;
      }
    } else if (typ == WT_I64) {
      if (num == 4) {
        kind = K_FLOAT;
        f = reinterpret<f64>(fU);
      }
    } else if (typ == WT_LEN) {
      const bp = fPtr;
      const bn = fLen;
      if (num == 5 || num == 6) {
        kind = num == 5 ? K_STRING : K_BYTES;
      } else if (num == 8) {
        if (!checkList(bp, bp + bn, depth + 1)) return false;
        kind = K_LIST;
      } else if (num == 9) {
        if (!checkMap(bp, bp + bn, depth + 1)) return false;
        kind = K_MAP;
      } else {
        continue;
      }
      ptr = bp;
      len = bn;
    }
  }
  valKind = kind;
  valI = i;
  valF = f;
  valPtr = ptr;
  valLen = len;
  return true;
}

function checkList(p: usize, end: usize, depth: i32): bool {
  while (p < end) {
    p = readField(p, end);
    if (p == 0) return false;
    if (fNum == 1 && fTyp == WT_LEN) {
      const next = fPtr + fLen;
      if (!decodeValue(fPtr, next, depth)) return false;
    }
  }
  return true;
}

/** Checks the fields of a ValueMap message whose values lie at depth. */
export function checkMap(p: usize, end: usize, depth: i32): bool {
  while (p < end) {
    p = readField(p, end);
    if (p == 0) return false;
    if (fNum != 1 || fTyp != WT_LEN) continue;
    let e = fPtr;
    const ee = fPtr + fLen;
    while (e < ee) {
      e = readField(e, ee);
      if (e == 0) return false;
      if (fNum == 2 && fTyp == WT_LEN && !decodeValue(fPtr, fPtr + fLen, depth)) return false;
    }
  }
  return true;
}

/** Entry is one key of a ValueMap, its value (absent: nil) and its position. */
class Entry {
  constructor(
    public key: usize,
    public keyLen: usize,
    public val: usize,
    public valLen: usize,
    public idx: i32,
  ) {}
}

function compareBytes(a: usize, an: usize, b: usize, bn: usize): i32 {
  const c = memory.compare(a, b, an < bn ? an : bn);
  if (c != 0) return c;
  return <i32>(an > bn) - <i32>(an < bn);
}

/** The entries of a checked ValueMap message, sorted by key (bytes, as Go compares strings); of
 * equal keys the last one is kept, as decoding into a Go map keeps it. */
function mapEntries(p: usize, end: usize): Array<Entry> {
  const all = new Array<Entry>();
  while (p < end) {
    p = readField(p, end);
    if (p == 0) break; // checked before
    if (fNum != 1 || fTyp != WT_LEN) continue;
    let e = fPtr;
    const ee = fPtr + fLen;
    let key: usize = 0;
    let keyLen: usize = 0;
    let val: usize = 0;
    let valLen: usize = 0;
    while (e < ee) {
      e = readField(e, ee);
      if (e == 0) break;
      if (fTyp != WT_LEN) continue;
      if (fNum == 1) {
        key = fPtr;
        keyLen = fLen;
      } else if (fNum == 2) {
        val = fPtr;
        valLen = fLen;
      }
    }
    all.push(new Entry(key, keyLen, val, valLen, all.length));
  }
  all.sort((a: Entry, b: Entry): i32 => {
    const c = compareBytes(a.key, a.keyLen, b.key, b.keyLen);
    return c != 0 ? c : a.idx - b.idx;
  });
  const out = new Array<Entry>();
  for (let i = 0; i < all.length; i++) {
    const a = all[i];
    if (i + 1 < all.length) {
      const b = all[i + 1];
      if (compareBytes(a.key, a.keyLen, b.key, b.keyLen) == 0) continue;
    }
    out.push(a);
  }
  return out;
}

function keyIs(e: Entry, s: string): bool {
  if (e.keyLen != <usize>s.length) return false;
  const p = changetype<usize>(s);
  for (let i: usize = 0; i < e.keyLen; i++) {
    if (<u32>load<u8>(e.key + i) != <u32>load<u16>(p + (i << 1))) return false;
  }
  return true;
}

function find(entries: Array<Entry>, key: string): Entry | null {
  for (let i = 0; i < entries.length; i++) {
    if (keyIs(entries[i], key)) return entries[i];
  }
  return null;
}

/** Decodes an entry's value (checked before) into the val* globals. */
function decodeEntry(e: Entry): void {
  decodeValue(e.val, e.val + e.valLen, 0); // an absent value is an empty message: nil
}

// ---- Printing values as Go's %v does ----

/** Appends the value of the Value message at [p, end) (checked before) as %v. */
function fmtValue(b: Buf, p: usize, end: usize): void {
  decodeValue(p, end, 0);
  switch (valKind) {
    case K_NIL:
      b.ascii("<nil>");
      break;
    case K_INT:
      b.int(valI);
      break;
    case K_UINT:
      b.uint(<u64>valI);
      break;
    case K_FLOAT:
      fmtFloat(b, valF);
      break;
    case K_STRING:
      b.bytes(valPtr, valLen);
      break;
    case K_BYTES: {
      const bp = valPtr;
      const bn = valLen;
      b.byte(0x5b); // [
      for (let i: usize = 0; i < bn; i++) {
        if (i > 0) b.byte(0x20);
        b.uint(<u64>load<u8>(bp + i));
      }
      b.byte(0x5d); // ]
      break;
    }
    case K_BOOL:
      b.ascii(valI != 0 ? "true" : "false");
      break;
    case K_DURATION:
      fmtDuration(b, valI);
      break;
    case K_LIST: {
      let q = valPtr;
      const qe = valPtr + valLen;
      let first = true;
      b.byte(0x5b);
      while (q < qe) {
        q = readField(q, qe);
        if (q == 0) break;
        if (fNum != 1 || fTyp != WT_LEN) continue;
        if (!first) b.byte(0x20);
        first = false;
        fmtValue(b, fPtr, fPtr + fLen);
      }
      b.byte(0x5d);
      break;
    }
    case K_MAP: {
      const entries = mapEntries(valPtr, valPtr + valLen);
      b.ascii("map[");
      for (let i = 0; i < entries.length; i++) {
        const e = entries[i];
        if (i > 0) b.byte(0x20);
        b.bytes(e.key, e.keyLen);
        b.byte(0x3a); // :
        fmtValue(b, e.val, e.val + e.valLen);
      }
      b.byte(0x5d);
      break;
    }
  }
}

/** Appends f as Go's %v does: strconv.FormatFloat(f, 'g', -1, 64), the shortest digits that read
 * back as f, in the exponent form for decimal exponents below -4 or from 6 on. */
function fmtFloat(b: Buf, f: f64): void {
  if (isNaN(f)) {
    b.ascii("NaN");
    return;
  }
  if (!isFinite(f)) {
    b.ascii(f > 0 ? "+Inf" : "-Inf");
    return;
  }
  if (f == 0) {
    b.ascii(1 / f < 0 ? "-0" : "0");
    return;
  }
  if (f < 0) {
    b.byte(0x2d);
    f = -f;
  }
  const nd = <i32>shortestDigits(f);
  const digits = floatDigits;
  const dp = floatPoint; // f = 0.DIGITS * 10^dp
  const x = dp - 1;
  if (x < -4 || x >= 6) {
    b.byte(load<u8>(digits));
    if (nd > 1) {
      b.byte(0x2e);
      b.bytes(digits + 1, nd - 1);
    }
    b.byte(0x65); // e
    b.byte(x < 0 ? 0x2d : 0x2b);
    const ax = x < 0 ? -x : x;
    if (ax < 10) b.byte(0x30);
    b.uint(<u64>ax);
    return;
  }
  if (dp <= 0) {
    b.ascii("0.");
    for (let k = 0; k < -dp; k++) b.byte(0x30);
    b.bytes(digits, nd);
    return;
  }
  if (nd <= dp) {
    b.bytes(digits, nd);
    for (let k = nd; k < dp; k++) b.byte(0x30);
    return;
  }
  b.bytes(digits, dp);
  b.byte(0x2e);
  b.bytes(digits + dp, nd - dp);
}

// Shortest digits of a double: Steele & White's free-format algorithm as Burger and Dybvig give it,
// on exact big integers, so that every double prints as Go prints it (this runs only to print a
// config problem). Big integers are little-endian 32-bit limbs, bnN of them in use: the largest
// value the algorithm meets, for doubles near the smallest subnormal, has under 1,100 bits.
const LIMBS: usize = 40;
const bnR = memory.data(<i32>(LIMBS << 2));
const bnS = memory.data(<i32>(LIMBS << 2));
const bnMp = memory.data(<i32>(LIMBS << 2));
const bnMm = memory.data(<i32>(LIMBS << 2));
const bnT = memory.data(<i32>(LIMBS << 2));
let bnN: usize = LIMBS;

/** The digits of the last shortestDigits (ASCII) and where the decimal point goes. */
const floatDigits = memory.data(32);
let floatPoint: i32 = 0;

function bnSet(a: usize, v: u64): void {
  memory.fill(a, 0, bnN << 2);
  store<u32>(a, <u32>v);
  store<u32>(a, <u32>(v >> 32), 4);
}

/** a <<= n. */
function bnShl(a: usize, n: i32): void {
  const limbs = <usize>(n >> 5);
  const bits = <u32>(n & 31);
  for (let i = bnN; i-- > 0; ) {
    let v: u32 = 0;
    if (i >= limbs) {
      v = load<u32>(a + ((i - limbs) << 2)) << bits;
      if (bits != 0 && i > limbs) v |= load<u32>(a + ((i - limbs - 1) << 2)) >> (32 - bits);
    }
    store<u32>(a + (i << 2), v);
  }
}

/** a *= m. */
function bnMul(a: usize, m: u32): void {
  let carry: u64 = 0;
  for (let i: usize = 0; i < bnN; i++) {
    const v = <u64>load<u32>(a + (i << 2)) * m + carry;
    store<u32>(a + (i << 2), <u32>v);
    carry = v >> 32;
  }
}

/** a *= 10^k, nine digits at a time. */
function bnMulPow10(a: usize, k: i32): void {
  for (; k >= 9; k -= 9) bnMul(a, 1_000_000_000);
  let m: u32 = 1;
  for (; k > 0; k--) m *= 10;
  if (m > 1) bnMul(a, m);
}

/** dst = a + b. */
function bnAdd(dst: usize, a: usize, b: usize): void {
  let carry: u64 = 0;
  for (let i: usize = 0; i < bnN; i++) {
    const v = <u64>load<u32>(a + (i << 2)) + <u64>load<u32>(b + (i << 2)) + carry;
    store<u32>(dst + (i << 2), <u32>v);
    carry = v >> 32;
  }
}

/** a -= b, for a >= b. */
function bnSub(a: usize, b: usize): void {
  let borrow: i64 = 0;
  for (let i: usize = 0; i < bnN; i++) {
    const v = <i64>load<u32>(a + (i << 2)) - <i64>load<u32>(b + (i << 2)) - borrow;
    store<u32>(a + (i << 2), <u32>v);
    borrow = v < 0 ? 1 : 0;
  }
}

function bnCmp(a: usize, b: usize): i32 {
  for (let i = bnN; i-- > 0; ) {
    const x = load<u32>(a + (i << 2));
    const y = load<u32>(b + (i << 2));
    if (x != y) return x < y ? -1 : 1;
  }
  return 0;
}

/** Whether the high end of the rounding interval, r + m+, reaches s (inclusive when even). */
function bnHigh(even: bool): bool {
  bnAdd(bnT, bnR, bnMp);
  const c = bnCmp(bnT, bnS);
  return even ? c >= 0 : c > 0;
}

/** Writes the shortest digits that read back as f > 0 (finite) to floatDigits, the closest to f
 * of those, sets floatPoint, and returns their number. */
function shortestDigits(f: f64): usize {
  const bits = reinterpret<u64>(f);
  const be = <i32>((bits >> 52) & 0x7ff);
  let mant = bits & ((<u64>1 << 52) - 1);
  let e: i32;
  if (be == 0) {
    e = -1074;
  } else {
    mant |= <u64>1 << 52;
    e = be - 1075;
  }
  // k is estimated from below, so that 10^(k-1) <= f < 10^k after the fix-up.
  let k = <i32>Math.ceil(Math.log10(f) - 1e-10);
  // Every value below stays under a few times the larger of r and s as scaled: this many bits.
  const rBits = e >= 0 ? 55 + e : 55;
  const sBits = (e < 0 ? 3 - e : 3) + (k > 0 ? (k * 3322) / 1000 + 1 : 0);
  bnN = min(LIMBS, <usize>((max(rBits, sBits) + 40) >> 5) + 1);
  // f = mant * 2^e = r/s; the doubles next to it are m-/s below and m+/s above, halfway.
  const boundary = mant == <u64>1 << 52 && be > 1; // the double below is nearer
  bnSet(bnR, mant);
  if (e >= 0) {
    bnShl(bnR, boundary ? e + 2 : e + 1);
    bnSet(bnS, boundary ? 4 : 2);
    bnSet(bnMp, 1);
    bnShl(bnMp, boundary ? e + 1 : e);
    bnSet(bnMm, 1);
    bnShl(bnMm, e);
  } else {
    bnShl(bnR, boundary ? 2 : 1);
    bnSet(bnS, 1);
    bnShl(bnS, boundary ? 2 - e : 1 - e);
    bnSet(bnMp, boundary ? 2 : 1);
    bnSet(bnMm, 1);
  }
  if (k >= 0) {
    bnMulPow10(bnS, k);
  } else {
    bnMulPow10(bnR, -k);
    bnMulPow10(bnMp, -k);
    bnMulPow10(bnMm, -k);
  }
  // Round half to even: the interval's ends read back as f when its mantissa is even.
  const even = (mant & 1) == 0;
  while (bnHigh(even)) {
    bnMul(bnS, 10);
    k++;
  }
  let n: usize = 0;
  while (true) {
    bnMul(bnR, 10);
    bnMul(bnMp, 10);
    bnMul(bnMm, 10);
    let d: u32 = 0;
    while (bnCmp(bnR, bnS) >= 0) {
      bnSub(bnR, bnS);
      d++;
    }
    const c = bnCmp(bnR, bnMm);
    const low = even ? c <= 0 : c < 0;
    const high = bnHigh(even);
    if (!low && !high && n < 30) {
      store<u8>(floatDigits + n++, <u8>(0x30 + d));
      continue;
    }
    if (low && high) {
      // Both d and d+1 read back as f: take the nearer (2r against s), the even one on a tie,
      // as Go does.
      bnAdd(bnT, bnR, bnR);
      const c2 = bnCmp(bnT, bnS);
      if (c2 > 0 || (c2 == 0 && (d & 1) == 1)) d++;
    } else if (high) {
      d++;
    }
    store<u8>(floatDigits + n++, <u8>(0x30 + d));
    break;
  }
  floatPoint = k;
  return n;
}

/** Appends d as time.Duration's String does: "1.5s", "2h0m0s", "250µs", "0s". */
function fmtDuration(b: Buf, d: i64): void {
  const buf = memory.data(32);
  let w: usize = 32;
  let u = <u64>d;
  const neg = d < 0;
  if (neg) u = -u;
  if (u < 1_000_000_000) {
    let prec = 0;
    store<u8>(buf + --w, 0x73); // s
    if (u == 0) {
      b.ascii("0s");
      return;
    } else if (u < 1000) {
      prec = 0;
      store<u8>(buf + --w, 0x6e); // n
    } else if (u < 1_000_000) {
      prec = 3;
      store<u8>(buf + --w, 0xb5); // µ: U+00B5 is C2 B5
      store<u8>(buf + --w, 0xc2);
    } else {
      prec = 6;
      store<u8>(buf + --w, 0x6d); // m
    }
    w = fmtFrac(buf, w, u, prec);
    u = fracRest;
    w = fmtInt(buf, w, u);
  } else {
    store<u8>(buf + --w, 0x73);
    w = fmtFrac(buf, w, u, 9);
    u = fracRest;
    w = fmtInt(buf, w, u % 60);
    u /= 60;
    if (u > 0) {
      store<u8>(buf + --w, 0x6d);
      w = fmtInt(buf, w, u % 60);
      u /= 60;
      if (u > 0) {
        store<u8>(buf + --w, 0x68);
        w = fmtInt(buf, w, u);
      }
    }
  }
  if (neg) store<u8>(buf + --w, 0x2d);
  b.bytes(buf + w, 32 - w);
}

let fracRest: u64 = 0;

function fmtFrac(buf: usize, w: usize, v: u64, prec: i32): usize {
  let print = false;
  for (let i = 0; i < prec; i++) {
    const digit = v % 10;
    print = print || digit != 0;
    if (print) store<u8>(buf + --w, <u8>(digit + 0x30));
    v /= 10;
  }
  if (print) store<u8>(buf + --w, 0x2e);
  fracRest = v;
  return w;
}

function fmtInt(buf: usize, w: usize, v: u64): usize {
  if (v == 0) {
    store<u8>(buf + --w, 0x30);
    return w;
  }
  while (v > 0) {
    store<u8>(buf + --w, <u8>(v % 10 + 0x30));
    v /= 10;
  }
  return w;
}

// ---- Parsing strings as the Go plugin does ----

let trimP: usize = 0;
let trimN: usize = 0;

/** strings.TrimSpace: Unicode white space off both ends, into trimP/trimN. */
function trimSpace(p: usize, n: usize): void {
  let s = p;
  let e = p + n;
  while (s < e) {
    const k = spaceAt(s, e);
    if (k == 0) break;
    s += k;
  }
  while (e > s) {
    const k = spaceBefore(s, e);
    if (k == 0) break;
    e -= k;
  }
  trimP = s;
  trimN = e - s;
}

function isAsciiSpace(c: u32): bool {
  return c == 0x20 || (c >= 0x09 && c <= 0x0d);
}

/** The length of the UTF-8 encoded white space rune (unicode.IsSpace) at [s, e), or 0. */
function spaceAt(s: usize, e: usize): usize {
  const c = <u32>load<u8>(s);
  if (c < 0x80) return isAsciiSpace(c) ? 1 : 0;
  if (e - s >= 2 && c == 0xc2) {
    const d = <u32>load<u8>(s + 1);
    return d == 0x85 || d == 0xa0 ? 2 : 0;
  }
  if (e - s >= 3) return isSpace3(c, <u32>load<u8>(s + 1), <u32>load<u8>(s + 2)) ? 3 : 0;
  return 0;
}

/** The length of the UTF-8 encoded white space rune that ends at e, or 0. */
function spaceBefore(s: usize, e: usize): usize {
  const c = <u32>load<u8>(e - 1);
  if (c < 0x80) return isAsciiSpace(c) ? 1 : 0;
  if (e - s >= 2 && load<u8>(e - 2) == 0xc2 && (c == 0x85 || c == 0xa0)) return 2;
  if (e - s >= 3 && isSpace3(<u32>load<u8>(e - 3), <u32>load<u8>(e - 2), c)) return 3;
  return 0;
}

/** U+1680, U+2000..U+200A, U+2028, U+2029, U+202F, U+205F, U+3000 in UTF-8. */
function isSpace3(a: u32, b: u32, c: u32): bool {
  if (a == 0xe1) return b == 0x9a && c == 0x80;
  if (a == 0xe2) {
    if (b == 0x80) return c <= 0x8a ? c >= 0x80 : c == 0xa8 || c == 0xa9 || c == 0xaf;
    return b == 0x81 && c == 0x9f;
  }
  return a == 0xe3 && b == 0x80 && c == 0x80;
}

let parsed: i64 = 0;

/** strconv.ParseInt(s, 10, 64) into parsed; false on any error. */
function parseInt64(p: usize, n: usize): bool {
  if (n == 0) return false;
  let neg = false;
  const c = load<u8>(p);
  if (c == 0x2b || c == 0x2d) {
    neg = c == 0x2d;
    p++;
    n--;
    if (n == 0) return false;
  }
  let u: u64 = 0;
  for (let i: usize = 0; i < n; i++) {
    const d = <u64>load<u8>(p + i) - 0x30;
    if (d > 9) return false;
    if (u > u64.MAX_VALUE / 10) return false;
    const v = u * 10 + d;
    if (v < u) return false;
    u = v;
  }
  if (neg ? u > 0x8000000000000000 : u >= 0x8000000000000000) return false;
  parsed = neg ? -<i64>u : <i64>u;
  return true;
}

/** time.ParseDuration into parsed (nanoseconds); false on any error. A port of Go's. */
function parseDuration(p: usize, n: usize): bool {
  let s = p;
  const e = p + n;
  let neg = false;
  let d: u64 = 0;
  if (s < e) {
    const c = load<u8>(s);
    if (c == 0x2d || c == 0x2b) {
      neg = c == 0x2d;
      s++;
    }
  }
  if (e - s == 1 && load<u8>(s) == 0x30) {
    parsed = 0;
    return true;
  }
  if (s == e) return false;
  while (s < e) {
    let v: u64 = 0;
    let f: u64 = 0;
    let scale: f64 = 1;
    let c = load<u8>(s);
    if (!(c == 0x2e || (c >= 0x30 && c <= 0x39))) return false;
    // leadingInt
    const pl = s;
    for (; s < e; s++) {
      c = load<u8>(s);
      if (c < 0x30 || c > 0x39) break;
      if (v > (<u64>1 << 63) / 10) return false;
      v = v * 10 + <u64>(c - 0x30);
      if (v > <u64>1 << 63) return false;
    }
    const pre = pl != s;
    let post = false;
    if (s < e && load<u8>(s) == 0x2e) {
      s++;
      const fl = s;
      let overflow = false;
      for (; s < e; s++) {
        c = load<u8>(s);
        if (c < 0x30 || c > 0x39) break;
        if (overflow) continue;
        if (f > (<u64>0x7fffffffffffffff) / 10) {
          overflow = true;
          continue;
        }
        const y = f * 10 + <u64>(c - 0x30);
        if (y > <u64>1 << 63) {
          overflow = true;
          continue;
        }
        f = y;
        scale *= 10;
      }
      post = fl != s;
    }
    if (!pre && !post) return false;
    const us = s;
    for (; s < e; s++) {
      c = load<u8>(s);
      if (c == 0x2e || (c >= 0x30 && c <= 0x39)) break;
    }
    if (s == us) return false; // missing unit
    const unit = unitOf(us, s - us);
    if (unit == 0) return false; // unknown unit
    if (v > (<u64>1 << 63) / unit) return false;
    v *= unit;
    if (f > 0) {
      v += <u64>(<f64>f * (<f64>unit / scale));
      if (v > <u64>1 << 63) return false;
    }
    d += v;
    if (d > <u64>1 << 63) return false;
  }
  if (neg) {
    parsed = -<i64>d;
    return true;
  }
  if (d > <u64>0x7fffffffffffffff) return false;
  parsed = <i64>d;
  return true;
}

/** The nanoseconds of a time.ParseDuration unit, or 0. */
function unitOf(p: usize, n: usize): u64 {
  const a = <u32>load<u8>(p);
  if (n == 1) {
    if (a == 0x73) return 1_000_000_000; // s
    if (a == 0x6d) return 60_000_000_000; // m
    if (a == 0x68) return 3_600_000_000_000; // h
    return 0;
  }
  const last = <u32>load<u8>(p + n - 1);
  if (last != 0x73) return 0; // all others end in 's'
  if (n == 2) {
    if (a == 0x6e) return 1; // ns
    if (a == 0x75) return 1000; // us
    if (a == 0x6d) return 1_000_000; // ms
    return 0;
  }
  if (n == 3) {
    const b = <u32>load<u8>(p + 1);
    if ((a == 0xc2 && b == 0xb5) || (a == 0xce && b == 0xbc)) return 1000; // µs (U+00B5), μs (U+03BC)
  }
  return 0;
}

// ---- The fixed-window config (plugins/fixedwindow.Plugin.Configure) ----

/** Config is an accepted config, in the units the script takes. */
export class Config {
  constructor(
    public limit: i64,
    public windowUs: i64,
    public offsetUs: i64,
  ) {}
}

let problems: i32 = 0;

/** Starts the message of one problem with key: a ConfigureResponse.errors field. */
function problem(out: Buf, key: string): usize {
  problems++;
  const mark = out.beginNested(0x0a); // field 1, length-delimited
  out.ascii(key);
  out.ascii(": ");
  return mark;
}

function problemWithEntry(out: Buf, e: Entry, text: string): void {
  problems++;
  const mark = out.beginNested(0x0a);
  out.bytes(e.key, e.keyLen);
  out.ascii(text);
  out.endNested(mark);
}

/** "KEY: required". */
function required(out: Buf, key: string): void {
  const m = problem(out, key);
  out.ascii("required");
  out.endNested(m);
}

/** sdk.ConfigReader.toInt. */
function toInt(out: Buf, key: string, e: Entry): i64 {
  decodeEntry(e);
  if (valKind == K_INT) return valI;
  if (valKind == K_FLOAT) {
    const f = valF;
    if (f == Math.trunc(f) && Math.abs(f) < 9007199254740992) return <i64>f;
  } else if (valKind == K_STRING) {
    trimSpace(valPtr, valLen);
    if (parseInt64(trimP, trimN)) return parsed;
  }
  const m = problem(out, key);
  out.ascii("want a whole number, got ");
  fmtValue(out, e.val, e.val + e.valLen);
  out.endNested(m);
  return 0;
}

/** sdk.ConfigReader.toDuration, in nanoseconds. */
function toDuration(out: Buf, key: string, e: Entry): i64 {
  decodeEntry(e);
  if (valKind == K_DURATION) return valI;
  if (valKind == K_STRING) {
    trimSpace(valPtr, valLen);
    if (parseDuration(trimP, trimN)) return parsed;
  } else if (valKind == K_INT || valKind == K_FLOAT) {
    if (toInt(out, key, e) == 0) return 0;
  }
  const m = problem(out, key);
  out.ascii('want a duration such as "500ms", "10s" or "1m", got ');
  fmtValue(out, e.val, e.val + e.valLen);
  out.endNested(m);
  return 0;
}

/** Validates the ValueMap at [p, end) (checked before) like plugins/fixedwindow's Configure and
 * returns the config, or null after appending every problem to out as ConfigureResponse fields. */
export function configure(p: usize, end: usize, out: Buf): Config | null {
  problems = 0;
  const entries = mapEntries(p, end);
  const eLimit = find(entries, "limit");
  const eWindow = find(entries, "window");
  const eOffset = find(entries, "offset");

  let limit: i64 = 0;
  if (eLimit === null) required(out, "limit");
  else limit = toInt(out, "limit", eLimit);
  let window: i64 = 0;
  if (eWindow === null) required(out, "window");
  else window = toDuration(out, "window", eWindow);
  let offset: i64 = 0;
  if (eOffset !== null) offset = toDuration(out, "offset", eOffset);
  for (let i = 0; i < entries.length; i++) {
    const e = entries[i];
    if (e !== eLimit && e !== eWindow && e !== eOffset) problemWithEntry(out, e, ": unknown field");
  }
  if (problems > 0) return null;

  if (limit < 0) {
    const m = problem(out, "limit");
    out.ascii("must be at least 0 (0 blocks the subject), got ");
    out.int(limit);
    out.endNested(m);
  }
  if (limit >= 9007199254740992) { // 2^53: Lua counts exactly below it
    const m = problem(out, "limit");
    out.ascii("must be below 2^53, got ");
    out.int(limit);
    out.endNested(m);
  }
  if (window < 1_000_000) {
    const m = problem(out, "window");
    out.ascii("must be at least 1ms, got ");
    fmtDuration(out, window);
    out.endNested(m);
  }
  if (window % 1000 != 0) {
    const m = problem(out, "window");
    out.ascii("must be a whole number of microseconds");
    out.endNested(m);
  }
  if (!(offset >= 0 && offset < window)) {
    const m = problem(out, "offset");
    out.ascii("must be at least 0 and less than window (");
    fmtDuration(out, window);
    out.ascii("), got ");
    fmtDuration(out, offset);
    out.endNested(m);
  }
  if (problems > 0) return null;
  // time.Duration.Microseconds truncates toward zero, as i64 division does.
  return new Config(limit, window / 1000, offset / 1000);
}
