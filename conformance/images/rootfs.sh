# shellcheck shell=bash disable=SC2034 # deps_* are read by steps.sh
# rootfs.sh: the images' root filesystems (rootfs/NAME steps) and their
# configurations (config_NAME, adding ociarchive flags to `flags`), sourced
# by build.sh. Upstream's Alpine- and Debian-based images become Debian
# (bookworm, debootstrap's minbase) with Debian's packages; upstream's
# busybox-only images become our busybox tree. README.md lists the
# differences.

debian_suite=bookworm
files=conformance/images/files
default_path=PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

# h_chroot DIR COMMAND...: runs COMMAND inside DIR with /proc and a
# /dev/pts of its own (apt logs through a terminal) mounted, in a mount
# namespace of its own (nothing stays mounted on the host).
h_chroot() {
	local dir=$1
	shift
	env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive LC_ALL=C HOME=/root \
		unshare --mount --fork -- sh -c '
			mount -t proc proc "$0/proc" &&
			mount -t devpts -o newinstance,ptmxmode=0666 devpts "$0/dev/pts" &&
			exec chroot "$0" "$@"' "$dir" "$@"
}

# h_debian_install DIR PACKAGE...: installs Debian's packages into the
# Debian tree DIR (without recommends, docs or services started), then
# trims it.
h_debian_install() {
	local dir=$1
	shift
	cp -L /etc/resolv.conf "$dir/etc/resolv.conf"
	printf '#!/bin/sh\nexit 101\n' >"$dir/usr/sbin/policy-rc.d"
	chmod 755 "$dir/usr/sbin/policy-rc.d"
	h_chroot "$dir" apt-get -q update
	h_chroot "$dir" apt-get -q install -y --no-install-recommends "$@"
	h_chroot "$dir" apt-get clean
	rm -f "$dir/usr/sbin/policy-rc.d"
	h_debian_trim "$dir"
}

