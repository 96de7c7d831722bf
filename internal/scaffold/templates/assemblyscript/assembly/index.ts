// The __NAME__ plugin for ruled: at most `limit` hits per `window`, windows aligned to Redis time,
// written against ruled's Wasm ABI v1 (docs/abi.md).
//
//   config: {limit: 100, window: 1m}
//
// It decides in steps: ruled_step names the script and its arguments, and ruled runs it in Redis
// and reads the decision from its reply. A request for 0 hits (a peek) is answered without counting.
import { SCRIPT } from "../build/generated/script";
import { Entry, Reader, Writer, ok, valueMap } from "./wire";

/** A rule's parsed config. */
class Config {
  constructor(public limit: i64, public windowUs: i64) {}
}

/** The configs ruled has accepted, by id. */
const configs = new Map<u64, Config>();
/** The buffer ruled writes requests into, and the last answer. */
let input = new Uint8Array(0);
let output = new Uint8Array(0);

/** Marks the module as speaking ABI v1; never called. */
export function ruled_abi_v1(): void {}

/** Returns a buffer of at least size bytes for ruled's next request. */
export function ruled_buf(size: u32): usize {
  if (<u32>input.length < size) input = new Uint8Array(size);
  return input.dataStart;
}

/** The request at (ptr, len), which must lie in the input buffer; null otherwise. */
function request(ptr: usize, len: usize): Uint8Array | null {
  if (ptr != input.dataStart || len > <usize>input.length) return null;
  return input.subarray(0, <i32>len);
}

/** Keeps the answer until the next call and returns where it lies (ptr << 32 | len). */
function answer(w: Writer): u64 {
  output = w.finish();
  return (<u64>output.dataStart << 32) | <u64>output.length;
}

/** InitRequest in, Info out. */
export function ruled_init(ptr: usize, len: usize): u64 {
  const req = request(ptr, len);
  if (req == null) return 0;
  let version: u64 = 0;
  const r = new Reader(req);
  while (r.next()) if (r.field == 1 && r.wireType == 0) version = r.value;
  if (r.bad || version != 1) return 0;
  const script = new Writer();
  script.string(1, "decide");
  script.string(2, SCRIPT);
  script.string(3, "HMGET");
  script.string(3, "HSET");
  script.string(3, "PEXPIRE");
  const returns = ["allowed", "granted", "limit", "remaining", "reset_us", "retry_after_us"];
  for (let i = 0; i < returns.length; i++) script.string(4, returns[i]);
  const info = new Writer();
  info.string(1, "__NAME__");
  info.string(2, "0.1.0");
  info.message(3, script);
  info.boolean(5, true); // decides in steps
  return answer(info);
}

/**
 * ConfigureRequest in, ConfigureResponse out: the problems, each prefixed with its key, or for a valid
 * config its template: the step every request starts with, the request's hits left to ruled, which then
 * starts decisions without calling ruled_step (docs/abi.md, "Templates").
 */
export function ruled_configure(ptr: usize, len: usize): u64 {
  const req = request(ptr, len);
  if (req == null) return 0;
  let id: u64 = 0;
  let fields: Entry[] | null = [];
  const r = new Reader(req);
  while (r.next()) {
    if (r.field == 1 && r.wireType == 0) id = r.value;
    if (r.field == 2 && r.wireType == 2) fields = valueMap(r.bytes());
  }
  if (r.bad || fields == null) return 0;
  const errors = new Array<string>();
  const c = configure(fields, errors);
  const resp = new Writer();
  if (c != null) {
    configs.set(id, c);
    resp.message(2, step(c, 0, true));
  }
  for (let i = 0; i < errors.length; i++) resp.string(1, errors[i]);
  return answer(resp);
}

/** Reads and checks a rule's config with ruled's SDK's messages; null when errors has any. */
function configure(fields: Entry[], errors: string[]): Config | null {
  let limit: i64 = 0;
  let windowUs: i64 = 0;
  let hasLimit = false;
  let hasWindow = false;
  for (let i = 0; i < fields.length; i++) {
    const key = fields[i].key;
    const value = fields[i].value;
    if (key == "limit") {
      hasLimit = true;
      const n = value.wholeNumber();
      if (!ok) errors.push(`limit: want a whole number, got ${value.toString()}`);
      else if (n < 1) errors.push("limit: must be at least 1");
      else limit = n;
    } else if (key == "window") {
      hasWindow = true;
      const ns = value.durationNs();
      if (!ok) errors.push(`window: want a duration such as "500ms", "10s" or "1m", got ${value.toString()}`);
      else if (ns < 1000000 || ns % 1000 != 0) errors.push("window: must be whole microseconds, at least 1ms");
      else windowUs = ns / 1000;
    } else {
      errors.push(`${key}: unknown field`);
    }
  }
  if (!hasLimit) errors.push("limit: required");
  if (!hasWindow) errors.push("window: required");
  return errors.length == 0 ? new Config(limit, windowUs) : null;
}

/** StepRequest in, StepResponse out: run the script on the subject's key; its reply is the decision. */
export function ruled_step(ptr: usize, len: usize): u64 {
  const req = request(ptr, len);
  if (req == null) return 0;
  let id: u64 = 0;
  let hits: i64 = 0;
  let resume = false;
  const r = new Reader(req);
  while (r.next()) {
    if (r.wireType != 0) continue;
    if (r.field == 1) id = r.value;
    else if (r.field == 3) hits = r.sint();
    else if (r.field == 7) resume = r.value != 0;
  }
  if (r.bad) return 0;
  const resp = new Writer();
  if (!configs.has(id)) {
    resp.string(2, `__NAME__: no config ${id}`);
  } else if (resume) {
    resp.string(2, "__NAME__: one step decides; nothing to resume");
  } else {
    return answer(step(configs.get(id), hits, false));
  }
  return answer(resp);
}

/**
 * The StepResponse that runs the script on the subject's key, its reply the decision: ruled_step's
 * answer, or with template the config's template, whose hits argument is the request field.
 */
function step(c: Config, hits: i64, template: bool): Writer {
  const call = new Writer();
  call.string(1, "decide");
  call.string(2, "n"); // the subject's key, in the plugin's and the rule's namespace
  const args: i64[] = [c.limit, c.windowUs];
  for (let i = 0; i < args.length; i++) {
    const v = new Writer();
    v.sint(2, args[i]);
    call.message(3, v);
  }
  const h = new Writer();
  if (template) h.uint(11, 1); // request_field: REQUEST_FIELD_HITS
  else h.sint(2, hits);
  call.message(3, h);
  const resp = new Writer();
  resp.message(4, call);
  resp.boolean(5, true); // the reply is the decision
  resp.sint(6, c.windowUs);
  return resp;
}

/**
 * DecideRequest in, DecideResponse out. ruled asks a module that decides in steps through
 * ruled_step only; this export exists because ABI v1 requires it.
 */
export function ruled_decide(ptr: usize, len: usize): u64 {
  if (request(ptr, len) == null) return 0;
  const resp = new Writer();
  resp.string(2, "__NAME__ decides in steps (ruled_step)");
  return answer(resp);
}
