#!/usr/bin/env bash
# update.sh REPO [REV] rewrites kubernetes-control-plane.rules.yaml beside
# it from kube-prometheus' manifests/kubernetesControlPlane-prometheusRule.yaml
# at REV (default HEAD) of REPO, a kube-prometheus checkout or bare git
# directory. No network: fetch REPO first.
#
# The manifest is a PrometheusRule; a Prometheus rule file is its
# spec.groups at top level. The conversion is textual so that every rule
# stays byte for byte as kube-prometheus rendered it: the lines after
# "  groups:" lose the two spaces of indentation that spec: gave them. It
# stops if the manifest is not shaped that way (spec: then groups: as its
# last key). Where python3 has its yaml module the result is also loaded
# and compared with the manifest's spec.groups.
#
# It prints the commit, its date and the kubernetes-mixin commit that
# kube-prometheus pins there, for README.md.
set -euo pipefail
if [ $# -lt 1 ] || [ $# -gt 2 ]; then
  echo "usage: $0 KUBE_PROMETHEUS_REPO [REV]" >&2
  exit 2
fi
repo=$1 rev=${2:-HEAD}
manifest=manifests/kubernetesControlPlane-prometheusRule.yaml
here=$(cd "$(dirname "$0")" && pwd)
out=$here/kubernetes-control-plane.rules.yaml

commit=$(git -C "$repo" rev-parse --verify "$rev^{commit}")
date=$(git -C "$repo" log -1 --format=%cI "$commit")
src=$(mktemp) tmp=$(mktemp)
trap 'rm -f "$src" "$tmp"' EXIT
git -C "$repo" show "$commit:$manifest" >"$src"

# Unwrap: everything before "spec:" is the object's header; "spec:" must
# be followed by "  groups:", and every later line must be indented under
# it (or be empty), so that no other key of spec is dropped.
awk -v src="$manifest" '
  function fail(msg) { printf "%s:%d: %s\n", src, NR, msg > "/dev/stderr"; bad = 1; exit 1 }
  state == 0 { if ($0 == "spec:") state = 1; next }
  state == 1 { if ($0 != "  groups:") fail("spec: is not followed by \"  groups:\""); print "groups:"; state = 2; next }
  state == 2 {
    if ($0 == "") { print; next }
    if (substr($0, 1, 4) != "  - " && substr($0, 1, 4) != "    ") fail("a line outside spec.groups")
    print substr($0, 3)
  }
  END { if (!bad && state != 2) { printf "%s: no spec.groups\n", src > "/dev/stderr"; exit 1 } }
' "$src" >"$tmp"

if python3 -c 'import yaml' 2>/dev/null; then
  python3 - "$src" "$tmp" <<'EOF'
import sys, yaml
with open(sys.argv[1]) as f:
    want = yaml.safe_load(f)["spec"]["groups"]
with open(sys.argv[2]) as f:
    got = yaml.safe_load(f)
if list(got) != ["groups"] or got["groups"] != want:
    sys.exit("the unwrapped file differs from the manifest's spec.groups")
EOF
else
  echo "python3 has no yaml module: not compared with spec.groups (promtool check rules still applies)" >&2
fi
mv "$tmp" "$out"
chmod 0644 "$out"

# kube-prometheus pins its jsonnet dependencies in jsonnetfile.lock.json;
# the kubernetes-mixin entry's version is a commit of that repository.
mixin=$(git -C "$repo" show "$commit:jsonnetfile.lock.json" | awk '
  /kubernetes-monitoring\/kubernetes-mixin/ { found = 1 }
  found && /"version":/ { gsub(/.*"version": *"|".*/, ""); print; exit }')

echo "wrote $out"
echo "kube-prometheus commit: $commit ($date)"
echo "kubernetes-mixin commit pinned there: ${mixin:-not found}"
echo "now: update README.md with those, and run promtool check rules --lint=none $out"
