#!/usr/bin/env bash
# run.sh runs Kubernetes' conformance suite against a two-node sqlkube
# cluster on this host, offline, as root (`make conformance`):
#   1. builds e2e.test, ginkgo and kubectl at go.mod's Kubernetes version
#      (build.sh) and the images the suite runs (images/build.sh), and
#      sqlkube itself;
#   2. starts the cluster in network namespaces of its own on a private
#      LAN (a bridge in a namespace, this host's leg at .1): `sqlkube
#      server` with its host node in one, a node joined with `sqlkube
#      node --token` in the other, each with its own containerd, kubelet
#      root and cgroups, and imports the images into both; the images are
#      also served by a registry on this host's LAN address (`sqlkube
#      registry serve`), which both nodes' containerd use for every
#      registry the images name (--registry-config-dir), so the tests that
#      pull with imagePullPolicy Always pull, offline;
#   3. runs the [Conformance] tests as kind's CI does: the non-[Serial]
#      ones in parallel (ginkgo --procs), then the [Serial] ones alone,
#      with --provider=local, no retries;
#   4. writes docs/conformance.md (report.sh) and exits non-zero if any
#      test failed;
#   5. removes the nodes, their namespaces and everything they imported.
#
# With TENANT=1 the cluster is a tenant of `sqlkube host` instead (issue
# 42's acceptance): the host runs in the first namespace with its tenants
# in a PostgreSQL database of their own on this host's server (reached
# over its Unix socket), IDLE_TENANTS idle tenants beside the one under
# test, and both nodes join that tenant with its bootstrap token.
#
#   TENANT=1 run the suite against a tenant of a host
#   IDLE_TENANTS  idle tenants beside it (default 20)
#   PGHOST   PostgreSQL's socket directory (default /var/run/postgresql)
#   PROCS    parallel ginkgo processes (default 4)
#   FOCUS    ginkgo focus regexp (default \[Conformance\])
#   KEEP=1   leave the cluster running at the end (for debugging)
#   ALPINE_MINIROOTFS  Alpine's minirootfs release tarball, for kitten
#            (images/README.md: without it the image-volume test fails)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
[ "$(id -u)" = 0 ] || { echo "make conformance: run as root (it starts nodes: containers, mounts, network namespaces)" >&2; exit 2; }
PROCS=${PROCS:-4}
FOCUS=${FOCUS:-'\[Conformance\]'}
version=$(go list -m -f '{{.Version}}' k8s.io/kubernetes)
cache=${CONFORMANCE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sqlkube-conformance}/$version
started=$(date -u +%s)
# The commit this run builds (the checkout may move on while it runs).
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
git status --porcelain 2>/dev/null | grep -q . && commit="$commit (with uncommitted changes)"

bin=$(./conformance/build.sh)
imagedir=$cache/archives
./conformance/images/build.sh "$imagedir" >&2
make build >&2
sqlkube=$root/bin/sqlkube

