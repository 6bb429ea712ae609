package containerd

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWriteConfig(t *testing.T) {
	dir := t.TempDir()
	p, err := WriteConfig(Options{Dir: dir, SandboxImage: "example.test/pause:9", CNIBinDir: "/cni/bin", CNIConfDir: "/cni/conf"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`root = "` + dir + `/root"`, `address = "` + Socket(dir) + `"`, `sandbox_image = "example.test/pause:9"`,
		"restrict_oom_score_adj = true", "SystemdCgroup = false", `snapshotter = "overlayfs"`,
		`bin_dir = "/cni/bin"`, `conf_dir = "/cni/conf"`,
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("config lacks %q:\n%s", want, b)
		}
	}
	if Endpoint(dir) != "unix://"+filepath.Join(dir, "containerd.sock") {
		t.Errorf("endpoint %s", Endpoint(dir))
	}
}

func TestStart_RefusesLongSocketPath(t *testing.T) {
	dir := filepath.Join(t.TempDir(), strings.Repeat("d", 100))
	if _, err := Start(context.Background(), Options{Dir: dir}); err == nil || !strings.Contains(err.Error(), "too long") {
		t.Fatalf("a socket path over 100 bytes: %v", err)
	}
}
