// AssemblyScript calls abort on a failed assertion, an allocation out of range and the like. This
// one (build.mjs passes --use abort=assembly/abort/abort) logs the message at error level, which
// ruled reports with the failed call, and traps: ruled discards the instance and starts another.

@external("ruled_v1", "log")
declare function log(level: i32, msg: usize, len: i32): void;

export function abort(message: string | null, fileName: string | null, line: u32, column: u32): void {
  const text = String.UTF8.encode(`abort: ${message ? message! : ""} at ${fileName ? fileName! : ""}:${line}:${column}`);
  log(8, changetype<usize>(text), text.byteLength);
  unreachable();
}
