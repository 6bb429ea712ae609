package slowfs

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestMount_FsyncWaits(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting FUSE needs root")
	}
	backing, dir := t.TempDir(), t.TempDir()
	const delay = 150 * time.Millisecond
	m, err := New(backing, dir, delay)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Unmount(); err != nil {
			t.Errorf("unmount: %v", err)
		}
	})

	f, err := os.Create(filepath.Join(dir, "f"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("hello"); err != nil {
		t.Fatal(err)
	}
	begin := time.Now()
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(begin); took < delay {
		t.Errorf("fsync took %v, want at least the %v delay", took, delay)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	// What was written through the mount is in the backing directory.
	got, err := os.ReadFile(filepath.Join(backing, "f"))
	if err != nil || string(got) != "hello" {
		t.Fatalf("backing file: %q, %v", got, err)
	}

	// A file opened again syncs slowly too; a zero delay is fast.
	m.SetDelay(0)
	g, err := os.OpenFile(filepath.Join(dir, "f"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if err := g.Sync(); err != nil {
		t.Fatal(err)
	}
	n, delayed := m.Syncs()
	if n != 2 || delayed != delay {
		t.Errorf("Syncs() = %d, %v; want 2, %v", n, delayed, delay)
	}
}
