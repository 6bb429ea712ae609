package e2e

import (
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
	"github.com/sqlkube/sqlkube/node/podnet"
	"github.com/sqlkube/sqlkube/node/reset"
)

// resetManifest is what the node runs when it stops: a pod with every
// kind of volume the kubelet mounts (emptyDir on disk and in memory,
// configMap, secret, the projected service-account token) and a host
// port (CNI portmap rules), another behind a Service (kube-proxy's
// rules), and a second Node whose pod CIDR the pod network routes to
// (through PEER, an address on the node's LAN where nothing answers).
const resetManifest = `
apiVersion: v1
kind: ConfigMap
metadata: {name: cfg}
data: {key: one}
---
apiVersion: v1
kind: Secret
metadata: {name: sec}
stringData: {pw: alpha}
---
apiVersion: v1
kind: Pod
metadata: {name: vol}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: c
    image: IMAGE
    command: [sleep, "3600"]
    ports: [{containerPort: 8080, hostPort: 18080}]
    volumeMounts:
    - {name: scratch, mountPath: /scratch}
    - {name: mem, mountPath: /mem}
    - {name: cfg, mountPath: /cfg}
    - {name: sec, mountPath: /sec}
  volumes:
  - {name: scratch, emptyDir: {}}
  - {name: mem, emptyDir: {medium: Memory}}
  - {name: cfg, configMap: {name: cfg}}
  - {name: sec, secret: {secretName: sec}}
---
apiVersion: v1
kind: Pod
metadata: {name: web, labels: {app: web}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - {name: c, image: IMAGE, command: [sh, -c, "mkdir -p /www && exec httpd -f -p 8080 -h /www"]}
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  selector: {app: web}
  ports: [{port: 80, targetPort: 8080}]
---
apiVersion: v1
kind: Node
metadata: {name: reset-peer}
spec: {podCIDR: 10.42.250.0/24, podCIDRs: [10.42.250.0/24]}
status:
  addresses: [{type: InternalIP, address: PEER}]
`

// TestReset: with a server's node stopped and its pods still running,
// `sqlkube reset --purge` leaves the host as it was before the server
// started, whether the node's containerd has stopped with the server (the
// containers, their shims and their network are found and removed) or is
// still up (reset removes the pods through it, then stops it). While the
// server runs, reset refuses and removes nothing.
//
// The node runs in a network namespace of the test's (on a LAN of its
// own, as in TestRealNode_Network), where reset runs too: kube-proxy's
// cleanup removes kube-proxy's and the kubelet's rules whoever wrote them,
// and the host's network namespace is other tests' too. That namespace's
// links, addresses, routes, iptables, ip6tables and nftables must be as
// they were; so must the host's mounts, network namespace files, cgroups,
// processes and the files a node writes outside its data directory, as
// far as they are the node's (they name its data directory, containers,
// shims, network namespaces, or its network namespace holds them); under
// CI=true, where nothing else runs, any change of mounts, network
// namespace files and those files fails too. Reset may remove empty
// directories and cgroups, and sockets nothing listens on.
func TestReset(t *testing.T) {
	requireNodeHost(t)
	requireNetLab(t)
	for _, tc := range []struct {
		name         string
		containerdUp bool
	}{{"containerd stopped", false}, {"containerd up", true}} {
		t.Run(tc.name, func(t *testing.T) { testReset(t, tc.containerdUp) })
	}
}

