// fixedwindow-as: ruled's fixed-window plugin (plugins/fixedwindow) written in AssemblyScript
// against the Wasm ABI v1 (docs/abi.md). The Lua script and its declared Redis commands come
// from the Go plugin's own files at build time (build/generated/fixedwindow.ts, see
// scripts/build.mjs); this file is the ABI glue and the Go plugin's Decide.
//
// Memory: the runtime is "minimal" (TLSF allocator, mark-and-sweep collector run by hand). Every
// object that must outlive a call is reachable from a global, and every export that may have
// allocated calls __collect() as it returns, when no object is referenced from the Wasm stack
// any more. A decision on the normal path allocates nothing.
import "./abort"; // the program's abort (asc --use abort=assembly/abort/abort)
import { SCRIPT_COMMANDS, SCRIPT_NAME, SCRIPT_SOURCE, VERSION } from "../build/generated/fixedwindow";
import { checkMap, Config, configure } from "./config";
import { LEVEL_ERROR, lineAdd, lineLog, lineStart, lineUint, log, redisEval, takeReply } from "./host";
import {
  Buf,
  checkStringPair,
  fLen,
  fNum,
  fPtr,
  fTyp,
  fU,
  markAllocated,
  MAX_BUF,
  readField,
  readVarint,
  takeAllocated,
  unzigzag,
  vU,
  writeVarint,
  WT_LEN,
  WT_VARINT,
  zigzag,
} from "./wire";

/** The plugin's name in rule files and Redis keys. */
const NAME = "fixedwindow-as";

/** Reply buffers: the first one, and the largest kept after a call (as sdk/guest). */
const REPLY_CAP: usize = 4096;
const MAX_KEPT_REPLY: usize = 64 << 10;

// The input buffer ruled_buf hands out; null until the host asks for one.
let input: ArrayBuffer | null = null;
let inputPtr: usize = 0;
let inputCap: usize = 0;

/** The last export's answer, valid until the next export call. */
const out = new Buf(1024);
/** The EvalRequest of a decision; it starts with the script's name and the keys, which never change. */
const evalReq = new Buf(1024);
let evalPrefix: usize = 0;
/** The reply buffer passed to redis_eval. */
let reply = new Buf(REPLY_CAP);

/** Accepted configs by id, and the last one used (most decisions reuse it). */
const configs = new Map<u64, Config>();
let lastId: u64 = 0;
let lastCfg: Config | null = null;

// Start-up (_initialize): the EvalRequest prefix. script = SCRIPT_NAME, keys = "c", "d" (the
// counter and dedup hashes; the host maps them into the plugin's namespace and the subject's slot).
evalReq.byte(0x0a);
evalReq.varint(<u64>String.UTF8.byteLength(SCRIPT_NAME));
evalReq.utf8(SCRIPT_NAME);
evalReq.ascii("\x12\x01c\x12\x01d");
evalPrefix = evalReq.len;

// ---- Exports ----

/** Marker: this module speaks ABI v1. Never called. */
export function ruled_abi_v1(): void {}

/** Returns a buffer of at least size bytes, valid until the next call; 0 (failure) for a size
 * beyond any message the host sends. */
export function ruled_buf(size: u32): usize {
  if (<usize>size > MAX_BUF) {
    lineStart();
    lineAdd("ruled_buf: ");
    lineUint(size);
    lineAdd(" bytes is more than a message can be");
    lineLog(LEVEL_ERROR);
    return 0;
  }
  if (input === null || <usize>size > inputCap) {
    const cap = size > 1024 ? size : 1024;
    input = new ArrayBuffer(<i32>cap);
    inputPtr = changetype<usize>(input);
    inputCap = cap;
    __collect(); // the previous buffer
  }
  return inputPtr;
}

/** InitRequest in, Info out. */
/** The names of the script's reply elements (sdk.DecisionShape). */
const SCRIPT_RETURNS: string[] = ["allowed", "granted", "limit", "remaining", "reset_us", "retry_after_us"];
/** sdk.DecisionShape as its String method writes it. */
const DECISION_SHAPE = "{allowed, granted, limit, remaining, reset_us, retry_after_us}";

