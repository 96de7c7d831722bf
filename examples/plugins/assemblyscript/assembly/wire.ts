// Protocol buffers wire format (proto3) over linear memory, by hand: what sdk/abi does with
// protowire. Readers work on [p, end) ranges of the input buffer and never copy; they return the
// position after what they read, or 0 when the input is malformed (no message lies at address 0).
// Their results are left in the globals below, so that reading allocates nothing.

export const WT_VARINT: u32 = 0;
export const WT_I64: u32 = 1;
export const WT_LEN: u32 = 2;
export const WT_SGROUP: u32 = 3;
export const WT_EGROUP: u32 = 4;
export const WT_I32: u32 = 5;

/** protowire.DefaultRecursionLimit: how deeply groups may nest when skipped. */
const GROUP_DEPTH: i32 = 10000;

/** The value of the last readVarint. */
export let vU: u64 = 0;

/** The last field readField read: number, wire type, and value (a varint or fixed-size value in
 * fU, the bytes of a length-delimited field in fPtr/fLen). */
export let fNum: u32 = 0;
export let fTyp: u32 = 0;
export let fU: u64 = 0;
export let fPtr: usize = 0;
export let fLen: usize = 0;

/** Reads a varint at p into vU: at most 10 bytes, the 10th at most 1, as protowire.ConsumeVarint. */
// @ts-ignore: decorator
@inline
export function readVarint(p: usize, end: usize): usize {
  if (p >= end) return 0;
  const b = <u64>load<u8>(p);
  if (b < 0x80) {
    vU = b;
    return p + 1;
  }
  return readVarintSlow(p, end, b & 0x7f);
}

// The varint codec is unrolled: the sandbox checks whether the call was cancelled at every loop
// iteration (wazero's WithCloseOnContextDone), which costs far more than the iteration itself.
function readVarintSlow(p: usize, end: usize, x: u64): usize {
  let b: u64;
  if (p + 1 >= end) return 0;
  b = <u64>load<u8>(p + 1);
  x |= (b & 0x7f) << 7;
  if (b < 0x80) {
    vU = x;
    return p + 2;
  }
  if (p + 2 >= end) return 0;
  b = <u64>load<u8>(p + 2);
  x |= (b & 0x7f) << 14;
  if (b < 0x80) {
    vU = x;
    return p + 3;
  }
  if (p + 3 >= end) return 0;
  b = <u64>load<u8>(p + 3);
  x |= (b & 0x7f) << 21;
  if (b < 0x80) {
    vU = x;
    return p + 4;
  }
  if (p + 4 >= end) return 0;
  b = <u64>load<u8>(p + 4);
  x |= (b & 0x7f) << 28;
  if (b < 0x80) {
    vU = x;
    return p + 5;
  }
  if (p + 5 >= end) return 0;
  b = <u64>load<u8>(p + 5);
  x |= (b & 0x7f) << 35;
  if (b < 0x80) {
    vU = x;
    return p + 6;
  }
  if (p + 6 >= end) return 0;
  b = <u64>load<u8>(p + 6);
  x |= (b & 0x7f) << 42;
  if (b < 0x80) {
    vU = x;
    return p + 7;
  }
  if (p + 7 >= end) return 0;
  b = <u64>load<u8>(p + 7);
  x |= (b & 0x7f) << 49;
  if (b < 0x80) {
    vU = x;
    return p + 8;
  }
  if (p + 8 >= end) return 0;
  b = <u64>load<u8>(p + 8);
  x |= (b & 0x7f) << 56;
  if (b < 0x80) {
    vU = x;
    return p + 9;
  }
  if (p + 9 >= end) return 0;
  b = <u64>load<u8>(p + 9);
  if (b > 1) return 0; // overflow
  vU = x | (b << 63);
  return p + 10;
}

/** Reads a tag into fNum and fTyp; 0 for a field number outside [1, 2^31-1], as protowire.ConsumeTag. */
// @ts-ignore: decorator
@inline
function readTag(p: usize, end: usize): usize {
  p = readVarint(p, end);
  if (p == 0) return 0;
  const num = vU >> 3;
  if (num == 0 || num > 0x7fffffff) return 0;
  fNum = <u32>num;
  fTyp = <u32>vU & 7;
  return p;
}

