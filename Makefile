# Tandem's entry points. `make demo` and `make test`, run as root, are the two commands the README
# promises work on a fresh Debian 12 machine with Go installed (no sudo needed, none assumed).

# Go may be installed but not on root's PATH: fall back to where the Go tarball installs.
GO       ?= $(shell command -v go 2>/dev/null || echo /usr/local/go/bin/go)
BIN      ?= bin
# Tag of the images `make images` builds; deploy/extender/daemonset.yaml, deploy/webhook/deployment.yaml,
# deploy/descheduler/deployment.yaml and deploy/nri/daemonset.yaml name the same one.
VERSION  ?= v0.1.0
E2E_FLAGS ?= -count=1 -p 1 -timeout 40m
# Build tags of every binary. grpcnotrace leaves out gRPC's golang.org/x/net/trace, which Tandem never
# enables: it links text/template, whose reflective method calls make the linker keep every exported
# method of every type in the binary. Without it tandem-proxy is 6 MB smaller and holds 3 MiB less RSS
# (docs/performance.md). e2e/framework.BuildTags must say the same (a unit test checks).
GOTAGS   ?= grpcnotrace
# golangci-lint (configured in .golangci.yml), where hack/install-deps.sh installs it: Go's bin directory
# ($GOBIN, else $GOPATH/bin), which need not be on PATH.
GOLANGCI_LINT ?= $(shell d=$$($(GO) env GOBIN); echo $${d:-$$($(GO) env GOPATH)/bin})/golangci-lint
# Which containerd builds the e2e tier runs against: Debian's 1.6 and a v2.4.2 built once and cached.
TANDEM_E2E_FLAVORS ?= 1.6 2
export TANDEM_E2E_FLAVORS

# Where the images' registry would be; `make images` tags them $(IMAGE_REPO)/<binary>:$(VERSION).
IMAGE_REPO ?= ghcr.io/tandemkit
# The binaries shipped as images: the in-cluster ones, and tandem-nri, the node agent as an NRI plugin,
# a DaemonSet (deploy/nri). tandem-proxy, the CRI proxy, is installed on the nodes by tandemctl.
# tandem-scheduler (kube-scheduler with the TandemLoadAware plugin) is built from its own module,
# scheduler-plugin, which carries k8s.io/kubernetes so that Tandem's go.mod does not.
IMAGES     ?= tandem-extender tandem-webhook tandem-descheduler tandem-nri
SCHED_GO    = cd scheduler-plugin && GOWORK=off GOFLAGS=-mod=mod $(GO)

.PHONY: all build images test unit lint e2e bench bench-unit demo deps generate clean

all: build

## build: compile every binary into ./bin, statically (as the images and the e2e tiers build them):
## a tandem-proxy linked against libc maps it too, 1.2 MiB more RSS on every node
build:
	CGO_ENABLED=0 $(GO) build -tags '$(GOTAGS)' -o $(BIN)/ ./cmd/...

## images: OCI image-layout tarballs of the $(IMAGES) binaries in $(BIN)/images/<name>.tar, static
## binaries and no base image; load one with `ctr -n k8s.io images import $(BIN)/images/<name>.tar`
images:
	@mkdir -p $(BIN)/images
	@for i in $(IMAGES); do \
	  echo "== image $(IMAGE_REPO)/$$i:$(VERSION)"; \
	  CGO_ENABLED=0 $(GO) build -tags '$(GOTAGS)' -trimpath -ldflags='-s -w' -o $(BIN)/images/$$i ./cmd/$$i || exit 1; \
	  $(GO) run ./hack/image --binary $(BIN)/images/$$i --name $(IMAGE_REPO)/$$i:$(VERSION) --out $(BIN)/images/$$i.tar || exit 1; \
	done
	@echo "== image $(IMAGE_REPO)/tandem-scheduler:$(VERSION)"
	cd scheduler-plugin && CGO_ENABLED=0 GOWORK=off GOFLAGS=-mod=mod $(GO) build -trimpath -ldflags='-s -w' -o $(abspath $(BIN))/images/tandem-scheduler ./cmd/tandem-scheduler
	$(GO) run ./hack/image --binary $(BIN)/images/tandem-scheduler --name $(IMAGE_REPO)/tandem-scheduler:$(VERSION) --out $(BIN)/images/tandem-scheduler.tar

## deps: install the Debian packages and Go modules the tests need (root)
deps:
	bash hack/install-deps.sh

## test: everything CI runs: lint, unit tests with the race detector, e2e against real containerd (tier 1),
## against a real two-node Kubernetes cluster with Tandem installed as docs/install.md says (tier 2), and
## the cluster-scale check (200 simulated nodes, 1000 pods through tandem-webhook and tandem-extender, then
## tandem-scheduler)
test: deps lint unit e2e e2e-cluster scale-ci

