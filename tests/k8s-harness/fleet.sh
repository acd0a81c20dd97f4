#!/usr/bin/env bash
# The fleet run (tests/fullstack/fleet.rs): the fleet of
# deploy/examples/scenarios/fleet-compressed.yaml on the full stack, under noderotation and,
# beside it, under Karpenter alone, for the scenario's span (about 30 minutes with setup).
# Writes its part of docs/validation.md, with the simulator's prediction for the same file.
#
#   tests/k8s-harness/fleet.sh            # the whole run; updates docs/validation.md
#
# The full-stack tier (tests/all.sh) runs the shorter version of the same test: the noderotation
# side only, for NODEROTATION_FLEET_SPAN (default 6m); its figures stay in target/tmp.
#
# Builds the full stack first when it is not cached (see README.md, "Full-stack tier").
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
cargo test --locked --test fullstack --no-run >/dev/null   # compile before the stack starts
eval "$(tests/k8s-harness/start.sh --full-stack)"
trap 'tests/k8s-harness/stop.sh || true' EXIT
NODEROTATION_FLEET=whole NODEROTATION_FULL_STACK_REQUIRED=1 cargo test --locked --test fullstack -- \
  --exact fleet::fleet_run_under_noderotation_and_karpenter_alone --nocapture
