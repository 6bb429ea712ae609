# sqlkube: two commands for a newcomer.
#   make run   - the server on embedded SQLite (./sqlkube-data/state.db)
#   make test  - every test (PostgreSQL and MySQL tests skip with a line
#                when no server is reachable, except under CI=true)

GO      ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
# The embedded Kubernetes components (the kubelet) report the version of
# k8s.io/kubernetes in go.mod, as its own builds stamp it.
K8S_VERSION := $(shell $(GO) list -m -f '{{.Version}}' k8s.io/kubernetes 2>/dev/null)
K8S_MINOR   := $(word 2,$(subst ., ,$(K8S_VERSION)))
LDFLAGS := -X main.version=$(VERSION) \
	-X k8s.io/component-base/version.gitVersion=$(K8S_VERSION) \
	-X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$(K8S_MINOR)

# containerd is linked into sqlkube (`sqlkube containerd`): the version of
# github.com/containerd/containerd/v2 in go.mod, which it reports as
# containerd's (the node's containerRuntimeVersion, containerd://2.x).
CONTAINERD_MODULE  := github.com/containerd/containerd/v2
CONTAINERD_VERSION := $(shell $(GO) list -m -f '{{.Version}}' $(CONTAINERD_MODULE) 2>/dev/null)
LDFLAGS += -X $(CONTAINERD_MODULE)/version.Version=$(CONTAINERD_VERSION:v%=%)

.PHONY: run build sqlkube runtime node-deps test test-deps test-deps-helm test-deps-kubectl test-deps-prometheus test-ha vet fmt bench bench-compare bench-net bench-shim image conformance test-compose

# build builds bin/sqlkube, and the node's runc shim and runc beside it
# where this machine can build them (runc needs libseccomp's headers):
# the control plane never needs them, so a machine without the headers
# gets sqlkube and one line on what the node needs.
build: sqlkube
	@if [ -e "$(SECCOMP_HEADER)" ]; then $(MAKE) --no-print-directory runtime; \
	 else echo "make: the node's runc is not built: it needs libseccomp's headers (Debian: apt-get install libseccomp-dev, then make runtime); sqlkube runs the control plane without a node"; fi

sqlkube:
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/sqlkube ./cmd/sqlkube

# runtime builds the two programs sqlkube's containerd runs pods with into
# RUNTIME_DIR, beside bin/sqlkube, where a node finds them before PATH:
# containerd's runc shim (containerd-shim-runc-v2) at the containerd
# version in go.mod, static and without cgo, as containerd's Makefile
# builds it; and the runc that containerd release is tested with (its
# script/setup/runc-version; RUNC_VERSION=vX.Y.Z to choose another), with
# seccomp (cgo and libseccomp-dev), as containerd's CI builds it. Both
# with go install from the module proxy, against their own go.mod files.
# A binary whose module version (go version -m) is the wanted one is kept;
# each build takes about a minute on 2 cores with a warm module cache.
RUNTIME_DIR ?= $(CURDIR)/bin
RUNC_VERSION ?=
# SECCOMP_HEADER is libseccomp's header that runc's seccomp build needs.
SECCOMP_HEADER ?= /usr/include/seccomp.h

