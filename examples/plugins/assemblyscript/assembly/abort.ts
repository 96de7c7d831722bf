// The abort function AssemblyScript calls on a failed assertion, an out-of-range allocation and the
// like. By default it is imported as env.abort, which ruled does not provide; the build aliases it
// to this one (asc --use abort=assembly/abort/abort). It logs the message at error level, which
// becomes the Detail of the host's CallError, and traps: the host discards the instance.
import { LEVEL_ERROR, lineAdd, lineLog, lineStart, lineUint } from "./host";

export function abort(message: string | null, fileName: string | null, lineNumber: u32, columnNumber: u32): void {
  lineStart();
  lineAdd("abort: ");
  lineAdd(message);
  lineAdd(" at ");
  lineAdd(fileName);
  lineAdd(":");
  lineUint(lineNumber);
  lineAdd(":");
  lineUint(columnNumber);
  lineLog(LEVEL_ERROR);
  unreachable();
}