export function ruled_init(ptr: usize, len: usize): u64 {
  if (!inBuffer("ruled_init", ptr, len)) return 0;
  let version: u64 = 0;
  const end = ptr + len;
  for (let p = ptr; p < end; ) {
    p = readField(p, end);
    if (p == 0) return fail("ruled_init: malformed InitRequest");
    if (fNum == 1 && fTyp == WT_VARINT) version = fU;
  }
  if (<u32>version != 1) {
    lineStart();
    lineAdd("ruled_init: host speaks ABI ");
    lineUint(<u64><u32>version);
    lineAdd(", this module ABI 1");
    lineLog(LEVEL_ERROR);
    return 0;
  }
  out.len = 0;
  stringField(out, 0x0a, NAME);
  stringField(out, 0x12, VERSION);
  const script = out.beginNested(0x1a);
  stringField(out, 0x0a, SCRIPT_NAME);
  stringField(out, 0x12, SCRIPT_SOURCE);
  for (let i = 0; i < SCRIPT_COMMANDS.length; i++) stringField(out, 0x1a, SCRIPT_COMMANDS[i]);
  // The reply's shape (Script.returns, field 4), as plugins/fixedwindow
  // declares it (sdk.DecisionShape): the host refuses any other reply.
  for (let i = 0; i < SCRIPT_RETURNS.length; i++) stringField(out, 0x22, SCRIPT_RETURNS[i]);
  out.endNested(script);
  // Traits (field 4), as plugins/fixedwindow declares them: firm denials,
  // leasable grants, refunds (docs/rules.md, "Shortcuts").
  const traits = out.beginNested(0x22);
  out.byte(0x08); out.byte(1);
  out.byte(0x10); out.byte(1);
  out.byte(0x18); out.byte(1);
  out.endNested(traits);
  return answer();
}

/** ConfigureRequest in, ConfigureResponse out. An accepted config is kept under its id. */
export function ruled_configure(ptr: usize, len: usize): u64 {
  if (!inBuffer("ruled_configure", ptr, len)) return 0;
  let id: u64 = 0;
  let map: usize = 0;
  let mapLen: usize = 0;
  const end = ptr + len;
  for (let p = ptr; p < end; ) {
    p = readField(p, end);
    if (p == 0) return fail("ruled_configure: malformed ConfigureRequest");
    if (fNum == 1 && fTyp == WT_VARINT) {
      id = fU;
    } else if (fNum == 2 && fTyp == WT_LEN) {
      const m = fPtr;
      const n = fLen;
      if (!checkMap(m, m + n, 1)) return fail("ruled_configure: malformed config");
      map = m; // the last one wins, as in sdk/abi
      mapLen = n;
    }
  }
  out.len = 0;
  const cfg = configure(map, map + mapLen, out);
  if (cfg !== null) {
    configs.set(id, cfg);
    if (id == lastId) lastCfg = cfg;
  }
  markAllocated(); // the config, the entries of the map
  return answer();
}