runtime:
	@set -e; mkdir -p "$(RUNTIME_DIR)"; \
	  cv="$(CONTAINERD_VERSION)"; [ -n "$$cv" ] || { echo "no $(CONTAINERD_MODULE) in go.mod"; exit 1; }; \
	  rv="$(RUNC_VERSION)"; \
	  if [ -z "$$rv" ]; then \
	    dir=$$($(GO) mod download -json $(CONTAINERD_MODULE)@$$cv | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$$/\1/p'); \
	    rv=$$(cat "$$dir/script/setup/runc-version"); \
	  fi; \
	  have() { [ "$$($(GO) version -m "$(RUNTIME_DIR)/$$1" 2>/dev/null | awk '$$1 == "mod" { print $$3 }')" = "$$2" ]; }; \
	  if ! have containerd-shim-runc-v2 $$cv; then \
	    echo "building containerd-shim-runc-v2 $$cv into $(RUNTIME_DIR)"; \
	    (cd / && GOFLAGS= CGO_ENABLED=0 GOBIN="$(RUNTIME_DIR)" $(GO) install -tags "urfave_cli_no_docs no_grpc" \
	      -ldflags "-X $(CONTAINERD_MODULE)/version.Version=$${cv#v}" $(CONTAINERD_MODULE)/cmd/containerd-shim-runc-v2@$$cv); \
	  fi; \
	  if ! have runc $$rv; then \
	    echo "building runc $$rv into $(RUNTIME_DIR)"; \
	    [ -e "$(SECCOMP_HEADER)" ] || { echo "runc needs libseccomp's headers (Debian: apt-get install libseccomp-dev)"; exit 1; }; \
	    (cd / && GOFLAGS= CGO_ENABLED=1 GOBIN="$(RUNTIME_DIR)" $(GO) install -tags "seccomp urfave_cli_no_docs" \
	      github.com/opencontainers/runc@$$rv); \
	  fi

# RUN_ARGS are extra flags for the server, e.g. RUN_ARGS=--fake-nodes=3.
RUN_ARGS ?=

# run installs what this host's node needs when it is missing and we
# may (root with apt-get: node-deps), builds, and runs the server. Without
# root, or without what the node needs, the server runs the control plane
# and says in one line what the node would need.
run: node-deps build
	./bin/sqlkube server $(RUN_ARGS)

# NODE_PACKAGES are what this host's node needs, as BINARY:DEBIAN-PACKAGE
# pairs: libseccomp's headers (make runtime builds runc with them;
# containerd is sqlkube's own, with the shim and runc of make runtime,
# never Debian's), the CNI plugins, and iptables and nftables for the pod
# network and kube-proxy. node-deps installs the missing ones as root
# with apt-get; elsewhere it does nothing (the node is root's only).
NODE_PACKAGES = $(SECCOMP_HEADER):libseccomp-dev /usr/lib/cni/bridge:containernetworking-plugins \
	iptables:iptables nft:nftables
# NODE_DEPS=skip leaves the machine as it is (make run's test uses it).
NODE_DEPS ?= install

node-deps:
	@[ "$(NODE_DEPS)" = install ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 || exit 0; \
	for pair in $(NODE_PACKAGES); do \
	  bin=$${pair%%:*}; pkg=$${pair#*:}; \
	  { command -v $$bin || [ -e $$bin ]; } >/dev/null 2>&1 && continue; \
	  echo "installing $$pkg ($$bin) for this host's node"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$pkg) >/dev/null 2>&1 || \
	    echo "could not install $$pkg: the server runs without a node"; \
	done

# test-deps installs what the tests drive when it is missing and we may
# install (root with apt), as BINARY:DEBIAN-PACKAGE pairs: etcdctl for the
# end-to-end tests, the etcd server for the datastore migration tests' etcd
# legs, a static busybox (the real-node tests build their image from it),
# and what the real-node tests' nodes need (NODE_PACKAGES). Under CI=true a
# missing tool is an error here and a failure in those tests; elsewhere
# they skip with a line.
TEST_PACKAGES = etcdctl:etcd-client etcd:etcd-server /bin/busybox:busybox-static $(NODE_PACKAGES)

test-deps:
	@for pair in $(TEST_PACKAGES); do \
	  bin=$${pair%%:*}; pkg=$${pair#*:}; \
	  { command -v $$bin || [ -e $$bin ]; } >/dev/null 2>&1 && continue; \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing $$pkg ($$bin) for the tests"; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$pkg) >/dev/null 2>&1 || \
	      { [ "$$CI" = true ] && exit 1; echo "could not install $$pkg: its tests will skip"; }; \
	  elif [ "$$CI" = true ]; then echo "$$bin not found and cannot install $$pkg (CI=true)"; exit 1; \
	  else echo "$$bin not found: install Debian's $$pkg; its tests will skip"; fi; \
	done

# HELM_VERSIONS are the Helm releases TestHelm drives (apiserver/e2e),
# built with go install, each into its own directory since both are
# named helm: HELM_DIR/helm-v3/helm and HELM_DIR/helm-v4/helm. A binary
# whose module version (go version -m) is not the one named here is
# rebuilt. Each build takes about 7 minutes on 2 cores with an empty
# module cache. Under CI=true a failed build is an error; elsewhere the
# test skips that version with a line.
HELM_VERSIONS = v3.22.0 v4.3.1
HELM_DIR ?= $(firstword $(subst :, ,$(shell $(GO) env GOPATH)))/bin

test-deps-helm:
	@for v in $(HELM_VERSIONS); do \
	  major=$${v%%.*}; dir="$(HELM_DIR)/helm-$$major"; \
	  [ "$$($(GO) version -m "$$dir/helm" 2>/dev/null | awk '$$1 == "mod" { print $$3 }')" = "$$v" ] && continue; \
	  echo "building helm $$v into $$dir for the tests"; \
	  (cd / && GOFLAGS= GOBIN="$$dir" $(GO) install helm.sh/helm/$$major/cmd/helm@$$v) || \
	    { [ "$$CI" = true ] && exit 1; echo "could not build helm $$v: TestHelm skips it"; }; \
	done

# KUBECTL_VERSIONS are the kubectl releases the kubectl end-to-end tests
# drive besides the machine's: the supported skew, one minor either side of
# the server's Kubernetes (go.mod's), built from the module proxy by
# tools/kubernetes/kubectl.sh into KUBECTL_DIR/kubectl-MINOR/kubectl (about
# 4 minutes each on 2 cores; a binary that reports its version is kept).
# Under CI=true a failed build is an error; elsewhere the tests skip it.
KUBECTL_VERSIONS = v1.36.3 v1.37.2
KUBECTL_DIR ?= $(HELM_DIR)

test-deps-kubectl:
	@for v in $(KUBECTL_VERSIONS); do \
	  minor=$$(echo $$v | cut -d. -f1,2); dir="$(KUBECTL_DIR)/kubectl-$${minor#v}"; \
	  ./tools/kubernetes/kubectl.sh $$v "$$dir" || \
	    { [ "$$CI" = true ] && exit 1; echo "could not build kubectl $$v: the kubectl tests skip it"; }; \
	done

# PROMETHEUS_VERSION is the Prometheus that scrapes a test cluster with
# the kubernetes-mixin rules of monitoring/mixin (TestPrometheus_Mixin in
# apiserver/e2e) and whose promtool checks those rules. Prometheus 3.x is
# published to the module proxy as v0.3MM.P (3.16.0 is v0.316.0).
# prometheus and promtool are built with go install into PROMETHEUS_DIR,
# with Prometheus' own build tag remove_all_sd: without its service
# discovery plugins (the cloud providers' SDKs, Kubernetes'), which a
# Prometheus of static targets does not use and which are most of its
# build. A binary whose module version (go version -m) is not this one is
# rebuilt. Under CI=true a failed build is an error; elsewhere the tests
# that need it skip with a line.
PROMETHEUS_VERSION = v0.316.0
PROMETHEUS_DIR ?= $(HELM_DIR)/prometheus-$(PROMETHEUS_VERSION)
# KSM_VERSION is the kube-state-metrics TestPrometheus_Mixin runs beside
# Prometheus, as kube-prometheus-stack does: the k8s.rules groups and
# KubeletDown read its series (monitoring/mixin/NEEDS.md). It is built
# into KSM_DIR from tools/kube-state-metrics, a module that requires it
# as a tool (go install MODULE@VERSION fails on it: the module proxy
# refuses its version list, which go install reads for deprecations);
# that module's go.mod and go.sum pin it and its dependencies.
KSM_VERSION = $(shell sed -n 's|^[[:space:]]*k8s.io/kube-state-metrics/v2 \(v[^ ]*\).*|\1|p' tools/kube-state-metrics/go.mod)
KSM_DIR ?= $(HELM_DIR)/kube-state-metrics-$(KSM_VERSION)

test-deps-prometheus:
	@have() { [ "$$($(GO) version -m "$$1" 2>/dev/null | awk '$$1 == "mod" { print $$3 }')" = "$$2" ]; }; \
	for cmd in prometheus promtool; do \
	  have "$(PROMETHEUS_DIR)/$$cmd" $(PROMETHEUS_VERSION) && continue; \
	  echo "building $$cmd $(PROMETHEUS_VERSION) into $(PROMETHEUS_DIR) for the tests"; \
	  (cd / && GOFLAGS= GOBIN="$(PROMETHEUS_DIR)" $(GO) install -tags remove_all_sd github.com/prometheus/prometheus/cmd/$$cmd@$(PROMETHEUS_VERSION)) || \
	    { [ "$$CI" = true ] && exit 1; echo "could not build $$cmd $(PROMETHEUS_VERSION): the tests that need it skip"; }; \
	done; \
	have "$(KSM_DIR)/kube-state-metrics" $(KSM_VERSION) && exit 0; \
	echo "building kube-state-metrics $(KSM_VERSION) into $(KSM_DIR) for the tests"; \
	(cd tools/kube-state-metrics && GOFLAGS= $(GO) build -o "$(KSM_DIR)/kube-state-metrics" k8s.io/kube-state-metrics/v2) || \
	  { [ "$$CI" = true ] && exit 1; echo "could not build kube-state-metrics $(KSM_VERSION): the tests that need it skip"; }

# The real-node tests run sqlkube's containerd with make runtime's shim
# and runc (SQLKUBE_RUNTIME_DIR: internal/testbin links them beside the
# sqlkube it builds).
test: test-deps test-deps-helm test-deps-kubectl test-deps-prometheus runtime test-fuzz
	$(GO) vet ./...
	# One package at a time: the conformance suites run their backends in
	# parallel and are timing-sensitive on a 2-core machine.
	SQLKUBE_HELM_DIR="$(HELM_DIR)" SQLKUBE_KUBECTL_DIR="$(KUBECTL_DIR)" \
	  SQLKUBE_PROMETHEUS_DIR="$(PROMETHEUS_DIR)" SQLKUBE_KSM_DIR="$(KSM_DIR)" SQLKUBE_RUNTIME_DIR="$(RUNTIME_DIR)" $(GO) test -p 1 -count=1 -timeout 40m ./...

# test-fuzz runs each fuzz test of the etcd API (etcdshim/fuzz*_test.go:
# hostile requests through gRPC to a server on SQLite) for FUZZTIME, one
# after the other. A failing input is written to etcdshim/testdata/fuzz/;
# docs/testing.md says how to run them longer. Go 1.26's coordinator may
# fail a run whose -fuzztime ends while a worker is busy, with a bare
# "context deadline exceeded" and no failing input (go.dev/issue/75804,
# fixed in Go 1.27): that alone is reported, not failed.
FUZZTIME ?= 20s
ETCD_FUZZ := FuzzKV FuzzTxn FuzzWatch FuzzLease FuzzMaintenance
.PHONY: test-fuzz
test-fuzz:
	@for f in $(ETCD_FUZZ); do \
	  echo "$$f for $(FUZZTIME)"; log=$$(mktemp); \
	  $(GO) test -run '^$$' -fuzz "^$$f\$$" -fuzztime $(FUZZTIME) ./etcdshim >$$log 2>&1; rc=$$?; cat $$log; \
	  if [ $$rc -ne 0 ] && { grep -q 'Failing input written' $$log || ! grep -qx '    context deadline exceeded' $$log; }; then rm -f $$log; exit 1; fi; \
	  [ $$rc -eq 0 ] || echo "$$f: only Go's -fuzztime deadline race (go.dev/issue/75804), no failing input"; \
	  rm -f $$log; \
	done

# conformance runs Kubernetes' own conformance suite (e2e.test at go.mod's
# Kubernetes version, every [Conformance] test) against a two-node sqlkube
# cluster on this host, offline, as root, and writes docs/conformance.md
# (conformance/run.sh: what it builds, where it caches, how it cleans up).
# Not part of make test: it takes hours on 2 cores. PROCS=N parallel
# ginkgo processes; FOCUS=REGEXP a subset.
conformance: test-deps
	./conformance/run.sh

# test-ha runs the fault tests (apiserver/e2e/ha_*_test.go, TestHA_*):
# three servers on a private PostgreSQL through a minute of SIGKILLs, a
# PostgreSQL restart and a paused leader (TestHA_Faults; make test runs it
# short); three servers on a private primary and its synchronous standby,
# the primary killed and the standby promoted (TestHA_Failover; not in
# make test); and a server on SQLite over a disk whose fsync takes 200 ms,
# then 1 s (TestHA_SlowDisk, a FUSE mount: needs root), with writers and
# watchers checked afterwards. HA_MODE=short runs each briefly. Their
# figures (each test's last log line) are what docs/reliability.md reports.
HA_MODE ?= full
test-ha:
	SQLKUBE_TEST_HA=$(HA_MODE) $(GO) test -count=1 -timeout 30m -v -run '^TestHA_' ./apiserver/e2e

# image builds the container image docker-compose.yaml runs (Dockerfile:
# a cgo build, distroless and non-root). IMAGE=name:tag to name it.
IMAGE  ?= sqlkube:dev
DOCKER ?= docker

image:
	$(DOCKER) build --build-arg VERSION=$(VERSION) -t $(IMAGE) .

# test-compose runs docker-compose.yaml for real (compose/test.sh): up on
# stand-in images (STANDINS=0: the upstream ones), kubectl through lb on
# both servers, each server stopped in turn, down -v leaving nothing. It
# needs Docker (as root it starts dockerd) and takes minutes, so it is not
# part of make test; docs/compose.md has the figures.
test-compose:
	compose/test.sh

bench: build
	$(GO) test -run '^$$' -bench . -benchtime 2s ./etcdshim/...

# bench-compare runs sqlkube, kine and etcd side by side on SQLite,
# PostgreSQL and MySQL with etcd's own benchmark tool and the project's
# (bench/compare.sh; medians of ROUNDS rounds; about 45 minutes at 3).
ROUNDS ?= 3
bench-compare: test-deps
	@[ -x "$$($(GO) env GOPATH)/bin/kine" ] || command -v kine >/dev/null || \
	  (cd / && GOFLAGS= $(GO) install github.com/k3s-io/kine@v0.17.5)
	bench/compare.sh all --rounds $(ROUNDS)

# bench-net measures Services on a real node in a network namespace (root,
# containerd, iptables): requests/s through a cluster IP against a pod IP,
# and the time from a Service's creation to its first answer.
bench-net: test-deps runtime
	SQLKUBE_BENCH_NET=1 SQLKUBE_RUNTIME_DIR="$(RUNTIME_DIR)" $(GO) test -count=1 -timeout 20m -run 'TestRealNode_ServiceBench$$' -v ./apiserver/e2e

# bench-shim weighs containerd's runc shim as a small program of its own
# (what make runtime builds and nodes run) against sqlkube's own binary as
# the shim (a build with -tags shim_multicall), on this host's node (root):
# per pod, the shim's memory and start. docs/node.md reports its figures.
bench-shim: test-deps runtime
	SQLKUBE_BENCH_SHIM=1 SQLKUBE_RUNTIME_DIR="$(RUNTIME_DIR)" $(GO) test -count=1 -timeout 30m -run 'TestRealNode_ShimBench$$' -v ./apiserver/e2e

fmt:
	gofmt -l -w .
