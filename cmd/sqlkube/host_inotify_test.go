package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"
)

// TestEnsureInotifyInstances: a host raises the limit to what its port
// range's tenants hold (as root), and never lowers it.
func TestEnsureInotifyInstances(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("raising the limit is root's")
	}
	path := filepath.Join(t.TempDir(), "max_user_instances")
	old := inotifyLimit
	inotifyLimit = path
	t.Cleanup(func() { inotifyLimit = old })
	for _, c := range []struct {
		have    string
		tenants int
		want    string
	}{
		{"128\n", 1000, "4128"},
		{"128\n", 100, "528"},
		{"8192\n", 100, "8192\n"},
	} {
		if err := os.WriteFile(path, []byte(c.have), 0o644); err != nil {
			t.Fatal(err)
		}
		var logged bytes.Buffer
		ensureInotifyInstances(c.tenants, zerolog.New(&logged))
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != c.want {
			t.Errorf("limit %q, %d tenants: %q, want %q", c.have, c.tenants, got, c.want)
		}
		if raised := strings.Contains(logged.String(), "raised"); raised != (c.have != c.want) {
			t.Errorf("limit %q, %d tenants: logged %q", c.have, c.tenants, logged.String())
		}
	}
}
