package daemon

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"

	"github.com/pelletier/go-toml/v2"

	"github.com/sqlkube/sqlkube/node/containerd"
)

// TestMain runs containerd's command instead of the tests when asked to:
// the test binary is then the containerd the tests start.
func TestMain(m *testing.M) {
	if os.Getenv("SQLKUBE_DAEMON_TEST_CONTAINERD") == "1" {
		if err := Containerd(context.Background(), os.Args[1:]); err != nil {
			fmt.Fprintln(os.Stderr, "containerd:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestConfig_AsContainerdReadsIt: the configuration node/containerd
// writes, as this containerd reads it (config dump): every setting lands
// in the plugin it is meant for. containerd ignores a key a plugin does
// not know, so only its own reading shows a misplaced one.
func TestConfig_AsContainerdReadsIt(t *testing.T) {
	dir := t.TempDir()
	p, err := containerd.WriteConfig(containerd.Options{
		Dir: dir, SandboxImage: "example.test/pause:9", CNIBinDir: "/cni/bin", CNIConfDir: "/cni/conf",
		Runtime:           containerd.Runtime{Shim: "/rt/containerd-shim-runc-v2", Runc: "/rt/runc"},
		RegistryConfigDir: "/etc/sqlkube/certs.d",
	})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "--config", p, "config", "dump")
	cmd.Env = append(os.Environ(), "SQLKUBE_DAEMON_TEST_CONTAINERD=1")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("containerd config dump: %v", err)
	}
	var cfg map[string]any
	if err := toml.Unmarshal(out, &cfg); err != nil {
		t.Fatalf("config dump: %v\n%s", err, out)
	}
	for _, c := range []struct {
		path []string
		want any
	}{
		{[]string{"root"}, containerd.RootDir(dir)},
		{[]string{"state"}, containerd.StateDir(dir)},
		{[]string{"plugins", "io.containerd.server.v1.grpc", "address"}, containerd.Socket(dir)},
		{[]string{"plugins", "io.containerd.server.v1.ttrpc", "address"}, containerd.Socket(dir) + ".ttrpc"},
		{[]string{"plugins", "io.containerd.internal.v1.opt", "path"}, dir + "/opt"},
		{[]string{"plugins", "io.containerd.nri.v1.nri", "disable"}, true},
		{[]string{"plugins", "io.containerd.cri.v1.images", "snapshotter"}, "overlayfs"},
		{[]string{"plugins", "io.containerd.cri.v1.images", "pinned_images", "sandbox"}, "example.test/pause:9"},
		{[]string{"plugins", "io.containerd.cri.v1.images", "registry", "config_path"}, "/etc/sqlkube/certs.d"},
		{[]string{"plugins", "io.containerd.cri.v1.runtime", "restrict_oom_score_adj"}, true},
		{[]string{"plugins", "io.containerd.cri.v1.runtime", "stats_collect_period"}, "10s"},
		{[]string{"plugins", "io.containerd.cri.v1.runtime", "containerd", "default_runtime_name"}, "runc"},
		{[]string{"plugins", "io.containerd.cri.v1.runtime", "containerd", "runtimes", "runc", "runtime_type"}, "io.containerd.runc.v2"},
		{[]string{"plugins", "io.containerd.cri.v1.runtime", "containerd", "runtimes", "runc", "runtime_path"}, "/rt/containerd-shim-runc-v2"},
		{[]string{"plugins", "io.containerd.cri.v1.runtime", "containerd", "runtimes", "runc", "options", "BinaryName"}, "/rt/runc"},
		{[]string{"plugins", "io.containerd.cri.v1.runtime", "containerd", "runtimes", "runc", "options", "SystemdCgroup"}, false},
		{[]string{"plugins", "io.containerd.cri.v1.runtime", "cni", "bin_dirs"}, []any{"/cni/bin"}},
		{[]string{"plugins", "io.containerd.cri.v1.runtime", "cni", "conf_dir"}, "/cni/conf"},
	} {
		if got := lookup(cfg, c.path); fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("%v = %v, want %v", c.path, got, c.want)
		}
	}
}

// lookup is the value at path in nested TOML tables (nil if absent).
func lookup(m map[string]any, path []string) any {
	var v any = m
	for _, k := range path {
		t, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = t[k]
	}
	return v
}
