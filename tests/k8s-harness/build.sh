#!/usr/bin/env bash
# Build the apiserver-tier binaries (kube-apiserver, etcd, kubectl, up) from the Go modules
# pinned in go.mod/go.sum, and `go install` Helm, actionlint and syft at their tags (linked by
# their names). Idempotent:
# skips binaries whose inputs did not change.
#
#   build.sh               the apiserver tier
#   build.sh --full-stack  also kube-scheduler, kube-controller-manager (same k8s module), and
#                          `go install` of Karpenter's KWOK provider and of KWOK at their tags
#   build.sh --sbom        also `go install` syft (the image's SBOM; a large module: tests/all.sh
#                          builds it in the background beside the apiserver tier)
#
# Output dir: ${NODEROTATION_BIN_CACHE:-<repo>/tests/.bin}/k8s-<version>-<hash of go.sum>/
# Karpenter and KWOK (both binaries are named `kwok`) go to sibling dirs keyed by their version,
# karpenter-kwok-<v>/ and kwok-<v>/, and are linked into the output dir as `karpenter` and `kwok`.
# Prints the output dir as the only line on stdout (logs go to stderr), so:
#   BIN=$(tests/k8s-harness/build.sh [--full-stack])
set -euo pipefail

FULL=0
SBOM=0
for a in "$@"; do
  case "$a" in
    --full-stack) FULL=1 ;;
    --sbom) SBOM=1 ;;
    *) echo "build.sh: unknown argument $a (usage: build.sh [--full-stack] [--sbom])" >&2; exit 2 ;;
  esac
done
KARPENTER_VERSION=v1.14.1   # sigs.k8s.io/karpenter, its kwok/ main package
KWOK_VERSION=v0.8.0         # sigs.k8s.io/kwok/cmd/kwok
HELM_VERSION=v3.22.0        # helm.sh/helm/v3/cmd/helm: installs the chart in the apiserver tier
PROMETHEUS_OPERATOR_VERSION=v0.85.0  # its ServiceMonitor/PrometheusRule CRDs, for the chart's dry runs
ACTIONLINT_VERSION=v1.7.12  # github.com/rhysd/actionlint/cmd/actionlint: lints .github/workflows
SYFT_VERSION=v1.57.2        # github.com/anchore/syft/cmd/syft: the image's SBOM, as the release makes it

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
  [kube-scheduler]=k8s.io/kubernetes/cmd/kube-scheduler
  [kube-controller-manager]=k8s.io/kubernetes/cmd/kube-controller-manager
)
BINS=(kube-apiserver etcd kubectl up)
[ "$FULL" = 1 ] && BINS+=(kube-scheduler kube-controller-manager)
stamp() {
  { go env GOVERSION; cat go.mod go.sum; echo "${BUILDFLAGS[*]} $CGO_ENABLED";
    if [ -d "cmd/$1" ]; then cat "cmd/$1"/*.go; fi; } | sha256sum | cut -c1-16
}

start=$(date +%s)
todo=()
for b in "${BINS[@]}"; do
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
(cd / && GOFLAGS= $NICE go mod download sigs.k8s.io/karpenter@$KARPENTER_VERSION)

# Full stack: Karpenter's KWOK provider and KWOK, each `go install`ed at its tag with its own
# go.mod (their k8s library versions differ from ours and from each other). Both binaries are
# named kwok, so each gets its own dir, keyed by version; a stamp (Go version + flags) decides
# whether to reinstall. Run outside any module: go.mod/go.sum here are never touched.
install_at() { # <dir name> <package@version> [<binary name>, default kwok]
  local dir="${NODEROTATION_BIN_CACHE:-$REPO/tests/.bin}/$1" want
  want=$(printf '%s\n' "$(go env GOVERSION)" "$2" "-trimpath $CGO_ENABLED" | sha256sum | cut -c1-16)
  if [ -x "$dir/${3:-kwok}" ] && [ "$(cat "$dir/.stamp" 2>/dev/null)" = "$want" ]; then
    return 0
  fi
  echo "build.sh: go install $2 into $dir" >&2
  mkdir -p "$dir"
  (cd / && GOFLAGS= GOBIN="$dir" $NICE go install -trimpath "$2")
  echo "$want" > "$dir/.stamp"
}
# Helm, for `helm lint`/`helm template` and installing the chart into the apiserver tier.
install_at "helm-$HELM_VERSION" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" helm
ln -sfn "../helm-$HELM_VERSION/helm" "$OUT/helm"
# The release workflow's own tools, so CI checks what a tag would run: actionlint on every
# workflow (33 s cold, measured), and with --sbom syft for the SBOM of the image built here (a
# large module: 20 min cold measured beside other builds on 2 cores).
install_at "actionlint-$ACTIONLINT_VERSION" "github.com/rhysd/actionlint/cmd/actionlint@$ACTIONLINT_VERSION" actionlint
ln -sfn "../actionlint-$ACTIONLINT_VERSION/actionlint" "$OUT/actionlint"
if [ "$SBOM" = 1 ]; then
  install_at "syft-$SYFT_VERSION" "github.com/anchore/syft/cmd/syft@$SYFT_VERSION" syft
  ln -sfn "../syft-$SYFT_VERSION/syft" "$OUT/syft"
fi
# The monitoring CRDs the chart's optional ServiceMonitor and PrometheusRule need, read from the
# module cache at run time (never copied into the repo), linked as prometheus-operator-crd/.
PROM_MOD=github.com/prometheus-operator/prometheus-operator@$PROMETHEUS_OPERATOR_VERSION
(cd / && GOFLAGS= $NICE go mod download "$PROM_MOD")
ln -sfn "$(go env GOMODCACHE)/$PROM_MOD/example/prometheus-operator-crd" "$OUT/prometheus-operator-crd"
if [ "$FULL" = 1 ]; then
  install_at "karpenter-kwok-$KARPENTER_VERSION" "sigs.k8s.io/karpenter/kwok@$KARPENTER_VERSION"
  install_at "kwok-$KWOK_VERSION" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
  # `up` finds every binary next to itself.
  ln -sfn "../karpenter-kwok-$KARPENTER_VERSION/kwok" "$OUT/karpenter"
  ln -sfn "../kwok-$KWOK_VERSION/kwok" "$OUT/kwok"
  (cd / && GOFLAGS= $NICE go mod download sigs.k8s.io/kwok@$KWOK_VERSION)   # stages, read at run time
fi

echo "build.sh: done in $(( $(date +%s) - start ))s" >&2
echo "$OUT"
