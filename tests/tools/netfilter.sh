#!/usr/bin/env bash
# Makes sure nft and iptables are installed: the tests that run in a network
# namespace of their own (internal/netns) install nftables and iptables
# rules in it, as kube-proxy does. Idempotent, and quick when both are
# there. As root on a Debian-like machine it installs them with apt-get
# (Debian's nftables and iptables packages); otherwise it says what to
# install and carries on: without root the namespace tests skip anyway.
set -euo pipefail

missing=()
command -v nft >/dev/null 2>&1 || missing+=(nftables)
command -v iptables >/dev/null 2>&1 || missing+=(iptables)
if [[ ${#missing[@]} -eq 0 ]]; then
  exit 0
fi

if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
  echo "==> installing ${missing[*]} (apt-get install -y ${missing[*]}): the network-namespace tests install nftables and iptables rules"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  for cmd in nft iptables; do
    command -v "$cmd" >/dev/null 2>&1 || { echo "tests/tools/netfilter.sh: $cmd still missing after apt-get install" >&2; exit 1; }
  done
  exit 0
fi

cat >&2 <<MSG
tests/tools/netfilter.sh: ${missing[*]} missing. The network-namespace tests
(internal/netns) need root and the nft and iptables commands; without root they
skip. To run them, install the packages, then run make again as root:
    sudo apt-get update && sudo apt-get install -y ${missing[*]}
MSG
exit 0
