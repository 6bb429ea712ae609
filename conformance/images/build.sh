#!/usr/bin/env bash
# build.sh builds, without a registry, every image Kubernetes' conformance
# suite runs, as OCI image archives under the images' real names
# (registry.k8s.io/e2e-test-images/agnhost:2.66.1, ...), and puts them in
# OUTDIR, which it prints (its progress goes to standard error). `sqlkube images import --container-runtime-endpoint ... OUTDIR/*.tar`
# loads them into a node's containerd. README.md beside this file says what
# each image is built from and how it differs from upstream's.
#
#   build.sh OUTDIR [IMAGE...]   build all images (or the ones named)
#   build.sh --list              print the images: file name, reference, rootfs
#
# Everything is cached under $CONFORMANCE_CACHE/<kubernetes version>/images
# (default ~/.cache/sqlkube-conformance): a step runs again only when its
# recipe (the shell function that makes it), its files or what it is made
# from changed. Needs root (debootstrap, chroot), Go, Debian's mirror and
# the Go module proxy; installs debootstrap, gcc, make, patch, bzip2 and
# xz-utils with apt-get when they are missing.
#
#   DEBIAN_MIRROR   default http://deb.debian.org/debian
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
go=${GO:-go}

# The images, in build order: file name (also the recipe's name),
# reference, and the rootfs it is made from.
images=(
	"pause             registry.k8s.io/pause:3.10.2                                   -"
	"busybox           registry.k8s.io/e2e-test-images/busybox:1.37.0-2               busybox"
	"nonewprivs        registry.k8s.io/e2e-test-images/nonewprivs:1.4                 nonewprivs"
	"agnhost           registry.k8s.io/e2e-test-images/agnhost:2.66.1                 agnhost"
	"agnhost-prev      registry.k8s.io/e2e-test-images/agnhost:2.55                   agnhost-prev"
	"kitten            registry.k8s.io/e2e-test-images/kitten:1.8                     kitten"
	"nautilus          registry.k8s.io/e2e-test-images/nautilus:1.8                   nautilus"
	"nginx             registry.k8s.io/e2e-test-images/nginx:1.27.0-2                 nginx"
	"nginx-new         registry.k8s.io/e2e-test-images/nginx:1.28.0-2                 nginx"
	"glibc-dns-testing registry.k8s.io/e2e-test-images/glibc-dns-testing:2.1.1        glibc-dns-testing"
	"nonroot           registry.k8s.io/e2e-test-images/nonroot:1.5                    debian-base"
	"ipc-utils         registry.k8s.io/e2e-test-images/ipc-utils:1.4                  debian-base"
	"perl              registry.k8s.io/e2e-test-images/perl:5.26                      perl"
	"resource-consumer registry.k8s.io/e2e-test-images/resource-consumer:1.14         resource-consumer"
	"sample-apiserver  registry.k8s.io/e2e-test-images/sample-apiserver:1.29.2        sample-apiserver"
	"etcd              registry.k8s.io/etcd:3.7.0-0                                   etcd"
)

if [ "${1:-}" = --list ]; then
	for row in "${images[@]}"; do
		read -r name ref rootfs <<<"$row"
		echo "$name.tar $ref $rootfs"
	done
	exit 0
fi
if [ $# -lt 1 ] || [ "${1#-}" != "$1" ]; then
	echo "usage: $0 OUTDIR [IMAGE...] | --list" >&2
	exit 2
fi
if [ "$(id -u)" != 0 ]; then
	echo "$0: needs root (debootstrap and chroot make the Debian-based images)" >&2
	exit 1
fi
outdir=$1
shift

# What the build runs, installed from Debian's mirror when missing (the
# machine is Debian's; apt-get needs root, as the build does).
missing=()
for tool in debootstrap:debootstrap gcc:gcc make:make patch:patch bzip2:bzip2 xz:xz-utils unshare:util-linux; do
	command -v "${tool%%:*}" >/dev/null || missing+=("${tool#*:}")
done
if [ ${#missing[@]} -gt 0 ]; then
	echo "[images] installing ${missing[*]}" >&2
	apt-get update -q >&2
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >&2
fi

mkdir -p "$outdir"
outdir=$(cd "$outdir" && pwd)

kube_version=$(cd "$root" && $go list -m -f '{{.Version}}' k8s.io/kubernetes)
cache=${CONFORMANCE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sqlkube-conformance}/$kube_version/images
mkdir -p "$cache"/{stamps,bin,rootfs,archives,src,go,logs}
# One build at a time per cache: a second one waits.
exec 9>"$cache/.lock"
if ! flock -n 9; then
	echo "[images] waiting for another build.sh using $cache" >&2
	flock 9
fi

# shellcheck source=conformance/images/steps.sh
. "$here/steps.sh"
# shellcheck source=conformance/images/programs.sh
. "$here/programs.sh"
# shellcheck source=conformance/images/rootfs.sh
. "$here/rootfs.sh"

start=$(date +%s)
selected=("$@")
for row in "${images[@]}"; do
	read -r name ref rootfs <<<"$row"
	if [ ${#selected[@]} -gt 0 ] && ! printf '%s\n' "${selected[@]}" | grep -qx "$name"; then
		continue
	fi
	make_image "$name" "$ref" "$rootfs"
	ln -f "$cache/archives/$name.tar" "$outdir/$name.tar" 2>/dev/null || cp "$cache/archives/$name.tar" "$outdir/$name.tar"
done
log "done in $(($(date +%s) - start))s; archives in $outdir ($(du -sh "$outdir" | cut -f1))"
echo "$outdir"
