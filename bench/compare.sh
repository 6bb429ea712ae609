#!/usr/bin/env bash
# Side-by-side: sqlkube, kine and etcd, each on a fresh datastore on this
# machine, measured in one run by two load generators: etcd's own
# `benchmark` tool (bench/etcdbenchmark) and the project's (`sqlkube
# bench`). Rounds alternate nothing but repeat everything; the summary at
# the end gives each row's median over the rounds and the ratios.
#
# Needs: etcd (Debian's etcd-server) for the etcd column, and kine
# (go install github.com/k3s-io/kine@v0.17.5). Peers that are missing are
# skipped with a line that says so. PostgreSQL and MySQL as in the README
# (127.0.0.1, users postgres and root); override with PG_DSN / MYSQL_DSN
# (server part only, e.g. postgres://postgres@127.0.0.1:5432 and
# root@tcp(127.0.0.1:3306)).
#
#   bench/compare.sh [sqlite|postgres|mysql|all] [--rounds N] [--quick] [-- extra `sqlkube bench` flags…]
#
# --quick runs a tenth of the requests (a smoke test of the script).
set -euo pipefail
cd "$(dirname "$0")/.."
backends=sqlite rounds=3 scale=1
case "${1:-}" in sqlite|postgres|mysql) backends="$1"; shift ;; all) backends="sqlite postgres mysql"; shift ;; esac
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds="$2"; shift 2 ;;
    --quick) scale=10; shift ;;
    --) shift; break ;;
    *) break ;;
  esac
done
extra=("$@")
pg="${PG_DSN:-postgres://postgres@127.0.0.1:5432}"
my="${MYSQL_DSN:-root@tcp(127.0.0.1:3306)}"

work="$(mktemp -d)"
pids=()
stop_all() { for p in "${pids[@]:-}"; do [ -n "$p" ] && { kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; }; done; pids=(); }
trap 'stop_all; rm -rf "$work"' EXIT
results="$work/results.tsv"
: >"$results"

echo "building sqlkube and etcd's benchmark tool"
go build -o "$work/sqlkube" ./cmd/sqlkube
(cd bench/etcdbenchmark && go build -o "$work/etcdbenchmark" .)

kine_bin="$(command -v kine || true)"
[ -z "$kine_bin" ] && [ -x "$(go env GOPATH)/bin/kine" ] && kine_bin="$(go env GOPATH)/bin/kine"
[ -z "$kine_bin" ] && echo "kine: not installed (go install github.com/k3s-io/kine@v0.17.5); skipped"
command -v etcd >/dev/null 2>&1 || echo "etcd: not installed (apt-get install etcd-server); skipped"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_ready() { for _ in $(seq 1 200); do ETCDCTL_API=3 etcdctl --endpoints "$1" endpoint health >/dev/null 2>&1 && return 0; sleep 0.1; done; echo "peer on $1 did not start" >&2; return 1; }

# fresh_db BACKEND NAME: drops and creates database NAME and prints the
# DSN that sqlkube takes for it (kine's is derived from it by kine_dsn).
fresh_db() {
  case "$1" in
    sqlite) rm -f "$work/$2.db"*; echo "sqlite://$work/$2.db" ;;
    postgres)
      psql "$pg/postgres" -qc "DROP DATABASE IF EXISTS $2" >/dev/null 2>&1
      psql "$pg/postgres" -qc "CREATE DATABASE $2" >/dev/null
      echo "$pg/$2?sslmode=disable" ;;
    mysql)
      mysql -h127.0.0.1 -uroot -e "DROP DATABASE IF EXISTS $2; CREATE DATABASE $2"
      echo "mysql://$my/$2" ;;
  esac
}

