#!/usr/bin/env bash
# The whole test suite, as CI runs it (.ci/run calls exactly this). Starts from a clean clone:
# anything the tests need is installed or built here.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
step() { printf '\n== %s (%ss)\n' "$1" "$(( $(date +%s) - start ))"; }

step "format"
cargo fmt --check

# The apiserver tier's Go build (kube-apiserver, etcd, kubectl, Helm, actionlint; below) needs
# nothing from the Rust steps: started now, it downloads its modules while cargo downloads its
# crates, and its compiles (build.sh runs them at nice 19) take the cores the Rust compiles and
# tests leave idle. The binaries are cached outside the clone so that CI runs on the same
# machine reuse them (the Go build cache makes a fresh cache dir cheap as well).
export NODEROTATION_BIN_CACHE="${NODEROTATION_BIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/noderotation/k8s-harness-bin}"
harness_build_out=$(mktemp)
harness_build_log=$(mktemp)
tier_build_start=$(date +%s)
# In a process group of its own, so that a failed step before the wait stops its go commands too.
setsid tests/k8s-harness/build.sh >"$harness_build_out" 2>"$harness_build_log" &
harness_build_pid=$!
trap 'kill -TERM -- -"$harness_build_pid" 2>/dev/null || true' EXIT

step "lint"
cargo clippy --all-targets --locked -- -D warnings

# The API docs, private items included (they are the contributors': most items are pub(crate)),
# build with every intra-doc link resolving (a renamed item breaks the build here, not a
# reader's click); after clippy, so only this crate is documented anew (~10 s).
step "rustdoc: intra-doc links"
RUSTDOCFLAGS="-D rustdoc::broken_intra_doc_links" cargo doc --no-deps --document-private-items --locked --quiet

step "generated files are fresh"
cargo run --quiet --locked -- docs --check

step "tests"
cargo test --locked

# Row mutation: every rule row's guard negated in a rules copy must be rejected by the
# checker or fail a scenario; prints killed/total. It silences panics, so it runs on one thread.
step "rule mutation"
cargo test --locked --test reconcile -- --ignored --test-threads=1 --nocapture every_rule_guard_matters

# The apiserver tier: a real kube-apiserver + etcd built from Go modules (tests/k8s-harness,
# started after the format check), then the Rust tests that need it.
step "apiserver tier: build (started beside the Rust steps)"
tier_wait_start=$(date +%s)
wait "$harness_build_pid" || { cat "$harness_build_log" >&2; echo "apiserver tier build failed" >&2; exit 1; }
trap - EXIT
harness_bin=$(cat "$harness_build_out")
tail -n 3 "$harness_build_log"
rm -f "$harness_build_out" "$harness_build_log"
tier_build=$(( $(date +%s) - tier_build_start ))
echo "apiserver tier build: done ${tier_build}s after it started (beside the Rust steps), $(( $(date +%s) - tier_wait_start ))s waited for here"
# syft (the image's SBOM) is a large Go build: it runs beside the image build and the apiserver
# tier's tests, after the build above so that the two never install the same tool at once.
sbom_build_log=$(mktemp)
(nice -n 5 tests/k8s-harness/build.sh --sbom >/dev/null 2>"$sbom_build_log") &
sbom_build_pid=$!

