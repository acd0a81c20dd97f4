#!/usr/bin/env bash
# Regenerate go.mod/go.sum for a Kubernetes version: K=1.35.8 ./pin-k8s.sh
# The staging-module replace lines are generated from the real k8s.io/kubernetes go.mod.
set -euo pipefail
cd "$(dirname "$0")"
K=${K:-1.35.8}; S=0.${K#1.}
NICE="nice -n 19"
[ -f go.mod ] || { go mod init noderotation.io/k8s-harness && go mod edit -go=1.25.0; }
GOMOD=$($NICE go mod download -json "k8s.io/kubernetes@v$K" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
for m in $(awk '$2=="v0.0.0"{print $1}' "$GOMOD"); do go mod edit -replace="$m=$m@v$S"; done
# copy godebug lines of the k8s go.mod
for d in $(awk '$1=="godebug" && $2!="(" {print $2}' "$GOMOD"); do go mod edit -godebug="$d"; done
$NICE go get "k8s.io/kubernetes@v$K" "k8s.io/kubectl@v$S" "k8s.io/component-base@v$S"
$NICE go get -tool "k8s.io/kubernetes/cmd/kube-apiserver@v$K" "k8s.io/kubernetes/cmd/kube-scheduler@v$K" \
  "k8s.io/kubernetes/cmd/kube-controller-manager@v$K"  # explicit @v: without it -tool means @upgrade (latest k8s)
$NICE go mod tidy
