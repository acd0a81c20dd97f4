#!/usr/bin/env bash
# Build the operator image on a machine without a Docker daemon or a public image registry, in
# the layout of deploy/Dockerfile's final stage: the binary at /noderotation, user 65532,
# ENTRYPOINT ["/noderotation"], CMD ["run"], on a distroless-style Debian root (libc, libgcc,
# CA certificates; no shell, no package manager) made by mmdebstrap. Built with podman (vfs
# storage, runc, cgroupfs: what works on this machine kind; crun fails on hybrid cgroups).
#
#   eval "$(tests/image/build.sh [BINARY])"   # default target/release/noderotation
#   $NODEROTATION_PODMAN run --rm --read-only "$NODEROTATION_IMAGE" --version
#
# Installs podman, mmdebstrap and runc from Debian when they are missing (needs root). Prints
# shell exports only (logs go to stderr): NODEROTATION_IMAGE, NODEROTATION_PODMAN (the podman
# command line with this script's storage and configuration), CONTAINERS_CONF, and
# NODEROTATION_IMAGE_SIZE (bytes).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
BIN=$(realpath "${1:-$REPO/target/release/noderotation}")
[ -x "$BIN" ] || { echo "build.sh: no binary at $BIN (cargo build --release --locked)" >&2; exit 1; }
WORK="${NODEROTATION_IMAGE_WORK:-${XDG_CACHE_HOME:-$HOME/.cache}/noderotation/image}"
IMAGE=localhost/noderotation:ci
t0=$(date +%s)

missing=()
for tool in podman:podman mmdebstrap:mmdebstrap runc:runc newuidmap:uidmap; do
  command -v "${tool%%:*}" >/dev/null 2>&1 || missing+=("${tool#*:}")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "build.sh: installing ${missing[*]} from Debian" >&2
  [ "$(id -u)" = 0 ] || { echo "build.sh: needs root to install ${missing[*]}" >&2; exit 1; }
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi

mkdir -p "$WORK/context"
cat > "$WORK/containers.conf" <<'CONF'
[containers]
default_ulimits = []
[engine]
cgroup_manager = "cgroupfs"
runtime = "runc"
events_logger = "file"
CONF
export CONTAINERS_CONF="$WORK/containers.conf"
PODMAN="podman --root $WORK/storage --runroot $WORK/run --storage-driver vfs"

# The root: the packages a glibc binary with rustls needs, nothing else.
ROOTFS="$WORK/context/rootfs.tar"
if [ ! -s "$ROOTFS" ]; then
  echo "build.sh: mmdebstrap the root" >&2
  mmdebstrap --quiet --variant=extract --include=libc6,libgcc-s1,ca-certificates --mode=unshare \
    bookworm "$ROOTFS.tmp" >&2
  mv "$ROOTFS.tmp" "$ROOTFS"
fi
cp "$BIN" "$WORK/context/noderotation"
# The final stage of deploy/Dockerfile, with this machine's root instead of distroless.
cat > "$WORK/context/Containerfile" <<'FILE'
FROM scratch
ADD rootfs.tar /
COPY noderotation /noderotation
USER 65532:65532
EXPOSE 8080 8081
ENTRYPOINT ["/noderotation"]
CMD ["run"]
FILE
$PODMAN build --quiet --tag "$IMAGE" --file "$WORK/context/Containerfile" "$WORK/context" >&2
SIZE=$($PODMAN image inspect --format '{{.Size}}' "$IMAGE")
echo "build.sh: $IMAGE, $((SIZE / 1000000)) MB, in $(( $(date +%s) - t0 ))s" >&2
cat <<OUT
export NODEROTATION_IMAGE='$IMAGE'
export NODEROTATION_PODMAN='$PODMAN'
export CONTAINERS_CONF='$CONTAINERS_CONF'
export NODEROTATION_IMAGE_SIZE='$SIZE'
OUT
