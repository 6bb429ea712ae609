package reset

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

func writeJSON(t *testing.T, path string, v any) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestFindTasks reads bundles as containerd's CRI plugin writes them: a
// sandbox with its network namespace file and shim socket, a container
// joining the sandbox's namespace through /proc.
func TestFindTasks(t *testing.T) {
	state := t.TempDir()
	bundles := filepath.Join(state, taskDir, "k8s.io")
	writeJSON(t, filepath.Join(bundles, "sb1", "config.json"), map[string]any{
		"annotations": map[string]string{sandboxAnnotation: "sandbox"},
		"linux": map[string]any{"cgroupsPath": "/k8s.io/sb1", "namespaces": []map[string]string{
			{"type": "pid"}, {"type": "network", "path": "/var/run/netns/cni-1234"},
		}},
	})
	// containerd 2 names the shim's socket in bootstrap.json, 1.x in an
	// address file.
	writeJSON(t, filepath.Join(bundles, "sb1", "bootstrap.json"), map[string]any{"version": 2, "address": "unix:///run/containerd/s/abc", "protocol": "ttrpc"})
	writeJSON(t, filepath.Join(bundles, "c1", "config.json"), map[string]any{
		"annotations": map[string]string{sandboxAnnotation: "container"},
		"linux":       map[string]any{"cgroupsPath": "/k8s.io/c1", "namespaces": []map[string]string{{"type": "network", "path": "/proc/42/ns/net"}}},
	})
	if err := os.WriteFile(filepath.Join(bundles, "c1", "address"), []byte("unix:///run/containerd/s/def\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(bundles, "created"), 0o700); err != nil {
		t.Fatal(err)
	}
	tasks, err := findTasks(state)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]task{}
	for _, tk := range tasks {
		got[tk.id] = tk
	}
	if len(got) != 3 {
		t.Fatalf("tasks %+v, want sb1, c1 and created", tasks)
	}
	if sb := got["sb1"]; !sb.sandbox || sb.ns != "k8s.io" || sb.cgroup != "/k8s.io/sb1" || sb.netns != "/var/run/netns/cni-1234" || sb.shimSocket != "/run/containerd/s/abc" {
		t.Errorf("sandbox %+v", sb)
	}
	if c := got["c1"]; c.sandbox || c.cgroup != "/k8s.io/c1" || c.netns != "" || c.shimSocket != "/run/containerd/s/def" {
		t.Errorf("container %+v", c)
	}
	if got["created"].shimSocket != "" {
		t.Errorf("a task without a shim: %+v", got["created"])
	}
	if got["sb1"].String() != "k8s.io/sb1 (pod sandbox)" {
		t.Errorf("String() = %q", got["sb1"].String())
	}
	if tasks, err := findTasks(filepath.Join(state, "missing")); err != nil || len(tasks) > 0 {
		t.Errorf("no state directory: %v, %v", tasks, err)
	}
}

func TestCNIAttachments(t *testing.T) {
	dir := t.TempDir()
	conf, _ := json.Marshal(map[string]any{"name": "sqlkube", "plugins": []any{
		map[string]any{"type": "bridge", "ipam": map[string]any{"type": "host-local", "dataDir": "/data/node/cni/ipam"}},
		map[string]any{"type": "portmap"},
	}})
	writeJSON(t, filepath.Join(dir, "results", "sqlkube-sb1-eth0"), map[string]any{
		"kind": "cniCacheV1", "containerId": "sb1", "networkName": "sqlkube", "ifName": "eth0", "config": conf,
		"result": map[string]any{"interfaces": []map[string]string{{"name": "br"}, {"name": "eth0", "sandbox": "/var/run/netns/cni-1"}}},
	})
	if err := os.WriteFile(filepath.Join(dir, "results", "junk"), []byte("not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := cniAttachments(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].containerID != "sb1" || got[0].network != "sqlkube" || got[0].netns != "/var/run/netns/cni-1" || got[0].ipamDir != "/data/node/cni/ipam" {
		t.Errorf("attachments %+v", got)
	}
	if got, err := cniAttachments(filepath.Join(dir, "missing")); err != nil || got != nil {
		t.Errorf("no cache: %v, %v", got, err)
	}
}

func TestSummary(t *testing.T) {
	r := &report{}
	for _, k := range []string{"container", "container", "pod sandbox", "directory", "mount"} {
		r.add("removed", k, "x")
	}
	if got, want := r.sum.String(), "2 containers, 1 pod sandbox, 1 directory, 1 mount"; got != want {
		t.Errorf("summary %q, want %q", got, want)
	}
	if got := (Summary{}).String(); got != "nothing to remove" {
		t.Errorf("empty summary %q", got)
	}
	if plural("pod sandbox") != "pod sandboxes" || plural("directory") != "directories" || plural("process") != "processes" {
		t.Error("plural")
	}
}
