# sqlkube: two commands for a newcomer.
#   make run   - the server on embedded SQLite (./sqlkube-data/state.db)
#   make test  - every test (PostgreSQL and MySQL tests skip with a line
#                when no server is reachable, except under CI=true)

GO      ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X main.version=$(VERSION)

.PHONY: run build test test-deps vet fmt bench

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/sqlkube ./cmd/sqlkube

# RUN_ARGS are extra flags for the server, e.g. RUN_ARGS=--fake-nodes=3.
RUN_ARGS ?=

run: build
	./bin/sqlkube server $(RUN_ARGS)

# test-deps installs the real clients the end-to-end tests drive (etcdctl
# from Debian's etcd-client) when they are missing and we may install.
test-deps:
	@command -v etcdctl >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing etcd-client (etcdctl) for the end-to-end tests"; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-client) >/dev/null; \
	  else echo "etcdctl not found: install Debian's etcd-client; its tests will skip"; fi; }

test: test-deps
	$(GO) vet ./...
	# One package at a time: the conformance suites run their backends in
	# parallel and are timing-sensitive on a 2-core machine.
	$(GO) test -p 1 -count=1 -timeout 40m ./...

bench: build
	$(GO) test -run '^$$' -bench . -benchtime 2s ./etcdshim/...

fmt:
	gofmt -l -w .