/** Reads one field (tag and value). Groups are skipped over; an end-group without its start and the
 * reserved wire types 6 and 7 are malformed. */
export function readField(p: usize, end: usize): usize {
  p = readTag(p, end);
  if (p == 0) return 0;
  return readValue(fNum, fTyp, p, end, GROUP_DEPTH);
}

function readValue(num: u32, typ: u32, p: usize, end: usize, depth: i32): usize {
  switch (typ) {
    case WT_VARINT: {
      p = readVarint(p, end);
      if (p == 0) return 0;
      fU = vU;
      return p;
    }
    case WT_I64: {
      if (end - p < 8) return 0;
      fU = load<u64>(p);
      return p + 8;
    }
    case WT_LEN: {
      p = readVarint(p, end);
      if (p == 0 || vU > <u64>(end - p)) return 0;
      fPtr = p;
      fLen = <usize>vU;
      return p + fLen;
    }
    case WT_I32: {
      if (end - p < 4) return 0;
      fU = <u64>load<u32>(p);
      return p + 4;
    }
    case WT_SGROUP:
      return skipGroup(num, p, end, depth);
  }
  return 0;
}

function skipGroup(num: u32, p: usize, end: usize, depth: i32): usize {
  if (depth < 0) return 0;
  while (true) {
    p = readTag(p, end);
    if (p == 0) return 0;
    if (fTyp == WT_EGROUP) return fNum == num ? p : 0;
    p = readValue(fNum, fTyp, p, end, depth - 1);
    if (p == 0) return 0;
  }
}

/** Checks a message of string fields 1 and 2 (a map<string,string> entry). */
export function checkStringPair(p: usize, end: usize): bool {
  while (p < end) {
    p = readField(p, end);
    if (p == 0) return false;
  }
  return true;
}

// @ts-ignore: decorator
@inline
export function unzigzag(u: u64): i64 {
  return <i64>(u >> 1) ^ -<i64>(u & 1);
}

// @ts-ignore: decorator
@inline
export function zigzag(v: i64): u64 {
  return <u64>((v << 1) ^ (v >> 63));
}

/** Writes v as a varint at p and returns the number of bytes written (at most 10). */
// @ts-ignore: decorator
@inline
export function writeVarint(p: usize, v: u64): usize {
  if (v < 0x80) {
    store<u8>(p, <u8>v);
    return 1;
  }
  return writeVarintSlow(p, v);
}

function writeVarintSlow(p: usize, v: u64): usize {
  store<u8>(p, <u8>(v | 0x80));
  v >>= 7;
  if (v < 0x80) {
    store<u8>(p + 1, <u8>v);
    return 2;
  }
  store<u8>(p + 1, <u8>(v | 0x80));
  v >>= 7;
  if (v < 0x80) {
    store<u8>(p + 2, <u8>v);
    return 3;
  }
  store<u8>(p + 2, <u8>(v | 0x80));
  v >>= 7;
  if (v < 0x80) {
    store<u8>(p + 3, <u8>v);
    return 4;
  }
  store<u8>(p + 3, <u8>(v | 0x80));
  v >>= 7;
  if (v < 0x80) {
    store<u8>(p + 4, <u8>v);
    return 5;
  }
  store<u8>(p + 4, <u8>(v | 0x80));
  v >>= 7;
  if (v < 0x80) {
    store<u8>(p + 5, <u8>v);
    return 6;
  }
  store<u8>(p + 5, <u8>(v | 0x80));
  v >>= 7;
  if (v < 0x80) {
    store<u8>(p + 6, <u8>v);
    return 7;
  }
  store<u8>(p + 6, <u8>(v | 0x80));
  v >>= 7;
  if (v < 0x80) {
    store<u8>(p + 7, <u8>v);
    return 8;
  }
  store<u8>(p + 7, <u8>(v | 0x80));
  v >>= 7;
  if (v < 0x80) {
    store<u8>(p + 8, <u8>v);
    return 9;
  }
  store<u8>(p + 8, <u8>(v | 0x80));
  store<u8>(p + 9, <u8>(v >> 7));
  return 10;
}