func testReset(t *testing.T, containerdUp bool) {
	k := kubectlPath(t)
	lab := newNetLab(t)
	ns, ip := lab.addNamespace(t)
	dataDir := filepath.Join(t.TempDir(), "data")
	// The kernel gives the LAN's interface its link-local address (and
	// its route in the local table) a moment after the link is up: the
	// snapshot waits for it as well as for duplicate address detection.
	waitFor(t, 30*time.Second, "the namespace's IPv6 addresses to settle", func() bool {
		out, err := exec.Command("nsenter", "--net=/run/netns/"+ns, "--", "ip", "-6", "addr", "show", "tentative").Output()
		if err != nil || strings.TrimSpace(string(out)) != "" {
			return false
		}
		routes, err := exec.Command("nsenter", "--net=/run/netns/"+ns, "--", "ip", "-6", "route", "show", "table", "local").Output()
		return err == nil && strings.Contains(string(routes), "local fe80::")
	})
	before := snapshotHost(t, ns)

	// If the test stops early, reset is what cleans up (then the mounts,
	// so that the temporary directory goes).
	resetDone := false
	t.Cleanup(func() { cleanUpNode(t, dataDir) })
	t.Cleanup(func() {
		if !resetDone {
			out, err := resetCommand(ns, dataDir, "--purge").CombinedOutput()
			t.Logf("cleanup: sqlkube reset --purge: %v\n%s", err, out)
		}
	})
	s := startCommandNetns(t, ns, dataDir, "server", "--disable-node=false", "--node-name", "reset-node", "--node-ip", ip,
		"--bind-address", ip, "--kubelet-arg=--port="+strconv.Itoa(freePort(t)))
	s.waitKubectl(t, k, "True", "get", "node", "reset-node", "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
	podCIDR := s.mustKubectl(t, k, "get", "node", "reset-node", "-o", "jsonpath={.spec.podCIDR}")
	s.sqlkube(t, "images", "import", writeTestImage(t))
	manifest := strings.NewReplacer("IMAGE", testImage, "PEER", lab.subnet+".250").Replace(resetManifest)
	s.mustKubectl(t, k, "apply", "-f", podManifest(t, manifest))
	s.mustKubectl(t, k, "wait", "--for=condition=Ready", "pod/vol", "pod/web", "--timeout=90s")
	clusterIP := s.mustKubectl(t, k, "get", "svc", "web", "-o", "jsonpath={.spec.clusterIP}")
	inNs := func(args ...string) string {
		out, _ := exec.Command("nsenter", append([]string{"--net=/run/netns/" + ns, "--"}, args...)...).CombinedOutput()
		return string(out)
	}
	waitFor(t, 60*time.Second, "the route to the other node's pods, kube-proxy's rules for the Service and the host port's", func() bool {
		rules := inNs("nft", "list", "ruleset") + inNs("iptables-save")
		return strings.Contains(inNs("ip", "route"), "10.42.250.0/24 via "+lab.subnet+".250") &&
			strings.Contains(rules, clusterIP) && strings.Contains(rules, "CNI-HOSTPORT-DNAT")
	})
	// The kubelet's cgroups, its pods' and QoS classes', are under a root
	// of the node's.
	cgroupRoot := nodeCgroupRoot(dataDir)
	tokens := append(nodeTokens(t, ns, dataDir, inNs("ip", "-d", "link")), strings.TrimPrefix(cgroupRoot, "/"))
	nftMode := strings.Contains(inNs("nft", "list", "tables"), "kube-proxy") // kube-proxy's mode here

	// Reset refuses while the server runs, in one line, and removes
	// nothing.
	out, err := resetCommand(ns, dataDir).CombinedOutput()
	if lines := strings.Split(strings.TrimSpace(string(out)), "\n"); err == nil || len(lines) != 1 || !strings.Contains(lines[0], "sqlkube server (pid ") || !strings.Contains(lines[0], "stop it first") {
		t.Fatalf("reset while the server runs: %v, output %q; want an error in one line naming the server", err, out)
	}
	s.waitKubectl(t, k, "true", "get", "pod", "vol", "-o", "jsonpath={.status.containerStatuses[0].ready}")

	// The server stops; its pods go on running.
	s.stop(t)
	if containerdUp {
		ctr := exec.Command("nsenter", "--net=/run/netns/"+ns, "--", sqlkubeBin, "containerd", "--config", containerd.ConfigFile(filepath.Join(dataDir, "containerd")))
		if err := ctr.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = ctr.Process.Kill(); _ = ctr.Wait() })
		waitFor(t, 30*time.Second, "containerd's socket", func() bool {
			c, err := net.Dial("unix", containerd.Socket(filepath.Join(dataDir, "containerd")))
			if err == nil {
				c.Close()
			}
			return err == nil
		})
	}

	out, err = resetCommand(ns, dataDir, "--purge").CombinedOutput()
	t.Logf("sqlkube reset --purge:\n%s", out)
	if err != nil {
		t.Fatalf("reset: %v", err)
	}
	resetDone = true
	want := []string{
		"unmounted mount " + filepath.Join(dataDir, "node", "kubelet") + "\n",
		"removed bridge " + podnet.BridgeName(podCIDR) + "\n",
		"removed route 10.42.250.0/24 via " + lab.subnet + ".250\n",
		"removed iptables chain nat " + podnet.MasqueradeChain(podCIDR) + "\n",
		"removed iptables chain nat CNI-HOSTPORT-DNAT\n",
		"removed iptables chain filter KUBE-FIREWALL\n",
		"removed directory " + dataDir + "\n",
		"removed cgroup " + cgroupRoot + "\n",
	}
	if containerdUp {
		want = append(want, "removed pod sandbox default/vol (", "stopped process containerd (pid ")
	} else {
		want = append(want, "removed container k8s.io/", "killed shim pid ", "removed network namespace cni-", "removed veth ")
	}
	if nftMode {
		want = append(want, "removed nftables table ip kube-proxy\n")
	} else {
		want = append(want, "removed iptables chain nat KUBE-SERVICES\n")
	}
	for _, w := range want {
		if !strings.Contains(string(out), w) {
			t.Errorf("reset's output lacks %q", w)
		}
	}
	if _, err := os.Stat(dataDir); !os.IsNotExist(err) {
		t.Errorf("the data directory is still there: %v", err)
	}
	checkHostRestored(t, before, snapshotHost(t, ns), tokens)
}

