# Tandem's entry points. `sudo make demo` and `sudo make test` are the two commands the README promises
# work on a fresh Debian 12 machine with Go installed.

GO       ?= go
BIN      ?= bin
E2E_FLAGS ?= -count=1 -p 1 -timeout 40m
# Which containerd builds the e2e tier runs against: Debian's 1.6 and a v2.4.2 built once and cached.
TANDEM_E2E_FLAVORS ?= 1.6 2
export TANDEM_E2E_FLAVORS

.PHONY: all build test unit lint e2e bench bench-unit demo deps generate clean

all: build

## build: compile every binary into ./bin
build:
	$(GO) build -o $(BIN)/ ./cmd/...

## deps: install the Debian packages and Go modules the tests need (root)
deps:
	bash hack/install-deps.sh

## test: everything CI runs: lint, unit tests with the race detector, e2e against real containerd
test: lint unit e2e

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags e2e ./e2e/...

unit:
	$(GO) test -race -count=1 ./...

## e2e: tier 1, real containerd + runc driven through tandem-proxy with k8s.io/cri-client (root)
e2e:
	$(GO) test -tags e2e $(E2E_FLAGS) -v ./e2e/

## bench: Go benchmarks, then the latency/idle-cost comparison against real containerd (root)
# Each figure-printing script exits non-zero when it misses a target; "-" lets the others still run.
bench: bench-unit
	-$(GO) run ./bench/crilatency
	-$(GO) run ./bench/hooklatency
	-$(GO) run ./bench/cpuset
	-$(GO) run ./bench/extender

bench-unit:
	$(GO) test -run '^$$' -bench . -benchmem ./proxy/... ./hooks/... ./resource/... ./scheduler-extender/...

## demo: start a private containerd, put tandem-proxy in front of it, run a sample pod through it (root)
demo:
	$(GO) run ./e2e/demo

## generate: regenerate the Koordinator-compatible hook protocol code (hooks/remote/v1alpha1)
generate:
	bash hack/generate.sh

clean:
	rm -rf $(BIN)