/** DecideRequest in, DecideResponse out: plugins/fixedwindow's Decide. */
export function ruled_decide(ptr: usize, len: usize): u64 {
  if (!inBuffer("ruled_decide", ptr, len)) return 0;
  const end = ptr + len;
  if (!decodeDecideFast(ptr, end) && !decodeDecide(ptr, end)) return fail("ruled_decide: malformed DecideRequest");
  const id = reqId;
  const hits = reqHits;
  const dedup = reqDedup;
  const dedupLen = reqDedupLen;
  const best = reqBest;

  let cfg = lastCfg;
  if (id != lastId || cfg === null) {
    if (!configs.has(id)) {
      out.len = 0;
      const m = decideError();
      out.ascii("unknown config id ");
      out.uint(id);
      out.endNested(m);
      return answer();
    }
    cfg = configs.get(id);
    lastId = id;
    lastCfg = cfg;
  }

  // EvalRequest args: limit, window_us, offset_us, hits, dedup_id (bytes), best_effort (0|1),
  // each a Value: int_value (field 2, zig-zag) or bytes_value (field 6).
  evalReq.len = evalPrefix;
  // Room: five integer args of at most 13 bytes, and the dedup arg's two tags and two lengths.
  let w = evalReq.reserve(5 * 13 + 2 + 2 * 5 + dedupLen);
  w = intArg(w, cfg.limit);
  w = intArg(w, cfg.windowUs);
  w = intArg(w, cfg.offsetUs);
  w = intArg(w, hits);
  store<u8>(w, 0x1a);
  w += 1 + writeVarint(w + 1, <u64>(1 + sizeOfVarint(dedupLen) + dedupLen));
  store<u8>(w, 0x32);
  w += 1 + writeVarint(w + 1, <u64>dedupLen);
  memory.copy(w, dedup, dedupLen);
  w += dedupLen;
  w = intArg(w, <i64>best);
  evalReq.len = w - evalReq.ptr;

  let r = redisEval(evalReq.ptr, evalReq.len, reply.ptr, reply.cap);
  let buf = reply;
  if (r < -255) {
    // The reply did not fit: take it into a buffer of its size.
    const need = <usize>-r;
    if (need > MAX_BUF) return fail("ruled_decide: reply too large");
    buf = new Buf(need);
    if (need <= MAX_KEPT_REPLY) reply = buf;
    r = takeReply(buf.ptr, buf.cap);
  }
  out.len = 0;
  if (r < 0) {
    const m = decideError();
    out.ascii("Eval ");
    out.utf8(SCRIPT_NAME);
    out.ascii(": redis_eval: ");
    statusName(r);
    out.endNested(m);
    return answer();
  }
  if (<u64>r > <u64>buf.cap) {
    const m = decideError();
    out.ascii("Eval ");
    out.utf8(SCRIPT_NAME);
    out.ascii(": redis_eval returned ");
    out.int(r);
    out.ascii(" bytes for a ");
    out.uint(buf.cap);
    out.ascii("-byte buffer");
    out.endNested(m);
    return answer();
  }
  decision(buf.ptr, buf.ptr + <usize>r, cfg.windowUs);
  return answer();
}

// ---- Decisions ----

// The DecideRequest of the call.
let reqId: u64 = 0;
let reqHits: i64 = 0;
let reqDedup: usize = 0;
let reqDedupLen: usize = 0;
let reqBest: u64 = 0;

/** Decodes a DecideRequest as sdk/abi does: any field order, repeated fields (the last wins),
 * unknown fields skipped, attrs checked; false when it is malformed. */
function decodeDecide(p: usize, end: usize): bool {
  reqId = 0;
  reqHits = 0;
  reqDedup = 0;
  reqDedupLen = 0;
  reqBest = 0;
  while (p < end) {
    p = readField(p, end);
    if (p == 0) return false;
    const num = fNum;
    if (fTyp == WT_VARINT) {
      if (num == 1) reqId = fU;
      else if (num == 3) reqHits = unzigzag(fU);
      else if (num == 5) reqBest = fU != 0 ? 1 : 0;
    } else if (fTyp == WT_LEN) {
      // 2 subject: the host scopes keys to it; the script does not need it.
      if (num == 4) {
        reqDedup = fPtr;
        reqDedupLen = fLen;
      } else if (num == 6 && !checkStringPair(fPtr, fPtr + fLen)) {
        return false;
      }
    }
  }
  return true;
}

/** Decodes a DecideRequest whose fields are among config_id, subject, hits, dedup_id and
 * best_effort, each at most once and in that order, as the host writes them, in straight-line
 * code: the sandbox pays for every loop iteration (see wire.ts). False for anything else, which
 * decodeDecide then reads. */
