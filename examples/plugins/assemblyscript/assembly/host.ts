// The host functions of module ruled_v1 (docs/abi.md, "It may import only these functions").

/** Runs a declared script: EvalRequest at req, Reply written to out. See redisEval results in docs/abi.md. */
@external("ruled_v1", "redis_eval")
export declare function redisEval(req: usize, reqLen: usize, out: usize, outCap: usize): i64;

/** Copies a reply that did not fit into out. */
@external("ruled_v1", "take_reply")
export declare function takeReply(out: usize, outCap: usize): i64;

/** Writes one UTF-8 line to ruled's log. */
@external("ruled_v1", "log")
export declare function hostLog(level: i32, msg: usize, msgLen: usize): void;

/** sdk.LevelError. */
export const LEVEL_ERROR: i32 = 8;

// The longest line ruled keeps is 1 KiB; a static buffer for lines built without allocating.
const LINE_CAP: usize = 1024;
const line = memory.data(<i32>LINE_CAP);
let lineLen: usize = 0;

/** Starts a log line. */
export function lineStart(): void {
  lineLen = 0;
}

/** Appends a string to the line: UTF-16 transcoded to UTF-8, lone surrogates as '?'. */
export function lineAdd(s: string | null): void {
  if (s === null) {
    lineAdd("null");
    return;
  }
  const p = changetype<usize>(s);
  const n = <usize>s.length;
  for (let i: usize = 0; i < n; i++) {
    let c = <u32>load<u16>(p + (i << 1));
    if (c >= 0xd800 && c < 0xdc00 && i + 1 < n) {
      const d = <u32>load<u16>(p + ((i + 1) << 1));
      if (d >= 0xdc00 && d < 0xe000) {
        c = 0x10000 + ((c - 0xd800) << 10) + (d - 0xdc00);
        i++;
      }
    }
    if (c >= 0xd800 && c < 0xe000) c = 0x3f; // '?'
    if (c < 0x80) {
      lineByte(c);
    } else if (c < 0x800) {
      lineByte(0xc0 | (c >> 6));
      lineByte(0x80 | (c & 0x3f));
    } else if (c < 0x10000) {
      lineByte(0xe0 | (c >> 12));
      lineByte(0x80 | ((c >> 6) & 0x3f));
      lineByte(0x80 | (c & 0x3f));
    } else {
      lineByte(0xf0 | (c >> 18));
      lineByte(0x80 | ((c >> 12) & 0x3f));
      lineByte(0x80 | ((c >> 6) & 0x3f));
      lineByte(0x80 | (c & 0x3f));
    }
  }
}

/** Appends an unsigned decimal number to the line. */
export function lineUint(v: u64): void {
  const tmp = memory.data(24);
  let w: usize = 24;
  do {
    w--;
    store<u8>(tmp + w, <u8>(0x30 + <u32>(v % 10)));
    v /= 10;
  } while (v != 0);
  for (; w < 24; w++) lineByte(<u32>load<u8>(tmp + w));
}

function lineByte(b: u32): void {
  if (lineLen < LINE_CAP) store<u8>(line + lineLen++, <u8>b);
}

/** Writes the line to ruled's log at level. */
export function lineLog(level: i32): void {
  hostLog(level, line, lineLen);
}

/** Logs msg at level. */
export function log(level: i32, msg: string): void {
  lineStart();
  lineAdd(msg);
  lineLog(level);
}
