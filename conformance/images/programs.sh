# shellcheck shell=bash
# programs.sh: the images' programs (bin/NAME steps), sourced by build.sh.
# Go programs are built with CGO_ENABLED=0 from the module proxy, in
# modules of our own under $cache/go (the project's go.mod stays as it
# is); busybox is built from Debian's source package.

# Versions the images' definitions name (test/images/*/VERSION, the
# manifest's tags) or that the project pins.
etcd_version=v3.7.0
busybox_version=1.37.0
coredns_version=$(cd "$root" && $go list -m -f '{{.Version}}' github.com/coredns/coredns)
kube_src=$($go env GOMODCACHE)/k8s.io/kubernetes@$kube_version
[ -d "$kube_src/test/images" ] || (cd "$root" && $go mod download k8s.io/kubernetes)

# ociarchive: this checkout's writer of image archives (node/images).
inputs_bin_ociarchive() { files_digest conformance/images/ociarchive node/images; }
build_bin_ociarchive() {
	(cd "$root" && $go build -o "$1" ./conformance/images/ociarchive)
}

# h_go_build MODULE OUT PACKAGE VERSION [LDFLAGS]: builds PACKAGE of its
# module's VERSION, statically, in the module directory $cache/go/MODULE
# (made by h_go_module_MODULE).
h_go_build() {
	local mod=$cache/go/$1
	mkdir -p "$mod"
	"h_go_module_$1" "$mod"
	cd "$mod"
	export GOFLAGS=-mod=mod CGO_ENABLED=0
	$go get "$3@$4"
	nice -n 10 $go build -trimpath -ldflags "-s -w ${5:-}" -o "$2" "$3"
	# The module PACKAGE is in must be at VERSION (go get may not move it).
	$go version -m "$2" | awk -v pkg="$3" -v ver="$4" '
		($1 == "mod" || $1 == "dep") && index(pkg "/", $2 "/") == 1 && $3 == ver { found = 1 }
		END { exit !found }' || {
		echo "$2 is not built from $3 at $4:"
		$go version -m "$2"
		return 1
	}
}

# The Kubernetes module: k8s.io/kubernetes at go.mod's version, its
# staging modules pointed at their published versions as go.mod does.
h_go_module_kube() {
	[ -f "$1/go.mod" ] && return
	{
		echo "module sqlkube.local/conformance-images"
		echo
		grep -E '^go [0-9.]+$' "$root/go.mod"
		echo
		echo "require k8s.io/kubernetes $kube_version"
		echo
		echo "replace ("
		sed -n '/^replace (/,/^)/p' "$root/go.mod" | grep -E '^\s+k8s\.io/[a-z0-9-]+ => k8s\.io/[a-z0-9-]+ v0\.'
		echo ")"
	} >"$1/go.mod"
}

# etcd at the version registry.k8s.io/etcd:3.7.0-0 holds, in its own
# module so that Kubernetes' requirements cannot move it.
h_go_module_etcd() {
	[ -f "$1/go.mod" ] && return
	printf 'module sqlkube.local/conformance-etcd\n\n%s\n\nrequire (\n\tgo.etcd.io/etcd/server/v3 %s\n\tgo.etcd.io/etcd/etcdctl/v3 %s\n)\n' \
		"$(grep -E '^go [0-9.]+$' "$root/go.mod")" "$etcd_version" "$etcd_version" >"$1/go.mod"
}

inputs_bin_agnhost() { echo "$kube_version"; $go version; }
build_bin_agnhost() {
	h_go_build kube "$1" k8s.io/kubernetes/test/images/agnhost "$kube_version" \
		"-X main.Version=$(cat "$kube_src/test/images/agnhost/VERSION")"
}

# agnhost 2.55, the manifest's AgnhostPrev (the older agnhost the tests
# roll workloads from). No Kubernetes release carries
# test/images/agnhost/VERSION 2.55: v1.34.0-alpha.0 has 2.53 and
# v1.34.0-alpha.1 has 2.56 (2.54 and 2.55 were built from commits between).
# So it is built from v1.34.0-alpha.1, the first release holding all of
# 2.55's changes; 2.56 only added netexec's serverport command, which
# no test asks of the older image.
agnhost_prev_version=2.55
agnhost_prev_kube=v1.34.0-alpha.1
inputs_bin_agnhost_prev() { echo "$agnhost_prev_kube $agnhost_prev_version"; $go version; }
build_bin_agnhost_prev() {
	h_go_build kube_prev "$1" k8s.io/kubernetes/test/images/agnhost "$agnhost_prev_kube" \
		"-X main.Version=$agnhost_prev_version"
}

# h_kube_src VERSION: the directory of k8s.io/kubernetes@VERSION in the
# module cache (downloaded when missing).
h_kube_src() {
	$go mod download -json "k8s.io/kubernetes@$1" | sed -n 's/^\s*"Dir": "\(.*\)",\?$/\1/p'
}

# The older Kubernetes module agnhost 2.55 is built in: k8s.io/kubernetes
# at $agnhost_prev_kube, its staging modules (the ones its own go.mod
# replaces with ./staging folders) at their published versions.
h_go_module_kube_prev() {
	[ -f "$1/go.mod" ] && return
	local kmod
	kmod=$($go mod download -json "k8s.io/kubernetes@$agnhost_prev_kube" | sed -n 's/^\s*"GoMod": "\(.*\)",\?$/\1/p')
	[ -f "$kmod" ] || { echo "no go.mod for k8s.io/kubernetes@$agnhost_prev_kube"; return 1; }
	{
		echo "module sqlkube.local/conformance-agnhost-prev"
		echo
		grep -E '^go [0-9.]+$' "$root/go.mod"
		echo
		echo "require k8s.io/kubernetes $agnhost_prev_kube"
		echo
		echo "replace ("
		sed -n '/^replace (/,/^)/p' "$kmod" |
			sed -n 's|^\s*\(k8s\.io/[a-z0-9-]*\) => \./staging/.*|\t\1 => \1 v0.'"${agnhost_prev_kube#v1.}"'|p'
		echo ")"
	} >"$1/go.mod"
}

