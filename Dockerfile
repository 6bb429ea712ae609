# sqlkube's image: `make image` builds it; docker-compose.yaml runs it.
# BuildKit's built-in Dockerfile frontend (Docker 20.10 and later) has
# everything used here (RUN --mount), so there is no `# syntax=` line:
# it would make every build fetch docker/dockerfile from Docker Hub first.
#
# The two base images are build arguments, so a machine that cannot pull
# them builds on stand-ins (compose/standins.yaml, docs/compose.md); the
# defaults are the upstream images.
ARG GO_IMAGE=golang:1.26-bookworm
ARG BASE_IMAGE=gcr.io/distroless/base-debian12:nonroot

# Build stage: cgo is on, because SQLite (mattn/go-sqlite3) is C; the
# binary therefore links glibc dynamically and the final stage must have it.
FROM ${GO_IMAGE} AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ARG VERSION=dev
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=1 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/sqlkube ./cmd/sqlkube

# Final stage: distroless base (glibc, CA certificates, no shell), running
# as the non-root user 65532. Nothing sqlkube runs needs root: the API
# server listens on 6443, and `sqlkube node --fake` simulates its pods.
FROM ${BASE_IMAGE}
COPY --from=build /out/sqlkube /usr/local/bin/sqlkube
USER 65532:65532
WORKDIR /var/lib/sqlkube
EXPOSE 6443
ENTRYPOINT ["/usr/local/bin/sqlkube"]
CMD ["server", "--bind-address", "0.0.0.0", "--data-dir", "/var/lib/sqlkube"]
