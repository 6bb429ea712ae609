#!/usr/bin/env bash
# Builds the stand-in images compose/standins.yaml runs the compose stack
# on, for machines that cannot pull postgres, haproxy, golang and
# distroless from Docker Hub and gcr.io. Everything comes from Debian 12's
# packages (debootstrap, then apt inside the images), except the Go
# toolchain, which is copied from this machine (Debian 12 has Go 1.19).
#
#   compose/standins/build.sh           # builds the images that are missing
#   compose/standins/build.sh --force   # rebuilds all of them
#
# Needs root (debootstrap), a Docker daemon, and Debian's mirror
# (DEBIAN_MIRROR, default http://deb.debian.org/debian). The images:
#
#   sqlkube-standin/debian:bookworm        debootstrap --variant=minbase
#   sqlkube-standin/base-nonroot:bookworm  for gcr.io/distroless/base-debian12:nonroot
#   sqlkube-standin/postgres:15-bookworm   for postgres:17-alpine
#   sqlkube-standin/haproxy:2.6-bookworm   for haproxy:3.0-alpine
#   sqlkube-standin/golang:1.26-bookworm   for golang:1.26-bookworm
#
# docs/compose.md says how they differ from the images they stand in for.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
suite=bookworm
goroot=${STANDIN_GOROOT:-$(go env GOROOT 2>/dev/null || true)}
localca=${STANDIN_LOCAL_CA:-/usr/local/share/ca-certificates}

base=sqlkube-standin/debian:bookworm
nonroot=sqlkube-standin/base-nonroot:bookworm
postgres=sqlkube-standin/postgres:15-bookworm
haproxy=sqlkube-standin/haproxy:2.6-bookworm
golang=sqlkube-standin/golang:1.26-bookworm

force=false
case "${1:-}" in
--force) force=true ;;
"") ;;
*)
	echo "usage: $0 [--force]" >&2
	exit 2
	;;
esac

# --force: the old images go first (children before their base), so a
# rebuild leaves no untagged copies behind.
if $force; then
	for i in "$golang" "$haproxy" "$postgres" "$nonroot" "$base"; do
		docker image rm "$i" >/dev/null 2>&1 || true
	done
fi

have() { ! $force && docker image inspect "$1" >/dev/null 2>&1; }
now() { date +%s.%N; }
took() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f s", b - a }'; }

work=$(mktemp -d /tmp/sqlkube-standins.XXXXXX)
trap 'rm -rf "$work"' EXIT

# build TAG DIR [CONTEXT]: a stand-in from its Dockerfile in DIR. The
# Dockerfiles run apt-get, so the build uses the host's network (the
# daemon may have no NAT to the outside, as with test.sh's own dockerd).
# BuildKit (buildx) if the CLI has it; the classic builder otherwise,
# which is all these Dockerfiles need.
build() {
	local tag=$1 dir=$2 ctx=${3:-$2}
	local t
	t=$(now)
	echo "== $tag"
	if docker buildx version >/dev/null 2>&1; then
		docker build --network host --build-arg BASE_IMAGE="$base" -f "$dir/Dockerfile" -t "$tag" "$ctx"
	else
		DOCKER_BUILDKIT=0 docker build --network host --build-arg BASE_IMAGE="$base" -f "$dir/Dockerfile" -t "$tag" "$ctx"
	fi
	echo "== $tag built in $(took "$t")"
}

rootfs() { echo "$work/rootfs"; }

# base_rootfs: the Debian base's files in $(rootfs), from the image when
# it is there.
base_rootfs() {
	local c
	[ -d "$(rootfs)" ] && return
	if have "$base"; then
		mkdir -p "$(rootfs)"
		c=$(docker create "$base")
		docker export "$c" | tar -C "$(rootfs)" --numeric-owner -x
		docker rm "$c" >/dev/null
	else
		debootstrap_base
	fi
}

# The Debian base: debootstrap's minbase with the CA bundle, netbase and tzdata
# (which base-nonroot takes from it), apt pointed at bookworm, its updates
# and its security suite, and upgraded from them.
debootstrap_base() {
	local root t
	root=$(rootfs)
	[ -d "$root" ] && return
	if [ "$(id -u)" != 0 ]; then
		echo "$0: debootstrap needs root" >&2
		exit 1
	fi
	command -v debootstrap >/dev/null || {
		echo "$0: no debootstrap (Debian: apt-get install debootstrap)" >&2
		exit 1
	}
	t=$(now)
	echo "== debootstrap $suite from $mirror"
	debootstrap --variant=minbase --include=ca-certificates,netbase,tzdata "$suite" "$root" "$mirror" >"$work/debootstrap.log" 2>&1 || {
		tail -20 "$work/debootstrap.log" >&2
		exit 1
	}
	rm -f "$root/etc/apt/sources.list"
	cat >"$root/etc/apt/sources.list.d/debian.sources" <<-EOF
		Types: deb
		URIs: $mirror
		Suites: $suite $suite-updates
		Components: main
		Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

		Types: deb
		URIs: http://deb.debian.org/debian-security
		Suites: $suite-security
		Components: main
		Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
	EOF
	# No service starts inside an image build (as in Debian's own images).
	printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
	chmod 755 "$root/usr/sbin/policy-rc.d"
	cp /etc/resolv.conf "$root/etc/resolv.conf"
	chroot "$root" sh -c 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get upgrade -y -qq' >>"$work/debootstrap.log" 2>&1 || {
		tail -20 "$work/debootstrap.log" >&2
		exit 1
	}
	chroot "$root" apt-get clean
	rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin
	: >"$root/etc/resolv.conf"
	: >"$root/etc/hostname"
	echo "== debootstrap took $(took "$t")"
}

