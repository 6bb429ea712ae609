# sqlkube: two commands for a newcomer.
#   make run   - the server on embedded SQLite (./sqlkube-data/state.db)
#   make test  - every test (PostgreSQL and MySQL tests skip with a line
#                when no server is reachable, except under CI=true)

GO      ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X main.version=$(VERSION)

.PHONY: run build test test-deps vet fmt bench image

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/sqlkube ./cmd/sqlkube

# RUN_ARGS are extra flags for the server, e.g. RUN_ARGS=--fake-nodes=3.
RUN_ARGS ?=

run: build
	./bin/sqlkube server $(RUN_ARGS)

# test-deps installs the real etcd tools the tests drive when they are
# missing and we may install: etcdctl (Debian's etcd-client) for the
# end-to-end tests, and the etcd server (etcd-server) for the datastore
# migration tests' etcd legs. Under CI=true a missing tool is an error here
# and a failure in those tests; elsewhere they skip with a line.
ETCD_PACKAGES = etcdctl:etcd-client etcd:etcd-server

test-deps:
	@for pair in $(ETCD_PACKAGES); do \
	  bin=$${pair%%:*}; pkg=$${pair#*:}; \
	  command -v $$bin >/dev/null 2>&1 && continue; \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing $$pkg ($$bin) for the tests"; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$pkg) >/dev/null || \
	      { [ "$$CI" = true ] && exit 1; echo "could not install $$pkg: its tests will skip"; }; \
	  elif [ "$$CI" = true ]; then echo "$$bin not found and cannot install $$pkg (CI=true)"; exit 1; \
	  else echo "$$bin not found: install Debian's $$pkg; its tests will skip"; fi; \
	done

test: test-deps
	$(GO) vet ./...
	# One package at a time: the conformance suites run their backends in
	# parallel and are timing-sensitive on a 2-core machine.
	$(GO) test -p 1 -count=1 -timeout 40m ./...

# image builds the container image docker-compose.yaml runs (Dockerfile:
# a cgo build, distroless and non-root). IMAGE=name:tag to name it.
IMAGE  ?= sqlkube:dev
DOCKER ?= docker

image:
	$(DOCKER) build --build-arg VERSION=$(VERSION) -t $(IMAGE) .

bench: build
	$(GO) test -run '^$$' -bench . -benchtime 2s ./etcdshim/...

fmt:
	gofmt -l -w .
