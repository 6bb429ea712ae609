package e2e

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// netLab is a network the test builds on this host, so that nodes' routes,
// bridges and iptables rules stay out of the host's own network: a
// namespace holding a bridge (the "LAN"; in a namespace of its own, since
// the host's iptables, which other tests' nodes change, would see bridged
// traffic), the test's own address .1 on it (a veth), and one namespace per
// node plugged into it at .2, .3, ... Removing the namespaces removes
// everything the nodes set up in them.
type netLab struct {
	id     string // a few hex digits, in every name
	subnet string // "10.253.N": the LAN is SUBNET.0/24
	lan    string // the bridge's namespace
	netns  []string
}

// requireNetLab skips (fails under CI=true) unless ip, nsenter and
// iptables are here.
func requireNetLab(t *testing.T) {
	t.Helper()
	for _, bin := range []string{"ip", "nsenter", "iptables", "iptables-save", "nft"} {
		if _, err := exec.LookPath(bin); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("%s not found; CI must provide it (make test-deps installs iptables)", bin)
			}
			t.Skipf("skipping the network test: %s not found (Debian: iproute2, util-linux, iptables, nftables)", bin)
		}
	}
}

func newNetLab(t *testing.T) *netLab {
	t.Helper()
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	l := &netLab{id: hex.EncodeToString(b), subnet: fmt.Sprintf("10.253.%d", b[0])}
	l.lan = "sqk-" + l.id + "-lan"
	t.Cleanup(func() { l.remove(t) })
	run(t, "ip", "netns", "add", l.lan)
	in := func(args ...string) { run(t, append([]string{"ip", "netns", "exec", l.lan}, args...)...) }
	in("ip", "link", "add", "br0", "type", "bridge")
	in("ip", "link", "set", "br0", "up")
	// The test's own leg: an address on the LAN, not a bridge port here.
	host, peer := "sqkv"+l.id+"t", "sqkv"+l.id+"u"
	run(t, "ip", "link", "add", host, "type", "veth", "peer", "name", peer)
	run(t, "ip", "link", "set", peer, "netns", l.lan)
	in("ip", "link", "set", peer, "master", "br0", "up")
	run(t, "ip", "addr", "add", l.subnet+".1/24", "dev", host)
	run(t, "ip", "link", "set", host, "up")
	return l
}

// addNamespace makes the next namespace on the LAN and returns its name
// and address.
func (l *netLab) addNamespace(t *testing.T) (string, string) {
	t.Helper()
	i := len(l.netns)
	name := fmt.Sprintf("sqk-%s-%d", l.id, i)
	addr := fmt.Sprintf("%s.%d", l.subnet, i+2)
	port, peer := fmt.Sprintf("sqkv%s%dh", l.id, i), fmt.Sprintf("sqkv%s%dp", l.id, i)
	run(t, "ip", "netns", "add", name)
	l.netns = append(l.netns, name)
	run(t, "ip", "link", "add", port, "type", "veth", "peer", "name", peer)
	run(t, "ip", "link", "set", port, "netns", l.lan)
	run(t, "ip", "netns", "exec", l.lan, "ip", "link", "set", port, "master", "br0", "up")
	run(t, "ip", "link", "set", peer, "netns", name)
	in := func(args ...string) { run(t, append([]string{"ip", "netns", "exec", name}, args...)...) }
	in("ip", "link", "set", "lo", "up")
	in("ip", "link", "set", peer, "name", "eth0")
	in("ip", "addr", "add", addr+"/24", "dev", "eth0")
	in("ip", "link", "set", "eth0", "up")
	in("ip", "route", "add", "default", "via", l.subnet+".1")
	return name, addr
}

// remove deletes the namespaces: their veths (the test's leg too),
// bridges, routes and rules go with them.
func (l *netLab) remove(t *testing.T) {
	for _, ns := range append(l.netns, l.lan) {
		if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v: %s", ns, err, out)
		}
	}
}

