#!/usr/bin/env bash
# Side by side: k3s's server and `sqlkube server`, each on SQLite (k3s on
# kine, its default), each run on a fresh data directory and free ports,
# measured from the outside by `sqlkube bench control-plane`: ready, idle
# CPU and RSS, a burst of pod creates over the API, and a 1,000-replica
# Deployment on 100 simulated nodes (`sqlkube node --fake`). ROUNDS rounds
# (default 3), alternating which goes first. Prints one line per run and a
# summary of medians (each round in brackets) and ratios;
# docs/benchmarks.md quotes them.
#
#   K3S_BIN=/path/to/k3s bench/k3s.sh [ROUNDS] [extra `sqlkube bench control-plane` flags…]
#
# K3S_BIN is a k3s binary (a release's, or one built from k3s's source with
# its own scripts/build); this script does not build it, and prints what
# `k3s --version` says. sqlkube is built from this checkout with the
# Makefile's version flags (SQLKUBE_BIN: use that binary instead).
#
# The servers, as each runs:
#   k3s server --disable-agent --flannel-backend=none --disable-cloud-controller
#     --disable=coredns,traefik,servicelb,local-storage,metrics-server
#     --disable-network-policy --data-dir DIR --write-kubeconfig
#     DIR/kubeconfig.yaml, free ports for the supervisor, the API server,
#     the controller manager and the scheduler, and a private /etc/rancher
#     (nothing of it is left under /etc/rancher or /var/lib/rancher)
#   sqlkube server --disable-node --disable-dns --data-dir DIR --secure-port 0
#
# The machine may be shared: before each run the script waits up to
# LOAD_WAIT seconds (default 600) for the 1-minute load average to fall
# below LOAD_MAX (default 1.5), and prints the load at the run's start and
# how long it waited.
# KEEP=1 keeps the data directories and logs (under a printed path).
# K3S_ARGS adds flags to every k3s server (split on spaces), e.g. its
# controller manager's and scheduler's client rates:
#   K3S_ARGS="--kube-controller-manager-arg=kube-api-qps=5000 --kube-controller-manager-arg=kube-api-burst=10000
#             --kube-scheduler-arg=kube-api-qps=5000 --kube-scheduler-arg=kube-api-burst=10000"
#
# Not measured: pod startup on a real node. Beside the containerd built
# into its binary, k3s's agent needs runc, the containerd shim and the CNI
# plugins, which k3s's build clones from GitHub, the k3s-root userspace
# (iptables, ipset, …), which it downloads as a release archive, and its
# pause image from a registry. Where none of those can be had (the machine
# of docs/benchmarks.md reaches only the Go module proxy), k3s's agent
# cannot start a pod, so there is nothing to compare sqlkube's node with.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-3}"; shift || true
load_max="${LOAD_MAX:-1.5}" load_wait="${LOAD_WAIT:-600}"
: "${K3S_BIN:?set K3S_BIN to a k3s binary (see the comment at the top of bench/k3s.sh)}"
[ "$(id -u)" = 0 ] || { echo "bench/k3s.sh: k3s's server runs as root (it is not run rootless here)" >&2; exit 1; }

work="$(mktemp -d /tmp/k3s-bench.XXXXXX)"
results="$work/results"
server="" bench=""
had_etc_rancher=0 had_var_rancher=0
[ -e /etc/rancher ] && had_etc_rancher=1
[ -e /var/lib/rancher ] && had_var_rancher=1