## lint: gofmt, go vet, and golangci-lint over Tandem's module (the e2e tier included) and e2e/cluster's
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags e2e ./e2e/...
	@command -v "$(GOLANGCI_LINT)" >/dev/null || { echo "$(GOLANGCI_LINT) not found: run make deps (hack/install-deps.sh)"; exit 1; }
	$(GOLANGCI_LINT) run ./...
	cd e2e/cluster && GOWORK=off GOFLAGS=-mod=mod $(GOLANGCI_LINT) run --config ../../.golangci.yml ./...
	$(SCHED_GO) vet ./...
	cd scheduler-plugin && GOWORK=off GOFLAGS=-mod=mod $(GOLANGCI_LINT) run --config ../.golangci.yml ./...

unit:
	$(GO) test -race -count=1 ./...
	$(SCHED_GO) test -race -count=1 ./...

## e2e: tier 1, real containerd + runc driven through tandem-proxy with k8s.io/cri-client (root)
e2e:
	$(GO) test -tags e2e $(E2E_FLAGS) -v ./e2e/

# Tier 2: a real two-node Kubernetes cluster whose kubelets run through tandem-proxy. Its code is
# e2e/cluster, a Go module of its own so that Tandem's go.mod never carries k8s.io/kubernetes;
# GOFLAGS=-mod=mod because that module replaces Tandem with ../.., so a module Tandem's go.mod
# gains must not stop it.
CLUSTER_GO         = cd e2e/cluster && GOWORK=off GOFLAGS=-mod=mod $(GO)
TANDEM_CLUSTER_DIR ?= /tmp/tandem-cluster
# Where `make e2e-cluster` runs its own cluster (fixed, so a killed run is cleaned up below).
CLUSTER_E2E_DIR    = /tmp/tandem-cluster-e2e

.PHONY: cluster-up cluster-down e2e-cluster cluster-unit

## cluster-up: start the tier-2 cluster in $(TANDEM_CLUSTER_DIR), print its kubeconfig (root);
## TANDEM_CLUSTER_MODE=nri runs Tandem as the NRI DaemonSet, TANDEM_CLUSTER_CONTAINERD=2 containerd 2,
## TANDEM_CLUSTER_VM=debian (or 2) adds the VM node
cluster-up:
	$(CLUSTER_GO) run ./cmd/cluster up --dir $(TANDEM_CLUSTER_DIR)

## cluster-down: stop it, leaving no process, mount, cgroup or network device behind (root)
cluster-down:
	$(CLUSTER_GO) run ./cmd/cluster down --dir $(TANDEM_CLUSTER_DIR)

cluster-unit:
	$(CLUSTER_GO) vet ./...
	$(CLUSTER_GO) vet -tags e2e ./...
	$(CLUSTER_GO) test -race -count=1 . ./cmd/...

# The runs of tier 2: "1.6", the two host nodes with containerd 1.6 and tandem-proxy; where containerd 2 is
# among the flavors, "nri": containerd 2 with Tandem as the NRI DaemonSet of deploy/nri
# (TANDEM_CLUSTER_MODE=nri). Then the VM node (qemu, Debian 13, cgroup v2, systemd, kubeadm join) beside
# one host node: "vm" with Debian's containerd (1.7) and tandem-proxy installed on the running node,
# "vm-nri" with containerd 2 and the tandem-nri DaemonSet (TANDEM_CLUSTER_VM; docs/e2e-cluster.md). The
# host nodes with containerd 2 and tandem-proxy ("2") are not a default run any more: tier 1 runs the
# proxy against containerd 2, and the VM runs kubelet through the proxy on a third containerd (1.7);
# CLUSTER_RUNS="1.6 2 nri vm vm-nri" runs it too.
CLUSTER_RUNS ?= $(filter-out 2,$(TANDEM_E2E_FLAVORS)) $(if $(filter 2,$(TANDEM_E2E_FLAVORS)),nri) vm $(if $(filter 2,$(TANDEM_E2E_FLAVORS)),vm-nri)

