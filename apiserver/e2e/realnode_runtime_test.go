package e2e

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sqlkube/sqlkube/node/containerd"
	"github.com/sqlkube/sqlkube/node/images"
)

// TestRealNode_OwnContainerd: the host's node runs on sqlkube's own
// containerd 2 and the runc shim and runc beside sqlkube, on a host
// without any containerd or runc of its own: PATH holds every other
// program of this host but none of containerd's (Debian's containerd
// package installs containerd, ctr and containerd-shim-runc-v2) nor runc.
// The node reports containerd 2 (kubectl get nodes -o wide), and a pod
// with the runtime's default seccomp profile runs to Running under the
// shim beside sqlkube.
func TestRealNode_OwnContainerd(t *testing.T) {
	requireNodeHost(t)
	t.Setenv("PATH", pathWithout(t, "containerd", "containerd-shim", "containerd-shim-runc-v1", "containerd-shim-runc-v2", "containerd-stress", "ctr", "runc"))
	for _, bin := range []string{"containerd", "ctr", "runc", "containerd-shim-runc-v2"} {
		if p, err := exec.LookPath(bin); err == nil {
			t.Fatalf("%s is still on PATH (%s)", bin, p)
		}
	}
	s := startNodeServer(t, filepath.Join(t.TempDir(), "data"), "e2e-own-runtime")
	k := kubectlPath(t)

	runtime := s.mustKubectl(t, k, "get", "node", "e2e-own-runtime", "-o", "jsonpath={.status.nodeInfo.containerRuntimeVersion}")
	if !regexp.MustCompile(`^containerd://2\.\d+\.\d+$`).MatchString(runtime) {
		t.Errorf("containerRuntimeVersion %q, want containerd://2.x.y", runtime)
	}
	if wide := s.mustKubectl(t, k, "get", "nodes", "-o", "wide"); !strings.Contains(wide, "containerd://2.") {
		t.Errorf("kubectl get nodes -o wide shows no containerd 2:\n%s", wide)
	}

	// Bound to the node itself: the runtime is what is under test here.
	s.mustKubectl(t, k, "apply", "-f", podManifest(t, `apiVersion: v1
kind: Pod
metadata: {name: own}
spec:
  nodeName: e2e-own-runtime
  securityContext:
    seccompProfile: {type: RuntimeDefault}
  containers:
  - name: c
    image: IMAGE
    imagePullPolicy: Never
    command: [sh, -c, "grep Seccomp: /proc/self/status; exec sleep 3600"]
`))
	s.mustKubectl(t, k, "wait", "--for=jsonpath={.status.phase}=Running", "pod/own", "--timeout=90s")
	s.waitKubectl(t, k, "Seccomp:\t2", "logs", "own") // filtered: runc has seccomp

	// The pod's shim is the one beside sqlkube, run by the containerd
	// sqlkube started, and runc keeps the container's state in its root.
	id := strings.TrimPrefix(s.mustKubectl(t, k, "get", "pod", "own", "-o", "jsonpath={.status.containerStatuses[0].containerID}"), "containerd://")
	want, err := filepath.EvalSymlinks(filepath.Join(filepath.Dir(sqlkubeBin), containerd.ShimName))
	if err != nil {
		t.Fatal(err)
	}
	socket := containerd.Socket(filepath.Join(s.dataDir, "containerd"))
	shims := shimsOf(t, socket)
	if len(shims) == 0 {
		t.Fatalf("no shim serves %s", socket)
	}
	for pid, exe := range shims {
		if exe != want {
			t.Errorf("shim %d runs %s, want %s", pid, exe, want)
		}
	}
	if _, err := os.Stat(filepath.Join(containerd.RuncRoot, containerd.Namespace, id, "state.json")); err != nil {
		t.Errorf("runc has no state for the container: %v", err)
	}
}