// inNetns runs a command in a namespace and returns its output.
func inNetns(t *testing.T, netns string, args ...string) string {
	t.Helper()
	out, err := exec.Command("ip", append([]string{"netns", "exec", netns}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("in %s: %s: %v: %s", netns, strings.Join(args, " "), err, out)
	}
	return string(out)
}

func run(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// agent is a `sqlkube node` process.
type agent struct {
	cmd  *exec.Cmd
	done chan error
	logs *bytes.Buffer
}

// startAgent runs `sqlkube node ARGS` in netns.
func startAgent(t *testing.T, netns string, args ...string) *agent {
	t.Helper()
	a := &agent{cmd: sqlkubeCommand(netns, append([]string{"node"}, args...)...), done: make(chan error, 1), logs: &bytes.Buffer{}}
	a.cmd.Stdout, a.cmd.Stderr = &lockedWriter{w: a.logs}, &lockedWriter{w: a.logs}
	if err := a.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { a.done <- a.cmd.Wait() }()
	t.Cleanup(func() { a.stop(t) })
	return a
}

// stop sends SIGTERM and waits (SIGKILL after stopTimeout).
func (a *agent) stop(t *testing.T) {
	if a.cmd.ProcessState != nil {
		return
	}
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-a.done:
	case <-time.After(stopTimeout):
		_ = a.cmd.Process.Kill()
		<-a.done
		t.Errorf("sqlkube node did not stop within %v of SIGTERM", stopTimeout)
	}
}

// httpGet GETs url from the test's namespace with a short timeout.
func httpGet(url string) (string, error) {
	c := &http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return strings.TrimSpace(string(b)), err
}

// httpGetCmd is a shell command that GETs path from host:port and prints
// the body's last line (Debian's static busybox wget crashes; nc works).
func httpGetCmd(host, port, path string) string {
	return fmt.Sprintf(`printf 'GET %s HTTP/1.0\r\n\r\n' | nc -w 3 %s %s | tail -n 1`, path, host, port)
}

// webScript makes a pod serve its own name on :8080 (/) and its caller's
// address (/cgi-bin/ip), ready while /tmp/ready exists.
const webScript = `mkdir -p /www/cgi-bin && hostname > /www/index.html && printf "#!/bin/sh\necho Content-Type: text/plain\necho\necho \$REMOTE_ADDR\n" > /www/cgi-bin/ip && chmod +x /www/cgi-bin/ip && touch /tmp/ready && exec httpd -f -p 8080 -h /www`

// webDeployment is replicas webScript replicas, ready once serving,
// behind the Service web (port 80).
func webDeployment(replicas int) string {
	return `
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: ` + strconv.Itoa(replicas) + `
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: c
        image: IMAGE
        command: [sh, -c, ` + strconv.Quote(webScript) + `]
        readinessProbe: {exec: {command: [cat, /tmp/ready]}, periodSeconds: 1}
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  selector: {app: web}
  ports: [{port: 80, targetPort: 8080}]
`
}

// TestRealNode_Network: the server's own node and a joined one, each in a
// network namespace of the test's on one LAN, give their pods one network
// (pod CIDRs from node IPAM, host-gw routes, no masquerading between
// pods), and kube-proxy on both serves Services: cluster IPs across nodes,
// node ports, session affinity, externalTrafficPolicy Local, headless
// Services, readiness; a deleted Service's rules go, and Services keep
// working while a node agent restarts.
func TestRealNode_Network(t *testing.T) {
	requireNodeHost(t)
	requireNetLab(t)
	k := kubectlPath(t)
	lab := newNetLab(t)
	nsA, ipA := lab.addNamespace(t)
	nsB, ipB := lab.addNamespace(t)

	dataDir := filepath.Join(t.TempDir(), "data")
	t.Cleanup(func() { cleanUpNode(t, dataDir) })
	// Cluster DNS on its default port (the port is the test's network
	// namespace's own). The host's resolvers are out of the namespace's
	// reach: other names go to a port where nothing listens, so that they
	// fail at once (busybox's nslookup asks for the bare name too, and
	// waits for every answer).
	s := startCommandNetns(t, nsA, dataDir, "server", "--disable-node=false", "--node-name", "net-a", "--node-ip", ipA,
		"--bind-address", ipA, "--kubelet-arg=--port="+strconv.Itoa(freePort(t)), "--cluster-dns-port", "10053", "--cluster-dns-upstream", "127.0.0.1:9")
	t.Cleanup(func() { s.removeAllPods(t) })

	join := strings.Fields(s.sqlkube(t, "token", "create", "--print-join-command"))
	agentDir := filepath.Join(t.TempDir(), "agent")
	t.Cleanup(func() { cleanUpNode(t, agentDir) })
	agentArgs := append(join[2:], "--data-dir", agentDir, "--node-name", "net-b", "--node-ip", ipB,
		"--kubelet-arg=--port="+strconv.Itoa(freePort(t)), "--log-format", "json")
	b := startAgent(t, nsB, agentArgs...)
	t.Cleanup(func() {
		// Pods go first, while the node still runs to remove them.
		s.removeAllPods(t)
		clearRuntime(t, filepath.Join(agentDir, "containerd"))
	})
	for _, n := range []string{"net-a", "net-b"} {
		s.waitKubectl(t, k, "True", "get", "node", n, "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
	}
	s.sqlkube(t, "images", "import", writeTestImage(t))
	if out, err := exec.Command(sqlkubeBin, "images", "import", "--data-dir", agentDir, writeTestImage(t)).CombinedOutput(); err != nil {
		t.Fatalf("images import into the joined node: %v\n%s", err, out)
	}

	// Each node has its own /24 of the cluster CIDR.
	cidrA := s.mustKubectl(t, k, "get", "node", "net-a", "-o", "jsonpath={.spec.podCIDR}")
	cidrB := s.mustKubectl(t, k, "get", "node", "net-b", "-o", "jsonpath={.spec.podCIDR}")
	if !strings.HasPrefix(cidrA, "10.42.") || !strings.HasPrefix(cidrB, "10.42.") || !strings.HasSuffix(cidrA, "/24") || cidrA == cidrB {
		t.Fatalf("pod CIDRs %q and %q: want two /24s of 10.42.0.0/16", cidrA, cidrB)
	}

	// Acceptance 1: two pods on each node; every pod reaches every other by
	// its pod IP, and sees the caller's own pod IP (no masquerading).
	var pods []string
	for _, p := range []struct{ name, node string }{{"a1", "net-a"}, {"a2", "net-a"}, {"b1", "net-b"}, {"b2", "net-b"}} {
		pods = append(pods, p.name)
		s.mustKubectl(t, k, "apply", "-f", podManifest(t, fmt.Sprintf(`
apiVersion: v1
kind: Pod
metadata: {name: %s, labels: {pinned: %s}}
spec:
  nodeName: %s
  terminationGracePeriodSeconds: 1
  containers:
  - {name: c, image: IMAGE, command: [sh, -c, %s]}
`, p.name, p.node, p.node, strconv.Quote(webScript))))
	}
	s.mustKubectl(t, k, "wait", "--for=condition=Ready", "pod/a1", "pod/a2", "pod/b1", "pod/b2", "--timeout=90s")
	podIP := map[string]string{}
	for _, p := range pods {
		podIP[p] = s.mustKubectl(t, k, "get", "pod", p, "-o", "jsonpath={.status.podIP}")
	}
	for _, from := range pods {
		for _, to := range pods {
			if from == to {
				continue
			}
			got := strings.TrimSpace(s.mustKubectl(t, k, "exec", from, "--", "sh", "-c", httpGetCmd(podIP[to], "8080", "/cgi-bin/ip")))
			got = strings.TrimSuffix(strings.TrimPrefix(got, "[::ffff:"), "]") // httpd listens on IPv6 too
			if got != podIP[from] {
				t.Errorf("%s (%s) → %s (%s): the server saw the caller as %q, want %s", from, podIP[from], to, podIP[to], got, podIP[from])
			}
		}
	}
	if t.Failed() {
		t.Fatalf("routes in %s:\n%s\nin %s:\n%s", nsA, inNetns(t, nsA, "ip", "route"), nsB, inNetns(t, nsB, "ip", "route"))
	}

	// Acceptance 2: a Deployment behind a ClusterIP Service; a client on
	// the other node gets answers from every replica through it.
	s.mustKubectl(t, k, "apply", "-f", podManifest(t, webDeployment(3)))
	s.mustKubectl(t, k, "rollout", "status", "deployment/web", "--timeout=90s")
	replicas := strings.Fields(s.mustKubectl(t, k, "get", "pods", "-l", "app=web", "-o", "jsonpath={.items[*].metadata.name}"))
	sort.Strings(replicas)
	clusterIP := s.mustKubectl(t, k, "get", "svc", "web", "-o", "jsonpath={.spec.clusterIP}")
	// answers asks host:port n times from pod client and returns the
	// distinct answers, sorted.
	answers := func(client, host, port string, n int) []string {
		t.Helper()
		out, _ := s.kubectl(t, k, "exec", client, "--", "sh", "-c",
			fmt.Sprintf("for i in $(seq %d); do %s; echo; done", n, httpGetCmd(host, port, "/")))
		seen := map[string]bool{}
		for _, l := range strings.Fields(out) {
			seen[l] = true
		}
		var got []string
		for l := range seen {
			got = append(got, l)
		}
		sort.Strings(got)
		return got
	}
	waitFor(t, 60*time.Second, "answers from every replica through the cluster IP", func() bool {
		return strings.Join(answers("b1", clusterIP, "80", 30), " ") == strings.Join(replicas, " ")
	})

	// Acceptance 2 and 3 by name: pods on both nodes resolve through the
	// kube-dns Service (10.96.0.10, reached through kube-proxy).
	if ns := s.mustKubectl(t, k, "exec", "b1", "--", "cat", "/etc/resolv.conf"); !strings.Contains(ns, "nameserver 10.96.0.10") || !strings.Contains(ns, "default.svc.cluster.local") {
		t.Fatalf("b1's resolv.conf names no cluster DNS:\n%s", ns)
	}
	kubernetesIP := s.mustKubectl(t, k, "get", "svc", "kubernetes", "-o", "jsonpath={.spec.clusterIP}")
	for _, client := range []string{"a1", "b1"} {
		// busybox's nslookup (1.35) asks for the name as given, without
		// the search domains, so it gets the full name; the C library's
		// resolver (ping's, nc's) completes a short one from resolv.conf.
		var last string
		t.Cleanup(func() {
			if t.Failed() {
				eps, _ := s.kubectl(t, k, "-n", "kube-system", "get", "endpointslices", "-o", "wide")
				t.Logf("from %s: %s\nkube-system's EndpointSlices:\n%s", client, last, eps)
			}
		})
		waitFor(t, 60*time.Second, "nslookup kubernetes.default.svc.cluster.local from "+client, func() bool {
			out, err := s.kubectl(t, k, "exec", client, "--", "nslookup", "kubernetes.default.svc.cluster.local")
			last = fmt.Sprint(out, err)
			return strings.Contains(out, "Address: "+kubernetesIP)
		})
		// A cluster IP answers no ping: only the name's resolution counts.
		out, _ := s.kubectl(t, k, "exec", client, "--", "ping", "-c", "1", "-W", "1", "kubernetes.default")
		if !strings.Contains(out, "PING kubernetes.default ("+kubernetesIP+")") {
			t.Errorf("from %s, kubernetes.default does not resolve to %s: %q", client, kubernetesIP, out)
		}
		waitFor(t, 30*time.Second, "answers from every replica through the name web from "+client, func() bool {
			return strings.Join(answers(client, "web", "80", 30), " ") == strings.Join(replicas, " ")
		})
	}
	s.mustKubectl(t, k, "apply", "-f", podManifest(t, `
apiVersion: v1
kind: Service
metadata: {name: db}
spec:
  clusterIP: None
  selector: {app: db}
  ports: [{name: http, port: 8080}]
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db}
spec:
  serviceName: db
  replicas: 2
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: c
        image: IMAGE
        command: [sh, -c, `+strconv.Quote(webScript)+`]
`))
	s.mustKubectl(t, k, "rollout", "status", "statefulset/db", "--timeout=90s")
	for _, pod := range []string{"db-0", "db-1"} {
		ip := s.mustKubectl(t, k, "get", "pod", pod, "-o", "jsonpath={.status.podIP}")
		name := pod + ".db.default.svc.cluster.local"
		waitFor(t, 30*time.Second, name+" resolving to "+ip, func() bool {
			out, _ := s.kubectl(t, k, "exec", "b1", "--", "nslookup", name)
			return strings.Contains(out, "Address: "+ip)
		})
		if got := strings.TrimSpace(s.mustKubectl(t, k, "exec", "a1", "--", "sh", "-c", httpGetCmd(pod+".db", "8080", "/"))); got != pod {
			t.Errorf("%s.db answered %q from a1", pod, got)
		}
	}

	// A NodePort Service answers on both nodes' addresses.
	s.mustKubectl(t, k, "expose", "deployment", "web", "--name=web-np", "--type=NodePort", "--port=80", "--target-port=8080")
	nodePort := s.mustKubectl(t, k, "get", "svc", "web-np", "-o", "jsonpath={.spec.ports[0].nodePort}")
	for _, ip := range []string{ipA, ipB} {
		waitFor(t, 30*time.Second, "the node port on "+ip, func() bool {
			got, err := httpGet("http://" + ip + ":" + nodePort + "/")
			return err == nil && strings.HasPrefix(got, "web-")
		})
	}

	// sessionAffinity ClientIP: one client, one replica.
	s.mustKubectl(t, k, "expose", "deployment", "web", "--name=web-sticky", "--port=80", "--target-port=8080", "--session-affinity=ClientIP")
	stickyIP := s.mustKubectl(t, k, "get", "svc", "web-sticky", "-o", "jsonpath={.spec.clusterIP}")
	waitFor(t, 30*time.Second, "the sticky service to answer", func() bool {
		return len(answers("a1", stickyIP, "80", 1)) == 1
	})
	if got := answers("a1", stickyIP, "80", 20); len(got) != 1 {
		t.Errorf("with ClientIP affinity one client got answers from %v", got)
	}

	// externalTrafficPolicy Local: a node port over the pods pinned to
	// net-a answers on net-a only, from net-a's pods.
	s.mustKubectl(t, k, "apply", "-f", podManifest(t, `
apiVersion: v1
kind: Service
metadata: {name: local-a}
spec:
  type: NodePort
  externalTrafficPolicy: Local
  selector: {pinned: net-a}
  ports: [{port: 80, targetPort: 8080}]
`))
	localPort := s.mustKubectl(t, k, "get", "svc", "local-a", "-o", "jsonpath={.spec.ports[0].nodePort}")
	waitFor(t, 30*time.Second, "the Local node port on net-a", func() bool {
		got, err := httpGet("http://" + ipA + ":" + localPort + "/")
		return err == nil && (got == "a1" || got == "a2")
	})
	if got, err := httpGet("http://" + ipB + ":" + localPort + "/"); err == nil {
		t.Errorf("net-b, with no local endpoint, answered %q on an externalTrafficPolicy: Local node port", got)
	}

	// Headless: endpoints, but no proxy rules.
	s.mustKubectl(t, k, "apply", "-f", podManifest(t, `
apiVersion: v1
kind: Service
metadata: {name: headless}
spec:
  clusterIP: None
  selector: {app: web}
  ports: [{port: 80, targetPort: 8080}]
`))
	waitFor(t, 30*time.Second, "the headless service's endpoints", func() bool {
		out, _ := s.kubectl(t, k, "get", "endpointslices", "-l", "kubernetes.io/service-name=headless", "-o", "jsonpath={.items[*].endpoints[*].addresses[*]}")
		return len(strings.Fields(out)) == 3
	})
	natRules := func(netns, svc string) int {
		// kube-proxy's iptables rules name the Service in comments
		// ("default/web:"), its nftables rules and map elements the
		// Service's chains ("…-default/web/tcp/"). A chain's own header
		// is not a rule: kube-proxy flushes a deleted Service's chains at
		// once and deletes the empty chains at a later sync, which may be
		// its periodic one, 30 s on.
		ipt := inNetns(t, netns, "iptables-save", "-t", "nat")
		n := strings.Count(ipt, "default/"+svc+":") + strings.Count(ipt, "default/"+svc+" ")
		for _, line := range strings.Split(inNetns(t, netns, "nft", "list", "ruleset"), "\n") {
			if !strings.HasPrefix(strings.TrimSpace(line), "chain ") {
				n += strings.Count(line, "default/"+svc+"/")
			}
		}
		return n
	}
	if n := natRules(nsA, "web"); n == 0 {
		t.Fatalf("no nat rules for default/web in %s", nsA)
	}
	if n := natRules(nsA, "headless") + natRules(nsB, "headless"); n != 0 {
		t.Errorf("%d nat rules for the headless service", n)
	}

	// A replica that turns unready gets no more traffic.
	gone := replicas[0]
	goneIP := s.mustKubectl(t, k, "get", "pod", gone, "-o", "jsonpath={.status.podIP}")
	s.mustKubectl(t, k, "exec", gone, "--", "rm", "/tmp/ready")
	waitFor(t, 30*time.Second, "the unready replica out of the endpoints", func() bool {
		out, _ := s.kubectl(t, k, "get", "endpoints", "web", "-o", "jsonpath={.subsets[*].addresses[*].ip}")
		return len(strings.Fields(out)) == 2 && !strings.Contains(out, goneIP)
	})
	// Each node's proxy programs the change on its own sync, so wait for
	// each node before asserting that it no longer sends to the replica.
	for _, client := range []string{"a1", "b1"} {
		waitFor(t, 30*time.Second, "traffic from "+client+" to the ready replicas only", func() bool {
			return strings.Join(answers(client, clusterIP, "80", 20), " ") == strings.Join(replicas[1:], " ")
		})
		if got := answers(client, clusterIP, "80", 30); strings.Contains(strings.Join(got, " "), gone) {
			t.Errorf("from %s, the unready replica %s still answered: %v", client, gone, got)
		}
	}

	// Acceptance 4: a deleted Service's rules go, on both nodes.
	s.mustKubectl(t, k, "delete", "svc", "web-sticky")
	waitFor(t, 30*time.Second, "the deleted service's rules to go", func() bool {
		return natRules(nsA, "web-sticky")+natRules(nsB, "web-sticky") == 0
	})

	// The joined node's agent restarts: while it is down its rules keep
	// serving the node port, and once back it follows new Services.
	b.stop(t)
	for i := 0; i < 5; i++ {
		if got, err := httpGet("http://" + ipB + ":" + nodePort + "/"); err != nil || !strings.HasPrefix(got, "web-") {
			t.Fatalf("with its agent stopped, net-b's node port answered %q, %v", got, err)
		}
	}
	b = startAgent(t, nsB, agentArgs...)
	s.mustKubectl(t, k, "expose", "deployment", "web", "--name=web-after", "--port=81", "--target-port=8080")
	afterIP := s.mustKubectl(t, k, "get", "svc", "web-after", "-o", "jsonpath={.spec.clusterIP}")
	waitFor(t, 60*time.Second, "a service made after the restart to answer on net-b", func() bool {
		got := answers("b2", afterIP, "81", 10)
		return len(got) > 0 && strings.HasPrefix(got[0], "web-")
	})
	if got := strings.TrimSpace(s.mustKubectl(t, k, "exec", "b2", "--", "sh", "-c", httpGetCmd(podIP["a2"], "8080", "/"))); got != "a2" {
		t.Errorf("after the restart, b2 → a2 by pod IP: %q", got)
	}

	// A node that goes loses its route: net-b's pods go, its agent stops,
	// its Node is deleted.
	s.removeAllPods(t)
	b.stop(t)
	if !strings.Contains(inNetns(t, nsA, "ip", "route", "show", "proto", "113"), cidrB) {
		t.Fatalf("no route to %s in %s before net-b goes", cidrB, nsA)
	}
	s.mustKubectl(t, k, "delete", "node", "net-b")
	waitFor(t, 30*time.Second, "the route to net-b's pods to go", func() bool {
		return !strings.Contains(inNetns(t, nsA, "ip", "route", "show", "proto", "113"), cidrB)
	})
}
