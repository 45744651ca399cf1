#!/usr/bin/env bash
# Runs the tests that start servers (the integration tests and the CLI's) on each other server
# redisync supports, Redis 8.2 and Valkey 8.1, and the version check on Redis 6.2, which
# redisync refuses. scripts/test.sh runs everything on the distribution's Redis 7.0. Every
# server is tried; the script fails at the end if any failed.
#
#   bash scripts/test-servers.sh                 # every server
#   bash scripts/test-servers.sh valkey-8.1      # one
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_INCREMENTAL=0
bash scripts/setup.sh >/dev/null

supported="redis-8.2 valkey-8.1"
wanted="${*:-$supported redis-6.2}"
failed=""
for name in $wanted; do
    bin="$(bash scripts/servers.sh path "$name")"
    echo "=== $name: $("$bin" --version)"
    export REDIS_SERVER_BIN="$bin"
    case " $supported " in
    *" $name "*)
        # Said here as well as by the test, whose own output cargo keeps unless it fails.
        # A build without TLS stops with this message; one with TLS, on the missing certificate.
        tls_log="$("$bin" --port 0 --save '' --tls-port "$((40000 + RANDOM % 20000))" \
            --tls-cert-file /nonexistent --tls-key-file /nonexistent 2>&1 || true)"
        if grep -q "Failed finding TLS support" <<<"$tls_log"; then
            echo "=== $name: built without TLS, so the TLS test is skipped on it"
        fi
        cargo test --no-fail-fast --all-features -p redisync-test-harness -p redisync-cli --tests ||
            failed="$failed $name"
        ;;
    *)
        # Below the floor: a client refuses it when built.
        cargo test --all-features -p redisync-test-harness --test server_versions ||
            failed="$failed $name"
        cargo test --all-features -p redisync-cli --test cli a_server_below_the_floor ||
            failed="$failed $name"
        ;;
    esac
done
if [ -n "$failed" ]; then
    echo "=== tests failed on:$failed" >&2
    exit 1
fi
echo "=== passed on: $wanted"