# h_debian_trim DIR: drops what an image needs not carry: package lists and
# caches, logs, docs, and the host's resolv.conf and hostname (the runtime
# provides both).
h_debian_trim() {
	local d=$1
	rm -rf "$d"/var/lib/apt/lists/* "$d"/var/cache/apt/* "$d"/var/cache/debconf/*-old \
		"$d"/var/lib/dpkg/*-old "$d"/var/cache/ldconfig/aux-cache "$d"/var/log/*.log \
		"$d"/var/log/apt/* "$d"/usr/share/doc/* "$d"/usr/share/man/* "$d"/usr/share/info/* \
		"$d"/etc/resolv.conf "$d"/etc/hostname
	find "$d/usr/share/locale" -mindepth 1 -maxdepth 1 ! -name locale.alias -exec rm -rf {} +
	: >"$d/etc/machine-id"
}

# h_busybox_fill DIR: puts busybox in the Debian tree DIR as
# /usr/bin/busybox and links every applet whose name no Debian package of
# DIR provides (wget among them) to it, as Alpine's busybox fills in
# around the packages an Alpine image adds.
h_busybox_fill() {
	local d=$1 applet name dir
	install -m 755 "$cache/bin/busybox" "$d/usr/bin/busybox"
	for applet in $("$cache/bin/busybox" --list-full); do
		name=${applet##*/}
		dir=${applet%/*}
		[ "$dir" != "$applet" ] || continue # linuxrc, at /
		if [ -e "$d/usr/local/sbin/$name" ] || [ -e "$d/usr/local/bin/$name" ] || [ -e "$d/usr/sbin/$name" ] ||
			[ -e "$d/usr/bin/$name" ] || [ -L "$d/usr/sbin/$name" ] || [ -L "$d/usr/bin/$name" ]; then
			continue
		fi
		case $dir in bin | sbin) dir=usr/$dir ;; esac
		ln -s /usr/bin/busybox "$d/$dir/$name"
	done
}

# debian-base: Debian's minbase, with dpkg told to leave out docs and
# translations in later installs.
inputs_rootfs_debian_base() { echo "$debian_suite ${DEBIAN_MIRROR:-}"; }
build_rootfs_debian_base() {
	mkdir -p "$cache/debs"
	debootstrap --variant=minbase --cache-dir="$cache/debs" "$debian_suite" "$1" "${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
	printf '%s\n' 'path-exclude /usr/share/doc/*' 'path-include /usr/share/doc/*/copyright' \
		'path-exclude /usr/share/man/*' 'path-exclude /usr/share/info/*' \
		'path-exclude /usr/share/locale/*' 'path-include /usr/share/locale/locale.alias' \
		>"$1/etc/dpkg/dpkg.cfg.d/sqlkube-slim"
	echo 'APT::Install-Recommends "false";' >"$1/etc/apt/apt.conf.d/sqlkube-no-recommends"
	h_debian_trim "$1"
}

# busybox: upstream's image is busybox alone: its applets as links in
# /bin, a few accounts in /etc, UTC as the local time.
deps_rootfs_busybox="bin/busybox"
inputs_rootfs_busybox() { files_digest "$files/busybox"; }
build_rootfs_busybox() {
	local d=$1 applet
	mkdir -p "$d/bin" "$d/usr/bin" "$d/usr/sbin" "$d/home" "$d/var/spool/mail" "$d/var/www"
	install -d -m 1777 "$d/tmp"
	install -d -m 700 "$d/root"
	install -m 755 "$cache/bin/busybox" "$d/bin/busybox"
	for applet in $("$d/bin/busybox" --list); do
		[ "$applet" = busybox ] || ln "$d/bin/busybox" "$d/bin/$applet"
	done
	ln -s ../../bin/env "$d/usr/bin/env"
	cp -r "$root/$files/busybox/etc" "$d/"
	chmod 600 "$d/etc/shadow"
	cp /usr/share/zoneinfo/UTC "$d/etc/localtime"
}
config_busybox() { flags+=(-cmd '["sh"]' -env "$default_path"); }

# nonewprivs: upstream's is Alpine with nnp setuid root; ours is busybox's.
deps_rootfs_nonewprivs="rootfs/busybox bin/nnp"
build_rootfs_nonewprivs() {
	cp -a "$cache/rootfs/busybox" "$1"
	install -D -m 4755 "$cache/bin/nnp" "$1/usr/local/bin/nnp"
}
config_nonewprivs() { flags+=(-cmd '["nnp"]' -env "$default_path"); }

# sample-apiserver: upstream's is Alpine with the program; ours is busybox's.
deps_rootfs_sample_apiserver="rootfs/busybox bin/sample-apiserver"
build_rootfs_sample_apiserver() {
	cp -a "$cache/rootfs/busybox" "$1"
	install -m 755 "$cache/bin/sample-apiserver" "$1/sample-apiserver"
}
config_sample_apiserver() { flags+=(-entrypoint '["/sample-apiserver"]' -env "$default_path"); }

# agnhost (2.66.1): upstream's is Alpine with bind-tools, curl,
# netcat-openbsd, iproute2, iperf, bash, util-linux-misc (ipcs) and socat,
# busybox for the rest (wget among them), CoreDNS at /coredns, porter's
# certificate and key, /uploads, a user and a group the tests look for, and
# in /var/registry the images its fake-registry-server serves.
deps_rootfs_agnhost="rootfs/debian-base bin/busybox bin/agnhost bin/coredns bin/ociarchive"
inputs_rootfs_agnhost() {
	sha256sum "$kube_src"/test/images/agnhost/porter/localhost.* "$kube_src"/test/images/agnhost/fakeregistryserver/images.txt
}
build_rootfs_agnhost() {
	h_agnhost_tree "$1" "$cache/bin/agnhost" "$kube_src" socat
	h_agnhost_registry "$1/var/registry" "$kube_src/test/images/agnhost/fakeregistryserver/images.txt"
}
config_agnhost() { flags+=(-entrypoint '["/agnhost"]' -cmd '["pause"]' -env "$default_path"); }

# agnhost-prev (2.55): the same tree as upstream's Dockerfile of that time
# made it (the one of Kubernetes v1.34): no socat, util-linux-misc or
# /var/registry yet.
deps_rootfs_agnhost_prev="rootfs/debian-base bin/busybox bin/agnhost-prev bin/coredns"
inputs_rootfs_agnhost_prev() { sha256sum "$(h_kube_src "$agnhost_prev_kube")"/test/images/agnhost/porter/localhost.*; }
build_rootfs_agnhost_prev() {
	h_agnhost_tree "$1" "$cache/bin/agnhost-prev" "$(h_kube_src "$agnhost_prev_kube")"
}
config_agnhost_prev() { config_agnhost; }

# h_agnhost_tree DIR AGNHOST SRC [PACKAGE...]: an agnhost tree at DIR with
# the program AGNHOST, porter's files from the Kubernetes source SRC, and
# Debian's packages for upstream's Alpine ones (dnsutils for bind-tools;
# util-linux, which has ipcs, is in the minbase) plus the PACKAGEs.
h_agnhost_tree() {
	local d=$1 agnhost=$2 src=$3
	shift 3
	cp -a "$cache/rootfs/debian-base" "$d"
	h_debian_install "$d" bash ca-certificates curl dnsutils iperf iproute2 netcat-openbsd "$@"
	h_busybox_fill "$d"
	ln -s /usr/bin/iperf "$d/usr/local/bin/iperf"
	install -m 755 "$agnhost" "$d/agnhost"
	ln -s agnhost "$d/agnhost-2"
	install -m 755 "$cache/bin/coredns" "$d/coredns"
	install -m 644 "$src"/test/images/agnhost/porter/localhost.{crt,key} "$d/"
	install -d -m 755 "$d/uploads"
	h_chroot "$d" groupadd -g 50000 group-defined-in-image
	h_chroot "$d" useradd -m -u 1000 -s /bin/sh -G group-defined-in-image user-defined-in-image
	h_debian_trim "$d"
}

# h_agnhost_registry DIR IMAGES: what agnhost's fake-registry-server serves
# (from DIR/NAME/manifests and DIR/NAME/blobs, files named by digest, a
# tag's file holding its manifest's digest) for each "NAME TAG LOCAL-TAG"
# line of IMAGES (fakeregistryserver/images.txt). Upstream copies each
# registry.k8s.io/NAME:TAG in under LOCAL-TAG; the only image that file
# names is pause, and ours is our pause image.
h_agnhost_registry() {
	local dir=$1 name tag local_tag work blob manifest
	while read -r name tag local_tag; do
		case $name in "" | \#*) continue ;; esac
		[ "$name" = pause ] || { echo "fakeregistryserver/images.txt names $name; only pause can be built here"; return 1; }
		work=$(mktemp -d "$cache/src/registry.XXXXXX")
		"$cache/bin/ociarchive" -pause -name "registry.k8s.io/$name:$tag" -o "$work/image.tar"
		tar -xf "$work/image.tar" -C "$work"
		manifest=$(grep -o '"digest":"sha256:[0-9a-f]*"' "$work/index.json" | cut -d'"' -f4)
		[ -n "$manifest" ]
		for blob in "$work"/blobs/sha256/*; do
			blob=${blob##*/}
			install -D -m 644 "$work/blobs/sha256/$blob" "$dir/$name/blobs/sha256/${blob:0:2}/$blob/data"
		done
		install -D -m 644 "$work/blobs/sha256/${manifest#sha256:}" \
			"$dir/$name/manifests/sha256/${manifest:7:2}/${manifest#sha256:}/data"
		echo "$manifest" >"$dir/$name/manifests/$local_tag"
		rm -rf "$work"
	done <"$2"
}

