#!/usr/bin/env bash
# Installs what redisync's demo and tests need on a fresh machine: a Rust toolchain is assumed
# (cargo); redis-server, openssl and libfaketime are installed from the distribution's packages
# when missing, and the other servers the tests run on (scripts/servers.sh) into a cache.
set -euo pipefail

if ! command -v cargo >/dev/null 2>&1; then
    echo "cargo was not found: install Rust (https://rustup.rs) first." >&2
    exit 1
fi

missing=""
command -v redis-server >/dev/null 2>&1 || missing="redis-server redis-sentinel redis-tools"
command -v openssl >/dev/null 2>&1 || missing="$missing openssl"   # the TLS test makes certificates
# The clock-jump tests (F8) preload libfaketime into redis-server; where the harness looks for it.
have_libfaketime() {
    for library in /usr/lib/faketime/libfaketime.so.1 /usr/lib/*/faketime/libfaketime.so.1 \
        /usr/lib64/faketime/libfaketime.so.1 /usr/local/lib/faketime/libfaketime.so.1; do
        [ -f "$library" ] && return 0
    done
    return 1
}
have_libfaketime || missing="$missing faketime libfaketime"
if [ -n "$missing" ]; then
    echo "installing with apt-get: $missing" >&2
    if [ "$(id -u)" -eq 0 ]; then sudo=""; else sudo="sudo"; fi
    if command -v apt-get >/dev/null 2>&1; then
        $sudo apt-get update -qq
        # shellcheck disable=SC2086
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq $missing >/dev/null
        # The package starts a system service on 6379; the tests and demo run their own servers.
        if command -v systemctl >/dev/null 2>&1; then $sudo systemctl stop redis-server >/dev/null 2>&1 || true; fi
    else
        echo "no apt-get here: install $missing with your package manager." >&2
        exit 1
    fi
fi
redis-server --version
# Redis 8.2, Valkey 8.1 and Redis 6.2, for scripts/test-servers.sh; the demo and the README's
# test command run without them.
if ! bash "$(dirname "$0")/servers.sh" >/dev/null; then
    echo "warning: the other servers could not be installed; scripts/test-servers.sh needs them" >&2
fi
