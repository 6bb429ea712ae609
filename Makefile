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

.PHONY: run build test test-deps vet fmt bench

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/sqlkube ./cmd/sqlkube

# RUN_ARGS are extra flags for the server, e.g. RUN_ARGS=--fake-nodes=3.
RUN_ARGS ?=

run: build
	./bin/sqlkube server $(RUN_ARGS)

# test-deps installs what the end-to-end tests drive when it is missing and
# we may install (root with apt): etcdctl (etcd-client), and for the real
# node containerd, runc, the CNI plugins and a static busybox for the
# test image.
test-deps:
	@missing=""; \
	command -v etcdctl >/dev/null 2>&1 || missing="$$missing etcd-client"; \
	command -v containerd >/dev/null 2>&1 || missing="$$missing containerd"; \
	command -v runc >/dev/null 2>&1 || missing="$$missing runc"; \
	[ -x /usr/lib/cni/bridge ] || [ -x /opt/cni/bin/bridge ] || missing="$$missing containernetworking-plugins"; \
	[ -x /bin/busybox ] || missing="$$missing busybox-static"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing$$missing for the end-to-end tests"; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing) >/dev/null; \
	  else echo "missing for some end-to-end tests (they skip):$$missing (Debian packages)"; fi; \
	fi

test: test-deps
	$(GO) vet ./...
	# One package at a time: the conformance suites run their backends in
	# parallel and are timing-sensitive on a 2-core machine.
	$(GO) test -p 1 -count=1 -timeout 40m ./...

bench: build
	$(GO) test -run '^$$' -bench . -benchtime 2s ./etcdshim/...

fmt:
	gofmt -l -w .
