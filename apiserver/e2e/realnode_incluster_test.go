package e2e

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sqlkube/sqlkube/internal/testbin"
	"github.com/sqlkube/sqlkube/node/images"
)

// inClusterImage holds only the in-cluster client (testdata/incluster).
const inClusterImage = "sqlkube.local/incluster:e2e"

// writeInClusterImage builds testdata/incluster (static, no cgo) and
// writes an image archive of it.
func writeInClusterImage(t *testing.T) string {
	t.Helper()
	root, err := testbin.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "incluster")
	build := exec.Command("go", "build", "-o", bin, "./apiserver/e2e/testdata/incluster")
	build.Dir = root
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build testdata/incluster: %v\n%s", err, out)
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "incluster.tar")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img := images.Image{Name: inClusterImage, Files: []images.File{{Path: "/incluster", Data: data, Mode: 0o755}}, Cmd: []string{"/incluster"}}
	if err := images.WriteArchive(f, img); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestRealNode_InCluster: on a default `sqlkube server` (no address
// flag: it listens on every address and advertises the host's), a pod
// reaches the API through the kubernetes Service as client-go in a pod
// does, with its service account's token and the mounted ca.crt, the
// certificate verified under every name kube-apiserver's carries: the
// Service's IP from KUBERNETES_SERVICE_HOST/PORT, kubernetes,
// kubernetes.default, kubernetes.default.svc, its .cluster.local name,
// and the advertised address itself. The Service's endpoints name that
// address, never a loopback one. The server runs in a network namespace
// of the test's (kube-proxy's rules stay out of the host's), whose
// default route makes its address the host's.
func TestRealNode_InCluster(t *testing.T) {
	requireNodeHost(t)
	requireNetLab(t)
	k := kubectlPath(t)
	lab := newNetLab(t)
	netns, hostIP := lab.addNamespace(t)

	dataDir := filepath.Join(t.TempDir(), "data")
	t.Cleanup(func() { cleanUpNode(t, dataDir) })
	// Every flag at its default but the node's name, the cluster DNS's
	// upstream (the host's resolvers are out of the namespace's reach)
	// and what the harness sets (a free --secure-port, --data-dir, JSON
	// logs); --cluster-dns-port at its default keeps the cluster DNS on.
	s := startCommandNetns(t, netns, dataDir, "server", "--disable-node=false", "--node-name", "incluster",
		"--cluster-dns-port", "10053", "--cluster-dns-upstream", "127.0.0.1:9")
	t.Cleanup(func() { s.removeAllPods(t) })

	// The admin kubeconfig names the loopback address, which is the
	// namespace's own: the test reaches the server at its advertised
	// address instead, which the serving certificate must name too.
	if server := s.mustKubectl(t, k, "config", "view", "--minify", "-o", "jsonpath={.clusters[0].cluster.server}"); server != "https://127.0.0.1:"+s.port() {
		t.Fatalf("the admin kubeconfig names %q, want https://127.0.0.1:%s", server, s.port())
	}
	s.kubeconfig = filepath.Join(t.TempDir(), "kubeconfig")
	if b, err := os.ReadFile(filepath.Join(dataDir, "kubeconfig")); err != nil {
		t.Fatal(err)
	} else {
		writeFile(t, s.kubeconfig, string(b))
	}
	advertised := "https://" + net.JoinHostPort(hostIP, s.port())
	s.mustKubectl(t, k, "config", "set-cluster", "sqlkube", "--server", advertised)

	s.waitKubectl(t, k, "True", "get", "node", "incluster", "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
	s.sqlkube(t, "images", "import", writeInClusterImage(t))

	// The endpoints: the host's address, never a loopback one.
	for _, args := range [][]string{
		{"get", "endpoints", "kubernetes", "-o", "jsonpath={.subsets[*].addresses[*].ip}"},
		{"get", "endpointslice", "kubernetes", "-o", "jsonpath={.endpoints[*].addresses[*]}"},
	} {
		s.waitKubectl(t, k, hostIP, args...)
	}

	s.mustKubectl(t, k, "apply", "-f", podManifest(t, `
apiVersion: v1
kind: ServiceAccount
metadata: {name: lister}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: pod-lister}
rules:
- {apiGroups: [""], resources: [pods], verbs: [get, list]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: lister-lists-pods}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: pod-lister}
subjects:
- {kind: ServiceAccount, name: lister, namespace: default}
`))
	// In namespace default, as the short name kubernetes resolves there.
	urls := []string{"env", "https://kubernetes", "https://kubernetes.default", "https://kubernetes.default.svc",
		"https://kubernetes.default.svc.cluster.local", "https://kubernetes.default.svc.cluster.local:443", advertised}
	s.mustKubectl(t, k, "apply", "-f", podManifest(t, `
apiVersion: v1
kind: Pod
metadata: {name: client}
spec:
  serviceAccountName: lister
  restartPolicy: Never
  containers:
  - name: c
    image: `+inClusterImage+`
    command: [/incluster]
    args: ["`+strings.Join(urls, `", "`)+`"]
`))
	// The client tries each URL for up to a minute before it gives up.
	var phase string
	waitFor(t, 3*commandTimeout, "the client pod to finish", func() bool {
		phase, _ = s.kubectl(t, k, "get", "pod", "client", "-o", "jsonpath={.status.phase}")
		return phase == "Succeeded" || phase == "Failed"
	})
	logs, _ := s.kubectl(t, k, "logs", "client")
	if phase != "Succeeded" {
		status, _ := s.kubectl(t, k, "get", "pod", "client", "-o", "jsonpath={.status.containerStatuses}")
		t.Fatalf("the client pod %s; its output:\n%s\nits status: %s", phase, logs, status)
	}
	for _, u := range urls {
		if u == "env" {
			u = "https://10.96.0.1:443"
		}
		if !strings.Contains(logs, "OK "+u+": ") {
			t.Errorf("no pod list through %s; the client said:\n%s", u, logs)
		}
	}
	t.Logf("the client said:\n%s", logs)
}