// resetCommand is `sqlkube reset --data-dir DATA-DIR ARGS` in the network
// namespace netns.
func resetCommand(netns, dataDir string, args ...string) *exec.Cmd {
	return sqlkubeCommand(netns, append([]string{"reset", "--data-dir", dataDir}, args...)...)
}

// nodeTokens are strings that name the running node's things: its data
// directory, its containers' IDs, its shims' sockets, its pods' network
// namespaces (the veths of ipLink, `ip -d link` in the node's network
// namespace, name them) and that namespace itself (as a process's
// /proc/PID/ns/net link names it).
func nodeTokens(t *testing.T, netns, dataDir, ipLink string) []string {
	t.Helper()
	tokens := []string{dataDir}
	tasks := filepath.Join(containerd.StateDir(filepath.Join(dataDir, "containerd")), "io.containerd.runtime.v2.task", containerd.Namespace)
	ents, err := os.ReadDir(tasks)
	if err != nil || len(ents) == 0 {
		t.Fatalf("no tasks in %s: %v", tasks, err)
	}
	for _, e := range ents {
		tokens = append(tokens, e.Name())
		if sock := reset.ShimSocket(filepath.Join(tasks, e.Name())); sock != "" {
			tokens = append(tokens, sock)
		}
	}
	tokens = append(tokens, regexp.MustCompile(`cni-[0-9a-f-]+`).FindAllString(ipLink, -1)...)
	var st syscall.Stat_t
	if err := syscall.Stat("/run/netns/"+netns, &st); err != nil {
		t.Fatal(err)
	}
	return append(tokens, "net:["+strconv.FormatUint(st.Ino, 10)+"]")
}

// checkHostRestored fails the test for what differs between the
// snapshots and is the node's (TestReset says which).
func checkHostRestored(t *testing.T, before, after hostSnapshot, tokens []string) {
	t.Helper()
	ci := os.Getenv("CI") == "true"
	ours := func(line string) bool {
		return slices.ContainsFunc(tokens, func(tok string) bool { return strings.Contains(line, tok) })
	}
	for _, d := range diffSnapshots(before, after) {
		strict := slices.Contains(netnsAspects, d.aspect) || ci && slices.Contains([]string{"files", "netns", "mounts"}, d.aspect)
		for _, l := range d.added {
			if strict || ours(l) {
				t.Errorf("%s: left behind: %s", d.aspect, l)
			} else {
				t.Logf("%s: added meanwhile by something else on this host: %s", d.aspect, l)
			}
		}
		if d.aspect == "processes" {
			continue // processes end; other tests' too
		}
		removable := removableLines(d.missing)
		for _, l := range d.missing {
			switch {
			case removable[l] && !slices.Contains(netnsAspects, d.aspect):
				t.Logf("%s: removed (it held nothing): %s", d.aspect, l)
			case strict || ours(l):
				t.Errorf("%s: gone: %s", d.aspect, l)
			default:
				t.Logf("%s: gone meanwhile by something else on this host: %s", d.aspect, l)
			}
		}
	}
}

// removableLines are the lines of missing (files or cgroups gone) that
// reset may remove: empty directories and cgroups, sockets, and
// directories that held nothing else (all gone too).
func removableLines(missing []string) map[string]bool {
	out := map[string]bool{}
	paths := map[string]string{} // path -> line
	for _, l := range missing {
		p, _, _ := strings.Cut(l, " ")
		paths[p] = l
	}
	// Deepest first, so that a directory's children are decided before
	// it.
	lines := slices.Clone(missing)
	slices.SortFunc(lines, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	for _, l := range lines {
		p, kind, _ := strings.Cut(l, " ")
		switch kind {
		case "empty-dir", "socket", "empty-cgroup":
			out[l] = true
		case "dir", "cgroup":
			empty := true
			for q, ql := range paths {
				if strings.HasPrefix(q, p+"/") && !out[ql] {
					empty = false
				}
			}
			// What it held is gone too (it is gone), so it held
			// nothing but what reset may remove.
			out[l] = empty
		}
	}
	return out
}
