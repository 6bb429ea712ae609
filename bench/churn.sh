#!/usr/bin/env bash
# The store under churn (issue: the SQL store at etcd's speed): `sqlkube
# etcd` on a new SQLite database with automatic compaction on (every 5
# minutes, keeping 1,000 revisions: the defaults), driven by `sqlkube bench
# churn` (creates, updates and deletes of 1 KiB values over 10,000 key
# slots, 32 in flight) for DURATION, one line per minute. After each
# minute the script also prints the database's files on disk (main file
# and WAL).
#
#   bench/churn.sh [DURATION (default 30m)] [-- extra `sqlkube bench churn` flags…]
set -euo pipefail
cd "$(dirname "$0")/.."
duration="${1:-30m}"; shift || true
[ "${1:-}" = "--" ] && shift
work="$(mktemp -d)"
pid=""
trap '[ -n "$pid" ] && { kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; }; [ -n "${sampler:-}" ] && kill "$sampler" 2>/dev/null; rm -rf "$work"' EXIT
go build -o "$work/sqlkube" ./cmd/sqlkube
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$work/sqlkube" etcd --log-level warn --listen-address "127.0.0.1:$port" --datastore "sqlite://$work/db/state.db" >"$work/server.log" 2>&1 &
pid=$!
for _ in $(seq 1 100); do ETCDCTL_API=3 etcdctl --endpoints "127.0.0.1:$port" endpoint health >/dev/null 2>&1 && break; sleep 0.1; done
( while sleep 60; do printf '        on disk: %s\n' "$(du -b "$work"/db/state.db* | awk '{printf "%s %.1f MiB  ", $2, $1/1048576}' | sed "s#$work/db/##g")"; done ) &
sampler=$!
"$work/sqlkube" bench churn --endpoints "127.0.0.1:$port" --duration "$duration" "$@"
