package containerd

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWriteConfig(t *testing.T) {
	dir := t.TempDir()
	p, err := WriteConfig(Options{
		Dir: dir, SandboxImage: "example.test/pause:9", CNIBinDir: "/cni/bin", CNIConfDir: "/cni/conf",
		Runtime: Runtime{Shim: "/rt/containerd-shim-runc-v2", Runc: "/rt/runc"},
	})
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"version = 3", `root = "` + dir + `/root"`, `address = "` + Socket(dir) + `"`,
		`[plugins."io.containerd.cri.v1.images"]`, `snapshotter = "overlayfs"`, `sandbox = "example.test/pause:9"`,
		`[plugins."io.containerd.cri.v1.runtime"]`, "restrict_oom_score_adj = true", "SystemdCgroup = false", `stats_collect_period = "10s"`,
		`runtime_path = "/rt/containerd-shim-runc-v2"`, `BinaryName = "/rt/runc"`,
		`bin_dirs = ["/cni/bin"]`, `conf_dir = "/cni/conf"`, `[plugins."io.containerd.nri.v1.nri"]`,
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("config lacks %q:\n%s", want, b)
		}
	}
	if strings.Contains(string(b), "io.containerd.grpc.v1.cri") {
		t.Errorf("config has containerd 1.x's CRI section:\n%s", b)
	}
	if Endpoint(dir) != "unix://"+filepath.Join(dir, "containerd.sock") {
		t.Errorf("endpoint %s", Endpoint(dir))
	}
}

// TestWriteConfig_RegistryConfigDir: a registry hosts directory is the
// CRI images plugin's registry config_path.
func TestWriteConfig_RegistryConfigDir(t *testing.T) {
	p, err := WriteConfig(Options{Dir: t.TempDir(), SandboxImage: "p:1", RegistryConfigDir: "/etc/sqlkube/certs.d"})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(p)
	want := "[plugins.\"io.containerd.cri.v1.images\".registry]\n    config_path = \"/etc/sqlkube/certs.d\"\n"
	if !strings.Contains(string(b), want) {
		t.Errorf("config lacks\n%s\n:\n%s", want, b)
	}
}

// TestWriteConfig_DefaultRuntime: without a Runtime, containerd chooses
// the shim and the shim its runc; without a registry hosts directory, the
// CRI plugin keeps its default (/etc/containerd/certs.d).
func TestWriteConfig_DefaultRuntime(t *testing.T) {
	p, err := WriteConfig(Options{Dir: t.TempDir(), SandboxImage: "p:1"})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(p)
	for _, key := range []string{"runtime_path", "BinaryName", "config_path", ".registry]"} {
		if strings.Contains(string(b), key) {
			t.Errorf("config sets %s without a Runtime:\n%s", key, b)
		}
	}
}

// TestWriteConfig_Quotes: paths are TOML strings, whatever they hold.
func TestWriteConfig_Quotes(t *testing.T) {
	dir := filepath.Join(t.TempDir(), `a "quoted" \dir`)
	p, err := WriteConfig(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(p)
	if want := `root = "` + strings.ReplaceAll(strings.ReplaceAll(dir, `\`, `\\`), `"`, `\"`) + `/root"`; !strings.Contains(string(b), want) {
		t.Errorf("config lacks %s:\n%s", want, b)
	}
}

func TestStart_RefusesLongSocketPath(t *testing.T) {
	dir := filepath.Join(t.TempDir(), strings.Repeat("d", 100))
	if _, err := Start(context.Background(), Options{Dir: dir}); err == nil || !strings.Contains(err.Error(), "too long") {
		t.Fatalf("a socket path over 100 bytes: %v", err)
	}
}

// TestStart_Command: Start runs Options.Command with --config FILE, and
// reports its exit with its log's path.
func TestStart_Command(t *testing.T) {
	dir := t.TempDir()
	script := writeScript(t, dir, "fake-containerd", `echo "args: $*"; exit 3`)
	_, err := Start(context.Background(), Options{Dir: dir, Command: []string{script, "containerd"}})
	if err == nil || !strings.Contains(err.Error(), "containerd exited") || !strings.Contains(err.Error(), filepath.Join(dir, "containerd.log")) {
		t.Fatalf("Start with a command that exits: %v", err)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "containerd.log"))
	if want := "args: containerd --config " + ConfigFile(dir) + "\n"; string(b) != want {
		t.Errorf("the command ran with %q, want %q", b, want)
	}
}

// TestImport_Command: Import runs the ctr command given, with the socket
// and the CRI namespace.
func TestImport_Command(t *testing.T) {
	dir := t.TempDir()
	ctr := writeScript(t, dir, "fake-ctr", `echo "$*"`)
	out, err := Import(context.Background(), []string{ctr, "ctr"}, "unix:///s/containerd.sock", "/a.tar")
	if err != nil {
		t.Fatal(err)
	}
	if want := "ctr --address /s/containerd.sock --namespace k8s.io images import --all-platforms /a.tar\n"; out != want {
		t.Errorf("ctr ran with %q, want %q", out, want)
	}
}

func TestFind(t *testing.T) {
	dir := t.TempDir()
	shim := writeScript(t, dir, ShimName, `printf 'containerd-shim-runc-v2:\n  Version:  2.4.2\n'`)
	runc := writeScript(t, dir, RuncName, `echo runc`)
	t.Setenv("PATH", t.TempDir()) // nothing there
	got, err := Find(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got != (Runtime{Shim: shim, Runc: runc}) {
		t.Errorf("Find(%s) = %+v", dir, got)
	}
}

// TestFind_Path: without them in the directories given, Find takes them
// from PATH, but a containerd 1.x shim is refused.
func TestFind_Path(t *testing.T) {
	path, empty := t.TempDir(), t.TempDir()
	runc := writeScript(t, path, RuncName, `echo runc`)
	t.Setenv("PATH", path)
	shim := writeScript(t, path, ShimName, `printf 'containerd-shim-runc-v2:\n  Version:  1.6.20~ds1\n'`)
	if _, err := Find(empty); !errors.Is(err, ErrNoRuntime) || !strings.Contains(err.Error(), "containerd 1.6.20~ds1's") {
		t.Errorf("with containerd 1.6's shim on PATH: %v", err)
	}
	writeScript(t, path, ShimName, `printf 'containerd-shim-runc-v2:\n  Version:  2.3.7\n'`)
	if got, err := Find(empty); err != nil || got != (Runtime{Shim: shim, Runc: runc}) {
		t.Errorf("with containerd 2.3's shim on PATH: %+v, %v", got, err)
	}
}

func TestFind_Missing(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	dir := t.TempDir()
	_, err := Find(dir)
	if !errors.Is(err, ErrNoRuntime) {
		t.Fatalf("Find with nothing anywhere: %v", err)
	}
	for _, want := range []string{ShimName + " not found", RuncName + " not found", dir, "make runtime", "libseccomp-dev"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error %q does not say %q", err, want)
		}
	}
}

func TestV2(t *testing.T) {
	for v, want := range map[string]bool{"2.4.2": true, "v2.3.7": true, "10.0.0": true, "1.6.20~ds1": false, "1.7.24": false, "": false, "unknown": false} {
		if got := v2(v); got != want {
			t.Errorf("v2(%q) = %v, want %v", v, got, want)
		}
	}
}

// writeScript writes an executable shell script dir/name.
func writeScript(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}
