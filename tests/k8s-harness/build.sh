#!/usr/bin/env bash
# Build the apiserver-tier binaries (kube-apiserver, etcd, kubectl, up) from the Go modules
# pinned in go.mod/go.sum. Idempotent: skips binaries whose inputs did not change.
#
# Output dir: ${NODEROTATION_BIN_CACHE:-<repo>/tests/.bin}/k8s-<version>-<hash of go.sum>/
# Prints that dir as the only line on stdout (logs go to stderr), so:
#   BIN=$(tests/k8s-harness/build.sh)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
cd "$HERE"
export GOWORK=off GOFLAGS="${GOFLAGS:-} -mod=readonly -buildvcs=false" CGO_ENABLED=0
NICE="nice -n 19"   # keep Rust compiles on this shared machine at higher priority

KVER=$(awk '$1=="k8s.io/kubernetes"{print $2; exit}' go.mod)          # e.g. v1.35.8
[ -n "$KVER" ] || { echo "k8s.io/kubernetes not found in go.mod" >&2; exit 1; }
MINOR=$(echo "$KVER" | cut -d. -f2)
SUMHASH=$(sha256sum go.sum | cut -c1-12)
OUT="${NODEROTATION_BIN_CACHE:-$REPO/tests/.bin}/k8s-$KVER-$SUMHASH"
mkdir -p "$OUT"

LDFLAGS="-X k8s.io/component-base/version.gitVersion=$KVER -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$MINOR"
BUILDFLAGS=(-trimpath -pgo=off -ldflags "$LDFLAGS")

# Each binary is rebuilt only when its stamp (go toolchain + go.mod + go.sum + flags + own
# sources) changes; kube-apiserver/kubectl/etcd effectively depend only on the pins.
declare -A PKG=(
  [kube-apiserver]=k8s.io/kubernetes/cmd/kube-apiserver
  [etcd]=./cmd/etcd
  [kubectl]=./cmd/kubectl
  [up]=./cmd/up
)
stamp() {
  { go env GOVERSION; cat go.mod go.sum; echo "${BUILDFLAGS[*]} $CGO_ENABLED";
    if [ -d "cmd/$1" ]; then cat "cmd/$1"/*.go; fi; } | sha256sum | cut -c1-16
}

start=$(date +%s)
todo=()
for b in kube-apiserver etcd kubectl up; do
  if [ -x "$OUT/$b" ] && [ "$(cat "$OUT/.$b.stamp" 2>/dev/null)" = "$(stamp "$b")" ]; then
    continue
  fi
  todo+=("$b")
done

if [ ${#todo[@]} -gt 0 ]; then
  echo "build.sh: building ${todo[*]} ($KVER) into $OUT" >&2
  stage=$(mktemp -d "$OUT/.stage.XXXXXX")
  trap 'rm -rf "$stage"' EXIT
  pkgs=(); for b in "${todo[@]}"; do pkgs+=("${PKG[$b]}"); done
  # one `go build` for all packages so they share compiled dependencies
  $NICE go build "${BUILDFLAGS[@]}" -o "$stage/" "${pkgs[@]}"
  for b in "${todo[@]}"; do
    mv -f "$stage/$b" "$OUT/$b"
    stamp "$b" > "$OUT/.$b.stamp"
  done
else
  echo "build.sh: all binaries up to date in $OUT" >&2
fi

# Karpenter CRDs are read from the module cache at run time (never copied into the repo).
# Run outside this module so go.mod/go.sum are never touched.
(cd / && GOFLAGS= $NICE go mod download sigs.k8s.io/karpenter@v1.14.1)

echo "build.sh: done in $(( $(date +%s) - start ))s" >&2
echo "$OUT"
