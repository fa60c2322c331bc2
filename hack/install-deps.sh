#!/usr/bin/env bash
# Installs what Tandem's build, tests and demo need on Debian 12: containerd and runc for the e2e tier,
# busybox-static for the test image, the CNI plugins for pod networking, etcd for the tier-2 cluster, qemu
# and debootstrap for its VM node, golangci-lint for make lint. Idempotent.
set -euo pipefail

# qemu-system-x86, qemu-utils, debootstrap and openssh-client: the tier-2 VM node (e2e/cluster/vm.go).
pkgs=(containerd runc busybox-static containernetworking-plugins iproute2 etcd-server make git ca-certificates
  qemu-system-x86 qemu-utils debootstrap openssh-client)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  if [ "$(id -u)" -ne 0 ]; then
    echo "install-deps: need root to install: ${missing[*]} (run it as root: make deps)" >&2
    exit 1
  fi
  echo "install-deps: installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if ! command -v go >/dev/null 2>&1; then
  if [ -x /usr/local/go/bin/go ]; then
    export PATH=$PATH:/usr/local/go/bin
  else
    echo "install-deps: Go 1.26 or newer is required (https://go.dev/doc/install)" >&2
    exit 1
  fi
fi
cd "$(dirname "$0")/.."
go mod download

# golangci-lint, at the version .golangci.yml is written for, into Go's bin directory, where the Makefile
# looks. Building it takes minutes, so it is skipped when that version is already there.
golangci_lint_version=2.15.0
gobin=$(go env GOBIN)
gobin=${gobin:-$(go env GOPATH)/bin}
installed=$("$gobin/golangci-lint" version 2>/dev/null || true)
if [[ $installed != *"has version $golangci_lint_version "* ]]; then
  echo "install-deps: installing golangci-lint v$golangci_lint_version into $gobin"
  go install "github.com/golangci/golangci-lint/v2/cmd/golangci-lint@v$golangci_lint_version"
fi
