//! The __NAME__ plugin for ruled: at most `limit` hits per `window`, windows
//! aligned to Redis time. A Wasm module written against ruled's ABI v1
//! (docs/abi.md) with the standard library alone:
//!
//! ```text
//! config: {limit: 100, window: 1m}
//! ```
//!
//! It decides in steps: `ruled_step` names the script and its arguments,
//! and ruled runs it in Redis and reads the decision from its reply. A
//! request for 0 hits (a peek) is answered without counting.

mod wire;

use std::cell::RefCell;
use std::collections::HashMap;
use wire::{Reader, Writer};

/// The Lua script ruled runs atomically in Redis for each decision.
const SCRIPT: &str = include_str!("../script.lua");

/// A rule's parsed config.
#[derive(Clone, Copy)]
struct Config {
    limit: i64,
    window_us: i64,
}

/// What lives in the instance between calls: the buffer ruled writes
/// requests into, the last answer, and the configs ruled has accepted.
#[derive(Default)]
struct Guest {
    input: Vec<u8>,
    output: Vec<u8>,
    configs: HashMap<u64, Config>,
}

thread_local! {
    static GUEST: RefCell<Guest> = RefCell::new(Guest::default());
}

/// Marks the module as speaking ABI v1; never called.
#[no_mangle]
pub extern "C" fn ruled_abi_v1() {}

/// The WASI reactor's initialiser: Rust needs none, ruled calls it first.
#[no_mangle]
pub extern "C" fn _initialize() {}

/// Returns a buffer of at least `size` bytes for ruled's next request.
#[no_mangle]
pub extern "C" fn ruled_buf(size: u32) -> u32 {
    GUEST.with(|g| {
        let mut g = g.borrow_mut();
        if g.input.len() < size as usize {
            g.input = vec![0; size as usize];
        }
        g.input.as_mut_ptr() as u32
    })
}

/// Runs `f` on the request at (ptr, len), which must be the input buffer,
/// and returns where its answer lies (`ptr << 32 | len`), or 0 on failure.
fn call(ptr: u32, len: u32, f: fn(&mut Guest, &[u8]) -> Option<Vec<u8>>) -> u64 {
    GUEST.with(|g| {
        let mut g = g.borrow_mut();
        if ptr != g.input.as_ptr() as u32 || len as usize > g.input.len() {
            return 0;
        }
        let input = std::mem::take(&mut g.input);
        let answer = f(&mut g, &input[..len as usize]);
        g.input = input;
        match answer {
            Some(out) => {
                g.output = out;
                (g.output.as_ptr() as u64) << 32 | g.output.len() as u64
            }
            None => 0,
        }
    })
}

/// `InitRequest` in, `Info` out.
#[no_mangle]
pub extern "C" fn ruled_init(ptr: u32, len: u32) -> u64 {
    call(ptr, len, |_, req| {
        let mut version = 0;
        let mut r = Reader::new(req);
        while let Some((field, v)) = r.next()? {
            if field == 1 {
                version = v.uint()?;
            }
        }
        if version != 1 {
            return None;
        }
        let mut script = Writer::new();
        script.string(1, "decide");
        script.string(2, SCRIPT);
        for c in ["HMGET", "HSET", "PEXPIRE"] {
            script.string(3, c);
        }
        for r in ["allowed", "granted", "limit", "remaining", "reset_us", "retry_after_us"] {
            script.string(4, r);
        }
        let mut info = Writer::new();
        info.string(1, "__NAME__");
        info.string(2, "0.1.0");
        info.message(3, &script);
        info.boolean(5, true); // decides in steps
        Some(info.into_bytes())
    })
}

/// `ConfigureRequest` in, `ConfigureResponse` out: the config's problems,
/// each prefixed with its key so that ruled reports it at that key, or for
/// a valid config its template: the step every request starts with, with
/// the request's hits left to ruled, which then starts decisions without
/// calling `ruled_step` (docs/abi.md, "Templates").
#[no_mangle]
pub extern "C" fn ruled_configure(ptr: u32, len: u32) -> u64 {
    call(ptr, len, |g, req| {
        let mut id = 0;
        let mut fields = Vec::new();
        let mut r = Reader::new(req);
        while let Some((field, v)) = r.next()? {
            match field {
                1 => id = v.uint()?,
                2 => fields = wire::value_map(v.bytes()?)?,
                _ => {}
            }
        }
        let mut resp = Writer::new();
        match configure(&fields) {
            Ok(c) => {
                resp.message(2, &step(&c, Hits::Field));
                g.configs.insert(id, c);
            }
            Err(errors) => {
                for e in errors {
                    resp.string(1, &e);
                }
            }
        }
        Some(resp.into_bytes())
    })
}