# record ROUND PEER WORKLOAD OPS_PER_SEC [P99]
record() { printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$backend" "$1" "$2" "$3" "$4" "${5:-}" >>"$results"; }

n() { echo $(( $1 / scale )); }

# etcd_tool ROUND PEER ENDPOINT WORKLOAD ARGS…: one run of etcd's benchmark
# tool, 50 clients over 10 connections, recorded as WORKLOAD.
etcd_tool() {
  local round="$1" peer="$2" ep="$3" wl="$4"; shift 4
  local out
  if ! out=$("$work/etcdbenchmark" --endpoints "$ep" --clients 50 --conns 10 "$@" 2>&1); then
    echo "  $wl: failed: $(echo "$out" | tail -1)"; record "$round" "$peer" "$wl" "failed"; return 0
  fi
  if echo "$out" | grep -q "Error distribution"; then
    echo "  etcd benchmark $wl: errors: $(echo "$out" | sed -n '/Error distribution/{n;p}' | cut -c1-160)"
    record "$round" "$peer" "$wl" "failed"; return 0
  fi
  local rps p99
  rps=$(echo "$out" | awk '/Requests\/sec:/ {print $2}')
  p99=$(echo "$out" | awk '/ 99% in / {print $3}')
  printf '  etcd benchmark %-12s %9.0f req/s  p99 %ss\n' "$wl" "$rps" "$p99"
  record "$round" "$peer" "$wl" "$rps" "${p99}s"
}

# measure ROUND PEER ENDPOINT ASCII_ONLY [WATCH_ENDPOINT]
measure() {
  local round="$1" peer="$2" ep="$3" ascii="$4" wep="${5:-}"
  if [ "$ascii" = yes ]; then
    echo "  etcd benchmark put/txn-put: skipped (binary keys, which kine on $backend rejects)"
  else
    etcd_tool "$round" "$peer" "$ep" put put --total "$(n 5000)" --val-size 256 --sequential-keys --key-space-size 1000000
    etcd_tool "$round" "$peer" "$ep" txn-put txn-put --total "$(n 5000)" --val-size 256 --key-space-size 1000000
  fi
  local out
  out=$("$work/sqlkube" bench --log-level warn --endpoints "$ep" --prefix /bench/ --keep-keys --label "$peer" \
    ${wep:+--watch-endpoints "$wep"} --duration "$( [ "$scale" = 1 ] && echo 4s || echo 1s)" "${extra[@]}")
  echo "$out" | sed 's/^/  sqlkube bench /'
  echo "$out" | awk -F'\t' '{split($2, f, " +"); print f[1], f[2], f[7]}' | while read -r wl ops p99; do
    record "$round" "$peer" "gen-$wl" "$ops" "$p99"
  done
  local c100 c500
  c100=$(ETCDCTL_API=3 etcdctl --endpoints "$ep" get /bench/seed/00000000 /bench/seed/00000100 --keys-only | grep -c .)
  c500=$(ETCDCTL_API=3 etcdctl --endpoints "$ep" get /bench/seed/00000000 /bench/seed/00000500 --keys-only | grep -c .)
  if [ "$c100" != 100 ] || [ "$c500" != 500 ]; then
    echo "  the seeded keys are not there ($c100 and $c500 where 100 and 500 were expected); ranges skipped"; return 0
  fi
  etcd_tool "$round" "$peer" "$ep" range-100 range /bench/seed/00000000 /bench/seed/00000100 --total "$(n 5000)"
  etcd_tool "$round" "$peer" "$ep" range-500 range /bench/seed/00000000 /bench/seed/00000500 --total "$(n 2000)"
  etcd_tool "$round" "$peer" "$ep" count-only range /bench/seed/ /bench/seed0 --count-only --total "$(n 10000)"
  etcd_tool "$round" "$peer" "$ep" get range /bench/seed/00000042 --total "$(n 20000)"
}

# start_sqlkube and start_kine start a peer on DSN and set ep to its
# endpoint. They run in this shell (not in $(…)), so that pids, which
# stop_all stops, knows the process.
start_sqlkube() { # DSN
  local port; port=$(free_port)
  "$work/sqlkube" etcd --log-level warn --listen-address "127.0.0.1:$port" --datastore "$1" --compaction-interval 0 \
    >>"$work/sqlkube.log" 2>&1 & pids+=($!)
  wait_ready "127.0.0.1:$port"; ep="127.0.0.1:$port"
}
start_kine() { # DSN
  local port mport; port=$(free_port); mport=$(free_port)
  "$kine_bin" --listen-address "127.0.0.1:$port" --metrics-bind-address "127.0.0.1:$mport" --endpoint "$1" \
    >>"$work/kine.log" 2>&1 & pids+=($!)
  wait_ready "127.0.0.1:$port"; ep="127.0.0.1:$port"
}
kine_dsn() { # sqlkube DSN → kine's
  case "$backend" in
    sqlite)
      local p="_journal_mode=WAL&_busy_timeout=30000&_txlock=immediate&_stmt_cache_size=20&cache=shared"
      echo "$1?$p&_synchronous=$2" ;;
    *) echo "$1" ;;
  esac
}

