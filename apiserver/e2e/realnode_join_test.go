package e2e

import (
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
)

// TestRealNode_Join: a second node joins with a bootstrap token as kubeadm's
// do (discovery pinned by the CA hash, client and serving certificates
// through CSRs), pods schedule onto it, and logs and exec reach them
// through the API server, which verifies the node's serving certificate.
func TestRealNode_Join(t *testing.T) {
	requireNodeHost(t)
	s := startNodeServer(t, filepath.Join(t.TempDir(), "data"), "e2e-first")
	k := kubectlPath(t)
	join := strings.Fields(s.sqlkube(t, "token", "create", "--print-join-command"))
	if len(join) != 8 || join[0] != "sqlkube" || join[1] != "node" {
		t.Fatalf("join command %q", join)
	}
	// A wrong CA hash is refused before anything runs.
	agentDir := filepath.Join(t.TempDir(), "agent")
	bad := append(append([]string{}, join[2:7]...), "sha256:"+strings.Repeat("0", 64), "--data-dir", agentDir)
	if out, err := exec.Command(sqlkubeBin, append([]string{"node"}, bad...)...).CombinedOutput(); err == nil || !strings.Contains(string(out), "does not match --ca-cert-hash") {
		t.Fatalf("a wrong --ca-cert-hash: %v\n%s", err, out)
	}

	port := freePort(t)
	t.Cleanup(func() { cleanUpNode(t, agentDir) })
	cidr := ""
	t.Cleanup(func() { removeHostPodNetwork(t, cidr) }) // after the agent stops
	// Both nodes share the host's network namespace: one kube-proxy.
	common := []string{"--data-dir", agentDir, "--node-name", "e2e-second", "--disable-kube-proxy", "--kubelet-arg=--port=" + strconv.Itoa(port), "--log-format", "json"}
	a := startAgent(t, "", append(append([]string{}, join[2:]...), common...)...)
	removePods := func() {
		// Pods go first, while the node still runs to remove them.
		s.removeAllPods(t)
		clearRuntime(t, filepath.Join(agentDir, "containerd"))
	}
	t.Cleanup(removePods)
	// runOnSecondNode runs pod name on e2e-second, printing msg, until Ready.
	runOnSecondNode := func(name, msg string) {
		t.Helper()
		s.mustKubectl(t, k, "apply", "-f", podManifest(t, `
apiVersion: v1
kind: Pod
metadata: {name: `+name+`}
spec:
  nodeSelector: {kubernetes.io/hostname: e2e-second}
  terminationGracePeriodSeconds: 1
  containers:
  - {name: c, image: IMAGE, command: [sh, -c, "echo `+msg+`; sleep 3600"]}
`))
		s.mustKubectl(t, k, "wait", "--for=condition=Ready", "pod/"+name, "--timeout=90s")
	}

	s.waitKubectl(t, k, "True", "get", "node", "e2e-second", "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
	// Both of its certificates came through CSRs the cluster approved (the
	// serving one is asked for once the node knows its addresses).
	waitFor(t, 60*time.Second, "the node's client and serving CSRs approved", func() bool {
		csrs := s.mustKubectl(t, k, "get", "csr", "-o", `jsonpath={range .items[*]}{.spec.signerName} {.spec.username} {.status.conditions[0].type}{"\n"}{end}`)
		return strings.Contains(csrs, "kubernetes.io/kube-apiserver-client-kubelet system:bootstrap:") &&
			strings.Contains(csrs, "kubernetes.io/kubelet-serving system:node:e2e-second Approved")
	})
	// The admin's client certificate reads the joined kubelet's
	// endpoints, as the server's own node's: the node trusts the client
	// CA too, which it read from cluster-info. Anonymous callers get 401.
	admin, err := clientcmd.BuildConfigFromFlags("", s.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	checkKubeletAccess := func() {
		t.Helper()
		ip := s.mustKubectl(t, k, "get", "node", "e2e-second", "-o", `jsonpath={.status.addresses[?(@.type=="InternalIP")].address}`)
		checkEndpointAccess(t, admin, map[string]int{"https://" + net.JoinHostPort(ip, strconv.Itoa(port)) + "/metrics": http.StatusUnauthorized})
	}
	checkKubeletAccess()
	if out, err := exec.Command(sqlkubeBin, "images", "import", "--data-dir", agentDir, writeTestImage(t)).CombinedOutput(); err != nil {
		t.Fatalf("images import into the joined node: %v\n%s", err, out)
	}
	runOnSecondNode("joined", "on the second node")
	cidr = s.mustKubectl(t, k, "get", "node", "e2e-second", "-o", "jsonpath={.spec.podCIDR}")
	_, podNet, err := net.ParseCIDR(cidr)
	if err != nil {
		t.Fatalf("node e2e-second's pod CIDR %q: %v", cidr, err)
	}
	if node := strings.Fields(s.mustKubectl(t, k, "get", "pod", "joined", "-o", "jsonpath={.spec.nodeName} {.status.podIP}")); len(node) != 2 || node[0] != "e2e-second" || !podNet.Contains(net.ParseIP(node[1])) {
		t.Errorf("pod joined is on %q, want e2e-second with an address from its pod CIDR %s", node, cidr)
	}
	s.waitKubectl(t, k, "on the second node", "logs", "joined")
	if out := strings.TrimSpace(s.mustKubectl(t, k, "exec", "joined", "--", "hostname")); out != "joined" {
		t.Errorf("exec on the second node: %q\n%s", out, a.logs.String())
	}

	// `sqlkube node --kubeconfig F` with an existing node credential (the
	// one the bootstrap gave, copied out of the data dir): the node comes
	// back, keeps its running pod, and runs a new one.
	cred, err := os.ReadFile(filepath.Join(agentDir, "node", "kubelet.kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	credFile := filepath.Join(t.TempDir(), "node.kubeconfig")
	if err := os.WriteFile(credFile, cred, 0o600); err != nil {
		t.Fatal(err)
	}
	a.stop(t)
	a = startAgent(t, "", append([]string{"--kubeconfig", credFile}, common...)...)
	t.Cleanup(removePods) // before this agent stops
	runOnSecondNode("joined-again", "with a kubeconfig")
	checkKubeletAccess()
	s.waitKubectl(t, k, "with a kubeconfig", "logs", "joined-again")
	if out := strings.TrimSpace(s.mustKubectl(t, k, "exec", "joined", "--", "hostname")); out != "joined" {
		t.Errorf("exec on the second node after its restart with --kubeconfig: %q\n%s", out, a.logs.String())
	}
	if restarts := s.mustKubectl(t, k, "get", "pod", "joined", "-o", "jsonpath={.status.containerStatuses[0].restartCount}"); restarts != "0" {
		t.Errorf("pod joined restarted %s times across the node's restart", restarts)
	}
}