inputs_bin_nnp() { echo "$kube_version"; $go version; }
build_bin_nnp() { h_go_build kube "$1" k8s.io/kubernetes/test/images/nonewprivs "$kube_version"; }
inputs_bin_consumer() { echo "$kube_version"; $go version; }
build_bin_consumer() { h_go_build kube "$1" k8s.io/kubernetes/test/images/resource-consumer "$kube_version"; }
inputs_bin_consume_cpu() { echo "$kube_version"; $go version; }
build_bin_consume_cpu() {
	h_go_build kube "$1" k8s.io/kubernetes/test/images/resource-consumer/consume-cpu "$kube_version"
}
# sample-apiserver at the staging version go.mod replaces it with.
inputs_bin_sample_apiserver() { echo "$kube_version"; $go version; }
build_bin_sample_apiserver() { h_go_build kube "$1" k8s.io/sample-apiserver "$(h_staging_version)"; }
# h_staging_version: the version go.mod points Kubernetes' staging modules at.
h_staging_version() { sed -n 's|^\s*k8s.io/apimachinery => k8s.io/apimachinery \(v0\.[0-9.]*\)$|\1|p' "$root/go.mod"; }

inputs_bin_etcd() { echo "$etcd_version"; $go version; }
build_bin_etcd() { h_go_build etcd "$1" go.etcd.io/etcd/server/v3 "$etcd_version"; }
inputs_bin_etcdctl() { echo "$etcd_version"; $go version; }
build_bin_etcdctl() { h_go_build etcd "$1" go.etcd.io/etcd/etcdctl/v3 "$etcd_version"; }

# CoreDNS for agnhost's /coredns, at the version sqlkube embeds (its
# module has no replace directives, so `go install MODULE@VERSION` works).
inputs_bin_coredns() { echo "$coredns_version"; $go version; }
build_bin_coredns() {
	local gobin=$cache/go/coredns-bin
	rm -rf "$gobin"
	GOBIN=$gobin CGO_ENABLED=0 nice -n 10 $go install -trimpath -ldflags "-s -w" "github.com/coredns/coredns@$coredns_version"
	mv "$gobin/coredns" "$1"
}

# busybox: upstream's release as Debian ships it (the .orig tarball of
# Debian's source package, fetched with apt-get source from Debian's
# mirror), built with upstream's defconfig and statically linked, with
# only the two Debian patches it needs to build here (no-cbq: newer kernel
# headers lack CBQ, which tc used; the SHA-NI guard). Debian's other
# patches change behaviour the tests rely on (its ash drops environment
# variables whose names are not identifiers, so `sh -c env` would not show
# a ConfigMap's data-1), so they are left out; so are Debian's build
# configurations (FEATURE_SH_STANDALONE, PREFER_APPLETS, the reduced nc).
busybox_debian_suite=trixie
busybox_patches="busybox-1.36.1-no-cbq.patch libbb-sha-add-missing-sha-NI-guard.patch"
inputs_bin_busybox() { echo "$busybox_version $busybox_debian_suite $busybox_patches ${DEBIAN_MIRROR:-}"; }
build_bin_busybox() {
	local src=$cache/src/busybox work
	h_apt_source "$src" "$busybox_debian_suite" busybox
	local orig=$src/busybox_$busybox_version.orig.tar.bz2
	[ -f "$orig" ] || { echo "Debian's $busybox_debian_suite has no busybox $busybox_version: $(ls "$src")"; return 1; }
	work=$(mktemp -d "$cache/src/busybox-build.XXXXXX")
	tar -xjf "$orig" -C "$work" --strip-components=1
	mkdir "$work/debian"
	tar -xJf "$src"/busybox_"$busybox_version"-*.debian.tar.xz -C "$work"
	for p in $busybox_patches; do
		patch -d "$work" -p1 <"$work/debian/patches/$p"
	done
	cd "$work"
	# The release's date (its Makefile's), as the build date the binary
	# prints.
	export SOURCE_DATE_EPOCH
	SOURCE_DATE_EPOCH=$(stat -c %Y Makefile)
	make defconfig >/dev/null
	sed -i 's/^# CONFIG_STATIC is not set$/CONFIG_STATIC=y/' .config
	make oldconfig </dev/null >/dev/null
	grep -qx CONFIG_STATIC=y .config
	nice -n 10 make -j"$(nproc)" busybox
	cp busybox "$1"
	cd /
	rm -rf "$work"
}

# h_apt_source DIR SUITE PACKAGE: downloads PACKAGE's Debian source package
# of SUITE into DIR (verified against the suite's signed Release file),
# with an apt configuration of its own under $cache/apt (the machine's
# sources stay as they are).
h_apt_source() {
	local a=$cache/apt/$2
	mkdir -p "$a/lists/partial" "$a/cache/archives/partial" "$1"
	echo "deb-src ${DEBIAN_MIRROR:-http://deb.debian.org/debian} $2 main" >"$a/sources.list"
	local opts=(-o "Dir::Etc::SourceList=$a/sources.list" -o Dir::Etc::SourceParts=/dev/null
		-o "Dir::State::Lists=$a/lists" -o "Dir::Cache=$a/cache" -o APT::Sandbox::User=root)
	apt-get "${opts[@]}" update
	(cd "$1" && apt-get "${opts[@]}" source --download-only "$3")
}
