# shellcheck shell=bash
# steps.sh: the build's cached steps, sourced by build.sh.
#
# A step makes one thing under $cache: bin/NAME (a program), rootfs/NAME (a
# directory that becomes an image's /) or archives/NAME.tar (an image, made
# by make_image). Its
# recipe is the shell function build_KIND_NAME ("-" in NAME as "_"), called
# with the path to create; deps_KIND_NAME lists the steps it needs first
# ("bin/busybox rootfs/debian-base"), and inputs_KIND_NAME, when defined,
# prints what else it is made from (file digests, versions). The step runs
# again only when its key changes: a digest of its recipe, of the helpers
# (functions named h_*) the recipe calls, of its inputs and of its
# dependencies' keys. Its output goes to $cache/logs/KIND-NAME.log.

# log MESSAGE...: one line on standard error.
log() { printf '[images] %s\n' "$*" >&2; }

# digest ARG...: a short hash of its arguments.
digest() { printf '%s\n' "$@" | sha256sum | cut -c1-24; }

# files_digest PATH...: a hash of the files' names and contents
# (directories recursively).
files_digest() {
	(cd "$root" && find "$@" -type f -print0 | sort -z | xargs -0 sha256sum) | sha256sum | cut -c1-24
}

# recipe_text FUNCTION: the function's source and that of every h_* helper
# it calls, directly or not.
recipe_text() {
	local todo=("$1") seen=" " fn
	while [ ${#todo[@]} -gt 0 ]; do
		fn=${todo[0]}
		todo=("${todo[@]:1}")
		case "$seen" in *" $fn "*) continue ;; esac
		seen="$seen$fn "
		declare -f "$fn"
		# shellcheck disable=SC2207
		todo+=($(declare -f "$fn" | tail -n +2 | grep -o '\bh_[a-z0-9_]*' | sort -u || true))
	done
}

# step KIND NAME: makes $cache/KIND/NAME unless it is up to date.
step() {
	local kind=$1 name=$2 id=${1}_${2//-/_}
	local fn=build_$id depsvar=deps_$id deps dep k out=$cache/$1/$2
	[ "$kind" != archives ] || out=$out.tar
	deps=${!depsvar:-}
	for dep in $deps; do
		step "${dep%%/*}" "${dep#*/}"
	done
	k=$(digest "$(recipe_text "$fn")" \
		"$(if declare -F "inputs_$id" >/dev/null; then "inputs_$id"; fi)" \
		"$(for dep in $deps; do cat "$cache/stamps/${dep/\//-}"; done)")
	if [ -e "$out" ] && [ "$(cat "$cache/stamps/$kind-$name" 2>/dev/null)" = "$k" ]; then
		return
	fi
	log "building $kind/$name"
	local t0 logf=$cache/logs/$kind-$name.log
	t0=$(date +%s)
	rm -rf "$out.new"
	# Not in a condition: there bash would ignore set -e inside the recipe.
	local rc
	set +e
	(
		set -e
		"$fn" "$out.new"
	) >"$logf" 2>&1
	rc=$?
	set -e
	if [ "$rc" != 0 ]; then
		tail -n 40 "$logf" >&2
		log "$kind/$name failed; its log: $logf"
		rm -rf "$out.new"
		exit 1
	fi
	rm -rf "$out"
	mv "$out.new" "$out"
	echo "$k" >"$cache/stamps/$kind-$name"
	log "built $kind/$name in $(($(date +%s) - t0))s"
}

# make_image NAME REFERENCE ROOTFS: archives/NAME.tar, the image REFERENCE
# of rootfs/ROOTFS ("-": none) with the configuration config_NAME sets.
make_image() {
	local name=$1 ref=$2 rootfs=$3 id=${1//-/_}
	step bin ociarchive
	local deps="bin/ociarchive"
	[ "$rootfs" = - ] || deps="$deps rootfs/$rootfs"
	printf -v "deps_archives_$id" '%s' "$deps"
	printf -v "ref_$id" '%s' "$ref"
	eval "build_archives_$id() { h_archive $name \"\$1\"; }"
	eval "inputs_archives_$id() { echo $ref $rootfs; declare -f config_$id; }"
	step archives "$name"
}

# h_archive NAME OUT: writes the image NAME (its reference, rootfs and
# config_NAME's flags for ociarchive) to OUT, its layer gzip-compressed.
h_archive() {
	local id=${1//-/_} refvar="ref_${1//-/_}" depsvar="deps_archives_${1//-/_}"
	local flags=()
	"config_$id"
	local rootfs
	rootfs=$(printf '%s\n' ${!depsvar} | sed -n 's|^rootfs/||p')
	if [ -n "$rootfs" ]; then
		flags+=(-root "$cache/rootfs/$rootfs")
	fi
	"$cache/bin/ociarchive" -gzip -name "${!refvar}" "${flags[@]}" -o "$2"
}
