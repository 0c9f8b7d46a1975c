#!/usr/bin/env bash
# Starts keybroker as the `--extra` column of the peer benchmark (../shared/bench-peers):
#   ../shared/bench-peers/run-all.sh --extra "keybroker=exec $PWD/bench/peer-extra.sh"
# It reads the BENCH_* variables run-all.sh sets, writes a rule file for the benchmark's
# upstream (placeholder PLACEHOLDER → the real key, toward localhost:<upstream port> only),
# writes the CA path to BENCH_CA_OUT and runs the broker in the foreground.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
state=${BENCH_STATE_DIR:?run this from bench-peers/run-all.sh}
mkdir -p "$state"
home="$state/home"
cat > "$state/keybroker.yaml" <<YAML
version: 1
upstream_ca: ["$BENCH_UPSTREAM_CA"]
catalogue: false
providers:
  bench:
    hosts: ["$BENCH_UPSTREAM_HOST:$BENCH_UPSTREAM_PORT"]
    inject: { header: authorization }
    credentials: ["env:BENCH_REAL_KEY"]
    placeholder: { value: "$BENCH_PLACEHOLDER" }
    allow_private_upstream: true
${KEYBROKER_BENCH_EXTRA_RULES:-}
YAML
node "$root/dist/cli/main.js" ca path --home "$home" > "$BENCH_CA_OUT"
# The node flags `npm start` gives (scripts/node-flags.mjs), unless KEYBROKER_NODE_OPTIONS says.
exec node ${KEYBROKER_NODE_OPTIONS:-$(node "$root/scripts/node-flags.mjs")} "$root/dist/cli/main.js" start --home "$home" --config "$state/keybroker.yaml" --port "$BENCH_PROXY_PORT"