/** The length of v as a varint. */
export function varintSize(v: u64): usize {
  let n: usize = 1;
  while (v >= 0x80) {
    v >>= 7;
    n++;
  }
  return n;
}

/** The largest buffer the module hands out or grows to: the host's own message limit is 16 MiB, and
 * the host asks for twice the current size at most. */
export const MAX_BUF: usize = 64 << 20;

/** Whether a Buf allocated since the last takeAllocated: the export that is running then collects
 * garbage before it returns (index.ts). */
let allocated = false;

/** Notes that the running export allocated. */
export function markAllocated(): void {
  allocated = true;
}

/** Reports whether the running export allocated, and forgets it. */
export function takeAllocated(): bool {
  const a = allocated;
  allocated = false;
  return a;
}

/** Buf is a growable byte buffer in linear memory that messages are written into. */
export class Buf {
  data: ArrayBuffer;
  ptr: usize;
  cap: usize;
  len: usize = 0;

  constructor(cap: usize) {
    this.data = new ArrayBuffer(<i32>cap);
    this.ptr = changetype<usize>(this.data);
    this.cap = cap;
    allocated = true;
  }

  /** Makes room for n more bytes and returns where they go. */
  // @ts-ignore: decorator
  @inline
  reserve(n: usize): usize {
    if (this.cap - this.len < n) this.grow(n);
    return this.ptr + this.len;
  }

  grow(n: usize): void {
    let cap = this.cap << 1;
    if (cap < this.len + n) cap = this.len + n;
    if (cap > MAX_BUF) abort("message too large", "assembly/wire.ts", 0, 0); // the host discards the instance
    const data = new ArrayBuffer(<i32>cap);
    memory.copy(changetype<usize>(data), this.ptr, this.len);
    this.data = data;
    this.ptr = changetype<usize>(data);
    this.cap = cap;
    allocated = true;
  }

  byte(b: u32): void {
    store<u8>(this.reserve(1), <u8>b);
    this.len++;
  }

  varint(v: u64): void {
    this.len += writeVarint(this.reserve(10), v);
  }

  bytes(p: usize, n: usize): void {
    memory.copy(this.reserve(n), p, n);
    this.len += n;
  }

  /** Appends an ASCII string literal. */
  ascii(s: string): void {
    const n = <usize>s.length;
    const w = this.reserve(n);
    const p = changetype<usize>(s);
    for (let i: usize = 0; i < n; i++) store<u8>(w + i, <u8>load<u16>(p + (i << 1)));
    this.len += n;
  }

  /** Appends a string as UTF-8. */
  utf8(s: string): void {
    const n = <usize>String.UTF8.byteLength(s);
    this.len += String.UTF8.encodeUnsafe(changetype<usize>(s), s.length, this.reserve(n));
  }

  /** Appends v in decimal. */
  int(v: i64): void {
    if (v < 0) {
      this.byte(0x2d); // '-'
      this.uint(<u64>(-v)); // -MinInt64 wraps to 2^63, right as unsigned
      return;
    }
    this.uint(<u64>v);
  }

  /** Appends v in decimal. */
  uint(v: u64): void {
    const w = this.reserve(20);
    let n: usize = 1;
    for (let t = v; t >= 10; t /= 10) n++;
    for (let i = n; i > 0; i--) {
      store<u8>(w + i - 1, <u8>(0x30 + <u32>(v % 10)));
      v /= 10;
    }
    this.len += n;
  }

  /** Starts a length-delimited field whose length is not known yet: writes the tag and a one-byte
   * placeholder, and returns the placeholder's offset for endNested. */
  beginNested(tag: u32): usize {
    this.byte(tag);
    this.byte(0);
    return this.len - 1;
  }

  /** Writes the length of the field begun at mark, moving its body when the length needs more than
   * one byte. */
  endNested(mark: usize): void {
    const n = this.len - mark - 1;
    if (n < 0x80) {
      store<u8>(this.ptr + mark, <u8>n);
      return;
    }
    const k = varintSize(<u64>n);
    this.reserve(k - 1);
    memory.copy(this.ptr + mark + k, this.ptr + mark + 1, n);
    writeVarint(this.ptr + mark, <u64>n);
    this.len += k - 1;
  }
}