/// Reads and checks a rule's config, with ruled's SDK's messages.
fn configure(fields: &[(String, wire::Value)]) -> Result<Config, Vec<String>> {
    let mut errors = Vec::new();
    let (mut limit, mut window) = (None, None);
    for (key, value) in fields {
        match key.as_str() {
            "limit" => match value.whole_number() {
                Some(n) if n >= 1 => limit = Some(n),
                Some(_) => errors.push("limit: must be at least 1".to_string()),
                None => errors.push(format!("limit: want a whole number, got {}", value)),
            },
            "window" => match value.duration_ns() {
                Some(ns) if ns >= 1_000_000 && ns % 1000 == 0 => window = Some(ns / 1000),
                Some(_) => errors.push("window: must be whole microseconds, at least 1ms".to_string()),
                None => errors.push(format!("window: want a duration such as \"500ms\", \"10s\" or \"1m\", got {}", value)),
            },
            _ => errors.push(format!("{}: unknown field", key)),
        }
    }
    let has = |k: &str| fields.iter().any(|(key, _)| key == k);
    for k in ["limit", "window"] {
        if !has(k) {
            errors.push(format!("{}: required", k));
        }
    }
    match (limit, window) {
        (Some(limit), Some(window_us)) if errors.is_empty() => Ok(Config { limit, window_us }),
        _ => Err(errors),
    }
}

/// `StepRequest` in, `StepResponse` out: run the script on the subject's
/// key; its reply is the decision.
#[no_mangle]
pub extern "C" fn ruled_step(ptr: u32, len: u32) -> u64 {
    call(ptr, len, |g, req| {
        let (mut id, mut hits, mut resume) = (0, 0, false);
        let mut r = Reader::new(req);
        while let Some((field, v)) = r.next()? {
            match field {
                1 => id = v.uint()?,
                3 => hits = v.sint()?,
                7 => resume = v.uint()? != 0,
                _ => {}
            }
        }
        let mut resp = Writer::new();
        match g.configs.get(&id) {
            Some(c) if !resume => resp = step(c, Hits::Value(hits)),
            Some(_) => resp.string(2, "__NAME__: one step decides; nothing to resume"),
            None => resp.string(2, &format!("__NAME__: no config {}", id)),
        }
        Some(resp.into_bytes())
    })
}

/// A step's hits argument: the request's, or in a template the field that
/// stands for it.
enum Hits {
    Value(i64),
    Field,
}

/// The `StepResponse` that runs the script on the subject's key, its reply
/// the decision: `ruled_step`'s answer, and with `Hits::Field` the config's
/// template.
fn step(c: &Config, hits: Hits) -> Writer {
    let mut eval = Writer::new();
    eval.string(1, "decide");
    eval.string(2, "n"); // the subject's key, in the plugin's and the rule's namespace
    for arg in [c.limit, c.window_us] {
        let mut value = Writer::new();
        value.sint(2, arg);
        eval.message(3, &value);
    }
    let mut value = Writer::new();
    match hits {
        Hits::Value(n) => value.sint(2, n),
        Hits::Field => value.uint(11, 1), // request_field: REQUEST_FIELD_HITS
    }
    eval.message(3, &value);
    let mut resp = Writer::new();
    resp.message(4, &eval);
    resp.boolean(5, true); // the reply is the decision
    resp.sint(6, c.window_us);
    resp
}

/// `DecideRequest` in, `DecideResponse` out. ruled asks a module that
/// decides in steps through `ruled_step` only; this export exists because
/// ABI v1 requires it.
#[no_mangle]
pub extern "C" fn ruled_decide(ptr: u32, len: u32) -> u64 {
    call(ptr, len, |_, _| {
        let mut resp = Writer::new();
        resp.string(2, "__NAME__ decides in steps (ruled_step)");
        Some(resp.into_bytes())
    })
}
