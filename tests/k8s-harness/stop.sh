#!/usr/bin/env bash
# Stop a control plane started by start.sh: stop.sh [PID]  (default $HARNESS_PID).
# `up` stops kube-apiserver, then etcd, and removes its temp dir and the ready file.
set -euo pipefail
PID=${1:-${HARNESS_PID:?usage: stop.sh PID (or export HARNESS_PID)}}
if kill -TERM "$PID" 2>/dev/null; then
  for _ in $(seq 1 300); do
    kill -0 "$PID" 2>/dev/null || break
    sleep 0.2
  done
  if kill -0 "$PID" 2>/dev/null; then
    echo "stop.sh: up (pid $PID) still running after 60s, killing" >&2
    kill -KILL "$PID" || true
  fi
fi
[ -n "${HARNESS_LOG:-}" ] && rm -f "$HARNESS_LOG"
echo "stop.sh: stopped $PID" >&2