for backend in $backends; do
  for round in $(seq 1 "$rounds"); do
    echo "== $backend, round $round of $rounds"
    echo "sqlkube ($backend$( [ "$backend" = sqlite ] && echo '; WAL, synchronous=FULL'))"
    dsn=$(fresh_db "$backend" bench_sqlkube)
    wep=""
    if [ "$backend" != sqlite ]; then start_sqlkube "$dsn"; wep=$ep; echo "  (watch workload through a second sqlkube on the same database)"; fi
    start_sqlkube "$dsn"
    measure "$round" sqlkube "$ep" no "$wep"
    stop_all

    if [ -n "$kine_bin" ]; then
      if [ "$backend" = sqlite ]; then
        echo "kine v0.17.5 (sqlite; kine's defaults: WAL, synchronous=NORMAL)"
        start_kine "$(kine_dsn "$(fresh_db sqlite bench_kine)" NORMAL)"
        measure "$round" kine "$ep" no; stop_all
        echo "kine v0.17.5 (sqlite; WAL, synchronous=FULL)"
        start_kine "$(kine_dsn "$(fresh_db sqlite bench_kinefull)" FULL)"
        measure "$round" kine-full "$ep" no; stop_all
      else
        echo "kine v0.17.5 ($backend; watch through a second kine on the same database)"
        dsn=$(kine_dsn "$(fresh_db "$backend" bench_kine)")
        start_kine "$dsn"; wep=$ep; start_kine "$dsn"
        measure "$round" kine "$ep" yes "$wep"; stop_all
      fi
    fi

    if [ "$backend" = sqlite ] && command -v etcd >/dev/null 2>&1; then
      port=$(free_port); peer=$(free_port); rm -rf "$work/etcd"
      etcd --data-dir "$work/etcd" --listen-client-urls "http://127.0.0.1:$port" --advertise-client-urls "http://127.0.0.1:$port" \
        --listen-peer-urls "http://127.0.0.1:$peer" --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
        --initial-cluster "default=http://127.0.0.1:$peer" >"$work/etcd.log" 2>&1 & pids+=($!)
      wait_ready "127.0.0.1:$port"
      echo "etcd $(etcd --version | head -1 | awk '{print $3}') (bbolt, fsync per commit)"
      measure "$round" etcd "127.0.0.1:$port" no
      stop_all
    fi
  done
done

echo
echo "== medians over $rounds round(s), requests/s (p99 of the median run's latency where the tool gives one)"
python3 - "$results" <<'EOF'
import sys, statistics, collections
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    b, rnd, peer, wl, ops, p99 = line.rstrip("\n").split("\t")
    if ops in ("failed", ""):
        rows.setdefault((b, wl, peer), [])
        continue
    rows[(b, wl, peer)].append((float(ops), p99))
order = ["put", "txn-put", "range-100", "range-500", "count-only", "get",
         "gen-create", "gen-update", "gen-get", "gen-list", "gen-watch"]
for b in dict.fromkeys(k[0] for k in rows):
    peers = [p for p in ["sqlkube", "kine", "kine-full", "etcd"] if any(k[0] == b and k[2] == p for k in rows)]
    ref = "etcd" if "etcd" in peers else "kine"
    print(f"\n{b}\n")
    head = ["workload"] + peers + [f"sqlkube ÷ {p}" for p in peers if p != "sqlkube"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for wl in order:
        cells, med = [wl], {}
        for p in peers:
            v = rows.get((b, wl, p))
            if v is None:
                cells.append("–"); continue
            if not v:
                cells.append("failed"); continue
            m = statistics.median(x for x, _ in v)
            med[p] = m
            p99 = min(v, key=lambda r: abs(r[0] - m))[1]
            note = f" (p99 {p99})" if wl == "gen-watch" and p99 else ""
            cells.append(f"{m:,.0f}{note}")
        for p in peers:
            if p == "sqlkube":
                continue
            cells.append(f"{med['sqlkube']/med[p]:.2f}×" if "sqlkube" in med and med.get(p) else "–")
        print("| " + " | ".join(cells) + " |")
EOF
