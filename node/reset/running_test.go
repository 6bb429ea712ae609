package reset

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
)

// TestMain runs the helper process the tests start: with
// SQLKUBE_RESET_TEST_HOLD set, the binary only waits to be killed, under
// whatever command line the test gave it.
func TestMain(m *testing.M) {
	if os.Getenv("SQLKUBE_RESET_TEST_HOLD") != "" {
		select {}
	}
	os.Exit(m.Run())
}

// hold starts this test binary, named argv0, with args, in dir, until the
// test ends.
func hold(t *testing.T, argv0, dir string, args ...string) int {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// argv[0] is a link to this binary named argv0.
	link := filepath.Join(t.TempDir(), argv0)
	if err := os.Symlink(self, link); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(link, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "SQLKUBE_RESET_TEST_HOLD=1")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd.Process.Pid
}

func TestFindHolder(t *testing.T) {
	defaults := map[string]string{"server": "./sqlkube-data", "node": "./sqlkube-node"}
	work := t.TempDir()
	data := filepath.Join(work, "sqlkube-data")
	if err := os.Mkdir(data, 0o700); err != nil {
		t.Fatal(err)
	}
	// A link to the directory is the same directory.
	link := filepath.Join(t.TempDir(), "via-link")
	if err := os.Symlink(data, link); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, argv0, dir string
		args             []string
		want             string // Holder.Command, "" for none
	}{
		{"flag, absolute", "sqlkube", "/", []string{"server", "--data-dir", data}, "sqlkube server"},
		{"flag with =, relative to the working directory", "sqlkube", work, []string{"--log-level", "debug", "node", "--data-dir=sqlkube-data"}, "sqlkube node"},
		{"through a link", "sqlkube", "/", []string{"server", "--data-dir", link}, "sqlkube server"},
		{"the default in its working directory", "sqlkube", work, []string{"--log-format=json", "server"}, "sqlkube server"},
		{"any program naming it with --data-dir", "other", "/", []string{"--data-dir", data}, "other"},
		{"another directory", "sqlkube", "/", []string{"server", "--data-dir", t.TempDir()}, ""},
		{"simulated nodes have none", "sqlkube", work, []string{"node", "--fake"}, ""},
		{"the default elsewhere", "sqlkube", t.TempDir(), []string{"server"}, ""},
		{"containerd is not a holder", "containerd", "/", []string{"--data-dir", data}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pid := hold(t, tc.argv0, tc.dir, tc.args...)
			h, err := FindHolder(data, defaults)
			if err != nil {
				t.Fatal(err)
			}
			// Other processes of the host may hold other directories, never
			// this test's.
			switch {
			case tc.want == "" && h != nil:
				t.Errorf("holder %v, want none", h)
			case tc.want != "" && h == nil:
				t.Errorf("no holder, want %s (pid %d)", tc.want, pid)
			case tc.want != "" && (h.PID != pid || h.Command != tc.want):
				t.Errorf("holder %v, want %s (pid %d)", h, tc.want, pid)
			}
		})
	}
	if h, err := FindHolder(filepath.Join(work, "missing"), defaults); err == nil || h != nil {
		t.Errorf("a missing directory: %v, %v", h, err)
	}
}

func TestFlagValue(t *testing.T) {
	args := []string{"-namespace", "k8s.io", "--address=/run/x.sock", "-id", "abc", "--", "--after", "v"}
	for name, want := range map[string]string{"namespace": "k8s.io", "address": "/run/x.sock", "id": "abc"} {
		if got, ok := flagValue(args, name); !ok || got != want {
			t.Errorf("flagValue(%s) = %q, %v; want %q", name, got, ok, want)
		}
	}
	if got, ok := flagValue(args, "after"); ok {
		t.Errorf("a flag after -- was found: %q", got)
	}
	if boolFlag([]string{"--fake=false"}, "fake") || !boolFlag([]string{"--count", "2", "--fake"}, "fake") {
		t.Error("boolFlag")
	}
	if got := subcommand([]string{"--log-level", "debug", "--log-format=json", "kube-proxy", "--", "--x"}); got != "kube-proxy" {
		t.Errorf("subcommand = %q", got)
	}
}

// TestProcesses_OfTheNode: containerd, its shims and the node agent's
// children are found by the paths their command lines name, through a
// symbolic link to the data directory too.
func TestProcesses_OfTheNode(t *testing.T) {
	data := t.TempDir()
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(data, link); err != nil {
		t.Fatal(err)
	}
	data = canonical(data)
	ctrd := hold(t, "containerd", "/", "--config", filepath.Join(link, "containerd", "config.toml"))
	// sqlkube's own containerd: /proc/self/exe containerd --config FILE.
	linked := hold(t, "exe", "/", "containerd", "--config", filepath.Join(data, "containerd", "config.toml"))
	shimPID := hold(t, "containerd-shim-runc-v2", "/", "-namespace", "k8s.io", "-id", "abc", "-address", filepath.Join(link, "containerd", "containerd.sock"))
	kubelet := hold(t, "exe", "/", "--log-format=json", "kubelet", filepath.Join(link, "node", "kubelet.json"))
	proxy := hold(t, "exe", "/", "--log-level", "info", "kube-proxy", "--", "--kubeconfig="+filepath.Join(data, "node", "kubelet.kubeconfig"))
	hold(t, "exe", "/", "kubelet", filepath.Join(t.TempDir(), "kubelet.json")) // another node's

	if pids, err := containerdProcs(filepath.Join(data, "containerd", "config.toml")); err != nil || !slices.Equal(pids, []int{ctrd, linked}) && !slices.Equal(pids, []int{linked, ctrd}) {
		t.Errorf("containerd: %v, %v; want %d and %d", pids, err, ctrd, linked)
	}
	if shims, err := findShims(filepath.Join(data, "containerd", "containerd.sock")); err != nil || len(shims) != 1 || shims[0] != (shim{pid: shimPID, id: "abc"}) {
		t.Errorf("shims: %v, %v; want pid %d", shims, err, shimPID)
	}
	children, err := childProcs(data, []string{"kubelet", "kube-proxy"})
	var pids []int
	for _, p := range children {
		pids = append(pids, p.pid)
	}
	slices.Sort(pids)
	if want := []int{kubelet, proxy}; err != nil || !slices.Equal(pids, want) {
		t.Errorf("children: %v, %v; want %v", pids, err, want)
	}
}

func TestCanonical(t *testing.T) {
	dir := t.TempDir()
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	real, _ := filepath.EvalSymlinks(dir)
	if got, want := canonical(filepath.Join(link, "missing", "file")), filepath.Join(real, "missing", "file"); got != want {
		t.Errorf("canonical = %q, want %q", got, want)
	}
}
