package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/sqlkube/sqlkube/internal/testport"
	"github.com/sqlkube/sqlkube/node/containerd"
	"github.com/sqlkube/sqlkube/node/images"
	"github.com/sqlkube/sqlkube/node/kubelet"
	"github.com/sqlkube/sqlkube/node/mounts"
	"github.com/sqlkube/sqlkube/node/podnet"
	"github.com/sqlkube/sqlkube/node/reset"
)

// testImage is the image the real-node tests run: Debian's static busybox
// with its applets, made by node/images and imported (no registry here).
const testImage = "sqlkube.local/busybox:e2e"

// requireNodeHost skips the test (fails it under CI=true) unless this host
// can run containers: root, the runc shim and runc beside the test's
// sqlkube (testbin links make runtime's there), the CNI plugins and a
// static busybox for the test image. containerd is sqlkube's own.
func requireNodeHost(t *testing.T) {
	t.Helper()
	why := ""
	if _, err := containerd.Missing(filepath.Dir(sqlkubeBin)); err != nil {
		why = err.Error()
	} else if _, err := os.Stat("/usr/lib/cni/bridge"); err != nil {
		if _, err := os.Stat("/opt/cni/bin/bridge"); err != nil {
			why = "the CNI plugins are missing (Debian: containernetworking-plugins)"
		}
	}
	if why == "" {
		if _, err := os.Stat("/bin/busybox"); err != nil {
			why = "/bin/busybox is missing (Debian: busybox-static)"
		}
	}
	if why == "" {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("real-node test: %s; CI must provide it (make test-deps installs it as root)", why)
	}
	t.Skipf("skipping the real-node test: %s", why)
}

// writeTestImage writes testImage's archive: busybox as /bin/*, /tmp.
func writeTestImage(t *testing.T) string {
	t.Helper()
	return writeBusyboxImage(t, testImage)
}

// writeBusyboxImage writes the archive of an image named name: testImage's
// content and the extra files given.
func writeBusyboxImage(t *testing.T, name string, extra ...images.File) string {
	t.Helper()
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		t.Fatal(err)
	}
	files := []images.File{{Path: "/bin/busybox", Data: bb, Mode: 0o755}, {Path: "/tmp", Dir: true, Mode: 0o1777}}
	for _, applet := range []string{"sh", "sleep", "cat", "echo", "httpd", "ls", "hostname", "tar", "true", "false", "mkdir", "wget", "head", "touch", "rm", "tr", "id", "chmod", "seq", "nc", "tail", "nslookup", "ping"} {
		files = append(files, images.File{Path: "/bin/" + applet, Link: "busybox"})
	}
	files = append(files, extra...)
	path := filepath.Join(t.TempDir(), "busybox.tar")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := images.WriteArchive(f, images.Image{Name: name, Files: files, Cmd: []string{"sh"}, Env: []string{"PATH=/bin"}}); err != nil {
		t.Fatal(err)
	}
	return path
}

// freePort asks the OS for a free TCP port.
func freePort(t *testing.T) int { return testport.Free(t) }

// startNodeServer starts `sqlkube server` with its host's node (kubelet and
// containerd), waits for the node to be Ready and imports testImage. At
// cleanup it deletes every pod and waits for the runtime to hold no
// container before the server stops, so no container outlives the test.
func startNodeServer(t *testing.T, dataDir, node string, args ...string) *server {
	t.Helper()
	return startNodeServerIn(t, "", dataDir, node, args...)
}

