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
