#!/usr/bin/env bash
# module.sh VERSION DIR writes DIR/go.mod: a module that builds Kubernetes'
# own commands at VERSION (a k8s.io/kubernetes tag) against exactly the
# dependencies that release pins. It is Kubernetes' go.mod for VERSION,
# with the staging modules it replaces by its ./staging folders pointed at
# their published versions (v0.MINOR.PATCH) and k8s.io/kubernetes itself
# required, so nothing of the project's go.mod or go.sum is involved.
# Builds in DIR need GOFLAGS=-mod=mod (go.sum comes from the module proxy).
# An existing DIR/go.mod is kept.
set -euo pipefail
version=$1 dir=$2
go=${GO:-go}
mkdir -p "$dir"
[ -f "$dir/go.mod" ] && exit 0
kmod=$($go mod download -json "k8s.io/kubernetes@$version" | sed -n 's/^\s*"GoMod": "\(.*\)",\?$/\1/p')
[ -f "$kmod" ] || { echo "module.sh: no go.mod for k8s.io/kubernetes@$version" >&2; exit 1; }
{
  echo "module sqlkube.local/kubernetes-${version//./-}"
  sed -e '/^module /d' -e '/^replace (/,/^)/d' -e '/^\/\//d' "$kmod"
  echo
  echo "require k8s.io/kubernetes $version"
  echo
  echo "replace ("
  sed -n '/^replace (/,/^)/p' "$kmod" | sed -n 's|^\s*\(k8s\.io/[a-z0-9-]*\) => \./staging/.*|\t\1 => \1 v0.'"${version#v1.}"'|p'
  echo ")"
} > "$dir/go.mod.new"
mv "$dir/go.mod.new" "$dir/go.mod"