# stop PID: SIGTERM to PID and its children, then SIGKILL after 30 s.
stop() {
  local pid="$1" kids
  [ -n "$pid" ] || return 0
  kids="$(pgrep -P "$pid" || true)"
  kill "$pid" $kids 2>/dev/null || true
  for _ in $(seq 1 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$pid" $kids 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}
cleanup() {
  stop "$bench"; stop "$server"
  # k3s's server, without its agent, mounts nothing and adds no iptables
  # rules; say so if that ever changes rather than undo what others did.
  grep -F "$work" /proc/mounts | cut -d' ' -f2 | sort -r | xargs -r -n1 umount -l || true
  # /etc/rancher is only the mount point of k3s's private one (above).
  [ "$had_etc_rancher" = 1 ] || rmdir /etc/rancher 2>/dev/null || true
  [ "$had_var_rancher" = 1 ] || { [ -e /var/lib/rancher ] && echo "note: k3s created /var/lib/rancher; removed" && rm -rf /var/lib/rancher; } || true
  if [ "${KEEP:-}" = 1 ]; then echo "kept: $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
load1() { cut -d' ' -f1 /proc/loadavg; }
# rules: this host's iptables rules and chains, without counters.
rules() { { iptables-save 2>/dev/null; ip6tables-save 2>/dev/null; } | grep -v '^#' | sed 's/ \[[0-9]*:[0-9]*\]$//' | sort; }

if [ -n "${SQLKUBE_BIN:-}" ]; then
  sqlkube="$SQLKUBE_BIN"
else
  ldflags="$(make -s -n build 2>/dev/null | sed -n 's/^go build -ldflags "\([^"]*\)".*/\1/p' | head -1)"
  echo "building sqlkube (ldflags: $ldflags)"
  go build -ldflags "$ldflags" -o "$work/sqlkube" ./cmd/sqlkube
  sqlkube="$work/sqlkube"
fi

echo "k3s: $K3S_BIN: $("$K3S_BIN" --version 2>&1 | head -1)"
echo "sqlkube: $sqlkube: $("$sqlkube" version 2>&1 | head -1)"
echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(uname -r)"
echo "bench control-plane flags: ${*:-(defaults)}; K3S_ARGS: ${K3S_ARGS:-(none)}"
: >"$results"

# wait_load: wait up to $load_wait seconds for the 1-minute load average
# to fall below $load_max; prints the seconds waited.
wait_load() {
  local waited=0
  while awk -v l="$(load1)" -v m="$load_max" 'BEGIN { exit !(l >= m) }' && [ "$waited" -lt "$load_wait" ]; do
    sleep 10; waited=$((waited + 10))
  done
  echo "$waited"
}

# run ROUND PEER: one server of PEER on a new data directory, measured.
run() {
  local round="$1" peer="$2" dir="$work/$2-$1" kubeconfig line status=0 waited
  shift 2
  waited="$(wait_load)"
  mkdir -p "$dir"
  rules >"$dir/rules.before"
  local load_at_start; load_at_start="$(cut -d' ' -f1-3 /proc/loadavg)"
  case "$peer" in
    k3s)
      kubeconfig="$dir/kubeconfig.yaml"
      local https api kcm sched
      https="$(free_port)" api="$(free_port)" kcm="$(free_port)" sched="$(free_port)"
      # As root, k3s also writes /etc/rancher/node/password and links
      # /etc/rancher/k3s/k3s.yaml to its kubeconfig, whatever --data-dir
      # says: it runs in a mount namespace of its own where /etc/rancher
      # is a directory of this run (a k3s installed here is not touched).
      # unshare and sh exec, so $! is k3s's process.
      mkdir -p /etc/rancher "$dir/etc-rancher"
      (cd "$dir" && exec unshare --mount --propagation private sh -c 'mount --bind "$0" /etc/rancher && exec "$@"' "$dir/etc-rancher" \
        "$K3S_BIN" server --data-dir "$dir/data" --write-kubeconfig "$kubeconfig" --write-kubeconfig-mode 600 \
        --https-listen-port "$https" --apiserver-port "$api" \
        --kube-controller-manager-arg "secure-port=$kcm" --kube-scheduler-arg "secure-port=$sched" \
        --disable-agent --flannel-backend=none --disable-cloud-controller --disable-network-policy \
        --disable=coredns,traefik,servicelb,local-storage,metrics-server ${K3S_ARGS:-} >"$dir/server.log" 2>&1) &
      server=$! ;;
    sqlkube)
      kubeconfig="$dir/data/kubeconfig"
      "$sqlkube" server --data-dir "$dir/data" --secure-port 0 --disable-node --disable-dns >"$dir/server.log" 2>&1 &
      server=$! ;;
  esac
  "$sqlkube" bench control-plane --kubeconfig "$kubeconfig" --server-pid "$server" --sqlkube-bin "$sqlkube" "$@" \
    >"$dir/bench.out" 2>"$dir/bench.log" &
  bench=$!
  wait "$bench" || status=$?
  bench=""
  line="$(cat "$dir/bench.out")"
  local kids; kids="$(pgrep -P "$server" | tr '\n' ' ' || true)"
  stop "$server"; server=""
  printf 'round %s\t%s\t%s\tload at start %s (waited %ss)\n' "$round" "$peer" "$line" "$load_at_start" "$waited"
  [ -z "$kids" ] || echo "  note: the $peer server had child processes: $kids"
  # Another user of the machine (a kubelet, docker) may change them too.
  rules >"$dir/rules.after"
  if ! cmp -s "$dir/rules.before" "$dir/rules.after"; then
    echo "  note: iptables changed during the $peer run (left as they are): $(diff "$dir/rules.before" "$dir/rules.after" | grep '^[<>]' | head -3 | tr '\n' ' ')"
  fi
  if [ "$status" != 0 ]; then
    echo "  $peer run failed (exit $status); last lines of its logs:"; tail -n 5 "$dir/bench.log" "$dir/server.log" | sed "s/^/  /" || true
  else
    printf '%s\t%s\t%s\n' "$round" "$peer" "$line" >>"$results"
  fi
  [ "${KEEP:-}" = 1 ] || rm -rf "$dir"
}

start=$(date +%s)
for r in $(seq 1 "$rounds"); do
  order="k3s sqlkube"; [ $((r % 2)) = 0 ] && order="sqlkube k3s"
  for peer in $order; do run "$r" "$peer" "$@"; done
done
echo "wall clock: $(( $(date +%s) - start )) s for $rounds rounds"

echo "pod startup on a real node: not measured (k3s's agent needs runc, the containerd shim, CNI plugins and the k3s-root userspace, which k3s's build fetches from GitHub, and a pause image from a registry: see the top of bench/k3s.sh)"
echo
echo "summary: medians of the rounds (each round's figure in brackets, in round order); ratio = k3s / sqlkube"
awk -F'\t' '
  function median(s,   a, n, i, j, t) {
    n = split(s, a, " ")
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
    return n ? a[int((n + 1) / 2)] : ""
  }
  {
    n = split($3, kv, " ")
    for (i = 1; i <= n; i++) {
      split(kv[i], p, "="); v = p[2]; u = v; gsub(/[0-9.]/, "", u); gsub(/[^0-9.]/, "", v)
      vals[$2, p[1]] = vals[$2, p[1]] (vals[$2, p[1]] == "" ? "" : " ") v
      unit[p[1]] = u
      if (!(p[1] in seen)) { seen[p[1]] = 1; keys[++nk] = p[1] }
    }
  }
  END {
    printf "| measure | k3s | sqlkube | k3s / sqlkube |\n|---|---|---|---|\n"
    for (k = 1; k <= nk; k++) {
      key = keys[k]; a = median(vals["k3s", key]); b = median(vals["sqlkube", key])
      printf "| %s | %s%s (%s) | %s%s (%s) | %s |\n", key, a, unit[key], vals["k3s", key], b, unit[key], vals["sqlkube", key],
        (b + 0 > 0 ? sprintf("%.2f", a / b) : "-")
    }
  }' "$results"
