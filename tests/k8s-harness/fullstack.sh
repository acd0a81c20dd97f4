#!/usr/bin/env bash
# The full-stack scenarios (tests/fullstack.rs) on two full stacks at once:
#
#   tests/k8s-harness/fullstack.sh            # builds (cached), starts two stacks, runs, stops
#
# Inside one stack the scenarios that run a controller take turns (every controller watches every
# pool of its cluster), so one stack takes the sum of them, ~25 min. Each half below gets a stack
# of its own: half "a" runs the three longest controller scenarios one after the other (~15 min);
# half "b" runs scenario 4 (no controller: it waits out Karpenter's forced expiry, about
# expireAfter) beside the four shorter ones. Both halves record into one results directory
# (NODEROTATION_FULL_STACK_RUN_ID), so the last scenario to finish writes docs/validation.md with
# all of them. Each half's output is prefixed with its name; the exit status fails if either does.
# The environment passes through (NODEROTATION_FULL_STACK_REQUIRED, the knobs of the README).
set -euo pipefail
cd "$(dirname "$0")/../.."

# Half a, by test-name filter; half b is every other test (the same filters as --skip), so a new
# test always runs in exactly one half.
half_a=(scenario_1_ scenario_3_ fleet::)
skip_a=()
for f in "${half_a[@]}"; do skip_a+=(--skip "$f"); done

export NODEROTATION_FULL_STACK_RUN_ID="${NODEROTATION_FULL_STACK_RUN_ID:-fullstack-$(date -u +%Y%m%dT%H%M%SZ)-$$}"
# Compiled before the stacks start, so that neither half waits on the other's build.
cargo test --locked --test fullstack --no-run

# Each stack is stopped under its own exports, as start.sh's callers do (stop.sh then also
# removes that stack's log).
envs=()
cleanup() {
  for e in "${envs[@]}"; do (eval "$e"; tests/k8s-harness/stop.sh) || true; done
}
trap cleanup EXIT
# One after the other: start.sh runs build.sh, which must not run twice at once.
env_a=$(tests/k8s-harness/start.sh --full-stack)
envs+=("$env_a")
env_b=$(tests/k8s-harness/start.sh --full-stack)
envs+=("$env_b")

run_half() {
  local name=$1 env=$2 threads=$3
  shift 3
  (
    set -o pipefail
    eval "$env"
    cargo test --locked --test fullstack -- --test-threads="$threads" --nocapture "$@" 2>&1 |
      sed -u "s/^/[$name] /"
  )
}
run_half a "$env_a" 4 "${half_a[@]}" &
a=$!
run_half b "$env_b" 6 "${skip_a[@]}" &
b=$!
rc_a=0
rc_b=0
wait "$a" || rc_a=$?
wait "$b" || rc_b=$?
echo "full-stack scenarios: half a exit $rc_a (${half_a[*]}), half b exit $rc_b (the rest)," \
  "results in target/tmp/fullstack/results/$NODEROTATION_FULL_STACK_RUN_ID"
[ "$rc_a" = 0 ] && [ "$rc_b" = 0 ]
