#!/usr/bin/env bash
# Runs the whole test suite against real redis-server processes the tests start themselves.
set -euo pipefail
cd "$(dirname "$0")/.."
# A clean build gains nothing from incremental compilation, which would add gigabytes to it.
export CARGO_INCREMENTAL=0
bash scripts/setup.sh
# Everything, TLS included.
cargo test --workspace --all-features --all-targets "$@"
cargo test --workspace --all-features --doc
# The default build of core (no TLS), and the facade with every primitive switched off.
cargo test -p redisync-core --lib
cargo check -p redisync --no-default-features
# Documentation builds without broken links.
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --all-features --quiet
