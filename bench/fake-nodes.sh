#!/usr/bin/env bash
# Side-by-side: `sqlkube node --fake` and kwok, each simulating the same
# nodes and pods against one `sqlkube server` (SQLite) on this machine,
# measured by `sqlkube bench fake-nodes`, ROUNDS times in alternating
# order. Prints one line per run; docs/benchmarks.md quotes them.
#
# Needs kwok (installed into the work directory with
# `go install sigs.k8s.io/kwok/cmd/kwok@v0.8.0` when not on the PATH). kwok
# runs with the stages kwokctl gives it by default (node-initialize,
# node-heartbeat-with-lease, pod-ready, pod-complete, pod-delete), read
# from its module.
#
#   bench/fake-nodes.sh [ROUNDS] [extra `sqlkube bench fake-nodes` flags…]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-3}"; shift || true
kwok_version=v0.8.0
work="$(mktemp -d)"
server=""
cleanup() { [ -n "$server" ] && { kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; }; rm -rf "$work"; }
trap cleanup EXIT

go build -o "$work/sqlkube" ./cmd/sqlkube
kwok="$(command -v kwok || true)"
if [ -z "$kwok" ]; then
  GOBIN="$work" go install "sigs.k8s.io/kwok/cmd/kwok@$kwok_version"
  kwok="$work/kwok"
fi
stages="$(cd "$work" && go mod download -json "sigs.k8s.io/kwok@$kwok_version" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')/kustomize/stage"
for f in node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
         pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
  cat "$stages/$f"; echo "---"
done > "$work/kwok-stages.yaml"

"$work/sqlkube" server --data-dir "$work/data" --secure-port 0 --disable-node --cluster-cidr= --log-level warn > "$work/server.out" 2> "$work/server.err" &
server=$!
for _ in $(seq 1 600); do grep -q "Admin kubeconfig" "$work/server.out" 2>/dev/null && break; sleep 0.1; done
grep -q "Admin kubeconfig" "$work/server.out" || { cat "$work/server.err" >&2; exit 1; }

for r in $(seq 1 "$rounds"); do
  order="sqlkube kwok"; [ $((r % 2)) = 0 ] && order="kwok sqlkube"
  for sim in $order; do
    "$work/sqlkube" bench fake-nodes --kubeconfig "$work/data/kubeconfig" --simulator "$sim" \
      --kwok-bin "$kwok" --kwok-config "$work/kwok-stages.yaml" --server-pid "$server" "$@" 2> "$work/$sim-$r.log" \
      || { tail -20 "$work/$sim-$r.log" >&2; exit 1; }
  done
done