run=$(mktemp -d "${TMPDIR:-/tmp}/sqlkube-conformance-XXXXXX")
id=$(head -c3 /dev/urandom | od -An -tx1 | tr -d ' \n')
subnet=10.253.$((16#${id:0:2}))
lan=sqkc-$id-lan
nsA=sqkc-$id-a
nsB=sqkc-$id-b
ipA=$subnet.2
ipB=$subnet.3
pids=()
# TENANT=1: the host's directory and database, the tenants' names (their
# PostgreSQL roles are the server's: names of this run's own).
tenant=${TENANT:-}
pgsock=${PGHOST:-/var/run/postgresql}
db=sqkc_$id
nodeA=$run/server
[ "$tenant" = 1 ] && nodeA=$run/node-a
# The Job tests' pods mount hostPath /tmp/job-e2e/<random> (upstream's
# fixture), which the kubelet makes on this host: removed at the end when
# this run made it.
jobdir=/tmp/job-e2e
jobdir_ours=
[ -e "$jobdir" ] || jobdir_ours=1

cleanup() {
  local rc=$?
  if [ "${KEEP:-}" = 1 ]; then
    echo "KEEP=1: the cluster stays up; KUBECONFIG=$run/server/kubeconfig; remove it with: kill ${pids[*]}; ip netns del $nsA; ip netns del $nsB; ip netns del $lan" >&2
    exit $rc
  fi
  rm -rf "$cache/reports"
  cp -r "$run"/reports "$cache/" 2>/dev/null || true
  cp "$run"/*.log "$cache/" 2>/dev/null && echo "conformance: logs and JUnit reports in $cache" >&2
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  # Each reset in its node's network namespace: reset removes the
  # kubelet's and kube-proxy's rules of the namespace it runs in, whoever
  # wrote them (docs/reset.md), and in this host's they may be another
  # node's.
  for pair in "$nsA:$nodeA" "$nsB:$run/node"; do
    ns=${pair%%:*} dir=${pair#*:}
    [ -d "$dir" ] && [ -e "/run/netns/$ns" ] && nsenter --net="/run/netns/$ns" -- "$sqlkube" reset --data-dir "$dir" --purge >&2 || true
  done
  for ns in "$nsA" "$nsB" "$lan"; do ip netns del "$ns" 2>/dev/null || true; done
  ip link del "sqkc${id}t" 2>/dev/null || true
  if [ "$tenant" = 1 ]; then
    psql -h "$pgsock" -U postgres -qc "DROP DATABASE IF EXISTS $db WITH (FORCE)" >&2 || true
    for role in $(psql -h "$pgsock" -U postgres -Atc "SELECT rolname FROM pg_roles WHERE rolname LIKE 'tenant%$id%'" 2>/dev/null); do
      psql -h "$pgsock" -U postgres -qc "DROP ROLE \"$role\"" >&2 || true
    done
  fi
  [ -n "$jobdir_ours" ] && rm -rf "$jobdir"
  rm -rf "$run"
  exit $rc
}
trap cleanup EXIT INT TERM

# The LAN: a bridge in its own namespace, this host at .1, a node per
# namespace at .2 and .3.
ip netns add "$lan"
ip netns exec "$lan" ip link add br0 type bridge
ip netns exec "$lan" ip link set br0 up
ip link add "sqkc${id}t" type veth peer name "sqkc${id}u"
ip link set "sqkc${id}u" netns "$lan"
ip netns exec "$lan" ip link set "sqkc${id}u" master br0 up
ip addr add "$subnet.1/24" dev "sqkc${id}t"
ip link set "sqkc${id}t" up
i=0
for pair in "$nsA:$ipA" "$nsB:$ipB"; do
  ns=${pair%%:*} addr=${pair#*:}
  ip netns add "$ns"
  ip link add "sqkc${id}${i}h" type veth peer name "sqkc${id}${i}p"
  ip link set "sqkc${id}${i}h" netns "$lan"
  ip netns exec "$lan" ip link set "sqkc${id}${i}h" master br0 up
  ip link set "sqkc${id}${i}p" netns "$ns"
  ip netns exec "$ns" ip link set lo up
  ip netns exec "$ns" ip link set "sqkc${id}${i}p" name eth0
  ip netns exec "$ns" ip addr add "$addr/24" dev eth0
  ip netns exec "$ns" ip link set eth0 up
  ip netns exec "$ns" ip route add default via "$subnet.1"
  i=$((i + 1))
done

# The registry: the archives served on this host's LAN address, a port
# of the OS's choosing; each registry the images name (build.sh --list)
# gets a hosts.toml that makes it the only server of that registry for
# the nodes' containerd (plain HTTP, pull and resolve): nothing comes from
# the internet, and an image missing from the archives fails to pull.
# The images are imported too (below): pulls resolve tags at the registry
# but find the content present.
"$sqlkube" registry serve --listen "$subnet.1:0" --log-format json "$imagedir"/*.tar >"$run/registry.out" 2>"$run/registry.log" &
registry_pid=$!
pids+=("$registry_pid")
registry=
for _ in $(seq 1 60); do
  registry=$(sed -n 's/^sqlkube registry: serving [0-9]* images on //p' "$run/registry.out" 2>/dev/null || true)
  [ -n "$registry" ] && break
  kill -0 "$registry_pid" 2>/dev/null || break
  sleep 1
done
[ -n "$registry" ] || { echo "conformance: the registry did not start:" >&2; cat "$run/registry.log" >&2; exit 1; }
registries=$run/registries
for host in $(./conformance/images/build.sh --list | awk '{ sub("/.*", "", $2); print $2 }' | sort -u); do
  mkdir -p "$registries/$host"
  printf 'server = "%s"\ncapabilities = ["pull", "resolve"]\n' "$registry" >"$registries/$host/hosts.toml"
done
echo "conformance: registry $registry serves $(ls "$imagedir"/*.tar | wc -l) archives for $(ls "$registries" | tr '\n' ' ')" >&2

mkdir -p "$run/server" "$run/node"
waitReady() {
  for _ in $(seq 1 120); do
    [ -f "$KUBECONFIG" ] && "$bin/kubectl" get --raw /readyz >/dev/null 2>&1 && break
    sleep 1
  done
  "$bin/kubectl" get --raw /readyz >/dev/null
}
if [ "$tenant" = 1 ]; then
  # The host, its tenants in a database of their own, the tenant under
  # test beside the idle ones, and its first node beside the host.
  psql -h "$pgsock" -U postgres -qc "CREATE DATABASE $db" >&2
  nsenter --net="/run/netns/$nsA" -- "$sqlkube" host --data-dir "$run/server" --bind-address "$ipA" \
    --tenant-bind-address "$ipA" --advertise-address "$ipA" \
    --tenant-datastore "postgres://postgres@/$db?host=$pgsock" --log-format json >"$run/server.log" 2>&1 &
  pids+=($!)
  export KUBECONFIG=$run/server/kubeconfig
  waitReady
  for i in $(seq 1 "${IDLE_TENANTS:-20}"); do
    "$sqlkube" tenant create "idle-$id-$i" --data-dir "$run/server" --out "$run/idle-$i.kubeconfig" >&2
  done
  "$sqlkube" tenant create "conformance-$id" --data-dir "$run/server" --out "$run/tenant.kubeconfig" >&2
  "$sqlkube" tenant list --data-dir "$run/server" >&2
  export KUBECONFIG=$run/tenant.kubeconfig
  waitReady
  mkdir -p "$nodeA"
  read -r -a join <<<"$("$sqlkube" token create --kubeconfig "$KUBECONFIG" --print-join-command)"
  nsenter --net="/run/netns/$nsA" -- "$sqlkube" node "${join[@]:2}" --data-dir "$nodeA" --node-name conformance-a --node-ip "$ipA" \
    --registry-config-dir "$registries" --log-format json >"$run/node-a.log" 2>&1 &
  pids+=($!)
else
  # The server and its host node.
  nsenter --net="/run/netns/$nsA" -- "$sqlkube" server --data-dir "$run/server" --node-name conformance-a --node-ip "$ipA" \
    --bind-address "$ipA" --registry-config-dir "$registries" --log-format json >"$run/server.log" 2>&1 &
  pids+=($!)
  export KUBECONFIG=$run/server/kubeconfig
  waitReady
  read -r -a join <<<"$(nsenter --net="/run/netns/$nsA" -- "$sqlkube" token create --data-dir "$run/server" --print-join-command)"
fi

# The second node, joined with a bootstrap token.
nsenter --net="/run/netns/$nsB" -- "$sqlkube" node "${join[@]:2}" --data-dir "$run/node" --node-name conformance-b --node-ip "$ipB" \
  --registry-config-dir "$registries" --log-format json >"$run/node.log" 2>&1 &
pids+=($!)
# kubectl wait fails at once on a Node that is not registered yet.
for _ in $(seq 1 300); do
  "$bin/kubectl" get node conformance-a conformance-b >/dev/null 2>&1 && break
  sleep 1
done
"$bin/kubectl" wait --for=condition=Ready node/conformance-a node/conformance-b --timeout=300s >&2

# The images, into both nodes' containerd.
"$sqlkube" images import --data-dir "$nodeA" "$imagedir"/*.tar >&2
"$sqlkube" images import --data-dir "$run/node" "$imagedir"/*.tar >&2

# The suite: parallel tests, then serial ones; JUnit reports merged by
# report.sh.
reports=$run/reports
mkdir -p "$reports/parallel" "$reports/serial"
# e2e.test's own temporary files (kuberc tests, kubectl proxy's socket
# directory) go into the run's directory, removed at the end.
mkdir -p "$run/tmp"
export TMPDIR=$run/tmp
common=(--provider=local --kubeconfig="$KUBECONFIG" --kubectl-path="$bin/kubectl" --ginkgo.timeout=24h
  --dump-logs-on-failure=false --report-dir)
rc=0
"$bin/ginkgo" --procs="$PROCS" --focus="$FOCUS" --skip='\[Serial\]' --timeout=24h --no-color \
  "$bin/e2e.test" -- "${common[@]}" "$reports/parallel" >"$run/parallel.log" 2>&1 || rc=1
"$bin/ginkgo" --focus="\[Serial\].*$FOCUS|$FOCUS.*\[Serial\]" --timeout=24h --no-color \
  "$bin/e2e.test" -- "${common[@]}" "$reports/serial" >"$run/serial.log" 2>&1 || rc=1

target=
[ "$tenant" = 1 ] && target="a tenant of \`sqlkube host\`, its data on PostgreSQL, beside ${IDLE_TENANTS:-20} idle tenants; both nodes joined to it"
./conformance/report.sh "$version" "$started" "$reports" "$run" "$commit" "$target" >docs/conformance.md
echo "conformance: report in docs/conformance.md" >&2
exit $rc
