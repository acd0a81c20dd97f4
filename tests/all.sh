#!/usr/bin/env bash
# The whole test suite, as CI runs it (.ci/run calls exactly this). Starts from a clean clone:
# anything the tests need is installed or built here.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
step() { printf '\n== %s (%ss)\n' "$1" "$(( $(date +%s) - start ))"; }

step "format"
cargo fmt --check

step "lint"
cargo clippy --all-targets --locked -- -D warnings

step "generated files are fresh"
cargo run --quiet --locked -- docs --check

step "tests"
cargo test --locked

step "done"
