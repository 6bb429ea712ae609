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
# With OTHER_SQLKUBE=/path/to/sqlkube (another release's build) it compares
# that build with this checkout's instead, and kwok is not needed: each run
# starts a server of its own from the build under test, on a new data
# directory, and that build's `node --fake` simulates the nodes. The bench
# that drives and measures them is this checkout's. Lines start with "this"
# or "other".
#
#   bench/fake-nodes.sh [ROUNDS] [extra `sqlkube bench fake-nodes` flags…]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-3}"; shift || true
kwok_version=v0.8.0
work="$(mktemp -d)"
server=""
stop_server() {
  [ -n "$server" ] || return 0
  kill "$server" 2>/dev/null || true
  wait "$server" 2>/dev/null || true
  server=""
}
cleanup() { stop_server; rm -rf "$work"; }
trap cleanup EXIT

# start_server BIN DATA_DIR: a server on SQLite without a node of its own.
start_server() {
  "$1" server --data-dir "$2" --secure-port 0 --disable-node --cluster-cidr= --log-level warn > "$2.out" 2> "$2.err" &
  server=$!
  for _ in $(seq 1 600); do grep -q "Admin kubeconfig" "$2.out" 2>/dev/null && break; sleep 0.1; done
  grep -q "Admin kubeconfig" "$2.out" || { cat "$2.err" >&2; exit 1; }
}

go build -o "$work/sqlkube" ./cmd/sqlkube

if [ -n "${OTHER_SQLKUBE:-}" ]; then
  for r in $(seq 1 "$rounds"); do
    order="this other"; [ $((r % 2)) = 0 ] && order="other this"
    for which in $order; do
      bin="$work/sqlkube"; [ "$which" = other ] && bin="$OTHER_SQLKUBE"
      start_server "$bin" "$work/data-$which-$r"
      "$work/sqlkube" bench fake-nodes --kubeconfig "$work/data-$which-$r/kubeconfig" --simulator sqlkube \
        --sqlkube-bin "$bin" --server-pid "$server" "$@" 2> "$work/$which-$r.log" | sed "s/^/$which\t/" \
        || { tail -20 "$work/$which-$r.log" >&2; exit 1; }
      stop_server
      rm -rf "$work/data-$which-$r"
    done
  done
  exit 0
fi

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

start_server "$work/sqlkube" "$work/data"
for r in $(seq 1 "$rounds"); do
  order="sqlkube kwok"; [ $((r % 2)) = 0 ] && order="kwok sqlkube"
  for sim in $order; do
    "$work/sqlkube" bench fake-nodes --kubeconfig "$work/data/kubeconfig" --simulator "$sim" \
      --kwok-bin "$kwok" --kwok-config "$work/kwok-stages.yaml" --server-pid "$server" "$@" 2> "$work/$sim-$r.log" \
      || { tail -20 "$work/$sim-$r.log" >&2; exit 1; }
  done
done
