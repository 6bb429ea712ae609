#!/usr/bin/env bash
# Side-by-side: sqlkube, kine and etcd, each on a fresh data directory on
# this machine, measured in one run by the same load generator
# (`sqlkube bench`). Prints one block per peer; docs/benchmarks.md quotes it.
#
# Needs: etcd (Debian's etcd-server) and kine
# (go install github.com/k3s-io/kine@v0.17.5). Peers that are missing are
# skipped with a line that says so.
#
#   bench/compare.sh [sqlite|postgres|mysql] [extra `sqlkube bench` flags…]
set -euo pipefail
cd "$(dirname "$0")/.."
backend="${1:-sqlite}"; shift || true
work="$(mktemp -d)"
pids=()
cleanup() { for p in "${pids[@]:-}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT

go build -o "$work/sqlkube" ./cmd/sqlkube
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_ready() { for _ in $(seq 1 100); do ETCDCTL_API=3 etcdctl --endpoints "$1" endpoint health >/dev/null 2>&1 && return 0; sleep 0.1; done; echo "peer on $1 did not start" >&2; return 1; }

stop_last() { local p="${pids[-1]}"; kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; unset 'pids[-1]'; }

dsn_for() { # peer name -> datastore
  case "$backend" in
    sqlite) echo "$work/$1.db" ;;
    postgres) psql -h 127.0.0.1 -U postgres -qc "DROP DATABASE IF EXISTS bench_$1" >/dev/null; echo "postgres://postgres@127.0.0.1:5432/bench_$1?sslmode=disable" ;;
    mysql) mysql -h127.0.0.1 -uroot -e "DROP DATABASE IF EXISTS bench_$1; CREATE DATABASE bench_$1" ; echo "root@tcp(127.0.0.1:3306)/bench_$1" ;;
  esac
}


# sqlkube
port=$(free_port); d=$(dsn_for sqlkube)
case "$backend" in sqlite) ds="sqlite://$d";; mysql) ds="mysql://$d";; *) ds="$d";; esac
"$work/sqlkube" etcd --log-level warn --listen-address "127.0.0.1:$port" --datastore "$ds" --compaction-interval 0 & pids+=($!)
wait_ready "127.0.0.1:$port"
echo "sqlkube ($backend; SQLite: WAL, synchronous=FULL)"
"$work/sqlkube" bench --log-level warn --endpoints "127.0.0.1:$port" --label sqlkube "$@"
stop_last

# kine, twice on SQLite: with its own default parameters (synchronous=NORMAL,
# which can lose the last commits on power loss) and with synchronous=FULL,
# the durability sqlkube and etcd give.
run_kine() { # label endpoint
  local port; port=$(free_port)
  "$kine_bin" --listen-address "127.0.0.1:$port" --endpoint "$2" >"$work/kine-$port.log" 2>&1 & pids+=($!)
  wait_ready "127.0.0.1:$port"
  echo "$1"
  "$work/sqlkube" bench --log-level warn --endpoints "127.0.0.1:$port" --label kine "${bench_args[@]}"
  stop_last # kine also binds a fixed metrics port; one at a time
}
bench_args=("$@")
if command -v kine >/dev/null 2>&1 || [ -x "$(go env GOPATH)/bin/kine" ]; then
  kine_bin="$(command -v kine || echo "$(go env GOPATH)/bin/kine")"
  kine_params="_journal_mode=WAL&_busy_timeout=30000&_txlock=immediate&_stmt_cache_size=20&cache=shared"
  case "$backend" in
    sqlite)
      run_kine "kine v0.17.5 (sqlite; kine's defaults: WAL, synchronous=NORMAL)" "sqlite://$(dsn_for kine)?$kine_params&_synchronous=NORMAL"
      run_kine "kine v0.17.5 (sqlite; WAL, synchronous=FULL)" "sqlite://$(dsn_for kinefull)?$kine_params&_synchronous=FULL" ;;
    postgres) run_kine "kine v0.17.5 (postgres)" "$(dsn_for kine)" ;;
    mysql) run_kine "kine v0.17.5 (mysql)" "mysql://$(dsn_for kine)" ;;
  esac
else
  echo "kine: not installed (go install github.com/k3s-io/kine@v0.17.5); skipped"
fi

# etcd
if command -v etcd >/dev/null 2>&1; then
  port=$(free_port); peer=$(free_port)
  etcd --data-dir "$work/etcd" --listen-client-urls "http://127.0.0.1:$port" --advertise-client-urls "http://127.0.0.1:$port" \
    --listen-peer-urls "http://127.0.0.1:$peer" --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
    --initial-cluster "default=http://127.0.0.1:$peer" >"$work/etcd.log" 2>&1 & pids+=($!)
  wait_ready "127.0.0.1:$port"
  echo "etcd $(etcd --version | head -1 | awk '{print $3}') (bbolt, fsync per commit)"
  "$work/sqlkube" bench --log-level warn --endpoints "127.0.0.1:$port" --label etcd "$@"
else
  echo "etcd: not installed (apt-get install etcd-server); skipped"
fi