# alpine_rootfs: Alpine's minirootfs release tarball (as Alpine publishes
# it for x86_64 and its docker-alpine repository carries it), named by
# ALPINE_MINIROOTFS or found as $CONFORMANCE_CACHE/alpine-minirootfs-x86_64.tar.gz.
# Known good: alpine-minirootfs-3.20.3-x86_64.tar.gz, sha256
# d4e6fd67dcf75e40c451560ac7265166c2b72a0f38ddc9aae756a7de3d1efa0c.
alpine_rootfs=${ALPINE_MINIROOTFS:-${CONFORMANCE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sqlkube-conformance}/alpine-minirootfs-x86_64.tar.gz}
[ -f "$alpine_rootfs" ] || alpine_rootfs=

# kitten, nautilus: agnhost with a picture and data.json, serving them
# (upstream's 1.8 are on agnhost 2.57; ours on our agnhost). The
# image-volume test mounts kitten as a volume and looks for "Alpine Linux"
# in its /etc/os-release. No Alpine mirror is reachable from here, so that
# needs Alpine's own minirootfs release, which the build cannot download:
# given one (alpine_rootfs below), kitten is Alpine with agnhost; without
# it, kitten is our Debian agnhost and check.sh reports the gap.
deps_rootfs_kitten="rootfs/agnhost"
[ -z "$alpine_rootfs" ] || deps_rootfs_kitten="rootfs/alpine-agnhost"
inputs_rootfs_kitten() { sha256sum "$kube_src"/test/images/kitten/html/*; }
build_rootfs_kitten() {
	if [ -n "$alpine_rootfs" ]; then
		h_with_html kitten "$cache/rootfs/alpine-agnhost" "$1"
	else
		h_with_html kitten "$cache/rootfs/agnhost" "$1"
	fi
}
deps_rootfs_nautilus="rootfs/agnhost"
inputs_rootfs_nautilus() { sha256sum "$kube_src"/test/images/nautilus/html/*; }
build_rootfs_nautilus() { h_with_html nautilus "$cache/rootfs/agnhost" "$1"; }
h_with_html() {
	cp -a "$2" "$3"
	install -m 644 "$kube_src/test/images/$1/html/$1.jpg" "$kube_src/test/images/$1/html/data.json" "$3/"
}

# alpine-agnhost: Alpine's minirootfs (its busybox gives sh, wget, nc and
# the rest) with our agnhost and what upstream's Dockerfile adds around
# it, less the packages it installs with apk (bind-tools, curl,
# netcat-openbsd, iproute2, iperf, bash, ...), which need Alpine's mirror.
# Only kitten is made from it: the suite mounts kitten as a volume and
# never runs it.
deps_rootfs_alpine_agnhost="bin/agnhost bin/coredns"
inputs_rootfs_alpine_agnhost() {
	sha256sum "$alpine_rootfs" | cut -d' ' -f1
	sha256sum "$kube_src"/test/images/agnhost/porter/localhost.*
}
build_rootfs_alpine_agnhost() {
	local d=$1
	mkdir -p "$d"
	tar -xzf "$alpine_rootfs" -C "$d"
	grep -q '^ID=alpine$' "$d/etc/os-release" || { echo "$alpine_rootfs is not Alpine's minirootfs"; return 1; }
	install -m 755 "$cache/bin/agnhost" "$d/agnhost"
	ln -s agnhost "$d/agnhost-2"
	install -m 755 "$cache/bin/coredns" "$d/coredns"
	install -m 644 "$kube_src"/test/images/agnhost/porter/localhost.{crt,key} "$d/"
	install -d -m 755 "$d/uploads"
	printf '%s\n' 'user-defined-in-image:x:1000:' 'group-defined-in-image:x:50000:user-defined-in-image' >>"$d/etc/group"
	echo 'user-defined-in-image:x:1000:1000::/home/user-defined-in-image:/bin/sh' >>"$d/etc/passwd"
	install -d -m 755 -o 1000 -g 1000 "$d/home/user-defined-in-image"
}
config_kitten() { flags+=(-entrypoint '["/agnhost"]' -cmd '["test-webserver"]' -env "$default_path"); }
config_nautilus() { config_kitten; }

# nginx (both tags): upstream's is the nginx image: "Welcome to nginx!"
# from /usr/share/nginx/html on port 80, logs to standard output and
# error, `nginx -g 'daemon off;'`, stopped by SIGQUIT. Ours is Debian's
# nginx set up the same way.
deps_rootfs_nginx="rootfs/debian-base"
inputs_rootfs_nginx() { files_digest "$files/nginx"; }
build_rootfs_nginx() {
	local d=$1
	cp -a "$cache/rootfs/debian-base" "$d"
	h_debian_install "$d" nginx
	install -D -m 644 "$root/$files/nginx/index.html" "$d/usr/share/nginx/html/index.html"
	install -m 644 "$root/$files/nginx/default.conf" "$d/etc/nginx/sites-available/default"
	ln -sf /dev/stdout "$d/var/log/nginx/access.log"
	ln -sf /dev/stderr "$d/var/log/nginx/error.log"
}
config_nginx() { flags+=(-cmd '["nginx", "-g", "daemon off;"]' -stop-signal SIGQUIT -env "$default_path"); }
config_nginx_new() { config_nginx; }

# glibc-dns-testing (once jessie-dnsutils): upstream's is Debian
# bookworm-slim with dnsutils and CoreDNS at /coredns, the DNS tests'
# glibc prober beside agnhost's musl one (both run the same dig and getent
# probes); ours is bookworm's minbase.
deps_rootfs_glibc_dns_testing="rootfs/debian-base bin/coredns"
build_rootfs_glibc_dns_testing() {
	cp -a "$cache/rootfs/debian-base" "$1"
	h_debian_install "$1" dnsutils
	install -m 755 "$cache/bin/coredns" "$1/coredns"
}
config_glibc_dns_testing() { flags+=(-cmd '["bash"]' -env "$default_path"); }

# nonroot: upstream's is Kubernetes' debian-base run as user 1234; ipc-utils
# is Alpine with util-linux (ipcmk, ipcs), which Debian's minbase has.
config_nonroot() { flags+=(-user 1234 -cmd '["/bin/sh"]' -env "$default_path"); }
config_ipc_utils() { flags+=(-cmd '["/bin/sh"]' -env "$default_path"); }

# perl: Debian's perl (upstream's is the perl image, perl 5.40).
deps_rootfs_perl="rootfs/debian-base"
build_rootfs_perl() {
	cp -a "$cache/rootfs/debian-base" "$1"
	h_debian_install "$1" perl
}
config_perl() { flags+=(-cmd '["perl", "-de0"]' -env "$default_path"); }

# resource-consumer: debian-base with stress, /consumer and
# /consume-cpu/consume-cpu (the consumer runs ./consume-cpu/consume-cpu
# from /).
deps_rootfs_resource_consumer="rootfs/debian-base bin/consumer bin/consume-cpu"
build_rootfs_resource_consumer() {
	cp -a "$cache/rootfs/debian-base" "$1"
	h_debian_install "$1" stress
	install -m 755 "$cache/bin/consumer" "$1/consumer"
	install -D -m 755 "$cache/bin/consume-cpu" "$1/consume-cpu/consume-cpu"
}
config_resource_consumer() { flags+=(-entrypoint '["/consumer"]' -env "$default_path"); }

# etcd: upstream's is distroless with etcd and etcdctl in /usr/local/bin.
deps_rootfs_etcd="bin/etcd bin/etcdctl"
inputs_rootfs_etcd() { files_digest "$files/etcd"; }
build_rootfs_etcd() {
	install -D -m 755 "$cache/bin/etcd" "$1/usr/local/bin/etcd"
	install -m 755 "$cache/bin/etcdctl" "$1/usr/local/bin/etcdctl"
	install -d -m 1777 "$1/tmp"
	install -d -m 700 "$1/var/lib/etcd"
	cp -r "$root/$files/etcd/etc" "$1/"
}
config_etcd() { flags+=(-cmd '["/usr/local/bin/etcd"]' -env "$default_path"); }

# pause: sqlkube's own pause program (node/images) under the name the
# suite knows.
config_pause() { flags+=(-pause); }
