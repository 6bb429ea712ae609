#!/usr/bin/env bash
# build.sh builds what `make conformance` runs, at the Kubernetes version
# the project's go.mod pins: Kubernetes' end-to-end suite (e2e.test, from
# k8s.io/kubernetes/test/e2e), the ginkgo CLI at the version Kubernetes
# requires, and kubectl (the [sig-cli] tests run it; the machine's is
# older). It builds in a module of its own under the cache (its go.mod
# is Kubernetes' own for that version, with the staging modules pointed at
# their published versions), so the project's go.mod and go.sum stay
# untouched and the suite builds against the dependencies Kubernetes pins.
# Prints the bin directory.
#
#   CONFORMANCE_CACHE  where to build (default ~/.cache/sqlkube-conformance)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
go=${GO:-go}
version=$(cd "$root" && $go list -m -f '{{.Version}}' k8s.io/kubernetes)
minor=$(echo "$version" | cut -d. -f2)
cache=${CONFORMANCE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sqlkube-conformance}/$version
mod=$cache/module
bin=$cache/bin
mkdir -p "$mod" "$bin"

# Kubernetes' own go.mod for that version (every dependency of the suite
# pinned as Kubernetes builds it; tools/kubernetes/module.sh).
"$root/tools/kubernetes/module.sh" "$version" "$mod"

cd "$mod"
ldflags="-X k8s.io/component-base/version.gitVersion=$version -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"
export GOFLAGS=-mod=mod
# go.sum entries for the suite and the tools come from the module proxy
# (-mod=mod); every module is already required at Kubernetes' version.
[ -x "$bin/e2e.test" ] || $go test -c -ldflags "$ldflags" -o "$bin/e2e.test" k8s.io/kubernetes/test/e2e >&2
[ -x "$bin/ginkgo" ] || $go build -o "$bin/ginkgo" github.com/onsi/ginkgo/v2/ginkgo >&2
[ -x "$bin/kubectl" ] || $go build -ldflags "$ldflags" -o "$bin/kubectl" k8s.io/kubernetes/cmd/kubectl >&2
echo "$bin"