function decodeDecideFast(p: usize, end: usize): bool {
  let id: u64 = 0;
  let hits: i64 = 0;
  let dedup: usize = 0;
  let dedupLen: usize = 0;
  let best: u64 = 0;
  if (p < end && load<u8>(p) == 0x08) {
    p = readVarint(p + 1, end);
    if (p == 0) return false;
    id = vU;
  }
  if (p < end && load<u8>(p) == 0x12) {
    p = readVarint(p + 1, end);
    if (p == 0 || vU > <u64>(end - p)) return false;
    p += <usize>vU;
  }
  if (p < end && load<u8>(p) == 0x18) {
    p = readVarint(p + 1, end);
    if (p == 0) return false;
    hits = unzigzag(vU);
  }
  if (p < end && load<u8>(p) == 0x22) {
    p = readVarint(p + 1, end);
    if (p == 0 || vU > <u64>(end - p)) return false;
    dedup = p;
    dedupLen = <usize>vU;
    p += dedupLen;
  }
  if (p < end && load<u8>(p) == 0x28) {
    p = readVarint(p + 1, end);
    if (p == 0) return false;
    best = vU != 0 ? 1 : 0;
  }
  if (p != end) return false;
  reqId = id;
  reqHits = hits;
  reqDedup = dedup;
  reqDedupLen = dedupLen;
  reqBest = best;
  return true;
}

// @ts-ignore: decorator
@inline
function sizeOfVarint(v: usize): usize {
  return v < 1 << 7 ? 1 : v < 1 << 14 ? 2 : v < 1 << 21 ? 3 : v < 1 << 28 ? 4 : 5;
}

/** Writes an EvalRequest arg (field 3) holding Value{int_value: v} at w. */
// @ts-ignore: decorator
@inline
function intArg(w: usize, v: i64): usize {
  const n = writeVarint(w + 3, zigzag(v));
  store<u8>(w, 0x1a);
  store<u8>(w + 1, <u8>(n + 1));
  store<u8>(w + 2, 0x10);
  return w + 3 + n;
}

// The script's reply, decoded: the first 7 elements of its array.
const elems = memory.data(7 << 3);
let nElems: i32 = 0;
let badElem: i32 = -1; // the first element that is not an integer
let badPtr: usize = 0;
let badEnd: usize = 0;
// Reply kinds.
const R_NIL: i32 = 0;
const R_INT: i32 = 1;
const R_STR: i32 = 2;
const R_ARR: i32 = 3;
const R_ERR: i32 = 4; // an Error: rPtr/rEnd hold its message
const R_BAD: i32 = 5; // malformed
let rKind: i32 = R_NIL;
let rInt: i64 = 0;
let rPtr: usize = 0;
let rEnd: usize = 0;
let rClass: usize = 0; // R_ERR: the error's class
let rClassEnd: usize = 0;

/** Decodes a Reply message into rKind etc. as sdk/abi's decodeReply does: the last field of the
 * oneof wins, an error field ends decoding, array elements are checked to the last one. With
 * lazy, an array that is the message's last field is left for the caller to walk (decision),
 * which then checks its elements: one pass instead of two. */
