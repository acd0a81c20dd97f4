#!/usr/bin/env bash
# The SBOM of the operator image, made as the release makes it (syft, SPDX JSON), and checked:
# the binary is built with `cargo auditable`, so syft must find the crates it was built from,
# each with the version Cargo.lock pins.
#
#   tests/image/sbom.sh SYFT OUT.spdx.json    # after eval "$(tests/image/build.sh)"
#
# Prints the number of crates found; fails naming a crate that is missing.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
SYFT=${1:?usage: sbom.sh SYFT OUT.spdx.json}
OUT=${2:?usage: sbom.sh SYFT OUT.spdx.json}
: "${NODEROTATION_PODMAN:?run eval \"\$(tests/image/build.sh)\" first}" "${NODEROTATION_IMAGE:?}"
archive=$(mktemp --suffix=.tar)
trap 'rm -f "$archive"' EXIT
rm -f "$archive"
$NODEROTATION_PODMAN save --format oci-archive -o "$archive" "$NODEROTATION_IMAGE" >&2
SYFT_CHECK_FOR_APP_UPDATE=false "$SYFT" scan "oci-archive:$archive" -o "spdx-json=$OUT" -q
# No crate at all (a binary built without cargo auditable) is a finding, not a grep failure.
crates=$({ grep -o '"pkg:cargo/[^"]*"' "$OUT" || true; } | sort -u)
count=$(grep -c . <<<"$crates" || true)
# Crates the operator cannot run without, at the versions Cargo.lock pins.
for name in kube k8s-openapi serde_norway tokio rustls clap prometheus; do
  version=$(awk -v n="$name" '$0 == "name = \"" n "\"" {getline; gsub(/version = |"/, ""); print; exit}' "$REPO/Cargo.lock")
  grep -qx "\"pkg:cargo/$name@$version\"" <<<"$crates" ||
    { echo "sbom.sh: $OUT has no pkg:cargo/$name@$version ($count crates found)" >&2; exit 1; }
done
[ "$count" -ge 100 ] || { echo "sbom.sh: only $count crates in $OUT" >&2; exit 1; }
echo "$count"
