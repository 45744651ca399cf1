#!/usr/bin/env bash
# Counts the instructions redis-server runs per uncontended cycle of one primitive, under
# callgrind: a measure that does not move with the machine's load, where time per call does
# (docs/benchmarks/README.md, "What Redis runs per call, counted").
#
#   bash scripts/redis-instructions.sh lock [lock fair read write semaphore expirable ...]
#
# `floor` and `scripted-floor` count the benchmark's floor, and the floor with its take in a
# script, for scale: the least an acquire can cost Redis when every state change is a script
# (BENCHMARKS.md, "What the guarantees cost").
#
# For each primitive it runs the `cycles` example (32 tasks, each on a primitive of its own)
# against a redis-server under callgrind twice, with 10 and 40 cycles per task, each time
# after one warm-up cycle that loads the scripts and a zeroing of the counters, and prints the
# difference of the two totals per cycle. Needs valgrind (callgrind, callgrind_control).
#
# CYCLES=<path> measures another build's `cycles` (say, the example built in a worktree of an
# older commit) instead of building this checkout's: before and after a change, in turns.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null 2>&1 || { echo "valgrind is needed: apt-get install -y valgrind" >&2; exit 1; }
bash scripts/setup.sh >/dev/null
if [ -z "${CYCLES:-}" ]; then
    cargo build --release -q -p redisync-bench --example cycles
fi
cycles=${CYCLES:-target/release/examples/cycles}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tasks=32

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Prints the instructions redis-server ran for `$2` cycles per task of primitive `$1`.
count() {
    local what=$1 n=$2 port out pid
    port=$(free_port)
    out="$work/$what-$n.out"
    valgrind --tool=callgrind --callgrind-out-file="$out" \
        redis-server --port "$port" --save '' --appendonly no >"$work/$what-$n.log" 2>&1 &
    pid=$!
    for _ in $(seq 100); do
        redis-cli -p "$port" ping >/dev/null 2>&1 && break
        sleep 0.1
    done
    "$cycles" "redis://127.0.0.1:$port" "$what" 1 "$tasks" warm-up >/dev/null
    callgrind_control -z "$pid" >/dev/null 2>&1
    "$cycles" "redis://127.0.0.1:$port" "$what" "$n" "$tasks" counted >/dev/null
    redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
    wait "$pid" || true
    awk '/^(summary|totals):/ { print $2; exit }' "$out"
}

for what in "${@:-lock}"; do
    few=$(count "$what" 10)
    many=$(count "$what" 40)
    echo "$what: $(( (many - few) / (30 * tasks) )) instructions in redis-server per cycle"
done
