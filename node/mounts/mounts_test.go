package mounts

import (
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
)

// TestDetachUnder bind-mounts a directory onto itself and one below it (as
// a kubelet does), and detaches both.
func TestDetachUnder(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipped: bind mounts need root")
	}
	dir := t.TempDir()
	sub := filepath.Join(dir, "a", "b")
	if err := os.MkdirAll(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{dir, sub} {
		if err := syscall.Mount(p, p, "", syscall.MS_BIND, ""); err != nil {
			t.Skipf("skipped: bind mount not permitted here: %v", err)
		}
	}
	t.Cleanup(func() { _ = DetachUnder(dir) })
	got, err := Under(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) < 2 || got[0] != sub || !slices.Contains(got, dir) {
		t.Fatalf("mounts under %s: %v, want %s first and %s", dir, got, sub, dir)
	}
	if err := DetachUnder(dir); err != nil {
		t.Fatal(err)
	}
	if got, _ := Under(dir); len(got) != 0 {
		t.Fatalf("still mounted: %v", got)
	}
}

// TestUnmountUnder unmounts a mount in use (a file open below it) lazily,
// and the others normally.
func TestUnmountUnder(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipped: mounts need root")
	}
	dir := t.TempDir()
	busy, idle := filepath.Join(dir, "busy"), filepath.Join(dir, "idle")
	for _, p := range []string{busy, idle} {
		if err := os.Mkdir(p, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Mount("tmpfs", p, "tmpfs", 0, "size=1m"); err != nil {
			t.Skipf("skipped: tmpfs mount not permitted here: %v", err)
		}
	}
	t.Cleanup(func() { _ = DetachUnder(dir) })
	f, err := os.Create(filepath.Join(busy, "open"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got, err := UnmountUnder(dir)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	if !slices.Equal(got, []string{busy, idle}) {
		t.Errorf("unmounted %v, want %s and %s", got, busy, idle)
	}
	if left, _ := Under(dir); len(left) != 0 {
		t.Errorf("still mounted: %v", left)
	}
}
