#!/usr/bin/env bash
# Runs the whole test suite against real redis-server processes the tests start themselves.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cargo test --workspace --all-targets "$@"
cargo test --workspace --doc