// startNodeServerIn is startNodeServer run in workDir, where dataDir may
// be relative.
func startNodeServerIn(t *testing.T, workDir, dataDir, node string, args ...string) *server {
	t.Helper()
	port := freePort(t)
	abs := dataDir
	if !filepath.IsAbs(abs) {
		abs = filepath.Join(workDir, dataDir)
	}
	t.Cleanup(func() { cleanUpNode(t, abs) }) // runs after the server stops
	podCIDR := ""
	t.Cleanup(func() { removeHostPodNetwork(t, podCIDR) }) // after the server stops too
	// These nodes share the host's network namespace, where a kube-proxy
	// would leave its rules: the Service tests run theirs in namespaces
	// of their own (realnode_net_test.go).
	args = append([]string{"server", "--disable-node=false", "--node-name", node, "--kubelet-arg=--port=" + strconv.Itoa(port), "--disable-kube-proxy"}, args...)
	s := startCommandIn(t, workDir, dataDir, args...)
	t.Cleanup(func() { s.removeAllPods(t) }) // runs before the server stops
	kubectl := kubectlPath(t)
	s.waitKubectl(t, kubectl, "True", "get", "node", node, "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
	podCIDR = s.mustKubectl(t, kubectl, "get", "node", node, "-o", "jsonpath={.spec.podCIDR}")
	s.sqlkube(t, "images", "import", writeTestImage(t))
	return s
}

// removeHostPodNetwork removes what a node with podCIDR set up in the
// host's network namespace: its masquerade chain and its bridge.
func removeHostPodNetwork(t *testing.T, podCIDR string) {
	t.Helper()
	if podCIDR == "" {
		return
	}
	chain := podnet.MasqueradeChain(podCIDR)
	for _, args := range [][]string{
		{"iptables", "-w", "-t", "nat", "-D", "POSTROUTING", "-s", podCIDR, "-m", "comment", "--comment", podnet.MasqueradeComment(podCIDR), "-j", chain},
		{"iptables", "-w", "-t", "nat", "-F", chain},
		{"iptables", "-w", "-t", "nat", "-X", chain},
		{"ip", "link", "del", podnet.BridgeName(podCIDR)},
	} {
		_ = exec.Command(args[0], args[1:]...).Run() // gone already is fine
	}
	if out, _ := exec.Command("iptables", "-w", "-t", "nat", "-S").Output(); strings.Contains(string(out), chain) {
		t.Errorf("iptables chain %s is left behind", chain)
	}
	if exec.Command("ip", "link", "show", podnet.BridgeName(podCIDR)).Run() == nil {
		t.Errorf("bridge %s is left behind", podnet.BridgeName(podCIDR))
	}
}

// runtimeContainers lists the runtime's containers (k8s.io namespace).
func (s *server) runtimeContainers(t *testing.T) []string {
	t.Helper()
	ids, err := containersIn(filepath.Join(s.dataDir, "containerd"))
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// containersIn lists the containers (k8s.io namespace) of the containerd
// started in dir, with `sqlkube ctr`.
func containersIn(dir string) ([]string, error) {
	out, err := exec.Command(sqlkubeBin, "ctr", "--address", containerd.Socket(dir), "-n", containerd.Namespace, "containers", "ls", "-q").Output()
	if err != nil {
		return nil, fmt.Errorf("sqlkube ctr containers ls: %w", err)
	}
	return strings.Fields(string(out)), nil
}

// removeAllPods deletes every pod in every namespace, waits until the
// API has none, then removes what the runtime keeps of them and waits
// until it has no container left.
func (s *server) removeAllPods(t *testing.T) {
	t.Helper()
	if s.cmd.ProcessState != nil {
		return
	}
	kubectl := kubectlPath(t)
	_, _ = s.kubectl(t, kubectl, "delete", "deployments,replicasets,replicationcontrollers,statefulsets,daemonsets,jobs,pods", "--all", "--all-namespaces", "--grace-period=1", "--wait=false")
	// The kubelet removes a pod from the API once its containers have
	// stopped and its volumes are unmounted.
	start := time.Now()
	deadline := start.Add(90 * time.Second)
	for {
		pods, _ := s.kubectl(t, kubectl, "get", "pods", "--all-namespaces", "-o", "name")
		if strings.TrimSpace(pods) == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("left behind in the API: pods %q", pods)
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("every pod removed from the API in %s", time.Since(start).Round(100*time.Millisecond))
	clearRuntime(t, filepath.Join(s.dataDir, "containerd"))
}

// clearRuntime removes what the runtime of the node whose containerd runs
// in dir keeps of deleted pods, and waits until it lists no container (a
// node that has stopped has none). The stopped containers and sandboxes
// of deleted pods stay there until the kubelet's garbage collection, once
// a minute, removes them; this removes them now, as it would.
func clearRuntime(t *testing.T, dir string) {
	t.Helper()
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	removed, err := reset.RemoveSandboxes(ctx, containerd.Socket(dir))
	if err != nil {
		t.Error(err)
	}
	waitFor(t, 90*time.Second, "the runtime to have no container", func() bool {
		ids, err := containersIn(dir)
		return err != nil || len(ids) == 0
	})
	t.Logf("%d pod sandboxes removed from the runtime, which has no container left after %s", len(removed), time.Since(start).Round(100*time.Millisecond))
}

// cleanUpNode removes what a stopped node whose data directory is dataDir
// leaves on the host and sqlkube reset would remove: the mounts under
// dataDir (the kubelet bind-mounts its root directory onto itself),
// deepest first, so the test's temporary directory can be removed, and
// its kubelet's cgroups, which no process may still be in.
func cleanUpNode(t *testing.T, dataDir string) {
	t.Helper()
	if err := mounts.DetachUnder(dataDir); err != nil {
		t.Error(err)
	}
	removeNodeCgroups(t, dataDir)
}

// nodeCgroupRoot is the cgroup root of the kubelet of the node whose data
// directory is dataDir.
func nodeCgroupRoot(dataDir string) string { return kubelet.CgroupRoot(filepath.Join(dataDir, "node")) }

// removeNodeCgroups removes the kubelet's cgroup root of the node whose
// data directory is dataDir from every hierarchy, deepest first, and
// their parent once no other node's root is in it. A cgroup that holds
// a process (which reset would kill) fails the test.
func removeNodeCgroups(t *testing.T, dataDir string) {
	t.Helper()
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	root := nodeCgroupRoot(dataDir)
	for _, mnt := range cgroupRootsOf(string(mi)) {
		top := filepath.Join(mnt, root)
		var dirs []string // parents before their children
		_ = filepath.WalkDir(top, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			// A cgroup is busy until its last process is reaped.
			deadline := time.Now().Add(10 * time.Second)
			for {
				err := syscall.Rmdir(dirs[i])
				if err == nil || errors.Is(err, fs.ErrNotExist) {
					break
				}
				if !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline) {
					procs, _ := os.ReadFile(filepath.Join(dirs[i], "cgroup.procs"))
					t.Errorf("cgroup %s is left behind: %v (processes: %q)", dirs[i], err, strings.Fields(string(procs)))
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
		_ = syscall.Rmdir(filepath.Dir(top)) // another node's root may be there
	}
}

// kubectlPath is the machine's kubectl (skips or fails as kubectls does).
func kubectlPath(t *testing.T) string {
	t.Helper()
	bins := kubectls(t)
	for name, p := range bins {
		if name == "kubectl" {
			return p
		}
	}
	for _, p := range bins {
		return p
	}
	t.Fatal("no kubectl")
	return ""
}

// TestKubectl_RealNode: the server's own node runs pods as containers,
// and every kubectl command that talks to a pod works, with each kubectl.
func TestKubectl_RealNode(t *testing.T) {
	requireNodeHost(t)
	s := startNodeServer(t, filepath.Join(t.TempDir(), "data"), "e2e-node")
	kubectl := kubectlPath(t)

	// The node: Ready, with the host's real capacity and this version.
	cpus := s.mustKubectl(t, kubectl, "get", "node", "e2e-node", "-o", "jsonpath={.status.capacity.cpu}")
	if want := strconv.Itoa(runtime.NumCPU()); cpus != want {
		t.Errorf("node capacity cpu = %q, want the host's %s", cpus, want)
	}
	if v := s.mustKubectl(t, kubectl, "get", "node", "e2e-node", "-o", "jsonpath={.status.nodeInfo.kubeletVersion}"); !strings.HasPrefix(v, "v1.") {
		t.Errorf("kubeletVersion %q", v)
	}

	s.mustKubectl(t, kubectl, "run", "c", "--image="+testImage, "--restart=Never", "--", "sh", "-c", "echo started; for i in 1 2 3; do echo tick $i; sleep 1; done; sleep 3600")
	s.mustKubectl(t, kubectl, "run", "web", "--image="+testImage, "--restart=Never", "--", "sh", "-c", "mkdir -p /www && echo hello-web > /www/index.html && exec httpd -f -p 8080 -h /www")
	s.mustKubectl(t, kubectl, "wait", "--for=condition=Ready", "pod/c", "pod/web", "--timeout=60s")
	if ip := s.mustKubectl(t, kubectl, "get", "pod", "c", "-o", "jsonpath={.status.podIP}"); !strings.HasPrefix(ip, "10.42.") {
		t.Errorf("pod IP %q is not from the node's pod CIDR", ip)
	}

	for name, bin := range kubectls(t) {
		t.Run(name, func(t *testing.T) {
			if out := strings.TrimSpace(s.mustKubectl(t, bin, "exec", "c", "--", "cat", "/etc/hostname")); out != "c" {
				t.Errorf("exec cat /etc/hostname = %q, want c", out)
			}
			if out := s.kubectlStdin(t, bin, "from stdin\n", "exec", "-i", "c", "--", "cat"); out != "from stdin\n" {
				t.Errorf("exec -i cat = %q", out)
			}
			// exec -it, on a terminal (script(1) gives kubectl a pty): the
			// container gets one too.
			if out := s.onTerminal(t, bin, "exec", "-it", "c", "--", "sh", "-c", "tty; echo end-of-tty"); !strings.Contains(out, "/dev/pts/") || !strings.Contains(out, "end-of-tty") {
				t.Errorf("exec -it on a terminal printed %q", out)
			}
			if _, err := s.kubectl(t, bin, "exec", "c", "--", "false"); err == nil || !strings.Contains(err.Error(), "exit code 1") {
				t.Errorf("exec false: %v, want exit code 1", err)
			}
			s.waitKubectl(t, bin, "started\ntick 1\ntick 2\ntick 3", "logs", "c")
			if out := s.mustKubectl(t, bin, "logs", "c", "--tail=1"); strings.TrimSpace(out) != "tick 3" {
				t.Errorf("logs --tail=1 = %q", out)
			}
			// cp: a file in and out again.
			local := filepath.Join(t.TempDir(), "in.txt")
			writeFile(t, local, "copied "+name+"\n")
			s.mustKubectl(t, bin, "cp", local, "c:/tmp/in.txt")
			if out := s.mustKubectl(t, bin, "exec", "c", "--", "cat", "/tmp/in.txt"); out != "copied "+name+"\n" {
				t.Errorf("after cp, the file holds %q", out)
			}
			back := filepath.Join(t.TempDir(), "back.txt")
			s.mustKubectl(t, bin, "cp", "c:/tmp/in.txt", back)
			if b, _ := os.ReadFile(back); string(b) != "copied "+name+"\n" {
				t.Errorf("cp back: %q", b)
			}
			// port-forward to the pod's HTTP server.
			if body := s.portForwardGet(t, bin, "pod/web", 8080, "/index.html"); body != "hello-web\n" {
				t.Errorf("port-forward GET = %q", body)
			}
		})
	}

	// logs -f follows new lines.
	t.Run("logs -f", func(t *testing.T) {
		s.mustKubectl(t, kubectl, "run", "f", "--image="+testImage, "--restart=Never", "--", "sh", "-c", "i=0; while true; do i=$((i+1)); echo follow $i; sleep 0.2; done")
		s.mustKubectl(t, kubectl, "wait", "--for=condition=Ready", "pod/f", "--timeout=60s")
		lines := s.kubectlLines(t, kubectl, "logs", "-f", "f")
		found := false
		for i := 0; i < 100 && !found && lines.Scan(); i++ {
			found = lines.Text() == "follow 10"
		}
		if !found {
			t.Fatal("logs -f did not follow to line 10")
		}
	})

	// attach: a container reading its stdin echoes what is sent.
	t.Run("attach", func(t *testing.T) {
		manifest := filepath.Join(t.TempDir(), "a.yaml")
		writeFile(t, manifest, `apiVersion: v1
kind: Pod
metadata: {name: a}
spec:
  restartPolicy: Never
  containers:
  - name: a
    image: `+testImage+`
    stdin: true
    stdinOnce: true
    command: [sh, -c, "while read l; do echo got $l; done"]
`)
		s.mustKubectl(t, kubectl, "apply", "-f", manifest)
		s.mustKubectl(t, kubectl, "wait", "--for=condition=Ready", "pod/a", "--timeout=60s")
		out := s.kubectlStdin(t, kubectl, "one\n", "attach", "-i", "a")
		if !strings.Contains(out, "got one") {
			t.Errorf("attach -i echoed %q", out)
		}
	})

	// A Deployment's pods are containers in the runtime; deleting it
	// leaves none.
	t.Run("deployment", func(t *testing.T) {
		s.mustKubectl(t, kubectl, "create", "deployment", "d", "--image="+testImage, "--replicas=3", "--", "sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait")
		s.mustKubectl(t, kubectl, "rollout", "status", "deployment/d", "--timeout=90s")
		ids := strings.Fields(s.mustKubectl(t, kubectl, "get", "pods", "-l", "app=d", "-o", "jsonpath={.items[*].status.containerStatuses[0].containerID}"))
		running := strings.Join(s.runtimeContainers(t), " ")
		if len(ids) != 3 {
			t.Fatalf("container IDs %v", ids)
		}
		for _, id := range ids {
			if !strings.Contains(running, strings.TrimPrefix(id, "containerd://")) {
				t.Errorf("container %s is not in the runtime (%s)", id, running)
			}
		}
		s.mustKubectl(t, kubectl, "delete", "deployment", "d", "--wait=true", "--timeout=90s")
		s.waitKubectl(t, kubectl, "", "get", "pods", "-l", "app=d", "-o", "name")
		deadline := time.Now().Add(60 * time.Second)
		for {
			left := strings.Join(s.runtimeContainers(t), " ")
			gone := true
			for _, id := range ids {
				gone = gone && !strings.Contains(left, strings.TrimPrefix(id, "containerd://"))
			}
			if gone {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the deployment's containers are still in the runtime: %s", left)
			}
			time.Sleep(200 * time.Millisecond)
		}
	})

	// Deleting a namespace removes its pods' containers.
	t.Run("namespace", func(t *testing.T) {
		s.mustKubectl(t, kubectl, "create", "namespace", "gone")
		s.mustKubectl(t, kubectl, "-n", "gone", "create", "deployment", "d", "--image="+testImage, "--replicas=2", "--", "sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait")
		s.mustKubectl(t, kubectl, "-n", "gone", "rollout", "status", "deployment/d", "--timeout=90s")
		ids := strings.Fields(s.mustKubectl(t, kubectl, "-n", "gone", "get", "pods", "-o", "jsonpath={.items[*].status.containerStatuses[0].containerID}"))
		s.mustKubectl(t, kubectl, "delete", "namespace", "gone", "--timeout=120s")
		waitFor(t, 60*time.Second, "the namespace's containers to leave the runtime", func() bool {
			left := strings.Join(s.runtimeContainers(t), " ")
			for _, id := range ids {
				if strings.Contains(left, strings.TrimPrefix(id, "containerd://")) {
					return false
				}
			}
			return true
		})
	})

	// A pod that exists is never reported missing by logs.
	if _, err := s.kubectl(t, kubectl, "logs", "nosuchpod"); err == nil || !strings.Contains(err.Error(), `pods "nosuchpod" not found`) {
		t.Errorf("logs of a missing pod: %v", err)
	}
}

// TestRealNode_ServerRestart: restarting the server leaves running
// containers running and their pods Running. The server runs with a
// relative --data-dir, as `make run` does.
func TestRealNode_ServerRestart(t *testing.T) {
	requireNodeHost(t)
	// A relative data directory, as `make run`'s default is: the node's
	// kubeconfig must still find its certificates.
	workDir := t.TempDir()
	s := startNodeServerIn(t, workDir, "data", "e2e-restart")
	kubectl := kubectlPath(t)
	s.mustKubectl(t, kubectl, "run", "r", "--image="+testImage, "--restart=Never", "--", "sleep", "3600")
	s.mustKubectl(t, kubectl, "wait", "--for=condition=Ready", "pod/r", "--timeout=60s")
	id := s.mustKubectl(t, kubectl, "get", "pod", "r", "-o", "jsonpath={.status.containerStatuses[0].containerID}")

	// The kubelet is a child process of the server: killed, it is started
	// again and takes its pod over, while the API goes on serving.
	kubelet := killKubelet(t, s, "e2e-restart")
	if got := s.mustKubectl(t, kubectl, "get", "pod", "r", "-o", "jsonpath={.status.phase} {.status.containerStatuses[0].containerID} {.status.containerStatuses[0].restartCount}"); got != "Running "+id+" 0" {
		t.Errorf("after the kubelet was killed the pod is %q, want %q (the same container, never restarted)", got, "Running "+id+" 0")
	}
	// The new kubelet serves exec once it has the pod from the API.
	waitFor(t, 60*time.Second, "exec through the new kubelet", func() bool {
		out, err := s.kubectl(t, kubectl, "exec", "r", "--", "hostname")
		return err == nil && strings.TrimSpace(out) == "r"
	})
	s.stop(t)
	if !processGone(kubelet) {
		t.Errorf("the kubelet (pid %d) outlived the server", kubelet)
	}

	s2 := startNodeServerIn(t, workDir, "data", "e2e-restart")
	s2.mustKubectl(t, kubectl, "wait", "--for=condition=Ready", "pod/r", "--timeout=60s")
	got := s2.mustKubectl(t, kubectl, "get", "pod", "r", "-o", "jsonpath={.status.containerStatuses[0].containerID} {.status.containerStatuses[0].restartCount}")
	if got != id+" 0" {
		t.Errorf("after the restart the container is %q, want %q (the same, never restarted)", got, id+" 0")
	}
}

// kubectlStdin runs kubectl with input on its stdin and returns stdout.
func (s *server) kubectlStdin(t *testing.T, bin, input string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+s.kubeconfig, "HOME="+t.TempDir())
	cmd.Stdin = strings.NewReader(input)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String()
}

// onTerminal runs kubectl on a pseudo-terminal (script(1)) and returns
// what the terminal showed.
func (s *server) onTerminal(t *testing.T, bin string, args ...string) string {
	t.Helper()
	script, err := exec.LookPath("script")
	if err != nil {
		t.Skipf("script(1) (util-linux) not found: %v", err)
	}
	quoted := make([]string, 0, len(args)+1)
	for _, a := range append([]string{bin}, args...) {
		quoted = append(quoted, "'"+strings.ReplaceAll(a, "'", `'\''`)+"'")
	}
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, script, "-q", "-e", "-c", strings.Join(quoted, " "), "/dev/null")
	cmd.Env = append(os.Environ(), "KUBECONFIG="+s.kubeconfig, "HOME="+t.TempDir())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl %s on a terminal: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// portForwardGet runs kubectl port-forward to target's port and GETs path
// through it.
func (s *server) portForwardGet(t *testing.T, bin, target string, port int, path string) string {
	t.Helper()
	local := freePort(t)
	lines := s.kubectlLines(t, bin, "port-forward", target, fmt.Sprintf("%d:%d", local, port))
	if !scanUntil(lines, "Forwarding from") {
		t.Fatal("port-forward did not start")
	}
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d%s", local, path))
	if err != nil {
		t.Fatalf("GET through port-forward: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// kubeletChild is the pid of s's kubelet child process (the hidden
// `sqlkube kubelet`, run with the node's options file), 0 if it has none.
func kubeletChild(t *testing.T, s *server) int {
	t.Helper()
	file := filepath.Join(s.dataDir, "node", "kubelet.json")
	return serverChild(t, s, func(args []string) bool {
		return len(args) >= 2 && args[len(args)-2] == "kubelet" && args[len(args)-1] == file
	})
}

// serverChild is the pid of a child process of s (not a zombie) whose
// arguments match, 0 if there is none.
func serverChild(t *testing.T, s *server, match func(args []string) bool) int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces.
		fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(fields) < 2 || fields[0] == "Z" || fields[1] != strconv.Itoa(s.cmd.Process.Pid) {
			continue
		}
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		args := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
		if match(args) {
			return pid
		}
	}
	return 0
}

// processGone reports whether pid has exited (a zombie counts).
func processGone(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	return len(fields) == 0 || fields[0] == "Z"
}

// killKubelet kills s's kubelet child with SIGKILL and waits for the
// server to start another, which renews node's lease and keeps it Ready.
// The API must answer throughout, from the same server process. It
// returns the new kubelet's pid.
func killKubelet(t *testing.T, s *server, node string) int {
	t.Helper()
	kubectl := kubectlPath(t)
	old := kubeletChild(t, s)
	if old == 0 {
		t.Fatal("the server has no kubelet child process")
	}
	// The API is asked until the new kubelet is back.
	api := pollAPI(t, s)

	killed := time.Now()
	if err := syscall.Kill(old, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	next := 0
	waitFor(t, 60*time.Second, "a new kubelet child", func() bool {
		next = kubeletChild(t, s)
		return next != 0 && next != old
	})
	waitFor(t, 90*time.Second, "the new kubelet to renew node "+node+"'s lease", func() bool {
		out, err := s.kubectl(t, kubectl, "-n", "kube-node-lease", "get", "lease", node, "-o", "jsonpath={.spec.renewTime}")
		renewed, perr := time.Parse(time.RFC3339Nano, out)
		return err == nil && perr == nil && renewed.After(killed)
	})
	s.waitKubectl(t, kubectl, "True", "get", "node", node, "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
	if err := api(); err != nil {
		t.Errorf("the API failed while the kubelet restarted: %v", err)
	}
	select {
	case err := <-s.done:
		s.done <- err
		t.Fatalf("the server exited when its kubelet was killed: %v\n%s", err, s.stderr)
	default:
	}
	t.Logf("kubelet %d killed; kubelet %d renewed the lease %v later", old, next, time.Since(killed).Round(time.Millisecond))
	return next
}

// pollAPI asks s's API for the default namespace every 100 ms until the
// returned func is called, which returns the first failure (or that the
// API was hardly asked).
func pollAPI(t *testing.T, s *server) (stop func() error) {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", s.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Timeout = 5 * time.Second
	cs := kubernetes.NewForConfigOrDie(cfg)
	done, polled := make(chan struct{}), make(chan error, 1)
	go func() {
		var first error
		defer func() { polled <- first }()
		for n := 0; ; n++ {
			select {
			case <-done:
				if first == nil && n < 2 {
					first = fmt.Errorf("the API was polled %d times only", n)
				}
				return
			case <-time.After(100 * time.Millisecond):
			}
			if _, err := cs.CoreV1().Namespaces().Get(context.Background(), "default", metav1.GetOptions{}); err != nil && first == nil {
				first = fmt.Errorf("%s: %w", time.Now().Format(time.TimeOnly), err)
			}
		}
	}()
	stopped := false
	stop = func() error {
		if stopped {
			return nil
		}
		stopped = true
		close(done)
		return <-polled
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}
