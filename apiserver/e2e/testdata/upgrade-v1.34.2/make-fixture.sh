#!/usr/bin/env bash
# make-fixture.sh regenerates fixture.tar.gz beside it: the data directory
# of a `sqlkube server` of the last release on Kubernetes v1.34.2 (commit
# 8dd90df) holding the objects of objects.yaml, and objects.json, what that
# server listed at the end. TestUpgrade_FromV1342 (apiserver/e2e/upgrade_test.go)
# serves it with the current binary. See README.md.
#
#   apiserver/e2e/testdata/upgrade-v1.34.2/make-fixture.sh [OUT.tar.gz]
#
# It builds the old binary in a scratch worktree of this repository (about
# 7 minutes on 2 cores; SQLKUBE_OLD_BIN=PATH uses one already built), runs
# it on a fresh data directory in /tmp with two simulated nodes and no node
# of its own (no containers), applies objects.yaml with the machine's
# kubectl, waits for the workloads, lists every object, stops the server,
# compacts the database (the old binary's `datastore backup`, SQLite's
# VACUUM INTO) and writes the tarball. Needs git, go, kubectl, jq, tar,
# gzip.
set -euo pipefail

commit=8dd90df
k8s_version=v1.34.2
here=$(cd "$(dirname "$0")" && pwd)
out=$(realpath -m "${1:-$here/fixture.tar.gz}")
repo=$(git -C "$here" rev-parse --show-toplevel)
work=$(mktemp -d /tmp/sqlkube-upgrade-fixture.XXXXXX)
server_pid=

cleanup() {
	if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
		kill -TERM "$server_pid"
		wait "$server_pid" || true
	fi
	if [ -d "$work/src" ]; then git -C "$repo" worktree remove --force "$work/src"; fi
	rm -rf "$work"
}
trap cleanup EXIT

# 1. The old binary, built as the Makefile of that commit builds it.
bin=${SQLKUBE_OLD_BIN:-}
if [ -z "$bin" ]; then
	git -C "$repo" worktree add --detach "$work/src" "$commit" >/dev/null
	(cd "$work/src" &&
		[ "$(go list -m -f '{{.Version}}' k8s.io/kubernetes)" = "$k8s_version" ] &&
		nice -n 10 go build -ldflags "-X main.version=$commit \
			-X k8s.io/component-base/version.gitVersion=$k8s_version \
			-X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=34" \
			-o "$work/sqlkube" ./cmd/sqlkube)
	git -C "$repo" worktree remove --force "$work/src"
	bin=$work/sqlkube
fi
"$bin" version | grep -q "^sqlkube $commit " || { echo "$bin is not sqlkube $commit" >&2; exit 1; }

# 2. The server, with the flags the e2e tests give it (apiserver/e2e
# startCommandAt), on a fresh data directory; compaction every 10s keeps
# the revision log short.
data=$work/data
"$bin" server --fake-nodes 2 --disable-node --disable-dns --etcd-compaction-interval 10s \
	--data-dir "$data" --secure-port 0 --log-format json >"$work/stdout" 2>"$work/server.log" &
server_pid=$!
for _ in $(seq 120); do
	grep -q "Kubernetes API on" "$work/stdout" && break
	kill -0 "$server_pid" || { cat "$work/server.log" >&2; exit 1; }
	sleep 0.5
done
export KUBECONFIG=$data/kubeconfig HOME=$work/home
kubectl version -o json | jq -e --arg v "$k8s_version" '.serverVersion.gitVersion == $v' >/dev/null

# 3. The objects, in the steps of objects.yaml, each waited for.
awk -v dir="$work" '/^# ---- step/ { n = $4 + 0 } { print > (dir "/step" n ".yaml") }' "$here/objects.yaml"
kubectl wait --for=condition=Ready --timeout=60s node/fake-0 node/fake-1
kubectl apply -f "$work/step1.yaml"
kubectl wait --for=condition=Established --timeout=60s crd/widgets.upgrade.sqlkube.io
kubectl apply -f "$work/step2.yaml"
kubectl -n upgrade-apps wait --for=jsonpath='{.status.phase}'=Bound --timeout=60s pvc/data
until [ -n "$(kubectl -n upgrade-apps get secret robot-token -o jsonpath='{.data.token}')" ]; do sleep 0.5; done
kubectl apply -f "$work/step3.yaml"
kubectl -n upgrade-apps rollout status --timeout=120s deployment/web
kubectl -n upgrade-apps rollout status --timeout=120s statefulset/db
kubectl -n upgrade-apps rollout status --timeout=120s daemonset/agent
kubectl -n upgrade-apps wait --for=condition=Complete --timeout=120s job/once
kubectl -n upgrade-apps wait --for=condition=Ready --timeout=120s pod/standalone pod/gpu-user
kubectl -n upgrade-config wait --for=condition=Ready --timeout=120s pod -l app=legacy
kubectl -n upgrade-apps wait --for=jsonpath='{.status.allocation.devices.results[0].device}'=gpu-0 \
	--timeout=60s resourceclaim/gpu-claim
kubectl apply -f "$work/step4.yaml"
kubectl -n upgrade-apps patch widget alpha --subresource=status --type=merge -p '{"status":{"ready":true}}'

# Let the controllers settle (endpoints, quota and HPA status) and two
# compaction intervals pass.
sleep 25

# 4. What the server lists: every object of every listable resource, at
# the version kubectl prefers: who each is (and its controller, if it has
# one); objects of the fixture also with all but status and managedFields.
for r in $(kubectl api-resources --verbs=list -o name | sort); do
	kubectl get "$r" -A -o json | jq -c --arg r "$r" '.items[] | {
		resource: $r, apiVersion, kind,
		namespace: (.metadata.namespace // ""), name: .metadata.name,
		uid: .metadata.uid, resourceVersion: .metadata.resourceVersion
	} + (.metadata.ownerReferences // [] | map(select(.controller)) |
		if length > 0 then {controller: "\(.[0].kind)/\(.[0].name)"} else {} end)
	+ (if .metadata.labels["upgrade.sqlkube.io/fixture"] == "v1.34.2"
		then {object: (del(.status) | del(.metadata.managedFields))} else {} end)'
done | jq -s '{server: "sqlkube '"$commit"' (Kubernetes '"$k8s_version"')", objects: .}' >"$work/objects.json"
jq -r '.objects | "\(length) objects, \(map(select(.object)) | length) of the fixture"' "$work/objects.json"

# 5. A clean stop (SIGTERM), then the database compacted with the old
# binary (VACUUM INTO); its -wal and -shm are gone after a clean stop.
kill -TERM "$server_pid"
wait "$server_pid"
server_pid=
"$bin" datastore backup -q --datastore "sqlite://$data/state.db" --to "$work/state.db"
mv "$work/state.db" "$data/state.db"
ls -la "$data" "$data/tls"

# 6. The tarball: data/ (kubeconfig, state.db, tls/, token) and
# objects.json, with fixed owners and times.
tar -C "$work" --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -cf - data objects.json |
	gzip -9n >"$out"
ls -l "$out"
