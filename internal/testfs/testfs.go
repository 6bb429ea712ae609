// Package testfs gives tests a small file system of their own, to fill.
package testfs

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// Tmpfs mounts a tmpfs of size bytes on a new temporary directory and
// returns the directory; the mount goes when the test ends, whether it
// passed or not (lazily if something still has a file open there). It
// needs root: other users' tests are skipped with a line that says so
// (CI runs as root).
func Tmpfs(t testing.TB, size int64) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipping: mounting a small tmpfs needs root (CI runs the tests as root)")
	}
	dir, err := os.MkdirTemp("", "sqlkube-tmpfs-")
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, fmt.Sprintf("size=%d,mode=0700", size)); err != nil {
		_ = os.Remove(dir)
		t.Fatalf("mount a tmpfs of %d bytes on %s: %v", size, dir, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, 0); err != nil {
			if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
				t.Errorf("unmount %s: %v", dir, err)
				return
			}
		}
		if err := os.Remove(dir); err != nil {
			t.Errorf("remove %s: %v", dir, err)
		}
	})
	return dir
}

// Free is the space left on the file system under dir.
func Free(t testing.TB, dir string) int64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Bavail) * int64(st.Bsize)
}

// Fill writes a file at path that takes all but leave bytes of the free
// space of its file system (none if there is less), and returns its size.
// Removing it frees the space again.
func Fill(t testing.TB, path string, leave int64) int64 {
	t.Helper()
	n := max(Free(t, filepath.Dir(path))-leave, 0)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if n > 0 {
		if err := unix.Fallocate(int(f.Fd()), 0, 0, n); err != nil {
			t.Fatalf("fallocate %d bytes at %s: %v", n, path, err)
		}
	}
	return n
}