# The release workflow (.github/workflows/release.yml) and the rules-diff one: actionlint, which
# also runs shellcheck over their run: scripts. tests/deploy.rs checks the release build against
# deploy/Dockerfile.
step "workflows: actionlint"
if ! command -v shellcheck >/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends shellcheck >&2 ||
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends shellcheck; } >&2
fi
"$harness_bin/actionlint" -no-color -oneline .github/workflows/*.yml

# The operator image, in the layout of deploy/Dockerfile's final stage, built with podman from the
# release binary (no Docker daemon or public registry here); the apiserver tier runs it in-cluster
# under the ServiceAccount an install creates.
step "image"
image_start=$(date +%s)
# Built as deploy/Dockerfile builds it: cargo auditable embeds the dependency list, so the SBOM
# names every crate (the same version as the Dockerfile; tests/deploy.rs checks both).
CARGO_AUDITABLE_VERSION=0.7.7
# (cargo-auditable has no --version of its own: cargo's record of installed crates tells.)
if ! grep -qs "^\"cargo-auditable $CARGO_AUDITABLE_VERSION " "${CARGO_HOME:-$HOME/.cargo}/.crates.toml"; then
  cargo install --locked --quiet "cargo-auditable@$CARGO_AUDITABLE_VERSION"
fi
cargo auditable build --release --locked --quiet
eval "$(tests/image/build.sh)"
$NODEROTATION_PODMAN run --rm --read-only --user 65532 "$NODEROTATION_IMAGE" --version
export NODEROTATION_IMAGE_REQUIRED=1
echo "image: $((NODEROTATION_IMAGE_SIZE / 1000000)) MB, built in $(( $(date +%s) - image_start ))s (release build included)"

step "apiserver tier: tests"
tier_run_start=$(date +%s)
eval "$(tests/k8s-harness/start.sh --karpenter-crds)"
trap 'tests/k8s-harness/stop.sh || true' EXIT
# The full-stack tier's Go build (kube-scheduler, kube-controller-manager, Karpenter, KWOK) needs
# no cluster: it runs beside these tests, which mostly wait on the apiserver (started after
# start.sh, whose own build.sh call it would race).
if [ "${NODEROTATION_FULL_STACK:-1}" != 0 ]; then
  fs_build_start=$(date +%s)
  fs_build_log=$(mktemp)
  (tests/k8s-harness/build.sh --full-stack >/dev/null 2>"$fs_build_log" &&
   echo $(( $(date +%s) - fs_build_start )) >"$fs_build_log.seconds") &
  fs_build_pid=$!
fi
cargo test --locked --test apiserver
# helm install + a rotation in the image under the chart's RBAC + helm uninstall through its
# pre-delete hook: uninstall cleans the whole cluster, so it runs alone, last.
cargo test --locked --test apiserver -- --ignored --test-threads=1
tests/k8s-harness/stop.sh
trap - EXIT
tier_run=$(( $(date +%s) - tier_run_start ))
echo "apiserver tier: build done ${tier_build}s after it started, start + tests + stop ${tier_run}s"

step "image: SBOM (syft, built beside the apiserver tier)"
wait "$sbom_build_pid" || { cat "$sbom_build_log" >&2; echo "syft build failed" >&2; exit 1; }
rm -f "$sbom_build_log"
echo "SBOM: $(tests/image/sbom.sh "$harness_bin/syft" target/noderotation.spdx.json) crates in target/noderotation.spdx.json"

# ---- Deterministic simulation ---------------------------------------------------------------
# 300 seeds x 2 virtual weeks of the built-in fleet with every fault on (crashes, leader changes,
# conflicts, transient errors, cache lag, lost/late wake-ups, stuck drains, ...), invariants I1-I22
# checked after every step, on the release binary; then short sweeps of the other scenarios
# (operator script, shortage, forceful batch, tight race, the full-stack fleet) for rule coverage. A violation
# prints its seed, the invariant, a trace and the one command that replays it.
sweeps() {
  local sim_start
  sim_start=$(date +%s)
  target/release/noderotation simulate --seeds 300 --weeks 2 --faults
  # never-ready-surges: surge claims that never turn Ready, node repair off (~15 s).
  for run in tight-race:100:0.1 operator-script:50:3 capacity-shortage:30:2 forceful-fallback-batch:30:2 \
    never-ready-surges:100:0.3; do
    IFS=: read -r name seeds weeks <<<"$run"
    target/release/noderotation simulate --seeds "$seeds" --weeks "$weeks" --faults \
      --scenario "deploy/examples/scenarios/$name.yaml"
  done
  # Leader changes between replicas whose clocks disagree, over 12 hours each (~10 s).
  target/release/noderotation simulate --seeds 40 --faults \
    --scenario deploy/examples/scenarios/skewed-clocks.yaml
  # Hand edits while rotations drain: anchors removed, the NodePool replaced without our keys
  # (~60 s).
  target/release/noderotation simulate --seeds 30 --weeks 1 --faults \
    --scenario deploy/examples/scenarios/hand-edits.yaml
  # Drains of 40-60 minutes, 4 rotations at a time, spare old nodes absorbing placeholders
  # (~70 s).
  target/release/noderotation simulate --seeds 10 --faults \
    --scenario deploy/examples/scenarios/long-drain.yaml
  # The full-stack fleet in compressed time (PDB-paced drains, several rotations per pool in
  # flight), over its own 24 minutes (~35 s).
  target/release/noderotation simulate --seeds 200 --faults \
    --scenario deploy/examples/scenarios/fleet-compressed.yaml
  # One slot refused (a placeholder admission rejects, a pod list that times out) beside two
  # healthy ones, over its own 2 hours (invariant I21, ~7 s); nodes with nothing to reserve (~15 s).
  target/release/noderotation simulate --seeds 100 --faults \
    --scenario deploy/examples/scenarios/one-slot-rejected.yaml
  target/release/noderotation simulate --seeds 10 --weeks 2 --faults \
    --scenario deploy/examples/scenarios/nothing-to-reserve.yaml
  # A draining forceful fallback unanchored by hand, then the fallback turned off (I17, ~20 s).
  target/release/noderotation simulate --seeds 20 --faults \
    --scenario deploy/examples/scenarios/forceful-unanchored.yaml
  # Orphans left by hand edits and crashes, placeholders whose create answer is lost (I20, ~45 s).
  target/release/noderotation simulate --seeds 30 --faults \
    --scenario deploy/examples/scenarios/orphans.yaml
  # Leader changes, restarts and forced expiries over a watch lagging 90 s (I11, I17, I20, ~30 s).
  target/release/noderotation simulate --seeds 200 --faults \
    --scenario deploy/examples/scenarios/lagging-takeovers.yaml
  # The figures the docs promise for big pools and `ageThreshold: windows` (docs/big-pools.md):
  # one seed, 8 weeks each, checked on the summary table (~45 s). The condition reads f (forced
  # expiries under noderotation), w (% of replacements inside windows), l (mean lifetime used, %),
  # n (the rotations at once `maxUnavailable: auto` chose). The 240-node pool runs with no hand
  # sizing (`auto`); the invariants (I12: never more in flight than the limit) fail the run.
  promise big-pool-240-auto 'f == "0" && w >= 99 && n != ""'
  promise default-windows-one-chance 'f == "0" && w >= 99 && l >= 80'
  echo "simulation sweeps: $(( $(date +%s) - sim_start ))s"
}
promise() {
  local out
  out=$(target/release/noderotation simulate --scenario "deploy/examples/scenarios/$1.yaml" 2>/dev/null)
  echo "$out"
  awk '/^forced expiries/ {f = $3} /^replacements inside windows/ {w = $4 + 0}
    /^lifetime used/ {l = $6 + 0} /^maxUnavailable auto chose/ {n = $(NF - 1)}
    END {exit !('"$2"')}' <<<"$out" ||
    { echo "simulation: $1 does not keep its promise ($2)" >&2; exit 1; }
}

# ---- Full-stack tier ------------------------------------------------------------------------
# `noderotation run` against the real Karpenter v1.14.1 (KWOK provider), kube-scheduler,
# kube-controller-manager and KWOK, with real Deployments and PDBs: seven scenarios (tests/fullstack.rs),
# figures in docs/validation.md, on two stacks at once (tests/k8s-harness/fullstack.sh: on one, the
# scenarios that run a controller take turns for ~25 min). Scenario 4 waits out Karpenter's forced
# expiry (expireAfter 15m), so the step takes ~16 min with cached binaries, +~6 min when the Go
# build cache is cold (it shares the apiserver tier's k8s build). The scenarios mostly wait on the clock, so the simulation
# sweeps (CPU-bound, ~11 min on 2 idle cores) run beside them at a lower priority; their output
# follows the tier's. NODEROTATION_FULL_STACK=0 skips the tier and runs the sweeps alone
# (tests/k8s-harness/README.md has the measurements).
if [ "${NODEROTATION_FULL_STACK:-1}" != 0 ]; then
  step "full-stack tier: build (started beside the apiserver tier)"
  wait "$fs_build_pid" || { cat "$fs_build_log" >&2; echo "full-stack build failed" >&2; exit 1; }
  NODEROTATION_FULL_STACK_BUILD_SECONDS=$(cat "$fs_build_log.seconds")
  export NODEROTATION_FULL_STACK_BUILD_SECONDS
  rm -f "$fs_build_log" "$fs_build_log.seconds"
  step "full-stack tier: scenarios, simulation sweeps beside them"
  sweep_log=$(mktemp)
  (renice -n 10 "$BASHPID" >/dev/null; sweeps) >"$sweep_log" 2>&1 &
  sweeps_pid=$!
  fs_run_start=$(date +%s)
  trap 'kill "$sweeps_pid" 2>/dev/null || true' EXIT
  # Two stacks, the scenarios split between them (the script says how); it stops both.
  NODEROTATION_FULL_STACK_REQUIRED=1 tests/k8s-harness/fullstack.sh
  echo "full-stack tier: build ${NODEROTATION_FULL_STACK_BUILD_SECONDS}s," \
    "start + scenarios + stop $(( $(date +%s) - fs_run_start ))s"
  step "simulation: seed sweeps with faults (release), run beside the full-stack scenarios"
  sweeps_rc=0
  wait "$sweeps_pid" || sweeps_rc=$?
  trap - EXIT
  cat "$sweep_log"
  rm -f "$sweep_log"
  [ "$sweeps_rc" = 0 ] || { echo "simulation sweeps failed (exit $sweeps_rc)" >&2; exit 1; }
else
  step "full-stack tier: skipped (NODEROTATION_FULL_STACK=0)"
  step "simulation: seed sweeps with faults (release)"
  sweeps
fi

step "done"
