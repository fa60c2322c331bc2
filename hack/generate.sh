#!/usr/bin/env bash
# Regenerates the Go code of Tandem's .proto files (`make generate`). The generators are pinned so that
# the committed code changes only when a .proto does: protoc comes from Debian, the Go plugins from the
# Go module proxy, built into a throw-away GOBIN so nothing on the machine's PATH is used or changed.
set -euo pipefail

PROTOC_GEN_GO_VERSION=v1.36.12
PROTOC_GEN_GO_GRPC_VERSION=v1.6.2

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

if ! command -v protoc >/dev/null 2>&1; then
	echo "protoc not found; installing Debian's protobuf-compiler" >&2
	if [ "$(id -u)" -ne 0 ]; then
		echo "run as root, or install protobuf-compiler yourself" >&2
		exit 1
	fi
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq protobuf-compiler >/dev/null
fi

gobin=$(mktemp -d)
trap 'rm -rf "$gobin"' EXIT
# Installed from outside the module so that its go.mod is neither read nor touched.
(
	cd "$gobin"
	GOBIN="$gobin" go install "google.golang.org/protobuf/cmd/protoc-gen-go@${PROTOC_GEN_GO_VERSION}"
	GOBIN="$gobin" go install "google.golang.org/grpc/cmd/protoc-gen-go-grpc@${PROTOC_GEN_GO_GRPC_VERSION}"
)

# The well-known types are not used, so only the proto's own directory is on the include path; the
# paths=source_relative outputs land beside each .proto.
for proto in hooks/remote/v1alpha1/api.proto; do
	dir=$(dirname "$proto")
	PATH="$gobin:$PATH" protoc \
		--proto_path="$dir" \
		--go_out="$dir" --go_opt=paths=source_relative \
		--go-grpc_out="$dir" --go-grpc_opt=paths=source_relative \
		"$(basename "$proto")"
	echo "generated $dir from $proto with $(protoc --version), protoc-gen-go ${PROTOC_GEN_GO_VERSION}, protoc-gen-go-grpc ${PROTOC_GEN_GO_GRPC_VERSION}"
done
