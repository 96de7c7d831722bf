#!/usr/bin/env bash
# Installs what ruled needs on a Debian or Ubuntu machine. Idempotent.
#
#   scripts/deps.sh run     redis-server (the managed store)
#   scripts/deps.sh test    also nginx and caddy (the end-to-end tests of
#                           examples/proxies/nginx and examples/proxies/caddy),
#                           chromium (the headless test of the status page,
#                           host/ui), and node and npm (they build the
#                           AssemblyScript plugin of examples/plugins/assemblyscript),
#                           wrk (bench's tests drive HTTP loads with it), and
#                           cargo, libstd-rust-dev-wasm32 and lld unless a
#                           Rust toolchain with the wasm32-unknown-unknown
#                           target is on PATH (ruled plugin new --lang rust)
#   scripts/deps.sh bench   redis-server and wrk (the load harness)
set -euo pipefail
mode=${1:-test}
need=()
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || need+=(redis-tools)
if [ "$mode" = test ]; then
  # Debian puts nginx in /usr/sbin, which is not on every user's PATH.
  command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || need+=(nginx)
  command -v caddy >/dev/null 2>&1 || need+=(caddy)
  command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || need+=(chromium)
  command -v node >/dev/null 2>&1 || need+=(nodejs)
  command -v npm >/dev/null 2>&1 || need+=(npm)
  # A Rust toolchain that builds wasm32-unknown-unknown modules: the first
  # rustc on PATH (rustup's, say) if it has the target, else Debian's.
  wasm_rust=no
  for rustc in "$(command -v rustc 2>/dev/null || true)" /usr/bin/rustc; do
    if [ -n "$rustc" ] && [ -x "$rustc" ] && [ -x "$(dirname "$rustc")/cargo" ] &&
      [ -d "$("$rustc" --print sysroot 2>/dev/null)/lib/rustlib/wasm32-unknown-unknown" ]; then
      wasm_rust=yes
      break
    fi
  done
  [ "$wasm_rust" = yes ] || need+=(cargo libstd-rust-dev-wasm32 lld)
fi
if [ "$mode" = bench ] || [ "$mode" = test ]; then
  command -v wrk >/dev/null 2>&1 || need+=(wrk)
fi
# The AssemblyScript compiler wants Node.js 20 or later; Debian 12's own nodejs is 18
# (NodeSource's packages have newer ones).
if [ "$mode" = test ] && command -v node >/dev/null 2>&1; then
  major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
  [ "$major" -ge 20 ] || echo "warning: node $(node --version) is older than 20, which examples/plugins/assemblyscript's compiler wants" >&2
fi
[ ${#need[@]} -eq 0 ] && exit 0
if ! command -v apt-get >/dev/null 2>&1; then
  echo "ruled needs ${need[*]}: install them with your package manager (macOS: brew install redis nginx caddy node; brew install --cask chromium)" >&2
  exit 1
fi
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
echo "installing ${need[*]} from the distribution's packages" >&2
$sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
# The packages start a system-wide redis on :6379 and nginx and caddy on :80;
# ruled and its tests need none of them (the tests start their own on loopback
# ports).
if command -v systemctl >/dev/null 2>&1; then
  for unit in redis-server nginx caddy; do
    [[ " ${need[*]} " == *" ${unit} "* ]] && { $sudo systemctl disable --now "$unit" >/dev/null 2>&1 || true; }
  done
fi
exit 0
