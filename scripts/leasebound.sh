#!/bin/sh
# Measures what N loadgen processes with client leases admit together
# against one quota of a running ruled, over-demanding it for one window.
#
#   scripts/leasebound.sh URL PATH CLIENTS SECONDS [IP]
#
# It waits for the next minute boundary (fixed windows of 1m start there),
# runs CLIENTS processes of examples/clients/loadgen for SECONDS on the
# request {"ip": IP, "path": PATH}, and prints their total next to each
# process's line. docs/performance.md ("Client leases") has the rule file
# and the figures.
set -eu
url=$1 path=$2 clients=$3 seconds=$4 ip=${5:-198.51.100.$$}
bin=${LOADGEN:-$(mktemp -d)/loadgen}
[ -x "$bin" ] || go build -o "$bin" ./examples/clients/loadgen
now=$(date +%s)
sleep $((60 - now % 60))
out=$(mktemp)
i=0
while [ $i -lt "$clients" ]; do
	"$bin" --url "$url" --rule-request "{\"request\": {\"ip\": \"$ip\", \"path\": \"$path\"}}" \
		--goroutines 4 --duration "${seconds}s" --lease on >>"$out" &
	i=$((i + 1))
done
wait
cat "$out"
awk -F'[:,]' '{for (i = 1; i < NF; i++) if ($i ~ /"allowed"/) a += $(i + 1)} END {print "admitted in total:", a}' "$out"
rm -f "$out"
