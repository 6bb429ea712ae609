#!/usr/bin/env bash
# make test-compose: docker-compose.yaml run for real. It brings the stack
# up (PostgreSQL, two sqlkube servers on it, haproxy in front, a
# simulated node), checks it with kubectl, and takes it down again:
#
#   1. kubectl through lb: the node is Ready, a Deployment rolls out, and
#      lb's log shows kubectl's connections served by both servers;
#      server-b's own kubeconfig (127.0.0.1:6444) sees the same objects.
#   2. server-b stopped, then server-a stopped (the other one started
#      again in between): kubectl through lb still reads and writes, and
#      a Deployment scaled up meanwhile rolls out (controllers and
#      scheduler fail over).
#   3. No service exited on its own and was restarted by Docker, at the
#      start or later (a restart can hide a crash from `up --wait`).
#   4. docker compose down -v leaves no container, network or volume of
#      the project, and compose/server-*/ hold only their .gitignore.
#
# It uses what it finds and makes what is missing: a Docker daemon (as
# root, dockerd is started for the run and stopped after it), the compose
# plugin (built from the Go module proxy into ~/.docker/cli-plugins), and
# with STANDINS=1 (the default) the stand-in images of
# compose/standins/build.sh, mapped in by compose/standins.yaml.
# STANDINS=0 runs the upstream images. docs/compose.md has the figures.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

STANDINS=${STANDINS:-1}
COMPOSE_VERSION=${COMPOSE_VERSION:-v2.40.3}
# Compose builds with its own BuildKit client; it needs no buildx.
export COMPOSE_BAKE=false
# The project's name is the compose file's (sqlkube).
project=sqlkube
files=(-f docker-compose.yaml)
if [ "$STANDINS" = 1 ]; then
	files+=(-f compose/standins.yaml)
fi
dc() { docker compose "${files[@]}" "$@"; }

start=$(date +%s.%N)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sqlkube-compose-test.XXXXXX")
log() { printf '%s  %s\n' "$(date +%T)" "$*"; }
fail() {
	log "FAIL: $*"
	exit 1
}
secs() { awk -v a="$1" -v b="${2:-$(date +%s.%N)}" 'BEGIN { printf "%.1f", b - a }'; }
figures=()
figure() {
	figures+=("$(printf '%-34s %s' "$1" "$2")")
	log "$1: $2"
}

