#!/usr/bin/env bash
# Installs the benchmark's peers in other languages, at the versions pinned beside their
# drivers in crates/redisync-bench/peers/, into a cache outside the repository:
#
#   node/    redis-semaphore and ioredis (npm ci, from package-lock.json)
#   python/  python-redis-lock and redis-py (pip install --target)
#
# The cache is ~/.cache/redisync/bench-peers, or $REDISYNC_BENCH_PEERS (the benchmark reads
# the same variable). A runtime that is missing is reported and its peer left out: the
# benchmark then shows "–" for it. Only the benchmark needs these; the test suite does not.
#
#   bash scripts/bench-peers.sh
set -uo pipefail
cd "$(dirname "$0")/.."
peers=crates/redisync-bench/peers
cache="${REDISYNC_BENCH_PEERS:-$HOME/.cache/redisync/bench-peers}"
status=0

if command -v node >/dev/null && command -v npm >/dev/null; then
    mkdir -p "$cache/node"
    cp "$peers/node/package.json" "$peers/node/package-lock.json" "$cache/node/"
    if npm ci --prefix "$cache/node" --omit=dev --no-audit --no-fund --loglevel=error; then
        echo "node peer installed in $cache/node (node $(node --version))"
    else
        echo "npm ci failed: redis-semaphore will be skipped" >&2
        status=1
    fi
else
    echo "node or npm not found: redis-semaphore will be skipped" >&2
fi

if command -v python3 >/dev/null && python3 -m pip --version >/dev/null 2>&1; then
    # A fresh directory: pip install --target does not remove what an older pin left.
    rm -rf "$cache/python.new"
    if python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore \
        --target "$cache/python.new" -r "$peers/python/requirements.txt"; then
        rm -rf "$cache/python"
        mv "$cache/python.new" "$cache/python"
        echo "python peer installed in $cache/python ($(python3 --version))"
    else
        rm -rf "$cache/python.new"
        echo "pip install failed: python-redis-lock will be skipped" >&2
        status=1
    fi
else
    echo "python3 or its pip not found: python-redis-lock will be skipped" >&2
fi
exit "$status"