function decodeReply(p: usize, end: usize, depth: i32, lazy: bool): void {
  if (depth > 64) {
    rKind = R_BAD;
    return;
  }
  let kind = R_NIL;
  let v: i64 = 0;
  let sp: usize = 0;
  let se: usize = 0;
  while (p < end) {
    p = readField(p, end);
    if (p == 0) {
      rKind = R_BAD;
      return;
    }
    const num = fNum;
    if (fTyp == WT_VARINT) {
      if (num == 1) kind = R_NIL;
      else if (num == 2) {
        kind = R_INT;
        v = unzigzag(fU);
      }
    } else if (fTyp == WT_LEN) {
      const bp = fPtr;
      const be = fPtr + fLen;
      if (num == 3) {
        kind = R_STR;
        sp = bp;
        se = be;
      } else if (num == 4) {
        if (!lazy || p < end) {
          for (let q = bp; q < be; ) {
            q = readField(q, be);
            if (q == 0) {
              rKind = R_BAD;
              return;
            }
            if (fNum != 1 || fTyp != WT_LEN) continue;
            decodeReply(fPtr, fPtr + fLen, depth + 1, false);
            if (rKind >= R_ERR) return;
          }
        }
        kind = R_ARR;
        sp = bp;
        se = be;
      } else if (num == 5) {
        // Error{class, message}: the message is what the Go guest's error says.
        let msg: usize = 0;
        let msgEnd: usize = 0;
        let cls: usize = 0;
        let clsEnd: usize = 0;
        for (let q = bp; q < be; ) {
          q = readField(q, be);
          if (q == 0) {
            rKind = R_BAD;
            return;
          }
          if (fTyp != WT_LEN) continue;
          if (fNum == 1) {
            cls = fPtr;
            clsEnd = fPtr + fLen;
          } else if (fNum == 2) {
            msg = fPtr;
            msgEnd = fPtr + fLen;
          }
        }
        rKind = R_ERR;
        rPtr = msg;
        rEnd = msgEnd;
        rClass = cls;
        rClassEnd = clsEnd;
        return;
      }
    }
  }
  rKind = kind;
  rInt = v;
  rPtr = sp;
  rEnd = se;
}