## e2e-cluster: tier 2, a two-node cluster with Tandem installed as docs/install.md says and issue 12's tests, per
## flavor, and on containerd 2 once more with Tandem as an NRI plugin; then a VM node beside a host node (root)
e2e-cluster: cluster-unit
	@# The one-time Kubernetes build (minutes) and VM disk (debootstrap) run here, outside the tests' -timeout.
	$(CLUSTER_GO) run ./cmd/cluster build $(if $(filter vm%,$(CLUSTER_RUNS)),--vm-image)
	@for f in $(CLUSTER_RUNS); do \
	  ctrd=$$f mode= vm= run=.; \
	  case $$f in \
	    nri) ctrd=2 mode=nri ;; \
	    vm) ctrd=1.6 vm=debian run='^(TestVMNode|TestKubeadmSchedulerConfig|TestKubeadmSchedulerPlugin)$$' ;; \
	    vm-nri) ctrd=1.6 vm=2 run='^TestVMNodeNRI$$' ;; \
	  esac; \
	  echo "== e2e-cluster: containerd $$ctrd$${mode:+, Tandem as an NRI plugin}$${vm:+, a VM node with containerd $$vm}"; \
	  ( export TANDEM_CLUSTER_CONTAINERD=$$ctrd TANDEM_CLUSTER_MODE=$$mode TANDEM_CLUSTER_VM=$$vm; $(CLUSTER_GO) test -tags e2e -count=1 -timeout 40m -run "$$run" -v . ); rc=$$?; \
	  ( $(CLUSTER_GO) run ./cmd/cluster down --dir $(CLUSTER_E2E_DIR) ) || rc=1; \
	  [ $$rc -eq 0 ] || exit $$rc; \
	done

## bench: Go benchmarks, then the latency/idle-cost comparison against real containerd (root)
# Each figure-printing script exits non-zero when it misses a target; "-" lets the others still run.
bench: bench-unit
	-$(GO) run -tags '$(GOTAGS)' ./bench/crilatency
	-$(GO) run ./bench/hooklatency
	-$(GO) run ./bench/cpuset
	-$(GO) run ./bench/extender
	-$(GO) run ./bench/admission
	-$(GO) run ./bench/nrilatency

## bench-scale: issue 42's table. kube-scheduler alone against kube-scheduler with tandem-extender,
## tandem-webhook and one simulated agent per node, and against tandem-scheduler (the TandemLoadAware
## plugin) with the same, on 1000 and 5000 kwok nodes: throughput, creation-to-bound latency, CPU and
## memory, as ratios (about 22 minutes; docs/scale.md). SCALE_FLAGS passes flags to
## bench/scale, e.g. "-nodes 1000 -burst 2000".
SCALE_FLAGS ?=
.PHONY: bench-scale scale-ci
bench-scale:
	@# The cached kube-apiserver and kube-scheduler the tier-2 harness builds (minutes, once).
	$(CLUSTER_GO) run ./cmd/cluster build
	$(GO) run ./bench/scale $(SCALE_FLAGS)

## scale-ci: the small version of bench-scale that CI runs: 200 kwok nodes, 1000 pods, with Tandem's extender
## and again with its scheduler plugin; fails
## unless every pod is bound, batch pods sit within the batch capacity their nodes publish, and nothing is
## left behind (a few minutes)
scale-ci:
	$(CLUSTER_GO) run ./cmd/cluster build
	$(GO) run ./bench/scale -ci

## bench-colocation: issue 41's table. First whether the machine itself stalls busy CPUs (hypervisor
## steal); then LS latency and BE throughput, solo and colocated, for plain Kubernetes, Tandem's defaults
## and Tandem without the steal headroom, with each BE antagonist (CPU, memory, cache) against the Go
## LS service and the CPU antagonist against nginx; then an LS disk reader against a BE writer; then a
## node daemon's wakeup delay next to BE (root; about 35 minutes; docs/colocation.md). COLOCATION_FLAGS
## passes flags to every bench/colocation run, e.g. "-duration 5s -rounds 1".
COLOCATION_SETTINGS ?= plain,tandem,tandem-noheadroom
COLOCATION_FLAGS ?= -duration 12s -pod-starts 0
.PHONY: bench-colocation
bench-colocation:
	$(GO) run ./bench/stalls
	@for a in cpu memory cache; do \
	  echo "== bench/colocation: BE antagonist $$a, LS service go"; \
	  $(GO) run ./bench/colocation -settings $(COLOCATION_SETTINGS) -antagonist $$a $(COLOCATION_FLAGS) || exit 1; \
	done
	@echo "== bench/colocation: BE antagonist cpu, LS service nginx"
	$(GO) run ./bench/colocation -settings $(COLOCATION_SETTINGS) -ls nginx $(COLOCATION_FLAGS)
	$(GO) run ./bench/iolimit -duration 15s -rounds 2
	$(GO) run ./bench/wakeup

bench-unit:
	$(GO) test -run '^$$' -bench . -benchmem ./proxy/... ./hooks/... ./resource/... ./scheduler-extender/...

## demo: start a private containerd, put tandem-proxy in front of it, run a sample pod through it (root)
# deps first: on a fresh machine it installs containerd, runc, busybox-static and the Go modules.
demo: deps
	$(GO) run ./e2e/demo

## generate: regenerate the Koordinator-compatible hook protocol code (hooks/remote/v1alpha1)
generate:
	bash hack/generate.sh

clean:
	rm -rf $(BIN)