// TestRealNode_ExternalContainerd: with --container-runtime-endpoint the
// node runs on a containerd 2 it did not start (here sqlkube's own, but
// started by the test, as a host's service would be).
func TestRealNode_ExternalContainerd(t *testing.T) {
	requireNodeHost(t)
	dataDir := filepath.Join(t.TempDir(), "data")
	// Where the server's own would be, so that `images import --data-dir`
	// and the tests' helpers find it.
	ctrDir := filepath.Join(dataDir, "containerd")
	rt, err := containerd.Find(filepath.Dir(sqlkubeBin))
	if err != nil {
		t.Fatal(err)
	}
	cniBin := "/usr/lib/cni"
	if _, err := os.Stat(filepath.Join(cniBin, "bridge")); err != nil {
		cniBin = "/opt/cni/bin"
	}
	// With a runtime of its own the pod network is the operator's too: a
	// bridge of the test's, without masquerading.
	cniConf, bridge := filepath.Join(t.TempDir(), "net.d"), fmt.Sprintf("sqkext%x", os.Getpid()&0xffff)
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", bridge).Run() })
	if err := os.Mkdir(cniConf, 0o700); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(cniConf, "10-ext.conflist"), fmt.Sprintf(`{"cniVersion": "1.0.0", "name": "ext", "plugins": [
  {"type": "bridge", "bridge": %q, "isGateway": true, "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.254.77.0/24"}]], "dataDir": %q}}]}`,
		bridge, filepath.Join(t.TempDir(), "ipam")))
	cfg, err := containerd.WriteConfig(containerd.Options{
		Dir: ctrDir, SandboxImage: images.PauseImageName, Runtime: rt, CNIBinDir: cniBin, CNIConfDir: cniConf,
	})
	if err != nil {
		t.Fatal(err)
	}
	log, err := os.Create(filepath.Join(t.TempDir(), "containerd.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	ctr := exec.Command(sqlkubeBin, "containerd", "--config", cfg)
	ctr.Stdout, ctr.Stderr = log, log
	if err := ctr.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ctr.Process.Signal(syscall.SIGTERM); _ = ctr.Wait() }) // after the server and its pods
	waitFor(t, 30*time.Second, "the external containerd's socket", func() bool {
		c, err := net.Dial("unix", containerd.Socket(ctrDir))
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	pause := filepath.Join(t.TempDir(), "pause.tar")
	f, err := os.Create(pause)
	if err != nil {
		t.Fatal(err)
	}
	if err := images.WriteArchive(f, images.PauseImage(images.PauseImageName)); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if out, err := exec.Command(sqlkubeBin, "images", "import", "--container-runtime-endpoint", containerd.Endpoint(ctrDir), pause).CombinedOutput(); err != nil {
		t.Fatalf("images import: %v\n%s", err, out)
	}

	s := startNodeServer(t, dataDir, "e2e-external", "--container-runtime-endpoint", containerd.Endpoint(ctrDir))
	k := kubectlPath(t)
	if v := s.mustKubectl(t, k, "get", "node", "e2e-external", "-o", "jsonpath={.status.nodeInfo.containerRuntimeVersion}"); !strings.HasPrefix(v, "containerd://2.") {
		t.Errorf("containerRuntimeVersion %q, want containerd://2.x", v)
	}
	s.mustKubectl(t, k, "apply", "-f", podManifest(t, `apiVersion: v1
kind: Pod
metadata: {name: ext}
spec:
  nodeName: e2e-external
  containers:
  - {name: c, image: IMAGE, imagePullPolicy: Never, command: [sleep, "3600"]}
`))
	s.mustKubectl(t, k, "wait", "--for=jsonpath={.status.phase}=Running", "pod/ext", "--timeout=90s")
	if len(s.runtimeContainers(t)) == 0 {
		t.Error("the external containerd holds no container")
	}
}

// pathWithout is a directory to use as PATH: links to every program on
// PATH but those named.
func pathWithout(t *testing.T, names ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, d := range filepath.SplitList(os.Getenv("PATH")) {
		ents, err := os.ReadDir(d)
		if err != nil {
			continue
		}
		for _, e := range ents {
			name := e.Name()
			link := filepath.Join(dir, name)
			if slices.Contains(names, name) || e.IsDir() {
				continue
			}
			if _, err := os.Lstat(link); err == nil {
				continue // the first on PATH wins
			}
			if err := os.Symlink(filepath.Join(d, name), link); err != nil {
				t.Fatal(err)
			}
		}
	}
	return dir
}

// shimsOf maps the pids of the shims serving the containerd at socket
// (started with -address SOCKET) to their executables.
func shimsOf(t *testing.T, socket string) map[int]string {
	t.Helper()
	out := map[int]string{}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		for i := 0; i+1 < len(args); i++ {
			if args[i] == "-address" && args[i+1] == socket && slices.Contains(args, "-id") {
				pid, _ := strconv.Atoi(e.Name())
				out[pid], _ = os.Readlink(filepath.Join("/proc", e.Name(), "exe"))
			}
		}
	}
	return out
}
