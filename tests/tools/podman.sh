#!/usr/bin/env bash
# Makes sure podman and runc are installed: the end-to-end tests run
# fastover's images with them (tests/e2e/images_test.go), and the real
# nodes' containerd runs its containers with that runc (internal/cluster).
# Idempotent, and quick when both are there. As root on a Debian-like machine it installs
# them with apt-get; otherwise it says what to install and fails.
set -euo pipefail

missing=()
for cmd in podman runc; do
  command -v "$cmd" >/dev/null 2>&1 || missing+=("$cmd")
done
if [[ ${#missing[@]} -eq 0 ]]; then
  exit 0
fi

if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
  echo "==> installing ${missing[*]} (apt-get install -y podman runc): the e2e tests run the images with them"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq podman runc >/dev/null
  for cmd in podman runc; do
    command -v "$cmd" >/dev/null 2>&1 || { echo "tests/tools/podman.sh: $cmd still missing after apt-get install" >&2; exit 1; }
  done
  exit 0
fi

cat >&2 <<MSG
tests/tools/podman.sh: ${missing[*]} missing. The end-to-end tests run fastover's
container images with podman and the runc runtime. Install them, then run make again:
    sudo apt-get update && sudo apt-get install -y podman runc
(on Debian/Ubuntu; elsewhere install podman >= 4 and runc with your package manager).
MSG
exit 1
