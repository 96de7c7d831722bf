#!/usr/bin/env bash
# Runs each argument as a bash command, in order, printing it first, and goes
# on past failures; at the end it lists the commands that failed and exits 1
# if any did. make test, lint and fuzz run their steps through it, so one run
# shows every failure rather than the first.
failed=()
for c in "$@"; do
  echo "$c"
  bash -c "$c" || failed+=("$c")
done
if [ ${#failed[@]} -gt 0 ]; then
  echo
  echo "FAILED: ${#failed[@]} of $# steps:"
  printf '  %s\n' "${failed[@]}"
  exit 1
fi
