#!/usr/bin/env bash
# Runs the demo: several workers in two clients share an inventory under one distributed lock.
# `scripts/demo.sh cache` runs the read-write lock demo instead (a read-mostly cache);
# `scripts/demo.sh scheduler` the leader election (one instance runs the job; kill it, another takes over);
# `scripts/demo.sh api_quota` the rate limiter (several services share one API quota).
# Uses $REDIS_URL if set (and then removes the demo's keys, all under `redisync-demo:`, when
# it ends); otherwise starts a throw-away redis-server on a free port.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh >/dev/null

example=${1:-inventory}
# The metrics example needs the (optional) metrics feature; the others build with the defaults.
features=()
[ "$example" = metrics ] && features=(--features metrics)

# Built first, with cargo's progress shown: on a fresh machine this is the long part.
echo "demo: building the '$example' example (the first build takes a few minutes)..." >&2
cargo build --release -p redisync "${features[@]}" --example "$example"

cleanup() { :; }
if [ -z "${REDIS_URL:-}" ]; then
    dir=$(mktemp -d)
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null || echo 63790)
    redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$dir" \
        --daemonize yes --pidfile "$dir/redis.pid" --logfile "$dir/redis.log"
    cleanup() { kill "$(cat "$dir/redis.pid")" 2>/dev/null || true; rm -rf "$dir"; }
    for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.05; done
    export REDIS_URL="redis://127.0.0.1:$port/"
elif command -v redis-cli >/dev/null; then
    # The user's own Redis: leave nothing of the demo behind (fencing counters included).
    cleanup() {
        redis-cli -u "$REDIS_URL" --scan --pattern 'redisync-demo:*' \
            | xargs -r -n 100 redis-cli -u "$REDIS_URL" DEL >/dev/null || true
        echo "demo: removed the demo's keys (redisync-demo:*)" >&2
    }
fi
trap cleanup EXIT
cargo run --quiet --release -p redisync "${features[@]}" --example "$example"
