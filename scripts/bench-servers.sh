#!/usr/bin/env bash
# Runs the benchmark's headline scenarios (1 uncontended, 2 contended, 3 many locks) on Redis
# 7.0, Redis 8.2 and Valkey 8.1, one server after the other on this machine, and prints the
# figures side by side. The JSON of each run goes to
# docs/benchmarks/servers/ (or $OUT).
#
#   bash scripts/bench-servers.sh               # 3 rounds per server, about 5 minutes each
#   ROUNDS=1 bash scripts/bench-servers.sh      # a quick look
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh >/dev/null
out="${OUT:-docs/benchmarks/servers}"
mkdir -p "$out"
cargo build --release -q -p redisync-bench
for name in redis-7.0 redis-8.2 valkey-8.1; do
    if [ "$name" = redis-7.0 ]; then bin="$(command -v redis-server)"; else bin="$(bash scripts/servers.sh path "$name")"; fi
    echo "=== $name: $("$bin" --version)" >&2
    target/release/redisync-bench --server-bin "$bin" --only 1 --only 2 --only 3 \
        --rounds "${ROUNDS:-3}" --no-charts --json "$out/$name.json" >"$out/$name.md"
done
python3 - "$out" <<'PYTHON'
import json, os, sys
out = sys.argv[1]
runs = [(name, json.load(open(os.path.join(out, name + ".json"))))
        for name in ("redis-7.0", "redis-8.2", "valkey-8.1")]

def figure(run, scenario, contender, name):
    for s in run["scenarios"]:
        if s["id"] != scenario:
            continue
        for r in s["results"]:
            if r["contender"] == contender:
                value = r["figures"].get(name, {}).get("median")
                return value
    return None

rows = [
    ("uncontended lock + unlock p50, µs", "uncontended", "p50 µs", "{:.0f}"),
    ("uncontended p50, × floor", "uncontended", "p50 vs floor", "{:.2f}"),
    ("contended, 4×4 tasks, 1 ms hold: acquisitions/s", "contended", "acquisitions/s", "{:.0f}"),
    ("contended: per-task min/max", "contended", "min/max", "{:.2f}"),
    ("many locks, 64 tasks: cycles/s", "many-locks", "acquisitions/s", "{:.0f}"),
    ("many locks: cycles/s, × floor", "many-locks", "vs floor", "{:.2f}"),
]
contenders = {
    "uncontended": ["floor (raw redis-rs)", "redisync", "rslock 0.10 (defaults)"],
    "contended": ["polling floor (1 ms sleep)", "redisync", "rslock 0.10 (defaults)"],
    "many-locks": ["floor (raw redis-rs)", "redisync", "rslock 0.10 (defaults)"],
}
names = [run[1]["machine"].get("server", run[0]) for run in runs]
print("| figure | contender | " + " | ".join(names) + " |")
print("|---|---|" + "---:|" * len(runs))
for label, scenario, name, fmt in rows:
    for contender in contenders[scenario]:
        values = [figure(run, scenario, contender, name) for _, run in runs]
        if all(v is None for v in values):
            continue
        cells = ["–" if v is None else fmt.format(v) for v in values]
        print(f"| {label} | {contender} | " + " | ".join(cells) + " |")
PYTHON
