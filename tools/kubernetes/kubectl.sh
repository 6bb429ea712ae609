#!/usr/bin/env bash
# kubectl.sh VERSION BIN builds kubectl at VERSION (a k8s.io/kubernetes
# tag, v1.37.2) from the Go module proxy into BIN/kubectl, stamped with
# its version as Kubernetes' own builds are, in a module of its own under
# CACHE (module.sh). A BIN/kubectl that already reports VERSION is kept.
#
#   CACHE  where the build module lives (default ~/.cache/sqlkube-kubectl)
set -euo pipefail
version=$1 bin=$2
go=${GO:-go}
here=$(cd "$(dirname "$0")" && pwd)
if [ -x "$bin/kubectl" ] && "$bin/kubectl" version --client -o json 2>/dev/null | grep -q "\"gitVersion\": \"$version\""; then
  exit 0
fi
cache=${CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sqlkube-kubectl}/$version
"$here/module.sh" "$version" "$cache"
minor=$(echo "$version" | cut -d. -f2)
mkdir -p "$bin"
cd "$cache"
GOFLAGS=-mod=mod $go build \
  -ldflags "-X k8s.io/component-base/version.gitVersion=$version -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor" \
  -o "$bin/kubectl" k8s.io/kubernetes/cmd/kubectl
