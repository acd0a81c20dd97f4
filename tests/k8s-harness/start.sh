#!/usr/bin/env bash
# Start the apiserver-tier control plane (or, with --full-stack, the full stack: + scheduler,
# controller-manager, KWOK, Karpenter) in the background and print shell exports:
#
#   eval "$(tests/k8s-harness/start.sh [--karpenter-crds | --full-stack])"
#   kubectl get ns                     # $HARNESS_BIN/kubectl, KUBECONFIG is exported
#   tests/k8s-harness/stop.sh          # or: kill $HARNESS_PID
#
# Exports KUBECONFIG (admin), NODEROTATION_CONTROLLER_KUBECONFIG (least-privilege user
# "noderotation-controller"), HARNESS_PID, HARNESS_READY_FILE, HARNESS_LOG, HARNESS_BIN.
# Extra arguments are passed to `up` (see `up --help`). Logs go to stderr.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

BUILD_ARGS=()
for a in "$@"; do [ "$a" = "--full-stack" ] && BUILD_ARGS=(--full-stack); done
BIN=$("$HERE/build.sh" "${BUILD_ARGS[@]}")   # no-op (~1s) when the binaries are cached

READY=$(mktemp -u "${TMPDIR:-/tmp}/k8s-harness-ready.XXXXXX")
LOG="$READY.log"
t0=$(date +%s.%N)
# stdin/stdout/stderr detached so `eval "$(...)"` does not wait for `up`
"$BIN/up" --ready-file "$READY" "$@" </dev/null >"$LOG" 2>&1 &
PID=$!

while [ ! -s "$READY" ]; do
  if ! kill -0 "$PID" 2>/dev/null; then
    echo "start.sh: up exited before becoming ready; log:" >&2
    cat "$LOG" >&2
    rm -f "$LOG"
    exit 1
  fi
  sleep 0.2
done
t1=$(date +%s.%N)
START_SECONDS=$(awk "BEGIN{printf \"%.1f\", $t1 - $t0}")
echo "start.sh: control plane ready in ${START_SECONDS}s (pid $PID)" >&2

field() { sed -n "s/.*\"$1\": \"\(.*\)\".*/\1/p" "$READY"; }
KC=$(field kubeconfig)
echo "start.sh: KUBECONFIG=$KC" >&2
cat <<EOF
export KUBECONFIG='$KC'
export NODEROTATION_CONTROLLER_KUBECONFIG='$(field controllerKubeconfig)'
export HARNESS_PID=$PID
export HARNESS_READY_FILE='$READY'
export HARNESS_LOG='$LOG'
export HARNESS_BIN='$BIN'
export HARNESS_START_SECONDS='$START_SECONDS'
export PATH='$BIN':"\$PATH"
EOF
