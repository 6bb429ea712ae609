// Package images holds no Go code: build.sh beside this file builds the
// conformance suite's images. These tests check, cheaply, that its list
// of images is the one the Kubernetes version in go.mod asks for and that
// every step it names has a recipe. check.sh checks the built images.
package images

import (
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	imageutils "k8s.io/kubernetes/test/utils/image"
)

// built reads `build.sh --list`: file name, reference and rootfs per image.
func built(t *testing.T) [][3]string {
	t.Helper()
	out, err := exec.Command("bash", "build.sh", "--list").CombinedOutput()
	if err != nil {
		t.Fatalf("build.sh --list: %v\n%s", err, out)
	}
	var rows [][3]string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			t.Fatalf("build.sh --list: line %q is not FILE REFERENCE ROOTFS", line)
		}
		rows = append(rows, [3]string{f[0], f[1], f[2]})
	}
	return rows
}

// TestList_MatchesManifest: build.sh names exactly the images Kubernetes'
// manifest gives for the suite's images (so a Kubernetes upgrade that
// moves a tag fails here, not in a conformance run).
func TestList_MatchesManifest(t *testing.T) {
	var want []string
	for _, id := range []imageutils.ImageID{
		// What the [Conformance] tests run.
		imageutils.Agnhost, imageutils.AgnhostPrev, imageutils.APIServer, imageutils.BusyBox,
		imageutils.Etcd, imageutils.GlibcDnsTesting, imageutils.Kitten, imageutils.Nautilus,
		imageutils.Nginx, imageutils.Nonewprivs,
		// Kept for the e2e tests beside them (README.md says which).
		imageutils.IpcUtils, imageutils.NginxNew, imageutils.NonRoot, imageutils.Perl,
		imageutils.ResourceConsumer,
	} {
		want = append(want, imageutils.GetE2EImage(id))
	}
	want = append(want, imageutils.GetPauseImageName())
	var got []string
	files := map[string]bool{}
	for _, row := range built(t) {
		got = append(got, row[1])
		if files[row[0]] {
			t.Errorf("two images write %s", row[0])
		}
		files[row[0]] = true
	}
	sort.Strings(got)
	sort.Strings(want)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("build.sh builds\n  %s\nthe manifest names\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

// TestRecipes_Defined: every image has its config_ function, and every
// step it needs (its rootfs and, recursively, their deps_) has a recipe.
func TestRecipes_Defined(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("go is not on PATH (programs.sh asks it for versions)")
	}
	var images []string
	for _, row := range built(t) {
		images = append(images, strings.TrimSuffix(row[0], ".tar")+":"+row[2])
	}
	script := `
set -eu
here=$PWD root=$(cd ../.. && pwd) go=go kube_version=$(cd "$root" && go list -m -f '{{.Version}}' k8s.io/kubernetes)
cache=/nonexistent
. ./steps.sh; . ./programs.sh; . ./rootfs.sh
missing=0
need() { # KIND/NAME
	local id=${1%%/*}_${1#*/}; id=${id//-/_}
	if ! declare -F "build_$id" >/dev/null; then echo "no recipe build_$id"; missing=1; return; fi
	local depsvar=deps_$id d
	for d in ${!depsvar:-}; do need "$d"; done
}
for image in "$@"; do
	name=${image%%:*} rootfs=${image#*:}
	declare -F "config_${name//-/_}" >/dev/null || { echo "no config_${name//-/_}"; missing=1; }
	[ "$rootfs" = - ] || need "rootfs/$rootfs"
done
need bin/ociarchive
echo "kitten from $deps_rootfs_kitten"
exit $missing
`
	// Both ways kitten can be made: with Alpine's minirootfs given (a
	// file is enough: nothing is built here) and without one.
	dir := t.TempDir()
	alpine := filepath.Join(dir, "alpine-minirootfs.tar.gz")
	if err := os.WriteFile(alpine, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, given := range []string{"", alpine} {
		cmd := exec.Command("bash", append([]string{"-c", script, "recipes"}, images...)...)
		cmd.Env = append(os.Environ(), "CONFORMANCE_CACHE="+dir, "ALPINE_MINIROOTFS="+given)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("ALPINE_MINIROOTFS=%q: %v\n%s", given, err, out)
		}
		if given != "" && !strings.Contains(string(out), "kitten from rootfs/alpine-agnhost") {
			t.Fatalf("ALPINE_MINIROOTFS=%q: kitten is not made from Alpine's minirootfs:\n%s", given, out)
		}
	}
}