/** Answers a decision from the script's reply at [p, end): sdk.DecisionFromReply. */
function decision(p: usize, end: usize, windowUs: i64): void {
  // Reply{array_value} alone, as every decision reply is, is walked below; other replies are
  // decoded in full.
  rKind = R_NIL;
  if (end - p >= 2 && load<u8>(p) == 0x22) {
    const q = readVarint(p + 1, end);
    if (q != 0 && <u64>(end - q) == vU) {
      rKind = R_ARR;
      rPtr = q;
      rEnd = end;
    }
  }
  if (rKind != R_ARR) decodeReply(p, end, 0, true);
  if (rKind == R_ARR && intElems(rPtr, rEnd)) {
    // six or seven integers, read in straight-line code
  } else if (rKind == R_ARR) {
    // The elements: integers, or strings that parse as integers. One pass that also checks them
    // (decodeReply left it to this one); failures of the reply win over problems of its shape,
    // as in sdk/abi, where the reply is decoded before DecisionFromReply looks at it.
    nElems = 0;
    badElem = -1;
    const ae = rEnd;
    for (let q = rPtr; q < ae; ) {
      q = readField(q, ae);
      if (q == 0) {
        rKind = R_BAD;
        break;
      }
      if (fNum != 1 || fTyp != WT_LEN) continue;
      const ep = fPtr;
      const ee = fPtr + fLen;
      let ok = false;
      let v: i64 = 0;
      if (ee - ep >= 2 && load<u8>(ep) == 0x10 && readVarint(ep + 1, ee) == ee) {
        ok = true; // Reply{int_value}: what every element of a decision reply is
        v = unzigzag(vU);
      } else {
        decodeReply(ep, ee, 1, false);
        if (rKind >= R_ERR) break;
        ok = rKind == R_INT || (rKind == R_STR && parseReplyInt(rPtr, rEnd));
        v = rInt;
      }
      if (ok) {
        if (nElems < 7) store<i64>(elems + (<usize>nElems << 3), v);
      } else if (badElem < 0) {
        badElem = nElems;
        badPtr = ep;
        badEnd = ee;
      }
      nElems++;
    }
    if (rKind < R_ERR) rKind = R_ARR;
  }
  if (rKind == R_BAD) {
    const m = decideError();
    out.ascii("abi: Reply: malformed");
    out.endNested(m);
    return;
  }
  if (rKind == R_ERR) {
    const m = decideError();
    if (rEnd > rPtr) {
      out.bytes(rPtr, rEnd - rPtr);
    } else {
      // An empty error field would read as no error, and the zero decision as a denial.
      out.ascii("redis_eval failed (class ");
      out.bytes(rClass, rClassEnd - rClass);
      out.ascii(")");
    }
    out.endNested(m);
    return;
  }
  // sdk.DecisionShape.Decision: exactly the six named elements, allowed 1 or 0.
  if (rKind != R_ARR) {
    const m = decideError();
    out.ascii("decision reply: reply is ");
    describeScalar();
    out.ascii(", want an array ");
    out.ascii(DECISION_SHAPE);
    out.endNested(m);
    return;
  }
  if (nElems != 6) {
    const m = decideError();
    out.ascii("decision reply: reply has ");
    out.int(nElems);
    out.ascii(" elements, want 6: ");
    out.ascii(DECISION_SHAPE);
    out.endNested(m);
    return;
  }
  if (badElem >= 0) {
    const m = decideError();
    out.ascii("decision reply: reply element \"");
    out.ascii(SCRIPT_RETURNS[badElem]);
    out.ascii("\": sdk: reply ");
    decodeReply(badPtr, badEnd, 1, false);
    if (rKind == R_STR) {
      out.byte(0x22);
      out.bytes(rPtr, rEnd - rPtr);
      out.byte(0x22);
    } else {
      fmtScalar();
    }
    out.ascii(" is not an integer");
    out.endNested(m);
    return;
  }
  const allowedV = load<i64>(elems);
  if (allowedV != 0 && allowedV != 1) {
    const m = decideError();
    out.ascii("decision reply: reply element \"allowed\" is ");
    out.int(allowedV);
    out.ascii(", want 1 or 0");
    out.endNested(m);
    return;
  }
  const allowed = allowedV == 1;
  // Durations cross as time.Duration(v)*time.Microsecond and back with Microseconds(): the same
  // wrap-around as Go's, for values no script returns.
  const granted = load<i64>(elems, 8);
  const limit = load<i64>(elems, 16);
  const remaining = load<i64>(elems, 24);
  const reset = (load<i64>(elems, 32) * 1000) / 1000;
  const retry = (load<i64>(elems, 40) * 1000) / 1000;

  // DecideResponse{decision: Decision{...}}: at most 8 fields of 11 bytes, so one length byte.
  let w = out.reserve(2 + 8 * 11);
  store<u8>(w, 0x0a);
  const body = w + 2;
  w = body;
  if (allowed) {
    store<u16>(w, 0x0108);
    w += 2;
  }
  w = sintField(w, 0x10, granted);
  w = sintField(w, 0x18, limit);
  w = sintField(w, 0x20, remaining);
  w = sintField(w, 0x28, windowUs);
  w = sintField(w, 0x30, reset);
  w = sintField(w, 0x38, retry);
  store<u8>(body - 1, <u8>(w - body));
  out.len = w - out.ptr;
}

/** Reads an array of six or seven Reply{int_value} elements (one-byte lengths) at [p, end) into
 * elems and nElems without a loop; false for any other array, which decision then walks. */
function intElems(p: usize, end: usize): bool {
  badElem = -1;
  p = intElem(p, end, 0);
  p = intElem(p, end, 1);
  p = intElem(p, end, 2);
  p = intElem(p, end, 3);
  p = intElem(p, end, 4);
  p = intElem(p, end, 5);
  if (p == end) {
    nElems = 6;
    return true;
  }
  if (intElem(p, end, 6) == end) {
    nElems = 7;
    return true;
  }
  return false;
}

/** Reads element i at p when it is {1: Reply{int_value}}, and returns the position after it, or
 * 0 (also when p is 0). */
// @ts-ignore: decorator
@inline
function intElem(p: usize, end: usize, i: usize): usize {
  if (p == 0 || end - p < 4 || load<u8>(p) != 0x0a || load<u8>(p + 2) != 0x10) return 0;
  const n = <usize>load<u8>(p + 1);
  if (n < 2 || n > 11 || n > end - p - 2) return 0;
  const e = p + 2 + n;
  if (readVarint(p + 3, e) != e) return 0;
  store<i64>(elems + (i << 3), unzigzag(vU));
  return e;
}