if ! have "$base"; then
	t=$(now)
	debootstrap_base
	tar -C "$(rootfs)" --numeric-owner -c . |
		docker import \
			--change 'LABEL dev.sqlkube.standin-for="debian:bookworm"' \
			--change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
			--change 'CMD ["bash"]' - "$base" >/dev/null
	echo "== $base built in $(took "$t")"
fi

# base-nonroot: what distroless/base-debian12:nonroot holds, from the
# Debian base's own files: glibc, libssl3, tzdata, netbase, base-files,
# the CA bundle, /etc/passwd and /etc/group with root, nobody and nonroot
# (65532), /tmp. No shell, no package manager.
if ! have "$nonroot"; then
	t=$(now)
	base_rootfs
	root=$(rootfs)
	nr="$work/nonroot"
	mkdir -p "$nr"
	# bookworm's merged /usr: /bin, /lib, /lib64 and /sbin are links.
	for l in bin lib lib64 sbin; do
		if [ -L "$root/$l" ]; then
			cp -a "$root/$l" "$nr/$l"
			mkdir -p "$nr/usr/$l"
		fi
	done
	for p in base-files libc6 libssl3 netbase tzdata; do
		list=""
		for f in "$root/var/lib/dpkg/info/$p.list" "$root/var/lib/dpkg/info/$p:"*.list; do
			if [ -e "$f" ]; then list=$f; fi
		done
		[ -n "$list" ] || {
			echo "$0: $p is not installed in the Debian base" >&2
			exit 1
		}
		grep -vE '^/usr/share/(doc|man|lintian|info)(/|$)|^/\.$' "$list" | sed 's|^/|./|'
	done | sort -u | tar -C "$root" --no-recursion -c -T - | tar -C "$nr" --keep-directory-symlink -x
	mkdir -p "$nr/etc/ssl/certs" "$nr/tmp" "$nr/root" "$nr/home/nonroot"
	cp "$root/etc/ssl/certs/ca-certificates.crt" "$nr/etc/ssl/certs/"
	cp "$root/etc/nsswitch.conf" "$nr/etc/"
	cat >"$nr/etc/passwd" <<-EOF
		root:x:0:0:root:/root:/sbin/nologin
		nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin
		nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin
	EOF
	cat >"$nr/etc/group" <<-EOF
		root:x:0:
		nogroup:x:65534:
		nonroot:x:65532:
	EOF
	chmod 1777 "$nr/tmp"
	chmod 700 "$nr/root" "$nr/home/nonroot"
	chown 65532:65532 "$nr/home/nonroot"
	tar -C "$nr" --numeric-owner -c . |
		docker import \
			--change 'LABEL dev.sqlkube.standin-for="gcr.io/distroless/base-debian12:nonroot"' \
			--change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt' \
			--change 'USER 65532:65532' \
			--change 'WORKDIR /home/nonroot' - "$nonroot" >/dev/null
	echo "== $nonroot built in $(took "$t")"
fi

if ! have "$postgres"; then
	build "$postgres" "$here/postgres"
fi
if ! have "$haproxy"; then
	build "$haproxy" "$here/haproxy"
fi

# The golang stand-in's context is its Dockerfile, this machine's Go
# toolchain (hard links where the file system allows, else a copy) and
# the CA certificates this machine adds to Debian's (STANDIN_LOCAL_CA,
# default /usr/local/share/ca-certificates).
if ! have "$golang"; then
	v=$("$goroot/bin/go" env GOVERSION 2>/dev/null || true)
	case "$v" in
	go1.26 | go1.26.*) ;;
	*)
		echo "$0: the golang stand-in needs a Go 1.26 toolchain; $goroot has '${v:-none}' (set STANDIN_GOROOT)" >&2
		exit 1
		;;
	esac
	ctx="$work/golang"
	mkdir -p "$ctx"
	cp "$here/golang/Dockerfile" "$ctx/"
	cp -al "$goroot" "$ctx/go" 2>/dev/null || cp -a "$goroot" "$ctx/go"
	mkdir -p "$ctx/local-ca"
	if [ -d "$localca" ]; then
		find "$localca" -name '*.crt' -exec cp {} "$ctx/local-ca/" \;
	fi
	echo "== $golang: local CA certificates: $(cd "$ctx/local-ca" && echo *.crt)"
	echo "== $golang: Go toolchain $v from $goroot"
	build "$golang" "$ctx"
fi

docker image ls --format '{{.Repository}}:{{.Tag}}\t{{.Size}}' 'sqlkube-standin/*'