# State the trap undoes, in reverse.
dockerd_pid=""
made_docker0=false
made_netns=false
stack_up=false
owns_data=false
chowned=()
cleanup() {
	local rc=$?
	set +e
	if $stack_up; then
		if [ "$rc" != 0 ]; then
			restarts | while read -r line; do log "$line"; done
			log "the stack's last log lines:"
			dc logs --no-color --tail 30 2>&1 | sed 's/^/    /'
		fi
		dc down -v --remove-orphans --timeout 30 >/dev/null 2>&1
	fi
	if $owns_data; then
		clean_data_dirs
	fi
	for d in "${chowned[@]}"; do
		chown "${d#*=}" "${d%%=*}"
	done
	if [ -n "$dockerd_pid" ]; then
		if [ "$rc" != 0 ] && ! $stack_up; then
			log "dockerd's last log lines:"
			tail -20 "$tmp/dockerd.log" | sed 's/^/    /'
		fi
		kill "$dockerd_pid" 2>/dev/null
		for _ in $(seq 60); do
			kill -0 "$dockerd_pid" 2>/dev/null || break
			sleep 0.5
		done
		# dockerd leaves its default bridge and a mount of the host's
		# network namespace behind.
		if kill -0 "$dockerd_pid" 2>/dev/null; then
			log "the dockerd this run started (pid $dockerd_pid) has not stopped in 30 s"
		else
			if $made_docker0; then ip link delete docker0 2>/dev/null; fi
			if $made_netns; then umount /run/docker/netns/default 2>/dev/null; fi
			log "stopped the dockerd this run started"
		fi
	fi
	rm -rf "$tmp"
	if [ "$rc" = 0 ]; then
		log "PASS in $(secs "$start") s"
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# restarts: the services Docker restarted (restart: unless-stopped) after
# they exited on their own, with sqlkube's one-line reason. A server that
# exits while the stack starts is a fault even when its restart hides it
# from `up --wait`.
restarts() {
	local svc id n
	for svc in $(dc config --services); do
		for id in $(dc ps -a -q "$svc"); do
			n=$(docker inspect -f '{{.RestartCount}}' "$id")
			if [ "$n" != 0 ]; then
				echo "$svc exited and was restarted $n time(s): $(dc logs --no-color --no-log-prefix "$svc" 2>&1 | grep -E '^sqlkube: ' | tail -1)"
			fi
		done
	done
}

# clean_data_dirs removes what the servers wrote into compose/server-*/
# (their data directories, bind-mounted), keeping the .gitignore.
clean_data_dirs() {
	local d
	for d in compose/server-a compose/server-b; do
		find "$d" -mindepth 1 -maxdepth 1 ! -name .gitignore -exec rm -rf {} +
	done
}

# --- tools -----------------------------------------------------------------

command -v docker >/dev/null || fail "no docker CLI on PATH"
command -v kubectl >/dev/null || fail "no kubectl on PATH"

# A Docker daemon: the one running, or one started for this run (root
# only). It gets no iptables rules and leaves IP forwarding alone, so the
# host's firewall and forwarding (which other tests on a shared machine
# use) are untouched: containers reach each other on their network and
# the host reaches them through docker-proxy's published ports, and
# builds that need the outside use the host's network. It runs at nice
# 15, with everything it starts, builds included.
if ! docker info >/dev/null 2>&1; then
	if [ "$(id -u)" != 0 ] || ! command -v dockerd >/dev/null; then
		fail "no Docker daemon, and this user cannot start one (Debian: apt-get install docker.io, as root)"
	fi
	ip link show docker0 >/dev/null 2>&1 || made_docker0=true
	mountpoint -q /run/docker/netns/default 2>/dev/null || made_netns=true
	log "starting dockerd (storage driver ${DOCKERD_STORAGE_DRIVER:-overlay2}; log in $tmp/dockerd.log)"
	setsid nice -n 15 dockerd --storage-driver="${DOCKERD_STORAGE_DRIVER:-overlay2}" \
		--iptables=false --ip-forward=false --ip-masq=false >"$tmp/dockerd.log" 2>&1 &
	dockerd_pid=$!
	for _ in $(seq 60); do
		docker info >/dev/null 2>&1 && break
		kill -0 "$dockerd_pid" 2>/dev/null || fail "dockerd exited: $(tail -3 "$tmp/dockerd.log")"
		sleep 0.5
	done
	docker info >/dev/null 2>&1 || fail "dockerd did not answer in 30 s"
fi
log "docker: client $(docker version -f '{{.Client.Version}}'), daemon $(docker version -f '{{.Server.Version}}'), $(docker info -f '{{.Driver}}')"

# The compose plugin: v2 builds from the Go module proxy. Its go.mod has
# exclude directives, so `go install …@version` refuses it: it is built
# as the main module, from a copy of its source.
if ! docker compose version >/dev/null 2>&1; then
	command -v go >/dev/null || fail "no docker compose plugin, and no Go to build it"
	t=$(date +%s.%N)
	log "building docker compose $COMPOSE_VERSION into ~/.docker/cli-plugins (a few minutes)"
	src=$(GOFLAGS= go mod download -json "github.com/docker/compose/v2@$COMPOSE_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
	cp -r "$src" "$tmp/compose-src"
	chmod -R u+w "$tmp/compose-src"
	mkdir -p ~/.docker/cli-plugins
	(cd "$tmp/compose-src" && GOFLAGS= CGO_ENABLED=0 nice -n 15 go build -trimpath \
		-ldflags "-s -w -X github.com/docker/compose/v2/internal.Version=$COMPOSE_VERSION" \
		-o ~/.docker/cli-plugins/docker-compose ./cmd)
	rm -rf "$tmp/compose-src"
	figure "compose plugin build" "$(secs "$t") s"
fi
log "$(docker compose version)"

if [ "$STANDINS" = 1 ]; then
	missing=false
	for i in sqlkube-standin/debian:bookworm sqlkube-standin/base-nonroot:bookworm \
		sqlkube-standin/postgres:15-bookworm sqlkube-standin/haproxy:2.6-bookworm \
		sqlkube-standin/golang:1.26-bookworm; do
		docker image inspect "$i" >/dev/null 2>&1 || missing=true
	done
	if $missing; then
		t=$(date +%s.%N)
		log "building the stand-in images (compose/standins/build.sh)"
		if ! nice -n 15 compose/standins/build.sh >"$tmp/standins.log" 2>&1; then
			tail -30 "$tmp/standins.log"
			fail "the stand-in images do not build"
		fi
		grep '^== .* in ' "$tmp/standins.log" | sed 's/^/    /'
		figure "stand-in images build" "$(secs "$t") s"
	fi
fi

# --- preconditions -----------------------------------------------------------

[ -z "$(dc ps -a -q 2>/dev/null)" ] ||
	fail "a compose project '$project' is already here: take it down first (docker compose down -v)"
for port in 6443 6444; do
	if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
		fail "127.0.0.1:$port is in use: the stack publishes it"
	fi
done
for d in compose/server-a compose/server-b; do
	[ -z "$(find "$d" -mindepth 1 -maxdepth 1 ! -name .gitignore)" ] ||
		fail "$d holds a data directory of an earlier stack: remove it (keep the .gitignore) first"
done

owns_data=true

# The servers run as SQLKUBE_UID:SQLKUBE_GID and write their data into
# compose/server-*/. As root, they run as 65532 (the image's user), and
# those directories are theirs for the run.
if [ "$(id -u)" = 0 ]; then
	export SQLKUBE_UID=${SQLKUBE_UID:-65532} SQLKUBE_GID=${SQLKUBE_GID:-65532}
	for d in compose/server-a compose/server-b; do
		chowned+=("$d=$(stat -c %u:%g "$d")")
		chown "$SQLKUBE_UID:$SQLKUBE_GID" "$d"
	done
else
	export SQLKUBE_UID=${SQLKUBE_UID:-$(id -u)} SQLKUBE_GID=${SQLKUBE_GID:-$(id -g)}
fi

# --- build and up ----------------------------------------------------------

# server-a, server-b and node all run sqlkube:dev, built from this tree:
# built once here (as server-a's), `up` finds it.
old_image=$(docker image inspect -f '{{.Id}}' sqlkube:dev 2>/dev/null || true)
t=$(date +%s.%N)
log "building sqlkube:dev from this tree (build log: $tmp/build.log)"
if ! nice -n 15 docker compose "${files[@]}" build --progress plain server-a >"$tmp/build.log" 2>&1; then
	tail -30 "$tmp/build.log"
	fail "the image does not build"
fi
figure "sqlkube image build" "$(secs "$t") s"
new_image=$(docker image inspect -f '{{.Id}}' sqlkube:dev)
if [ -n "$old_image" ] && [ "$old_image" != "$new_image" ]; then
	docker image rm "$old_image" >/dev/null 2>&1 || true
fi

t=$(date +%s.%N)
stack_up=true
log "docker compose up -d --wait"
if ! dc up -d --wait --wait-timeout 300 2>&1 | sed 's/^/    /'; then
	fail "the stack did not become healthy"
fi
figure "time to healthy (up --wait)" "$(secs "$t") s"
dc ps --format '{{.Service}}\t{{.Status}}' | sed 's/^/    /'

r=$(restarts)
[ -z "$r" ] || fail "$r"

# --- checks ----------------------------------------------------------------

lbk() { kubectl --kubeconfig compose/server-a/kubeconfig --request-timeout=20s "$@"; }
bk() { kubectl --kubeconfig compose/server-b/kubeconfig --request-timeout=20s "$@"; }

# wait_for SECONDS WHAT CMD...: runs CMD until it succeeds.
wait_for() {
	local n=$1 what=$2 i
	shift 2
	for i in $(seq "$n"); do
		"$@" >/dev/null 2>&1 && return 0
		sleep 1
	done
	fail "$what: not after $n s"
}

t=$(date +%s.%N)
[ "$(lbk get --raw /readyz)" = ok ] || fail "readyz through lb"
wait_for 60 "a node through lb" sh -c "kubectl --kubeconfig compose/server-a/kubeconfig get nodes -o name | grep -q ."
node=$(lbk get nodes -o name | head -1)
lbk wait --for=condition=Ready "$node" --timeout=60s >/dev/null
log "ok: through lb, $node is Ready"
lbk create deployment web --image=registry.invalid/web:1 --replicas=2 >/dev/null
lbk rollout status deployment/web --timeout=120s >/dev/null || fail "deployment web did not roll out"
figure "Deployment of 2, create to available" "$(secs "$t") s (with the node's wait)"

# Each kubectl is a new connection, and lb balances connections round
# robin: its log (option tcplog) names the server of each one.
for i in $(seq 8); do
	lbk get deployment web -o name >/dev/null || fail "kubectl get through lb, try $i"
done
served() { dc logs --no-color --no-log-prefix lb 2>/dev/null | grep -cE "kube-apiserver sqlkube/$1 [0-9/-]+ [1-9][0-9]* " || true; }
a=$(served server-a)
b=$(served server-b)
log "lb's log: $a connections served by server-a, $b by server-b"
[ "$a" -gt 0 ] && [ "$b" -gt 0 ] || fail "kubectl through lb did not reach both servers (server-a $a, server-b $b)"
log "ok: kubectl through lb is served by both servers"
[ "$(bk get deployment web -o jsonpath='{.status.availableReplicas}')" = 2 ] ||
	fail "server-b's own kubeconfig (127.0.0.1:6444) does not see deployment web available"
log "ok: server-b alone (127.0.0.1:6444) sees the same Deployment"

# leader: the server whose controller manager holds the lease (its
# holder is the container's host name, the container id's prefix).
leader() {
	local h s
	h=$(lbk -n kube-system get lease kube-controller-manager -o jsonpath='{.spec.holderIdentity}' 2>/dev/null)
	h=${h%%_*}
	for s in server-a server-b; do
		if [ -n "$h" ] && [[ "$(dc ps -a -q "$s")" == "$h"* ]]; then
			echo "$s"
			return
		fi
	done
	echo "unknown (${h:-none})"
}

healthy() { [ "$(docker inspect -f '{{.State.Health.Status}}' "$(dc ps -q "$1")" 2>/dev/null)" = healthy ]; }

# stopped SERVER REPLICAS: SERVER stopped, kubectl through lb reads and
# writes, and deployment web scaled to REPLICAS rolls out on the other
# server's controllers and scheduler. Then SERVER starts again.
stopped() {
	local s=$1 n=$2 t i other
	other=server-a
	[ "$s" = server-a ] && other=server-b
	log "controller manager's leader: $(leader)"
	t=$(date +%s.%N)
	dc stop "$s" 2>&1 | sed 's/^/    /' || fail "docker compose stop $s"
	figure "stop $s" "$(secs "$t") s"
	t=$(date +%s.%N)
	for i in $(seq 5); do
		lbk get deployment web -o name >/dev/null || fail "$s stopped: kubectl get through lb, try $i"
	done
	lbk create configmap "while-$s-stopped" --from-literal=by="$other" >/dev/null ||
		fail "$s stopped: kubectl create through lb"
	figure "$s stopped: 5 gets and a create" "$(secs "$t") s"
	t=$(date +%s.%N)
	lbk scale deployment web --replicas="$n" >/dev/null
	lbk rollout status deployment/web --timeout=120s >/dev/null ||
		fail "$s stopped: deployment web scaled to $n did not roll out"
	figure "$s stopped: scale to $n, available" "$(secs "$t") s"
	log "controller manager's leader: $(leader)"
	if [ "$other" = server-b ]; then
		[ "$(bk get configmap "while-$s-stopped" -o jsonpath='{.data.by}')" = "$other" ] ||
			fail "server-b alone does not see the ConfigMap"
	fi
	log "ok: $s stopped, $other serves through lb"
	t=$(date +%s.%N)
	dc start "$s" 2>&1 | sed 's/^/    /' || fail "docker compose start $s"
	wait_for 120 "$s healthy again" healthy "$s"
	figure "$s started again, healthy" "$(secs "$t") s"
}
stopped server-b 3
stopped server-a 4

# Back to both: lb finds server-a again (at whatever address it has now).
before=$(served server-a)
wait_for 30 "lb serving server-a again" sh -c "
	for i in 1 2 3 4; do kubectl --kubeconfig compose/server-a/kubeconfig get --raw /readyz >/dev/null || exit 1; done
	[ \$(docker compose ${files[*]} logs --no-color --no-log-prefix lb | grep -cE 'kube-apiserver sqlkube/server-a [0-9/-]+ [1-9][0-9]* ') -gt $before ]"
log "ok: lb serves server-a again after its restart"

r=$(restarts)
[ -z "$r" ] || fail "$r"
log "ok: no service exited on its own (no restarts)"

# --- teardown --------------------------------------------------------------

t=$(date +%s.%N)
dc down -v --remove-orphans --timeout 30 2>&1 | sed 's/^/    /' || fail "docker compose down -v"
stack_up=false
figure "docker compose down -v" "$(secs "$t") s"
left=$(
	docker ps -a -q --filter "label=com.docker.compose.project=$project"
	docker network ls -q --filter "label=com.docker.compose.project=$project"
	docker volume ls -q --filter "label=com.docker.compose.project=$project"
)
[ -z "$left" ] || fail "down -v left: $left"
clean_data_dirs
for d in compose/server-a compose/server-b; do
	[ "$(ls -A "$d")" = .gitignore ] || fail "$d holds more than its .gitignore"
done
log "ok: no container, network or volume of project $project is left; compose/server-*/ hold only .gitignore"

log "figures:"
for f in "${figures[@]}"; do
	echo "    $f"
done
