package e2e

import (
	"encoding/json"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sqlkube/sqlkube/node/kubeproxy"
	"github.com/sqlkube/sqlkube/node/podnet"
)

// TestRealNode_NodeChanges: kube-proxy's node manager ends its process
// when the node's addresses or pod CIDR change or its Node is deleted
// (issue 31). It runs in a child process of the node agent, here `sqlkube
// server`: the server goes on serving, the same process, while kube-proxy
// is started again with the new values, and Services work again once it
// is back. The node's InternalIP changes (as a cloud controller would
// change it; the kubelet, run with --node-ip, puts its own back), then the
// Node is deleted and registered again, by a kubelet started again as an
// init system would (a running kubelet never registers its Node twice),
// with another pod CIDR, which the pod network follows.
func TestRealNode_NodeChanges(t *testing.T) {
	requireNodeHost(t)
	requireNetLab(t)
	const node = "nodechange"
	k := kubectlPath(t)
	lab := newNetLab(t)
	ns, ip := lab.addNamespace(t)
	dataDir := filepath.Join(t.TempDir(), "data")
	t.Cleanup(func() { cleanUpNode(t, dataDir) })
	s := startCommandNetns(t, ns, dataDir, "server", "--disable-node=false", "--node-name", node, "--node-ip", ip,
		"--bind-address", ip, "--kubelet-arg=--port="+strconv.Itoa(freePort(t)))
	t.Cleanup(func() { s.removeAllPods(t) })
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the server's lines on kube-proxy and the pod network:\n%s", s.logLines(40, "kube-proxy", "pod network", "pod CIDR"))
		}
	})
	started := time.Now()
	phase := func(what string) { t.Logf("%v: %s", time.Since(started).Round(time.Second), what) }
	nodeField := func(jsonpath string) string {
		t.Helper()
		return s.mustKubectl(t, k, "get", "node", node, "-o", "jsonpath="+jsonpath)
	}
	s.waitKubectl(t, k, "True", "get", "node", node, "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
	s.sqlkube(t, "images", "import", writeTestImage(t))
	oldCIDR := nodeField("{.spec.podCIDR}")
	confDir := filepath.Join(dataDir, "node", "cni", "net.d")

	// answers asks a Service's cluster IP from the node's network
	// namespace, with busybox's nc (requireNodeHost's /bin/busybox).
	answers := func(svc string) string {
		clusterIP := s.mustKubectl(t, k, "get", "svc", svc, "-o", "jsonpath={.spec.clusterIP}")
		out, err := exec.Command("nsenter", "--net=/run/netns/"+ns, "--", "/bin/busybox", "sh", "-c",
			fmt.Sprintf(`printf 'GET / HTTP/1.0\r\n\r\n' | /bin/busybox nc -w 3 %s 80 | /bin/busybox tail -n 1`, clusterIP)).Output()
		if err != nil {
			return ""
		}
		return strings.TrimSpace(string(out))
	}
	// serving waits for the Deployment's one pod to answer through the
	// Service web and through another made now (so the kube-proxy that
	// runs now must have written its rules), and returns the pod's name
	// and address.
	round := 0
	serving := func(when string) (string, string) {
		t.Helper()
		var name, podIP string
		waitFor(t, 90*time.Second, when+": the Deployment's one pod to be ready", func() bool {
			out, _ := s.kubectl(t, k, "get", "pods", "-l", "app=web", "-o", `jsonpath={range .items[*]}{.metadata.name} {.status.podIP} {.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}`)
			pods := strings.Split(strings.TrimSpace(out), "\n")
			f := strings.Fields(pods[0])
			if len(pods) != 1 || len(f) != 3 || f[2] != "True" {
				return false
			}
			name, podIP = f[0], f[1]
			return true
		})
		round++
		svc := fmt.Sprintf("web-%d", round)
		s.mustKubectl(t, k, "expose", "deployment", "web", "--name="+svc, "--port=80", "--target-port=8080")
		waitFor(t, 90*time.Second, when+": the Services web and "+svc+" (made now) to answer from the node with "+name, func() bool {
			return answers(svc) == name && answers("web") == name
		})
		phase(when + ": the Services answer")
		return name, podIP
	}
	// restarts are the server's lines on kube-proxy's restarts, decoded.
	restarts := func() []map[string]any {
		var out []map[string]any
		for _, l := range strings.Split(s.logs(), "\n") {
			var m map[string]any
			if json.Unmarshal([]byte(l), &m) == nil && m["message"] == "kube-proxy exited; starting it again" {
				out = append(out, m)
			}
		}
		return out
	}
	// restarted waits for kube-proxy to exit, after the restart since,
	// for one of reasons, and for another child process (not old).
	restarted := func(since, old int, reasons ...string) int {
		t.Helper()
		why := ""
		waitFor(t, 60*time.Second, "kube-proxy to exit: "+strings.Join(reasons, " or "), func() bool {
			for _, m := range restarts()[since:] {
				if r := fmt.Sprint(m["reason"]); slices.Contains(reasons, r) {
					why = r
					return true
				}
			}
			return false
		})
		next := 0
		waitFor(t, 60*time.Second, "another kube-proxy child", func() bool {
			next = kubeProxyChild(t, s, node)
			return next != 0 && next != old
		})
		phase("kube-proxy started again: " + why)
		return next
	}

	s.mustKubectl(t, k, "apply", "-f", podManifest(t, webDeployment(1)))
	pod, podIP := serving("at start")
	if !cidrContains(t, oldCIDR, podIP) {
		t.Fatalf("the pod's address %s is not in the node's pod CIDR %s", podIP, oldCIDR)
	}
	proxy := kubeProxyChild(t, s, node)
	if proxy == 0 {
		t.Fatal("the server has no kube-proxy child process")
	}
	serverPid := s.cmd.Process.Pid

	// The node's InternalIP changes, as a cloud controller would change
	// it, and the kubelet puts its own back: kube-proxy sees both.
	api := pollAPI(t, s)
	since := len(restarts())
	s.mustKubectl(t, k, "patch", "node", node, "--subresource=status", "--type=merge", "-p",
		fmt.Sprintf(`{"status":{"addresses":[{"type":"InternalIP","address":%q},{"type":"Hostname","address":%q}]}}`, lab.subnet+".99", node))
	proxy = restarted(since, proxy, "NodeIPs changed for the node")
	waitFor(t, 60*time.Second, "the kubelet to put the node's InternalIP back", func() bool {
		return nodeField(`{.status.addresses[?(@.type=="InternalIP")].address}`) == ip
	})
	serving("after the address change")
	if err := api(); err != nil {
		t.Errorf("the API failed while the node's address changed: %v", err)
	}
	s.checkAlive(t, serverPid)

	// The Node is deleted, and another takes its pod CIDR meanwhile. A
	// running kubelet never registers its Node again: the kubelet started
	// again (as an init system would) registers it with another pod CIDR.
	api = pollAPI(t, s)
	since = len(restarts())
	s.mustKubectl(t, k, "delete", "node", node)
	s.mustKubectl(t, k, "apply", "-f", podManifest(t, fmt.Sprintf(`
apiVersion: v1
kind: Node
metadata: {name: nodechange-other}
spec: {podCIDR: %s, podCIDRs: [%s]}
`, oldCIDR, oldCIDR)))
	// (The kube-proxy that saw the address change may see the kubelet put
	// its address back only now, and end for that.)
	restarted(since, proxy, "Node is being deleted", "NodeIPs changed for the node")
	restartKubelet(t, s)
	s.waitKubectl(t, k, "True", "get", "node", node, "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
	newCIDR := ""
	waitFor(t, 60*time.Second, "the Node registered again to get a pod CIDR", func() bool {
		newCIDR = nodeField("{.spec.podCIDR}")
		return newCIDR != ""
	})
	if newCIDR == oldCIDR {
		t.Fatalf("the Node registered again has the pod CIDR %s, which another Node holds", newCIDR)
	}
	waitFor(t, 60*time.Second, "the pod network to follow the new pod CIDR "+newCIDR, func() bool {
		got, err := podnet.ConfiguredPodCIDR(confDir)
		return err == nil && got == newCIDR
	})
	phase("registered again with " + newCIDR)
	// The pod made before keeps its address, from the old pod CIDR; made
	// anew, it gets one from the new.
	if again, _ := serving("after the Node was registered again"); again == pod {
		s.mustKubectl(t, k, "rollout", "restart", "deployment/web")
		waitFor(t, 90*time.Second, "the Deployment's pod to be made anew", func() bool {
			out, _ := s.kubectl(t, k, "get", "pods", "-l", "app=web", "-o", "name")
			return strings.TrimSpace(out) != "" && !strings.Contains(out, "pod/"+pod+"\n")
		})
	} else {
		t.Logf("the pod %s was made anew (%s) while its Node was away (the pod GC deletes a missing Node's pods after 40 s)", pod, again)
	}
	_, podIP = serving("with the pod made anew")
	if !cidrContains(t, newCIDR, podIP) {
		t.Errorf("the pod made anew has the address %s, not in the node's new pod CIDR %s", podIP, newCIDR)
	}
	if err := api(); err != nil {
		t.Errorf("the API failed while the Node was deleted and registered again: %v", err)
	}
	if now := kubeProxyChild(t, s, node); now == 0 || now == proxy {
		t.Errorf("kube-proxy's child is %d, and was %d before the Node was deleted: want another", now, proxy)
	}
	s.checkAlive(t, serverPid)

	// Those restarts are expected: kube-proxy said why, and none of them
	// is an error.
	for _, m := range restarts() {
		if m["level"] != "info" || !slices.Contains(kubeproxy.Notices, fmt.Sprint(m["reason"])) {
			t.Errorf("kube-proxy's restart was logged as %v: want info, with kube-proxy's reason", m)
		}
	}
	if lines := s.logLines(10, `"level":"error","process":"kube-proxy"`); lines != "" {
		t.Errorf("kube-proxy logged errors:\n%s", lines)
	}
}

// cidrContains reports whether ip is in cidr.
func cidrContains(t *testing.T, cidr, ip string) bool {
	t.Helper()
	_, n, err := net.ParseCIDR(cidr)
	if err != nil {
		t.Fatalf("pod CIDR %q: %v", cidr, err)
	}
	return n.Contains(net.ParseIP(ip))
}

// checkAlive fails t unless s is still running as process pid.
func (s *server) checkAlive(t *testing.T, pid int) {
	t.Helper()
	select {
	case err := <-s.done:
		s.done <- err
		t.Fatalf("the server exited: %v\n%s", err, s.logLines(30, `"level":"error"`))
	default:
	}
	if s.cmd.Process.Pid != pid {
		t.Fatalf("the server is process %d, was %d", s.cmd.Process.Pid, pid)
	}
}

// kubeProxyChild is the pid of s's kube-proxy child process for node (the
// hidden `sqlkube kube-proxy`), 0 if it has none.
func kubeProxyChild(t *testing.T, s *server, node string) int {
	t.Helper()
	return serverChild(t, s, func(args []string) bool {
		return slices.Contains(args, "kube-proxy") && slices.Contains(args, "--hostname-override="+node)
	})
}

// restartKubelet stops s's kubelet child with SIGTERM, as an init system
// restarting it would, and waits for the server to start another.
func restartKubelet(t *testing.T, s *server) {
	t.Helper()
	old := kubeletChild(t, s)
	if old == 0 {
		t.Fatal("the server has no kubelet child process")
	}
	if err := syscall.Kill(old, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, "a new kubelet child", func() bool {
		next := kubeletChild(t, s)
		return next != 0 && next != old
	})
}