// @ts-ignore: decorator
@inline
function sintField(w: usize, tag: u32, v: i64): usize {
  if (v == 0) return w;
  store<u8>(w, <u8>tag);
  return w + 1 + writeVarint(w + 1, zigzag(v));
}

/** strconv.ParseInt(s, 10, 64) of a string reply (sdk.Reply.Int64), into rInt. */
function parseReplyInt(p: usize, end: usize): bool {
  let n = end - p;
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
    if (d > 9 || u > u64.MAX_VALUE / 10) return false;
    const v = u * 10 + d;
    if (v < u) return false;
    u = v;
  }
  if (neg ? u > 0x8000000000000000 : u >= 0x8000000000000000) return false;
  rInt = neg ? -<i64>u : <i64>u;
  return true;
}

/** Prints the reply in rKind etc. as %v prints an sdk.Reply's value (nil, int64, string). */
/** Appends what sdk's Reply.describe says of a reply that is not an array: nil, the integer N,
 * or the string quoted (its first 40 bytes, then "…"; bytes are not escaped as Go's
 * strconv.Quote escapes them). */
function describeScalar(): void {
  if (rKind == R_INT) {
    out.ascii("the integer ");
    out.int(rInt);
  } else if (rKind == R_STR) {
    const n = rEnd - rPtr;
    out.byte(0x22);
    out.bytes(rPtr, n > 40 ? 40 : n);
    out.byte(0x22);
    if (n > 40) out.utf8("…");
  } else out.ascii("nil");
}

function fmtScalar(): void {
  if (rKind == R_INT) out.int(rInt);
  else if (rKind == R_STR) out.bytes(rPtr, rEnd - rPtr);
  else if (rKind == R_NIL) out.ascii("<nil>");
  else out.ascii("[...]");
}

/** Starts DecideResponse{error: ...} (with an empty decision, as sdk/abi writes it) and returns
 * the mark for out.endNested. */
function decideError(): usize {
  out.len = 0;
  out.byte(0x0a);
  out.byte(0);
  return out.beginNested(0x12);
}

/** Appends what abi.Status's String says of a status. */
function statusName(r: i64): void {
  switch (r >= -5 ? <i32>r : 0) {
    case -1:
      out.ascii("bad pointer");
      return;
    case -2:
      out.ascii("bad message");
      return;
    case -3:
      out.ascii("no decision in progress");
      return;
    case -4:
      out.ascii("no reply waiting");
      return;
    case -5:
      out.ascii("reply buffer smaller than 256 bytes");
      return;
  }
  out.ascii("status ");
  out.int(r);
}

// ---- Glue ----

/** Checks that a message lies in the buffer ruled_buf handed out. */
function inBuffer(name: string, ptr: usize, len: usize): bool {
  if (len == 0 || (ptr == inputPtr && len <= inputCap)) return true;
  lineStart();
  lineAdd(name);
  lineAdd(": message at ");
  lineUint(ptr);
  lineAdd("+");
  lineUint(len);
  lineAdd(" is not in the buffer ruled_buf returned");
  lineLog(LEVEL_ERROR);
  return false;
}

/** Logs why the call fails and fails it: the host discards the instance. */
function fail(msg: string): u64 {
  log(LEVEL_ERROR, msg);
  collect();
  return 0;
}

/** Returns the answer in out, packed, after collecting garbage if the call allocated. */
// @ts-ignore: decorator
@inline
function answer(): u64 {
  collect();
  return (<u64>out.ptr << 32) | <u64>out.len;
}

// @ts-ignore: decorator
@inline
function collect(): void {
  if (takeAllocated()) __collect();
}

function stringField(b: Buf, tag: u32, s: string): void {
  b.byte(tag);
  b.varint(<u64>String.UTF8.byteLength(s));
  b.utf8(s);
}
